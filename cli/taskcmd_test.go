package cli_test

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/whilly-go/whilly/testkit"
)

// TestTaskCommands: add, edit, rm and reset one task, each checked like an import and
// each refusing what would break the plan.
func TestTaskCommands(t *testing.T) {
	t.Parallel()
	dsn := testkit.DSN(t)
	sim := []string{"run", "--plan", "cli", "--agent", "sim", "--sim-delay", "1ms", "--sim-cost", "0"}
	if code, _, stderr := run(t, dsn, "", "plan", "import", writeFile(t, "plan.json", validPlan)); code != 0 {
		t.Fatalf("import: exit %d: %s", code, stderr)
	}
	if code, out, stderr := run(t, dsn, "", sim...); code != 0 {
		t.Fatalf("run: exit %d, %s %s", code, out, stderr)
	}
	task := `{"id": "C", "priority": "low", "description": "Write the third part of the feature with tests",
	  "dependencies": ["B"], "key_files": ["c.go"], "acceptance_criteria": ["it works"], "test_steps": ["go test ./..."]}`
	code, out, stderr := run(t, dsn, "", "plan", "task", "add", "cli", writeFile(t, "c.json", task))
	if code != 0 || !strings.Contains(out, "task C added; the plan is ACTIVE again") {
		t.Fatalf("task add: exit %d, %q %q", code, out, stderr)
	}
	if code, _, stderr := run(t, dsn, "", "plan", "task", "add", "cli", writeFile(t, "c.json", task)); code != 1 || !strings.Contains(stderr, "already has a task C") {
		t.Fatalf("task add twice: exit %d, %q", code, stderr)
	}
	bad := strings.Replace(task, `["B"]`, `["NOPE"]`, 1)
	bad = strings.Replace(bad, `"id": "C"`, `"id": "D"`, 1)
	if code, _, stderr := run(t, dsn, "", "plan", "task", "add", "cli", writeFile(t, "d.json", bad)); code != 1 || !strings.Contains(stderr, "NOPE") {
		t.Fatalf("task add with an unknown dependency: exit %d, %q", code, stderr)
	}
	edited := strings.Replace(task, "third part", "third and last part", 1)
	code, out, stderr = run(t, dsn, "", "plan", "task", "edit", "cli", "C", writeFile(t, "c2.json", edited))
	if code != 0 || !strings.Contains(out, "task C changed (PENDING, gate ALLOW)") {
		t.Fatalf("task edit: exit %d, %q %q", code, out, stderr)
	}
	doneEdit := `{"id": "A", "priority": "high", "description": "Something else entirely, for the first part",
	  "key_files": ["a.go"], "acceptance_criteria": ["it works"], "test_steps": ["go test ./..."]}`
	if code, _, stderr := run(t, dsn, "", "plan", "task", "edit", "cli", "A", writeFile(t, "a.json", doneEdit)); code != 1 || !strings.Contains(stderr, "A is DONE") {
		t.Fatalf("edit of a DONE task: exit %d, %q", code, stderr)
	}
	if code, _, stderr := run(t, dsn, "", "plan", "task", "rm", "cli", "B"); code != 1 || !strings.Contains(stderr, "C depends on it.") {
		t.Fatalf("rm of a task C depends on: exit %d, %q", code, stderr)
	}
	if code, out, _ := run(t, dsn, "", "plan", "task", "rm", "cli", "C"); code != 0 || !strings.Contains(out, "task C removed") {
		t.Fatalf("rm C: exit %d, %q", code, out)
	}
	// The plan is DONE again without C; reset A with its dependents.
	code, out, _ = run(t, dsn, "", "plan", "task", "reset", "cli", "A", "--cascade")
	if code != 0 || !strings.Contains(out, "2 tasks back to PENDING: A, B") {
		t.Fatalf("reset --cascade: exit %d, %q", code, out)
	}
	if code, out, stderr := run(t, dsn, "", sim...); code != 0 || !strings.Contains(out, "is DONE") {
		t.Fatalf("run after the reset: exit %d, %q %q", code, out, stderr)
	}
	if code, out, _ := run(t, dsn, "", "plan", "task", "reset", "cli", "B"); code != 0 || !strings.Contains(out, "1 task back to PENDING: B") {
		t.Fatalf("reset of one task: exit %d, %q", code, out)
	}
	pool, err := pgxpool.New(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	// Each change names who made it: the local user.
	for _, typ := range []string{"task.created", "task.updated", "task.removed", "RESET", "plan.reopened"} {
		var n int
		if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM events WHERE plan_id = 'cli' AND type = $1
			AND payload->>'by' LIKE 'local%'`, typ).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			t.Errorf("no %s event naming the local user in the audit log", typ)
		}
	}
}
