package queue_test

import (
	"context"
	"errors"
	"testing"

	"github.com/whilly-go/whilly/plan"
	"github.com/whilly-go/whilly/queue"
)

// gatePlan is the demo's shape: a strict plan whose last task the gate rejects.
func gatePlan() *plan.Plan {
	bad := plan.Task{ID: "CLEANUP-1", Priority: plan.PriorityLow, Status: plan.StatusPending,
		Description: "Tidy up", Dependencies: []string{"A"}, MaxAttempts: 3}
	return &plan.Plan{ID: "gate", Name: "gate", Tasks: []plan.Task{goodTask("A"), bad}}
}

func TestSoftResetKeepsGateSkipsUnlessAsked(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, _ := newStore(t)
	if _, err := st.Apply(ctx, gatePlan(), true, queue.ImportOptions{}); err != nil {
		t.Fatal(err)
	}
	w := register(t, st)
	c := mustClaim(t, st, w, "gate")
	if _, err := st.Complete(ctx, leaseOf(c, w.ID), queue.CompleteInput{}); err != nil {
		t.Fatal(err)
	}
	if pi, _ := st.GetPlan(ctx, "gate"); pi.Status != plan.PlanDone {
		t.Fatalf("plan = %s, want DONE", pi.Status)
	}
	res, err := st.ResetPlan(ctx, "gate", queue.ResetOptions{})
	if err != nil || res.Reset != 1 {
		t.Fatalf("reset = %+v, %v; want only the DONE task reset", res, err)
	}
	if task, _ := st.GetTask(ctx, "gate", "CLEANUP-1"); task.Status != plan.StatusSkipped {
		t.Fatalf("gate-skipped task after reset = %s, want SKIPPED", task.Status)
	}
	res, err = st.ResetPlan(ctx, "gate", queue.ResetOptions{IncludeSkipped: true})
	if err != nil || res.Reset != 1 {
		t.Fatalf("reset --include-skipped = %+v, %v; want the skipped task reset", res, err)
	}
	if task, _ := st.GetTask(ctx, "gate", "CLEANUP-1"); task.Status != plan.StatusPending {
		t.Fatalf("skipped task after reset --include-skipped = %s, want PENDING", task.Status)
	}
}

func TestOutlookSaysWhyNothingIsClaimable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, pool := newStore(t)
	p := gatePlan()
	p.Tasks = append(p.Tasks, goodTask("F"), goodTask("AFTER-F", "F"))
	gpu := goodTask("GPU")
	gpu.Labels = []string{"gpu"}
	p.Tasks = append(p.Tasks, gpu)
	if _, err := st.Apply(ctx, p, true, queue.ImportOptions{}); err != nil {
		t.Fatal(err)
	}
	// The operator un-skips the rejected task: it is PENDING, and the gate still rejects it.
	if _, err := pool.Exec(ctx, `UPDATE tasks SET status = 'PENDING' WHERE id = 'CLEANUP-1'`); err != nil {
		t.Fatal(err)
	}
	w := register(t, st)
	o, err := st.OutlookOf(ctx, "gate", nil, nil)
	if err != nil || o.Claimable != 2 || o.Waiting != 1 || len(o.Held) != 2 || o.Drained() {
		t.Fatalf("outlook at start = %+v, %v; want A and F claimable, AFTER-F waiting, CLEANUP-1 and GPU held", o, err)
	}
	for range 2 {
		c := mustClaim(t, st, w, "gate")
		no := false
		if c.Task.ID == "F" {
			_, err = st.Fail(ctx, leaseOf(c, w.ID), queue.FailInput{Reason: "agent_error", Retryable: &no})
		} else {
			_, err = st.Complete(ctx, leaseOf(c, w.ID), queue.CompleteInput{})
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	o, err = st.OutlookOf(ctx, "gate", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []queue.HeldTask{
		{PlanID: "gate", HeldTask: plan.HeldTask{TaskID: "CLEANUP-1", Hold: plan.HoldGate, Detail: "rejected by the decision gate in a strict plan"}},
		{PlanID: "gate", HeldTask: plan.HeldTask{TaskID: "AFTER-F", Hold: plan.HoldDependencyFailed, Detail: "dependency F is FAILED"}},
		{PlanID: "gate", HeldTask: plan.HeldTask{TaskID: "GPU", Hold: plan.HoldLabels, Detail: "needs labels gpu that this worker lacks"}},
	}
	if !o.Drained() || len(o.Held) != len(want) {
		t.Fatalf("outlook after the run = %+v; want drained with %d held", o, len(want))
	}
	for i := range want {
		if o.Held[i] != want[i] {
			t.Errorf("held[%d] = %+v, want %+v", i, o.Held[i], want[i])
		}
	}
	// Without a plan id it looks at every ACTIVE plan; a GPU worker still has work.
	o, err = st.OutlookOf(ctx, "", []string{"gpu"}, nil)
	if err != nil || o.Claimable != 1 || o.Drained() {
		t.Fatalf("outlook of a gpu worker = %+v, %v; want GPU claimable", o, err)
	}
	// A worker confined to another plan neither waits on this one nor learns of it.
	if o, err := st.OutlookOf(ctx, "", []string{"gpu"}, queue.Scopes{"plan:other"}); err != nil || !o.Drained() || len(o.Held) != 0 {
		t.Fatalf("outlook of a worker scoped elsewhere = %+v, %v; want nothing", o, err)
	}
	if _, err := st.OutlookOf(ctx, "gate", nil, queue.Scopes{"plan:other"}); !errors.Is(err, queue.ErrNotFound) {
		t.Fatalf("outlook of a plan outside the scope: %v, want not found", err)
	}
	if _, err := st.OutlookOf(ctx, "nope", nil, nil); !errors.Is(err, queue.ErrNotFound) {
		t.Fatalf("outlook of an unknown plan: %v, want not found", err)
	}
}
