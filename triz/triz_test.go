//go:build unix

package triz_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"

	"github.com/whilly-go/whilly/agent"
	"github.com/whilly-go/whilly/plan"
	"github.com/whilly-go/whilly/queue"
	"github.com/whilly-go/whilly/testkit"
	"github.com/whilly-go/whilly/triz"
)

const contradiction = `{"contradiction": true, "contradiction_type": "technical",
 "reason": "The limit must be strict per IP, yet users behind one NAT share an IP and get locked out.",
 "principle": "#3 Local quality",
 "suggestion": "Count attempts per account and per IP separately, and block only when both are high."}`

// resultLine is a Claude Code `--output-format json` result carrying text.
func resultLine(t *testing.T, text string, cost float64) string {
	t.Helper()
	b, err := json.Marshal(map[string]any{"type": "result", "subtype": "success", "is_error": false,
		"duration_ms": 4100, "num_turns": 1, "result": text, "session_id": "2f0c6b1e-5d0e-4c47-9c2a-0d7d1f1e9a33",
		"total_cost_usd": cost, "usage": map[string]any{"input_tokens": 900, "output_tokens": 120}})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// fakeClaude writes an executable sh script named claude into a new directory; the
// script saves its stdin (the prompt) next to itself, then runs body.
func fakeClaude(t *testing.T, body string) (bin, dir string) {
	t.Helper()
	dir = t.TempDir()
	bin = filepath.Join(dir, "claude")
	script := "#!/bin/sh\ncat > '" + dir + "/prompt'\n" + body + "\n"
	if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return bin, dir
}

// printing is a fake body that prints a file holding out and exits with code.
func printing(t *testing.T, out string, code int) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "out")
	if err := os.WriteFile(f, []byte(out+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return "cat '" + f + "'\nexit " + strconv.Itoa(code)
}

func claudeAgent(t *testing.T, bin string) agent.Agent {
	t.Helper()
	a, err := agent.New(agent.NameClaude, agent.Config{ClaudeBin: bin, KillGrace: 200 * time.Millisecond, PermissionMode: "dontAsk"})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

const testPlan = `{"plan_id": "shop-auth", "project": "Shop auth", "budget_usd": 5, "tasks": [
 {"id": "AUTH-1", "priority": "high",
  "description": "Add rate limiting to the /login handler (5 attempts per minute per IP)",
  "key_files": ["app/login.go"], "acceptance_criteria": ["the 6th attempt within 60 s returns 429"],
  "test_steps": ["go test ./app -run TestLoginRateLimit"]}]}`

// failedTask imports the test plan into a new database and fails its task's first
// attempt through st (with its hooks); it returns the store without hooks and the pool.
func failedTask(t *testing.T, hooks queue.Hooks) (*queue.Store, *pgxpool.Pool, queue.TaskInfo) {
	t.Helper()
	ctx := context.Background()
	pool := testkit.DB(t)
	st := queue.NewStore(pool, nil, queue.Config{})
	p, err := plan.Parse([]byte(testPlan))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Import(ctx, p, queue.ImportOptions{}); err != nil {
		t.Fatal(err)
	}
	w, _, err := st.RegisterWorker(ctx, "host", nil)
	if err != nil {
		t.Fatal(err)
	}
	c, err := st.Claim(ctx, queue.ClaimRequest{WorkerID: w.ID})
	if err != nil || c == nil {
		t.Fatalf("claim: %v %v", c, err)
	}
	lease := queue.Lease{PlanID: c.Task.PlanID, TaskID: c.Task.ID, LeaseID: c.Lease.ID, WorkerID: w.ID}
	ti, err := queue.NewStore(pool, nil, queue.Config{Hooks: hooks}).Fail(ctx, lease, queue.FailInput{Reason: "verify_failed", Cost: 100_000})
	if err != nil {
		t.Fatalf("fail: %v", err)
	}
	return st, pool, ti
}

func work(t *testing.T, w *triz.Worker, attempt int) error {
	t.Helper()
	job := &river.Job[triz.Args]{JobRow: &rivertype.JobRow{ID: 1, Kind: triz.Kind},
		Args: triz.Args{PlanID: "shop-auth", TaskID: "AUTH-1", Attempt: attempt, Reason: "verify_failed"}}
	return w.Work(context.Background(), job)
}

type event struct {
	typ     string
	payload map[string]any
	detail  map[string]any
}

func events(t *testing.T, st *queue.Store) []event {
	t.Helper()
	evs, err := st.Events(context.Background(), queue.EventFilter{PlanID: "shop-auth", Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	var out []event
	for _, e := range evs {
		ev := event{typ: e.Type}
		_ = json.Unmarshal(e.Payload, &ev.payload)
		_ = json.Unmarshal(e.Detail, &ev.detail)
		out = append(out, ev)
	}
	return out
}

func lastOf(evs []event, typ string) (event, int) {
	for i := len(evs) - 1; i >= 0; i-- {
		if evs[i].typ == typ {
			return evs[i], i
		}
	}
	return event{}, -1
}

func TestWorkRecordsAContradictionAndChargesTheAnalyzer(t *testing.T) {
	t.Parallel()
	st, _, _ := failedTask(t, queue.Hooks{})
	bin, dir := fakeClaude(t, printing(t, resultLine(t, contradiction, 0.05), 0))
	w, err := triz.NewWorker(st, triz.Config{Agent: claudeAgent(t, bin), Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := work(t, w, 1); err != nil {
		t.Fatal(err)
	}
	evs := events(t, st)
	ev, i := lastOf(evs, triz.EventContradiction)
	if i < 0 {
		t.Fatalf("no %s event in %v", triz.EventContradiction, evs)
	}
	if _, retry := lastOf(evs, "RETRY"); retry > i {
		t.Errorf("the finding came before the failure")
	}
	if ev.detail["contradiction_type"] != "technical" || !strings.Contains(ev.detail["suggestion"].(string), "per account and per IP") ||
		!strings.Contains(ev.detail["reason"].(string), "NAT") || ev.detail["attempt"] != float64(1) {
		t.Errorf("detail = %v", ev.detail)
	}
	charged, j := lastOf(evs, queue.EventPlanCharged)
	if j < 0 || charged.payload["source"] != triz.ChargeSource || charged.payload["cost_usd"] != "0.05" {
		t.Errorf("plan.charged = %v (index %d)", charged.payload, j)
	}
	task, err := st.GetTask(context.Background(), "shop-auth", "AUTH-1")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(task.TrizFinding, "Count attempts per account and per IP separately") {
		t.Errorf("finding = %q", task.TrizFinding)
	}
	pi, _ := st.GetPlan(context.Background(), "shop-auth")
	if pi.Spent != plan.USD(150_000) {
		t.Errorf("spent %s, want 0.1 for the attempt + 0.05 for the analyzer", pi.Spent)
	}
	prompt, _ := os.ReadFile(filepath.Join(dir, "prompt"))
	for _, want := range []string{"Reason: verify_failed", "5 attempts per minute per IP", "plan: shop-auth"} {
		if !strings.Contains(string(prompt), want) {
			t.Errorf("the analyzer's prompt lacks %q", want)
		}
	}
}

// Every way an analysis can go wrong is a triz.error with its class; the job still
// succeeds and the task keeps what it had.
func TestWorkFailsOpen(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, body, reason string
		noBudget           bool
		cost               string // charged for the failed analysis
	}{
		{name: "garbage", body: printing(t, resultLine(t, "The tests are flaky, I guess.", 0.002), 0), reason: agent.ReasonMalformedOutput, cost: "0.002"},
		{name: "non-zero exit", body: "echo 'claude: internal error' >&2\nexit 3", reason: agent.ReasonExitCode},
		{name: "missing CLI", reason: triz.ErrorAgentNotFound},
		{name: "timeout", body: "sleep 1000", reason: agent.ReasonTimeout},
		{name: "budget spent", body: printing(t, resultLine(t, contradiction, 0.05), 0), reason: agent.ReasonBudgetExceeded, noBudget: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			st, _, _ := failedTask(t, queue.Hooks{})
			ctx := context.Background()
			if c.noBudget {
				b := plan.USD(100_000)
				if _, err := st.SetBudget(ctx, "shop-auth", &b, ""); err != nil {
					t.Fatal(err)
				}
			}
			bin := filepath.Join(t.TempDir(), "no-claude")
			if c.name != "missing CLI" {
				bin, _ = fakeClaude(t, c.body)
			}
			w, err := triz.NewWorker(st, triz.Config{Agent: claudeAgent(t, bin), Timeout: time.Second})
			if err != nil {
				t.Fatal(err)
			}
			if err := work(t, w, 1); err != nil {
				t.Fatalf("the job failed: %v", err)
			}
			evs := events(t, st)
			ev, i := lastOf(evs, triz.EventError)
			if i < 0 || ev.detail["reason"] != c.reason {
				t.Fatalf("triz.error = %v (index %d), want reason %s; events %v", ev.detail, i, c.reason, evs)
			}
			if _, j := lastOf(evs, triz.EventContradiction); j >= 0 {
				t.Error("a contradiction was recorded")
			}
			charged, j := lastOf(evs, queue.EventPlanCharged)
			switch {
			case c.cost == "" && j >= 0:
				t.Errorf("charged %v for an analysis that cost nothing", charged.payload)
			case c.cost != "" && (j < 0 || charged.payload["cost_usd"] != c.cost):
				t.Errorf("plan.charged = %v, want %s", charged.payload, c.cost)
			}
			task, err := st.GetTask(ctx, "shop-auth", "AUTH-1")
			if err != nil {
				t.Fatal(err)
			}
			if task.Status != plan.StatusPending || task.LastError != "verify_failed" || task.TrizFinding != "" {
				t.Errorf("task changed: %s %q %q", task.Status, task.LastError, task.TrizFinding)
			}
		})
	}
}

// A later analysis that finds nothing keeps the earlier contradiction for the next prompt.
func TestNoneKeepsAnEarlierFinding(t *testing.T) {
	t.Parallel()
	st, _, _ := failedTask(t, queue.Hooks{})
	ctx := context.Background()
	if err := st.SetTrizFinding(ctx, "shop-auth", "AUTH-1", "physical contradiction: earlier", triz.EventContradiction, nil); err != nil {
		t.Fatal(err)
	}
	bin, _ := fakeClaude(t, printing(t, resultLine(t, `{"contradiction": false, "reason": "a typo"}`, 0), 0))
	w, _ := triz.NewWorker(st, triz.Config{Agent: claudeAgent(t, bin)})
	if err := work(t, w, 2); err != nil {
		t.Fatal(err)
	}
	if ev, i := lastOf(events(t, st), triz.EventNone); i < 0 || ev.detail["reason"] != "a typo" {
		t.Errorf("triz.none = %v", ev.detail)
	}
	task, _ := st.GetTask(ctx, "shop-auth", "AUTH-1")
	if task.TrizFinding != "physical contradiction: earlier" {
		t.Errorf("finding = %q", task.TrizFinding)
	}
}

func TestWorkSkipsAGoneTask(t *testing.T) {
	t.Parallel()
	st, _, _ := failedTask(t, queue.Hooks{})
	if _, err := st.ResetPlan(context.Background(), "shop-auth", queue.ResetOptions{Hard: true}); err != nil {
		t.Fatal(err)
	}
	bin, dir := fakeClaude(t, printing(t, resultLine(t, contradiction, 0.05), 0))
	w, _ := triz.NewWorker(st, triz.Config{Agent: claudeAgent(t, bin)})
	if err := work(t, w, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "prompt")); err == nil {
		t.Error("the analyzer ran for a deleted task")
	}
}

func riverJobs(t *testing.T, pool *pgxpool.Pool) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM river_job WHERE kind = $1`, triz.Kind).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestEnqueueIsUniquePerAttempt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// An insert-only client, as the control plane's hooks use.
	jobs, err := river.NewClient(riverpgxv5.New(nil), &river.Config{})
	if err != nil {
		t.Fatal(err)
	}
	_, pool, _ := failedTask(t, queue.Hooks{TaskFailed: func(ctx context.Context, tx pgx.Tx, f queue.TaskFailure) error {
		return triz.Enqueue(ctx, tx, jobs, f, nil)
	}})
	if n := riverJobs(t, pool); n != 1 {
		t.Fatalf("%d jobs after the failure, want 1", n)
	}
	var version int
	if err := pool.QueryRow(ctx, `SELECT (args->>'version')::int FROM river_job WHERE kind = $1`, triz.Kind).Scan(&version); err != nil {
		t.Fatal(err)
	}
	for _, f := range []queue.TaskFailure{
		{PlanID: "shop-auth", TaskID: "AUTH-1", Attempt: 1, Version: version, Reason: "verify_failed"}, // the same failure again
		{PlanID: "shop-auth", TaskID: "AUTH-1", Attempt: 2, Version: version + 2, Reason: "timeout"},
	} {
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return triz.Enqueue(ctx, tx, jobs, f, nil) })
		if err != nil {
			t.Fatal(err)
		}
	}
	if n := riverJobs(t, pool); n != 2 {
		t.Fatalf("%d jobs, want 2: one per attempt", n)
	}
	var args triz.Args
	if err := pool.QueryRow(ctx, `SELECT args FROM river_job WHERE kind = $1 ORDER BY id LIMIT 1`, triz.Kind).Scan(&args); err != nil {
		t.Fatal(err)
	}
	if args != (triz.Args{PlanID: "shop-auth", TaskID: "AUTH-1", Attempt: 1, Version: version, Reason: "verify_failed"}) {
		t.Errorf("args = %+v", args)
	}
}

// When the job cannot be inserted, the failure commits all the same.
func TestEnqueueFailsOpen(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testkit.DB(t)
	if _, err := pool.Exec(ctx, `ALTER TABLE river_job RENAME TO river_job_gone`); err != nil {
		t.Fatal(err)
	}
	jobs, err := river.NewClient(riverpgxv5.New(nil), &river.Config{})
	if err != nil {
		t.Fatal(err)
	}
	st := queue.NewStore(pool, nil, queue.Config{Hooks: queue.Hooks{
		TaskFailed: func(ctx context.Context, tx pgx.Tx, f queue.TaskFailure) error {
			return triz.Enqueue(ctx, tx, jobs, f, nil)
		},
	}})
	p, _ := plan.Parse([]byte(testPlan))
	if _, err := st.Import(ctx, p, queue.ImportOptions{}); err != nil {
		t.Fatal(err)
	}
	w, _, _ := st.RegisterWorker(ctx, "host", nil)
	c, err := st.Claim(ctx, queue.ClaimRequest{WorkerID: w.ID})
	if err != nil || c == nil {
		t.Fatalf("claim: %v", err)
	}
	ti, err := st.Fail(ctx, queue.Lease{PlanID: "shop-auth", TaskID: "AUTH-1", LeaseID: c.Lease.ID, WorkerID: w.ID},
		queue.FailInput{Reason: "exit_code"})
	if err != nil {
		t.Fatalf("the failure did not commit: %v", err)
	}
	if ti.Status != plan.StatusPending || ti.LastError != "exit_code" {
		t.Errorf("task %s %q", ti.Status, ti.LastError)
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM river_job_gone`).Scan(&n); err != nil || n != 0 {
		t.Errorf("jobs: %d, %v", n, err)
	}
}
