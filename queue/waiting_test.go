package queue_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/whilly-go/whilly/plan"
	"github.com/whilly-go/whilly/queue"
	"github.com/whilly-go/whilly/testkit"
)

// waiting reports the tasks of the plan marked waiting (migration 0024), in id order.
func waiting(t testing.TB, pool *pgxpool.Pool, planID string) []string {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT id FROM tasks WHERE plan_id = $1 AND waiting ORDER BY id`, planID)
	if err != nil {
		t.Fatal(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

// finishLate makes the task DONE in a transaction it leaves open (a completion whose
// commit is late): the caller commits or rolls it back.
func finishLate(t *testing.T, pool *pgxpool.Pool, planID, taskID string) pgx.Tx {
	t.Helper()
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(ctx) })
	if _, err := tx.Exec(ctx, `UPDATE tasks SET status = 'DONE', lease_id = NULL, lease_expires_at = NULL WHERE plan_id = $1 AND id = $2`,
		planID, taskID); err != nil {
		t.Fatal(err)
	}
	return tx
}

// waitBlockedOrDone waits until done is closed or some backend waits for the plan's
// dependency lock.
func waitBlockedOrDone(t *testing.T, pool *pgxpool.Pool, done <-chan struct{}) {
	t.Helper()
	testkit.Eventually(t, 10*time.Second, "the second writer to wait for the first or finish", func() bool {
		select {
		case <-done:
			return true
		default:
		}
		var n int
		if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted`).Scan(&n); err != nil {
			t.Error(err)
			return true
		}
		return n > 0
	})
}

// A chain's later tasks wait, out of the claim order, and each completion lets the next
// one in: after the import only the head is claimable, after it completes only the next.
func TestAChainsTasksWaitUntilTheirDependencyIsDone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, pool := newStore(t)
	importTasks(t, st, chainPlan("chain", "C", 3))
	if got := waiting(t, pool, "chain"); len(got) != 2 || got[0] != "C01" || got[1] != "C02" {
		t.Fatalf("waiting after the import = %v, want [C01 C02]", got)
	}
	w := register(t, st)
	c := mustClaim(t, st, w, "")
	if c.Task.ID != "C00" {
		t.Fatalf("claimed %s, want C00", c.Task.ID)
	}
	if again, err := st.Claim(ctx, queue.ClaimRequest{WorkerID: register(t, st).ID}); err != nil || again != nil {
		t.Fatalf("a second claim while C00 runs = %v, %v; want nothing", again, err)
	}
	if _, err := st.Complete(ctx, leaseOf(c, w.ID), queue.CompleteInput{}); err != nil {
		t.Fatal(err)
	}
	if got := waiting(t, pool, "chain"); len(got) != 1 || got[0] != "C02" {
		t.Fatalf("waiting after C00 = %v, want [C02]", got)
	}
	if c := mustClaim(t, st, w, ""); c.Task.ID != "C01" {
		t.Fatalf("claimed %s, want C01", c.Task.ID)
	}
}

// A task with two dependencies whose completions commit at the same moment: each
// completion, alone, sees the other dependency unfinished. The task must still become
// claimable once both have committed (write skew on waiting would leave it waiting
// forever, and its plan with it).
func TestTwoDependenciesFinishingTogetherUnblockTheirDependent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, pool := newStore(t)
	importTasks(t, st, &plan.Plan{ID: "join", Name: "join", Tasks: []plan.Task{goodTask("A"), goodTask("B"), goodTask("C", "A", "B")}})
	w1, w2 := register(t, st), register(t, st)
	a, b := mustClaim(t, st, w1, "join"), mustClaim(t, st, w2, "join")
	if a.Task.ID != "A" || b.Task.ID != "B" {
		t.Fatalf("claimed %s and %s, want A and B", a.Task.ID, b.Task.ID)
	}
	late := finishLate(t, pool, "join", "A")
	done := make(chan struct{})
	go func() {
		defer close(done)
		if _, err := st.Complete(ctx, leaseOf(b, w2.ID), queue.CompleteInput{}); err != nil {
			t.Errorf("complete B: %v", err)
		}
	}()
	waitBlockedOrDone(t, pool, done)
	if err := late.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	<-done
	c, err := st.Claim(ctx, queue.ClaimRequest{WorkerID: w1.ID})
	if err != nil || c == nil || c.Task.ID != "C" {
		t.Fatalf("claim after A and B = %v, %v; want C (waiting: %v)", c, err, waiting(t, pool, "join"))
	}
}

