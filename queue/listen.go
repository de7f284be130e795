package queue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// EventsChannel is the NOTIFY channel on which the events table's trigger announces every
// inserted event (migrations/0001_init.up.sql).
const EventsChannel = "whilly_events"

// NotificationResync is the Type of the notification the listener hands to every
// subscriber, whatever its filter, each time its LISTEN connection comes up: notifications
// may have been missed while it was down, so subscribers must re-check the database.
const NotificationResync = "listener.resync"

// NotificationWorkerRevoked is the Type of the notification RevokeWorker sends (it writes
// no event): caches of worker tokens must forget them.
const NotificationWorkerRevoked = "worker.revoked"

// Notification is the payload of one whilly_events NOTIFY. The trigger sends one per
// statement and (plan, type): Count events, the highest id being ID (and the lowest MinID
// when the trigger reports it); TaskID is set when the group holds one event. It carries
// no payload or detail; read the events from the database when they are needed.
type Notification struct {
	ID     int64  `json:"id"`
	MinID  int64  `json:"min_id,omitempty"`
	Count  int    `json:"count,omitempty"`
	PlanID string `json:"plan_id"`
	TaskID string `json:"task_id"`
	Type   string `json:"type"`
	// Attempt is set on NotificationAttemptLog: the attempt whose log grew.
	Attempt int `json:"attempt,omitempty"`
}

// Lowest returns the lowest event id the notification may cover: MinID when the trigger
// sent it, else the lowest id Count consecutive ids ending at ID would have.
func (n Notification) Lowest() int64 {
	if n.MinID > 0 {
		return n.MinID
	}
	return n.ID - int64(max(n.Count, 1)) + 1
}

// subscriberBuffer is how many notifications a subscriber may fall behind before new ones
// are dropped for it. A dropped notification only loses a wake-up that an earlier,
// still-buffered one already provides, since subscribers re-read the database on wake.
const subscriberBuffer = 64

// ListenerStats counts what the listener has done since it was built.
type ListenerStats struct {
	Received   uint64 // notifications read from Postgres
	Dropped    uint64 // deliveries skipped because a subscriber's buffer was full
	Reconnects uint64 // LISTEN connections established after the first
}

// Listener holds one dedicated Postgres connection listening on EventsChannel and fans
// the notifications out to in-process subscribers (long-polling claims, SSE streams).
// Waking through Postgres rather than process memory lets any number of control-plane
// replicas share one database. The zero value is not usable; build one with NewListener.
type Listener struct {
	pool *pgxpool.Pool
	log  *slog.Logger

	// Backoff between reconnection attempts, and how long the connection may stay silent
	// before it is pinged to detect a peer that vanished without closing the socket.
	minBackoff, maxBackoff time.Duration
	idlePing               time.Duration

	ready   atomic.Bool
	pid     atomic.Uint32 // backend pid of the LISTEN connection, 0 when down
	running atomic.Bool

	received, dropped, reconnects atomic.Uint64
	// revocations changes whenever a worker may have been revoked unseen by this process.
	revocations atomic.Uint64

	mu   sync.RWMutex
	subs map[*subscriber]struct{}
}

type subscriber struct {
	ch     chan Notification
	filter func(Notification) bool
	logs   bool // also hand it NotificationAttemptLog (SubscribeLogs)
}

// NewListener returns a listener that opens its own connection with pool's configuration
// (the connection is not taken from the pool, so it never starves it). Call Run to start it.
func NewListener(pool *pgxpool.Pool, log *slog.Logger) *Listener {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Listener{
		pool:       pool,
		log:        log,
		minBackoff: 100 * time.Millisecond,
		maxBackoff: 5 * time.Second,
		idlePing:   30 * time.Second,
		subs:       make(map[*subscriber]struct{}),
	}
}

