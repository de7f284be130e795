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
