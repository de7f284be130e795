package queue_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/whilly-go/whilly/plan"
	"github.com/whilly-go/whilly/queue"
)

// importFor imports p as the plan of a GitHub installation (0: a plan without GitHub).
func importFor(t testing.TB, st *queue.Store, p *plan.Plan, installation int64) {
	t.Helper()
	opts := queue.ImportOptions{}
	if installation != 0 {
		p.Repo = fmt.Sprintf("owner%d/repo", installation)
		opts.GitHubIssueRef, opts.InstallationID = fmt.Sprintf("%s#%s", p.Repo, p.ID), installation
	}
	if _, err := st.Import(context.Background(), p, opts); err != nil {
		t.Fatalf("import %s: %v", p.ID, err)
	}
}

// claimAny claims n tasks one after the other, from any plan, and returns their plans.
func claimAny(t *testing.T, st *queue.Store, w queue.Worker, n int) []string {
	t.Helper()
	var plans []string
	for range n {
		c, err := st.Claim(context.Background(), queue.ClaimRequest{WorkerID: w.ID, Labels: w.Labels})
		if err != nil || c == nil {
			t.Fatalf("claim %d = %v, %v; want a task", len(plans)+1, c, err)
		}
		plans = append(plans, c.Task.PlanID)
	}
	return plans
}

// One installation's 1,000-task plan must not hold another's one-task plan behind it
// (issue 15): the small plan's task is claimed within one round of claims (one claim per
// plan with work), whether it arrives before the big plan is touched or halfway through.
// Plans without GitHub count as one installation and take turns the same way.
func TestFairShareServesAOneTaskPlanWithinOneRound(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name           string
		big, small     int64 // installations; 0: no GitHub
		claimedBefore  int   // tasks of the big plan claimed before the small plan arrives
		wantWithinNext int
	}{
		{name: "two installations", big: 1, small: 2, wantWithinNext: 2},
		{name: "two installations, big plan under way", big: 1, small: 2, claimedBefore: 300, wantWithinNext: 2},
		{name: "two plans without GitHub", wantWithinNext: 2},
		{name: "two plans without GitHub, big plan under way", claimedBefore: 300, wantWithinNext: 2},
		{name: "two plans of one installation", big: 7, small: 7, claimedBefore: 10, wantWithinNext: 2},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			st, _ := newStore(t)
			w := register(t, st)
			importFor(t, st, widePlan("big", 1000), tc.big)
			if tc.claimedBefore > 0 {
				claimAny(t, st, w, tc.claimedBefore)
			}
			importFor(t, st, widePlan("small", 1), tc.small)
			got := claimAny(t, st, w, tc.wantWithinNext)
			found := false
			for _, p := range got {
				found = found || p == "small"
			}
			if !found {
				t.Fatalf("the next %d claims went to %v; want the one-task plan among them", tc.wantWithinNext, got)
			}
		})
	}
}

// Priority still comes first: a critical task of a plan created last is claimed before
// the medium tasks of every other plan, and fair share orders only within a priority.
func TestFairShareKeepsPriorityFirst(t *testing.T) {
	t.Parallel()
	st, _ := newStore(t)
	w := register(t, st)
	importFor(t, st, widePlan("a", 50), 1)
	importFor(t, st, widePlan("b", 50), 2)
	urgent := widePlan("urgent", 3)
	for i := range urgent.Tasks {
		urgent.Tasks[i].Priority = plan.PriorityCritical
	}
	importFor(t, st, urgent, 3)
	got := claimAny(t, st, w, 5)
	want := []string{"urgent", "urgent", "urgent", "a", "b"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("claims went to %v, want %v", got, want)
	}
}

// An installation with several live plans steps each new plan by its number of live
// plans, so that it does not get a whole share per plan: with three plans of
// installation 1 and one of installation 2, installation 2 gets 6 of every 17 claims
// (a share per plan would give it 1 of 4).
func TestFairShareWeighsAnInstallationsPlans(t *testing.T) {
	t.Parallel()
	st, _ := newStore(t)
	w := register(t, st)
	importFor(t, st, widePlan("other", 100), 2)
	for i := range 3 {
		importFor(t, st, widePlan(fmt.Sprintf("busy%d", i), 100), 1)
	}
	got := claimAny(t, st, w, 68)
	n := 0
	for _, p := range got {
		if p == "other" {
			n++
		}
	}
	if n != 24 {
		t.Fatalf("installation 2 got %d of the first 68 claims, want 24 (6 of every 17): %v", n, got)
	}
}

// A new plan's first task goes before the running plans' next ones, and new plans are
// served in the order they came: an issue labelled now gets an agent at once, however
// many plans are under way, and a burst of new issues does not serve the last first.
func TestFairShareServesNewPlansFirstInTheirOrder(t *testing.T) {
	t.Parallel()
	st, _ := newStore(t)
	w := register(t, st)
	for i := range 3 {
		importFor(t, st, widePlan(fmt.Sprintf("running%d", i), 50), int64(i+1))
	}
	claimAny(t, st, w, 10)
	newPlansServedFirst(t, st, w, "after 10 claims of running plans")
}