// Run listens until ctx ends, reconnecting with exponential backoff whenever the
// connection drops; each time the connection comes up every subscriber receives a
// NotificationResync. It returns nil once ctx is done and an error only when it is
// already running.
func (l *Listener) Run(ctx context.Context) error {
	if !l.running.CompareAndSwap(false, true) {
		return errors.New("run listener: already running")
	}
	defer l.running.Store(false)
	backoff := l.minBackoff
	for first := true; ; first = false {
		established, err := l.listen(ctx, first)
		if ctx.Err() != nil {
			return nil
		}
		if established {
			backoff = l.minBackoff
		}
		l.log.WarnContext(ctx, "listener connection lost", "error", err, "retry_in", backoff)
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
		backoff = min(backoff*2, l.maxBackoff)
	}
}

// listen runs one connection's life: connect, LISTEN, then dispatch until an error. It
// reports whether the LISTEN was established.
func (l *Listener) listen(ctx context.Context, first bool) (bool, error) {
	conn, err := pgx.ConnectConfig(ctx, l.pool.Config().ConnConfig.Copy())
	if err != nil {
		return false, fmt.Errorf("connect listener: %w", err)
	}
	defer func() {
		closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		_ = conn.Close(closeCtx) // the connection is being abandoned either way
	}()
	if _, err := conn.Exec(ctx, "LISTEN "+EventsChannel); err != nil {
		return false, fmt.Errorf("listen on %s: %w", EventsChannel, err)
	}
	l.pid.Store(conn.PgConn().PID())
	l.ready.Store(true)
	defer func() {
		l.ready.Store(false)
		l.pid.Store(0)
	}()
	if first {
		l.log.InfoContext(ctx, "listener connected", "channel", EventsChannel)
	} else {
		l.reconnects.Add(1)
		l.log.InfoContext(ctx, "listener reconnected", "channel", EventsChannel)
	}
	// Whatever happened before this point (a previous connection's outage, or events
	// appended before a subscriber's first wait began) is re-checked by subscribers.
	l.revocations.Add(1)
	l.broadcast(Notification{Type: NotificationResync})

	for {
		waitCtx, cancel := context.WithTimeout(ctx, l.idlePing)
		n, err := conn.WaitForNotification(waitCtx)
		cancel()
		switch {
		case err == nil:
			l.received.Add(1)
			l.dispatch(ctx, n.Payload)
		case ctx.Err() != nil:
			return true, ctx.Err()
		case errors.Is(err, context.DeadlineExceeded) && !conn.IsClosed():
			pingCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
			err := conn.Ping(pingCtx)
			cancel()
			if err != nil {
				return true, fmt.Errorf("ping listener connection: %w", err)
			}
		default:
			return true, fmt.Errorf("wait for notification: %w", err)
		}
	}
}

// dispatch decodes one NOTIFY payload and hands it to the matching subscribers. A payload
// that cannot be decoded still means "something changed": every subscriber is woken.
func (l *Listener) dispatch(ctx context.Context, payload string) {
	var n Notification
	if err := json.Unmarshal([]byte(payload), &n); err != nil {
		l.log.WarnContext(ctx, "undecodable notification", "error", err, "bytes", len(payload))
		l.revocations.Add(1)
		l.broadcast(Notification{Type: NotificationResync})
		return
	}
	if n.Type == NotificationWorkerRevoked {
		l.revocations.Add(1)
	}
	l.mu.RLock()
	defer l.mu.RUnlock()
	for s := range l.subs {
		if n.Type == NotificationAttemptLog && !s.logs {
			continue // log lines wake only log followers
		}
		if s.filter == nil || s.filter(n) {
			l.deliver(s, n)
		}
	}
}

// broadcast hands n to every subscriber, ignoring filters.
func (l *Listener) broadcast(n Notification) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	for s := range l.subs {
		l.deliver(s, n)
	}
}

func (l *Listener) deliver(s *subscriber, n Notification) {
	select {
	case s.ch <- n:
	default:
		l.dropped.Add(1)
	}
}

// Subscribe registers a subscriber that receives the notifications for which filter
// returns true (all of them when filter is nil), plus every NotificationResync. filter
// runs on the listener's goroutine and must be quick. The channel is buffered and never
// blocks the listener: when it is full, notifications are dropped for this subscriber,
// which is harmless for callers that re-read the database on any wake-up. The channel is
// never closed; cancel unsubscribes and may be called more than once.
func (l *Listener) Subscribe(filter func(Notification) bool) (<-chan Notification, func()) {
	return l.subscribe(&subscriber{ch: make(chan Notification, subscriberBuffer), filter: filter})
}

