package server

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

const module = "github.com/whilly-go/whilly/"

// TestOneBuildOfTheControlPlane keeps one place that builds the control plane: this
// package. It reads the repository's Go source (go/parser) and fails on any of these
// outside server/:
//
//   - a hook assembly: a store built with hooks (queue.NewStore with a queue.Config
//     literal that sets Hooks, or an assignment to a .Hooks field), app.Hooks, a
//     GitHubConfig's Hooks method, or triz.Enqueue (the TRIZ hook);
//   - a River client that works jobs: queue.NewRiver, or river.NewClient with a
//     river.Config that sets Workers (or is not a literal).
//
// Allowed besides: the packages that implement a part may build it in their own tests
// (stores with hooks and GitHubConfig's hooks in the tests of queue, app, triz and
// intake, app.Hooks in app's, triz.Enqueue in triz's; working River clients in
// queue's); queue builds its River clients itself (NewRiver, NewInserter); intake's
// GitHubConfig.Hooks forwards to app.Hooks. Insert-only River clients (queue.NewInserter,
// or river.NewClient without Workers) and stores without hooks (queue.NewStore(pool, log,
// queue.Config{…}) without Hooks) are allowed in any test. Any other package's tests get
// a control plane from New, overriding fields of its Config.
func TestOneBuildOfTheControlPlane(t *testing.T) {
	t.Parallel()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	// Files allowed a finding of their own, and why.
	allowed := map[string]string{
		// The River baseline of `whilly bench claims`: River itself, measured against the
		// control plane; it runs no whilly job.
		"bench/river.go": "river",
	}
	hookTests := map[string]bool{"queue": true, "app": true, "triz": true, "intake": true}
	var found []string
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if name := d.Name(); rel != "." && (strings.HasPrefix(name, ".") || name == "testdata" || name == "vendor" || name == "server") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(rel, ".go") {
			return nil
		}
		dir := filepath.ToSlash(filepath.Dir(rel))
		test := strings.HasSuffix(rel, "_test.go")
		for _, f := range findings(t, path) {
			switch {
			case allowed[rel] == f.kind:
			case f.what == "triz.Enqueue" && test && dir == "triz":
			case f.what == "app.Hooks" && (test && dir == "app" || rel == "intake/github.go"):
			case f.kind == "hooks" && f.what != "triz.Enqueue" && f.what != "app.Hooks" && test && hookTests[dir]:
			case f.kind == "river" && dir == "queue":
			default:
				found = append(found, rel+":"+strconv.Itoa(f.line)+": "+f.what)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range found {
		t.Errorf("%s outside server: build the control plane with server.New (see this test's comment)", f)
	}
}

// finding is a call or an assignment that builds a part of the control plane.
type finding struct {
	kind string // "hooks" or "river"
	what string
	line int
}

// findings are the hook assemblies and working River clients in the Go file at path.
func findings(t *testing.T, path string) []finding {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	imports := map[string]string{} // local name → import path
	for _, im := range f.Imports {
		p, _ := strconv.Unquote(im.Path.Value)
		name := p[strings.LastIndex(p, "/")+1:]
		if im.Name != nil {
			name = im.Name.Name
		}
		imports[name] = p
	}
	var out []finding
	add := func(n ast.Node, kind, what string) {
		out = append(out, finding{kind: kind, what: what, line: fset.Position(n.Pos()).Line})
	}
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.AssignStmt:
			for _, l := range n.Lhs {
				if sel, ok := l.(*ast.SelectorExpr); ok && sel.Sel.Name == "Hooks" {
					add(n, "hooks", "an assignment to .Hooks")
				}
			}
		case *ast.CallExpr:
			sel, ok := n.Fun.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			pkg := ""
			if id, ok := sel.X.(*ast.Ident); ok {
				pkg = imports[id.Name]
			}
			switch {
			case pkg == module+"queue" && sel.Sel.Name == "NewStore" && len(n.Args) == 3 && setsField(n.Args[2], "Hooks"):
				add(n, "hooks", "queue.NewStore with Hooks")
			case pkg == module+"app" && sel.Sel.Name == "Hooks":
				add(n, "hooks", "app.Hooks")
			case pkg == module+"triz" && sel.Sel.Name == "Enqueue":
				add(n, "hooks", "triz.Enqueue")
			case pkg == "" && sel.Sel.Name == "Hooks" && len(n.Args) == 1:
				add(n, "hooks", "a GitHubConfig's Hooks")
			case pkg == module+"queue" && sel.Sel.Name == "NewRiver":
				add(n, "river", "queue.NewRiver")
			case pkg == "github.com/riverqueue/river" && sel.Sel.Name == "NewClient" && len(n.Args) == 2 && !insertOnly(n.Args[1]):
				add(n, "river", "river.NewClient that works jobs")
			}
		}
		return true
	})
	return out
}

// setsField reports whether e is a composite literal (or its address) that sets field.
func setsField(e ast.Expr, field string) bool {
	if u, ok := e.(*ast.UnaryExpr); ok {
		e = u.X
	}
	lit, ok := e.(*ast.CompositeLit)
	if !ok {
		return false
	}
	for _, el := range lit.Elts {
		if kv, ok := el.(*ast.KeyValueExpr); ok {
			if id, ok := kv.Key.(*ast.Ident); ok && id.Name == field {
				return true
			}
		}
	}
	return false
}

// insertOnly reports whether e is a river.Config literal (or its address) without
// Workers: a client that inserts jobs and works none.
func insertOnly(e ast.Expr) bool {
	if u, ok := e.(*ast.UnaryExpr); ok {
		e = u.X
	}
	_, lit := e.(*ast.CompositeLit)
	return lit && !setsField(e, "Workers")
}
