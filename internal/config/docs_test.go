package config

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the generated table in README.md and docs/configuration.md")

const (
	beginMark = "<!-- BEGIN GENERATED: internal/config table; `make docs` rewrites it -->\n"
	endMark   = "<!-- END GENERATED -->"
)

// TestDocsUpToDate fails when the table in a doc is not the one Markdown renders now.
// `make docs` (go generate ./internal/config) rewrites it.
func TestDocsUpToDate(t *testing.T) {
	for _, doc := range []string{"README.md", "docs/configuration.md"} {
		path := filepath.Join("..", "..", doc)
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		text := string(b)
		i, j := strings.Index(text, beginMark), strings.Index(text, endMark)
		if i < 0 || j < i {
			t.Errorf("%s has no generated table between %q and %q", doc, strings.TrimSpace(beginMark), endMark)
			continue
		}
		want := text[:i+len(beginMark)] + Markdown() + text[j:]
		if want == text {
			continue
		}
		if *update {
			if err := os.WriteFile(path, []byte(want), 0o644); err != nil { // #nosec G306 -- a doc
				t.Fatal(err)
			}
			continue
		}
		t.Errorf("the configuration table in %s is stale: run `make docs`", doc)
	}
}
