package docs

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestImportsRunOneWay keeps the layout architecture.md describes: between the module's
// top-level directories (internal/ counted as one: the lowest layer, cmd/ as one: the
// binaries) the imports of the product code form no cycle, so no arrow runs back up.
// Test files may import from above (external test packages, testkit); the product code
// never imports testkit, which imports package testing.
func TestImportsRunOneWay(t *testing.T) {
	t.Parallel()
	mod, graph := importGraph(t)
	edges := map[string]map[string]string{} // directory → directory → one package import that makes the arrow
	for pkg, imports := range graph {
		from := topDir(mod, pkg)
		for _, imp := range imports {
			if imp != mod && !strings.HasPrefix(imp, mod+"/") {
				continue
			}
			if topDir(mod, imp) == "testkit" && topDir(mod, pkg) != "testkit" {
				t.Errorf("%s imports %s: only tests may use the test support", pkg, imp)
			}
			to := topDir(mod, imp)
			if to == from {
				continue
			}
			if edges[from] == nil {
				edges[from] = map[string]string{}
			}
			if _, ok := edges[from][to]; !ok || pkg+" → "+imp < edges[from][to] {
				edges[from][to] = pkg + " → " + imp
			}
		}
	}
	if cycle := findCycle(edges); cycle != nil {
		var why []string
		for i := range len(cycle) - 1 {
			why = append(why, edges[cycle[i]][cycle[i+1]])
		}
		t.Errorf("the directories' imports run in a circle, %s:\n  %s\nmove the lower package down or the higher one up (docs/architecture.md, the layout)",
			strings.Join(cycle, " → "), strings.Join(why, "\n  "))
	}
}

// importGraph lists the module's packages with the imports of their non-test files.
func importGraph(t *testing.T) (module string, graph map[string][]string) {
	t.Helper()
	out, err := exec.CommandContext(t.Context(), "go", "list", "-m").Output()
	if err != nil {
		t.Fatalf("go list -m: %v", err)
	}
	module = strings.TrimSpace(string(out))
	cmd := exec.CommandContext(t.Context(), "go", "list", "-e", "-f", "{{.ImportPath}}{{range .Imports}} {{.}}{{end}}", "./...")
	cmd.Dir = ".."
	out, err = cmd.Output()
	if err != nil {
		t.Fatalf("go list ./...: %v", err)
	}
	graph = map[string][]string{}
	for line := range strings.Lines(string(out)) {
		f := strings.Fields(line)
		if len(f) > 0 {
			graph[f[0]] = f[1:]
		}
	}
	if len(graph) < 10 {
		t.Fatalf("go list ./... listed %d packages: %s", len(graph), out)
	}
	return module, graph
}

// topDir is the node of pkg in the directory graph: its top-level directory, "." for
// the module's root.
func topDir(module, pkg string) string {
	rel, ok := strings.CutPrefix(pkg, module+"/")
	if !ok {
		return "."
	}
	dir, _, _ := strings.Cut(rel, "/")
	return dir
}

// findCycle returns a cycle of the graph as its nodes, the first repeated at the end, or
// nil. Nodes are visited in sorted order, so the answer does not change between runs.
func findCycle(edges map[string]map[string]string) []string {
	const (
		unseen = iota
		open
		done
	)
	state := map[string]int{}
	var path []string
	var visit func(n string) []string
	visit = func(n string) []string {
		state[n] = open
		path = append(path, n)
		for _, m := range sortedKeys(edges[n]) {
			switch state[m] {
			case open:
				i := slices.Index(path, m)
				return append(slices.Clone(path[i:]), m)
			case unseen:
				if c := visit(m); c != nil {
					return c
				}
			}
		}
		path = path[:len(path)-1]
		state[n] = done
		return nil
	}
	for _, n := range sortedKeys(edges) {
		if state[n] == unseen {
			if c := visit(n); c != nil {
				return c
			}
		}
	}
	return nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// The cycle finder itself: a test that cannot fail checks nothing.
func TestFindCycle(t *testing.T) {
	t.Parallel()
	g := map[string]map[string]string{
		"cli":      {"queue": "", "internal": ""},
		"queue":    {"internal": "", "plan": ""},
		"internal": {"plan": ""},
	}
	if c := findCycle(g); c != nil {
		t.Fatalf("found the cycle %v in a graph without one", c)
	}
	g["internal"]["bench"] = ""
	g["bench"] = map[string]string{"queue": ""}
	c := findCycle(g)
	if want := []string{"bench", "queue", "internal", "bench"}; !slices.Equal(c, want) {
		t.Fatalf("findCycle = %v, want %v", c, want)
	}
}

// TestLibrariesTakeValues: only the composition roots read the environment (cli, the
// binaries under cmd, server's FromEnv for the control plane, worker/workerenv, which
// both of them use for the worker side, and internal/config, the table they read it
// through); the libraries take values. Test
// support reads its own settings. A child process's environment built from the parent's
// (os.Environ through an allow-list) is data, not configuration, and not checked here.
func TestLibrariesTakeValues(t *testing.T) {
	t.Parallel()
	roots := []string{"cli", "cmd", "server", "worker/workerenv", "internal/config", "testkit", "e2e", "examples", "testdata", "deploy", ".git"}
	// Where the environment is the interface, not the configuration.
	except := map[string]string{
		"internal/pglocal/binaries.go": "PATH: where the operating system's programs are",
		"internal/pglocal/pglocal.go":  "XDG_DATA_HOME: where the XDG convention puts user data",
		"sandbox/config.go":            "SettingsFromEnv reads through the getenv its callers hand it",
	}
	fset := token.NewFileSet()
	checked := 0
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel("..", path)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if slices.Contains(roots, rel) || d.Name() == "node_modules" {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(rel, ".go") || strings.HasSuffix(rel, "_test.go") || except[rel] != "" {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		checked++
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if pkg, ok := sel.X.(*ast.Ident); ok {
				switch pkg.Name + "." + sel.Sel.Name {
				case "os.Getenv", "os.LookupEnv", "config.New":
					t.Errorf("%s: the library reads the environment (%s.%s); read it in the composition root (cli, cmd/…) and pass the value",
						fset.Position(call.Pos()), pkg.Name, sel.Sel.Name)
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 100 {
		t.Fatalf("checked %d files: the walk missed the repository", checked)
	}
}
