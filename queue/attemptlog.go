package queue

import (
	"context"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/whilly-go/whilly/plan"
)

// MaxAttemptLogBytes is how much of an attempt's log is kept: its last 1 MiB. Every append
// trims what fell out of that window in the same statement.
const MaxAttemptLogBytes = 1 << 20

// MaxLogChunkBytes bounds one appended chunk.
const MaxLogChunkBytes = 256 << 10

// NotificationAttemptLog is the Type of the notification an append sends on EventsChannel
// (it writes no event). The listener hands it only to subscribers that asked for it
// (SubscribeLogs), so event streams and claims never wake for a log line.
const NotificationAttemptLog = "attempt.log"

// LogAppend is one chunk of an attempt's log, sent by the worker that holds the lease.
type LogAppend struct {
	Attempt int
	// Offset is where Data begins in the log as this lease's worker produced it (bytes it
	// dropped count: the stored log then has a gap). A chunk already stored (a retried
	// request) is answered again without writing.
	Offset int64
	Data   []byte
}

// LogAppended says where the log stands after an append.
type LogAppended struct {
	// Next is the offset, in the worker's counting, the next chunk must start at or after.
	Next int64
	// Duplicate says the chunk was already stored: nothing was written.
	Duplicate bool
}

// AppendAttemptLog appends a chunk to the log of attempt a.Attempt of the task l holds:
// l must be the task's current, live lease and a.Attempt its current attempt, else
// ErrLeaseLost (another worker's lease, or an attempt that has ended) or ErrInvalid. A
// chunk that overlaps what is stored without being a repeat of it is ErrConflict. The
// append, the trim to the last MaxAttemptLogBytes and the notification that wakes
// followers are one statement, after the task's row is locked.
func (s *Store) AppendAttemptLog(ctx context.Context, l Lease, a LogAppend) (LogAppended, error) {
	switch {
	case a.Attempt < 1:
		return LogAppended{}, fmt.Errorf("attempt %d is not an attempt number: %w", a.Attempt, ErrInvalid)
	case a.Offset < 0:
		return LogAppended{}, fmt.Errorf("offset %d is negative: %w", a.Offset, ErrInvalid)
	case len(a.Data) > MaxLogChunkBytes:
		return LogAppended{}, fmt.Errorf("a log chunk of %d bytes is more than %d: %w", len(a.Data), MaxLogChunkBytes, ErrInvalid)
	}
	var out LogAppended
	err := s.workerTx(ctx, func(tx pgx.Tx) error {
		t, err := lockLeased(ctx, tx, l, plan.StatusClaimed, plan.StatusInProgress)
		if err != nil {
			return err
		}
		if t.Attempts != a.Attempt {
			return fmt.Errorf("lease %s holds attempt %d of task %s, not attempt %d: %w", l.LeaseID, t.Attempts, l.TaskID, a.Attempt, ErrLeaseLost)
		}
		var (
			leaseID    string
			base, size int64
		)
		err = tx.QueryRow(ctx, `SELECT lease_id::text, base, size FROM attempt_logs
			WHERE plan_id = $1 AND task_id = $2 AND attempt = $3`, l.PlanID, l.TaskID, a.Attempt).Scan(&leaseID, &base, &size)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
		case err != nil:
			return fmt.Errorf("read the log of attempt %d of task %s: %w", a.Attempt, l.TaskID, err)
		case leaseID != l.LeaseID:
			// The same attempt number under a new lease: a released attempt claimed again,
			// or a task reset. Its log starts afresh where the old one ended.
			if _, err := tx.Exec(ctx, `DELETE FROM attempt_log_chunks WHERE plan_id = $1 AND task_id = $2 AND attempt = $3`,
				l.PlanID, l.TaskID, a.Attempt); err != nil {
				return fmt.Errorf("restart the log of attempt %d of task %s: %w", a.Attempt, l.TaskID, err)
			}
			base = size
		}
		at := base + a.Offset
		end := at + int64(len(a.Data))
		switch {
		case end <= size && leaseID == l.LeaseID:
			out = LogAppended{Next: size - base, Duplicate: true}
			return nil
		case at < size:
			return fmt.Errorf("a log chunk at offset %d overlaps what is stored up to %d: %w", a.Offset, size-base, ErrConflict)
		}
		cut := max(end-MaxAttemptLogBytes, 0)
		_, err = tx.Exec(ctx, `WITH h AS (
				INSERT INTO attempt_logs (plan_id, task_id, attempt, lease_id, base, size) VALUES ($1, $2, $3, $4, $5, $6)
				ON CONFLICT (plan_id, task_id, attempt) DO UPDATE
				SET lease_id = EXCLUDED.lease_id, base = EXCLUDED.base, size = EXCLUDED.size, updated_at = now()
			), c AS (
				INSERT INTO attempt_log_chunks (plan_id, task_id, attempt, pos, data)
				SELECT $1::text, $2::text, $3::int, $7::bigint, $8::bytea WHERE length($8::bytea) > 0
			), gone AS (
				DELETE FROM attempt_log_chunks
				WHERE plan_id = $1 AND task_id = $2 AND attempt = $3 AND pos + length(data) <= $9
			), cut AS (
				UPDATE attempt_log_chunks SET data = substring(data from ($9 - pos + 1)::int), pos = $9
				WHERE plan_id = $1 AND task_id = $2 AND attempt = $3 AND pos < $9 AND pos + length(data) > $9
			)
			SELECT pg_notify($10, json_build_object('type', $11::text, 'plan_id', $1::text, 'task_id', $2::text, 'attempt', $3::int)::text)`,
			l.PlanID, l.TaskID, a.Attempt, l.LeaseID, base, end, at, a.Data, cut, EventsChannel, NotificationAttemptLog)
		if err != nil {
			return fmt.Errorf("append to the log of attempt %d of task %s: %w", a.Attempt, l.TaskID, err)
		}
		out = LogAppended{Next: end - base}
		return nil
	})
	return out, err
}

