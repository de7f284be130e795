package queue_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/whilly-go/whilly/plan"
	"github.com/whilly-go/whilly/queue"
	"github.com/whilly-go/whilly/testkit"
)

// planMove is a change of a plan's status.
type planMove struct{ from, to plan.PlanStatus }

// allowedPlanMoves lists every change of a plan's status plan.PlanMove allows.
func allowedPlanMoves() []planMove {
	var ms []planMove
	for _, from := range plan.PlanStatuses() {
		for _, to := range plan.PlanStatuses() {
			if from != to && plan.PlanMove(from, to) == nil {
				ms = append(ms, planMove{from, to})
			}
		}
	}
	return ms
}

// TestThePlanStatusRulesHoldInTheDatabase: every change of a plan's status that
// plan.PlanMove refuses fails in the database (SQLSTATE WH002) and changes nothing,
// whoever writes it; every change it allows goes through.
func TestThePlanStatusRulesHoldInTheDatabase(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testkit.DB(t)
	refused := 0
	for _, from := range plan.PlanStatuses() {
		for _, to := range plan.PlanStatuses() {
			if from == to {
				continue
			}
			id := fmt.Sprintf("move-%s-%s", from, to)
			if _, err := pool.Exec(ctx, `INSERT INTO plans (id, name, status) VALUES ($1, $1, $2)`, id, from); err != nil {
				t.Fatal(err)
			}
			_, err := pool.Exec(ctx, `UPDATE plans SET status = $2 WHERE id = $1`, id, to)
			var pgErr *pgconn.PgError
			refusedHere := errors.As(err, &pgErr) && pgErr.Code == "WH002"
			switch rule := plan.PlanMove(from, to); {
			case rule == nil && err != nil:
				t.Errorf("%s → %s, which plan.PlanMove allows, failed: %v", from, to, err)
			case rule != nil && !refusedHere:
				t.Errorf("%s → %s, which plan.PlanMove refuses, answered %v; want SQLSTATE WH002", from, to, err)
			case rule != nil:
				refused++
				var st plan.PlanStatus
				if err := pool.QueryRow(ctx, `SELECT status FROM plans WHERE id = $1`, id).Scan(&st); err != nil || st != from {
					t.Errorf("after the refused %s → %s the plan is %s (%v)", from, to, st, err)
				}
			}
		}
	}
	if n := len(plan.PlanStatuses()); refused+len(allowedPlanMoves()) != n*(n-1) || refused == 0 {
		t.Errorf("%d refused and %d allowed changes of %d statuses", refused, len(allowedPlanMoves()), n)
	}
}

