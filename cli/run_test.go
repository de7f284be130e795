package cli_test

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/whilly-go/whilly/sandbox"
	"github.com/whilly-go/whilly/testkit"
)

// gatedPlan's last task is one the decision gate rejects.
const gatedPlan = `{"plan_id": "gated", "project": "Gated plan", "tasks": [
  {"id": "A", "priority": "high", "description": "Write the first part of the feature with tests",
   "key_files": ["a.go"], "acceptance_criteria": ["it works"], "test_steps": ["go test ./..."]},
  {"id": "CLEANUP-1", "priority": "low", "description": "Tidy up", "dependencies": ["A"]}
]}`

// TestRunNeverWaitsSilently is the demo's dead end: a strict plan's rejected task is
// reset, and whilly run, instead of waiting at "1/2 done · 0 running" forever, says why
// the task cannot run and exits 1.
func TestRunNeverWaitsSilently(t *testing.T) {
	t.Parallel()
	dsn := testkit.DSN(t)
	sim := []string{"run", "--plan", "gated", "--agent", "sim", "--sim-delay", "1ms", "--sim-cost", "0"}
	if code, _, stderr := run(t, dsn, "", "plan", "apply", "--strict", writeFile(t, "plan.json", gatedPlan)); code != 0 {
		t.Fatalf("apply: exit %d: %s", code, stderr)
	}
	if code, out, stderr := run(t, dsn, "", sim...); code != 0 || !strings.Contains(out, "is DONE") {
		t.Fatalf("first run: exit %d, out %q, err %q", code, out, stderr)
	}
	// A plain reset keeps the gate's skip, so the plan can finish again.
	code, out, _ := run(t, dsn, "", "plan", "reset", "gated")
	if code != 0 || !strings.Contains(out, "1 task back to PENDING") {
		t.Fatalf("reset: exit %d, %q", code, out)
	}
	if code, out, stderr := run(t, dsn, "", sim...); code != 0 || !strings.Contains(out, "is DONE") {
		t.Fatalf("run after a reset: exit %d, out %q, err %q", code, out, stderr)
	}
	// Asked to, it un-skips the rejected task: the run ends and says why.
	if code, out, _ := run(t, dsn, "", "plan", "reset", "gated", "--include-skipped"); code != 0 || !strings.Contains(out, "2 tasks back") {
		t.Fatalf("reset --include-skipped: exit %d, %q", code, out)
	}
	code, out, stderr := run(t, dsn, "", sim...)
	if code != 1 {
		t.Fatalf("run with a rejected task pending: exit %d, want 1; out %q, err %q", code, out, stderr)
	}
	if !strings.Contains(out, "CLEANUP-1: rejected by the decision gate in a strict plan") {
		t.Errorf("run does not say why CLEANUP-1 waits:\n%s", out)
	}
	if !strings.Contains(stderr, "plan gated cannot go on: nothing runs and none of its 1 pending tasks can be claimed") {
		t.Errorf("stderr = %q", stderr)
	}
	if _, out, _ := run(t, dsn, "", "plan", "show", "gated"); !strings.Contains(out, "CLEANUP-1  Tidy up  [gate: REJECT]") {
		t.Errorf("plan show does not show the gate's verdict:\n%s", out)
	}
}

