package queue_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/whilly-go/whilly/app"
	"github.com/whilly-go/whilly/queue"
	"github.com/whilly-go/whilly/server"
	"github.com/whilly-go/whilly/testkit"
)

// storeMaker builds a store over a fresh database.
type storeMaker func(testing.TB) (*queue.Store, *pgxpool.Pool)

// eachStore runs test on a store without hooks and on one with the hooks `whilly serve`
// installs (hookedStore): the race tests hold for both (issue 15).
func eachStore(t *testing.T, test func(*testing.T, storeMaker)) {
	t.Parallel()
	t.Run("hooks=off", func(t *testing.T) { test(t, newStore) })
	t.Run("hooks=on", func(t *testing.T) { test(t, hookedStore) })
}

// servingHooks are the hooks of `whilly serve` with the App and TRIZ on: the GitHub
// side's (mirror, push tokens) and the TRIZ analyzer's, inserting through an insert-only
// River client. Every plan created afterwards is made a GitHub plan, so that the mirror
// hook writes (github_mirror, a mirror job) instead of only probing.
func servingHooks(t testing.TB, pool *pgxpool.Pool) queue.Hooks {
	t.Helper()
	jobs, err := river.NewClient(riverpgxv5.New(pool), &river.Config{})
	if err != nil {
		t.Fatalf("river client: %v", err)
	}
	_, err = pool.Exec(context.Background(), `
		CREATE FUNCTION test_github_plan() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN NEW.github_issue_ref := coalesce(NEW.github_issue_ref, 'acme/app#' || NEW.id); RETURN NEW; END $$;
		CREATE TRIGGER test_github_plan BEFORE INSERT ON plans FOR EACH ROW EXECUTE FUNCTION test_github_plan();`)
	if err != nil {
		t.Fatalf("make plans GitHub plans: %v", err)
	}
	// The App (its id is all the hooks look at) and TRIZ on.
	return server.StoreHooks(server.Config{GitHub: server.GitHub{AppID: 1}, TRIZ: server.TRIZ{Enabled: true}}, jobs, nil)
}

// hookedStore is a store with servingHooks. It records the transactions in which the
// PlanChanged hook ran, and when the test ends checks that it ran once, no more, in each
// transaction that claimed, started, completed, failed or released a task of the plan.
func hookedStore(t testing.TB) (*queue.Store, *pgxpool.Pool) {
	t.Helper()
	pool := testkit.DB(t)
	h := servingHooks(t, pool)
	var (
		mu    sync.Mutex
		calls = map[string]int{} // "xid plan" → PlanChanged calls
	)
	serve := h.PlanChanged
	h.PlanChanged = func(ctx context.Context, tx pgx.Tx, c queue.ChangedPlan) error {
		var xid int64
		if err := tx.QueryRow(ctx, `SELECT txid_current() % 4294967296`).Scan(&xid); err != nil {
			return err
		}
		mu.Lock()
		calls[fmt.Sprint(xid, " ", c.PlanID)]++
		mu.Unlock()
		return serve(ctx, tx, c)
	}
	t.Cleanup(func() {
		rows, err := pool.Query(context.Background(), `SELECT DISTINCT xmin::text || ' ' || plan_id FROM events
			WHERE type IN ('CLAIM', 'START', 'COMPLETE', 'FAIL', 'RETRY', 'RELEASE')`)
		if err != nil {
			t.Errorf("read the transactions of the events: %v", err)
			return
		}
		txs, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Errorf("read the transactions of the events: %v", err)
			return
		}
		mu.Lock()
		defer mu.Unlock()
		for _, tx := range txs {
			if n := calls[tx]; n != 1 {
				t.Errorf("transaction and plan %s: the PlanChanged hook ran %d times, want once", tx, n)
			}
		}
		for tx, n := range calls {
			if n > 1 {
				t.Errorf("transaction and plan %s: the PlanChanged hook ran %d times, want once", tx, n)
			}
		}
		// What the hook wrote committed with the changes: each claimed plan's mirror is
		// dirty and its (unique) mirror job waits.
		var missing []string
		rows, err = pool.Query(context.Background(), `SELECT DISTINCT e.plan_id FROM events e WHERE e.type = 'CLAIM'
			AND NOT (EXISTS (SELECT 1 FROM github_mirror m WHERE m.plan_id = e.plan_id AND m.version > 0)
			     AND EXISTS (SELECT 1 FROM river_job j WHERE j.kind = $1 AND j.args->>'plan_id' = e.plan_id))`, app.MirrorArgs{}.Kind())
		if err == nil {
			missing, err = pgx.CollectRows(rows, pgx.RowTo[string])
		}
		if err != nil || len(missing) > 0 {
			t.Errorf("plans claimed without their mirror marked and enqueued: %v, %v", missing, err)
		}
		// Each plan that ended has its final sync enqueued, in whichever transaction ended
		// it (a batch of completions, or a careful path).
		rows, err = pool.Query(context.Background(), `SELECT DISTINCT e.plan_id FROM events e WHERE e.type IN ($2, $3, $4)
			AND NOT EXISTS (SELECT 1 FROM river_job j WHERE j.kind = $1 AND j.args->>'plan_id' = e.plan_id AND j.args @> '{"final": true}')`,
			app.MirrorArgs{}.Kind(), queue.EventPlanDone, queue.EventPlanFailed, queue.EventPlanCancelled)
		if err == nil {
			missing, err = pgx.CollectRows(rows, pgx.RowTo[string])
		}
		if err != nil || len(missing) > 0 {
			t.Errorf("plans ended without their final sync enqueued: %v, %v", missing, err)
		}
	})
	return queue.NewStore(pool, nil, queue.Config{Hooks: h}), pool
}

