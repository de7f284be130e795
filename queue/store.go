// Package queue is whilly's Postgres store: plans, tasks, workers, tokens and the
// append-only event log, and the SQL that moves tasks through their lifecycle (import,
// gate, claim, leases, transitions, budget). Every state change writes its event in the
// same transaction. It speaks in the types of package plan and must not import the HTTP,
// GitHub or CLI layers.
package queue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/whilly-go/whilly/plan"
)

// Sentinel errors callers branch on.
var (
	// ErrNotFound: the plan, task, worker or token does not exist.
	ErrNotFound = errors.New("not found")
	// ErrConflict: the row exists but is not in a state that allows the change.
	ErrConflict = errors.New("conflict")
)

// WithoutClass is an error's message for people: without the words of the error class it
// ends with (": conflict", ": invalid request"), which tell the code what kind of error
// it is and say nothing to a reader of the sentence before them. A message that only
// names a thing keeps ": not found".
func WithoutClass(msg string) string {
	msg = strings.TrimSpace(msg)
	for _, class := range []error{ErrConflict, ErrInvalid, ErrForbidden, ErrStaleDigest} {
		if m, ok := strings.CutSuffix(msg, ": "+class.Error()); ok {
			return m
		}
	}
	return msg
}

// Config tunes the store. Zero values take the defaults.
type Config struct {
	LeaseTTL    time.Duration // default 60 s
	BackoffBase time.Duration // default 10 s
	BackoffMax  time.Duration // default 10 min
	// MaxAttempts is the attempt limit of tasks that name none (WHILLY_MAX_ATTEMPTS);
	// default plan.DefaultMaxAttempts.
	MaxAttempts int
	// Hooks are fixed when the store is built: every transaction of the store runs the
	// same hooks, whichever part of the process made the change.
	Hooks Hooks
	// JobQueuePrefix, when set, gives the store's River clients (NewRiver, NewInserter)
	// queues of their own: every job they insert goes to the queue of its name with this
	// prefix, and NewRiver's client works those queues, not the shared ones. whilly bench
	// sets it, so that its control plane's jobs — against a fake GitHub — are never worked
	// by a control plane on the same database, and are deleted afterwards.
	JobQueuePrefix string
}

// Hooks let other packages act inside the store's transactions — typically to insert a
// River job (InsertTx) that must exist exactly when the state change commits. A hook's
// error rolls the change back.
type Hooks struct {
	// PlanChanged runs once per touched plan in every transaction that changes a plan or
	// one of its tasks (the GitHub mirror), told what the change means for GitHub
	// (ChangedPlan, which the store works out in the same statement for every plan of the
	// transaction). With no PlanChanged hook the store marks nothing.
	PlanChanged func(ctx context.Context, tx pgx.Tx, c ChangedPlan) error
	// TaskFailed runs in the transaction of every failed attempt, retried or final (the
	// TRIZ analyzer).
	TaskFailed func(ctx context.Context, tx pgx.Tx, f TaskFailure) error
}

// TaskFailure describes a failed attempt to the TaskFailed hook.
type TaskFailure struct {
	PlanID  string
	TaskID  string
	Attempt int
	Version int // the task's row version after the failure: unique per failure, resets included
	Reason  string
	Detail  json.RawMessage // what the worker reported (exit code, output excerpt …); may be nil
	Final   bool            // no attempt left: the task is FAILED
}

func (c Config) withDefaults() Config {
	if c.LeaseTTL <= 0 {
		c.LeaseTTL = 60 * time.Second
	}
	if c.BackoffBase <= 0 {
		c.BackoffBase = 10 * time.Second
	}
	if c.BackoffMax <= 0 {
		c.BackoffMax = 10 * time.Minute
	}
	if c.MaxAttempts <= 0 {
		c.MaxAttempts = plan.DefaultMaxAttempts
	}
	return c
}

