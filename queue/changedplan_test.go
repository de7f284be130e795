package queue_test

import (
	"context"
	"slices"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/whilly-go/whilly/queue"
	"github.com/whilly-go/whilly/testkit"
)

// TestABusyPlanEnqueuesOneMirrorJob: every change of a GitHub plan marks its mirror
// dirty, but only the first after a mirror run that found nothing left is told to
// enqueue the mirror's job (MirrorDue); the changes in between, batched or careful, cost
// no job insert. A change after that run, and one long after a job that may have been
// lost, enqueue again, so no change is left unmirrored.
func TestABusyPlanEnqueuesOneMirrorJob(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testkit.DB(t)
	var (
		mu   sync.Mutex
		seen []queue.ChangedPlan
	)
	st := queue.NewStore(pool, nil, queue.Config{Hooks: queue.Hooks{PlanChanged: func(_ context.Context, _ pgx.Tx, c queue.ChangedPlan) error {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, c)
		return nil
	}}})
	// take returns the changes seen since the last take.
	take := func() []queue.ChangedPlan {
		mu.Lock()
		defer mu.Unlock()
		out := seen
		seen = nil
		return out
	}
	if _, err := st.Import(ctx, widePlan("gh", 8), queue.ImportOptions{GitHubIssueRef: "acme/app#1", InstallationID: 7}); err != nil {
		t.Fatal(err)
	}
	importTasks(t, st, widePlan("local", 2))
	if got := take(); !slices.Contains(got, queue.ChangedPlan{PlanID: "gh", Dirty: true, Fresh: true, MirrorDue: true, Installation: 7}) {
		t.Fatalf("changes of the import = %+v; want gh dirty, fresh and its mirror job due", got)
	}
	w1, w2 := register(t, st), register(t, st)

	// A batch of two claims and the handoffs after it: each transaction changes gh once.
	var wg sync.WaitGroup
	cs := make([]*queue.Claim, 2)
	for i, w := range []queue.Worker{w1, w2} {
		wg.Go(func() { cs[i] = mustClaim(t, st, w, "gh") })
	}
	wg.Wait()
	for i, w := range []queue.Worker{w1, w2} {
		if _, _, err := st.CompleteAndClaim(ctx, leaseOf(cs[i], w.ID), queue.CompleteInput{}, queue.ClaimRequest{WorkerID: w.ID, PlanID: "gh"}); err != nil {
			t.Fatal(err)
		}
	}
	busy := take()
	if len(busy) < 3 {
		t.Fatalf("changes of two claims and two handoffs = %+v; want one per transaction, at least 3", busy)
	}
	for _, c := range busy {
		if c != (queue.ChangedPlan{PlanID: "gh", Dirty: true, Installation: 7}) {
			t.Fatalf("change of a plan whose mirror job waits = %+v; want dirty, no job due", c)
		}
	}
	c := mustClaim(t, st, w1, "local")
	if got := take(); !slices.Equal(got, []queue.ChangedPlan{{PlanID: "local"}}) {
		t.Fatalf("changes of a claim of a plan without an issue = %+v; want only local, nothing due", got)
	}
	if _, err := st.Complete(ctx, leaseOf(c, w1.ID), queue.CompleteInput{}); err != nil {
		t.Fatal(err)
	}
	take()

	// A mirror run that is overtaken by a change leaves the job to run again: nothing due.
	m, err := st.GetMirrorState(ctx, "gh")
	if err != nil {
		t.Fatal(err)
	}
	if dirty, err := st.FinishMirror(ctx, "gh", queue.MirrorSync{Version: m.Version - 1}, nil); err != nil || !dirty {
		t.Fatalf("finish an overtaken mirror run = %v, %v; want dirty", dirty, err)
	}
	mustClaim(t, st, w1, "gh")
	if got := take(); !slices.Equal(got, []queue.ChangedPlan{{PlanID: "gh", Dirty: true, Installation: 7}}) {
		t.Fatalf("change after an overtaken run = %+v; want dirty, no job due", got)
	}
	// A run that found nothing left: the next change enqueues again.
	if m, err = st.GetMirrorState(ctx, "gh"); err != nil {
		t.Fatal(err)
	}
	if dirty, err := st.FinishMirror(ctx, "gh", queue.MirrorSync{Version: m.Version}, nil); err != nil || dirty {
		t.Fatalf("finish a mirror run = %v, %v; want clean", dirty, err)
	}
	mustClaim(t, st, w2, "gh")
	if got := take(); !slices.Equal(got, []queue.ChangedPlan{{PlanID: "gh", Dirty: true, MirrorDue: true, Installation: 7}}) {
		t.Fatalf("change after a clean run = %+v; want its mirror job due", got)
	}
	mustClaim(t, st, w2, "gh")
	take()
	// A job enqueued long ago may have been lost (discarded, deleted): enqueue again.
	if _, err := pool.Exec(ctx, `UPDATE github_mirror SET job_at = now() - interval '11 minutes' WHERE plan_id = 'gh'`); err != nil {
		t.Fatal(err)
	}
	mustClaim(t, st, w1, "gh")
	if got := take(); !slices.Equal(got, []queue.ChangedPlan{{PlanID: "gh", Dirty: true, MirrorDue: true, Installation: 7}}) {
		t.Fatalf("change long after the last job = %+v; want its mirror job due", got)
	}
}

// A change of a GitHub plan bumps its mirror row's version (markChangedSQL) in the
// change's transaction: every task transition does. It must be a HOT update, with no
// new index entry (migration 0025): an index over version made each bump write two index
// entries, and in bench scale those few index pages became the most contended buffers.
func TestMarkingAPlanChangedIsAHOTUpdate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testkit.DB(t)
	st := queue.NewStore(pool, nil, queue.Config{Hooks: queue.Hooks{PlanChanged: func(context.Context, pgx.Tx, queue.ChangedPlan) error { return nil }}})
	if _, err := st.Import(ctx, widePlan("gh", 2), queue.ImportOptions{GitHubIssueRef: "acme/app#1", InstallationID: 7}); err != nil {
		t.Fatal(err)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	const bumps = 20
	for range bumps {
		rows, err := tx.Query(ctx, queue.MarkChangedSQL, []string{"gh"}, "", []string{}, []string{})
		if err == nil {
			for rows.Next() {
			}
			rows.Close()
			err = rows.Err()
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	var version, updated, hot int64
	err = tx.QueryRow(ctx, `SELECT (SELECT version FROM github_mirror WHERE plan_id = 'gh'),
		pg_stat_get_xact_tuples_updated('github_mirror'::regclass), pg_stat_get_xact_tuples_hot_updated('github_mirror'::regclass)`).
		Scan(&version, &updated, &hot)
	if err != nil {
		t.Fatal(err)
	}
	if updated != bumps || hot != bumps {
		t.Fatalf("%d bumps of the mirror (version now %d): %d updates, %d of them HOT; want every one HOT", bumps, version, updated, hot)
	}
}
