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

// A claim picks the first claimable tasks, leases them and writes their CLAIM events
// (and, for a handoff's claims that ask for it, starts them: handoffStatus), in one
// statement: one task for each worker of $3 that is not revoked (a control plane may
// still trust a revoked worker's token from its cache), in the order of that array (n is
// the position of the worker a task went to). It walks an index in claim order —
// priority, fair-share round, plan age, file order (tasks_claim_fair, see fairShareSQL;
// tasks_claim_plan with the plan fixed) — and stops once it has enough tasks that pass
// the checks, so its cost does not grow with the backlog. Tasks waiting on an unfinished
// dependency are not in the claim order (waiting, migration 0024), and the dependency
// check still runs, in the same snapshot. SKIP LOCKED lets concurrent claimers pass over
// each other's candidates instead of queueing behind them. Each row holds the task, n and
// the task's plan.
const (
	// depsFinished holds for a task t whose every dependency is DONE or SKIPPED (a
	// dependency that does not exist is not). Each dependency's status is a scalar
	// subquery, one probe of tasks_pkey: written as a join, it let the planner hash all of
	// the plan's tasks for every task it checked — 649 ms for a claim that found 999 tasks
	// waiting on one running task, and as much for every long-poll wake-up
	// (BenchmarkClaimBlocked).
	depsFinished = `NOT EXISTS (` + depsUnfinished + `)`
	// depsUnfinished selects the dependencies of t that are not DONE or SKIPPED, as d.dep.
	depsUnfinished = `
		SELECT 1 FROM unnest(t.dependencies) AS d(dep)
		WHERE coalesce((SELECT x.status FROM tasks x WHERE x.plan_id = t.plan_id AND x.id = d.dep), '') NOT IN ('DONE', 'SKIPPED')`

	claimCand = `
WITH w AS (
	SELECT w.n, row_number() OVER (ORDER BY w.n) AS k
	FROM unnest($3::text[]) WITH ORDINALITY AS w(id, n)
	-- LIMIT makes this a look-up by primary key, whatever the number of workers.
	JOIN LATERAL (SELECT 1 FROM workers k WHERE k.id = w.id AND k.status <> 'revoked' LIMIT 1) live ON true
	-- No worker gets a task while the fleet is paused (pause.go).
	WHERE %s AND ` + fleetRunning + `
), cand AS (
	SELECT t.plan_id AS cplan, t.id AS cid
	FROM tasks t
	WHERE t.status = 'PENDING' AND NOT t.waiting AND %s
	  AND (t.not_before IS NULL OR t.not_before <= now())
	  AND (t.labels = '{}' OR t.labels <@ $2::text[])
	  AND EXISTS (
		SELECT 1 FROM plans p WHERE p.id = t.plan_id AND p.status = 'ACTIVE'
		  AND (p.budget_usd IS NULL OR p.spent_usd < p.budget_usd)
		  AND (NOT p.strict OR t.gate_verdict <> 'REJECT')
		  AND %s)
	  AND ` + depsFinished + `
	ORDER BY %s
	LIMIT (SELECT count(*) FROM w)
	FOR UPDATE OF t SKIP LOCKED
), pick AS (
	SELECT cplan, cid, w.n FROM (SELECT cplan, cid, row_number() OVER () AS k FROM cand) c JOIN w USING (k)
), claimed AS (
	UPDATE tasks SET status = %s, attempts = attempts + 1,
		lease_id = coalesce(nullif(($5::text[])[pick.n], '')::uuid, gen_random_uuid()),
		lease_expires_at = now() + make_interval(secs => $4), claimed_by = ($3::text[])[pick.n],
		version = version + 1, updated_at = now()
	FROM pick
	WHERE plan_id = pick.cplan AND id = pick.cid
	RETURNING tasks.*, pick.n
), ev AS (
	INSERT INTO events (plan_id, task_id, type, payload)
	SELECT plan_id, id, e.type, e.payload FROM claimed CROSS JOIN LATERAL (VALUES
		('CLAIM', jsonb_build_object('worker_id', claimed_by, 'attempt', attempts,
			'lease_expires_at', lease_expires_at, 'lease_id', lease_id) ||
			coalesce((SELECT jsonb_build_object('owner_email', k.owner_email) FROM workers k
				WHERE k.id = claimed_by AND k.owner_email IS NOT NULL), '{}')),
		('START', jsonb_build_object('worker_id', claimed_by, 'attempt', attempts))) AS e(type, payload)
	WHERE e.type = 'CLAIM' OR status = 'IN_PROGRESS'
)
SELECT c.*, ` + planColumnsNoCounts + `
FROM (SELECT ` + taskColumns + `, n FROM claimed) c JOIN plans p ON p.id = c.plan_id`
)

