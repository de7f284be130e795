// Package deploy_test checks the deploy files of whilly without a cluster, a registry or
// a Docker daemon: the Helm chart is rendered with Helm's own engine and every object is
// decoded strictly into its Kubernetes (and KEDA) API type; the compose file is loaded
// with the compose-spec loader; the Dockerfiles are parsed with BuildKit's parser.
//
// It is a module of its own so that Helm, the Kubernetes API types, the compose loader
// and BuildKit stay out of whilly's go.mod. `make test` runs it.
package deploy_test

import (
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"testing"
)

// repoFile reads a file of the whilly repository (the parent of this module).
func repoFile(t *testing.T, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", rel))
	if err != nil {
		t.Fatalf("read %s: %v", rel, err)
	}
	return string(b)
}

var varName = regexp.MustCompile(`\bWHILLY_[A-Z0-9_]+\b`)

// knownVariables are the WHILLY_* names whilly reads: those of its configuration table
// (internal/config) and those the docs name besides (the box's task context, the tests'
// database), each also
// with the _FILE suffix of secrets.
func knownVariables(t *testing.T) map[string]bool {
	t.Helper()
	known := map[string]bool{}
	for _, src := range []string{"internal/config/vars.go", "cmd/whilly-worker/workercli/cli.go", "docs/configuration.md", "docs/sandbox.md", "docs/development.md"} {
		for _, n := range varName.FindAllString(repoFile(t, src), -1) {
			known[n] = true
		}
	}
	if len(known) < 30 {
		t.Fatalf("found only %d WHILLY_* names in the repository: the configuration table moved?", len(known))
	}
	return known
}

// unknownVariables lists the WHILLY_* names of names that whilly does not read.
func unknownVariables(t *testing.T, names []string) []string {
	t.Helper()
	known := knownVariables(t)
	var bad []string
	for _, n := range names {
		if varName.MatchString(n) && !known[n] {
			bad = append(bad, n)
		}
	}
	sort.Strings(bad)
	return bad
}

// readFile reads a file of this module.
func readFile(t *testing.T, rel string) string {
	t.Helper()
	b, err := os.ReadFile(rel)
	if err != nil {
		t.Fatalf("read %s: %v", rel, err)
	}
	return string(b)
}
