package queue_test

import (
	"context"
	"errors"
	"testing"

	"github.com/whilly-go/whilly/plan"
	"github.com/whilly-go/whilly/queue"
)

func spent(t *testing.T, st *queue.Store, planID string) plan.USD {
	t.Helper()
	p, err := st.GetPlan(context.Background(), planID)
	if err != nil {
		t.Fatal(err)
	}
	return p.Spent
}

// A report whose answer was lost is sent again with the same lease: COMPLETE, FAIL and
// RELEASE are each answered with the task, and nothing is written or charged twice.
// Another worker's lease, or a lease nobody reported, is still refused.
func TestRetriedReportsAreAnsweredNotRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, cost := range []plan.USD{0, 500000} { // the batched path, and the careful one
		st, pool := newStore(t)
		p := widePlan("retried", 3)
		for i := range p.Tasks {
			p.Tasks[i].MaxAttempts = 1
		}
		importTasks(t, st, p)
		w, other := register(t, st), register(t, st)

		c := mustClaim(t, st, w, "retried")
		l := leaseOf(c, w.ID)
		for range 2 {
			if got, err := st.Complete(ctx, l, queue.CompleteInput{Cost: cost}); err != nil || got.Status != plan.StatusDone {
				t.Fatalf("complete (cost %s) = %s, %v; want DONE", cost, got.Status, err)
			}
		}
		if n := countEvents(t, pool, "retried", queue.EventComplete); n != 1 {
			t.Errorf("%d COMPLETE events, want 1", n)
		}
		if s := spent(t, st, "retried"); s != cost {
			t.Errorf("spent %s, want %s: charged once", s, cost)
		}
		stolen := l
		stolen.WorkerID = other.ID
		stolen.LeaseID = "00000000-0000-4000-8000-000000000000"
		if _, err := st.Complete(ctx, stolen, queue.CompleteInput{}); !errors.Is(err, queue.ErrLeaseLost) {
			t.Errorf("complete under a lease never granted = %v, want ErrLeaseLost", err)
		}

		f := mustClaim(t, st, w, "retried")
		for range 2 {
			if got, err := st.Fail(ctx, leaseOf(f, w.ID), queue.FailInput{Cost: cost, Reason: "agent_error"}); err != nil || got.Status != plan.StatusFailed {
				t.Fatalf("fail = %s, %v; want FAILED", got.Status, err)
			}
		}
		if n := countEvents(t, pool, "retried", queue.EventFail); n != 1 {
			t.Errorf("%d FAIL events, want 1", n)
		}

		r := mustClaim(t, st, w, "retried")
		for range 2 {
			if got, err := st.Release(ctx, leaseOf(r, w.ID), "shutdown"); err != nil || got.Status != plan.StatusPending {
				t.Fatalf("release = %s, %v; want PENDING", got.Status, err)
			}
		}
		if n := countEvents(t, pool, "retried", queue.EventRelease); n != 1 {
			t.Errorf("%d RELEASE events, want 1", n)
		}
		if s := spent(t, st, "retried"); s != 2*cost {
			t.Errorf("spent %s, want %s", s, 2*cost)
		}
	}
}

// A claim retried with its key after the answer was lost gets the same task and lease;
// another key gets another task.
func TestClaimRetriedWithItsKeyGetsTheSameTask(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, pool := newStore(t)
	importTasks(t, st, widePlan("keyed", 3))
	w := register(t, st)
	req := queue.ClaimRequest{WorkerID: w.ID, PlanID: "keyed", Key: "6f1d3c1e-8a0b-4c1e-9a55-0d1f2e3a4b5c"}
	first, err := st.Claim(ctx, req)
	if err != nil || first == nil {
		t.Fatalf("claim = %v, %v", first, err)
	}
	if first.Lease.ID != req.Key {
		t.Errorf("lease %s, want the key %s as its id", first.Lease.ID, req.Key)
	}
	again, err := st.HeldClaim(ctx, req)
	if err != nil || again == nil || again.Task.ID != first.Task.ID || again.Lease.ID != first.Lease.ID {
		t.Fatalf("held claim = %+v, %v; want task %s again", again, err, first.Task.ID)
	}
	if again.Plan.ID != "keyed" {
		t.Errorf("held claim's plan = %q", again.Plan.ID)
	}
	if n := countEvents(t, pool, "keyed", queue.EventClaim); n != 1 {
		t.Errorf("%d CLAIM events, want 1", n)
	}
	other := req
	other.Key = "7f1d3c1e-8a0b-4c1e-9a55-0d1f2e3a4b5c"
	if c, err := st.HeldClaim(ctx, other); err != nil || c != nil {
		t.Errorf("held claim under an unused key = %v, %v; want none", c, err)
	}
	if c := mustClaim(t, st, w, "keyed"); c.Task.ID == first.Task.ID {
		t.Errorf("a claim without the key got %s again", c.Task.ID)
	}
}

