package queue_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/whilly-go/whilly/queue"
	"github.com/whilly-go/whilly/testkit"
)

// collected is what a follower handed out, in order, and the error that ended it.
type collected struct {
	mu  sync.Mutex
	ids []int64
	err error
}

func (c *collected) snapshot() ([]int64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.ids), c.err
}

// follow runs f.Next on its own goroutine until the test ends.
func follow(t *testing.T, f *queue.Follower) *collected {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	c := &collected{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			evs, err := f.Next(ctx, 0)
			c.mu.Lock()
			for _, e := range evs {
				c.ids = append(c.ids, e.ID)
			}
			if err != nil && ctx.Err() == nil {
				c.err = err
			}
			c.mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		f.Close()
	})
	return c
}

// A transaction holds a lower id open while a later one commits: the follower hands out
// nothing past the open id until it commits, then both, in id order. Racing writers that
// do the same over and over, with multi-row statements and rollbacks among them, are
// followed exactly once and in order.
func TestFollowerHandsOutEveryEventOnceInOrder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, pool := newStore(t)
	ln := runListener(t, pool)
	before := ln.Subscribers()
	c := follow(t, st.Follow(ln, queue.FollowOptions{PlanID: "f"}))
	testkit.Eventually(t, 10*time.Second, "the follower to subscribe", func() bool { return ln.Subscribers() > before })

	// One late commit, step by step.
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	var open, later int64
	if err := tx.QueryRow(ctx, `INSERT INTO events (plan_id, type) VALUES ('f', 'log.open') RETURNING id`).Scan(&open); err != nil {
		t.Fatal(err)
	}
	if err := pool.QueryRow(ctx, `INSERT INTO events (plan_id, type) VALUES ('f', 'log.later') RETURNING id`).Scan(&later); err != nil {
		t.Fatal(err)
	}
	// Long enough for the notification of later and a held-back recheck to be acted on.
	time.Sleep(600 * time.Millisecond)
	if ids, err := c.snapshot(); len(ids) != 0 || err != nil {
		t.Fatalf("handed out %v (%v) while event %d was still open", ids, err, open)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, "both events after the commit", func() bool {
		ids, _ := c.snapshot()
		return len(ids) >= 2
	})
	if ids, err := c.snapshot(); !slices.Equal(ids, []int64{open, later}) || err != nil {
		t.Fatalf("after the commit: %v (%v), want [%d %d]", ids, err, open, later)
	}

	// Racing writers: each round holds a transaction open while a later id commits, and
	// some rounds roll back.
	committed, gone := raceWriters(t, pool, "f", 4, 25)
	want := append([]int64{open, later}, committed...)
	slices.Sort(want)
	testkit.Eventually(t, 30*time.Second, fmt.Sprintf("the %d committed events", len(want)), func() bool {
		ids, err := c.snapshot()
		return len(ids) >= len(want) || err != nil
	})
	// Anything handed out twice, or a rolled-back id, would come within a recheck or two.
	time.Sleep(600 * time.Millisecond)
	ids, err := c.snapshot()
	if err != nil {
		t.Fatalf("Next: %v", err)
	}
	if !slices.Equal(ids, want) {
		t.Errorf("handed out %d events, want the %d committed ones once each in id order", len(ids), len(want))
		for i := range max(len(ids), len(want)) {
			var got, w int64
			if i < len(ids) {
				got = ids[i]
			}
			if i < len(want) {
				w = want[i]
			}
			if got != w {
				t.Errorf("first difference at %d: got %d, want %d (rolled back: %v)", i, got, w, slices.Contains(gone, got))
				break
			}
		}
	}
}