// TestEveryPlanStatusChangeTheRulesAllowIsMade pins plan.PlanMove to what the store does,
// the way TestEverySQLTransitionIsOneOfPlanNext pins task statuses: a trigger records
// every change of a plan's status while the store's operations that write one run — a
// plan's last task completing or failing (also while the plan is paused), an operator's
// pause, resume and cancel, a budget crossed and raised, a reset of a task and of a
// plan, /whilly retry, a pull request's follow-up round refused, and one started with
// approval required. Each change must be one plan.PlanMove allows (the database refuses
// the others), and each change it allows must be made by one of them: the rules say
// neither more nor less than the code does.
func TestEveryPlanStatusChangeTheRulesAllowIsMade(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testkit.DB(t)
	_, err := pool.Exec(ctx, `
		CREATE TABLE test_plan_changes (n bigserial, plan_id text, old text, new text);
		CREATE FUNCTION test_plan_change() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN INSERT INTO test_plan_changes (plan_id, old, new) VALUES (NEW.id, OLD.status, NEW.status); RETURN NULL; END $$;
		CREATE TRIGGER test_plan_change AFTER UPDATE ON plans FOR EACH ROW
			WHEN (OLD.status IS DISTINCT FROM NEW.status) EXECUTE FUNCTION test_plan_change();`)
	if err != nil {
		t.Fatal(err)
	}
	st := queue.NewStore(pool, nil, queue.Config{BackoffBase: time.Millisecond, BackoffMax: time.Millisecond})
	w := register(t, st)
	ops := queue.Actor{By: "ops"}
	no := false
	one := func(id string) {
		t.Helper()
		importTasks(t, st, &plan.Plan{ID: id, Name: id, Tasks: []plan.Task{goodTask("T1")}})
	}
	claim := func(id string) queue.Lease {
		t.Helper()
		return leaseOf(mustClaim(t, st, w, id), w.ID)
	}
	complete := func(l queue.Lease, cost plan.USD) error {
		_, err := st.Complete(ctx, l, queue.CompleteInput{Cost: cost})
		return err
	}
	fail := func(l queue.Lease) error {
		_, err := st.Fail(ctx, l, queue.FailInput{Reason: "broken", Retryable: &no})
		return err
	}
	pause := func(id string) error { _, err := st.PausePlan(ctx, id, ops); return err }
	cancel := func(id string) error { _, err := st.CancelPlan(ctx, id, "enough", "ops"); return err }
	pulled := func(id string, number int) error {
		one(id)
		if err := complete(claim(id), 0); err != nil {
			return err
		}
		return st.RecordPull(ctx, queue.PullRequest{PlanID: id, Repo: roundRepo, Number: number, NodeID: fmt.Sprintf("PR_%d", number),
			URL: fmt.Sprintf("https://github.com/octo/widgets/pull/%d", number), Branch: "whilly/" + id}, false)
	}
	round := func(id string, number int, byHand, approval bool) (queue.RoundResult, error) {
		return st.StartRound(ctx, queue.RoundRequest{PlanID: id, Repo: roundRepo, Number: number, Trigger: queue.RoundReview,
			TriggerID: fmt.Sprint(number, byHand, approval), Summary: "changes requested", Description: "Rename the helper as the review asks.",
			MaxRounds: 0, ByHand: byHand, RequireApproval: approval})
	}
	steps := []struct {
		name string
		do   func() error
	}{
		{"the last task completes", func() error { one("a"); return complete(claim("a"), 0) }},
		{"a reset of a task of a done plan", func() error { _, err := st.ResetTask(ctx, "a", "T1", false, "ops"); return err }},
		{"the last task fails", func() error { return fail(claim("a")) }},
		{"/whilly retry", func() error { _, err := st.RetryTasks(ctx, "a", []string{"T1"}, "again", "ops"); return err }},
		{"an operator's pause", func() error { return pause("a") }},
		{"resume", func() error { _, err := st.ResumePlan(ctx, "a", ops); return err }},
		{"cancel", func() error { return cancel("a") }},
		{"a reset of a cancelled plan", func() error { _, err := st.ResetPlan(ctx, "a", queue.ResetOptions{}); return err }},
		{"a paused plan's last task completes", func() error {
			one("b")
			l := claim("b")
			if err := pause("b"); err != nil {
				return err
			}
			return complete(l, 0)
		}},
		{"a paused plan's last task fails", func() error {
			one("c")
			l := claim("c")
			if err := pause("c"); err != nil {
				return err
			}
			return fail(l)
		}},
		{"a failed plan is cancelled", func() error { return cancel("c") }},
		{"a paused plan is cancelled", func() error { one("d"); return errors.Join(pause("d"), cancel("d")) }},
		{"the budget is crossed", func() error {
			budget := plan.USD(5000)
			importTasks(t, st, &plan.Plan{ID: "e", Name: "e", Budget: &budget, Tasks: []plan.Task{goodTask("T1"), goodTask("T2")}})
			return complete(claim("e"), 10_000)
		}},
		{"the budget is raised", func() error { _, err := st.SetBudget(ctx, "e", nil, "ops"); return err }},
		{"a done plan's round is refused", func() error {
			if err := pulled("r1", 11); err != nil {
				return err
			}
			res, err := round("r1", 11, false, false)
			if err == nil && res.Outcome != queue.RoundRefused {
				err = fmt.Errorf("the round was %s, want refused", res.Outcome)
			}
			return err
		}},
		{"a failed plan's round by hand awaits approval", func() error {
			res, err := round("r1", 11, true, true)
			if err == nil && res.Outcome != queue.RoundStarted {
				err = fmt.Errorf("the round was %s, want started", res.Outcome)
			}
			return err
		}},
		{"a done plan's round awaits approval", func() error {
			if err := pulled("r2", 12); err != nil {
				return err
			}
			res, err := round("r2", 12, true, true)
			if err == nil && res.Outcome != queue.RoundStarted {
				err = fmt.Errorf("the round was %s, want started", res.Outcome)
			}
			return err
		}},
	}
	for _, s := range steps {
		if err := s.do(); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
	}

	rows, err := pool.Query(ctx, `SELECT old, new FROM test_plan_changes ORDER BY n`)
	if err != nil {
		t.Fatal(err)
	}
	changes, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (planMove, error) {
		var m planMove
		err := r.Scan(&m.from, &m.to)
		return m, err
	})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[planMove]bool{}
	for _, m := range changes {
		if err := plan.PlanMove(m.from, m.to); err != nil {
			t.Errorf("a plan went %s → %s: %v", m.from, m.to, err)
		}
		seen[m] = true
	}
	for _, m := range allowedPlanMoves() {
		if !seen[m] {
			t.Errorf("plan.PlanMove allows %s → %s, and nothing made it", m.from, m.to)
		}
	}
}