// SubscribeLogs is Subscribe for a follower of attempt logs: it also receives the
// NotificationAttemptLog notifications for which filter returns true, which Subscribe's
// subscribers never see.
func (l *Listener) SubscribeLogs(filter func(Notification) bool) (<-chan Notification, func()) {
	return l.subscribe(&subscriber{ch: make(chan Notification, subscriberBuffer), filter: filter, logs: true})
}

func (l *Listener) subscribe(s *subscriber) (<-chan Notification, func()) {
	l.mu.Lock()
	l.subs[s] = struct{}{}
	l.mu.Unlock()
	var once sync.Once
	return s.ch, func() {
		once.Do(func() {
			l.mu.Lock()
			delete(l.subs, s)
			l.mu.Unlock()
		})
	}
}

// Ready reports whether the LISTEN connection is up (for /readyz).
func (l *Listener) Ready() bool { return l.ready.Load() }

// Revocations returns a number that changes whenever a worker may have been revoked
// without this process knowing more: on every NotificationWorkerRevoked, and every time
// the LISTEN connection comes up (notices may have been missed while it was down). What
// was learned of a worker's token while it had another value must be checked again.
func (l *Listener) Revocations() uint64 { return l.revocations.Load() }

// Subscribers returns the number of current subscribers.
func (l *Listener) Subscribers() int {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return len(l.subs)
}

// Stats returns the listener's counters.
func (l *Listener) Stats() ListenerStats {
	return ListenerStats{Received: l.received.Load(), Dropped: l.dropped.Load(), Reconnects: l.reconnects.Load()}
}

// LatestEventID returns the id of the newest event, of one plan when planID is set, or 0
// when there is none. A live stream that replays nothing starts after it.
func (s *Store) LatestEventID(ctx context.Context, planID string) (int64, error) {
	// Two statements, so that each one can read its index backwards instead of scanning.
	var id int64
	var err error
	// Not past an id a transaction in flight may still commit (see unsettledSQL).
	if planID == "" {
		err = s.pool.QueryRow(ctx, `SELECT least(coalesce(max(id), 0), coalesce(`+unsettledSQL+` - 1, max(id), 0)) FROM events`).Scan(&id)
	} else {
		err = s.pool.QueryRow(ctx, `SELECT least(coalesce(max(id), 0), coalesce(`+unsettledSQL+` - 1, max(id), 0)) FROM events WHERE plan_id = $1`, planID).Scan(&id)
	}
	if err != nil {
		return 0, fmt.Errorf("read latest event id: %w", err)
	}
	return id, nil
}

// ReadyCounts returns, for every ACTIVE plan, how many of its tasks are claimable now
// (worker labels aside): the whilly_ready_tasks gauge.
func (s *Store) ReadyCounts(ctx context.Context) (map[string]int, error) {
	out := map[string]int{}
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT `+indexPaths); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `
			WITH ready AS (
				SELECT t.plan_id, count(*) AS n
				FROM tasks t JOIN plans p ON p.id = t.plan_id
				WHERE t.status = 'PENDING' AND NOT t.waiting
				  AND (t.not_before IS NULL OR t.not_before <= now())
				  AND p.status = 'ACTIVE'
				  AND (p.budget_usd IS NULL OR p.spent_usd < p.budget_usd)
				  AND (NOT p.strict OR t.gate_verdict <> 'REJECT')
				  AND `+depsFinished+`
				GROUP BY t.plan_id
			)
			SELECT p.id, coalesce(r.n, 0) FROM plans p LEFT JOIN ready r ON r.plan_id = p.id
			WHERE p.status = 'ACTIVE'`)
		if err != nil {
			return err
		}
		var (
			id string
			n  int
		)
		_, err = pgx.ForEachRow(rows, []any{&id, &n}, func() error {
			out[id] = n
			return nil
		})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("count ready tasks: %w", err)
	}
	return out, nil
}