// raceWriters runs pairs rounds on each of writers goroutines. A round opens a
// transaction, inserts one to three events in one statement, commits a later event in
// another transaction meanwhile, inserts and rolls back a third every fifth round, and
// then commits the first (or rolls it back every seventh round). It returns the committed
// ids and the rolled-back ones.
func raceWriters(t *testing.T, pool *pgxpool.Pool, planID string, writers, rounds int) (committed, gone []int64) {
	t.Helper()
	ctx := context.Background()
	// A round holds up to three connections at once: give every writer its own.
	cfg := pool.Config().Copy()
	cfg.MaxConns = int32(3 * writers)
	wp, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer wp.Close()
	var mu sync.Mutex
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Go(func() {
			for r := range rounds {
				c, g, err := writeRound(ctx, wp, planID, w, r)
				mu.Lock()
				committed = append(committed, c...)
				gone = append(gone, g...)
				mu.Unlock()
				if err != nil {
					errs <- fmt.Errorf("writer %d round %d: %w", w, r, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	return committed, gone
}

func writeRound(ctx context.Context, pool *pgxpool.Pool, planID string, w, r int) (committed, gone []int64, err error) {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return nil, nil, err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	rows, err := tx.Query(ctx, `INSERT INTO events (plan_id, type) SELECT $1, 'log.held' FROM generate_series(1, $2) RETURNING id`, planID, 1+(w+r)%3)
	if err != nil {
		return nil, nil, err
	}
	var held []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return nil, nil, err
		}
		held = append(held, id)
	}
	if err := rows.Err(); err != nil {
		return nil, nil, err
	}
	var later int64
	if err := pool.QueryRow(ctx, `INSERT INTO events (plan_id, type) VALUES ($1, 'log.later') RETURNING id`, planID).Scan(&later); err != nil {
		return nil, nil, err
	}
	committed = append(committed, later)
	if r%5 == 0 {
		tx2, err := pool.Begin(ctx)
		if err != nil {
			return committed, nil, err
		}
		var id int64
		err = tx2.QueryRow(ctx, `INSERT INTO events (plan_id, type) VALUES ($1, 'log.gone') RETURNING id`, planID).Scan(&id)
		_ = tx2.Rollback(ctx)
		if err != nil {
			return committed, nil, err
		}
		gone = append(gone, id)
	}
	if r%7 == 0 {
		return committed, append(gone, held...), tx.Rollback(ctx)
	}
	if err := tx.Commit(ctx); err != nil {
		return committed, gone, err
	}
	return append(committed, held...), gone, nil
}

// followWithATxOpen returns a running follower of planID's events, the pool of its
// store, and a transaction the test ends (it is rolled back at the end if not).
func followWithATxOpen(t *testing.T, planID string) (*queue.Follower, *pgxpool.Pool, pgx.Tx) {
	t.Helper()
	ctx := context.Background()
	st, pool := newStore(t)
	f := st.Follow(runListener(t, pool), queue.FollowOptions{PlanID: planID})
	t.Cleanup(f.Close)
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(ctx) })
	return f, pool, tx
}

// A writer that draws its id without announcing a floor (a raw nextval) can still commit
// below the follower's cursor; its notification names the range, and the follower hands
// the late events out then, once.
func TestFollowerHandsOutAnEventCommittedBelowItsCursor(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f, pool, tx := followWithATxOpen(t, "g")
	var reserved, between int64
	if err := tx.QueryRow(ctx, `SELECT nextval(pg_get_serial_sequence('events', 'id'))`).Scan(&reserved); err != nil {
		t.Fatal(err)
	}
	if err := pool.QueryRow(ctx, `INSERT INTO events (plan_id, type) VALUES ('g', 'log.between') RETURNING id`).Scan(&between); err != nil {
		t.Fatal(err)
	}
	next := func() []int64 {
		t.Helper()
		nctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		evs, err := f.Next(nctx, 0)
		if err != nil {
			t.Fatalf("Next: %v", err)
		}
		var ids []int64
		for _, e := range evs {
			ids = append(ids, e.ID)
		}
		return ids
	}
	if ids := next(); !slices.Equal(ids, []int64{between}) {
		t.Fatalf("first = %v, want [%d]", ids, between)
	}
	if f.Cursor() != between {
		t.Fatalf("cursor = %d, want %d", f.Cursor(), between)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO events (id, plan_id, type) VALUES ($1, 'g', 'log.group'), (DEFAULT, 'g', 'log.group')`, reserved); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	var got []int64
	for len(got) < 2 {
		got = append(got, next()...)
	}
	slices.Sort(got)
	if len(got) != 2 || got[0] != reserved || got[1] <= between {
		t.Fatalf("after the commit: %v, want %d (below the cursor) and one id above %d", got, reserved, between)
	}
	// Nothing is handed out twice.
	idle, cancel := context.WithTimeout(ctx, 600*time.Millisecond)
	defer cancel()
	if evs, err := f.Next(idle, 0); len(evs) != 0 || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("then Next = %d events, %v; want none until the deadline", len(evs), err)
	}
}

// A follower held back behind a transaction in flight reads again followHeldRecheck
// after its last read, however often its caller's idle deadline comes first. An event
// stream with a keep-alive shorter than that (Next with idle 20 ms, again and again)
// started a new wait on every call and never read again after the transaction rolled
// back, which notifies nobody: the event committed after it waited for some other
// notification.
func TestFollowerHeldBehindARollbackReadsAgainBetweenKeepAlives(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f, pool, tx := followWithATxOpen(t, "h")
	if _, err := tx.Exec(ctx, `INSERT INTO events (plan_id, type) VALUES ('h', 'log.gone')`); err != nil {
		t.Fatal(err)
	}
	var last int64
	if err := pool.QueryRow(ctx, `INSERT INTO events (plan_id, type) VALUES ('h', 'log.last') RETURNING id`).Scan(&last); err != nil {
		t.Fatal(err)
	}
	// The first Next reads, finds last held back behind gone, and returns at its deadline.
	if evs, err := f.Next(ctx, 20*time.Millisecond); len(evs) != 0 || err != nil {
		t.Fatalf("Next while gone is in flight = %d events, %v; want none and no error", len(evs), err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	nextWithKeepAlive(t, f, last, "after the rollback")
}

// While the LISTEN connection is down (a restarted Postgres, a listener not up yet) no
// notification wakes a follower: it reads every followDegradedPoll, counted from its last
// read, so that a caller with a shorter keep-alive still gets the events written
// meanwhile. Before, each call of Next began the second anew and never read.
func TestFollowerWithoutListenReadsAgainBetweenKeepAlives(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, pool := newStore(t)
	down := queue.NewListener(pool, nil) // never run: not Ready, no notification
	f := st.Follow(down, queue.FollowOptions{PlanID: "d"})
	defer f.Close()
	if evs, err := f.Next(ctx, 20*time.Millisecond); len(evs) != 0 || err != nil {
		t.Fatalf("Next with nothing written = %d events, %v; want none and no error", len(evs), err)
	}
	var id int64
	if err := pool.QueryRow(ctx, `INSERT INTO events (plan_id, type) VALUES ('d', 'log.meanwhile') RETURNING id`).Scan(&id); err != nil {
		t.Fatal(err)
	}
	nextWithKeepAlive(t, f, id, "with LISTEN down")
}

// nextWithKeepAlive calls f.Next with a 20 ms idle, as a stream with a short keep-alive
// does, until it hands out events, at most 10 s; they must be event want alone.
func nextWithKeepAlive(t *testing.T, f *queue.Follower, want int64, when string) {
	t.Helper()
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); {
		evs, err := f.Next(context.Background(), 20*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) > 0 {
			if len(evs) != 1 || evs[0].ID != want {
				t.Fatalf("%s: %+v, want event %d alone", when, evs, want)
			}
			return
		}
	}
	t.Fatalf("%s: event %d not handed out in 10 s, by a caller with a 20 ms keep-alive", when, want)
}

// Next returns no events after idle (so the caller can send a keep-alive), and
// ErrFollowStopped once Stop closes, even with events waiting.
func TestFollowerIdleAndStop(t *testing.T) {
	t.Parallel()
	st, pool := newStore(t)
	ln := runListener(t, pool)
	stop := make(chan struct{})
	f := st.Follow(ln, queue.FollowOptions{Stop: stop})
	defer f.Close()
	ctx := context.Background()
	start := time.Now()
	if evs, err := f.Next(ctx, 50*time.Millisecond); len(evs) != 0 || err != nil || time.Since(start) < 50*time.Millisecond {
		t.Errorf("idle Next = %d events, %v after %v; want none and no error after 50ms", len(evs), err, time.Since(start))
	}
	// A draining server ends its streams even while events keep coming.
	if _, err := pool.Exec(ctx, `INSERT INTO events (plan_id, type) VALUES ('s', 'log.waiting')`); err != nil {
		t.Fatal(err)
	}
	close(stop)
	fresh := st.Follow(ln, queue.FollowOptions{Stop: stop}) // its first Next would read the event
	defer fresh.Close()
	for _, f := range []*queue.Follower{f, fresh} {
		if evs, err := f.Next(ctx, 0); !errors.Is(err, queue.ErrFollowStopped) {
			t.Errorf("Next after Stop = %d events, %v; want ErrFollowStopped", len(evs), err)
		}
	}
}

// A reader paging with SettledEvents while writers commit out of order never moves its
// cursor past an event that commits late: it reads every committed event once, in order.
func TestSettledEventsPagingNeverPassesALateCommit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, pool := newStore(t)
	var end atomic.Int64 // the last event's id, once the writers are done
	done := make(chan struct{})
	var ids []int64
	var readErr error
	go func() {
		defer close(done)
		var cursor int64
		for {
			p, err := st.SettledEvents(ctx, queue.EventFilter{PlanID: "p", After: cursor, Limit: 7})
			if err != nil {
				readErr = err
				return
			}
			for _, e := range p.Events {
				ids = append(ids, e.ID)
				cursor = e.ID
			}
			if last := end.Load(); last > 0 && cursor >= last {
				return
			}
		}
	}()
	committed, _ := raceWriters(t, pool, "p", 4, 25)
	end.Store(appendEvent(t, pool, "p", "", "log.end"))
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("the reader did not reach the last event within 60 s")
	}
	if readErr != nil {
		t.Fatal(readErr)
	}
	want := append(committed, end.Load())
	slices.Sort(want)
	if !slices.Equal(ids, want) {
		t.Errorf("paged %d events, want the %d committed ones once each in id order", len(ids), len(want))
		for i := range min(len(ids), len(want)) {
			if ids[i] != want[i] {
				t.Errorf("first difference at %d: got %d, want %d", i, ids[i], want[i])
				break
			}
		}
	}
}
