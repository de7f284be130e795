package agent

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// The slim worker binary links this package: it (and plan, its only whilly import) must
// not import pgx, River, chi, ghinstallation, go-github or anything outside the standard
// library. `go list -deps ./cmd/whilly-worker` checks the whole binary; this checks the
// package itself without running the go tool.
func TestImportsStayStandard(t *testing.T) {
	t.Parallel()
	for _, dir := range []string{".", filepath.Join("..", "plan")} {
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		for _, file := range files {
			if strings.HasSuffix(file, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(token.NewFileSet(), file, nil, parser.ImportsOnly)
			if err != nil {
				t.Fatal(err)
			}
			for _, imp := range f.Imports {
				path, _ := strconv.Unquote(imp.Path.Value)
				first, _, _ := strings.Cut(path, "/")
				if strings.Contains(first, ".") && path != "github.com/whilly-go/whilly/plan" {
					t.Errorf("%s imports %s: agent and plan may import only the standard library and plan", file, path)
				}
			}
		}
	}
}