// AttemptLog is what is kept of an attempt's log from some offset on.
type AttemptLog struct {
	PlanID  string
	TaskID  string
	Attempt int
	// Offset is where Data begins: the offset asked for, or later when the bytes there
	// are no longer kept (trimmed to the last MaxAttemptLogBytes, or never uploaded).
	Offset int64
	Data   []byte
	// Size is the offset after the last byte: ask for what follows with it.
	Size int64
	// Running says the attempt still holds its lease: more may come.
	Running bool
	// Status is the task's status now.
	Status    plan.Status
	UpdatedAt *time.Time
}

// ReadAttemptLog returns the log of attempt n of a task from offset after on. Attempt 0
// means the task's latest attempt. A task that does not exist, or has no attempt n, is
// ErrNotFound; callers check the plan's scope first.
func (s *Store) ReadAttemptLog(ctx context.Context, planID, taskID string, n int, after int64) (AttemptLog, error) {
	if n < 0 || after < 0 {
		return AttemptLog{}, fmt.Errorf("attempt %d from offset %d: %w", n, after, ErrInvalid)
	}
	out := AttemptLog{PlanID: planID, TaskID: taskID, Attempt: n}
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		var (
			attempts int
			live     bool
			size     *int64
		)
		err := tx.QueryRow(ctx, `SELECT t.status, t.attempts,
				t.status IN ('CLAIMED', 'IN_PROGRESS') AND coalesce(t.lease_expires_at > now(), false)
				  AND t.attempts = CASE WHEN $3 = 0 THEN t.attempts ELSE $3 END,
				l.size, l.updated_at
			FROM tasks t LEFT JOIN attempt_logs l
			  ON l.plan_id = t.plan_id AND l.task_id = t.id AND l.attempt = CASE WHEN $3 = 0 THEN t.attempts ELSE $3 END
			WHERE t.plan_id = $1 AND t.id = $2`, planID, taskID, n).
			Scan(&out.Status, &attempts, &live, &size, &out.UpdatedAt)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("task %s of plan %s: %w", taskID, planID, ErrNotFound)
		}
		if err != nil {
			return fmt.Errorf("read task %s of plan %s: %w", taskID, planID, err)
		}
		if out.Attempt == 0 {
			out.Attempt = attempts
		}
		switch {
		case attempts == 0 && size == nil:
			return fmt.Errorf("task %s of plan %s has not run yet: %w", taskID, planID, ErrNotFound)
		case out.Attempt > attempts && size == nil:
			return fmt.Errorf("task %s of plan %s has no attempt %d, it has had %d: %w", taskID, planID, out.Attempt, attempts, ErrNotFound)
		}
		out.Running = live
		out.Offset, out.Size = after, after
		if size == nil {
			out.Offset, out.Size = 0, 0
			return nil
		}
		out.Size = *size
		if after >= out.Size {
			out.Offset = out.Size
			return nil
		}
		rows, err := tx.Query(ctx, `SELECT pos, data FROM attempt_log_chunks
			WHERE plan_id = $1 AND task_id = $2 AND attempt = $3 AND pos + length(data) > $4 ORDER BY pos`,
			planID, taskID, out.Attempt, after)
		if err != nil {
			return fmt.Errorf("read the log of attempt %d of task %s: %w", out.Attempt, taskID, err)
		}
		first := true
		var (
			pos  int64
			data []byte
		)
		_, err = pgx.ForEachRow(rows, []any{&pos, &data}, func() error {
			if first {
				first = false
				out.Offset = max(pos, after)
				data = data[out.Offset-pos:]
			}
			out.Data = append(out.Data, data...)
			return nil
		})
		if err != nil {
			return fmt.Errorf("read the log of attempt %d of task %s: %w", out.Attempt, taskID, err)
		}
		if first {
			out.Offset = out.Size // nothing kept after the offset
		}
		// The window's first byte may lie inside a character: start at the next one.
		for len(out.Data) > 0 && out.Offset > 0 && !utf8.RuneStart(out.Data[0]) {
			out.Data, out.Offset = out.Data[1:], out.Offset+1
		}
		return nil
	})
	return out, err
}

