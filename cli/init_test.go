//go:build unix

package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/whilly-go/whilly/plan"
	"github.com/whilly-go/whilly/queue"
	"github.com/whilly-go/whilly/testkit"
)

// execCLI runs the whilly command line as Execute does, with env as the environment. It
// adds `init` to the tree when the root does not have it yet.
func execCLI(t *testing.T, env map[string]string, stdin string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	stdio := IO{In: strings.NewReader(stdin), Out: &out, Err: &errb, Getenv: unboxedEnv(env)}
	root := NewRootCommand(stdio)
	if c, _, err := root.Find([]string{"init"}); err != nil || c.Name() != "init" {
		root.AddCommand(newApp(stdio, slog.New(slog.DiscardHandler)).initCommand())
	}
	root.SetArgs(args)
	code = report(stdio.Err, root.ExecuteContext(context.Background()))
	return code, out.String(), errb.String()
}

const initPRD = `# Login rate limit

## Overview
Brute-force attempts on /login go unchecked.

## Functional requirements
- F1: at most 5 attempts per minute per IP.
- F2: the limit is documented.`

const initPlanJSON = `{"project": "Login rate limit", "tasks": [
  {"id": "TASK-001", "priority": "high",
   "description": "Add a limit of 5 login attempts per minute per IP to app/login.go",
   "dependencies": [], "key_files": ["app/login.go"],
   "acceptance_criteria": ["the 6th attempt within 60 s returns 429", "other IPs are not limited"],
   "test_steps": ["go test ./app -run TestLoginRateLimit"], "prd_requirement": "F1"},
  {"id": "TASK-002", "priority": "low",
   "description": "Document the login rate limit in the security guide",
   "dependencies": ["TASK-001"], "key_files": [],
   "acceptance_criteria": ["docs/security.md has a Rate limits section", "it names the limit"],
   "test_steps": ["grep -q 'Rate limits' docs/security.md"], "prd_requirement": "F2"}]}`

const initBadPlanJSON = `{"project": "Login rate limit", "tasks": [
  {"id": "TASK-001", "priority": "urgent", "description": "Add a limit of 5 login attempts per minute per IP",
   "dependencies": ["TASK-009"], "key_files": ["app/login.go"],
   "acceptance_criteria": ["the 6th attempt returns 429", "other IPs pass"], "test_steps": ["go test ./app"]}]}`

func initAnswer(planJSON string) string {
	return initPRD + "\n\nThe plan:\n\n```json\n" + planJSON + "\n```\n"
}

// fakePlanner is a fake claude whose n-th run saves its prompt as prompt-n and its argv
// as args-n in dir and prints the n-th of answers (Claude result lines).
func fakePlanner(t *testing.T, answers ...string) (bin, dir string) {
	t.Helper()
	dir = t.TempDir()
	for i, a := range answers {
		if err := os.WriteFile(filepath.Join(dir, "answer-"+strconv.Itoa(i+1)), []byte(a+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	d := "'" + dir + "'"
	bin = fakeCLI(t, "claude", `n=$(( $(cat `+d+`/count 2>/dev/null || echo 0) + 1 ))
echo $n > `+d+`/count
cat > `+d+`/prompt-$n
printf '%s\n' "$@" > `+d+`/args-$n
pwd -P > `+d+`/pwd-$n
cat `+d+`/answer-$n
`)
	return bin, dir
}

func plannerCalls(t *testing.T, dir string) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "count"))
	if err != nil {
		return 0
	}
	n, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return n
}

func openTestStore(t *testing.T, dsn string) *queue.Store {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return queue.NewStore(pool, nil, queue.Config{})
}

