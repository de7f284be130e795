package queue_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/whilly-go/whilly/plan"
	"github.com/whilly-go/whilly/queue"
	"github.com/whilly-go/whilly/testkit"
)

// assertEndedOnce checks that the plan ended in status, with exactly one event of typ.
func assertEndedOnce(t *testing.T, st *queue.Store, pool *pgxpool.Pool, id string, status plan.PlanStatus, typ string) {
	t.Helper()
	pi, err := st.GetPlan(context.Background(), id)
	if err != nil || pi.Status != status {
		t.Fatalf("%s ended %s, %v; want %s", id, pi.Status, err, status)
	}
	if n := countEvents(t, pool, id, typ); n != 1 {
		t.Errorf("%s: %d %s events, want 1", id, n, typ)
	}
}

// TestBatchedCompletionsSettleThePlanOnce races workers that complete at no cost — the
// batched path, which does not lock the plan — to the end of many small plans, independent
// tasks, chains and tasks that end in one waiting on all the others (the last two make
// the next task's witness race), half of them taking their next task with the
// completion: every task is done once, and every plan ends DONE with exactly one plan.done.
func TestBatchedCompletionsSettleThePlanOnce(t *testing.T) {
	eachStore(t, testBatchedCompletionsSettleThePlanOnce)
}

func testBatchedCompletionsSettleThePlanOnce(t *testing.T, newStore storeMaker) {
	t.Parallel()
	ctx := context.Background()
	st, pool := newStore(t)
	const plans, tasks, workers = 12, 9, 6
	var ws []queue.Worker
	for range workers {
		ws = append(ws, register(t, st))
	}
	for round := range plans {
		id := fmt.Sprintf("race-%02d", round)
		p := &plan.Plan{ID: id, Name: id}
		for i := range tasks {
			var deps []string
			switch {
			case round%3 == 2 && i > 0: // every third plan is a chain
				deps = []string{fmt.Sprintf("T%d", i-1)}
			case round%3 == 1 && i == tasks-1: // and every third ends in a task that waits on all the others
				for j := range i {
					deps = append(deps, fmt.Sprintf("T%d", j))
				}
			}
			p.Tasks = append(p.Tasks, goodTask(fmt.Sprintf("T%d", i), deps...))
		}
		importTasks(t, st, p)

		var (
			mu   sync.Mutex
			seen = map[string]int{}
			wg   sync.WaitGroup
		)
		for i, w := range ws {
			wg.Go(func() {
				var next *queue.Claim
				// Until the plan ends; a chain's workers find nothing while a link runs, so
				// a count of rounds would run out on a busy machine.
				for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); {
					c := next
					next = nil
					if c == nil {
						var err error
						if c, err = st.Claim(ctx, queue.ClaimRequest{WorkerID: w.ID, PlanID: id}); err != nil {
							t.Errorf("claim: %v", err)
							return
						}
					}
					if c == nil {
						if pi, err := st.GetPlan(ctx, id); err != nil || pi.Status != plan.PlanActive {
							return
						}
						continue
					}
					mu.Lock()
					seen[c.Task.ID]++
					mu.Unlock()
					var err error
					if i%2 == 0 {
						_, next, err = st.CompleteAndClaim(ctx, leaseOf(c, w.ID), queue.CompleteInput{},
							queue.ClaimRequest{WorkerID: w.ID, PlanID: id})
					} else {
						_, err = st.Complete(ctx, leaseOf(c, w.ID), queue.CompleteInput{})
					}
					if err != nil {
						t.Errorf("complete %s: %v", c.Task.ID, err)
						return
					}
				}
			})
		}
		wg.Wait()
		for i := range tasks {
			if n := seen[fmt.Sprintf("T%d", i)]; n != 1 {
				t.Errorf("%s: T%d ran %d times, want once", id, i, n)
			}
		}
		assertEndedOnce(t, st, pool, id, plan.PlanDone, queue.EventPlanDone)
	}
}

