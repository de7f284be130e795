package cli_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/whilly-go/whilly/testkit"
)

// TestShowBoundsTheTree: a long chain does not print a staircase whose width grows with
// it (a 10k chain printed 151 MB), and a task with very many dependents lists 100 of them.
func TestShowBoundsTheTree(t *testing.T) {
	t.Parallel()
	dsn := testkit.DSN(t)
	task := func(id, dep string) string {
		deps := "[]"
		if dep != "" {
			deps = `["` + dep + `"]`
		}
		return fmt.Sprintf(`{"id": %q, "priority": "low", "description": "Task %s of a long chain, with tests", "dependencies": %s}`, id, id, deps)
	}
	var tasks []string
	for i := range 500 {
		dep := ""
		if i > 0 {
			dep = fmt.Sprintf("C%03d", i-1)
		}
		tasks = append(tasks, task(fmt.Sprintf("C%03d", i), dep))
	}
	for i := range 150 {
		tasks = append(tasks, task(fmt.Sprintf("W%03d", i), "C000"))
	}
	doc := `{"plan_id": "big", "project": "Big", "tasks": [` + strings.Join(tasks, ",\n") + `]}`
	if code, _, stderr := run(t, dsn, "", "plan", "import", writeFile(t, "plan.json", doc)); code != 0 {
		t.Fatalf("import: exit %d: %s", code, stderr)
	}
	code, out, stderr := run(t, dsn, "", "plan", "show", "big")
	if code != 0 {
		t.Fatalf("show: exit %d: %s", code, stderr)
	}
	longest := 0
	for line := range strings.Lines(out) {
		longest = max(longest, len([]rune(line)))
	}
	if longest > 250 {
		t.Errorf("the longest line has %d characters: the indentation grows with the chain", longest)
	}
	if !strings.Contains(out, "C499") {
		t.Error("the end of the chain is not shown")
	}
	if !strings.Contains(out, "… and 51 more tasks under C000") {
		t.Errorf("the 151 dependents of C000 are not bounded:\n%s", out[:min(len(out), 2000)])
	}
}
