package queue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/whilly-go/whilly/plan"
)

// claimSQL picks the first claimable task (SPEC §5) and leases it, in one statement.
// SKIP LOCKED lets concurrent claimers pass over each other's candidates instead of
// queueing behind them; the dependency check runs in the same snapshot.
const claimSQL = `
WITH cand AS (
	SELECT t.plan_id AS cplan, t.id AS cid
	FROM tasks t
	JOIN plans p ON p.id = t.plan_id
	WHERE t.status = 'PENDING'
	  AND (t.not_before IS NULL OR t.not_before <= now())
	  AND ($1 = '' OR t.plan_id = $1)
	  AND p.status = 'ACTIVE'
	  AND (p.budget_usd IS NULL OR p.spent_usd < p.budget_usd)
	  AND (NOT p.strict OR t.gate_verdict <> 'REJECT')
	  AND t.labels <@ $2::text[]
	  AND NOT EXISTS (
		SELECT 1 FROM unnest(t.dependencies) AS d(dep)
		LEFT JOIN tasks x ON x.plan_id = t.plan_id AND x.id = d.dep
		WHERE x.status IS NULL OR x.status NOT IN ('DONE', 'SKIPPED'))
	ORDER BY t.priority_rank, p.created_at, t.plan_id, t.ord
	LIMIT 1
	FOR UPDATE OF t SKIP LOCKED
)
UPDATE tasks SET status = 'CLAIMED', attempts = attempts + 1, lease_id = gen_random_uuid(),
	lease_expires_at = now() + make_interval(secs => $4), claimed_by = $3, version = version + 1,
	updated_at = now()
FROM cand
WHERE plan_id = cand.cplan AND id = cand.cid
RETURNING ` + taskColumns

// Claim leases the next claimable task to the worker, writing CLAIM in the same
// transaction. It returns nil, nil when nothing is claimable.
func (s *Store) Claim(ctx context.Context, req ClaimRequest) (*Claim, error) {
	var c *Claim
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		t, err := scanTask(tx.QueryRow(ctx, claimSQL, req.PlanID, nonNil(req.Labels), req.WorkerID, s.cfg.LeaseTTL.Seconds()))
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("claim task: %w", err)
		}
		payload := map[string]any{"worker_id": req.WorkerID, "attempt": t.Attempts, "lease_expires_at": t.LeaseExpiresAt}
		if err := insertEvent(ctx, tx, t.PlanID, t.ID, EventClaim, payload, nil); err != nil {
			return err
		}
		pi, err := scanPlan(tx.QueryRow(ctx, `SELECT `+planColumnsNoCounts+` FROM plans p WHERE p.id = $1`, t.PlanID))
		if err != nil {
			return fmt.Errorf("read plan %s of claimed task: %w", t.PlanID, err)
		}
		c = &Claim{Task: t, Lease: LeaseInfo{ID: t.LeaseID, ExpiresAt: *t.LeaseExpiresAt}, Plan: pi}
		return s.changed(ctx, tx, t.PlanID)
	})
	if err != nil {
		return nil, err
	}
	return c, nil
}

// NextReadyAt returns when the earliest task held back by a retry backoff becomes
// claimable (of one plan when planID is set), or nil when none is waiting.
func (s *Store) NextReadyAt(ctx context.Context, planID string) (*time.Time, error) {
	var at *time.Time
	err := s.pool.QueryRow(ctx, `SELECT min(not_before) FROM tasks
		WHERE status = 'PENDING' AND not_before > now() AND ($1 = '' OR plan_id = $1)`, planID).Scan(&at)
	if err != nil {
		return nil, fmt.Errorf("read next retry time: %w", err)
	}
	return at, nil
}

