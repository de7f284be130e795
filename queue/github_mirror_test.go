package queue_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/whilly-go/whilly/internal/testkit"
	"github.com/whilly-go/whilly/queue"
)

// A mirror run holds its plan's lock on a pooled connection while it reads the plan
// through the pool: as many runs at once as the pool has connections must not wait on
// each other for ever (a pool of 2, three plans mirrored at once, each run reading the
// store while it holds its lock).
func TestMirrorLocksNeverTakeTheWholePool(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	pool := poolOf(ctx, t, 2)
	st := queue.NewStore(pool, nil, queue.Config{})
	inside := make(chan struct{}, 3)
	release := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, 3)
	for i := range 3 {
		wg.Go(func() {
			locked, err := st.WithMirrorLock(ctx, fmt.Sprintf("plan-%d", i), func() error {
				inside <- struct{}{}
				<-release // every run holds its lock before any reads: the worst moment
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
	// Let every run that can take its lock take it, then let them all read.
	select {
	case <-inside:
	case <-ctx.Done():
		t.Fatal("no mirror run took its lock")
	}
	time.Sleep(200 * time.Millisecond)
	close(release)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("mirror run: %v", err)
		}
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

// A pool of one connection cannot hold a mirror lock and read: the mirror says so at once
// instead of waiting for ever.
func TestMirrorLockRefusesAPoolOfOne(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pool := poolOf(ctx, t, 1)
	ran := false
	locked, err := queue.NewStore(pool, nil, queue.Config{}).WithMirrorLock(ctx, "plan", func() error { ran = true; return nil })
	if err == nil || locked || ran || !strings.Contains(err.Error(), "at least 2 connections") {
		t.Fatalf("WithMirrorLock on a pool of one = %v, %v (ran %v); want a refusal that names the pool size", locked, err, ran)
	}
}