// TestBatchedCompletionRacingAFinalFailure: while one task fails for good, the others
// complete at no cost at the same moment. Whichever transaction commits last decides:
// the plan ends FAILED, once.
func TestBatchedCompletionRacingAFinalFailure(t *testing.T) {
	eachStore(t, testBatchedCompletionRacingAFinalFailure)
}

func testBatchedCompletionRacingAFinalFailure(t *testing.T, newStore storeMaker) {
	t.Parallel()
	ctx := context.Background()
	st, pool := newStore(t)
	ws := []queue.Worker{register(t, st), register(t, st), register(t, st)}
	for round := range 10 {
		id := fmt.Sprintf("fail-%02d", round)
		p := &plan.Plan{ID: id, Name: id}
		for _, tid := range []string{"A", "B", "C"} {
			task := goodTask(tid)
			task.MaxAttempts = 1
			p.Tasks = append(p.Tasks, task)
		}
		importTasks(t, st, p)
		claims := make([]*queue.Claim, len(ws))
		for i, w := range ws {
			claims[i] = mustClaim(t, st, w, id)
		}
		var wg sync.WaitGroup
		for i, w := range ws {
			wg.Go(func() {
				var err error
				if i == 0 {
					_, err = st.Fail(ctx, leaseOf(claims[i], w.ID), queue.FailInput{Reason: "exit_code: 1"})
				} else {
					_, err = st.Complete(ctx, leaseOf(claims[i], w.ID), queue.CompleteInput{})
				}
				if err != nil {
					t.Errorf("%s: %v", claims[i].Task.ID, err)
				}
			})
		}
		wg.Wait()
		assertEndedOnce(t, st, pool, id, plan.PlanFailed, queue.EventPlanFailed)
	}
}

// TestCompleteAndClaimWithAStaleLease: the completion is refused (409), and no claim is
// made for the worker: it holds only what it held, and no event is written.
func TestCompleteAndClaimWithAStaleLease(t *testing.T) {
	eachStore(t, testCompleteAndClaimWithAStaleLease)
}

func testCompleteAndClaimWithAStaleLease(t *testing.T, newStore storeMaker) {
	t.Parallel()
	ctx := context.Background()
	st, pool := newStore(t)
	importTasks(t, st, &plan.Plan{ID: "stale", Name: "stale", Tasks: []plan.Task{goodTask("A"), goodTask("B"), goodTask("C")}})
	w := register(t, st)
	c := mustClaim(t, st, w, "stale")
	events := countEvents(t, pool, "stale", "")
	l := leaseOf(c, w.ID)
	l.LeaseID = "00000000-0000-4000-8000-000000000000"
	_, next, err := st.CompleteAndClaim(ctx, l, queue.CompleteInput{}, queue.ClaimRequest{WorkerID: w.ID, PlanID: "stale"})
	if !errors.Is(err, queue.ErrLeaseLost) || next != nil {
		t.Fatalf("complete with a stale lease = %v, %v; want ErrLeaseLost and no claim", next, err)
	}
	var held []string
	rows, err := pool.Query(ctx, `SELECT id FROM tasks WHERE plan_id = 'stale' AND claimed_by = $1 AND status = 'CLAIMED' ORDER BY id`, w.ID)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		held = append(held, id)
	}
	if len(held) != 1 || held[0] != c.Task.ID {
		t.Errorf("the worker holds %v, want only %s (its first claim)", held, c.Task.ID)
	}
	if n := countEvents(t, pool, "stale", ""); n != events {
		t.Errorf("a refused completion wrote %d events", n-events)
	}
	// With the right lease, the next task comes back with the completion.
	done, next, err := st.CompleteAndClaim(ctx, leaseOf(c, w.ID), queue.CompleteInput{}, queue.ClaimRequest{WorkerID: w.ID, PlanID: "stale"})
	if err != nil || done.Status != plan.StatusDone || next == nil || next.Task.ID == c.Task.ID {
		t.Fatalf("complete and claim = %+v, %v, %v; want DONE and another task", done.Status, next, err)
	}
}

