package app_test

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/whilly-go/whilly/app"
	"github.com/whilly-go/whilly/plan"
	"github.com/whilly-go/whilly/queue"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

func usd(s string) plan.USD {
	u, err := plan.ParseUSD(s)
	if err != nil {
		panic(err)
	}
	return u
}

func ptr[T any](v T) *T { return &v }

var t0 = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

func task(id string, st plan.Status, attempts int, cost, worker string) queue.TaskInfo {
	return queue.TaskInfo{PlanID: "gh/octo/shop/12", ID: id, Status: st, Attempts: attempts, MaxAttempts: 3,
		Cost: usd(cost), ClaimedBy: worker, UpdatedAt: t0, Gate: plan.Verdict{Decision: plan.DecisionAllow}}
}

func views() map[string]app.StatusView {
	base := queue.PlanInfo{ID: "gh/octo/shop/12", Name: "Harden login", Status: plan.PlanActive, Budget: ptr(usd("5")), Spent: usd("0.42"),
		GitHubIssueRef: "octo/shop#12"}
	failing := task("AUTH-2", plan.StatusPending, 2, "0.2", "")
	failing.LastError = "tests failed:\n```\n--- FAIL: TestLogin (0.01s)\n```\n@everyone <!-- hi -->"
	failing.UpdatedAt = t0.Add(time.Minute)
	failing.TrizFinding = "technical contradiction: speed vs safety; principle 1 (segmentation)"
	rejected := task("AUTH-4", plan.StatusSkipped, 0, "0", "")
	rejected.Gate = plan.Gate(plan.Task{ID: "AUTH-4", Description: "fix it"})

	active := base
	done := base
	done.Status, done.Spent = plan.PlanDone, usd("1.004")
	paused := base
	paused.Status, paused.PauseReason, paused.Spent = plan.PlanPaused, "budget", usd("5.01")
	failed := base
	failed.Status, failed.Budget = plan.PlanFailed, nil
	failedTask := task("AUTH-2", plan.StatusFailed, 3, "0.3", "w-lap-1")
	failedTask.LastError = "agent timed out after 30m"

	var many []queue.TaskInfo
	for i := range 120 {
		many = append(many, task(fmt.Sprintf("T%03d", i+1), plan.StatusDone, 1, "0.01", "w-1"))
	}
	return map[string]app.StatusView{
		"active": {Plan: active, PublicURL: "https://whilly.example.com/", Source: app.SourceBlock,
			Notes: []string{"The plan block's 1 verify command(s) were ignored: commands from an issue never run on workers."},
			Tasks: []queue.TaskInfo{task("AUTH-1", plan.StatusDone, 1, "0.22", "w-lap-1"), failing,
				task("AUTH-3", plan.StatusInProgress, 1, "0", "w-ci-7"), rejected}},
		"done":   {Plan: done, Source: app.SourceTaskList, Tasks: []queue.TaskInfo{task("T1", plan.StatusDone, 1, "0.5", "w-1"), task("T2", plan.StatusDone, 2, "0.504", "w-2")}},
		"paused": {Plan: paused, Source: app.SourceIssue, Tasks: []queue.TaskInfo{task("T1", plan.StatusPending, 1, "5.01", "")}},
		"failed": {Plan: failed, Tasks: []queue.TaskInfo{task("AUTH-1", plan.StatusDone, 1, "0.1", "w-lap-1"), failedTask,
			task("AUTH-3", plan.StatusPending, 0, "0", "")}},
		"many": {Plan: done, PublicURL: "https://whilly.example.com", Tasks: many},
	}
}

func TestStatusCommentGolden(t *testing.T) {
	t.Parallel()
	for name, v := range views() {
		got := app.RenderStatus(v)
		path := filepath.Join("testdata", "status_"+name+".golden.md")
		if *update {
			if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%v (run go test ./app -run Golden -update)", err)
		}
		if got != string(want) {
			t.Errorf("%s: rendered comment differs from %s (go test ./app -run Golden -update):\n%s", name, path, got)
		}
	}
}

func TestStatusCommentInvariants(t *testing.T) {
	t.Parallel()
	for name, v := range views() {
		got := app.RenderStatus(v)
		if !strings.HasPrefix(got, app.Marker(v.Plan.ID)+"\n") {
			t.Errorf("%s: does not start with the marker", name)
		}
		if len(got) > 65536 {
			t.Errorf("%s: %d characters, over GitHub's limit", name, len(got))
		}
		if strings.Count(got, "<!--") != 1+strings.Count(strings.Join(lastErrors(v), ""), "<!--") {
			t.Errorf("%s: stray HTML comment", name)
		}
	}
}

func lastErrors(v app.StatusView) []string {
	var out []string
	for _, t := range v.Tasks {
		out = append(out, t.LastError)
	}
	return out
}