// degradedLogPoll bounds each wait of WaitAttemptLog while the LISTEN connection is down.
const degradedLogPoll = time.Second

// WaitAttemptLog is ReadAttemptLog for a follower: when nothing follows after and the
// attempt still runs, it waits until deadline for more, woken by ln (an append to the
// task's log, or an event of its plan that may end the attempt), and reads again. It
// answers with what it last read at the deadline, or when stop is closed. A waiting
// follower costs no query. Attempt 0 follows the attempt that is latest at the first read.
func (s *Store) WaitAttemptLog(ctx context.Context, ln *Listener, planID, taskID string, n int, after int64, deadline time.Time, stop <-chan struct{}) (AttemptLog, error) {
	var wake <-chan Notification
	if time.Until(deadline) > 0 {
		// Subscribed before the first read, so nothing appended in between is missed.
		ch, cancel := ln.SubscribeLogs(func(nt Notification) bool {
			return nt.PlanID == planID && (nt.TaskID == taskID || nt.TaskID == "")
		})
		defer cancel()
		wake = ch
	}
	for {
		lg, err := s.ReadAttemptLog(ctx, planID, taskID, n, after)
		if err != nil || len(lg.Data) > 0 || !lg.Running || wake == nil {
			return lg, err
		}
		n = lg.Attempt
		left := time.Until(deadline)
		if left <= 0 {
			return lg, nil
		}
		if !ln.Ready() {
			left = min(left, degradedLogPoll) // no notification comes while LISTEN is down
		}
		t := time.NewTimer(left)
		select {
		case <-wake:
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return lg, nil
		case <-stop:
			t.Stop()
			return lg, nil
		}
		t.Stop()
	}
}

// LogTail is the last chunk of an attempt's log, carried by the report that ends the
// attempt (COMPLETE or FAIL) instead of a request of its own: it is stored in the
// report's transaction, after the report ended the attempt (storeTailsSQL). Offset counts
// as in LogAppend.
type LogTail struct {
	Offset int64
	Data   []byte
}

// maxLogOffset bounds a tail's offset (4 PiB), far below where the statement's
// arithmetic would overflow.
const maxLogOffset = 1 << 52

// check refuses a tail that LogAppend would refuse.
func (t *LogTail) check() error {
	switch {
	case t == nil:
		return nil
	case t.Offset < 0 || t.Offset > maxLogOffset:
		return fmt.Errorf("the log's offset %d is not between 0 and %d: %w", t.Offset, int64(maxLogOffset), ErrInvalid)
	case len(t.Data) > MaxLogChunkBytes:
		return fmt.Errorf("a log chunk of %d bytes is more than %d: %w", len(t.Data), MaxLogChunkBytes, ErrInvalid)
	}
	return nil
}

