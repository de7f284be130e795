package queue

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/whilly-go/whilly/plan"
)

// The worker protocol survives lost answers. A report (START, COMPLETE, FAIL, RELEASE)
// retried after its answer was lost is answered with the task (replayed, in claim.go),
// and another report on the lease it ended is refused; a
// claim retried with the same key finds the task it got (HeldClaim); an attempt whose
// report could not be made before its lease ended still charges its cost (ChargeLost);
// and a worker restarted under the same id hands back what its predecessor held
// (ReleaseHeld) instead of leaving it to the lease reaper.

// HeldClaim returns the claim the worker already holds under the lease req.Key: the task
// it got from a claim whose answer was lost. It returns nil, nil when there is none (the
// claim never committed, or that lease has ended).
func (s *Store) HeldClaim(ctx context.Context, req ClaimRequest) (*Claim, error) {
	if req.Key == "" {
		return nil, nil
	}
	row := s.pool.QueryRow(ctx, `SELECT c.*, `+planColumnsNoCounts+`
		FROM (SELECT `+taskColumns+` FROM tasks
			WHERE claimed_by = $1 AND status IN ('CLAIMED', 'IN_PROGRESS') AND lease_id::text = $2 AND lease_expires_at > now()
			LIMIT 1) c JOIN plans p ON p.id = c.plan_id`, req.WorkerID, req.Key)
	var ps planScan
	t, err := scanTaskExtra(row, ps.dest()...)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("look for the claim of worker %s under key %s: %w", req.WorkerID, req.Key, err)
	}
	return &Claim{Task: t, Lease: LeaseInfo{ID: t.LeaseID, ExpiresAt: *t.LeaseExpiresAt}, Plan: ps.info()}, nil
}

// ChargeResult says what ChargeLost did.
type ChargeResult struct {
	// Charged is false when the attempt's cost was charged already: by its own report
	// (which went through after all) or by an earlier ChargeLost.
	Charged bool `json:"charged"`
}

// ChargeLost charges the cost of an attempt whose lease ended before its report went
// through (it expired while the control plane was unreachable, or the task was
// withdrawn): the plan's spend and the task's cost grow, with a plan.charged event
// (source "attempt") naming the task, the lease and the reason, and the budget is
// crossed like for any charge. The lease must have been granted to l.WorkerID for this
// task (its CLAIM event says so); charging it twice charges it once.
func (s *Store) ChargeLost(ctx context.Context, l Lease, cost plan.USD, reason string) (ChargeResult, error) {
	var res ChargeResult
	if cost < 0 {
		return res, fmt.Errorf("cost_usd must not be negative: %w", ErrInvalid)
	}
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		if _, err := lockPlan(ctx, tx, l.PlanID); err != nil {
			return err
		}
		var ended, charged, granted bool
		err := tx.QueryRow(ctx, `SELECT coalesce(ended_lease_id::text = $3, false),
			EXISTS (SELECT 1 FROM events WHERE plan_id = $1 AND task_id = $2 AND type = 'plan.charged' AND payload->>'lease_id' = $3),
			EXISTS (SELECT 1 FROM events WHERE plan_id = $1 AND task_id = $2 AND type = 'CLAIM'
				AND payload->>'lease_id' = $3 AND payload->>'worker_id' = $4)
			FROM tasks WHERE plan_id = $1 AND id = $2 FOR UPDATE`, l.PlanID, l.TaskID, l.LeaseID, l.WorkerID).Scan(&ended, &charged, &granted)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("task %s of plan %s: %w", l.TaskID, l.PlanID, ErrNotFound)
		}
		if err != nil {
			return fmt.Errorf("look up lease %s of task %s of plan %s: %w", l.LeaseID, l.TaskID, l.PlanID, err)
		}
		switch {
		case !granted:
			return fmt.Errorf("lease %s of task %s of plan %s was not granted to worker %s: %w", l.LeaseID, l.TaskID, l.PlanID, l.WorkerID, ErrLeaseLost)
		case ended || charged:
			return nil
		}
		if _, err := tx.Exec(ctx, `UPDATE tasks SET cost_usd = cost_usd + $3::numeric / 1000000, updated_at = now()
			WHERE plan_id = $1 AND id = $2`, l.PlanID, l.TaskID, int64(cost)); err != nil {
			return fmt.Errorf("charge task %s of plan %s: %w", l.TaskID, l.PlanID, err)
		}
		payload := map[string]any{"source": "attempt", "cost_usd": cost.String(), "worker_id": l.WorkerID,
			"lease_id": l.LeaseID, "reason": reason}
		if err := insertEvent(ctx, tx, l.PlanID, l.TaskID, EventPlanCharged, payload, nil); err != nil {
			return err
		}
		res.Charged = true
		return s.chargeAndSettle(ctx, tx, l.PlanID, l.TaskID, cost)
	})
	return res, err
}

// ReleaseHeld hands back every task the worker holds (RELEASE with reason; the attempt
// is not counted) and returns how many: a worker restarted under the same id does this
// first, since whatever its predecessor ran died with it.
func (s *Store) ReleaseHeld(ctx context.Context, workerID, reason string) (int, error) {
	var n int
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		var err error
		n, err = s.releaseHeld(ctx, tx, workerID, reason)
		return err
	})
	return n, err
}

// releaseHeld releases the worker's tasks inside tx.
func (s *Store) releaseHeld(ctx context.Context, tx pgx.Tx, workerID, reason string) (int, error) {
	rows, err := tx.Query(ctx, `
		WITH r AS (
			UPDATE tasks SET status = 'PENDING', lease_id = NULL, lease_expires_at = NULL, claimed_by = NULL,
			       attempts = greatest(attempts - 1, 0), version = version + 1, updated_at = now()
			WHERE claimed_by = $1 AND status IN ('CLAIMED', 'IN_PROGRESS')
			RETURNING plan_id, id
		)
		INSERT INTO events (plan_id, task_id, type, payload)
		SELECT plan_id, id, 'RELEASE', jsonb_build_object('worker_id', $1::text, 'reason', $2::text) FROM r
		RETURNING plan_id`, workerID, reason)
	if err != nil {
		return 0, fmt.Errorf("release tasks of worker %s: %w", workerID, err)
	}
	plans, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return 0, fmt.Errorf("release tasks of worker %s: %w", workerID, err)
	}
	slices.Sort(plans)
	return len(plans), s.changed(ctx, tx, slices.Compact(plans)...)
}
