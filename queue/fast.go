package queue

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/whilly-go/whilly/plan"
)

// The hot paths — claims, and completions that charge nothing — run in batches (see
// group): concurrent calls of one key share a statement, its transaction, its commit and
// its NOTIFY, and the store's PlanChanged hook runs once per batch for each plan the batch
// changed, in that transaction (hotTx). A batch of completions that might settle their
// plan gives up there and runs again, whole, under the plan's row lock, which then
// settles the plan once (lockedTx). A completion that charges a cost, or that a batch
// left out, is a locked batch of one of the same statement (completeCareful): one SQL
// text writes DONE.

// maxBatch caps the calls answered by one statement.
const maxBatch = 64

// fast reports whether a completion may take the batched path: it charges nothing, so
// it cannot cross the plan's budget.
func fast(in CompleteInput) bool { return in.Cost == 0 }

// hotTx sends the statements of a batch (b) in one round trip; read reads their results
// in order, without closing them. Without a PlanChanged hook the pipeline is one implicit
// transaction. With one, BEGIN goes first and markChangedSQL (for what the batch may
// have changed, t) last in the same round trip; the hook then runs once for each plan
// the batch changed, and COMMIT follows: two round trips, and more only when a hook has
// a job to insert. An error of read or of a hook rolls everything back.
func (s *Store) hotTx(ctx context.Context, b *pgx.Batch, t touched, read func(pgx.BatchResults) error) error {
	return s.batchTx(ctx, b, t, read, nil)
}

// reservedConns is how many of the pool's connections the hot paths leave to the rest
// of the control plane (workerConnSlots).
const reservedConns = 2

// workerConnSlots is how many connections the transactions of workers' requests
// (workerSlot) may hold at once: all of a pool of maxConns but reservedConns, and at
// least one. A busy fleet's requests queue here, not in the pool, so that a labelled
// issue's intake, the mirror and River find a connection without waiting behind them.
// In bench scale on 2 cores (a pool of 8), over six runs alternating with and without
// it, label→first claim p99 was 319–565 ms against 368–730 ms, label→👀 p99 173–302 ms
// against 214–492 ms, and the runs took 113.8–127.1 s against 113.9–117.6 s; claims and
// e2e did not change beyond their noise.
func workerConnSlots(maxConns int32) int {
	return max(1, int(maxConns)-reservedConns)
}

// lockedTx is hotTx for a batch that may settle its plan (t.plan): the plan's row is
// locked first in the same round trip, and the plan is settled after the batch's
// statements, before the hook and the commit. A plan that is gone answers errGaveUp: each
// call takes the careful path, which says so.
func (s *Store) lockedTx(ctx context.Context, b *pgx.Batch, t touched, read func(pgx.BatchResults) error) error {
	return s.batchTx(ctx, b, t, read, func(ctx context.Context, tx pgx.Tx, status plan.PlanStatus) error {
		return settlePlan(ctx, tx, t.plan, status)
	})
}

// settleFunc settles a plan in the transaction of a batch that holds its row lock.
type settleFunc func(ctx context.Context, tx pgx.Tx, status plan.PlanStatus) error

// workerSlot waits for one of the workers' connection slots (workerConnSlots) and
// returns its release. Every transaction a worker's request runs takes one before its
// connection, and before any lock: the batches (batchTx) and the careful paths outside
// them (workerTx, Heartbeat). None of them runs inside another, so none waits for a slot
// while it holds one.
func (s *Store) workerSlot(ctx context.Context) (func(), error) {
	select {
	case s.workerConns <- struct{}{}:
		return func() { <-s.workerConns }, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("wait for a connection: %w", ctx.Err())
	}
}

// workerTx is inTx for a worker's request outside the batches (a start or completion a
// batch left out, a completion that charges a cost, FAIL, RELEASE, a task event, a log
// chunk): it holds a worker slot, so that a fleet's reports cannot take the
// connections the rest of the control plane needs either.
func (s *Store) workerTx(ctx context.Context, fn func(pgx.Tx) error) error {
	release, err := s.workerSlot(ctx)
	if err != nil {
		return err
	}
	defer release()
	return s.inTx(ctx, fn)
}