// Store is the Postgres-backed state of whilly. It is safe for concurrent use.
type Store struct {
	pool *pgxpool.Pool
	log  *slog.Logger
	cfg  Config

	// claims, completions and handoffs batch the hot paths (fast.go).
	claims      *group[claimKey, ClaimRequest, *Claim]
	completions *group[string, completion, TaskInfo]
	handoffs    *group[handoffKey, handoff, handedOff]
	starts      *group[string, Lease, TaskInfo] // start.go

	// workerConns holds a token for each connection the hot paths hold (batchTx).
	workerConns chan struct{}
}

// NewStore returns a Store over pool.
func NewStore(pool *pgxpool.Pool, log *slog.Logger, cfg Config) *Store {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Store{pool: pool, log: log, cfg: cfg.withDefaults()}
	s.claims = &group[claimKey, ClaimRequest, *Claim]{max: maxBatch, run: s.claimBatch}
	s.completions = &group[string, completion, TaskInfo]{max: maxBatch, run: s.completeBatch}
	s.handoffs = &group[handoffKey, handoff, handedOff]{max: maxBatch, run: s.handoffBatch}
	s.starts = &group[string, Lease, TaskInfo]{max: maxBatch, run: s.startBatch}
	s.workerConns = make(chan struct{}, workerConnSlots(pool.Config().MaxConns))
	return s
}

// Pool returns the connection pool the store uses.
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// Config returns the store's effective configuration.
func (s *Store) Config() Config { return s.cfg }

// inTx runs fn in a transaction, committing when it returns nil.
func (s *Store) inTx(ctx context.Context, fn func(pgx.Tx) error) error {
	return pgx.BeginFunc(ctx, s.pool, fn)
}

// Event is one row of the audit log.
type Event struct {
	ID        int64           `json:"id"`
	PlanID    string          `json:"plan_id"`
	TaskID    string          `json:"task_id,omitempty"`
	Type      string          `json:"type"`
	Payload   json.RawMessage `json:"payload"`
	Detail    json.RawMessage `json:"detail"`
	CreatedAt time.Time       `json:"created_at"`
}

// Event types written by the store. They are persisted: never rename one.
const (
	EventPlanCreated        = "plan.created"
	EventPlanApplied        = "plan.applied"
	EventPlanDeleted        = "plan.deleted"
	EventPlanReset          = "plan.reset"
	EventPlanBudgetRaised   = "plan.budget_raised"
	EventPlanBudgetLowered  = "plan.budget_lowered"
	EventPlanBudgetExceeded = "plan.budget_exceeded"
	EventPlanDone           = "plan.done"
	EventPlanFailed         = "plan.failed"
	EventPlanCancelled      = "plan.cancelled"
	EventPlanCharged        = "plan.charged"
	EventTaskCreated        = "task.created"
	EventTaskSkipped        = "task.skipped"
	EventTaskUpdated        = "task.updated"
	EventPlanReopened       = "plan.reopened"
)

// insertEvent appends one event inside tx. payload and detail are marshalled to JSON;
// nil becomes {}.
func insertEvent(ctx context.Context, tx pgx.Tx, planID, taskID, typ string, payload, detail any) error {
	p, err := jsonObject(payload)
	if err != nil {
		return fmt.Errorf("encode %s payload: %w", typ, err)
	}
	d, err := jsonObject(detail)
	if err != nil {
		return fmt.Errorf("encode %s detail: %w", typ, err)
	}
	_, err = tx.Exec(ctx,
		`INSERT INTO events (plan_id, task_id, type, payload, detail) VALUES ($1, NULLIF($2, ''), $3, $4, $5)`,
		planID, taskID, typ, p, d)
	if err != nil {
		return fmt.Errorf("insert %s event: %w", typ, err)
	}
	return nil
}

func jsonObject(v any) ([]byte, error) {
	if v == nil {
		return []byte("{}"), nil
	}
	return json.Marshal(v)
}