// TestReapplyTellsTheTruth: fixing the rejected task in the file and applying it again
// changes the stored task (the verdict printed is the stored task's), and the plan runs
// to DONE; a change to a task that ran is refused, naming it; an import whose tasks are
// all finished leaves the plan DONE, and one that adds a task reopens it.
func TestReapplyTellsTheTruth(t *testing.T) {
	t.Parallel()
	dsn := testkit.DSN(t)
	sim := []string{"run", "--plan", "gated", "--agent", "sim", "--sim-delay", "1ms", "--sim-cost", "0"}
	if code, _, stderr := run(t, dsn, "", "plan", "apply", "--strict", writeFile(t, "plan.json", gatedPlan)); code != 0 {
		t.Fatalf("apply: exit %d: %s", code, stderr)
	}
	fixed := strings.Replace(gatedPlan, `"description": "Tidy up", "dependencies": ["A"]}`,
		`"description": "Remove the unused helpers from a.go", "dependencies": ["A"], "key_files": ["a.go"],
		 "acceptance_criteria": ["no unused code"], "test_steps": ["go vet ./..."]}`, 1)
	code, out, stderr := run(t, dsn, "", "plan", "apply", "--strict", writeFile(t, "plan.json", fixed))
	if code != 0 || !strings.Contains(out, "ALLOW  CLEANUP-1") || !strings.Contains(out, "1 changed (CLEANUP-1)") {
		t.Fatalf("re-apply of the fixed file: exit %d, out %q, err %q", code, out, stderr)
	}
	if code, out, stderr := run(t, dsn, "", sim...); code != 0 || !strings.Contains(out, "CLEANUP-1  DONE") {
		t.Fatalf("run: exit %d, out %q, err %q", code, out, stderr)
	}
	if code, out, _ := run(t, dsn, "", "plan", "import", writeFile(t, "plan.json", fixed)); code != 0 ||
		!strings.Contains(out, "unchanged") || !strings.Contains(out, "the plan is DONE") {
		t.Fatalf("re-import of the same file: exit %d, %q", code, out)
	}
	changed := strings.Replace(fixed, "Write the first part", "Write the very first part", 1)
	code, _, stderr = run(t, dsn, "", "plan", "import", writeFile(t, "plan.json", changed))
	if code != 1 || !strings.Contains(stderr, "A is DONE and the file changes its description") {
		t.Fatalf("import changing a DONE task: exit %d, %q", code, stderr)
	}
	more := strings.Replace(fixed, `"tasks": [`, `"tasks": [
  {"id": "EXTRA", "priority": "low", "description": "Write the third part of the feature with tests",
   "key_files": ["c.go"], "acceptance_criteria": ["it works"], "test_steps": ["go test ./..."]},`, 1)
	code, out, _ = run(t, dsn, "", "plan", "import", writeFile(t, "plan.json", more))
	if code != 0 || !strings.Contains(out, "1 new task,") || !strings.Contains(out, "the plan is ACTIVE again") {
		t.Fatalf("import adding a task to a DONE plan: exit %d, %q", code, out)
	}
	if code, out, stderr := run(t, dsn, "", sim...); code != 0 || !strings.Contains(out, "EXTRA      DONE") {
		t.Fatalf("run of the added task: exit %d, out %q, err %q", code, out, stderr)
	}
	code, out, _ = run(t, dsn, "", "plan", "import", writeFile(t, "empty.json", `{"plan_id": "empty", "project": "Empty", "tasks": []}`))
	if code != 0 || !strings.Contains(out, "the plan is DONE") {
		t.Fatalf("import of an empty plan: exit %d, %q", code, out)
	}
	if code, out, _ := run(t, dsn, "", "run", "--plan", "empty", "--agent", "sim"); code != 0 || !strings.Contains(out, "already DONE") {
		t.Fatalf("run of an empty plan: exit %d, %q", code, out)
	}
}

// TestRunChecksTheAgentBeforeClaiming: a missing claude CLI is an environment error
// (exit 2) naming CLAUDE_BIN and the install command, and no task is attempted.
func TestRunChecksTheAgentBeforeClaiming(t *testing.T) {
	t.Parallel()
	dsn := testkit.DSN(t)
	if code, _, stderr := run(t, dsn, "", "plan", "import", writeFile(t, "plan.json", gatedPlan)); code != 0 {
		t.Fatalf("import: exit %d: %s", code, stderr)
	}
	env := map[string]string{"CLAUDE_BIN": "/nonexistent/claude", "WHILLY_SANDBOX": "none"}
	code, _, stderr := runEnv(t, dsn, env, "", "run", "--plan", "gated", "--agent", "claude")
	if code != 2 || !strings.Contains(stderr, "CLAUDE_BIN") || !strings.Contains(stderr, "npm install -g @anthropic-ai/claude-code") {
		t.Fatalf("run with no claude CLI: exit %d, %q; want 2 naming CLAUDE_BIN and the install command", code, stderr)
	}
	noTaskAttempted(t, dsn, "gated")
}

// TestRunOnAPausedPlanSaysHowToResumeIt: whilly run on a PAUSED plan gives the advice of
// the pause's own reason — raise the budget, resume it — never 'whilly plan reset', which
// would run and pay for the finished tasks again.
func TestRunOnAPausedPlanSaysHowToResumeIt(t *testing.T) {
	t.Parallel()
	dsn := testkit.DSN(t)
	if code, _, stderr := run(t, dsn, "", "plan", "import", writeFile(t, "plan.json", validPlan)); code != 0 {
		t.Fatalf("import: exit %d: %s", code, stderr)
	}
	sim := []string{"run", "--plan", "cli", "--agent", "sim", "--sim-delay", "1ms", "--workers", "1"}
	if code, _, _ := run(t, dsn, "", "plan", "pause", "cli"); code != 0 {
		t.Fatalf("plan pause: exit %d", code)
	}
	code, _, stderr := run(t, dsn, "", sim...)
	if code != 1 || !strings.Contains(stderr, "whilly plan resume cli") || strings.Contains(stderr, "reset") {
		t.Fatalf("run on a plan paused by an operator: exit %d, %q; want 1 and 'whilly plan resume cli'", code, stderr)
	}
	if code, _, _ := run(t, dsn, "", "plan", "resume", "cli"); code != 0 {
		t.Fatalf("plan resume: exit %d", code)
	}
	// The first attempt costs the whole budget ($1.50): the plan pauses on it.
	if code, _, stderr := run(t, dsn, "", append(sim, "--sim-cost", "1.5")...); code != 1 || !strings.Contains(stderr, "whilly plan budget cli") {
		t.Fatalf("run that reaches the budget: exit %d, %q", code, stderr)
	}
	code, _, stderr = run(t, dsn, "", sim...)
	if code != 1 || !strings.Contains(stderr, "whilly plan budget cli") || strings.Contains(stderr, "reset") {
		t.Fatalf("run on a plan paused on its budget: exit %d, %q; want 1 and 'whilly plan budget cli USD'", code, stderr)
	}
}