// TestHandoffsHandOutEachTaskOnce: 32 workers that take each next task with their
// completion drain 1,000 tasks; every task is done exactly once and the plan once.
func TestHandoffsHandOutEachTaskOnce(t *testing.T) { eachStore(t, testHandoffsHandOutEachTaskOnce) }

func testHandoffsHandOutEachTaskOnce(t *testing.T, newStore storeMaker) {
	t.Parallel()
	ctx := context.Background()
	st, pool := newStore(t)
	const n = 1000
	importTasks(t, st, widePlan("handoffs", n))
	var (
		mu   sync.Mutex
		seen = map[string]int{}
		wg   sync.WaitGroup
	)
	for range 32 {
		w := register(t, st)
		wg.Go(func() {
			c, err := st.Claim(ctx, queue.ClaimRequest{WorkerID: w.ID, PlanID: "handoffs"})
			for err == nil && c != nil {
				mu.Lock()
				seen[c.Task.ID]++
				mu.Unlock()
				_, c, err = st.CompleteAndClaim(ctx, leaseOf(c, w.ID), queue.CompleteInput{}, queue.ClaimRequest{WorkerID: w.ID, PlanID: "handoffs"})
			}
			if err != nil {
				t.Errorf("worker %s: %v", w.ID, err)
			}
		})
	}
	wg.Wait()
	if len(seen) != n {
		t.Errorf("%d distinct tasks done, want %d", len(seen), n)
	}
	for id, k := range seen {
		if k != 1 {
			t.Errorf("%s was handed out %d times", id, k)
		}
	}
	assertEndedOnce(t, st, pool, "handoffs", plan.PlanDone, queue.EventPlanDone)
}

// TestCancelRacingBatchedCompletions: a plan is cancelled while its workers complete at
// no cost, in batches. Both lock several tasks of the plan; neither may deadlock the
// other: every completion either goes through or finds its lease gone, and the cancel
// succeeds.
func TestCancelRacingBatchedCompletions(t *testing.T) {
	eachStore(t, testCancelRacingBatchedCompletions)
}

func testCancelRacingBatchedCompletions(t *testing.T, newStore storeMaker) {
	t.Parallel()
	ctx := context.Background()
	st, _ := newStore(t)
	var ws []queue.Worker
	for range 8 {
		ws = append(ws, register(t, st))
	}
	for round := range 15 {
		id := fmt.Sprintf("cancel-%02d", round)
		importTasks(t, st, widePlan(id, 24))
		claims := make([]*queue.Claim, len(ws))
		for i, w := range ws {
			claims[i] = mustClaim(t, st, w, id)
		}
		var wg sync.WaitGroup
		for i, w := range ws {
			wg.Go(func() {
				_, _, err := st.CompleteAndClaim(ctx, leaseOf(claims[i], w.ID), queue.CompleteInput{}, queue.ClaimRequest{WorkerID: w.ID, PlanID: id})
				if err != nil && !errors.Is(err, queue.ErrLeaseLost) {
					t.Errorf("%s: complete %s: %v", id, claims[i].Task.ID, err)
				}
			})
		}
		wg.Go(func() {
			if _, err := st.CancelPlan(ctx, id, "test", ""); err != nil {
				t.Errorf("%s: cancel: %v", id, err)
			}
		})
		wg.Wait()
		if pi, err := st.GetPlan(ctx, id); err != nil || pi.Status != plan.PlanCancelled {
			t.Fatalf("%s ended %s, %v; want CANCELLED", id, pi.Status, err)
		}
	}
}

