package queue

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/whilly-go/whilly/plan"
)

// EventTaskRemoved records a task deleted by an operator. Persisted: never rename it.
const EventTaskRemoved = "task.removed"

// RemoveTask deletes a task that no other task of its plan depends on and that is not
// running, with a task.removed event, then settles the plan (its last open task gone, it
// may be DONE). Anything else is ErrConflict, saying why.
func (s *Store) RemoveTask(ctx context.Context, planID, taskID string) error {
	return s.inTx(ctx, func(tx pgx.Tx) error {
		status, err := lockPlan(ctx, tx, planID)
		if err != nil {
			return err
		}
		var st plan.Status
		if err := tx.QueryRow(ctx, `SELECT status FROM tasks WHERE plan_id = $1 AND id = $2 FOR UPDATE`, planID, taskID).Scan(&st); err != nil {
			if errors.Is(err, pgx.ErrNoRows) {
				return fmt.Errorf("task %s of plan %s: %w", taskID, planID, ErrNotFound)
			}
			return fmt.Errorf("lock task %s of plan %s: %w", taskID, planID, err)
		}
		if st == plan.StatusClaimed || st == plan.StatusInProgress {
			return fmt.Errorf("task %s of plan %s is %s: it can be removed once its attempt ends: %w", taskID, planID, st, ErrConflict)
		}
		var dependents []string
		if err := tx.QueryRow(ctx, `SELECT coalesce(array_agg(id ORDER BY ord), '{}') FROM tasks
			WHERE plan_id = $1 AND $2 = ANY(dependencies)`, planID, taskID).Scan(&dependents); err != nil {
			return fmt.Errorf("find dependents of task %s of plan %s: %w", taskID, planID, err)
		}
		if len(dependents) > 0 {
			return fmt.Errorf("task %s of plan %s cannot be removed: %s depend on it: %w",
				taskID, planID, strings.Join(dependents, ", "), ErrConflict)
		}
		if _, err := tx.Exec(ctx, `DELETE FROM tasks WHERE plan_id = $1 AND id = $2`, planID, taskID); err != nil {
			return fmt.Errorf("remove task %s of plan %s: %w", taskID, planID, err)
		}
		if err := insertEvent(ctx, tx, planID, taskID, EventTaskRemoved, map[string]any{"status": st}, nil); err != nil {
			return err
		}
		if err := settlePlan(ctx, tx, planID, status); err != nil {
			return err
		}
		return s.changed(ctx, tx, planID)
	})
}

// ResetTask returns one finished task (DONE, FAILED, SKIPPED, CANCELLED) to PENDING with
// a RESET event, attempts and errors cleared; with cascade, every task that depends on it,
// directly or not, and has finished, too. A plan that had ended is ACTIVE again
// (plan.reopened). It returns the ids reset, in file order.
func (s *Store) ResetTask(ctx context.Context, planID, taskID string, cascade bool) ([]string, error) {
	var ids []string
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		status, err := lockPlan(ctx, tx, planID)
		if err != nil {
			return err
		}
		var st plan.Status
		if err := tx.QueryRow(ctx, `SELECT status FROM tasks WHERE plan_id = $1 AND id = $2`, planID, taskID).Scan(&st); err != nil {
			if errors.Is(err, pgx.ErrNoRows) {
				return fmt.Errorf("task %s of plan %s: %w", taskID, planID, ErrNotFound)
			}
			return fmt.Errorf("read task %s of plan %s: %w", taskID, planID, err)
		}
		if !st.Terminal() {
			return fmt.Errorf("task %s of plan %s is %s: only a DONE, FAILED, SKIPPED or CANCELLED task can be reset: %w",
				taskID, planID, st, ErrConflict)
		}
		err = tx.QueryRow(ctx, `
			WITH RECURSIVE down(id) AS (
				SELECT $2::text
				UNION
				SELECT t.id FROM tasks t JOIN down d ON d.id = ANY(t.dependencies)
				WHERE $3 AND t.plan_id = $1
			), r AS (
				UPDATE tasks SET status = 'PENDING', attempts = 0, not_before = NULL, lease_id = NULL,
				       lease_expires_at = NULL, claimed_by = NULL, last_error = NULL, last_output = NULL, result = NULL,
				       version = version + 1, updated_at = now()
				FROM (SELECT id AS tid, status AS old FROM tasks
				      WHERE plan_id = $1 AND id IN (SELECT id FROM down) AND status IN ('DONE', 'FAILED', 'SKIPPED', 'CANCELLED')
				      ORDER BY id FOR UPDATE) o
				WHERE plan_id = $1 AND id = o.tid AND tasks.status = o.old
				RETURNING id, ord, o.old
			), ev AS (
				INSERT INTO events (plan_id, task_id, type, payload)
				SELECT $1, id, 'RESET', jsonb_build_object('from', old, 'to', 'PENDING', 'cascade_from', $2::text)
				FROM r ORDER BY ord
				RETURNING task_id
			)
			SELECT coalesce(array_agg(id ORDER BY ord), '{}') FROM r`, planID, taskID, cascade).Scan(&ids)
		if err != nil {
			return fmt.Errorf("reset task %s of plan %s: %w", taskID, planID, err)
		}
		if status == plan.PlanDone || status == plan.PlanFailed || status == plan.PlanCancelled {
			if _, err := tx.Exec(ctx, `UPDATE plans SET status = 'ACTIVE', pause_reason = NULL, updated_at = now() WHERE id = $1`, planID); err != nil {
				return fmt.Errorf("reopen plan %s: %w", planID, err)
			}
			if err := insertEvent(ctx, tx, planID, "", EventPlanReopened, map[string]any{"from": status, "tasks_reset": len(ids)}, nil); err != nil {
				return err
			}
		}
		return s.changed(ctx, tx, planID)
	})
	return ids, err
}
