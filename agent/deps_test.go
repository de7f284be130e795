package agent

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// The slim worker binary links this package: it (and plan and sandbox, its only whilly
// imports, and internal/config, which sandbox reads its settings through and which
// imports only the standard library, plan and internal/prices, the token price table) must not import pgx, River, chi, ghinstallation, go-github or anything outside
// the standard library (sandbox may use golang.org/x/sys). `go list -deps ./cmd/whilly-worker` checks the whole binary; this checks the
// package itself without running the go tool.
func TestImportsStayStandard(t *testing.T) {
	t.Parallel()
	allowed := map[string]bool{"github.com/whilly-go/whilly/plan": true, "github.com/whilly-go/whilly/sandbox": true,
		"github.com/whilly-go/whilly/internal/config": true, "github.com/whilly-go/whilly/internal/prices": true, "golang.org/x/sys/unix": true}
	for _, dir := range []string{".", filepath.Join("..", "plan"), filepath.Join("..", "sandbox"), filepath.Join("..", "internal", "config"), filepath.Join("..", "internal", "prices")} {
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
				if strings.Contains(first, ".") && !allowed[path] {
					t.Errorf("%s imports %s: agent, internal/prices, plan, sandbox and internal/config may import only the standard library, plan, sandbox, internal/config, internal/prices and x/sys", file, path)
				}
			}
		}
	}
}