// An attempt whose lease ended before its report went through still charges its cost,
// once, and only to the worker the lease was granted to.
func TestChargeLostChargesAnAttemptOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, pool := newStore(t)
	importTasks(t, st, widePlan("lost", 2))
	w, other := register(t, st), register(t, st)
	c := mustClaim(t, st, w, "lost")
	if _, err := pool.Exec(ctx, `UPDATE tasks SET lease_expires_at = now() - interval '1 second' WHERE plan_id = 'lost' AND id = $1`, c.Task.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := st.ReapExpiredLeases(ctx); err != nil {
		t.Fatal(err)
	}
	l := leaseOf(c, w.ID)
	if _, err := st.Complete(ctx, l, queue.CompleteInput{Cost: 250000}); !errors.Is(err, queue.ErrLeaseLost) {
		t.Fatalf("complete after expiry = %v, want ErrLeaseLost", err)
	}
	stolen := l
	stolen.WorkerID = other.ID
	if _, err := st.ChargeLost(ctx, stolen, 250000, "lease_lost"); !errors.Is(err, queue.ErrLeaseLost) {
		t.Errorf("charge by another worker = %v, want ErrLeaseLost", err)
	}
	for i, want := range []bool{true, false} {
		res, err := st.ChargeLost(ctx, l, 250000, "lease_lost")
		if err != nil || res.Charged != want {
			t.Fatalf("charge #%d = %+v, %v; want charged=%v", i+1, res, err, want)
		}
	}
	if s := spent(t, st, "lost"); s != 250000 {
		t.Errorf("spent %s, want 0.25", s)
	}
	task, err := st.GetTask(ctx, "lost", c.Task.ID)
	if err != nil || task.Cost != 250000 {
		t.Errorf("task cost %s, %v; want 0.25", task.Cost, err)
	}
	// A completion that went through was charged by itself.
	d := mustClaim(t, st, w, "lost")
	if _, err := st.Complete(ctx, leaseOf(d, w.ID), queue.CompleteInput{Cost: 100000}); err != nil {
		t.Fatal(err)
	}
	if res, err := st.ChargeLost(ctx, leaseOf(d, w.ID), 100000, "lease_lost"); err != nil || res.Charged {
		t.Errorf("charge of a completed attempt = %+v, %v; want not charged again", res, err)
	}
	if s := spent(t, st, "lost"); s != 350000 {
		t.Errorf("spent %s, want 0.35", s)
	}
}

// A worker restarted under its id hands back what it held, attempts not counted.
func TestReleaseHeldHandsBackAWorkersTasks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, pool := newStore(t)
	importTasks(t, st, widePlan("held", 3))
	w, other := register(t, st), register(t, st)
	mustClaim(t, st, w, "held")
	mustClaim(t, st, w, "held")
	kept := mustClaim(t, st, other, "held")
	n, err := st.ReleaseHeld(ctx, w.ID, "worker_restarted")
	if err != nil || n != 2 {
		t.Fatalf("release held = %d, %v; want 2", n, err)
	}
	var pending, attempts int
	if err := pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE status = 'PENDING'), sum(attempts) FROM tasks WHERE plan_id = 'held'`).Scan(&pending, &attempts); err != nil {
		t.Fatal(err)
	}
	if pending != 2 || attempts != 1 {
		t.Errorf("%d pending, %d attempts; want 2 and 1 (only %s's claim counts)", pending, attempts, kept.Task.ID)
	}
}