// handoffWorkers keeps, in a claim that follows completions in their transaction, only
// the workers whose completion went through: the task ($8[n]) of plan $7 that the worker
// held is DONE, written by this very transaction. A worker whose COMPLETE was refused
// (409) is given nothing, and nothing is written for it.
const handoffWorkers = `EXISTS (SELECT 1 FROM tasks x WHERE x.plan_id = $7 AND x.id = ($8::text[])[w.n]
	AND x.claimed_by = w.id AND x.status = 'DONE' AND x.xmin::text::bigint = txid_current() % 4294967296)`

// handoffStatus is the status a handoff's claim leaves its task in: IN_PROGRESS for the
// workers that asked for their next task started ($9, handedStarts), so that one update
// leases and starts it and one INSERT writes its CLAIM and START events; CLAIMED for the
// others.
const handoffStatus = `CASE WHEN ($9::bool[])[pick.n] THEN 'IN_PROGRESS' ELSE 'CLAIMED' END`

// handedStarts are the parameter $9 of a handoff's claim statement: whether each claim
// asked for its task started (ClaimRequest.Start, with a key).
func handedStarts(reqs []ClaimRequest) []bool {
	out := make([]bool, len(reqs))
	for i, r := range reqs {
		out[i] = r.Start && r.Key != ""
	}
	return out
}

// claimOrderAny is the claim order across plans: within a priority, plans take turns
// by round (fair share, migration 0019).
const claimOrderAny = `t.priority_rank, t.share_round, t.plan_seq, t.ord`

var (
	claimScope          = scopeMatchSQL("$6")
	claimPlanSQL        = fmt.Sprintf(claimCand, `true`, `t.plan_id = $1`, claimScope, `t.priority_rank, t.ord`, `'CLAIMED'`)
	claimAnySQL         = fmt.Sprintf(claimCand, `true`, `$1 = ''`, claimScope, claimOrderAny, `'CLAIMED'`)
	handoffClaimPlanSQL = fmt.Sprintf(claimCand, handoffWorkers, `t.plan_id = $1`, claimScope, `t.priority_rank, t.ord`, handoffStatus)
	handoffClaimAnySQL  = fmt.Sprintf(claimCand, handoffWorkers, `$1 = ''`, claimScope, claimOrderAny, handoffStatus)
)

// Claim leases the next claimable task to the worker, writing CLAIM in the same
// transaction. It returns nil, nil when nothing is claimable. Concurrent claims of one
// plan by workers with the same labels are answered together, in one statement and one
// transaction that runs the hooks once per plan (see group and hotTx).
func (s *Store) Claim(ctx context.Context, req ClaimRequest) (*Claim, error) {
	return s.claims.do(ctx, keyOf(req), req)
}

func claimSQL(planID string) string {
	if planID != "" {
		return claimPlanSQL
	}
	return claimAnySQL
}

