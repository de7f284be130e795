package queue

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// startSQL starts tasks of plan $1 ($2 task, $3 lease, $4 worker): CLAIMED under the
// caller's live lease becomes IN_PROGRESS, with its START event, in one statement.
// Concurrent STARTs of a plan are answered together (the starts group), like claims and
// completions: one round trip and one commit for the batch. The tasks are locked in id
// order (lk), as every statement that locks several tasks of a plan does. A start whose
// lease does not match (a retried request, another worker's lease) is left out of the
// result: Start's careful path says why.
const startSQL = `WITH r AS (
	SELECT * FROM unnest($2::text[], $3::text[], $4::text[]) WITH ORDINALITY AS r(rid, rlease, rworker, n)
), lk AS (
	SELECT id AS lid FROM tasks WHERE plan_id = $1 AND id = ANY ($2::text[]) ORDER BY id FOR NO KEY UPDATE
), u AS (
	UPDATE tasks SET status = 'IN_PROGRESS', version = version + 1, updated_at = now()
	FROM r JOIN lk ON lk.lid = r.rid
	WHERE plan_id = $1 AND id = r.rid AND lease_id::text = r.rlease AND claimed_by = r.rworker
	  AND status = 'CLAIMED' AND lease_expires_at > now()
	RETURNING ` + taskColumns + `, r.n
), ev AS (
	INSERT INTO events (plan_id, task_id, type, payload)
	SELECT u.plan_id, u.id, 'START', jsonb_build_object('worker_id', r.rworker, 'attempt', u.attempts) FROM u JOIN r USING (n)
)
SELECT * FROM u`

// Start moves a CLAIMED task to IN_PROGRESS. Starting a task already started under the
// same lease is answered with the task and no new event, so a retried request is safe.
// The fenced update and its START event are one statement, batched with the other
// STARTs of the plan (startBatch); what the batch leaves out takes startCareful.
func (s *Store) Start(ctx context.Context, l Lease) (TaskInfo, error) {
	t, err := s.starts.do(ctx, l.PlanID, l)
	if !errors.Is(err, errCareful) {
		return t, err
	}
	return s.startCareful(ctx, l)
}

// startBatch starts a batch of tasks of one plan in one statement (the starts group's
// run); the PlanChanged hook runs once, in its transaction (hotTx).
func (s *Store) startBatch(ctx context.Context, planID string, ls []Lease) ([]TaskInfo, []error) {
	ids, leases, workers := make([]string, len(ls)), make([]string, len(ls)), make([]string, len(ls))
	for i, l := range ls {
		ids[i], leases[i], workers[i] = l.TaskID, l.LeaseID, l.WorkerID
	}
	out, errs := make([]TaskInfo, len(ls)), fill(len(ls), errCareful)
	b := hotBatch()
	b.Queue(startSQL, planID, ids, leases, workers)
	err := s.hotTx(ctx, b, touched{plan: planID, tasks: ids}, func(br pgx.BatchResults) error {
		rows, err := hotQuery(br)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var n int
			t, err := scanTaskExtra(rows, &n)
			if err != nil {
				return err
			}
			out[n-1], errs[n-1] = t, nil
		}
		return rows.Err()
	})
	if err != nil {
		return make([]TaskInfo, len(ls)), fill(len(ls), fmt.Errorf("start tasks of plan %s: %w", planID, err))
	}
	return out, errs
}
