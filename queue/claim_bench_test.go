package queue_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/whilly-go/whilly/plan"
	"github.com/whilly-go/whilly/queue"
	"github.com/whilly-go/whilly/testkit"
)

// The claim path of the store, without HTTP: how long one claim (and one claim plus its
// COMPLETE) takes as a function of the backlog of pending tasks and of the number of
// concurrent claimers. One op drains a fixed number of tasks (so `-benchtime 3x` still
// measures something); the backlog is topped up between ops, outside the timer. The
// figures to read are ns/task and tasks/s.
func BenchmarkClaim(b *testing.B) {
	for _, backlog := range []int{100, 1000, 10_000} {
		b.Run(fmt.Sprintf("backlog=%d", backlog), func(b *testing.B) { benchDrain(b, newStore, backlog, 1, false) })
	}
}

func BenchmarkClaimComplete(b *testing.B) {
	for _, c := range []struct{ backlog, workers int }{{100, 1}, {1000, 1}, {10_000, 1}, {1000, 8}} {
		b.Run(fmt.Sprintf("backlog=%d/workers=%d", c.backlog, c.workers), func(b *testing.B) {
			benchDrain(b, newStore, c.backlog, c.workers, true)
		})
	}
}

// BenchmarkClaimCompleteHooks is the claim and COMPLETE path of `whilly serve` with the
// App and TRIZ on (servingHooks: one more transaction round trip per batch and the hooks'
// statements), beside the same store without hooks.
func BenchmarkClaimCompleteHooks(b *testing.B) {
	for _, hooks := range []bool{false, true} {
		mk := newStore
		if hooks {
			mk = servingStore
		}
		for _, workers := range []int{1, 8, 16} {
			b.Run(fmt.Sprintf("hooks=%v/workers=%d", hooks, workers), func(b *testing.B) {
				benchDrain(b, mk, 1000, workers, true)
			})
		}
	}
}

// servingStore is a store with the hooks of `whilly serve` (servingHooks).
func servingStore(tb testing.TB) (*queue.Store, *pgxpool.Pool) {
	pool := testkit.DB(tb)
	return queue.NewStore(pool, nil, queue.Config{Hooks: servingHooks(tb, pool)}), pool
}

func benchDrain(b *testing.B, newStore storeMaker, backlog, workers int, complete bool) {
	ctx := context.Background()
	st, _ := newStore(b)
	const planID = "bench"
	// A task no worker may take keeps the plan ACTIVE while the backlog runs dry.
	keeper := goodTask("keeper")
	keeper.Labels = []string{"nobody"}
	importTasks(b, st, &plan.Plan{ID: planID, Name: "bench", Tasks: []plan.Task{keeper}})
	ws := make([]queue.Worker, workers)
	for i := range ws {
		ws[i] = register(b, st)
	}
	perOp := min(100, backlog)
	pending, next := 0, 0
	topUp := func() {
		var ts []plan.Task
		for ; pending < backlog; pending++ {
			next++
			ts = append(ts, goodTask(fmt.Sprintf("T%07d", next)))
		}
		if len(ts) > 0 {
			importTasks(b, st, &plan.Plan{ID: planID, Name: "bench", Tasks: ts})
		}
	}
	var drained time.Duration
	tasks := 0
	for b.Loop() {
		b.StopTimer()
		topUp()
		b.StartTimer()
		begin := time.Now()
		var (
			left  atomic.Int64
			wg    sync.WaitGroup
			errMu sync.Mutex
			first error
		)
		left.Store(int64(perOp))
		for _, w := range ws {
			wg.Go(func() {
				for left.Add(-1) >= 0 {
					c, err := st.Claim(ctx, queue.ClaimRequest{WorkerID: w.ID, PlanID: planID})
					if err == nil && c == nil {
						err = fmt.Errorf("nothing claimable with %d tasks pending", pending)
					}
					if err == nil && complete {
						_, err = st.Complete(ctx, leaseOf(c, w.ID), queue.CompleteInput{})
					}
					if err != nil {
						errMu.Lock()
						first = err
						errMu.Unlock()
						return
					}
				}
			})
		}
		wg.Wait()
		drained += time.Since(begin)
		if first != nil {
			b.Fatal(first)
		}
		pending -= perOp
		tasks += perOp
	}
	b.ReportMetric(float64(drained.Nanoseconds())/float64(tasks), "ns/task")
	b.ReportMetric(float64(tasks)/drained.Seconds(), "tasks/s")
}