func listFiles(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

func TestInitWritesBothFilesAndImports(t *testing.T) {
	t.Parallel()
	dsn := testkit.DSN(t)
	bin, pdir := fakePlanner(t, claudeResultLine(t, initAnswer(initPlanJSON), 0.25))
	out := filepath.Join(t.TempDir(), "docs")
	env := map[string]string{"WHILLY_DATABASE_URL": dsn, "WHILLY_DATA_DIR": t.TempDir(), "CLAUDE_BIN": bin}
	code, stdout, stderr := execCLI(t, env, "", "init", "Rate-limit the login endpoint", "--output-dir", out, "--budget", "3")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	prdFile, planFile := filepath.Join(out, "PRD-login-rate-limit.md"), filepath.Join(out, "login-rate-limit.tasks.json")
	prd, err := os.ReadFile(prdFile)
	if err != nil || !strings.HasPrefix(string(prd), "# Login rate limit\n") || !strings.Contains(string(prd), "F2: the limit is documented.") {
		t.Errorf("PRD file: %q, %v", prd, err)
	}
	data, err := os.ReadFile(planFile)
	if err != nil {
		t.Fatal(err)
	}
	fromFile, err := plan.Parse(data)
	if err != nil || fromFile.ID != "login-rate-limit" || len(fromFile.Tasks) != 2 || fromFile.Budget == nil || fromFile.Budget.String() != "3" {
		t.Fatalf("plan file: %+v, %v", fromFile, err)
	}

	st := openTestStore(t, dsn)
	ctx := context.Background()
	pi, err := st.GetPlan(ctx, "login-rate-limit")
	if err != nil {
		t.Fatal(err)
	}
	if pi.Total != 2 || pi.Spent.String() != "0.25" || pi.Status != plan.PlanActive {
		t.Errorf("plan: %d tasks, spent %s, %s; want 2, 0.25 (the planner), ACTIVE", pi.Total, pi.Spent, pi.Status)
	}
	exported, err := st.Export(ctx, "login-rate-limit")
	if err != nil {
		t.Fatal(err)
	}
	if again, _ := plan.Encode(exported); !bytes.Equal(again, data) {
		t.Errorf("the plan file and the imported plan differ:\n%s\n%s", data, again)
	}
	evs, err := st.Events(ctx, queue.EventFilter{PlanID: "login-rate-limit"})
	if err != nil {
		t.Fatal(err)
	}
	var types []string
	for _, e := range evs {
		types = append(types, e.Type)
		if e.Type == queue.EventPlanCharged && !strings.Contains(strings.ReplaceAll(string(e.Payload), " ", ""), `"source":"planner"`) {
			t.Errorf("plan.charged payload %s", e.Payload)
		}
	}
	if got := strings.Join(types, " "); got != "plan.created task.created task.created plan.applied plan.charged" {
		t.Errorf("events: %s", got)
	}

	for _, want := range []string{"wrote " + prdFile + " and " + planFile, "ALLOW  TASK-001", "WARN   TASK-002", "no_key_files",
		"gate: 1 allowed, 1 warned, 0 rejected", "planner: claude, 1 call, $0.25 charged to the plan",
		"login-rate-limit  Login rate limit", "└─ TASK-002", "whilly run --plan login-rate-limit"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("stdout lacks %q:\n%s", want, stdout)
		}
	}
	if args, _ := os.ReadFile(filepath.Join(pdir, "args-1")); !strings.Contains(string(args), "--permission-mode\ndontAsk\n") {
		t.Errorf("planner argv %q: it may edit files", args)
	}
	if prompt, _ := os.ReadFile(filepath.Join(pdir, "prompt-1")); !strings.Contains(string(prompt), "Rate-limit the login endpoint") ||
		!strings.Contains(string(prompt), "You may read the repository") {
		t.Error("the idea or the repository is not in the planner's prompt")
	}
	cwd, _ := os.Getwd()
	cwd, _ = filepath.EvalSymlinks(cwd)
	if ran, _ := os.ReadFile(filepath.Join(pdir, "pwd-1")); strings.TrimSpace(string(ran)) != cwd {
		t.Errorf("the planner ran in %q, not in the current directory %q", ran, cwd)
	}
}

func TestInitRetriesAnInvalidPlanOnce(t *testing.T) {
	t.Parallel()
	dsn := testkit.DSN(t)
	bin, pdir := fakePlanner(t, claudeResultLine(t, initAnswer(initBadPlanJSON), 0.1), claudeResultLine(t, initAnswer(initPlanJSON), 0.2))
	out := t.TempDir()
	env := map[string]string{"WHILLY_DATABASE_URL": dsn, "WHILLY_DATA_DIR": t.TempDir(), "CLAUDE_BIN": bin}
	code, stdout, stderr := execCLI(t, env, "", "init", "Rate-limit the login endpoint", "--output-dir", out, "--slug", "login")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if !strings.Contains(stdout, "planner: claude, 2 calls, $0.3 charged") {
		t.Errorf("stdout:\n%s", stdout)
	}
	second, _ := os.ReadFile(filepath.Join(pdir, "prompt-2"))
	for _, want := range []string{`field "priority": must be one of critical, high, medium, low`, `unknown task "TASK-009"`} {
		if !strings.Contains(string(second), want) {
			t.Errorf("the second prompt lacks %q", want)
		}
	}
	if got := listFiles(t, out); strings.Join(got, " ") != "PRD-login.md login.tasks.json" {
		t.Errorf("files %v", got)
	}
	pi, err := openTestStore(t, dsn).GetPlan(context.Background(), "login")
	if err != nil || pi.Spent.String() != "0.3" {
		t.Errorf("plan: spent %s, %v; want both calls charged", pi.Spent, err)
	}
}

