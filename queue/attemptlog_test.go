package queue_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/whilly-go/whilly/plan"
	"github.com/whilly-go/whilly/queue"
	"github.com/whilly-go/whilly/testkit"
)

func TestReportsStoreTheirLogTail(t *testing.T) {
	eachStore(t, testReportsStoreTheirLogTail)
}

// testReportsStoreTheirLogTail: the log tail of a completion is stored with it on every
// path — batched with the next claim, batched alone, careful (a cost) — and of a failure,
// with the hooks off and on; a report refused for its lease stores nothing.
func testReportsStoreTheirLogTail(t *testing.T, newStore storeMaker) {
	t.Parallel()
	ctx := context.Background()
	st, _ := newStore(t)
	p := &plan.Plan{ID: "tails", Name: "tails"}
	for i := range 8 {
		p.Tasks = append(p.Tasks, goodTask(fmt.Sprintf("T%02d", i)))
	}
	importTasks(t, st, p)
	w := register(t, st)
	tail := func(s string) *queue.LogTail { return &queue.LogTail{Offset: 0, Data: []byte(s)} }
	reports := []struct {
		name string
		do   func(l queue.Lease) error
	}{
		{"handoff", func(l queue.Lease) error {
			_, _, err := st.CompleteAndClaim(ctx, l, queue.CompleteInput{Log: tail("handoff\n")},
				queue.ClaimRequest{WorkerID: w.ID, PlanID: "tails", Key: "3c9d2f6e-1a4b-4c8d-9e0f-5a6b7c8d9e0f"})
			return err
		}},
		{"complete", func(l queue.Lease) error {
			_, err := st.Complete(ctx, l, queue.CompleteInput{Log: tail("complete\n")})
			return err
		}},
		{"careful", func(l queue.Lease) error {
			_, err := st.Complete(ctx, l, queue.CompleteInput{Cost: 5, Log: tail("careful\n")})
			return err
		}},
		{"fail", func(l queue.Lease) error {
			_, err := st.Fail(ctx, l, queue.FailInput{Reason: "flaky", Log: tail("fail\n")})
			return err
		}},
	}
	for _, r := range reports {
		c := mustClaim(t, st, w, "tails")
		if held, err := st.HeldClaim(ctx, queue.ClaimRequest{WorkerID: w.ID, Key: "3c9d2f6e-1a4b-4c8d-9e0f-5a6b7c8d9e0f"}); err == nil && held != nil {
			c = held // the handoff's next claim
		}
		forged := leaseOf(c, w.ID)
		forged.LeaseID = "00000000-0000-4000-8000-000000000000"
		if err := r.do(forged); !errors.Is(err, queue.ErrLeaseLost) {
			t.Fatalf("%s with a forged lease: %v, want lease lost", r.name, err)
		}
		if lg, err := st.ReadAttemptLog(ctx, "tails", c.Task.ID, c.Task.Attempts, 0); err != nil || len(lg.Data) != 0 {
			t.Fatalf("%s with a forged lease stored %q (%v)", r.name, lg.Data, err)
		}
		if err := r.do(leaseOf(c, w.ID)); err != nil {
			t.Fatalf("%s: %v", r.name, err)
		}
		lg, err := st.ReadAttemptLog(ctx, "tails", c.Task.ID, c.Task.Attempts, 0)
		if err != nil || string(lg.Data) != r.name+"\n" || lg.Running {
			t.Fatalf("the log after %s = %q running %v (%v)", r.name, lg.Data, lg.Running, err)
		}
	}
}

// TestLogTailLooksUpItsOwnLog: the statement that stores the log tails of completions
// finds each attempt's log by its whole key, whatever the planner believes of the tables.
// With tasks analyzed full and the log tables empty (a young install, as autovacuum leaves
// them), the generic plan that hot batches use once looked the log up by plan and attempt
// number only and filtered the task after: every tail read the logs of the whole plan
// (bench e2e, 4,000 tasks on a fresh cluster: 2.5–6.8 ms a tail, 364–599 tasks/s).
func TestLogTailLooksUpItsOwnLog(t *testing.T) {
	ctx := context.Background()
	pool := testkit.DB(t)
	importTasks(t, queue.NewStore(pool, nil, queue.Config{}), widePlan("wide", 2000))
	if _, err := pool.Exec(ctx, `ANALYZE tasks, attempt_logs, attempt_log_chunks`); err != nil {
		t.Fatal(err)
	}
	tx, err := pool.Begin(ctx) // as in a hot batch: generic plans, indexes
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, queue.HotSettings); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Prepare(ctx, "tails", queue.StoreTailsSQL); err != nil {
		t.Fatal(err)
	}
	rows, err := tx.Query(ctx, `EXPLAIN (COSTS OFF) EXECUTE tails('p', ARRAY['t'], ARRAY['00000000-0000-0000-0000-000000000000'],
		ARRAY[0::bigint], ARRAY['\x6f6b'::bytea], 1000)`)
	if err != nil {
		t.Fatal(err)
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	for i, l := range lines {
		if !strings.Contains(l, "Scan") || !strings.Contains(l, " on attempt_logs ") {
			continue
		}
		if i+1 >= len(lines) || !strings.Contains(lines[i+1], "Index Cond:") || !strings.Contains(lines[i+1], "task_id") {
			t.Fatalf("the log is not looked up by its task:\n%s", strings.Join(lines, "\n"))
		}
		return
	}
	t.Fatalf("no scan of attempt_logs in the plan:\n%s", strings.Join(lines, "\n"))
}