// TestAHookErrorRollsTheBatchBack: the hook runs in the batch's transaction, so its error
// undoes the claims and completions of the batch, and says why.
func TestAHookErrorRollsTheBatchBack(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testkit.DB(t)
	var refuse atomic.Bool
	st := queue.NewStore(pool, nil, queue.Config{Hooks: queue.Hooks{PlanChanged: func(_ context.Context, _ pgx.Tx, c queue.ChangedPlan) error {
		if refuse.Load() {
			return fmt.Errorf("refused %s", c.PlanID)
		}
		return nil
	}}})
	importTasks(t, st, widePlan("p", 2))
	w := register(t, st)

	refuse.Store(true)
	if c, err := st.Claim(ctx, queue.ClaimRequest{WorkerID: w.ID, PlanID: "p"}); err == nil || !strings.Contains(err.Error(), "refused p") {
		t.Fatalf("claim with a failing hook = %v, %v; want the hook's error", c, err)
	}
	if n := countEvents(t, pool, "p", queue.EventClaim); n != 0 {
		t.Fatalf("%d CLAIM events after a rolled-back claim, want 0", n)
	}
	refuse.Store(false)
	c := mustClaim(t, st, w, "p")
	refuse.Store(true)
	for _, complete := range []func() error{
		func() error { _, err := st.Complete(ctx, leaseOf(c, w.ID), queue.CompleteInput{}); return err },
		func() error {
			_, _, err := st.CompleteAndClaim(ctx, leaseOf(c, w.ID), queue.CompleteInput{}, queue.ClaimRequest{WorkerID: w.ID, PlanID: "p"})
			return err
		},
	} {
		if err := complete(); err == nil || !strings.Contains(err.Error(), "refused p") {
			t.Fatalf("completion with a failing hook = %v; want the hook's error", err)
		}
	}
	if n := countEvents(t, pool, "p", queue.EventComplete); n != 0 {
		t.Fatalf("%d COMPLETE events after rolled-back completions, want 0", n)
	}
	refuse.Store(false)
	if _, err := st.Complete(ctx, leaseOf(c, w.ID), queue.CompleteInput{}); err != nil {
		t.Fatalf("complete once the hook agrees: %v", err)
	}
}
