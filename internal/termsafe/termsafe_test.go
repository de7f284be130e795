package termsafe_test

import (
	"testing"

	"github.com/whilly-go/whilly/internal/termsafe"
)

func TestText(t *testing.T) {
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
		if got := termsafe.Text(in); got != want {
			t.Errorf("Text(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestLine(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"  two\nlines\tand  spaces ": "two lines and spaces",
		"a\x1b[2Jb\r\nc":             "ab c",
		"":                           "",
	} {
		if got := termsafe.Line(in); got != want {
			t.Errorf("Line(%q) = %q, want %q", in, got, want)
		}
	}
}