// lockLeased locks the task and checks that l is its current, unexpired lease, held by
// l.WorkerID, in one of the allowed statuses. Anything else is ErrLeaseLost (or
// ErrNotFound when the task does not exist).
func lockLeased(ctx context.Context, tx pgx.Tx, l Lease, allowed ...plan.Status) (TaskInfo, error) {
	var live bool
	row := tx.QueryRow(ctx, `SELECT `+taskColumns+`, coalesce(lease_expires_at > now(), false)
		FROM tasks WHERE plan_id = $1 AND id = $2 FOR UPDATE`, l.PlanID, l.TaskID)
	t, err := scanTaskExtra(row, &live)
	if errors.Is(err, pgx.ErrNoRows) {
		return t, fmt.Errorf("task %s of plan %s: %w", l.TaskID, l.PlanID, ErrNotFound)
	}
	if err != nil {
		return t, fmt.Errorf("lock task %s of plan %s: %w", l.TaskID, l.PlanID, err)
	}
	ok := false
	for _, st := range allowed {
		ok = ok || t.Status == st
	}
	if !ok || !live || t.LeaseID == "" || t.LeaseID != l.LeaseID || t.ClaimedBy != l.WorkerID {
		return t, fmt.Errorf("task %s of plan %s is %s and lease %s is not its current lease for worker %s: %w",
			l.TaskID, l.PlanID, t.Status, l.LeaseID, l.WorkerID, ErrLeaseLost)
	}
	return t, nil
}

// updateTask writes the task's new status and returns the row.
func updateTask(ctx context.Context, tx pgx.Tx, planID, taskID, set string, args ...any) (TaskInfo, error) {
	all := append([]any{planID, taskID}, args...)
	t, err := scanTask(tx.QueryRow(ctx, `UPDATE tasks SET `+set+`, version = version + 1, updated_at = now()
		WHERE plan_id = $1 AND id = $2 RETURNING `+taskColumns, all...))
	if err != nil {
		return t, fmt.Errorf("update task %s of plan %s: %w", taskID, planID, err)
	}
	return t, nil
}

// Start moves a CLAIMED task to IN_PROGRESS. Starting a task already started under the
// same lease is answered with the task and no new event, so a retried request is safe.
func (s *Store) Start(ctx context.Context, l Lease) (TaskInfo, error) {
	var out TaskInfo
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		t, err := lockLeased(ctx, tx, l, plan.StatusClaimed, plan.StatusInProgress)
		if err != nil {
			return err
		}
		if t.Status == plan.StatusInProgress {
			out = t
			return nil
		}
		if out, err = updateTask(ctx, tx, l.PlanID, l.TaskID, `status = 'IN_PROGRESS'`); err != nil {
			return err
		}
		if err := insertEvent(ctx, tx, l.PlanID, l.TaskID, EventStart, map[string]any{"worker_id": l.WorkerID, "attempt": t.Attempts}, nil); err != nil {
			return err
		}
		return s.changed(ctx, tx, l.PlanID)
	})
	return out, err
}

// Complete marks the task DONE, charges the attempt's cost to the plan and settles the
// plan's status, all in one transaction.
func (s *Store) Complete(ctx context.Context, l Lease, in CompleteInput) (TaskInfo, error) {
	if in.Cost < 0 {
		return TaskInfo{}, fmt.Errorf("cost_usd must not be negative: %w", ErrInvalid)
	}
	var out TaskInfo
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		if _, err := lockPlan(ctx, tx, l.PlanID); err != nil {
			return err
		}
		t, err := lockLeased(ctx, tx, l, plan.StatusClaimed, plan.StatusInProgress)
		if err != nil {
			return err
		}
		out, err = updateTask(ctx, tx, l.PlanID, l.TaskID, `status = 'DONE', lease_id = NULL, lease_expires_at = NULL,
			cost_usd = cost_usd + $3::numeric / 1000000, result = $4, last_error = NULL, not_before = NULL`, int64(in.Cost), in.Result)
		if err != nil {
			return err
		}
		payload := map[string]any{"worker_id": l.WorkerID, "attempt": t.Attempts, "cost_usd": in.Cost.String()}
		if in.HeadSHA != "" {
			payload["head_sha"] = in.HeadSHA
		}
		if in.NoChanges {
			payload["no_changes"] = true
		}
		if err := insertEvent(ctx, tx, l.PlanID, l.TaskID, EventComplete, payload, nil); err != nil {
			return err
		}
		return s.chargeAndSettle(ctx, tx, l.PlanID, l.TaskID, in.Cost)
	})
	return out, err
}