// claimArgs are the parameters $1…$6 of a claim statement: the lease of a request with an
// idempotency key gets the key as its id ($5), so a retried claim finds it (HeldClaim);
// $6 are the scopes every task's plan must be allowed by.
func claimArgs(ttl time.Duration, planID string, labels []string, scopes Scopes, reqs []ClaimRequest) []any {
	workers, keys := make([]string, len(reqs)), make([]string, len(reqs))
	for i, r := range reqs {
		workers[i], keys[i] = r.WorkerID, r.Key
	}
	return []any{planID, nonNil(labels), workers, ttl.Seconds(), keys, scopes.Strings()}
}

// scanClaims reads the answer of a claim statement (rows, or the error of sending it)
// for n workers and closes the rows.
func scanClaims(rows pgx.Rows, err error, n int) ([]*Claim, error) {
	if err != nil {
		return nil, fmt.Errorf("claim tasks: %w", err)
	}
	defer rows.Close()
	out := make([]*Claim, n)
	for rows.Next() {
		var (
			i  int
			ps planScan
		)
		t, err := scanTaskExtra(rows, append([]any{&i}, ps.dest()...)...)
		if err != nil {
			return nil, fmt.Errorf("claim tasks: %w", err)
		}
		out[i-1] = &Claim{Task: t, Lease: LeaseInfo{ID: t.LeaseID, ExpiresAt: *t.LeaseExpiresAt}, Plan: ps.info()}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("claim tasks: %w", err)
	}
	return out, nil
}

// NextReadyAt returns when the earliest task held back by a retry backoff becomes
// claimable (of one plan when planID is set), or nil when none is waiting. A backoff
// that ended in the last readyGrace counts too, with its time in the past: it may have
// ended just after the claim that looked for its task, and no event announces it, so
// the caller must look again rather than sleep its whole wait. It reads tasks_backoff,
// which holds only the tasks in backoff: without it, it walked every pending task after
// each empty claim (57 ms a call at the end of bench claims' http phase).
func (s *Store) NextReadyAt(ctx context.Context, planID string) (*time.Time, error) {
	var at *time.Time
	err := s.pool.QueryRow(ctx, `SELECT min(not_before) FROM tasks
		WHERE status = 'PENDING' AND not_before > now() - make_interval(secs => $2) AND ($1 = '' OR plan_id = $1)`,
		planID, readyGrace.Seconds()).Scan(&at)
	if err != nil {
		return nil, fmt.Errorf("read next retry time: %w", err)
	}
	return at, nil
}

// readyGrace is how long after its backoff ended a task still counts for NextReadyAt.
const readyGrace = 5 * time.Second

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

// startCareful is Start in a transaction of its own: it answers what a batch of starts
// left out, a retried request (the task, no new event) or a lease that is not the
// caller's (lockLeased says which).
func (s *Store) startCareful(ctx context.Context, l Lease) (TaskInfo, error) {
	var out TaskInfo
	err := s.workerTx(ctx, func(tx pgx.Tx) error {
		t, err := scanTask(tx.QueryRow(ctx, `WITH u AS (
			UPDATE tasks SET status = 'IN_PROGRESS', version = version + 1, updated_at = now()
			WHERE plan_id = $1 AND id = $2 AND lease_id::text = $3 AND claimed_by = $4
			  AND status = 'CLAIMED' AND lease_expires_at > now()
			RETURNING tasks.*
		), ev AS (
			INSERT INTO events (plan_id, task_id, type, payload)
			SELECT plan_id, id, 'START', jsonb_build_object('worker_id', $4::text, 'attempt', attempts) FROM u
		)
		SELECT `+taskColumns+` FROM u`, l.PlanID, l.TaskID, l.LeaseID, l.WorkerID))
		if errors.Is(err, pgx.ErrNoRows) {
			// Not started now: already started under this lease (a retried request), or
			// the lease is not the caller's; lockLeased says which.
			if out, err = lockLeased(ctx, tx, l, plan.StatusInProgress); err != nil {
				return err
			}
			return nil
		}
		if err != nil {
			return fmt.Errorf("start task %s of plan %s: %w", l.TaskID, l.PlanID, err)
		}
		out = t
		return s.changed(ctx, tx, l.PlanID)
	})
	return out, err
}