// batchTx runs a batch: under the plan's row lock (t.plan), settled by settle, when
// settle is set.
func (s *Store) batchTx(ctx context.Context, b *pgx.Batch, t touched, read func(pgx.BatchResults) error, settle settleFunc) error {
	locked := settle != nil
	release, err := s.workerSlot(ctx)
	if err != nil {
		return err
	}
	defer release()
	hooked := s.cfg.Hooks.PlanChanged != nil
	if !hooked && !locked {
		br := s.pool.SendBatch(ctx, b)
		err := read(br)
		if cerr := br.Close(); err == nil {
			err = cerr
		}
		return err
	}
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("acquire a connection: %w", err)
	}
	defer conn.Release() // the pool closes a connection left in a transaction
	full := &pgx.Batch{}
	full.Queue("BEGIN")
	if locked {
		full.Queue(lockPlanSQL, t.plan)
	}
	full.QueuedQueries = append(full.QueuedQueries, b.QueuedQueries...)
	if hooked && !locked { // a batch that may settle its plan marks it after (ChangedPlan.Final)
		full.Queue(markChangedSQL, t.args()...)
	}
	br := conn.SendBatch(ctx, full)
	_, err = br.Exec()
	var status plan.PlanStatus
	if err == nil && locked {
		if err = br.QueryRow().Scan(&status); errors.Is(err, pgx.ErrNoRows) {
			err = errGaveUp
		}
	}
	if err == nil {
		err = read(br)
	}
	var cs []ChangedPlan
	if err == nil && hooked && !locked {
		cs, err = scanChanges(br.Query())
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	tx := openTx{conn: conn.Conn()}
	if err == nil && locked {
		err = settle(ctx, tx, status)
	}
	if err == nil && hooked && locked {
		cs, err = scanChanges(tx.Query(ctx, markChangedSQL, t.args()...))
	}
	if err == nil && hooked {
		err = s.planChanged(ctx, tx, cs)
	}
	if err != nil {
		if conn.Conn().PgConn().TxStatus() != 'I' {
			_ = tx.Rollback(ctx)
		}
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

// indexPaths, selected in a transaction, keeps its statements on indexes: the planner's
// row counts of tasks lag behind the table (a new install, a burst of imports: autoanalyze
// comes up to a minute later), and believing tasks small it scanned the whole table for
// every dependency it checked and hashed it for a claim's update — in bench scale, on a
// cluster a minute old, claims of 6.6 s and imports of 0.75 s, every delivery waiting
// behind them. Every statement it covers has an index for what it reads. It turns JIT
// compilation off too: the cost a plan then carries for a scan it cannot avoid (the fleet
// row) passes JIT's thresholds, and compiling took 0.8 s a claim; no statement of these
// transactions runs long enough to gain from it.
const indexPaths = `set_config('enable_seqscan', 'off', true), set_config('jit', 'off', true)`

// hotSettings makes the statements after it, in its transaction, use the generic plan of
// their prepared statement, and indexes (indexPaths) through plain index scans. Planning
// the claim statement costs about 0.8 ms, eight times what running it costs, and Postgres
// would plan it afresh on every call: custom plans look cheaper to it, whatever the
// parameters. Its generic plan walks the same indexes. The hot statements read partial
// indexes that every claim, start and completion adds an entry to (tasks_claimed_by,
// tasks_running, tasks_claim_plan), and vacuum removes the dead ones a minute or more
// later: an index scan marks the dead entries it meets so that later scans pass over
// them, a bitmap scan visits their heap pages on every call and marks nothing. Late in
// bench scale a bitmap scan of tasks_claimed_by for five workers' claims read 431
// entries and 240 heap pages (5 ms), once per handoff.
const hotSettings = `SELECT set_config('plan_cache_mode', 'force_generic_plan', true),
	set_config('enable_bitmapscan', 'off', true), ` + indexPaths

// hotBatch starts a pipeline of hot-path statements: hotSettings first.
func hotBatch() *pgx.Batch {
	b := &pgx.Batch{}
	b.Queue(hotSettings)
	return b
}

// hotQuery reads the result of hotSettings and returns the next statement's rows.
func hotQuery(br pgx.BatchResults) (pgx.Rows, error) {
	if _, err := br.Exec(); err != nil {
		return nil, err
	}
	return br.Query()
}

// walkStart and walkEnd bracket the statement of a claim of any plan in its batch
// (queueClaim): the planner plans it, the first time a connection runs it, with sorts and
// bitmap scans off, then the settings are as before for the statements after it. It must
// walk the claim order (tasks_claim_fair) and stop at the tasks it needs, probing each
// task's plan by its key; the planner cannot tell that the walk stops early (it does not
// know how many tasks wait on others), and with live plans whose tasks form chains, as
// issues' task lists do, it chose to read and check every pending task of every live
// plan and sort them: 28–54 ms a claim with 300 issues in bench scale, fresh statistics
// or not; with young ones, it scanned every live plan for each task
// (TestClaimWalksTheClaimOrderAfterABurstOfImports). Off for the whole batch, the other
// statements lost their short sorts (the completion's lock order walked the plan's
// tasks: 3.4 ms instead of 0.8 in bench claims).
const (
	walkStart = `SELECT set_config('whilly.enable_sort', current_setting('enable_sort'), true),
		set_config('whilly.enable_bitmapscan', current_setting('enable_bitmapscan'), true),
		set_config('enable_sort', 'off', true), set_config('enable_bitmapscan', 'off', true)`
	walkEnd = `SELECT set_config('enable_sort', current_setting('whilly.enable_sort'), true),
		set_config('enable_bitmapscan', current_setting('whilly.enable_bitmapscan'), true)`
)

// queueClaim queues a claim statement of plan planID, bracketed by walkStart and walkEnd
// when it claims from any plan ("").
func queueClaim(b *pgx.Batch, planID, sql string, args ...any) {
	if planID == "" {
		b.Queue(walkStart)
	}
	b.Queue(sql, args...)
	if planID == "" {
		b.Queue(walkEnd)
	}
}

// readClaims reads what queueClaim queued: the claims of n workers.
func readClaims(br pgx.BatchResults, planID string, n int) ([]*Claim, error) {
	if planID == "" {
		if _, err := br.Exec(); err != nil {
			return nil, fmt.Errorf("claim tasks: %w", err)
		}
	}
	rows, err := br.Query()
	cs, err := scanClaims(rows, err, n)
	if err == nil && planID == "" {
		if _, err := br.Exec(); err != nil {
			return nil, fmt.Errorf("claim tasks: %w", err)
		}
	}
	return cs, err
}

// claimKey groups claims that one statement can answer: of the same plan (or any), by
// workers with the same labels and scopes.
type claimKey struct{ plan, labels, scopes string }

func keyOf(req ClaimRequest) claimKey {
	labels := slices.Clone(req.Labels)
	slices.Sort(labels)
	return claimKey{plan: req.PlanID, labels: strings.Join(labels, "\x00"), scopes: strings.Join(req.Scopes, "\x00")}
}

// claimBatch answers a batch of claims of one key (the claims group's run).
func (s *Store) claimBatch(ctx context.Context, key claimKey, reqs []ClaimRequest) ([]*Claim, []error) {
	var cs []*Claim
	b := hotBatch()
	queueClaim(b, key.plan, claimSQL(key.plan), claimArgs(s.cfg.LeaseTTL, key.plan, reqs[0].Labels, reqs[0].Scopes, reqs)...)
	err := s.hotTx(ctx, b, touched{workers: claimWorkers(reqs)}, func(br pgx.BatchResults) error {
		if _, err := br.Exec(); err != nil { // hotSettings
			return err
		}
		var err error
		cs, err = readClaims(br, key.plan, len(reqs))
		return err
	})
	if err != nil {
		return make([]*Claim, len(reqs)), fill(len(reqs), err)
	}
	return cs, make([]error, len(reqs))
}

// claimWorkers returns the workers of claims.
func claimWorkers(reqs []ClaimRequest) []string {
	ws := make([]string, len(reqs))
	for i, r := range reqs {
		ws[i] = r.WorkerID
	}
	return ws
}

// errCareful: the batched path gave up and wrote nothing; take the careful one.
var errCareful = errors.New("take the careful path")

// errGaveUp rolls back the transaction of a batch whose completions gave up.
var errGaveUp = errors.New("the completions gave up")

// completeUnsettledSQL completes tasks of plan $1 without touching the plan, provided
// another of its tasks stays live until the commit: one that waits with every dependency
// finished, one that waits only on tasks this statement completes (the next task of a
// chain, as an issue's task list is), or one that runs. Such a task is locked FOR SHARE,
// so it cannot change before this transaction commits, and whoever changes it later sees
// these completions: the plan's status cannot be decided here, and the next transaction
// that can decide it will. SKIP LOCKED keeps the statement from waiting on anyone (no
// deadlock with the paths that lock the plan first). Only the 16 pending tasks last in
// claim order are looked at for a ready task, so that claimers are not kept from the
// tasks they want next, and the 16 first for the next task of a chain (no claimer can
// take it before this commits); long chains do not cost a scan. With no such task,
// whilly_require aborts the statement, and the batch runs again under the plan's row
// lock (completeLockedSQL, lockedTx). A task whose lease does not match is left out of
// the result (the careful path says why). No deadlock: the tasks are locked in id order
// (lk), as every statement that locks several tasks of a plan does, and every update is
// done before the witness is locked (count(*) over u reads it to the end first), so a
// statement never waits while it holds a witness.
const (
	// completeTasksSQL completes the tasks, adds each one's cost ($7, micro-dollars; only
	// the careful path's is not zero) to the task's, and writes their COMPLETE events: the
	// part of completeUnsettledSQL and completeLockedSQL that they share.
	completeTasksSQL = `WITH r AS (
	SELECT * FROM unnest($2::text[], $3::text[], $4::text[], $5::text[], $6::jsonb[], $7::bigint[])
		WITH ORDINALITY AS r(rid, rlease, rworker, rresult, rpayload, rcost, n)
), lk AS (
	SELECT id AS lid FROM tasks WHERE plan_id = $1 AND id = ANY ($2::text[]) ORDER BY id FOR NO KEY UPDATE
), u AS (
	UPDATE tasks SET status = 'DONE', ended_lease_id = lease_id, ended_by = 'COMPLETE', lease_id = NULL, lease_expires_at = NULL,
		cost_usd = cost_usd + r.rcost::numeric / 1000000, result = r.rresult, last_error = NULL, last_output = NULL, not_before = NULL, version = version + 1, updated_at = now()
	FROM r JOIN lk ON lk.lid = r.rid
	WHERE plan_id = $1 AND id = r.rid AND lease_id::text = r.rlease AND claimed_by = r.rworker
	  AND status IN ('CLAIMED', 'IN_PROGRESS') AND lease_expires_at > now()
	RETURNING ` + taskColumns + `, r.n, r.rpayload
), ev AS (
	INSERT INTO events (plan_id, task_id, type, payload)
	SELECT plan_id, id, 'COMPLETE', rpayload || jsonb_build_object('attempt', attempts) FROM u
)`
	completeUnsettledSQL = completeTasksSQL + `, ready AS (
	SELECT 1 FROM tasks t
	WHERE t.plan_id = $1 AND t.id = ANY (ARRAY(
		SELECT id FROM tasks WHERE plan_id = $1 AND status = 'PENDING' ORDER BY priority_rank DESC, ord DESC LIMIT 16))
	  AND t.status = 'PENDING' AND ` + depsFinished + `
	LIMIT 1 FOR SHARE SKIP LOCKED
), next AS (
	SELECT 1 FROM tasks t
	WHERE t.plan_id = $1 AND t.id = ANY (ARRAY(
		SELECT id FROM tasks WHERE plan_id = $1 AND status = 'PENDING' ORDER BY priority_rank, ord LIMIT 16))
	  AND t.status = 'PENDING' AND t.dependencies && ARRAY(SELECT id FROM u)
	  AND NOT EXISTS (` + depsUnfinished + ` AND d.dep <> ALL (ARRAY(SELECT id FROM u)))
	LIMIT 1 FOR SHARE SKIP LOCKED
), running AS (
	SELECT 1 FROM tasks t
	WHERE t.plan_id = $1 AND t.status IN ('CLAIMED', 'IN_PROGRESS') AND t.id <> ALL ($2::text[])
	LIMIT 1 FOR SHARE SKIP LOCKED
)
SELECT u.*, whilly_require((SELECT count(*) FROM u) >= 0 AND (EXISTS (SELECT 1 FROM ready) OR EXISTS (SELECT 1 FROM next) OR EXISTS (SELECT 1 FROM running)),
	'the plan may be settled by this completion') FROM u`
	// completeLockedSQL is completeUnsettledSQL for a batch that holds its plan's row lock
	// (lockedTx): it needs no witness.
	completeLockedSQL = completeTasksSQL + `
SELECT u.*, true FROM u`
)

// completion is a COMPLETE; payload is its event's. Only the careful path
// (completeCareful) takes one with a cost: it charges the plan.
type completion struct {
	lease   Lease
	result  string
	payload []byte
	log     *LogTail
	cost    plan.USD
}

func completeArgs(planID string, cs []completion) []any {
	ids, leases, workers, results := make([]string, len(cs)), make([]string, len(cs)), make([]string, len(cs)), make([]string, len(cs))
	payloads, costs := make([][]byte, len(cs)), make([]int64, len(cs))
	for i, c := range cs {
		ids[i], leases[i], workers[i], results[i], payloads[i] = c.lease.TaskID, c.lease.LeaseID, c.lease.WorkerID, c.result, c.payload
		costs[i] = int64(c.cost)
	}
	return []any{planID, ids, leases, workers, results, payloads, costs}
}

// completed is what a completeUnsettledSQL statement did for each of its completions:
// the task, or errCareful when it left the completion alone (its lease did not match, or
// the statement gave up).
type completed struct {
	tasks  []TaskInfo
	errs   []error
	gaveUp bool // whilly_require stopped the statement: its transaction wrote nothing
}

// scanCompleted reads the answer of completeUnsettledSQL (rows, or the error of sending
// it) for n completions and closes the rows.
func scanCompleted(rows pgx.Rows, err error, n int) (completed, error) {
	if err != nil {
		return gaveUp(err, n)
	}
	defer rows.Close()
	c := completed{tasks: make([]TaskInfo, n), errs: fill(n, errCareful)}
	for rows.Next() {
		var (
			i       int
			payload []byte
			live    bool
		)
		t, err := scanTaskExtra(rows, &i, &payload, &live)
		if err != nil {
			return completed{}, err
		}
		c.tasks[i-1], c.errs[i-1] = t, nil
	}
	if err := rows.Err(); err != nil {
		return gaveUp(err, n)
	}
	return c, nil
}

// gaveUp answers n completions whose statement failed with err: errCareful for each when
// whilly_require stopped it, else err.
func gaveUp(err error, n int) (completed, error) {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "WH001" {
		return completed{tasks: make([]TaskInfo, n), errs: fill(n, errCareful), gaveUp: true}, nil
	}
	return completed{}, err
}

// completeBatch completes a batch of tasks of one plan in one statement (the completions
// group's run); a batch that gave up runs again under the plan's row lock.
func (s *Store) completeBatch(ctx context.Context, planID string, cs []completion) ([]TaskInfo, []error) {
	done, err := s.completeTx(ctx, planID, cs, s.hotTx, completeUnsettledSQL)
	if errors.Is(err, errGaveUp) {
		done, err = s.completeTx(ctx, planID, cs, s.lockedTx, completeLockedSQL)
	}
	switch {
	case errors.Is(err, errGaveUp):
		return make([]TaskInfo, len(cs)), fill(len(cs), errCareful)
	case err != nil:
		return make([]TaskInfo, len(cs)), fill(len(cs), fmt.Errorf("complete tasks of plan %s: %w", planID, err))
	}
	return done.tasks, done.errs
}

// batchTxFunc is hotTx or lockedTx.
type batchTxFunc func(ctx context.Context, b *pgx.Batch, t touched, read func(pgx.BatchResults) error) error

// completeTx runs one try of completeBatch: the statement sql in the transaction of run.
func (s *Store) completeTx(ctx context.Context, planID string, cs []completion, run batchTxFunc, sql string) (completed, error) {
	var done completed
	b := hotBatch()
	b.Queue(sql, completeArgs(planID, cs)...)
	tails := queueCompletionTails(b, planID, cs)
	err := run(ctx, b, touched{plan: planID, tasks: completionTasks(cs)}, func(br pgx.BatchResults) error {
		rows, err := hotQuery(br)
		if done, err = scanCompleted(rows, err, len(cs)); err == nil && done.gaveUp {
			err = errGaveUp // its transaction failed: the rest did not run
		}
		if err == nil && tails {
			_, err = br.Exec()
		}
		return err
	})
	return done, err
}

// completionTasks returns the tasks of completions.
func completionTasks(cs []completion) []string {
	ids := make([]string, len(cs))
	for i, c := range cs {
		ids[i] = c.lease.TaskID
	}
	return ids
}

// handoff is a completion that also claims the worker's next task.
type handoff struct {
	completion
	next ClaimRequest
}

type handoffKey struct {
	plan  string // of the completions
	claim claimKey
}

type handedOff struct {
	task TaskInfo
	next *Claim
}

// CompleteAndClaim completes the task like Complete, then claims the worker's next task
// like Claim (next; nil when nothing is claimable). Without cost, both go in one
// transaction, batched with other workers' (see handoffBatch). An
// error is the completion's; a claim that fails after it is only logged.
func (s *Store) CompleteAndClaim(ctx context.Context, l Lease, in CompleteInput, next ClaimRequest) (TaskInfo, *Claim, error) {
	p, err := completePayload(l, in)
	if err != nil {
		return TaskInfo{}, nil, err
	}
	if fast(in) {
		h, err := s.handoffs.do(ctx, handoffKey{plan: l.PlanID, claim: keyOf(next)}, handoff{completion{lease: l, result: in.Result, payload: p, log: in.Log}, next})
		switch {
		case err == nil:
			return h.task, h.next, nil
		case !errors.Is(err, errCareful):
			return TaskInfo{}, nil, err
		}
	}
	t, replay, err := s.completeCareful(ctx, l, in, p)
	if err != nil {
		return t, nil, err
	}
	if replay && next.Key != "" {
		// The first answer was lost, and with it, maybe, the next claim it carried.
		if c, err := s.HeldClaim(ctx, next); err != nil || c != nil {
			return t, c, err
		}
	}
	c, err := s.Claim(ctx, next)
	if err != nil {
		s.log.WarnContext(ctx, "claim after a completion failed", "worker_id", next.WorkerID, "error", err)
		return t, nil, nil
	}
	return t, c, nil
}

// handoffBatch completes a batch of tasks of one plan and claims as many next tasks for
// their workers, in two statements sent together: one round trip, one transaction (the
// handoffs group's run). The claim sees the completions: a task that they make claimable
// may be handed over at once, and a worker whose completion was left alone gets nothing
// (handoffWorkers) and takes the careful path. When the completions give up, so do the
// claims, and the batch runs again under the plan's row lock.
func (s *Store) handoffBatch(ctx context.Context, key handoffKey, hs []handoff) ([]handedOff, []error) {
	out, errs, err := s.handoffTx(ctx, key, hs, s.hotTx, completeUnsettledSQL)
	if errors.Is(err, errGaveUp) {
		out, errs, err = s.handoffTx(ctx, key, hs, s.lockedTx, completeLockedSQL)
	}
	switch {
	case errors.Is(err, errGaveUp):
		return make([]handedOff, len(hs)), fill(len(hs), errCareful)
	case err != nil:
		return make([]handedOff, len(hs)), fill(len(hs), fmt.Errorf("complete tasks of plan %s and claim the next: %w", key.plan, err))
	}
	return out, errs
}

// handoffTx runs one try of handoffBatch: the completion statement complete, then the
// claims, in the transaction of run.
func (s *Store) handoffTx(ctx context.Context, key handoffKey, hs []handoff, run batchTxFunc, complete string) ([]handedOff, []error, error) {
	cs, reqs := make([]completion, len(hs)), make([]ClaimRequest, len(hs))
	for i, h := range hs {
		cs[i], reqs[i] = h.completion, h.next
	}
	claim := handoffClaimAnySQL
	if key.claim.plan != "" {
		claim = handoffClaimPlanSQL
	}
	tasks := completionTasks(cs)
	out := make([]handedOff, len(hs))
	var done completed
	b := hotBatch()
	b.Queue(complete, completeArgs(key.plan, cs)...)
	tails := queueCompletionTails(b, key.plan, cs)
	queueClaim(b, key.claim.plan, claim, append(claimArgs(s.cfg.LeaseTTL, key.claim.plan, reqs[0].Labels, reqs[0].Scopes, reqs), key.plan, tasks, handedStarts(reqs))...)
	err := run(ctx, b, touched{plan: key.plan, tasks: tasks, workers: claimWorkers(reqs)}, func(br pgx.BatchResults) error {
		rows, err := hotQuery(br)
		if done, err = scanCompleted(rows, err, len(hs)); err != nil {
			return err
		}
		if done.gaveUp {
			return errGaveUp // its transaction failed: the claims did not run
		}
		if tails {
			if _, err := br.Exec(); err != nil {
				return err
			}
		}
		claims, err := readClaims(br, key.claim.plan, len(hs))
		for i, c := range claims {
			out[i].next = c
		}
		return err
	})
	if err != nil {
		return nil, nil, err
	}
	for i := range hs {
		out[i].task = done.tasks[i]
	}
	return out, done.errs, nil
}