// Fail records a failed attempt: with attempts left (and retryable) the task returns to
// PENDING after an exponential backoff (RETRY), otherwise it is FAILED (FAIL). The
// attempt's cost is charged either way.
func (s *Store) Fail(ctx context.Context, l Lease, in FailInput) (TaskInfo, error) {
	if in.Cost < 0 {
		return TaskInfo{}, fmt.Errorf("cost_usd must not be negative: %w", ErrInvalid)
	}
	if in.Reason == "" {
		return TaskInfo{}, fmt.Errorf("a failure needs a reason: %w", ErrInvalid)
	}
	if len(in.Detail) > 0 && !json.Valid(in.Detail) {
		return TaskInfo{}, fmt.Errorf("detail must be JSON: %w", ErrInvalid)
	}
	retryable := in.Retryable == nil || *in.Retryable
	var out TaskInfo
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		if _, err := lockPlan(ctx, tx, l.PlanID); err != nil {
			return err
		}
		t, err := lockLeased(ctx, tx, l, plan.StatusClaimed, plan.StatusInProgress)
		if err != nil {
			return err
		}
		outcome := plan.FailOutcome(t.Attempts, t.MaxAttempts, retryable)
		payload := map[string]any{"worker_id": l.WorkerID, "attempt": t.Attempts, "max_attempts": t.MaxAttempts,
			"cost_usd": in.Cost.String(), "reason": in.Reason, "retryable": retryable}
		cost := `cost_usd = cost_usd + $3::numeric / 1000000, last_error = $4, lease_id = NULL, lease_expires_at = NULL`
		if outcome == plan.TransitionRetry {
			backoff := plan.Backoff(t.Attempts, s.cfg.BackoffBase, s.cfg.BackoffMax)
			out, err = updateTask(ctx, tx, l.PlanID, l.TaskID, cost+`, status = 'PENDING', claimed_by = NULL,
				not_before = now() + make_interval(secs => $5)`, int64(in.Cost), in.Reason, backoff.Seconds())
			payload["not_before"] = out.NotBefore
		} else {
			out, err = updateTask(ctx, tx, l.PlanID, l.TaskID, cost+`, status = 'FAILED'`, int64(in.Cost), in.Reason)
		}
		if err != nil {
			return err
		}
		if err := insertEvent(ctx, tx, l.PlanID, l.TaskID, string(outcome), payload, rawOrNil(in.Detail)); err != nil {
			return err
		}
		if h := s.cfg.Hooks.TaskFailed; h != nil {
			f := TaskFailure{PlanID: l.PlanID, TaskID: l.TaskID, Attempt: t.Attempts, Version: out.Version,
				Reason: in.Reason, Detail: in.Detail, Final: outcome == plan.TransitionFail}
			if err := h(ctx, tx, f); err != nil {
				return fmt.Errorf("task failed hook: %w", err)
			}
		}
		return s.chargeAndSettle(ctx, tx, l.PlanID, l.TaskID, in.Cost)
	})
	return out, err
}

func rawOrNil(r json.RawMessage) any {
	if len(r) == 0 {
		return nil
	}
	return r
}

// Release hands a task back to PENDING without counting the attempt (the worker is
// shutting down, or gives it up for reasons not the task's).
func (s *Store) Release(ctx context.Context, l Lease, reason string) (TaskInfo, error) {
	if reason == "" {
		reason = "released"
	}
	var out TaskInfo
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		if _, err := lockLeased(ctx, tx, l, plan.StatusClaimed, plan.StatusInProgress); err != nil {
			return err
		}
		var err error
		out, err = updateTask(ctx, tx, l.PlanID, l.TaskID, `status = 'PENDING', lease_id = NULL, lease_expires_at = NULL,
			claimed_by = NULL, attempts = greatest(attempts - 1, 0)`)
		if err != nil {
			return err
		}
		if err := insertEvent(ctx, tx, l.PlanID, l.TaskID, EventRelease, map[string]any{"worker_id": l.WorkerID, "reason": reason}, nil); err != nil {
			return err
		}
		return s.changed(ctx, tx, l.PlanID)
	})
	return out, err
}

var taskEventType = regexp.MustCompile(`^(agent|progress|log)(\.[a-z0-9_]+){0,3}$`)