// newPlansServedFirst imports three new plans, the last of installation 1 (which has a
// plan under way), and fails unless the next three claims take their first tasks, in
// that order.
func newPlansServedFirst(t *testing.T, st *queue.Store, w queue.Worker, when string) {
	t.Helper()
	importFor(t, st, widePlan("new1", 50), 4)
	importFor(t, st, widePlan("new2", 50), 5)
	importFor(t, st, widePlan("new3", 1), 1)
	got := claimAny(t, st, w, 3)
	if want := []string{"new1", "new2", "new3"}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("%s, the next claims went to %v, want %v", when, got, want)
	}
}

// The same when the head of the claim order lies behind more waiting tasks than an
// import walks past (a plan's 300 tasks wait on one that runs, as an issue's chain waits
// on its running link): new plans still go before the first claimable task, in the order
// they came. The import stops its walk early and places them before the tasks it did not
// look at.
func TestFairShareServesNewPlansFirstBehindManyWaitingTasks(t *testing.T) {
	t.Parallel()
	st, _ := newStore(t)
	w := register(t, st)
	p := &plan.Plan{ID: "waiting", Name: "waiting", Tasks: []plan.Task{goodTask("setup")}}
	for i := range 300 {
		p.Tasks = append(p.Tasks, goodTask(fmt.Sprintf("W%03d", i), "setup"))
	}
	p.Tasks = append(p.Tasks, goodTask("ready"))
	importFor(t, st, p, 1)
	if got := claimAny(t, st, w, 1); got[0] != "waiting" {
		t.Fatalf("first claim went to %v, want the setup task of waiting", got)
	}
	newPlansServedFirst(t, st, w, "with 300 tasks waiting ahead")
}

// An import walks the claim order once for its batch, not once for each of its tasks:
// inlined, share_base was joined after the batch's rows and each of an issue's 20 tasks
// walked again.
func TestAnImportWalksTheClaimOrderOnceForItsBatch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, pool := newStore(t)
	for i := range 30 {
		importTasks(t, st, chainPlan(fmt.Sprintf("busy%02d", i), "T", 20))
	}
	importTasks(t, st, chainPlan("new", "N", 1))
	var batch []map[string]any
	for i := range 20 {
		batch = append(batch, map[string]any{
			"id": fmt.Sprintf("M%02d", i), "ord": 1 + i, "status": "PENDING", "priority": "medium", "description": "more",
			"dependencies": []string{}, "key_files": []string{}, "acceptance_criteria": []string{}, "test_steps": []string{},
			"prd_requirement": "", "labels": []string{}, "max_attempts": 3, "gate_verdict": "ALLOW", "gate_reasons": []any{},
			"rank": plan.PriorityMedium.Rank(), "step": 1 + i,
		})
	}
	doc, err := json.Marshal(batch)
	if err != nil {
		t.Fatal(err)
	}
	// With statistics (autovacuum may have gathered them) the plan differs: hold to them.
	if _, err := pool.Exec(ctx, `ANALYZE tasks`); err != nil {
		t.Fatal(err)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	rows, err := tx.Query(ctx, `EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF) `+queue.InsertTasksSQL, "new", doc, "", []string{})
	if err != nil {
		t.Fatal(err)
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	// The walk belongs to the materialized share_base, which runs once: inside it the
	// planner may probe the index once per live plan (with statistics it does), but it
	// never runs again for each row of the batch.
	base, next, walks := -1, len(lines), 0
	for i, l := range lines {
		switch trimmed := strings.TrimSpace(l); {
		case trimmed == "CTE share_base":
			base = i
		case base >= 0 && next == len(lines) && i > base && strings.HasPrefix(trimmed, "CTE ") && indent(l) == indent(lines[base]):
			next = i
		}
	}
	if base < 0 || base+1 >= len(lines) || !strings.Contains(lines[base+1], "loops=1)") {
		t.Fatalf("the import's share_base is not materialized once:\n%s", strings.Join(lines, "\n"))
	}
	for i, l := range lines {
		if !strings.Contains(l, "tasks_claim_fair") {
			continue
		}
		walks++
		if i < base || i > next {
			t.Errorf("an import walks the claim order outside share_base, once for each row: %q\n%s", strings.TrimSpace(l), strings.Join(lines, "\n"))
		}
	}
	if walks == 0 {
		t.Fatalf("the import does not walk tasks_claim_fair:\n%s", strings.Join(lines, "\n"))
	}
}

func indent(l string) int { return len(l) - len(strings.TrimLeft(l, " ")) }
