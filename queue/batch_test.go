package queue

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestGroupBatches: many concurrent calls of a few keys each get their own answer; a
// key never has two batches at once, batches hold at most max calls, and calls that
// arrive while a batch runs are answered together.
func TestGroupBatches(t *testing.T) {
	t.Parallel()
	var (
		running   sync.Map // key → *atomic.Int32
		batches   atomic.Int32
		largest   atomic.Int32
		overlaps  atomic.Int32
		oversized atomic.Int32
	)
	g := &group[string, int, string]{max: 8, run: func(_ context.Context, key string, in []int) ([]string, []error) {
		n, _ := running.LoadOrStore(key, new(atomic.Int32))
		if n.(*atomic.Int32).Add(1) > 1 {
			overlaps.Add(1)
		}
		defer n.(*atomic.Int32).Add(-1)
		batches.Add(1)
		if len(in) > 8 {
			oversized.Add(1)
		}
		if int32(len(in)) > largest.Load() {
			largest.Store(int32(len(in)))
		}
		time.Sleep(time.Millisecond) // a statement's round trip
		out, errs := make([]string, len(in)), make([]error, len(in))
		for i, v := range in {
			if v%7 == 0 {
				errs[i] = fmt.Errorf("no %d", v)
				continue
			}
			out[i] = fmt.Sprintf("%s:%d", key, v)
		}
		return out, errs
	}}
	const calls = 400
	var wg sync.WaitGroup
	for i := range calls {
		wg.Go(func() {
			key := fmt.Sprint("k", i%3)
			got, err := g.do(context.Background(), key, i)
			switch {
			case i%7 == 0:
				if err == nil || err.Error() != fmt.Sprintf("no %d", i) {
					t.Errorf("call %d: error %v, want its own", i, err)
				}
			case err != nil || got != fmt.Sprintf("%s:%d", key, i):
				t.Errorf("call %d = %q, %v; want %s:%d", i, got, err, key, i)
			}
		})
	}
	wg.Wait()
	if overlaps.Load() > 0 || oversized.Load() > 0 {
		t.Errorf("%d overlapping batches of a key, %d batches over the maximum", overlaps.Load(), oversized.Load())
	}
	if b := batches.Load(); b >= calls || largest.Load() < 2 {
		t.Errorf("%d batches for %d calls, the largest of %d: calls were not batched", b, calls, largest.Load())
	}
	if len(g.waiting) != 0 {
		t.Errorf("keys left behind: %v", g.waiting)
	}
}

// TestGroupSurvivesAPanic: a batch whose run panics hands the key on, so the calls
// waiting behind it still run.
func TestGroupSurvivesAPanic(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	g := &group[string, int, int]{max: 8, run: func(_ context.Context, _ string, in []int) ([]int, []error) {
		if in[0] == 0 {
			<-release
			panic("boom")
		}
		return in, make([]error, len(in))
	}}
	leaderDone := make(chan any)
	go func() {
		defer func() { leaderDone <- recover() }()
		_, _ = g.do(context.Background(), "k", 0)
	}()
	for { // wait for the leader's batch to be running
		g.mu.Lock()
		_, running := g.waiting["k"]
		g.mu.Unlock()
		if running {
			break
		}
		time.Sleep(time.Millisecond)
	}
	type answer struct {
		v   int
		err error
	}
	follower := make(chan answer)
	go func() {
		v, err := g.do(context.Background(), "k", 1)
		follower <- answer{v, err}
	}()
	for { // the follower waits behind the leader's batch, which did not take it
		g.mu.Lock()
		n := len(g.waiting["k"])
		g.mu.Unlock()
		if n == 1 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	close(release)
	if p := <-leaderDone; p != "boom" {
		t.Fatalf("the leader's panic = %v, want it to go on", p)
	}
	// The panicking batch hands the lead on: the follower runs a batch of its own.
	select {
	case a := <-follower:
		if a.err != nil || a.v != 1 {
			t.Fatalf("the call behind a panicking batch = %d, %v; want 1", a.v, a.err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the call behind a panicking batch never returned")
	}
	if got, err := g.do(context.Background(), "k", 5); err != nil || got != 5 {
		t.Fatalf("a later call = %d, %v; want 5", got, err)
	}
}