// TestAChainsCompletionsLeaveThePlanAlone: an issue's task list is a chain, each task
// waiting on the one before. A completion that makes the next task ready cannot settle
// the plan, so it takes the batched path and leaves the plan row alone (the careful path
// locks it and writes it); only the last completion settles the plan, once.
func TestAChainsCompletionsLeaveThePlanAlone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, pool := newStore(t)
	const n = 20
	importTasks(t, st, chainPlan("chain", "T", n))
	w := register(t, st)
	planRow := func() string {
		t.Helper()
		var xmin string
		if err := pool.QueryRow(ctx, `SELECT xmin::text FROM plans WHERE id = 'chain'`).Scan(&xmin); err != nil {
			t.Fatal(err)
		}
		return xmin
	}
	touched := 0
	for i := range n {
		c := mustClaim(t, st, w, "chain")
		if want := fmt.Sprintf("T%02d", i); c.Task.ID != want {
			t.Fatalf("claimed %s, want %s", c.Task.ID, want)
		}
		before := planRow()
		if _, err := st.Complete(ctx, leaseOf(c, w.ID), queue.CompleteInput{}); err != nil {
			t.Fatal(err)
		}
		if i < n-1 && planRow() != before {
			touched++
		}
	}
	if touched > 0 {
		t.Errorf("%d of %d completions that made the next task ready wrote the plan row (the careful path); want none", touched, n-1)
	}
	assertEndedOnce(t, st, pool, "chain", plan.PlanDone, queue.EventPlanDone)
}

// TestTheLastCompletionsSettleThePlanTogether: completions answered in one batch that end
// their plan (nothing else waits or runs) cannot take the batched path, which does not
// lock the plan. They are completed again as one batch, under the plan's row lock, in one
// transaction that settles the plan once — not one careful transaction each, queueing on
// that lock. The batch is made by holding the first completion's task locked until the
// others wait for its batch.
func TestTheLastCompletionsSettleThePlanTogether(t *testing.T) {
	eachStore(t, testTheLastCompletionsSettleThePlanTogether)
}

