package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// readmeSections are the README's sections, in the order a new user needs them.
var readmeSections = []string{
	"## Install",
	"## Try it on GitHub",
	"## How agents get their credentials",
	"## Quick start on one machine",
	"## Documentation",
}

// maxReadmeLines bounds the README: what does not fit belongs in docs/.
const maxReadmeLines = 600

// TestReadmeIsForUsers keeps the README short and in the order a new user reads it, with
// no benchmark figures (they are docs/performance.md's).
func TestReadmeIsForUsers(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	if n := strings.Count(text, "\n"); n > maxReadmeLines {
		t.Errorf("README.md has %d lines, more than %d: move the details to docs/", n, maxReadmeLines)
	}
	at := -1
	for _, s := range readmeSections {
		i := strings.Index(text, "\n"+s+"\n")
		switch {
		case i < 0:
			t.Errorf("README.md has no section %q", s)
		case i < at:
			t.Errorf("README.md's section %q comes before the one it should follow", s)
		default:
			at = i
		}
	}
	for _, figure := range []string{"tasks/s", "claims/s", "ratio_raw", "sandbox_added_p50_ms"} {
		if strings.Contains(text, figure) {
			t.Errorf("README.md holds a benchmark figure (%q): it belongs in docs/performance.md", figure)
		}
	}
}

// datedRun matches what dates a run: a day of a month ("December 2", "3 December") or a
// clock time.
var datedRun = regexp.MustCompile(`\b(?:` + months + `)\s+\d|\d\s+(?:` + months + `)\b|\b\d{1,2}:\d{2}(?::\d{2})?\s*UTC\b`)

const months = "January|February|March|April|May|June|July|August|September|October|November|December"

// TestPerformanceHasCurrentFiguresOnly keeps docs/performance.md a page of current
// figures and the commands that made them, not a log of dated runs.
func TestPerformanceHasCurrentFiguresOnly(t *testing.T) {
	b, err := os.ReadFile("performance.md")
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	if m := datedRun.FindString(text); m != "" {
		t.Errorf("docs/performance.md dates a run (%q): give the current figure and the command that made it", m)
	}
	if !strings.Contains(text, "| benchmark | what it measures | command | figure | target |") {
		t.Errorf("docs/performance.md has no table of current figures with their commands")
	}
}