func TestInitRefusesAfterTwoInvalidPlansAndWritesNothing(t *testing.T) {
	t.Parallel()
	dsn := testkit.DSN(t)
	bin, pdir := fakePlanner(t, claudeResultLine(t, initAnswer(initBadPlanJSON), 0.1), claudeResultLine(t, initAnswer(initBadPlanJSON), 0.1),
		claudeResultLine(t, initAnswer(initPlanJSON), 0.1))
	out := filepath.Join(t.TempDir(), "out")
	env := map[string]string{"WHILLY_DATABASE_URL": dsn, "WHILLY_DATA_DIR": t.TempDir(), "CLAUDE_BIN": bin}
	code, stdout, stderr := execCLI(t, env, "", "init", "Rate-limit the login endpoint", "--output-dir", out)
	if code != 1 {
		t.Fatalf("exit %d, want 1; stderr %s", code, stderr)
	}
	for _, want := range []string{"nothing written (the planner cost $0.2)", "invalid after 2 attempts",
		`task "TASK-001": field "priority": must be one of critical, high, medium, low`, `unknown task "TASK-009"`} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}
	if stdout != "" {
		t.Errorf("stdout: %q", stdout)
	}
	if n := plannerCalls(t, pdir); n != 2 {
		t.Errorf("planner called %d times, want 2", n)
	}
	if files := listFiles(t, out); len(files) != 0 {
		t.Errorf("files written: %v", files)
	}
	plans, _, err := openTestStore(t, dsn).ListPlans(context.Background(), queue.PlanPage{Limit: 10})
	if err != nil || len(plans) != 0 {
		t.Errorf("plans: %v, %v", plans, err)
	}
}

func TestInitNoImportNeedsNoDatabase(t *testing.T) {
	t.Parallel()
	bin, _ := fakePlanner(t, claudeResultLine(t, initAnswer(initPlanJSON), 0.05))
	out := t.TempDir()
	env := map[string]string{"WHILLY_DATABASE_URL": "postgres://nobody@127.0.0.1:1/none?connect_timeout=1", "CLAUDE_BIN": bin}
	code, stdout, stderr := execCLI(t, env, "Rate-limit the login endpoint\n", "init", "-", "--no-import", "--output-dir", out, "--slug", "rl")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if got := listFiles(t, out); strings.Join(got, " ") != "PRD-rl.md rl.tasks.json" {
		t.Errorf("files %v", got)
	}
	if !strings.Contains(stdout, "whilly plan apply "+filepath.Join(out, "rl.tasks.json")) || !strings.Contains(stdout, "not charged") {
		t.Errorf("stdout:\n%s", stdout)
	}
}

