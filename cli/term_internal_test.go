package cli

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func TestTermText(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"plain\ttext\nnext":                       "plain\ttext\nnext",
		"a\x1b[31mred\x1b[0m b":                   "ared b",
		"x\x1b]0;title\x07y":                      "xy",
		"x\x1b]52;c;ZXZpbA==\x1b\\y":              "xy",
		"x\x1bPq#0;2;0;0;0\x1b\\y":                "xy",
		"x\u009b2Jy\u009d0;t\u009cz":              "xyz",
		"x\x1b7\x1b8y":                            "xy",
		"x\r\b\x00\x7fy":                          "xy",
		"\u202egnirts\u202c \u2066iso\u2069":      "gnirts iso",
		"cut off \x1b]0;title never ended":        "cut off ",
		"invalid \xff utf-8":                      "invalid \uFFFD utf-8",
		"emoji ❤️ and ünïcödé and 日本語 stay as is": "emoji ❤️ and ünïcödé and 日本語 stay as is",
	} {
		if got := termText(in); got != want {
			t.Errorf("termText(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestEventsTailStripsEscapes: an event payload (JSON text, where C1 controls pass
// unescaped) prints without them.
func TestEventsTailStripsEscapes(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	a := &app{io: IO{Out: &out}}
	payload, _ := json.Marshal(map[string]string{"reason": "boom\u009b2J\u009d0;pwned\u009c\u202etxet"})
	if err := a.printEvent(eventLine{ID: 1, Type: "task.failed", PlanID: "p", TaskID: "T1", Payload: payload, CreatedAt: time.Now()}, false); err != nil {
		t.Fatal(err)
	}
	if s := out.String(); strings.ContainsAny(s, "\u009b\u009d\u009c\u202e") || !strings.Contains(s, "boom") {
		t.Errorf("printed %q", s)
	}
}
