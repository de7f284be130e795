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
	awaiting := base
	awaiting.Status, awaiting.PauseReason = plan.PlanPaused, queue.PauseApproval
	review1 := task("AUTH-1", plan.StatusPending, 0, "0", "")
	review1.Priority, review1.Description = plan.PriorityHigh, "Add rate limiting to the /login handler\n(5 attempts per minute per IP)"
	review1.AcceptanceCriteria, review1.TestSteps, review1.KeyFiles = []string{"the 6th attempt within 60 s returns 429"},
		[]string{"go test ./app -run TestLoginRateLimit"}, []string{"app/login.go"}
	review2 := task("AUTH-2", plan.StatusPending, 0, "0", "")
	review2.Priority, review2.Dependencies, review2.Description = plan.PriorityMedium, []string{"AUTH-1"},
		"Return Retry-After\n```\n@everyone <!-- closes the fence? -->"
	return map[string]app.StatusView{
		"awaiting_approval": {Plan: awaiting, Source: app.SourceBlock, Digest: "5f0c2e4b8a7d9c1e3f5a7b9d1c3e5f7a9b1d3f5e7a9c1b3d5f7e9a1c3b5d7f90",
			Tasks: []queue.TaskInfo{review1, review2}},
		"fleet_paused": {Plan: active, FleetPaused: true, Tasks: []queue.TaskInfo{task("AUTH-1", plan.StatusInProgress, 1, "0", "w-1")}},
		"active": {Plan: active, PublicURL: "https://whilly.example.com/", Source: app.SourceBlock,
			Notes: []string{"The plan block's 1 verify command(s) were ignored: commands from an issue never run on workers."},
			Tasks: []queue.TaskInfo{task("AUTH-1", plan.StatusDone, 1, "0.22", "w-lap-1"), failing,
				task("AUTH-3", plan.StatusInProgress, 1, "0", "w-ci-7"), rejected}},
		"done":   {Plan: done, Source: app.SourceTaskList, Tasks: []queue.TaskInfo{task("T1", plan.StatusDone, 1, "0.5", "w-1"), task("T2", plan.StatusDone, 2, "0.504", "w-2")}},
		"paused": {Plan: paused, Source: app.SourceIssue, Tasks: []queue.TaskInfo{task("T1", plan.StatusPending, 1, "5.01", "")}},
		"failed": {Plan: failed, Tasks: []queue.TaskInfo{task("AUTH-1", plan.StatusDone, 1, "0.1", "w-lap-1"), failedTask,
			task("AUTH-3", plan.StatusPending, 0, "0", "")}},
		"many": {Plan: done, PublicURL: "https://whilly.example.com", Tasks: many},
		"pull_draft": {Plan: active, Source: app.SourceTaskList, Pull: &pr,
			Tasks: []queue.TaskInfo{task("T1", plan.StatusDone, 1, "0.1", "w-1"), task("T2", plan.StatusInProgress, 1, "0", "w-1")}},
		"pull_merged": {Plan: done, Pull: &merged, Tasks: []queue.TaskInfo{task("T1", plan.StatusDone, 1, "0.1", "w-1")}},
		"pull_rounds": {Plan: failed, Pull: &pr, Tasks: []queue.TaskInfo{task("T1", plan.StatusDone, 1, "0.1", "w-1"),
			task("pr-round-2", plan.StatusDone, 1, "0.1", "w-1"), task("pr-round-3", plan.StatusSkipped, 0, "0", "")},
			Rounds: queue.PullRounds{StoppedBy: "@alice", Rounds: []queue.Round{
				{Round: 2, Trigger: queue.RoundReview, Summary: "changes requested by @alice in review 42", TaskID: "pr-round-2", Outcome: queue.RoundStarted},
				{Round: 3, Trigger: queue.RoundCheck, Summary: "check suite 9 failure on abc1234: <b>test</b> <!-- x -->", TaskID: "pr-round-3", Outcome: queue.RoundResolved},
				{Round: 4, Trigger: queue.RoundCheck, Summary: "check suite 10 failure", Outcome: queue.RoundRefused,
					Reason: "the pull request had its 2 follow-up rounds (WHILLY_PR_MAX_ROUNDS)"},
			}}},
	}
}

var (
	pr = queue.PullRequest{PlanID: "gh/octo/shop/12", Repo: "octo/shop", Number: 13, URL: "https://github.com/octo/shop/pull/13",
		Branch: "whilly/issue-12", State: queue.PullOpen, Draft: true}
	merged = queue.PullRequest{PlanID: "gh/octo/shop/12", Repo: "octo/shop", Number: 13, URL: "https://github.com/octo/shop/pull/13",
		Branch: "whilly/issue-12", State: queue.PullMerged}
)

