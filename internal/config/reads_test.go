package config

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestReadsGoThroughTheTable fails on a variable of the table read anywhere but through
// this package: os.Getenv("WHILLY_…"), a getenv func called with such a name, or
// os.LookupEnv. testkit's WHILLY_TEST_DATABASE_URL is a test setting, not the
// product's.
func TestReadsGoThroughTheTable(t *testing.T) {
	t.Parallel()
	root := filepath.Join("..", "..")
	fset := token.NewFileSet()
	checked := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case "testdata", "node_modules", ".git", "deploy":
				return filepath.SkipDir
			}
			if rel, _ := filepath.Rel(root, path); rel == filepath.Join("internal", "config") || rel == "testkit" {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		checked++
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok || len(call.Args) == 0 || !envReader(call.Fun) {
				return true
			}
			lit, ok := call.Args[0].(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				return true
			}
			name, _ := strconv.Unquote(lit.Value)
			if strings.HasPrefix(name, "WHILLY_") || name == "CLAUDE_BIN" || name == "CODEX_BIN" {
				t.Errorf("%s: reads %s directly; read it through internal/config", fset.Position(call.Pos()), name)
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 50 {
		t.Fatalf("checked only %d files: is the walk rooted at the repository?", checked)
	}
}

func envReader(fun ast.Expr) bool {
	switch f := fun.(type) {
	case *ast.SelectorExpr:
		return f.Sel.Name == "Getenv" || f.Sel.Name == "LookupEnv"
	case *ast.Ident:
		return f.Name == "getenv" || f.Name == "env" || f.Name == "Getenv"
	}
	return false
}
