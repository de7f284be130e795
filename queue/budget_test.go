package queue_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/whilly-go/whilly/app"
	"github.com/whilly-go/whilly/plan"
	"github.com/whilly-go/whilly/queue"
	"github.com/whilly-go/whilly/testkit"
)

// TestBudgetLoweredBelowSpentPausesThePlan: a budget lowered to what the plan already
// spent, or below, pauses it on budget exactly as crossing it does — one
// plan.budget_exceeded, PAUSED (budget), the label whilly-budget-exceeded, the
// status comment marked — and the change is written as plan.budget_lowered, not
// plan.budget_raised. Raising it again resumes the plan.
func TestBudgetLoweredBelowSpentPausesThePlan(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testkit.DB(t)
	var marked atomic.Int32
	st := queue.NewStore(pool, nil, queue.Config{Hooks: queue.Hooks{PlanChanged: func(context.Context, pgx.Tx, queue.ChangedPlan) error {
		marked.Add(1)
		return nil
	}}})
	budget := plan.USD(5_000_000)
	p := &plan.Plan{ID: "lower", Name: "lower", Budget: &budget, Tasks: []plan.Task{goodTask("A"), goodTask("B")}}
	importTasks(t, st, p)
	w := register(t, st)
	c := mustClaim(t, st, w, "lower")
	if _, err := st.Complete(ctx, leaseOf(c, w.ID), queue.CompleteInput{Cost: 1_000_000}); err != nil {
		t.Fatal(err)
	}
	marked.Store(0)
	lowered := plan.USD(500_000)
	pi, err := st.SetBudget(ctx, "lower", &lowered, "ops")
	if err != nil {
		t.Fatal(err)
	}
	if pi.Status != plan.PlanPaused || pi.PauseReason != queue.PauseBudget {
		t.Fatalf("plan after lowering its budget below what it spent: %s (%s); want PAUSED (budget)", pi.Status, pi.PauseReason)
	}
	if l := app.LabelFor(pi); l != app.LabelBudgetExceeded {
		t.Errorf("issue label = %s, want %s", l, app.LabelBudgetExceeded)
	}
	if marked.Load() == 0 {
		t.Error("the plan was not marked changed: its status comment and labels would not follow")
	}
	for typ, want := range map[string]int{queue.EventPlanBudgetExceeded: 1, queue.EventPlanBudgetLowered: 1, queue.EventPlanBudgetRaised: 0} {
		if n := countEvents(t, pool, "lower", typ); n != want {
			t.Errorf("%s events = %d, want %d", typ, n, want)
		}
	}
	var payload map[string]any
	if err := pool.QueryRow(ctx, `SELECT payload FROM events WHERE plan_id = 'lower' AND type = $1`, queue.EventPlanBudgetExceeded).Scan(&payload); err != nil {
		t.Fatal(err)
	}
	if payload["budget_usd"] != "0.5" || payload["spent_usd"] != "1" || payload["by"] != "ops" {
		t.Errorf("plan.budget_exceeded payload = %v", payload)
	}
	if c, err := st.Claim(ctx, queue.ClaimRequest{WorkerID: w.ID, PlanID: "lower"}); err != nil || c != nil {
		t.Fatalf("claim after the lowering = %v, %v; want nothing", c, err)
	}
	// Lowered again, still below: nothing more is written but the change.
	less := plan.USD(400_000)
	if pi, err = st.SetBudget(ctx, "lower", &less, "ops"); err != nil || pi.Status != plan.PlanPaused {
		t.Fatalf("second lowering: %s, %v", pi.Status, err)
	}
	if n := countEvents(t, pool, "lower", queue.EventPlanBudgetExceeded); n != 1 {
		t.Errorf("plan.budget_exceeded events after a second lowering = %d, want 1", n)
	}
	if pi, err = st.SetBudget(ctx, "lower", &budget, "ops"); err != nil || pi.Status != plan.PlanActive {
		t.Fatalf("raised again: %s, %v; want ACTIVE", pi.Status, err)
	}
	if n := countEvents(t, pool, "lower", queue.EventPlanBudgetRaised); n != 1 {
		t.Errorf("plan.budget_raised events = %d, want 1", n)
	}
}
