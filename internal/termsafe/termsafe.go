// Package termsafe makes text that others wrote — plan names, task descriptions, failure
// reasons, agent output, event payloads — safe to print on a terminal. The CLI's commands
// and the terminal dashboard (cli/tui) print such text only through it. It imports
// the standard library only.
package termsafe

import (
	"regexp"
	"strings"
)

// escapeRe matches terminal escape sequences: CSI (ESC [ … final byte, and its one-byte
// C1 form), OSC (ESC ] … ended by BEL or ST: window titles, hyperlinks, clipboard
// writes), DCS, SOS, PM and APC strings, and any other ESC-introduced pair.
var escapeRe = regexp.MustCompile(`\x1b\[[0-?]*[ -/]*[@-~]?|\x{9b}[0-?]*[ -/]*[@-~]?` +
	`|(?:\x1b[\]PX^_]|[\x{9d}\x{90}\x{98}\x{9e}\x{9f}])[^\x07\x1b\x{9c}]*(?:\x07|\x1b\\|\x{9c})?` +
	`|\x1b[ -~]?`)

// Text removes escape sequences whole, then every other control character but newline
// and tab, and bidi controls that reorder what follows them. Without it, a task
// description could move the cursor, rewrite the lines above, retitle the window or
// write the clipboard of whoever prints it.
func Text(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	s = escapeRe.ReplaceAllString(s, "")
	return strings.Map(func(r rune) rune {
		switch {
		case r == '\n' || r == '\t':
			return r
		case r < 0x20, r == 0x7f, r >= 0x80 && r < 0xa0:
			return -1
		case r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069, r == 0x200e, r == 0x200f, r == 0x061c:
			return -1
		}
		return r
	}, s)
}

// Line is Text on one line: newlines and tabs become spaces, runs of spaces one.
func Line(s string) string {
	return strings.Join(strings.Fields(Text(s)), " ")
}
