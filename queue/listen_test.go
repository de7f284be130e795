package queue_test

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/whilly-go/whilly/plan"
	"github.com/whilly-go/whilly/queue"
	"github.com/whilly-go/whilly/testkit"
)

// runListener starts a listener on pool and waits until its LISTEN connection is up.
func runListener(t *testing.T, pool *pgxpool.Pool) *queue.Listener {
	t.Helper()
	l := queue.NewListener(pool, slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn})))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	testkit.Eventually(t, 10*time.Second, "listener ready", l.Ready)
	return l
}

func appendEvent(t *testing.T, pool *pgxpool.Pool, planID, taskID, typ string) int64 {
	t.Helper()
	var id int64
	err := pool.QueryRow(context.Background(), `INSERT INTO events (plan_id, task_id, type) VALUES ($1, NULLIF($2, ''), $3) RETURNING id`,
		planID, taskID, typ).Scan(&id)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// next returns the next notification that is not a resync, or fails after a deadline.
func next(t *testing.T, ch <-chan queue.Notification) queue.Notification {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case n := <-ch:
			if n.Type != queue.NotificationResync {
				return n
			}
		case <-timeout:
			t.Fatal("no notification within 10 s")
		}
	}
}

func TestListenerFansOutWithFilters(t *testing.T) {
	t.Parallel()
	pool := testkit.DB(t)
	l := runListener(t, pool)

	all, cancelAll := l.Subscribe(nil)
	defer cancelAll()
	onlyA, cancelA := l.Subscribe(func(n queue.Notification) bool { return n.PlanID == "a/1" })
	defer cancelA()

	idB := appendEvent(t, pool, "b", "", "plan.created")
	idA := appendEvent(t, pool, "a/1", "T:1", "task.created")

	if n := next(t, all); n.ID != idB || n.PlanID != "b" || n.TaskID != "" || n.Type != "plan.created" {
		t.Errorf("first notification = %+v", n)
	}
	if n := next(t, all); n.ID != idA || n.TaskID != "T:1" {
		t.Errorf("second notification = %+v", n)
	}
	if n := next(t, onlyA); n.ID != idA || n.PlanID != "a/1" || n.Type != "task.created" {
		t.Errorf("filtered notification = %+v", n)
	}
	select {
	case n := <-onlyA:
		t.Errorf("filtered subscriber got %+v too", n)
	default:
	}

	cancelA()
	cancelA() // idempotent
	if got := l.Subscribers(); got != 1 {
		t.Errorf("Subscribers = %d after cancel, want 1", got)
	}
}

// A subscriber that never reads must not hold up the others: its notifications are dropped.
func TestListenerNeverBlocksOnASlowSubscriber(t *testing.T) {
	t.Parallel()
	pool := testkit.DB(t)
	l := runListener(t, pool)

	_, cancelStuck := l.Subscribe(nil) // never read
	defer cancelStuck()
	live, cancelLive := l.Subscribe(nil)
	defer cancelLive()

	const n = 300
	var last int64
	for i := range n {
		last = appendEvent(t, pool, "p", fmt.Sprint(i), "log.line")
		// Keep the live subscriber's buffer from filling: it reads as fast as it can.
		for {
			got := next(t, live)
			if got.ID == last {
				break
			}
		}
	}
	if st := l.Stats(); st.Dropped == 0 || st.Received < n {
		t.Errorf("stats = %+v, want %d received and some dropped for the stuck subscriber", st, n)
	}
}

// When the LISTEN connection dies, the listener reconnects, wakes every subscriber with a
// resync (notifications may have been lost) and delivers again.
func TestListenerReconnectsAndResyncs(t *testing.T) {
	t.Parallel()
	pool := testkit.DB(t)
	l := runListener(t, pool)
	ch, cancel := l.Subscribe(func(queue.Notification) bool { return false }) // resyncs only
	defer cancel()
	all, cancelAll := l.Subscribe(nil)
	defer cancelAll()

	var killed int
	err := pool.QueryRow(context.Background(), `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE datname = current_database() AND pid <> pg_backend_pid() AND query ILIKE 'LISTEN %'`).Scan(&killed)
	if err != nil || killed != 1 {
		t.Fatalf("terminate listener backend: killed %d, %v", killed, err)
	}
	select {
	case n := <-ch:
		if n.Type != queue.NotificationResync {
			t.Errorf("got %+v, want a resync", n)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no resync after the connection was killed")
	}
	testkit.Eventually(t, 10*time.Second, "listener ready again", l.Ready)
	if got := l.Stats().Reconnects; got != 1 {
		t.Errorf("Reconnects = %d, want 1", got)
	}
	id := appendEvent(t, pool, "p", "", "plan.created")
	if n := next(t, all); n.ID != id {
		t.Errorf("after reconnect got %+v, want event %d", n, id)
	}
}

func TestLatestEventIDAndReadyCounts(t *testing.T) {
	t.Parallel()
	pool := testkit.DB(t)
	st := queue.NewStore(pool, nil, queue.Config{})
	ctx := context.Background()
	if id, err := st.LatestEventID(ctx, ""); err != nil || id != 0 {
		t.Fatalf("LatestEventID on an empty log = %d, %v", id, err)
	}
	p, err := plan.Parse([]byte(`{"plan_id": "r", "project": "Ready", "tasks": [
		{"id": "A", "priority": "high", "description": "the first task of the plan, no deps"},
		{"id": "B", "priority": "high", "description": "the second task, waits for A", "dependencies": ["A"]},
		{"id": "C", "priority": "low", "description": "the third task of the plan, no deps"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Import(ctx, p, queue.ImportOptions{}); err != nil {
		t.Fatal(err)
	}
	other := appendEvent(t, pool, "other", "", "plan.created")
	last, err := st.LatestEventID(ctx, "r")
	if err != nil || last == 0 || last >= other {
		t.Errorf("LatestEventID(r) = %d, %v; the other plan's event is %d", last, err, other)
	}
	if all, _ := st.LatestEventID(ctx, ""); all != other {
		t.Errorf("LatestEventID() = %d, want %d", all, other)
	}
	ready, err := st.ReadyCounts(ctx)
	if err != nil || len(ready) != 1 || ready["r"] != 2 {
		t.Errorf("ReadyCounts = %v, %v; want r: 2", ready, err)
	}
}