// Complete marks the task DONE, charges the attempt's cost to the plan and settles the
// plan's status, all in one transaction.
func (s *Store) Complete(ctx context.Context, l Lease, in CompleteInput) (TaskInfo, error) {
	p, err := completePayload(l, in)
	if err != nil {
		return TaskInfo{}, err
	}
	if fast(in) {
		t, err := s.completions.do(ctx, l.PlanID, completion{lease: l, result: in.Result, payload: p, log: in.Log})
		if !errors.Is(err, errCareful) {
			return t, err
		}
	}
	t, _, err := s.completeCareful(ctx, l, in, p)
	return t, err
}

// completePayload checks a completion and returns its COMPLETE event's payload.
func completePayload(l Lease, in CompleteInput) ([]byte, error) {
	if in.Cost < 0 {
		return nil, fmt.Errorf("cost_usd must not be negative: %w", ErrInvalid)
	}
	if err := in.Log.check(); err != nil {
		return nil, err
	}
	payload := map[string]any{"worker_id": l.WorkerID, "cost_usd": in.Cost.String()}
	if in.HeadSHA != "" {
		payload["head_sha"] = in.HeadSHA
	}
	if in.NoChanges {
		payload["no_changes"] = true
	}
	if in.ResultRepaired {
		payload["result_repaired"] = true
	}
	if in.CostEstimated {
		payload["cost_estimated"] = true
	}
	p, err := json.Marshal(payload)
	if err != nil {
		return nil, fmt.Errorf("encode COMPLETE payload: %w", err)
	}
	return p, nil
}

// completeCareful completes a task under its plan's row lock: it charges the cost,
// crosses the budget and settles the plan. payload is the COMPLETE event's. replay says
// the lease's holder had completed it already: a retried report, answered with the task.
// It is a locked batch (batchTx) of one completion: the statement of the batched path,
// then the charge, in the round trip that locks the plan.
func (s *Store) completeCareful(ctx context.Context, l Lease, in CompleteInput, p []byte) (out TaskInfo, replay bool, err error) {
	cs := []completion{{lease: l, result: in.Result, payload: p, log: in.Log, cost: in.Cost}}
	b := hotBatch()
	b.Queue(completeLockedSQL, completeArgs(l.PlanID, cs)...)
	tails := queueCompletionTails(b, l.PlanID, cs)
	b.Queue(`UPDATE plans SET spent_usd = spent_usd + $2::numeric / 1000000, updated_at = now()
		WHERE id = $1 RETURNING (spent_usd * 1000000)::bigint, (budget_usd * 1000000)::bigint`, l.PlanID, int64(in.Cost))
	b.Queue(`SELECT EXISTS (SELECT 1 FROM tasks WHERE plan_id = $1 AND status IN ('CLAIMED', 'IN_PROGRESS'))`, l.PlanID)
	var (
		done   completed
		after  int64
		budget *int64
		busy   bool
	)
	read := func(br pgx.BatchResults) error {
		rows, err := hotQuery(br)
		if done, err = scanCompleted(rows, err, 1); err != nil {
			return fmt.Errorf("complete task %s of plan %s: %w", l.TaskID, l.PlanID, err)
		}
		if tails {
			if _, err := br.Exec(); err != nil {
				return fmt.Errorf("store the log's tail of task %s: %w", l.TaskID, err)
			}
		}
		if err := br.QueryRow().Scan(&after, &budget); err != nil {
			return fmt.Errorf("charge plan %s: %w", l.PlanID, err)
		}
		if err := br.QueryRow().Scan(&busy); err != nil {
			return fmt.Errorf("look for running tasks of plan %s: %w", l.PlanID, err)
		}
		return nil
	}
	settle := func(ctx context.Context, tx pgx.Tx, st plan.PlanStatus) error {
		if done.errs[0] != nil {
			// Not completed, and everything above is rolled back. Say why: the same check
			// as every other lease-fenced change.
			_, err := lockLeased(ctx, tx, l, plan.StatusClaimed, plan.StatusInProgress)
			if err == nil {
				err = fmt.Errorf("task %s of plan %s: %w", l.TaskID, l.PlanID, ErrLeaseLost)
			}
			out, err = replayed(ctx, tx, l, reportComplete, err)
			return err
		}
		out = done.tasks[0]
		return settleCharged(ctx, tx, l.PlanID, l.TaskID, in.Cost, after, budget, st, busy)
	}
	err = s.batchTx(ctx, b, touched{plans: []string{l.PlanID}, plan: l.PlanID}, read, settle)
	switch {
	case errors.Is(err, errGaveUp):
		return TaskInfo{}, false, fmt.Errorf("plan %s: %w", l.PlanID, ErrNotFound)
	case errors.Is(err, errReplayed):
		return out, true, nil
	}
	return out, false, err
}