// storeTailsSQL stores the log tails of reports of plan $1 ($2 task, $3 lease, $4 offset,
// $5 bytes) that this very transaction ended: the task's ended_lease_id is the report's
// lease and its row was written by this transaction (xmin), so a tail is stored exactly
// when its report was, fenced by the same lease check, and a replayed report (its first
// answer lost) stores nothing again. The attempt is the task's. As in AppendAttemptLog, a
// new lease of the same attempt number starts the log afresh, the bytes already stored
// are not stored twice (a tail that repeats them is a duplicate; the lease's worker
// counts offsets in the one stream it produced, so only the part past what is stored is
// new) and the log is trimmed to its last $6 bytes. Followers are woken by the report's own
// event (COMPLETE or FAIL) of the same commit, which wakes a follower of its task
// (WaitAttemptLog), so the tail sends no notification of its own. Each task's log is
// looked up by its whole key, in a subquery of its own (LIMIT 1 keeps the
// planner from joining it): joined, with the log tables analyzed empty on a young
// install, the generic plan looked logs up by plan and attempt number only and read every
// log of the plan for each tail.
const storeTailsSQL = `WITH r AS (
	SELECT * FROM unnest($2::text[], $3::text[], $4::bigint[], $5::bytea[]) AS r(rid, rlease, roff, rdata)
	WHERE length(rdata) > 0
), l AS (
	SELECT r.*, x.attempts AS att, g.lease_id::text AS glease, coalesce(g.size, 0) AS gsize,
		CASE WHEN g.lease_id::text = r.rlease THEN g.base ELSE coalesce(g.size, 0) END AS nbase
	FROM r JOIN tasks x ON x.plan_id = $1 AND x.id = r.rid
	LEFT JOIN LATERAL (SELECT * FROM attempt_logs a WHERE a.plan_id = $1 AND a.task_id = x.id AND a.attempt = x.attempts
		LIMIT 1) g ON true
	WHERE x.ended_lease_id::text = r.rlease AND x.xmin::text::bigint = txid_current() % 4294967296
), z AS (
	SELECT rid, rlease, att, glease, nbase, greatest(nbase + roff, gsize) AS at,
		nbase + roff + length(rdata) AS fin, nbase + roff + length(rdata) - $6 AS cut,
		substring(rdata from (greatest(nbase + roff, gsize) - nbase - roff + 1)::int) AS data
	FROM l WHERE nbase + roff + length(rdata) > gsize
), h AS (
	INSERT INTO attempt_logs (plan_id, task_id, attempt, lease_id, base, size)
	SELECT $1, rid, att, rlease::uuid, nbase, fin FROM z
	ON CONFLICT (plan_id, task_id, attempt) DO UPDATE
	SET lease_id = EXCLUDED.lease_id, base = EXCLUDED.base, size = EXCLUDED.size, updated_at = now()
), c AS (
	INSERT INTO attempt_log_chunks (plan_id, task_id, attempt, pos, data) SELECT $1, rid, att, at, data FROM z
), restart AS (
	DELETE FROM attempt_log_chunks k USING z
	WHERE k.plan_id = $1 AND k.task_id = z.rid AND k.attempt = z.att AND z.glease <> z.rlease
), gone AS (
	DELETE FROM attempt_log_chunks k USING z
	WHERE k.plan_id = $1 AND k.task_id = z.rid AND k.attempt = z.att AND z.glease = z.rlease
	  AND k.pos + length(k.data) <= z.cut
), cut AS (
	UPDATE attempt_log_chunks k SET data = substring(k.data from (z.cut - k.pos + 1)::int), pos = z.cut
	FROM z WHERE k.plan_id = $1 AND k.task_id = z.rid AND k.attempt = z.att AND z.glease = z.rlease
	  AND k.pos < z.cut AND k.pos + length(k.data) > z.cut
)
SELECT count(*) FROM z`

// queueTails queues storeTailsSQL for the tails of reports of plan planID (tails[i]
// belongs to leases[i], nil for none) and reports whether it did: not when none has one.
// It must follow the statements that end the attempts, in their transaction.
func queueTails(b *pgx.Batch, planID string, leases []Lease, tails []*LogTail) bool {
	var (
		ids, ls []string
		offs    []int64
		data    [][]byte
	)
	for i, t := range tails {
		if t == nil || len(t.Data) == 0 {
			continue
		}
		ids, ls = append(ids, leases[i].TaskID), append(ls, leases[i].LeaseID)
		offs, data = append(offs, t.Offset), append(data, t.Data)
	}
	if len(ids) == 0 {
		return false
	}
	b.Queue(storeTailsSQL, planID, ids, ls, offs, data, int64(MaxAttemptLogBytes))
	return true
}

// storeTail stores the tail of one report that tx ended (storeTailsSQL).
func storeTail(ctx context.Context, tx pgx.Tx, l Lease, t *LogTail) error {
	b := &pgx.Batch{}
	if !queueTails(b, l.PlanID, []Lease{l}, []*LogTail{t}) {
		return nil
	}
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("store the log's tail of task %s: %w", l.TaskID, err)
	}
	return nil
}

// queueCompletionTails is queueTails for a batch of completions.
func queueCompletionTails(b *pgx.Batch, planID string, cs []completion) bool {
	leases, tails := make([]Lease, len(cs)), make([]*LogTail, len(cs))
	for i, c := range cs {
		leases[i], tails[i] = c.lease, c.log
	}
	return queueTails(b, planID, leases, tails)
}
