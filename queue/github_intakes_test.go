package queue_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/whilly-go/whilly/plan"
	"github.com/whilly-go/whilly/queue"
	"github.com/whilly-go/whilly/testkit"
)

// BeginIntake lets one delivery take an issue in: the same delivery again resumes it,
// another waits while it is fresh and takes it over once it is stale, a live plan turns
// every delivery away, and a new intake skips plan ids already taken.
func TestBeginIntakeLetsOneDeliveryTakeTheIssueIn(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := queue.NewStore(testkit.DB(t), nil, queue.Config{})
	const ref = "octo/widgets#1"
	id := func(seq int) string { return fmt.Sprintf("widgets-1-%d", seq) }
	begin := func(delivery string, stale time.Duration, want queue.IntakeClaim) {
		t.Helper()
		got, err := st.BeginIntake(ctx, ref, delivery, stale, id)
		if err != nil || got != want {
			t.Fatalf("delivery %s: %+v, %v; want %+v", delivery, got, err, want)
		}
	}
	first := queue.IntakeClaim{Outcome: queue.IntakeStarted, Seq: 1, PlanID: "widgets-1-1"}
	begin("d1", time.Hour, first)
	begin("d1", time.Hour, queue.IntakeClaim{Outcome: queue.IntakeResumed, Seq: 1, PlanID: first.PlanID})
	begin("d2", time.Hour, queue.IntakeClaim{Outcome: queue.IntakeBusy, Seq: 1, PlanID: first.PlanID})
	begin("d2", time.Nanosecond, queue.IntakeClaim{Outcome: queue.IntakeResumed, Seq: 1, PlanID: first.PlanID})
	begin("d1", time.Hour, queue.IntakeClaim{Outcome: queue.IntakeBusy, Seq: 1, PlanID: first.PlanID}) // d2 took it over

	p := &plan.Plan{ID: first.PlanID, Name: "issue 1", Tasks: []plan.Task{goodTask("T1")}}
	if _, err := st.Apply(ctx, p, false, queue.ImportOptions{GitHubIssueRef: ref}); err != nil {
		t.Fatal(err)
	}
	if err := st.FinishIntake(ctx, ref, 1, queue.IntakePlanned, "block", nil); err != nil {
		t.Fatal(err)
	}
	begin("d3", time.Hour, queue.IntakeClaim{Outcome: queue.IntakeLive, PlanID: first.PlanID})

	// Another issue whose first plan id is a plan already: its intake takes the next.
	importTasks(t, st, &plan.Plan{ID: "gadgets-2-1", Name: "by hand", Tasks: []plan.Task{goodTask("T1")}})
	got, err := st.BeginIntake(ctx, "octo/gadgets#2", "d4", time.Hour, func(seq int) string { return fmt.Sprintf("gadgets-2-%d", seq) })
	if want := (queue.IntakeClaim{Outcome: queue.IntakeStarted, Seq: 2, PlanID: "gadgets-2-2"}); err != nil || got != want {
		t.Fatalf("intake of an issue whose first plan id is taken: %+v, %v; want %+v", got, err, want)
	}
}