// Without a terminal to ask on, existing files are not overwritten (and the planner is
// not paid for nothing); --yes overwrites them.
func TestInitExistingFilesAndPlans(t *testing.T) {
	t.Parallel()
	dsn := testkit.DSN(t)
	out := t.TempDir()
	old := filepath.Join(out, "PRD-rl.md")
	if err := os.WriteFile(old, []byte("mine\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	bin, pdir := fakePlanner(t, claudeResultLine(t, initAnswer(initPlanJSON), 0.05), claudeResultLine(t, initAnswer(initPlanJSON), 0.05))
	env := map[string]string{"WHILLY_DATABASE_URL": dsn, "WHILLY_DATA_DIR": t.TempDir(), "CLAUDE_BIN": bin}

	code, _, stderr := execCLI(t, env, "", "init", "Rate-limit the login endpoint", "--output-dir", out, "--slug", "rl")
	if code != 1 || !strings.Contains(stderr, "pass --yes") {
		t.Fatalf("exit %d, stderr %s; want a refusal asking for --yes", code, stderr)
	}
	if b, _ := os.ReadFile(old); string(b) != "mine\n" || plannerCalls(t, pdir) != 0 {
		t.Fatalf("the file was touched (%q) or the planner ran (%d)", b, plannerCalls(t, pdir))
	}

	code, _, stderr = execCLI(t, env, "", "init", "Rate-limit the login endpoint", "--output-dir", out, "--slug", "rl", "--yes")
	if code != 0 {
		t.Fatalf("--yes: exit %d: %s", code, stderr)
	}
	if b, _ := os.ReadFile(old); !strings.HasPrefix(string(b), "# Login rate limit") {
		t.Errorf("PRD not overwritten: %q", b)
	}

	// The plan now exists: a second init with its id is refused before the planner runs.
	code, _, stderr = execCLI(t, env, "", "init", "Something else entirely", "--output-dir", t.TempDir(), "--slug", "rl")
	if code != 1 || !strings.Contains(stderr, "plan rl already exists") || plannerCalls(t, pdir) != 1 {
		t.Errorf("exit %d, stderr %s, planner calls %d", code, stderr, plannerCalls(t, pdir))
	}
}

func TestInitBadInput(t *testing.T) {
	t.Parallel()
	env := map[string]string{"WHILLY_DATABASE_URL": "postgres://nobody@127.0.0.1:1/none?connect_timeout=1", "CLAUDE_BIN": "/nonexistent/claude"}
	cases := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"init"}, 2, "takes one idea"},
		{[]string{"init", "   "}, 1, "the idea is empty"},
		{[]string{"init", "x", "--slug", "../etc"}, 1, "--slug"},
		{[]string{"init", "x", "--budget", "lots"}, 1, "budget"},
		{[]string{"init", "x", "--planner", "gpt", "--no-import"}, 1, "unknown agent"},
		{[]string{"init", "Rate-limit the login endpoint", "--no-import", "--output-dir", t.TempDir()}, 2, "not installed"},
	}
	for _, c := range cases {
		code, _, stderr := execCLI(t, env, "", c.args...)
		if code != c.code || !strings.Contains(stderr, c.want) {
			t.Errorf("%q: exit %d, stderr %q; want %d and %q", c.args, code, stderr, c.code, c.want)
		}
	}
	bad := map[string]string{"WHILLY_PLANNER": "gpt", "CLAUDE_BIN": "/nonexistent/claude"}
	if code, _, stderr := execCLI(t, bad, "", "init", "x", "--no-import"); code != 2 || !strings.Contains(stderr, "WHILLY_PLANNER") {
		t.Errorf("WHILLY_PLANNER=gpt: exit %d, %s", code, stderr)
	}
}

// TestInitSimPlannerMakesAPlan: the sim planner (no model) answers with a valid plan, so
// `whilly init --planner sim` imports it and `whilly run --agent sim` can run it; two
// ideas make two plans, the same idea the same one.
func TestInitSimPlannerMakesAPlan(t *testing.T) {
	t.Parallel()
	dsn := testkit.DSN(t)
	env := map[string]string{"WHILLY_DATABASE_URL": dsn}
	dir := t.TempDir()
	code, out, stderr := execCLI(t, env, "", "init", "Add a dark mode", "--planner", "sim", "--output-dir", dir, "--json")
	if code != 0 {
		t.Fatalf("init --planner sim: exit %d, %s", code, stderr)
	}
	var res struct {
		PlanID string `json:"plan_id"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil || !strings.HasPrefix(res.PlanID, "simulated-plan-") {
		t.Fatalf("init --json: %v, %q", err, out)
	}
	code, out, stderr = execCLI(t, env, "", "plan", "show", res.PlanID, "--no-color")
	if code != 0 || !strings.Contains(out, "SIM-1") || !strings.Contains(out, "SIM-3") {
		t.Fatalf("plan show: exit %d, %s %s", code, out, stderr)
	}
	code, out, stderr = execCLI(t, env, "", "run", "--plan", res.PlanID, "--agent", "sim", "--sim-delay", "0")
	if code != 0 {
		t.Fatalf("run --agent sim: exit %d, %s %s", code, out, stderr)
	}
	code, _, stderr = execCLI(t, env, "", "init", "Something else", "--planner", "sim", "--output-dir", dir, "--no-import")
	if code != 0 {
		t.Fatalf("a second idea: exit %d, %s", code, stderr)
	}
	files, err := filepath.Glob(filepath.Join(dir, "*.tasks.json"))
	if err != nil || len(files) != 2 {
		t.Fatalf("two ideas made %d plan files: %v", len(files), files)
	}
}