// errReplayed rolls back the transaction of a report that replayed finds was made
// before: whatever the transaction wrote meanwhile (a batch sends its statements at once)
// must not count twice. The report is answered with the task replayed found.
var errReplayed = errors.New("report made before")

// The reports that end a lease, as ended_by records them (migration 0027).
const (
	reportComplete = "COMPLETE"
	reportFail     = "FAIL"
	reportRelease  = "RELEASE"
)

// replayed turns the ErrLeaseLost of a report into the task as it is now when the report's
// lease is the one its holder ended (ended_lease_id) with the same report (ended_by): it
// came before and its answer was lost. Another report on that lease is refused, saying how
// the lease ended; anything else keeps err.
// Its transaction must be rolled back: replayed returns errReplayed then.
func replayed(ctx context.Context, tx pgx.Tx, l Lease, report string, err error) (TaskInfo, error) {
	if !errors.Is(err, ErrLeaseLost) {
		return TaskInfo{}, err
	}
	var endedBy *string
	t, qerr := scanTaskExtra(tx.QueryRow(ctx, `SELECT `+taskColumns+`, ended_by FROM tasks
		WHERE plan_id = $1 AND id = $2 AND ended_lease_id::text = $3`, l.PlanID, l.TaskID, l.LeaseID), &endedBy)
	switch {
	case errors.Is(qerr, pgx.ErrNoRows):
		return TaskInfo{}, err
	case qerr != nil:
		return TaskInfo{}, fmt.Errorf("look for an earlier report of task %s of plan %s: %w", l.TaskID, l.PlanID, qerr)
	case endedBy != nil && *endedBy != report:
		return TaskInfo{}, fmt.Errorf("lease %s of task %s of plan %s was ended by a %s report, so a %s on it is refused: %w",
			l.LeaseID, l.TaskID, l.PlanID, *endedBy, report, ErrLeaseLost)
	}
	return t, errReplayed
}

