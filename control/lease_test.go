package control_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/whilly-go/whilly/control/client"
	"github.com/whilly-go/whilly/plan"
	"github.com/whilly-go/whilly/queue"
)

// TestAReportOnAnEndedLeaseIsAReplayOnlyWhenItIsTheSameReport: a lease its holder ended
// with a report (COMPLETE, FAIL, RELEASE) answers the same report again with 200 (its
// first answer was lost) and changes nothing; any other report on it is 409 and changes
// nothing — also when another worker holds the task again by then. Every pair is driven
// over HTTP.
func TestAReportOnAnEndedLeaseIsAReplayOnlyWhenItIsTheSameReport(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{queue: queue.Config{BackoffBase: time.Millisecond, BackoffMax: time.Millisecond}})
	ctx := context.Background()
	kinds := []string{"COMPLETE", "FAIL", "RELEASE"}
	report := func(w *client.Client, planID, taskID, lease, kind string) (plan.Status, error) {
		switch kind {
		case "COMPLETE":
			res, err := w.Complete(ctx, planID, taskID, client.CompleteRequest{LeaseID: lease, Result: "done"})
			return res.Status, err
		case "FAIL":
			res, err := w.Fail(ctx, planID, taskID, client.FailRequest{LeaseID: lease, Reason: "agent_error"})
			return res.Status, err
		default:
			res, err := w.Release(ctx, planID, taskID, client.LeaseRequest{LeaseID: lease, Reason: "shutdown"})
			return res.Status, err
		}
	}
	n := 0
	for _, first := range kinds {
		for _, second := range kinds {
			for _, reclaimed := range []bool{false, true} {
				if reclaimed && first == "COMPLETE" {
					continue // a DONE task is not claimed again
				}
				n++
				planID := fmt.Sprintf("lease-%d", n)
				name := fmt.Sprintf("%s then %s", first, second)
				if reclaimed {
					name += ", claimed by another worker in between"
				}
				e.importPlan(planDoc(planID, "T1"))
				w, c := e.runningTask(planID)
				st, err := report(w, planID, "T1", c.Lease.ID, first)
				if err != nil {
					t.Fatalf("%s: the first report: %v", name, err)
				}
				want := map[string]plan.Status{"COMPLETE": plan.StatusDone, "FAIL": plan.StatusPending, "RELEASE": plan.StatusPending}[first]
				if st != want {
					t.Fatalf("%s: the first report left the task %s, want %s", name, st, want)
				}
				if reclaimed {
					other, _ := e.worker()
					c2, err := other.Claim(ctx, client.ClaimRequest{PlanID: planID, WaitSeconds: 10})
					if err != nil || c2 == nil || c2.Task.ID != "T1" {
						t.Fatalf("%s: another worker's claim: %+v, %v", name, c2, err)
					}
					want = plan.StatusClaimed
				}
				before := e.stateDigest()
				st, err = report(w, planID, "T1", c.Lease.ID, second)
				switch {
				case first == second && err != nil:
					t.Errorf("%s: %v; want 200, the first answer again", name, err)
				case first == second && st != want:
					t.Errorf("%s: answered with the task %s, want %s", name, st, want)
				case first != second && client.StatusOf(err) != 409:
					t.Errorf("%s: answered %v (task %s); want 409", name, err, st)
				case first != second && !strings.Contains(err.Error(), "was ended by a "+first+" report"):
					t.Errorf("%s: refused with %q; want it to say how the lease ended", name, err)
				}
				if after := e.stateDigest(); after != before {
					t.Errorf("%s: the second report changed the tasks, plans or events", name)
				}
				tasks, err := e.store.TasksByID(ctx, planID, []string{"T1"})
				if err != nil || len(tasks) != 1 {
					t.Fatalf("read the task: %v, %v", tasks, err)
				}
				if task := tasks[0]; task.Status != want {
					t.Errorf("%s: the task is %s, want %s", name, task.Status, want)
				}
			}
		}
	}
}