// AppendTaskEvent records a progress or log event from the worker holding the lease.
// Types are limited to agent.*, progress.* and log.* so a worker cannot forge lifecycle
// events.
func (s *Store) AppendTaskEvent(ctx context.Context, l Lease, typ string, payload, detail json.RawMessage) (Event, error) {
	if !taskEventType.MatchString(typ) {
		return Event{}, fmt.Errorf("event type %q must be agent.*, progress.* or log.*: %w", typ, ErrInvalid)
	}
	for _, r := range []json.RawMessage{payload, detail} {
		if len(r) > 0 && (!json.Valid(r) || r[0] != '{') {
			return Event{}, fmt.Errorf("payload and detail must be JSON objects: %w", ErrInvalid)
		}
	}
	var ev Event
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		if _, err := lockLeased(ctx, tx, l, plan.StatusClaimed, plan.StatusInProgress); err != nil {
			return err
		}
		p, d := payload, detail
		if len(p) == 0 {
			p = json.RawMessage(`{}`)
		}
		if len(d) == 0 {
			d = json.RawMessage(`{}`)
		}
		err := tx.QueryRow(ctx, `INSERT INTO events (plan_id, task_id, type, payload, detail)
			VALUES ($1, $2, $3, $4, $5) RETURNING id, plan_id, task_id, type, payload, detail, created_at`,
			l.PlanID, l.TaskID, typ, []byte(p), []byte(d)).
			Scan(&ev.ID, &ev.PlanID, &ev.TaskID, &ev.Type, &ev.Payload, &ev.Detail, &ev.CreatedAt)
		if err != nil {
			return fmt.Errorf("insert task event: %w", err)
		}
		return nil
	})
	return ev, err
}

// chargeAndSettle adds cost to the plan's spend and settles the plan's status. The
// UPDATE locks the plan row, so concurrent completions of one plan serialise here: the
// budget crossing and the plan's final status are each written exactly once.
func (s *Store) chargeAndSettle(ctx context.Context, tx pgx.Tx, planID, taskID string, cost plan.USD) error {
	var (
		after  int64
		budget *int64
		status plan.PlanStatus
	)
	err := tx.QueryRow(ctx, `UPDATE plans SET spent_usd = spent_usd + $2::numeric / 1000000, updated_at = now()
		WHERE id = $1 RETURNING (spent_usd * 1000000)::bigint, (budget_usd * 1000000)::bigint, status`,
		planID, int64(cost)).Scan(&after, &budget, &status)
	if err != nil {
		return fmt.Errorf("charge plan %s: %w", planID, err)
	}
	before := plan.USD(after) - cost
	if budget != nil && status == plan.PlanActive && !plan.Exhausted(budgetPtr(budget), before) && plan.Exhausted(budgetPtr(budget), plan.USD(after)) {
		if _, err := tx.Exec(ctx, `UPDATE plans SET status = 'PAUSED', pause_reason = 'budget' WHERE id = $1`, planID); err != nil {
			return fmt.Errorf("pause plan %s on budget: %w", planID, err)
		}
		payload := map[string]any{"budget_usd": plan.USD(*budget).String(), "spent_usd": plan.USD(after).String(), "task_id": taskID}
		if err := insertEvent(ctx, tx, planID, "", EventPlanBudgetExceeded, payload, nil); err != nil {
			return err
		}
		status = plan.PlanPaused
	}
	if err := settlePlan(ctx, tx, planID, status); err != nil {
		return err
	}
	return s.changed(ctx, tx, planID)
}

func budgetPtr(b *int64) *plan.USD {
	if b == nil {
		return nil
	}
	u := plan.USD(*b)
	return &u
}