// BenchmarkClaimBlocked is a claim that finds nothing because every pending task waits on
// one running task (a setup task and n tasks after it): what every long-poll wake-up of a
// waiting worker costs meanwhile (the claim, then the next retry time), for its plan and
// for any plan, and what the whilly_ready_tasks gauge costs. The claim walks the n waiting tasks and checks each
// one's dependencies; ns/op should grow with n, not with n².
func BenchmarkClaimBlocked(b *testing.B) {
	for _, n := range []int{100, 1000, 5000} {
		b.Run(fmt.Sprintf("waiting=%d", n), func(b *testing.B) {
			ctx := context.Background()
			st, _ := newStore(b)
			ts := []plan.Task{goodTask("setup")}
			for i := range n {
				ts = append(ts, goodTask(fmt.Sprintf("T%05d", i), "setup"))
			}
			importTasks(b, st, &plan.Plan{ID: "blocked", Name: "blocked", Tasks: ts})
			running, waiting := register(b, st), register(b, st)
			imports := 0
			if c, err := st.Claim(ctx, queue.ClaimRequest{WorkerID: running.ID, PlanID: "blocked"}); err != nil || c == nil || c.Task.ID != "setup" {
				b.Fatalf("claim of the setup task: %v, %v", c, err)
			}
			for _, sub := range []struct {
				name string
				run  func() error
			}{
				{"claim-plan", func() error { return emptyClaim(ctx, st, waiting.ID, "blocked") }},
				{"claim-any", func() error { return emptyClaim(ctx, st, waiting.ID, "") }},
				{"next-ready-plan", func() error { return noneReady(ctx, st, "blocked") }},
				{"next-ready-any", func() error { return noneReady(ctx, st, "") }},
				{"import", func() error { // the fair-share walk finds the head of the claim order
					imports++
					p := &plan.Plan{ID: fmt.Sprintf("new-%d", imports), Name: "new", Tasks: []plan.Task{goodTask("T")}}
					// Paused, so that the head stays behind the waiting tasks for the next import.
					_, err := st.Import(ctx, p, queue.ImportOptions{PauseReason: queue.PauseApproval})
					return err
				}},
				{"ready-counts", func() error {
					got, err := st.ReadyCounts(ctx)
					if err == nil && got["blocked"] != 0 {
						err = fmt.Errorf("ready counts %v, want 0 ready", got)
					}
					return err
				}},
			} {
				b.Run(sub.name, func(b *testing.B) {
					for b.Loop() {
						if err := sub.run(); err != nil {
							b.Fatal(err)
						}
					}
				})
			}
		})
	}
}

// noneReady asks when the next retry backoff of planID (any plan when "") ends, and fails
// unless none is waiting: after every empty claim, a long-polling worker asks it.
func noneReady(ctx context.Context, st *queue.Store, planID string) error {
	at, err := st.NextReadyAt(ctx, planID)
	if err == nil && at != nil {
		err = fmt.Errorf("next ready at %s, want none", at)
	}
	return err
}

// emptyClaim claims for worker and fails unless nothing was claimable.
func emptyClaim(ctx context.Context, st *queue.Store, worker, planID string) error {
	c, err := st.Claim(ctx, queue.ClaimRequest{WorkerID: worker, PlanID: planID})
	if err == nil && c != nil {
		err = fmt.Errorf("claimed %s, which waits on a running task", c.Task.ID)
	}
	return err
}