// TestRunInHomeExitsTwoBeforeClaiming: whilly run started in HOME would run the agent of
// a plan without a repository there, which the box refuses: every attempt of the plan
// would fail as a retryable agent_error. It says what to do and exits 2 before any claim.
func TestRunInHomeExitsTwoBeforeClaiming(t *testing.T) {
	t.Parallel()
	if err := sandbox.Check(context.Background()); err != nil {
		if os.Getenv("WHILLY_TEST_SANDBOX") == "require" {
			t.Fatalf("the sandbox must work here: %v", err)
		}
		t.Skipf("bubblewrap does not work here: %v", err)
	}
	dsn := testkit.DSN(t)
	if code, _, stderr := run(t, dsn, "", "plan", "import", writeFile(t, "plan.json", gatedPlan)); code != 0 {
		t.Fatalf("import: exit %d: %s", code, stderr)
	}
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"HOME": wd, "PATH": os.Getenv("PATH"), "WHILLY_AGENT_CMD": "/bin/true", "WHILLY_SANDBOX": "bwrap"}
	code, _, stderr := runEnv(t, dsn, env, "", "run", "--plan", "gated", "--agent", "command")
	if code != 2 || !strings.Contains(stderr, "would expose all of "+wd) || !strings.Contains(stderr, "run whilly from a project directory") {
		t.Fatalf("run in HOME: exit %d, %q; want 2 saying what to do", code, stderr)
	}
	noTaskAttempted(t, dsn, "gated")
}

// TestRunSummaryIsThisRuns: the summary of a second run counts this run's attempts and
// cost (a task it did not run shows none), and the plan's whole spend beside them, named
// as such. plan list counts DONE and SKIPPED apart.
func TestRunSummaryIsThisRuns(t *testing.T) {
	t.Parallel()
	dsn := testkit.DSN(t)
	if code, _, stderr := run(t, dsn, "", "plan", "import", writeFile(t, "plan.json", validPlan)); code != 0 {
		t.Fatalf("import: %s", stderr)
	}
	sim := []string{"run", "--plan", "cli", "--agent", "sim", "--sim-delay", "1ms", "--sim-cost", "0.01"}
	if code, out, stderr := run(t, dsn, "", sim...); code != 0 || !strings.Contains(out, "this run: 2 attempts, $0.02,") {
		t.Fatalf("first run: exit %d, out %q, err %q", code, out, stderr)
	}
	if code, _, stderr := run(t, dsn, "", "plan", "task", "reset", "cli", "B"); code != 0 {
		t.Fatalf("reset B: %s", stderr)
	}
	code, out, stderr := run(t, dsn, "", sim...)
	if code != 0 || !strings.Contains(out, "plan cli is DONE: 2 tasks; this run: 1 attempt, $0.01, in ") || !strings.Contains(out, "; spent $0.03 of $1.5") {
		t.Fatalf("second run: exit %d, out %q, err %q", code, out, stderr)
	}
	var rowA, total string
	for _, l := range strings.Split(out, "\n") {
		switch f := strings.Fields(l); {
		case len(f) > 0 && f[0] == "A":
			rowA = strings.Join(f[:4], " ")
		case len(f) > 0 && f[0] == "total":
			total = strings.Join(f[:4], " ")
		}
	}
	if rowA != "A DONE 0 $0" || total != "total DONE 1 $0.01" {
		t.Errorf("rows A %q and total %q; want A not run in this run, total 1 attempt and $0.01:\n%s", rowA, total, out)
	}

	skipped := `{"plan_id": "mixed", "project": "Mixed", "tasks": [
	  {"id": "A", "priority": "high", "status": "done", "description": "d"},
	  {"id": "B", "priority": "low", "status": "skipped", "description": "d"},
	  {"id": "C", "priority": "low", "description": "d"}]}`
	if code, _, stderr := run(t, dsn, "", "plan", "import", writeFile(t, "mixed.json", skipped)); code != 0 {
		t.Fatalf("import: %s", stderr)
	}
	_, out, _ = run(t, dsn, "", "plan", "list", "--no-color")
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) > 0 && f[0] == "mixed" && strings.Join(f[1:5], " ") != "ACTIVE 1 1 3" {
			t.Errorf("plan list row %q; want ACTIVE, 1 done, 1 skipped, 3 tasks:\n%s", l, out)
		}
	}
	if !strings.Contains(out, "PLAN   STATUS  DONE  SKIPPED  TASKS") {
		t.Errorf("plan list header:\n%s", out)
	}
}

// noTaskAttempted fails t unless no task of plan id has had an attempt.
func noTaskAttempted(t *testing.T, dsn, id string) {
	t.Helper()
	code, out, _ := run(t, dsn, "", "plan", "show", id, "--json")
	if code != 0 || !strings.Contains(out, `"attempts": 0`) || strings.Contains(out, `"attempts": 1`) {
		t.Fatalf("show: exit %d; want no task attempted:\n%s", code, out)
	}
}