// settlePlan moves the plan to DONE when every task is DONE or SKIPPED, or to FAILED
// when nothing can progress and some task failed. The caller holds the plan row lock.
func settlePlan(ctx context.Context, tx pgx.Tx, planID string, status plan.PlanStatus) error {
	if status != plan.PlanActive && status != plan.PlanPaused {
		return nil
	}
	var open, running, failed int
	err := tx.QueryRow(ctx, `SELECT
			count(*) FILTER (WHERE status NOT IN ('DONE', 'SKIPPED')),
			count(*) FILTER (WHERE status IN ('CLAIMED', 'IN_PROGRESS')),
			count(*) FILTER (WHERE status IN ('FAILED', 'CANCELLED'))
		FROM tasks WHERE plan_id = $1`, planID).Scan(&open, &running, &failed)
	if err != nil {
		return fmt.Errorf("count tasks of plan %s: %w", planID, err)
	}
	var next plan.PlanStatus
	switch {
	case open == 0:
		next = plan.PlanDone
	case running == 0 && failed > 0:
		rows, err := tx.Query(ctx, `SELECT id, status, dependencies FROM tasks WHERE plan_id = $1 ORDER BY ord`, planID)
		if err != nil {
			return fmt.Errorf("read tasks of plan %s: %w", planID, err)
		}
		tasks, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (plan.Task, error) {
			var t plan.Task
			err := r.Scan(&t.ID, &t.Status, &t.Dependencies)
			return t, err
		})
		if err != nil {
			return fmt.Errorf("read tasks of plan %s: %w", planID, err)
		}
		if st, final := plan.PlanOutcome(tasks); final {
			next = st
		}
	}
	if next == "" {
		return nil
	}
	if _, err := tx.Exec(ctx, `UPDATE plans SET status = $2, pause_reason = NULL, updated_at = now() WHERE id = $1`, planID, next); err != nil {
		return fmt.Errorf("set plan %s %s: %w", planID, next, err)
	}
	typ := map[plan.PlanStatus]string{plan.PlanDone: EventPlanDone, plan.PlanFailed: EventPlanFailed, plan.PlanCancelled: EventPlanCancelled}[next]
	return insertEvent(ctx, tx, planID, "", typ, map[string]any{"from": status}, nil)
}

// Heartbeat marks the worker alive, extends every lease it holds, and tells it which of
// the tasks it believes it holds it must abandon (cancelled, or lease lost).
func (s *Store) Heartbeat(ctx context.Context, workerID string, held []Lease) (HeartbeatResult, error) {
	var res HeartbeatResult
	tag, err := s.pool.Exec(ctx, `UPDATE workers SET last_heartbeat = now(), status = 'online'
		WHERE id = $1 AND status <> 'revoked'`, workerID)
	if err != nil {
		return res, fmt.Errorf("heartbeat of worker %s: %w", workerID, err)
	}
	if tag.RowsAffected() == 0 {
		return res, fmt.Errorf("worker %s: %w", workerID, ErrUnauthorized)
	}
	rows, err := s.pool.Query(ctx, `UPDATE tasks SET lease_expires_at = now() + make_interval(secs => $2)
		WHERE claimed_by = $1 AND status IN ('CLAIMED', 'IN_PROGRESS') AND lease_id IS NOT NULL
		RETURNING plan_id, id, lease_id::text, lease_expires_at`, workerID, s.cfg.LeaseTTL.Seconds())
	if err != nil {
		return res, fmt.Errorf("extend leases of worker %s: %w", workerID, err)
	}
	type leaseRow struct {
		key [3]string
		exp time.Time
	}
	leases, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (leaseRow, error) {
		var l leaseRow
		err := r.Scan(&l.key[0], &l.key[1], &l.key[2], &l.exp)
		return l, err
	})
	if err != nil {
		return res, fmt.Errorf("extend leases of worker %s: %w", workerID, err)
	}
	live := map[[3]string]bool{}
	for _, l := range leases {
		live[l.key] = true
		res.LeaseExpiresAt = l.exp
	}
	for _, h := range held {
		if live[[3]string{h.PlanID, h.TaskID, h.LeaseID}] {
			continue
		}
		reason := "lease_lost"
		var st string
		err := s.pool.QueryRow(ctx, `SELECT status FROM tasks WHERE plan_id = $1 AND id = $2`, h.PlanID, h.TaskID).Scan(&st)
		if err == nil && st == string(plan.StatusCancelled) {
			reason = "cancelled"
		}
		res.Cancel = append(res.Cancel, CancelNotice{PlanID: h.PlanID, TaskID: h.TaskID, Reason: reason})
	}
	if res.LeaseExpiresAt.IsZero() {
		if err := s.pool.QueryRow(ctx, `SELECT now() + make_interval(secs => $1)`, s.cfg.LeaseTTL.Seconds()).Scan(&res.LeaseExpiresAt); err != nil {
			return res, fmt.Errorf("read database clock: %w", err)
		}
	}
	return res, nil
}