func pullViews() map[string]app.PullView {
	base := queue.PlanInfo{ID: "gh/octo/shop/12", Name: "Harden login", Status: plan.PlanActive, GitHubIssueRef: "octo/shop#12", Repo: "octo/shop"}
	describe := func(t queue.TaskInfo, d string) queue.TaskInfo { t.Description = d; return t }
	hostile := describe(task("T3", plan.StatusPending, 0, "0", ""),
		"\n  Ping @everyone <!-- hidden --> and <script>alert(1)</script> in a very long first line that goes on and on well past the cut of the checklist row\nsecond line")
	done := base
	done.Status = plan.PlanDone
	var many []queue.TaskInfo
	for i := range 205 {
		many = append(many, describe(task(fmt.Sprintf("T%03d", i+1), plan.StatusDone, 1, "0", ""), "Fix it"))
	}
	return map[string]app.PullView{
		"active": {Plan: base, Issue: 12, PublicURL: "https://whilly.example.com", Tasks: []queue.TaskInfo{
			describe(task("T1", plan.StatusDone, 1, "0.1", "w-1"), "Add rate limiting to the /login handler"),
			describe(task("T2", plan.StatusInProgress, 1, "0", "w-1"), "Return 429 with Retry-After"),
			hostile,
			describe(task("T4", plan.StatusSkipped, 0, "0", ""), "Rejected by the gate"),
			describe(task("T5", plan.StatusFailed, 3, "0.3", ""), "Flaky thing"),
		}},
		"done": {Plan: done, Issue: 12, Tasks: []queue.TaskInfo{
			describe(task("T1", plan.StatusDone, 1, "0.1", "w-1"), "Add rate limiting to the /login handler"),
			describe(task("T2", plan.StatusDone, 1, "0", "w-1"), "Return 429 with Retry-After"),
		}},
		"many": {Plan: done, Issue: 12, Tasks: many},
	}
}

func TestPullBodyGolden(t *testing.T) {
	t.Parallel()
	for name, v := range pullViews() {
		got := app.RenderPull(v)
		golden(t, name, "pull_"+name+".golden.md", "rendered pull request body", got)
		if !strings.HasPrefix(got, fmt.Sprintf("Closes #%d\n", v.Issue)) || len(got) > 65536 {
			t.Errorf("%s: body does not start with Closes #%d, or is over GitHub's limit", name, v.Issue)
		}
		if strings.Contains(got, "<!--") || strings.Contains(got, "<script") || strings.Contains(got, "@everyone") {
			t.Errorf("%s: a task description leaked markup or a mention:\n%s", name, got)
		}
	}
}

func TestStatusCommentGolden(t *testing.T) {
	t.Parallel()
	for name, v := range views() {
		golden(t, name, "status_"+name+".golden.md", "rendered comment", app.RenderStatus(v))
	}
}

// golden compares got with testdata/file, or writes it there with -update.
func golden(t *testing.T, name, file, what, got string) {
	t.Helper()
	path := filepath.Join("testdata", file)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./app -run Golden -update)", err)
	}
	if got != string(want) {
		t.Errorf("%s: %s differs from %s (go test ./app -run Golden -update):\n%s", name, what, path, got)
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

// lastErrors is the task text the comment shows fenced: last errors, and the whole task
// while the plan awaits approval.
func lastErrors(v app.StatusView) []string {
	var out []string
	for _, t := range v.Tasks {
		out = append(out, t.LastError)
		if v.Digest != "" {
			out = append(out, t.Description)
		}
	}
	return out
}

// Each task that has run links its latest attempt's page (its agent log) in the table; a
// task that has not run links nothing, and ids long enough to overflow the comment get
// no link.
func TestStatusCommentLinksTheLatestAttempts(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", 400)
	v := app.StatusView{Plan: queue.PlanInfo{ID: "p/1", Name: "n", Status: plan.PlanActive}, PublicURL: "https://w.example/",
		Tasks: []queue.TaskInfo{{ID: "A", Status: plan.StatusFailed, Attempts: 3, MaxAttempts: 3}, {ID: "B", Status: plan.StatusPending, MaxAttempts: 3}}}
	got := app.RenderStatus(v)
	if !strings.Contains(got, "| `A` | ❌ failed | [3/3](https://w.example/plans/p%2F1/tasks/A/attempts/3) |") ||
		strings.Contains(got, "tasks/B/attempts") {
		t.Errorf("attempt links:\n%s", got)
	}
	for i := range 150 {
		v.Tasks = append(v.Tasks, queue.TaskInfo{ID: fmt.Sprintf("%s%03d", long, i), Status: plan.StatusDone, Attempts: 1, MaxAttempts: 3})
	}
	if got := app.RenderStatus(v); len(got) > 65536 || strings.Contains(got, long+"000/attempts") {
		t.Errorf("150 tasks with 400-byte ids: %d characters", len(got))
	}
}