func testTheLastCompletionsSettleThePlanTogether(t *testing.T, newStore storeMaker) {
	t.Parallel()
	ctx := context.Background()
	st, pool := newStore(t)
	const n = 5
	importTasks(t, st, widePlan("last", n))
	leases := make([]queue.Lease, n)
	for i := range n {
		w := register(t, st)
		leases[i] = leaseOf(mustClaim(t, st, w, "last"), w.ID)
	}
	slices.SortFunc(leases, func(a, b queue.Lease) int { return strings.Compare(a.TaskID, b.TaskID) })

	hold, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = hold.Rollback(ctx) }()
	if _, err := hold.Exec(ctx, `SELECT 1 FROM tasks WHERE plan_id = 'last' AND id = 'T0000' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	complete := func(l queue.Lease) {
		wg.Go(func() {
			if _, err := st.Complete(ctx, l, queue.CompleteInput{}); err != nil {
				t.Errorf("complete %s: %v", l.TaskID, err)
			}
		})
	}
	complete(leases[0]) // its batch waits for T0000's lock
	testkit.Eventually(t, 10*time.Second, "the first completion's batch runs", func() bool {
		running, _ := st.CompletionBatch("last")
		return running
	})
	for _, l := range leases[1:] {
		complete(l)
	}
	testkit.Eventually(t, 10*time.Second, "the other completions wait for it", func() bool {
		_, waiting := st.CompletionBatch("last")
		return waiting == n-1
	})
	if err := hold.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()

	var txs int
	if err := pool.QueryRow(ctx, `SELECT count(DISTINCT xmin::text) FROM tasks WHERE plan_id = 'last' AND id <> 'T0000'`).Scan(&txs); err != nil {
		t.Fatal(err)
	}
	if txs != 1 {
		t.Errorf("the last %d completions were written by %d transactions, want 1 (one batch under the plan's lock)", n-1, txs)
	}
	assertEndedOnce(t, st, pool, "last", plan.PlanDone, queue.EventPlanDone)
}

// A fleet's requests never hold every connection of the pool: while their own
// transactions are stuck (a PlanChanged hook that waits), all but two of a pool of four
// are theirs, and the rest of the control plane — a labelled issue's intake, the mirror,
// River — still gets a connection at once. That holds for the batched claims and for the
// reports that take the careful path: a completion that charges a cost, FAIL, RELEASE.
func TestHotPathsLeaveConnectionsToTheRest(t *testing.T) {
	t.Parallel()
	type op func(ctx context.Context, st *queue.Store, w queue.Worker, planID string, held *queue.Claim) error
	for _, tc := range []struct {
		name  string
		claim bool // the task is claimed before the requests, unhooked
		do    op
	}{
		{"claim", false, func(ctx context.Context, st *queue.Store, w queue.Worker, planID string, _ *queue.Claim) error {
			c, err := st.Claim(ctx, queue.ClaimRequest{WorkerID: w.ID, PlanID: planID})
			if err == nil && c == nil {
				err = errors.New("no task")
			}
			return err
		}},
		{"costed complete", true, func(ctx context.Context, st *queue.Store, w queue.Worker, _ string, c *queue.Claim) error {
			_, err := st.Complete(ctx, leaseOf(c, w.ID), queue.CompleteInput{Cost: plan.MicrosPerUSD / 100})
			return err
		}},
		{"fail", true, func(ctx context.Context, st *queue.Store, w queue.Worker, _ string, c *queue.Claim) error {
			_, err := st.Fail(ctx, leaseOf(c, w.ID), queue.FailInput{Reason: "test"})
			return err
		}},
		{"release", true, func(ctx context.Context, st *queue.Store, w queue.Worker, _ string, c *queue.Claim) error {
			_, err := st.Release(ctx, leaseOf(c, w.ID), "test")
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			const conns = 4
			pool := poolOf(ctx, t, conns)
			var armed atomic.Bool
			entered := make(chan struct{}, conns)
			release := make(chan struct{})
			st := queue.NewStore(pool, nil, queue.Config{Hooks: queue.Hooks{PlanChanged: func(context.Context, pgx.Tx, queue.ChangedPlan) error {
				if armed.Load() {
					entered <- struct{}{}
					<-release
				}
				return nil
			}}})
			workers := make([]queue.Worker, conns)
			held := make([]*queue.Claim, conns)
			for i := range conns {
				importTasks(t, st, widePlan(fmt.Sprint("p", i), 1))
				workers[i] = register(t, st)
				if tc.claim {
					c, err := st.Claim(ctx, queue.ClaimRequest{WorkerID: workers[i].ID, PlanID: fmt.Sprint("p", i)})
					if err != nil || c == nil {
						t.Fatalf("claim of p%d = %v, %v; want its task", i, c, err)
					}
					held[i] = c
				}
			}
			idle := register(t, st) // holds no task, so no row lock can hold up its heartbeat
			armed.Store(true)
			errs := make([]error, conns)
			var wg sync.WaitGroup
			for i := range conns {
				wg.Go(func() { errs[i] = tc.do(ctx, st, workers[i], fmt.Sprint("p", i), held[i]) })
			}
			for range conns - 2 {
				select {
				case <-entered:
				case <-ctx.Done():
					t.Fatal("the requests' transactions did not start")
				}
			}

			qctx, qcancel := context.WithTimeout(ctx, 10*time.Second)
			defer qcancel()
			var one int
			err := pool.QueryRow(qctx, `SELECT 1`).Scan(&one)
			// A worker's heartbeat is a worker's request too: it waits for a slot.
			hctx, hcancel := context.WithTimeout(ctx, 200*time.Millisecond)
			_, herr := st.Heartbeat(hctx, idle.ID, nil)
			hcancel()
			inside := len(entered)
			close(release)
			wg.Wait()
			if err != nil {
				t.Fatalf("with the requests' transactions stuck, another statement got no connection: %v", err)
			}
			if !errors.Is(herr, context.DeadlineExceeded) {
				t.Errorf("a heartbeat while the requests' transactions held their connections = %v, want it to wait for one", herr)
			}
			if inside != 0 {
				t.Fatalf("%d requests' transactions were inside at once, want %d of a pool of %d", conns-2+inside, conns-2, conns)
			}
			for i := range conns {
				if errs[i] != nil {
					t.Fatalf("%s of p%d once released: %v", tc.name, i, errs[i])
				}
			}
		})
	}
}