// EventFilter selects events: those after the id After, of one plan when PlanID is set.
type EventFilter struct {
	PlanID string
	After  int64
	Limit  int    // default 100, at most 1000
	Scopes Scopes // only events of plans these allow (limited: no event without a plan)
}

// unsettledSQL is the lowest event id a transaction in flight may still commit (NULL
// when none is in flight): readers that move a cursor hand out only ids below it, so an
// event whose transaction commits late is never skipped (issue 14). Each transaction that
// writes events announces, before it draws its first id, a floor under its ids as a
// shared advisory lock (whilly_event_id, migration 0009); this reads them from pg_locks.
// The statement's snapshot is taken before pg_locks is read, so an id it sees was drawn
// before any floor it misses.
const unsettledSQL = `(SELECT min((l.classid::bigint << 32) | l.objid::bigint) FROM pg_locks l
	WHERE l.locktype = 'advisory' AND l.objsubid = 1 AND l.mode = 'ShareLock' AND l.granted
	  AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
	  AND l.pid <> pg_backend_pid())`

// EventPage is a page of events and whether events after it are held back because an
// earlier id may still be committed: ask again soon, not only on the next notification.
type EventPage struct {
	Events []Event
	Held   bool
}

// Events returns events in id order: those after f.After, below the first id a
// transaction in flight may still commit (see unsettledSQL).
func (s *Store) Events(ctx context.Context, f EventFilter) ([]Event, error) {
	p, err := s.EventPage(ctx, f)
	return p.Events, err
}

// EventPage is Events, saying whether later events were held back.
func (s *Store) EventPage(ctx context.Context, f EventFilter) (EventPage, error) {
	if f.Limit <= 0 {
		f.Limit = 100
	}
	f.Limit = min(f.Limit, 1000)
	rows, err := s.pool.Query(ctx, `
		WITH u AS (SELECT `+unsettledSQL+` AS id)
		SELECT e.id, coalesce(e.plan_id, ''), coalesce(e.task_id, ''), e.type, e.payload, e.detail, e.created_at,
			EXISTS (SELECT 1 FROM events h WHERE h.id >= (SELECT id FROM u) AND h.id > $1)
		FROM events e
		WHERE e.id > $1 AND ($2 = '' OR e.plan_id = $2) AND e.id < coalesce((SELECT id FROM u), 9223372036854775807)
		  AND ($4::text[] = '{}' OR e.plan_id IN (SELECT p.id FROM plans p WHERE `+scopeMatchSQL("$4")+`))
		ORDER BY e.id
		LIMIT $3`, f.After, f.PlanID, f.Limit, f.Scopes.Strings())
	if err != nil {
		return EventPage{}, fmt.Errorf("list events: %w", err)
	}
	var page EventPage
	page.Events, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (Event, error) {
		var e Event
		err := r.Scan(&e.ID, &e.PlanID, &e.TaskID, &e.Type, &e.Payload, &e.Detail, &e.CreatedAt, &page.Held)
		return e, err
	})
	if err != nil {
		return EventPage{}, fmt.Errorf("list events: %w", err)
	}
	if len(page.Events) == 0 {
		// No row to carry the answer: ask on its own.
		if err := s.pool.QueryRow(ctx, `WITH u AS (SELECT `+unsettledSQL+` AS id)
			SELECT EXISTS (SELECT 1 FROM events h WHERE h.id >= (SELECT id FROM u) AND h.id > $1)`, f.After).Scan(&page.Held); err != nil {
			return EventPage{}, fmt.Errorf("look for events in flight: %w", err)
		}
	}
	return page, nil
}

// usdParam converts an amount to the numeric text Postgres stores exactly.
func usdParam(u *plan.USD) *string {
	if u == nil {
		return nil
	}
	s := u.String()
	return &s
}

// isUniqueViolation reports whether err is a unique-constraint violation.
func isUniqueViolation(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "23505"
}
