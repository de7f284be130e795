package queue_test

import (
	"context"
	"testing"

	"github.com/whilly-go/whilly/queue"
)

func eventIDs(t *testing.T, st *queue.Store, after int64) ([]int64, bool) {
	t.Helper()
	p, err := st.EventPage(context.Background(), queue.EventFilter{After: after, Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	var ids []int64
	for _, e := range p.Events {
		ids = append(ids, e.ID)
	}
	return ids, p.Held
}

// A transaction holds an inserted event open while another commits a later one: a reader
// is not handed the later id (its cursor would pass the open one for good) until the open
// transaction ends; then it reads both. A rolled-back id holds nobody up.
func TestEventCursorNeverSkipsALateCommit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, pool := newStore(t)
	var first int64
	if err := pool.QueryRow(ctx, `INSERT INTO events (plan_id, type) VALUES ('c', 'log.first') RETURNING id`).Scan(&first); err != nil {
		t.Fatal(err)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	var open, later int64
	if err := tx.QueryRow(ctx, `INSERT INTO events (plan_id, type) VALUES ('c', 'log.open') RETURNING id`).Scan(&open); err != nil {
		t.Fatal(err)
	}
	if err := pool.QueryRow(ctx, `INSERT INTO events (plan_id, type) VALUES ('c', 'log.later') RETURNING id`).Scan(&later); err != nil {
		t.Fatal(err)
	}
	ids, held := eventIDs(t, st, first-1)
	if len(ids) != 1 || ids[0] != first || !held {
		t.Fatalf("read while %d is open = %v (held %v); want only %d, the rest held back", open, ids, held, first)
	}
	if latest, err := st.LatestEventID(ctx, ""); err != nil || latest != first {
		t.Errorf("latest event id = %d, %v; want %d (not past the open one)", latest, err, first)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	ids, held = eventIDs(t, st, first)
	if len(ids) != 2 || ids[0] != open || ids[1] != later || held {
		t.Fatalf("read after the commit = %v (held %v); want [%d %d]", ids, held, open, later)
	}

	// A transaction that rolls back leaves a gap for good: it must not stop readers.
	tx2, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx2.Exec(ctx, `INSERT INTO events (plan_id, type) VALUES ('c', 'log.gone')`); err != nil {
		t.Fatal(err)
	}
	var last int64
	if err := pool.QueryRow(ctx, `INSERT INTO events (plan_id, type) VALUES ('c', 'log.last') RETURNING id`).Scan(&last); err != nil {
		t.Fatal(err)
	}
	if ids, _ := eventIDs(t, st, later); len(ids) != 0 {
		t.Errorf("read while the gap is open = %v, want nothing", ids)
	}
	if err := tx2.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if ids, held := eventIDs(t, st, later); len(ids) != 1 || ids[0] != last || held {
		t.Errorf("read after the rollback = %v (held %v); want [%d]", ids, held, last)
	}
}
