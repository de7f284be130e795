package plan_test

import (
	"os/exec"
	"strings"
	"testing"
)

// The domain is pure: `go list -deps ./plan` lists only the standard library (and plan).
func TestDependsOnlyOnTheStandardLibrary(t *testing.T) {
	t.Parallel()
	out, err := exec.CommandContext(t.Context(), "go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	if got := strings.TrimSpace(string(out)); got != "github.com/whilly-go/whilly/plan" {
		t.Fatalf("plan depends on more than the standard library:\n%s", got)
	}
}