// unreplayed answers a report that replayed found was made before with the task and no
// error.
func unreplayed(t TaskInfo, err error) (TaskInfo, error) {
	if errors.Is(err, errReplayed) {
		return t, nil
	}
	return t, err
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
	if err := in.Log.check(); err != nil {
		return TaskInfo{}, err
	}
	retryable := in.Retryable == nil || *in.Retryable
	var out TaskInfo
	err := s.workerTx(ctx, func(tx pgx.Tx) error {
		if _, err := lockPlan(ctx, tx, l.PlanID); err != nil {
			return err
		}
		t, err := lockLeased(ctx, tx, l, plan.StatusClaimed, plan.StatusInProgress)
		if err != nil {
			out, err = replayed(ctx, tx, l, reportFail, err)
			return err
		}
		outcome := plan.FailOutcome(t.Attempts, t.MaxAttempts, retryable)
		payload := map[string]any{"worker_id": l.WorkerID, "attempt": t.Attempts, "max_attempts": t.MaxAttempts,
			"cost_usd": in.Cost.String(), "reason": in.Reason, "retryable": retryable}
		if in.CostEstimated {
			payload["cost_estimated"] = true
		}
		cost := `cost_usd = cost_usd + $3::numeric / 1000000, last_error = $4, last_output = NULLIF($5, ''),
			ended_lease_id = lease_id, ended_by = 'FAIL', lease_id = NULL, lease_expires_at = NULL`
		if outcome == plan.TransitionRetry {
			backoff := plan.Backoff(t.Attempts, s.cfg.BackoffBase, s.cfg.BackoffMax)
			out, err = updateTask(ctx, tx, l.PlanID, l.TaskID, cost+`, status = 'PENDING', claimed_by = NULL,
				not_before = now() + make_interval(secs => $6)`, int64(in.Cost), in.Reason, in.Output, backoff.Seconds())
			payload["not_before"] = out.NotBefore
		} else {
			out, err = updateTask(ctx, tx, l.PlanID, l.TaskID, cost+`, status = 'FAILED'`, int64(in.Cost), in.Reason, in.Output)
		}
		if err != nil {
			return err
		}
		if err := insertEvent(ctx, tx, l.PlanID, l.TaskID, string(outcome), payload, rawOrNil(in.Detail)); err != nil {
			return err
		}
		if err := storeTail(ctx, tx, l, in.Log); err != nil {
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
	return unreplayed(out, err)
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
	err := s.workerTx(ctx, func(tx pgx.Tx) error {
		if _, err := lockLeased(ctx, tx, l, plan.StatusClaimed, plan.StatusInProgress); err != nil {
			out, err = replayed(ctx, tx, l, reportRelease, err)
			return err
		}
		var err error
		out, err = updateTask(ctx, tx, l.PlanID, l.TaskID, `status = 'PENDING', ended_lease_id = lease_id, ended_by = 'RELEASE', lease_id = NULL, lease_expires_at = NULL,
			claimed_by = NULL, attempts = greatest(attempts - 1, 0)`)
		if err != nil {
			return err
		}
		if err := insertEvent(ctx, tx, l.PlanID, l.TaskID, EventRelease, map[string]any{"worker_id": l.WorkerID, "reason": reason}, nil); err != nil {
			return err
		}
		return s.changed(ctx, tx, l.PlanID)
	})
	return unreplayed(out, err)
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
	err := s.workerTx(ctx, func(tx pgx.Tx) error {
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
	if err := settleCharged(ctx, tx, planID, taskID, cost, after, budget, status, false); err != nil {
		return err
	}
	return s.changed(ctx, tx, planID)
}

// settleCharged follows a charge of cost that brought the plan's spend to after: the
// budget crossing and the plan's status (unless busy says other tasks still run). The
// caller runs the PlanChanged hook.
func settleCharged(ctx context.Context, tx pgx.Tx, planID, taskID string, cost plan.USD, after int64, budget *int64, status plan.PlanStatus, busy bool) error {
	before := plan.USD(after) - cost
	if budget != nil && status == plan.PlanActive && !plan.Exhausted(budgetPtr(budget), before) && plan.Exhausted(budgetPtr(budget), plan.USD(after)) {
		if err := pauseOnBudget(ctx, tx, planID, plan.USD(*budget), plan.USD(after), map[string]any{"task_id": taskID}); err != nil {
			return err
		}
		status = plan.PlanPaused
	}
	if !busy {
		return settlePlan(ctx, tx, planID, status)
	}
	return nil
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
	// Most changes leave some other task of the plan running, and then nothing can be
	// decided: one probe of tasks_leased says so, instead of a count over the whole plan.
	var busy bool
	if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM tasks
		WHERE plan_id = $1 AND status IN ('CLAIMED', 'IN_PROGRESS'))`, planID).Scan(&busy); err != nil {
		return fmt.Errorf("look for running tasks of plan %s: %w", planID, err)
	}
	if busy {
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
	release, err := s.workerSlot(ctx)
	if err != nil {
		return res, err
	}
	defer release()
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
