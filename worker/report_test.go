package worker_test

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/whilly-go/whilly/agent"
	"github.com/whilly-go/whilly/plan"
	"github.com/whilly-go/whilly/queue"
	"github.com/whilly-go/whilly/worker"
)

// TestReportNamesEachTaskAndPlan: after its counts line, the worker's report has one
// line per task it ran (its outcome, attempts and cost) and one per plan it touched (its
// status and pull request), key=value, parseable without JSON tools. What the control
// plane answers (a pull request URL) is escaped: one value never spills into the next
// field or line.
func TestReportNamesEachTaskAndPlan(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	e.importTasks(t, "good", 2)
	bad := &plan.Plan{ID: "bad", Name: "bad", Tasks: []plan.Task{{ID: "B1", Priority: plan.PriorityMedium, MaxAttempts: 1,
		Description: "A task long enough for the gate", AcceptanceCriteria: []string{"ok"}, TestSteps: []string{"true"}}}}
	if _, err := e.st.Import(ctx, bad, queue.ImportOptions{}); err != nil {
		t.Fatal(err)
	}
	// A pull request whose URL holds what must not break a line: a space, a |, a newline.
	if err := e.st.RecordPull(ctx, queue.PullRequest{PlanID: "good", Repo: "acme/shop", Number: 7, NodeID: "PR_7",
		URL: "https://github.com/acme/shop/pull/7?a=b c|d\nplan plan_id=evil", Branch: "whilly/good"}, false); err != nil {
		t.Fatal(err)
	}
	report := func(sim agent.SimConfig, planID string) string {
		t.Helper()
		w, api := e.registered(t, e.url)
		ag, err := agent.New(agent.NameSim, agent.Config{Sim: sim})
		if err != nil {
			t.Fatal(err)
		}
		wk, err := worker.New(api, ag, nil, worker.Config{WorkerID: w.ID, PlanID: planID, Drain: true, ClaimWait: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		runCtx, cancel := context.WithTimeout(ctx, 60*time.Second)
		defer cancel()
		sum, err := wk.Run(runCtx)
		if err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		worker.WriteReport(&out, sum, worker.ReadPlans(ctx, api, planID, sum, nil))
		return out.String()
	}
	cost := plan.USD(10_000) // $0.01 a run
	got := report(agent.SimConfig{Cost: cost, FailRate: 1}, "bad")
	want := "tasks_done=0 tasks_failed=1 attempts_failed=1 tasks_released=0 cost_usd=0.01\n" +
		"task plan_id=bad task_id=B1 status=failed attempts=1 cost_usd=0.01\n" +
		"plan plan_id=bad status=FAILED\n"
	if got != want {
		t.Errorf("report of the failing worker:\n%s\nwant:\n%s", got, want)
	}
	// Without --plan: the plans of the tasks it ran.
	got = report(agent.SimConfig{Cost: cost}, "")
	want = "tasks_done=2 tasks_failed=0 attempts_failed=0 tasks_released=0 cost_usd=0.02\n" +
		"task plan_id=good task_id=T00 status=done attempts=1 cost_usd=0.01\n" +
		"task plan_id=good task_id=T01 status=done attempts=1 cost_usd=0.01\n" +
		"plan plan_id=good status=DONE pull_request=https://github.com/acme/shop/pull/7?a=b%20c%7Cd%0Aplan%20plan_id=evil\n"
	if got != want {
		t.Errorf("report of the draining worker:\n%s\nwant:\n%s", got, want)
	}
	if strings.Count(got, "\nplan ") != 1 {
		t.Error("the pull request URL made a line of its own")
	}
}
