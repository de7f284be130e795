package queue_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/whilly-go/whilly/plan"
	"github.com/whilly-go/whilly/queue"
)

func TestImportSettlesThePlanStatus(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, pool := newStore(t)
	done := goodTask("A")
	done.Status = plan.StatusDone
	skipped := goodTask("B")
	skipped.Status = plan.StatusSkipped
	for _, p := range []*plan.Plan{
		{ID: "empty", Name: "empty"},
		{ID: "finished", Name: "finished", Tasks: []plan.Task{done, skipped}},
	} {
		res, err := st.Import(ctx, p, queue.ImportOptions{})
		if err != nil || res.Status != plan.PlanDone {
			t.Fatalf("import %s = %+v, %v; want DONE", p.ID, res, err)
		}
		if pi, _ := st.GetPlan(ctx, p.ID); pi.Status != plan.PlanDone {
			t.Fatalf("plan %s is %s, want DONE", p.ID, pi.Status)
		}
	}
	// An empty plan made to receive tasks is not DONE.
	if pi, err := st.CreatePlan(ctx, "created", "created", nil); err != nil || pi.Status != plan.PlanActive {
		t.Fatalf("created plan = %s, %v; want ACTIVE", pi.Status, err)
	}
	// A task added to the DONE plan runs: the plan is ACTIVE again and it is claimable.
	more := &plan.Plan{ID: "finished", Name: "finished", Tasks: []plan.Task{done, skipped, goodTask("C", "A")}}
	res, err := st.Import(ctx, more, queue.ImportOptions{})
	if err != nil || !res.Reopened || res.Status != plan.PlanActive || res.TasksCreated != 1 {
		t.Fatalf("import of a new task into a DONE plan = %+v, %v; want it reopened", res, err)
	}
	if n := countEvents(t, pool, "finished", queue.EventPlanReopened); n != 1 {
		t.Fatalf("plan.reopened events = %d, want 1", n)
	}
	w := register(t, st)
	c := mustClaim(t, st, w, "finished")
	if _, err := st.Complete(ctx, leaseOf(c, w.ID), queue.CompleteInput{}); err != nil {
		t.Fatal(err)
	}
	if pi, _ := st.GetPlan(ctx, "finished"); pi.Status != plan.PlanDone {
		t.Fatalf("plan after its new task = %s, want DONE", pi.Status)
	}
}

func TestReimportUpdatesTasksThatHaveNotRunAndRefusesTheOthers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, pool := newStore(t)
	p := gatePlan()
	p.Tasks = append(p.Tasks, goodTask("LATER", "A"))
	if _, err := st.Apply(ctx, p, true, queue.ImportOptions{}); err != nil {
		t.Fatal(err)
	}
	before := countEvents(t, pool, "gate", "")
	// The rejected task is fixed in the file, and a pending one is reworded.
	edited := gatePlan()
	edited.Tasks[1] = goodTask("CLEANUP-1", "A")
	later := goodTask("LATER", "A")
	later.Description += ", now with docs"
	edited.Tasks = append(edited.Tasks, later)
	res, err := st.Apply(ctx, edited, true, queue.ImportOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(res.Import.TasksUpdated, ",") != "CLEANUP-1,LATER" || res.Rejected != 0 {
		t.Fatalf("re-apply = %+v; want CLEANUP-1 and LATER updated and nothing rejected", res)
	}
	cleanup, err := st.GetTask(ctx, "gate", "CLEANUP-1")
	if err != nil || cleanup.Status != plan.StatusPending || cleanup.Gate.Decision != plan.DecisionAllow ||
		cleanup.Description != edited.Tasks[1].Description {
		t.Fatalf("CLEANUP-1 after the fix = %s %s %q, %v; want the new definition, PENDING and allowed",
			cleanup.Status, cleanup.Gate.Decision, cleanup.Description, err)
	}
	if n := countEvents(t, pool, "gate", queue.EventTaskUpdated); n != 2 {
		t.Fatalf("task.updated events = %d, want 2", n)
	}
	// The same file again changes nothing and writes nothing but plan.applied.
	res, err = st.Apply(ctx, edited, true, queue.ImportOptions{})
	if err != nil || len(res.Import.TasksUpdated) != 0 {
		t.Fatalf("third apply = %+v, %v; want nothing updated", res, err)
	}
	if n := countEvents(t, pool, "gate", ""); n != before+2+1+1 {
		t.Fatalf("events = %d, want %d: two updates and two plan.applied", n, before+4)
	}

	// A task that ran keeps its definition: the whole import is refused, naming it.
	w := register(t, st)
	c := mustClaim(t, st, w, "gate")
	if _, err := st.Complete(ctx, leaseOf(c, w.ID), queue.CompleteInput{}); err != nil {
		t.Fatal(err)
	}
	edited.Tasks[0].Description += " (changed after it ran)"
	edited.Tasks[2].Description += " again"
	_, err = st.Import(ctx, edited, queue.ImportOptions{})
	if !errors.Is(err, queue.ErrConflict) || !strings.Contains(err.Error(), "A is DONE and the file changes its description") {
		t.Fatalf("import changing a DONE task: %v; want a conflict naming A", err)
	}
	if later, _ := st.GetTask(ctx, "gate", "LATER"); strings.HasSuffix(later.Description, " again") {
		t.Fatalf("a refused import changed LATER: %q", later.Description)
	}
}
