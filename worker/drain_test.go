package worker_test

import (
	"context"
	"testing"
	"time"

	"github.com/whilly-go/whilly/agent"
	"github.com/whilly-go/whilly/plan"
	"github.com/whilly-go/whilly/queue"
	"github.com/whilly-go/whilly/worker"
)

// TestDrainEndsWhenNothingItMayClaimIsLeft: PENDING tasks the worker can never claim —
// one needs a label it lacks, one the gate rejected in a strict plan, one waits on a
// failed task — no longer keep a --drain worker (an Action step) running until its
// timeout. It stops and names each one with why.
func TestDrainEndsWhenNothingItMayClaimIsLeft(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	good := func(id string, deps ...string) plan.Task {
		return plan.Task{ID: id, Priority: plan.PriorityMedium, Dependencies: deps, KeyFiles: []string{"a.go"},
			Description: "A task long enough for the gate", AcceptanceCriteria: []string{"ok"}, TestSteps: []string{"true"}}
	}
	gpu := good("GPU")
	gpu.Labels = []string{"gpu"}
	fails := good("FAILS")
	fails.MaxAttempts = 1
	p := &plan.Plan{ID: "held", Name: "held", Tasks: []plan.Task{
		good("OK"), gpu, {ID: "WEAK", Priority: plan.PriorityLow, Description: "Tidy up"}, fails, good("AFTER", "FAILS"),
	}}
	if _, err := e.st.Apply(context.Background(), p, true, queue.ImportOptions{}); err != nil {
		t.Fatal(err)
	}
	// The operator brought the rejected task back by hand.
	if _, err := e.st.ResetPlan(context.Background(), "held", queue.ResetOptions{IncludeSkipped: true}); err != nil {
		t.Fatal(err)
	}
	// One worker completes OK; then one whose agent fails every attempt gets FAILS (its
	// only attempt) and has nothing left that it may claim.
	w := e.worker(t, e.url, agent.SimConfig{}, worker.Config{PlanID: "held", Once: true, ClaimWait: time.Second})
	if _, err := w.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st := taskStatus(t, e.st, "held", "OK"); st != plan.StatusDone {
		t.Fatalf("OK is %s, want DONE", st)
	}
	failing := e.worker(t, e.url, agent.SimConfig{FailRate: 1}, worker.Config{PlanID: "held", Drain: true, ClaimWait: time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sum, err := failing.Run(ctx)
	if err != nil {
		t.Fatalf("drain ended with %v (a timeout means it waited for tasks it can never claim)", err)
	}
	if sum.Failed != 1 || sum.HeldTotal != 3 {
		t.Fatalf("summary = %+v; want FAILS failed and three tasks held", sum)
	}
	want := map[string]plan.Hold{"GPU": plan.HoldLabels, "WEAK": plan.HoldGate, "AFTER": plan.HoldDependencyFailed}
	for _, h := range sum.Held {
		if want[h.TaskID] != h.Reason || h.Detail == "" {
			t.Errorf("held %s: %s (%s); want %s", h.TaskID, h.Reason, h.Detail, want[h.TaskID])
		}
	}
}

// TestDrainEndsAtOnceAfterTheLastTask: once the last task this worker may take has ended,
// a --drain worker exits at once, not at the end of a 30-second claim long-poll (each
// drained Action job paid those 30 s of runner time). The plan stays ACTIVE: a task needs
// a label the worker lacks. With --plan and without.
func TestDrainEndsAtOnceAfterTheLastTask(t *testing.T) {
	t.Parallel()
	for _, scoped := range []bool{true, false} {
		name := map[bool]string{true: "plan", false: "any"}[scoped]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			gpu := plan.Task{ID: "GPU", Priority: plan.PriorityMedium, Labels: []string{"gpu"},
				Description: "A task long enough for the gate", AcceptanceCriteria: []string{"ok"}, TestSteps: []string{"true"}}
			ok := gpu
			ok.ID, ok.Labels = "OK", nil
			if _, err := e.st.Import(context.Background(), &plan.Plan{ID: "last", Name: "last", Tasks: []plan.Task{ok, gpu}}, queue.ImportOptions{}); err != nil {
				t.Fatal(err)
			}
			planID := ""
			if scoped {
				planID = "last"
			}
			ended := make(chan time.Time, 1)
			w := e.worker(t, e.url, agent.SimConfig{Delay: 200 * time.Millisecond}, worker.Config{PlanID: planID, Drain: true,
				OnResult: func(worker.Outcome) { ended <- time.Now() }})
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			sum, err := w.Run(ctx)
			exited := time.Now()
			if err != nil || sum.Done != 1 || sum.HeldTotal != 1 {
				t.Fatalf("drain = %+v, %v; want OK done and GPU held", sum, err)
			}
			if took := exited.Sub(<-ended); took > 5*time.Second {
				t.Fatalf("the drained worker exited %s after its last task ended; want it at once, not after the claim's long-poll", took.Round(time.Millisecond))
			}
		})
	}
}
