package config

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the generated table in docs/configuration.md")

const (
	beginMark = "<!-- BEGIN GENERATED: internal/config table; `make docs` rewrites it -->\n"
	endMark   = "<!-- END GENERATED -->"
)

// TestDocsUpToDate fails when the table in docs/configuration.md is not the one Markdown
// renders now. `make docs` (go generate ./internal/config) rewrites it. The README links to
// that page and holds no copy: a second copy would make it too long to read.
func TestDocsUpToDate(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(readme), beginMark) {
		t.Errorf("README.md holds a copy of the configuration table: link to docs/configuration.md instead")
	}
	if !strings.Contains(string(readme), "docs/configuration.md") {
		t.Errorf("README.md does not link to docs/configuration.md, where every variable is")
	}
	const doc = "docs/configuration.md"
	path := filepath.Join("..", "..", doc)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	i, j := strings.Index(text, beginMark), strings.Index(text, endMark)
	if i < 0 || j < i {
		t.Fatalf("%s has no generated table between %q and %q", doc, strings.TrimSpace(beginMark), endMark)
	}
	want := text[:i+len(beginMark)] + Markdown() + text[j:]
	if want == text {
		return
	}
	if *update {
		if err := os.WriteFile(path, []byte(want), 0o644); err != nil { // #nosec G306 -- a doc
			t.Fatal(err)
		}
		return
	}
	t.Errorf("the configuration table in %s is stale: run `make docs`", doc)
}
