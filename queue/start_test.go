package queue_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/whilly-go/whilly/plan"
	"github.com/whilly-go/whilly/queue"
)

func TestConcurrentStartsAreBatchedAndFenced(t *testing.T) {
	eachStore(t, testConcurrentStartsAreBatchedAndFenced)
}

// testConcurrentStartsAreBatchedAndFenced: 24 workers start their claimed tasks at once,
// each twice (a request whose answer was lost, sent again), while an intruder presents
// each lease as its own: every task is IN_PROGRESS with exactly one START event naming
// its worker, every genuine START is answered with the task, every forged one is
// ErrLeaseLost — whichever batch each request landed in.
func testConcurrentStartsAreBatchedAndFenced(t *testing.T, newStore storeMaker) {
	t.Parallel()
	ctx := context.Background()
	st, pool := newStore(t)
	const n = 24
	p := &plan.Plan{ID: "starts", Name: "starts"}
	for i := range n {
		p.Tasks = append(p.Tasks, goodTask(fmt.Sprintf("T%02d", i)))
	}
	importTasks(t, st, p)
	intruder := register(t, st)
	leases := make([]queue.Lease, n)
	for i := range leases {
		w := register(t, st)
		leases[i] = leaseOf(mustClaim(t, st, w, "starts"), w.ID)
	}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		fails []string
	)
	gate := make(chan struct{})
	for _, l := range leases {
		for range 2 {
			wg.Go(func() {
				<-gate
				task, err := st.Start(ctx, l)
				if err != nil || task.Status != plan.StatusInProgress || task.ID != l.TaskID || task.LeaseID != l.LeaseID {
					mu.Lock()
					fails = append(fails, fmt.Sprintf("start %s: %s %v", l.TaskID, task.Status, err))
					mu.Unlock()
				}
			})
		}
		forged := l
		forged.WorkerID = intruder.ID
		wg.Go(func() {
			<-gate
			if _, err := st.Start(ctx, forged); !errors.Is(err, queue.ErrLeaseLost) {
				mu.Lock()
				fails = append(fails, fmt.Sprintf("forged start of %s: %v, want lease lost", forged.TaskID, err))
				mu.Unlock()
			}
		})
	}
	close(gate)
	wg.Wait()
	for _, f := range fails {
		t.Error(f)
	}
	var started, events, wrong int
	err := pool.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM tasks WHERE plan_id = 'starts' AND status = 'IN_PROGRESS'),
		(SELECT count(DISTINCT task_id) FROM events WHERE plan_id = 'starts' AND type = 'START'),
		(SELECT count(*) FROM events e JOIN tasks t ON t.plan_id = e.plan_id AND t.id = e.task_id
		 WHERE e.plan_id = 'starts' AND e.type = 'START' AND (e.payload->>'worker_id' IS DISTINCT FROM t.claimed_by
		   OR (e.payload->>'attempt')::int <> t.attempts))`).Scan(&started, &events, &wrong)
	if err != nil {
		t.Fatal(err)
	}
	if got := countEvents(t, pool, "starts", "START"); started != n || events != n || got != n || wrong != 0 {
		t.Fatalf("%d tasks IN_PROGRESS, %d START events for %d tasks, %d naming the wrong worker or attempt; want %d, %d, %d, 0",
			started, got, events, wrong, n, n, n)
	}
}

func TestHandoffStartsTheNextTask(t *testing.T) {
	eachStore(t, testHandoffStartsTheNextTask)
}

// testHandoffStartsTheNextTask: a completion that claims the worker's next task and asks
// for it to be started hands it over IN_PROGRESS, its CLAIM and START events written
// once; the same completion sent again (its answer lost) gets the same claim, still
// started, and writes nothing; without a key, or without asking, the next task comes
// back CLAIMED and STARTs as usual. Concurrent handoffs of 8 workers, batched together,
// each get their own task started.
func testHandoffStartsTheNextTask(t *testing.T, newStore storeMaker) {
	t.Parallel()
	ctx := context.Background()
	st, pool := newStore(t)
	p := &plan.Plan{ID: "handoff", Name: "handoff"}
	for i := range 40 {
		p.Tasks = append(p.Tasks, goodTask(fmt.Sprintf("T%02d", i)))
	}
	importTasks(t, st, p)
	w := register(t, st)
	c := mustClaim(t, st, w, "handoff")
	next := queue.ClaimRequest{WorkerID: w.ID, PlanID: "handoff", Key: "6f1c3c4e-2f7d-4b8a-9a51-0c6b8f1e2d3a", Start: true}
	done, c2, err := st.CompleteAndClaim(ctx, leaseOf(c, w.ID), queue.CompleteInput{}, next)
	if err != nil || done.Status != plan.StatusDone || c2 == nil || c2.Task.Status != plan.StatusInProgress || c2.Lease.ID != next.Key {
		t.Fatalf("complete and claim = %+v, %+v, %v; want the next task IN_PROGRESS under the key", done, c2, err)
	}
	events := countEvents(t, pool, "handoff", "START") + countEvents(t, pool, "handoff", "CLAIM")
	again, c3, err := st.CompleteAndClaim(ctx, leaseOf(c, w.ID), queue.CompleteInput{}, next)
	if err != nil || again.Status != plan.StatusDone || c3 == nil || c3.Task.ID != c2.Task.ID || c3.Task.Status != plan.StatusInProgress {
		t.Fatalf("the same completion again = %+v, %+v, %v; want the same started claim", again, c3, err)
	}
	if got := countEvents(t, pool, "handoff", "START") + countEvents(t, pool, "handoff", "CLAIM"); got != events {
		t.Fatalf("the completion sent again wrote %d CLAIM or START events", got-events)
	}
	if started, err := st.Start(ctx, leaseOf(c2, w.ID)); err != nil || started.Status != plan.StatusInProgress {
		t.Fatalf("a START of the started task (an older worker) = %+v, %v; want it answered", started, err)
	}
	started := []string{c2.Task.ID} // besides those IN_PROGRESS
	for _, nc := range []queue.ClaimRequest{{WorkerID: w.ID, PlanID: "handoff", Start: true}, {WorkerID: w.ID, PlanID: "handoff", Key: "0b0c6f51-7a1e-4d6b-8c2f-3e4d5a6b7c8d"}} {
		_, c4, err := st.CompleteAndClaim(ctx, leaseOf(c2, w.ID), queue.CompleteInput{}, nc)
		if err != nil || c4 == nil || c4.Task.Status != plan.StatusClaimed {
			t.Fatalf("complete and claim with %+v = %+v, %v; want the next task CLAIMED", nc, c4, err)
		}
		if _, err := st.Start(ctx, leaseOf(c4, w.ID)); err != nil {
			t.Fatal(err)
		}
		started, c2 = append(started, c4.Task.ID), c4
	}

	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := range 8 {
		wk := register(t, st)
		held := mustClaim(t, st, wk, "handoff")
		wg.Go(func() {
			key := fmt.Sprintf("00000000-0000-4000-8000-%012d", i)
			_, got, err := st.CompleteAndClaim(ctx, leaseOf(held, wk.ID), queue.CompleteInput{},
				queue.ClaimRequest{WorkerID: wk.ID, PlanID: "handoff", Key: key, Start: true})
			switch {
			case err != nil:
				errs <- err
			case got == nil || got.Task.Status != plan.StatusInProgress || got.Task.ClaimedBy != wk.ID || got.Lease.ID != key:
				errs <- fmt.Errorf("worker %d got %+v", i, got)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	var bad int
	// The tasks handed over started; those completed straight from CLAIMED did not.
	err = pool.QueryRow(ctx, `SELECT count(*) FROM tasks t WHERE plan_id = 'handoff' AND status <> 'PENDING' AND (
		(SELECT count(*) FROM events e WHERE e.plan_id = t.plan_id AND e.task_id = t.id AND e.type = 'CLAIM') <> 1
		OR (SELECT count(*) FROM events e WHERE e.plan_id = t.plan_id AND e.task_id = t.id AND e.type = 'START') <>
		   CASE WHEN t.status = 'IN_PROGRESS' OR t.id = ANY ($1) THEN 1 ELSE 0 END)`, started).Scan(&bad)
	if err != nil || bad != 0 {
		t.Fatalf("%d tasks without one CLAIM event and one START event when started (%v)", bad, err)
	}
}
