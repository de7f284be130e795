package intake

import (
	"regexp"
	"strings"
	"unicode"
)

// Kinds of hidden content StripHidden removes, as the status comment names them.
const (
	HiddenComments  = "HTML comments"
	HiddenLinkRefs  = "link-reference comments"
	HiddenChars     = "invisible characters"
	HiddenImageText = "image alt text and titles"
	HiddenHTML      = "script and style elements"
)

var (
	htmlCommentRe = regexp.MustCompile(`(?s)<!--.*?-->|<!--.*$`)
	hiddenHTMLRe  = []*regexp.Regexp{
		regexp.MustCompile(`(?is)<script\b.*?(?:</script\s*>|$)`),
		regexp.MustCompile(`(?is)<style\b.*?(?:</style\s*>|$)`),
	}
	// linkDefRe is the first line of a link reference definition, `[label]: dest "title"`,
	// which Markdown does not render: `[//]: # (…)` is the well-known way to hide a
	// comment, but any label and title hide text as well. Footnotes (`[^1]: …`) render.
	linkDefRe     = regexp.MustCompile(`^ {0,3}\[((?:[^\]\\]|\\.)+)\]:(.*)$`)
	linkLabelOpen = regexp.MustCompile(`^ {0,3}\[(?:[^\]\\]|\\.)*$`)
	// imageAltRe is the alt text of a Markdown image, `![alt]`, with one level of nested
	// brackets; imageTitleRe the title of an inline image, `![](dest "title")`.
	imageAltRe   = regexp.MustCompile(`!\[(?:[^\[\]]|\[[^\[\]]*\])*\]`)
	imageTitleRe = regexp.MustCompile(`!\[\]\(\s*(<[^>\n]*>|[^\s)]*)\s+(?:"[^"]*"|'[^']*'|\([^)]*\))\s*\)`)
	// htmlTag and hiddenAttr find the alt and title attributes of HTML tags (<img alt=…>):
	// shown only when an image fails or on hover.
	htmlTagRe    = regexp.MustCompile(`<[A-Za-z][^<>]*>`)
	hiddenAttrRe = regexp.MustCompile(`(?i)\s(?:alt|title)\s*=\s*(?:"[^"]*"|'[^']*'|[^\s>]+)`)
)

// StripHidden removes from issue text (Markdown as GitHub renders it) what the maintainer
// who labels the issue cannot see on the page, and returns the text and the kinds removed,
// in a fixed order. It removes more rather than less: an HTML comment or a link reference
// definition inside a code block is removed too.
//
// What is removed: HTML comments (also one never closed), link reference definitions
// (`[//]: # (…)` and any other, with titles spanning lines), invisible characters
// (zero-width, bidi controls, Unicode tags, variation selectors, soft hyphens, fillers,
// control characters), the alt text and titles of images and HTML tags, and <script> and
// <style> elements (GitHub drops them with their content).
//
// What stays: <details> blocks. Their summary shows on the page and one click shows the
// rest, as the maintainer reviewing the issue is expected to; removing them would also
// drop the long logs and stack traces issues put there.
func StripHidden(s string) (string, []string) {
	var kinds []string
	note := func(kind string, changed bool) {
		if changed {
			kinds = append(kinds, kind)
		}
	}
	s = strings.ReplaceAll(strings.ReplaceAll(s, "\r\n", "\n"), "\r", "\n")
	out := htmlCommentRe.ReplaceAllString(s, "")
	note(HiddenComments, out != s)

	before := out
	for _, re := range hiddenHTMLRe {
		out = re.ReplaceAllString(out, "")
	}
	note(HiddenHTML, out != before)

	before = out
	out = stripLinkDefs(out)
	note(HiddenLinkRefs, out != before)

	before = out
	out = visibleRunes(out)
	note(HiddenChars, out != before)

	before = out
	out = imageAltRe.ReplaceAllString(out, "![]")
	out = imageTitleRe.ReplaceAllString(out, "![]($1)")
	out = htmlTagRe.ReplaceAllStringFunc(out, func(tag string) string { return hiddenAttrRe.ReplaceAllString(tag, "") })
	note(HiddenImageText, out != before)
	return out, kinds
}

// stripLinkDefs drops link reference definitions, line by line: the definition's line,
// its destination's line when the label stands alone, and the lines of a title left
// open, up to the line that closes it or a blank line. A label may span lines.
func stripLinkDefs(s string) string {
	lines := strings.Split(s, "\n")
	out := lines[:0:0]
	for i := 0; i < len(lines); i++ {
		first := i
		if linkLabelOpen.MatchString(lines[i]) {
			// A label continued on the next lines (no blank line inside): read it whole.
			joined := lines[i]
			for j := i + 1; j < len(lines) && j < i+10 && strings.TrimSpace(lines[j]) != ""; j++ {
				joined += " " + lines[j]
				if linkDefRe.MatchString(joined) {
					lines[j], i = joined, j
					break
				}
			}
		}
		m := linkDefRe.FindStringSubmatch(lines[i])
		if m == nil || strings.HasPrefix(m[1], "^") {
			out = append(out, lines[first:i+1]...)
			continue
		}
		rest := strings.TrimSpace(m[2])
		if rest == "" && i+1 < len(lines) {
			i++ // the destination stands on the next line
			rest = strings.TrimSpace(lines[i])
		}
		if closer, open := openTitle(rest); open {
			for i+1 < len(lines) && strings.TrimSpace(lines[i+1]) != "" {
				i++
				if strings.ContainsRune(lines[i], closer) {
					break
				}
			}
		}
	}
	return strings.Join(out, "\n")
}

// openTitle reports whether a definition's destination and title leave a title open,
// and the character that would close it.
func openTitle(rest string) (rune, bool) {
	switch {
	case strings.Count(rest, `"`)%2 == 1:
		return '"', true
	case strings.Count(rest, `'`)%2 == 1:
		return '\'', true
	case strings.Count(rest, "(") > strings.Count(rest, ")"):
		return ')', true
	}
	return 0, false
}

// visibleRunes drops characters that render as nothing: format characters (zero-width
// spaces and joiners, bidi controls, the BOM, soft hyphens, Unicode tags), variation
// selectors, Hangul fillers and the blank Braille pattern, and control characters but
// tab and newline. One emoji presentation selector (U+FE0E, U+FE0F) right after a
// visible non-ASCII character stays: it is how ❤️ and ⚠️ are written.
func visibleRunes(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	prev := rune(0)
	for _, r := range s {
		keep := true
		switch {
		case r == '\n' || r == '\t':
		case r == 0xFE0E || r == 0xFE0F:
			keep = prev > unicode.MaxASCII && !isSelector(prev)
		case unicode.IsControl(r), unicode.Is(unicode.Cf, r), isSelector(r):
			keep = false
		case r == 0x115F, r == 0x1160, r == 0x3164, r == 0xFFA0, r == 0x2800, r == 0x034F:
			keep = false // Hangul fillers, blank Braille, combining grapheme joiner
		}
		if keep {
			b.WriteRune(r)
			prev = r
		}
	}
	return b.String()
}

func isSelector(r rune) bool {
	return (r >= 0xFE00 && r <= 0xFE0F) || (r >= 0xE0100 && r <= 0xE01EF)
}

// visibleTitle is StripHidden for an issue title, which GitHub shows as plain text:
// only invisible characters can hide anything in it.
func visibleTitle(s string) (string, bool) {
	out := visibleRunes(s)
	return out, out != s
}