// TestAnAttemptsLogGoesWithItsTask: removing a task (RemoveTask) removes its logs, and so
// does deleting its plan (a hard reset); the other tasks' logs stay.
func TestAnAttemptsLogGoesWithItsTask(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testkit.DB(t)
	st := queue.NewStore(pool, nil, queue.Config{})
	w := register(t, st)
	for _, id := range []string{"gone", "kept"} {
		importTasks(t, st, &plan.Plan{ID: id, Name: id, Tasks: []plan.Task{goodTask("T1"), goodTask("T2")}})
		for range 2 {
			c := mustClaim(t, st, w, id)
			if _, err := st.Complete(ctx, leaseOf(c, w.ID), queue.CompleteInput{Log: &queue.LogTail{Data: []byte("log of " + c.Task.ID + "\n")}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	logs := func() (n int) {
		t.Helper()
		if err := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM attempt_logs) + (SELECT count(*) FROM attempt_log_chunks)`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := logs(); n != 8 {
		t.Fatalf("%d log rows after four completions with a tail, want 8", n)
	}
	if err := st.RemoveTask(ctx, "gone", "T1", "test"); err != nil {
		t.Fatal(err)
	}
	if n := logs(); n != 6 {
		t.Errorf("%d log rows after removing a task, want 6", n)
	}
	if _, err := st.ResetPlan(ctx, "gone", queue.ResetOptions{Hard: true}); err != nil {
		t.Fatal(err)
	}
	if n := logs(); n != 4 {
		t.Errorf("%d log rows after deleting a plan, want the other plan's 4", n)
	}
	if lg, err := st.ReadAttemptLog(ctx, "kept", "T2", 1, 0); err != nil || string(lg.Data) != "log of T2\n" {
		t.Errorf("the other plan's log = %q (%v)", lg.Data, err)
	}
}

// TestNoLogOutlivesItsTaskInARace: workers append to their attempts' logs and complete
// with a tail while the plan is deleted (a hard reset) at the same time. Whatever order
// the transactions commit in, no log row is left whose task is gone: a log write waits on
// its task's row and finds it deleted, or commits first and the deletion's trigger
// removes it.
func TestNoLogOutlivesItsTaskInARace(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testkit.DB(t)
	st := queue.NewStore(pool, nil, queue.Config{})
	w := register(t, st)
	var written atomic.Int64 // appends that went through: the race had logs to lose
	for round := range 6 {
		id := fmt.Sprintf("race%d", round)
		p := &plan.Plan{ID: id, Name: id}
		for i := range 4 {
			p.Tasks = append(p.Tasks, goodTask(fmt.Sprintf("T%d", i)))
		}
		importTasks(t, st, p)
		var leases []queue.Lease
		for range 4 {
			leases = append(leases, leaseOf(mustClaim(t, st, w, id), w.ID))
		}
		var wg sync.WaitGroup
		for i, l := range leases {
			wg.Go(func() {
				for off := range 20 {
					if _, err := st.AppendAttemptLog(ctx, l, queue.LogAppend{Attempt: 1, Offset: int64(off), Data: []byte("x")}); err != nil {
						return // the task is gone: nothing more to write
					}
					written.Add(1)
					if i%2 == 0 && off == 10 {
						_, _ = st.Complete(ctx, l, queue.CompleteInput{Log: &queue.LogTail{Offset: 11, Data: []byte("tail\n")}})
						return
					}
				}
			})
		}
		wg.Go(func() {
			if _, err := st.ResetPlan(ctx, id, queue.ResetOptions{Hard: true}); err != nil {
				t.Errorf("delete plan %s: %v", id, err)
			}
		})
		wg.Wait()
	}
	var orphans int
	if err := pool.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM attempt_logs l WHERE NOT EXISTS (SELECT 1 FROM tasks t WHERE t.plan_id = l.plan_id AND t.id = l.task_id)) +
		(SELECT count(*) FROM attempt_log_chunks k WHERE NOT EXISTS (SELECT 1 FROM tasks t WHERE t.plan_id = k.plan_id AND t.id = k.task_id))`).Scan(&orphans); err != nil {
		t.Fatal(err)
	}
	if orphans != 0 {
		t.Errorf("%d log rows outlived their task", orphans)
	}
	if written.Load() == 0 {
		t.Error("no append went through before the deletions: the race was not run")
	}
}
