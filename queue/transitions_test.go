package queue_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/whilly-go/whilly/plan"
	"github.com/whilly-go/whilly/queue"
	"github.com/whilly-go/whilly/testkit"
)

// transitionOf names the plan.Transition each task event that comes with a status change
// stands for. task.updated is a re-import that lifts the gate's rejection of a SKIPPED
// task: an operator's RESET.
var transitionOf = map[string]plan.Transition{
	queue.EventClaim: plan.TransitionClaim, queue.EventStart: plan.TransitionStart,
	queue.EventComplete: plan.TransitionComplete, queue.EventFail: plan.TransitionFail,
	queue.EventRetry: plan.TransitionRetry, queue.EventRelease: plan.TransitionRelease,
	queue.EventCancel: plan.TransitionCancel, queue.EventReset: plan.TransitionReset,
	queue.EventTaskSkipped: plan.TransitionSkip, queue.EventTaskUpdated: plan.TransitionReset,
}

// TestEverySQLTransitionIsOneOfPlanNext pins the status changes the SQL makes to the state
// machine of package plan (issue 15: one state machine). A trigger records every change of
// a task's status with its transaction; the store's operations then walk every
// transition — claim, start, complete (batched and charged), retry, final failure,
// release, expired lease, revoked worker, cancel, reset of a task, of a plan, /whilly
// retry, the gate's skip and a re-import that lifts it. The task events of a transaction
// that name a transition, in order, must lead through the task's changes in it under
// plan.Next, each change taking one or more of them.
func TestEverySQLTransitionIsOneOfPlanNext(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testkit.DB(t)
	_, err := pool.Exec(ctx, `
		CREATE TABLE test_status_changes (n bigserial, xid bigint NOT NULL DEFAULT txid_current() % 4294967296,
			plan_id text, task_id text, old text, new text);
		CREATE FUNCTION test_status_change() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN INSERT INTO test_status_changes (plan_id, task_id, old, new) VALUES (NEW.plan_id, NEW.id, OLD.status, NEW.status); RETURN NULL; END $$;
		CREATE TRIGGER test_status_change AFTER UPDATE ON tasks FOR EACH ROW
			WHEN (OLD.status IS DISTINCT FROM NEW.status) EXECUTE FUNCTION test_status_change();`)
	if err != nil {
		t.Fatal(err)
	}
	st := queue.NewStore(pool, nil, queue.Config{BackoffBase: time.Millisecond, BackoffMax: time.Millisecond})
	w := register(t, st)
	claim := func(planID string) queue.Lease {
		t.Helper()
		return leaseOf(mustClaim(t, st, w, planID), w.ID)
	}
	no := false
	steps := []struct {
		name string
		do   func() error
	}{
		{"claim, start, complete", func() error {
			l := claim("life")
			if _, err := st.Start(ctx, l); err != nil {
				return err
			}
			_, err := st.Complete(ctx, l, queue.CompleteInput{})
			return err
		}},
		{"complete, and claim and start the next in the same transaction", func() error {
			l := claim("life")
			_, next, err := st.CompleteAndClaim(ctx, l, queue.CompleteInput{},
				queue.ClaimRequest{WorkerID: w.ID, PlanID: "life", Key: "5b1f0a52-93c4-4e0e-9a0b-2f8d1c6e7a41", Start: true})
			if err == nil && (next == nil || next.Task.Status != plan.StatusInProgress) {
				return fmt.Errorf("the next task came back %+v, not started", next)
			}
			if err == nil {
				_, err = st.Complete(ctx, leaseOf(next, w.ID), queue.CompleteInput{})
			}
			return err
		}},
		{"complete with a cost", func() error { _, err := st.Complete(ctx, claim("life"), queue.CompleteInput{Cost: 10}); return err }},
		{"retry", func() error { _, err := st.Fail(ctx, claim("life"), queue.FailInput{Reason: "flaky"}); return err }},
		{"final failure", func() error {
			_, err := st.Fail(ctx, claim("life"), queue.FailInput{Reason: "broken", Retryable: &no})
			return err
		}},
		{"release", func() error { _, err := st.Release(ctx, claim("life"), "shutdown"); return err }},
		{"expired lease", func() error {
			claim("life")
			expireLeases(t, pool, "life")
			_, err := st.ReapExpiredLeases(ctx)
			return err
		}},
		{"revoked worker", func() error {
			claim("life")
			_, err := st.RevokeWorker(ctx, w.ID)
			w = register(t, st)
			return err
		}},
		{"reset of a failed task", func() error {
			ids, err := failedIDs(ctx, pool, "life")
			if err == nil {
				_, err = st.ResetTask(ctx, "life", ids[0], false, "ops")
			}
			return err
		}},
		{"/whilly retry of a failed task", func() error {
			_, err := st.Fail(ctx, claim("life"), queue.FailInput{Reason: "broken", Retryable: &no})
			if err != nil {
				return err
			}
			ids, err := failedIDs(ctx, pool, "life")
			if err == nil {
				_, err = st.RetryTasks(ctx, "life", ids, "try again", "ops")
			}
			return err
		}},
		{"cancel", func() error {
			claim("life")
			_, err := st.CancelPlan(ctx, "life", "enough", "ops")
			return err
		}},
		{"reset of the plan", func() error { _, err := st.ResetPlan(ctx, "life", queue.ResetOptions{}); return err }},
		{"the gate's skip", func() error { _, err := st.Apply(ctx, mustParse(t, shopPlan), true, queue.ImportOptions{}); return err }},
		{"a re-import that lifts the skip", func() error {
			fixed := strings.Replace(shopPlan, `"description": "short"`, `"description": "Describe the GPU task well enough for the gate to let it run", "acceptance_criteria": ["it runs"], "test_steps": ["go test ./gpu"]`, 1)
			_, err := st.Apply(ctx, mustParse(t, fixed), true, queue.ImportOptions{})
			return err
		}},
	}
	importTasks(t, st, widePlan("life", 8))
	for _, s := range steps {
		if err := s.do(); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
	}

	// A transaction may change a task twice (a handoff claims and starts it): its k-th
	// change goes with its k-th event that names a transition.
	rows, err := pool.Query(ctx, `SELECT c.plan_id, c.task_id, c.old, c.new,
			coalesce(array_agg(e.type ORDER BY e.id) FILTER (WHERE e.id IS NOT NULL), '{}'),
			row_number() OVER (PARTITION BY c.plan_id, c.task_id, c.xid ORDER BY c.n),
			count(*) OVER (PARTITION BY c.plan_id, c.task_id, c.xid)
		FROM test_status_changes c
		LEFT JOIN events e ON e.plan_id = c.plan_id AND e.task_id = c.task_id AND e.xmin::text::bigint = c.xid
		GROUP BY c.n, c.plan_id, c.task_id, c.xid, c.old, c.new ORDER BY c.n`)
	if err != nil {
		t.Fatal(err)
	}
	type change struct {
		plan, task string
		old, new   plan.Status
		events     []string
		k, of      int // the k-th of the task's changes in its transaction, of that many
	}
	changes, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (change, error) {
		var c change
		err := r.Scan(&c.plan, &c.task, &c.old, &c.new, &c.events, &c.k, &c.of)
		return c, err
	})
	if err != nil {
		t.Fatal(err)
	}
	// A task's changes in one transaction take its transitions in order, each change one or
	// more of them (a handoff's claim leases and starts its task in one update: CLAIM then
	// START), and plan.Next over them must lead from each change's old status to its new.
	seen := map[plan.Transition]bool{}
	var (
		ts   []plan.Transition // the transitions of the current task's transaction
		used int               // how many of them its earlier changes took
	)
	for _, c := range changes {
		if c.k == 1 {
			ts, used = nil, 0
			for _, e := range c.events {
				if tr, ok := transitionOf[e]; ok {
					ts = append(ts, tr)
				}
			}
		}
		status, took := c.old, 0
		for used < len(ts) && (took == 0 || status != c.new) {
			to, err := plan.Next(status, ts[used])
			if err != nil {
				break
			}
			seen[ts[used]] = true
			status, used, took = to, used+1, took+1
		}
		if took == 0 || status != c.new || (c.k == c.of && used != len(ts)) {
			t.Errorf("task %s of %s went %s → %s (change %d of %d in its transaction) with events %v: plan.Next over them does not lead there, each event one step", c.task, c.plan, c.old, c.new, c.k, c.of, c.events)
		}
	}
	for _, tr := range []plan.Transition{plan.TransitionClaim, plan.TransitionStart, plan.TransitionComplete, plan.TransitionFail,
		plan.TransitionRetry, plan.TransitionRelease, plan.TransitionSkip, plan.TransitionCancel, plan.TransitionReset} {
		if !seen[tr] {
			t.Errorf("no status change under %s was exercised", tr)
		}
	}
}

// failedIDs returns the FAILED tasks of a plan.
func failedIDs(ctx context.Context, pool interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}, planID string) ([]string, error) {
	rows, err := pool.Query(ctx, `SELECT id FROM tasks WHERE plan_id = $1 AND status = 'FAILED' ORDER BY ord`, planID)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}