// A review round's task depends on the round before it, which may be finishing at that
// very moment: the new task must not be left waiting on a dependency that committed DONE
// while it was inserted.
func TestARoundAddedWhileThePreviousOneFinishesIsNotLeftWaiting(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, id := donePlanWithPull(t, 0)
	pool := st.Pool()
	if res, err := st.StartRound(ctx, roundReq(id, queue.RoundReview, "1", 5)); err != nil || res.Outcome != queue.RoundStarted {
		t.Fatalf("round 1 = %+v, %v", res, err)
	}
	w := register(t, st)
	first := mustClaim(t, st, w, id)
	late := finishLate(t, pool, id, first.Task.ID)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if res, err := st.StartRound(ctx, roundReq(id, queue.RoundReview, "2", 5)); err != nil || res.Outcome != queue.RoundStarted {
			t.Errorf("round 2 = %+v, %v", res, err)
		}
	}()
	waitBlockedOrDone(t, pool, done)
	if err := late.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	<-done
	c, err := st.Claim(ctx, queue.ClaimRequest{WorkerID: w.ID})
	if err != nil || c == nil || c.Task.ID == first.Task.ID {
		t.Fatalf("claim after round 1's task = %v, %v; want round 2's task (waiting: %v)", c, err, waiting(t, pool, id))
	}
}

// A re-import that changes a waiting task's dependencies to finished ones makes it
// claimable.
func TestChangingAWaitingTasksDependenciesLetsItRun(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, pool := newStore(t)
	importTasks(t, st, &plan.Plan{ID: "edit", Name: "edit", Tasks: []plan.Task{goodTask("A"), goodTask("B", "A")}})
	w := register(t, st)
	a := mustClaim(t, st, w, "edit")
	if _, err := st.Complete(ctx, leaseOf(a, w.ID), queue.CompleteInput{}); err != nil {
		t.Fatal(err)
	}
	importTasks(t, st, &plan.Plan{ID: "edit", Name: "edit", Tasks: []plan.Task{goodTask("A"), goodTask("X"), goodTask("B", "X")}})
	x := mustClaim(t, st, w, "edit")
	if x.Task.ID != "X" {
		t.Fatalf("claimed %s, want X", x.Task.ID)
	}
	if got := waiting(t, pool, "edit"); len(got) != 0 {
		t.Fatalf("waiting = %v, want none: B's dependencies changed and the claim checks them", got)
	}
	if c, err := st.Claim(ctx, queue.ClaimRequest{WorkerID: register(t, st).ID}); err != nil || c != nil {
		t.Fatalf("claim while X runs = %v, %v; want nothing (B waits on X)", c, err)
	}
	if _, err := st.Complete(ctx, leaseOf(x, w.ID), queue.CompleteInput{}); err != nil {
		t.Fatal(err)
	}
	if c := mustClaim(t, st, w, "edit"); c.Task.ID != "B" {
		t.Fatalf("claimed %s, want B", c.Task.ID)
	}
}

// A reset sends a finished chain's tasks back to PENDING unmarked (the mark errs only
// towards "not waiting"): the claim's own dependency check must still run them in order.
func TestAResetChainStillRunsInOrder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, pool := newStore(t)
	importTasks(t, st, chainPlan("again", "C", 3))
	w := register(t, st)
	for range 3 {
		c := mustClaim(t, st, w, "")
		if _, err := st.Complete(ctx, leaseOf(c, w.ID), queue.CompleteInput{}); err != nil {
			t.Fatal(err)
		}
	}
	if res, err := st.ResetPlan(ctx, "again", queue.ResetOptions{}); err != nil || res.Reset != 3 {
		t.Fatalf("reset = %+v, %v; want the three DONE tasks reset", res, err)
	}
	if got := waiting(t, pool, "again"); len(got) != 0 {
		t.Fatalf("waiting after the reset = %v, want none", got)
	}
	for _, want := range []string{"C00", "C01", "C02"} {
		c := mustClaim(t, st, w, "")
		if c.Task.ID != want {
			t.Fatalf("claimed %s, want %s", c.Task.ID, want)
		}
		if other, err := st.Claim(ctx, queue.ClaimRequest{WorkerID: register(t, st).ID}); err != nil || other != nil {
			t.Fatalf("a second claim while %s runs = %v, %v; want nothing", want, other, err)
		}
		if _, err := st.Complete(ctx, leaseOf(c, w.ID), queue.CompleteInput{}); err != nil {
			t.Fatal(err)
		}
	}
}
