package queue_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/whilly-go/whilly/queue"
	"github.com/whilly-go/whilly/testkit"
)

// A mirror lock holds no connection: on a pool of one, three plans' mirrors hold their
// locks at once and each reads the store meanwhile (the old lock, a session advisory
// lock, pinned a connection for the whole sync, GitHub calls included, and refused a
// pool of one).
func TestMirrorLocksHoldNoConnection(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	st := queue.NewStore(poolOf(ctx, t, 1), nil, queue.Config{})
	var held sync.WaitGroup
	held.Add(3)
	var wg sync.WaitGroup
	errs := make(chan error, 3)
	for i := range 3 {
		wg.Go(func() {
			locked, err := st.WithMirrorLock(ctx, fmt.Sprintf("plan-%d", i), func(ctx context.Context) error {
				held.Done()
				held.Wait() // every lock is held before any of them reads
				_, err := st.GetPlan(ctx, "none")
				if errors.Is(err, queue.ErrNotFound) {
					err = nil // a read that reached the database
				}
				return err
			})
			if err == nil && !locked {
				err = fmt.Errorf("plan-%d: lock not taken", i)
			}
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("mirror run: %v", err)
		}
	}
}

// One plan's mirror lock keeps a second writer out while it is held, and lets the next
// one in once released; a lock whose holder died (it never deletes its row: the same to
// Postgres as a process killed) keeps writers out until it expires, and not after.
func TestMirrorLockKeepsOneWriter(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	pool := poolOf(ctx, t, 4)
	st := queue.NewStore(pool, nil, queue.Config{})
	try := func(plan string) (locked, ran bool) {
		t.Helper()
		locked, err := st.WithMirrorLock(ctx, plan, func(context.Context) error { ran = true; return nil })
		if err != nil {
			t.Fatal(err)
		}
		return locked, ran
	}
	locked, err := st.WithMirrorLock(ctx, "plan", func(ctx context.Context) error {
		if dl, ok := ctx.Deadline(); !ok || time.Until(dl) > queue.MirrorLockTTL {
			t.Errorf("the holder's context ends at %v (set: %v); want within %v, before its lock expires", dl, ok, queue.MirrorLockTTL)
		}
		if locked, ran := try("plan"); locked || ran {
			t.Errorf("a second writer while the lock is held: locked %v, ran %v; want neither", locked, ran)
		}
		return nil
	})
	if err != nil || !locked {
		t.Fatalf("first writer: locked %v, %v", locked, err)
	}
	if locked, ran := try("plan"); !locked || !ran {
		t.Errorf("the next writer once the lock was released: locked %v, ran %v; want both", locked, ran)
	}
	for _, c := range []struct {
		expires string
		want    bool
	}{{"now() + interval '1 minute'", false}, {"now() - interval '1 second'", true}} {
		if _, err := pool.Exec(ctx, `INSERT INTO github_mirror_locks (plan_id, holder, expires_at)
			VALUES ('dead', gen_random_uuid(), `+c.expires+`)
			ON CONFLICT (plan_id) DO UPDATE SET holder = EXCLUDED.holder, expires_at = EXCLUDED.expires_at`); err != nil {
			t.Fatal(err)
		}
		if locked, ran := try("dead"); locked != c.want || ran != c.want {
			t.Errorf("a dead holder's lock that expires at %s: locked %v, ran %v; want %v", c.expires, locked, ran, c.want)
		}
	}
}

// Many writers race for one plan's mirror lock at once, again and again: never two hold
// it together, and it is taken every round (the upsert replaces only an expired holder;
// a second upsert waits for the first's row and then finds it held).
func TestMirrorLockRaceHasOneHolder(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st := queue.NewStore(poolOf(ctx, t, 8), nil, queue.Config{})
	const writers, rounds = 16, 20
	var inside, most, taken atomic.Int32
	for range rounds {
		var wg sync.WaitGroup
		for range writers {
			wg.Go(func() {
				locked, err := st.WithMirrorLock(ctx, "plan", func(context.Context) error {
					n := inside.Add(1)
					for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
					}
					time.Sleep(time.Millisecond)
					inside.Add(-1)
					return nil
				})
				if err != nil {
					t.Error(err)
				}
				if locked {
					taken.Add(1)
				}
			})
		}
		wg.Wait()
	}
	if most.Load() != 1 {
		t.Errorf("%d writers held the lock at once, want 1", most.Load())
	}
	if taken.Load() < rounds {
		t.Errorf("the lock was taken %d times in %d rounds, want at least once a round", taken.Load(), rounds)
	}
}

// poolOf opens a pool of n connections on a test database of its own.
func poolOf(ctx context.Context, t *testing.T, n int32) *pgxpool.Pool {
	t.Helper()
	cfg := testkit.DB(t).Config().Copy()
	cfg.MaxConns = n
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}
