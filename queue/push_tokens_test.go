package queue_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/whilly-go/whilly/app"
	"github.com/whilly-go/whilly/queue"
	"github.com/whilly-go/whilly/testkit"
)

var errNoClaim = errors.New("no task claimed")

// endLeaseWithToken claims a task of planID, records a push token for its lease and
// completes it: the lease ends, its token waits to be revoked.
func endLeaseWithToken(t testing.TB, st *queue.Store, w queue.Worker, planID string) {
	t.Helper()
	if err := tryEndLeaseWithToken(st, w, planID); err != nil {
		t.Fatal(err)
	}
}

// tryEndLeaseWithToken is endLeaseWithToken for a goroutine: it returns what failed, and
// errNoClaim when the claim got no task.
func tryEndLeaseWithToken(st *queue.Store, w queue.Worker, planID string) error {
	ctx := context.Background()
	c, err := st.Claim(ctx, queue.ClaimRequest{WorkerID: w.ID, PlanID: planID})
	if err != nil {
		return fmt.Errorf("claim from %s: %w", planID, err)
	}
	if c == nil {
		return errNoClaim
	}
	l := leaseOf(c, w.ID)
	if _, err := st.RecordPushToken(ctx, queue.PushToken{LeaseID: l.LeaseID, PlanID: l.PlanID, TaskID: l.TaskID,
		InstallationID: 7, Sealed: []byte("sealed " + l.LeaseID), ExpiresAt: time.Now().Add(time.Hour)}); err != nil {
		return err
	}
	if _, err := st.Complete(ctx, l, queue.CompleteInput{}); err != nil {
		return fmt.Errorf("complete %s: %w", l.TaskID, err)
	}
	return nil
}

// revocationJobs counts the revocation jobs of installation inst in river_job, whatever
// their state.
func revocationJobs(t testing.TB, pool *pgxpool.Pool, inst int64) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM river_job WHERE kind = $1 AND (args->>'installation_id')::bigint = $2`,
		app.KindRevokePushTokens, inst).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestABusyPlanEnqueuesOneRevocation: while a plan's revocation job waits (nothing works
// the GitHub queue here), the plan's further changes — claims and completions, batched
// or careful, from several workers — enqueue no other. Before, every change of a plan
// that had a token of an ended lease inserted one more job: a busy plan whose first
// revocation waited behind deliveries flooded the GitHub queue (15,759 jobs after one
// `whilly bench scale`).
func TestABusyPlanEnqueuesOneRevocation(t *testing.T) {
	t.Parallel()
	st, pool := hookedStore(t)
	const workers, each = 4, 6
	if _, err := st.Import(context.Background(), widePlan("gh", workers*each), queue.ImportOptions{InstallationID: 7}); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	// Each worker ends leases until a claim finds nothing (a claim may skip the tasks
	// others' transactions lock), then one worker ends what is left.
	errs := make(chan error, workers+1)
	for range workers {
		w := register(t, st)
		wg.Go(func() {
			for {
				if err := tryEndLeaseWithToken(st, w, "gh"); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	w := register(t, st)
	for {
		if err := tryEndLeaseWithToken(st, w, "gh"); err != nil {
			errs <- err
			break
		}
	}
	close(errs)
	for err := range errs {
		if !errors.Is(err, errNoClaim) {
			t.Error(err)
		}
	}
	if n := revocationJobs(t, pool, 7); n != 1 {
		t.Fatalf("%d leases with push tokens ended: %d revocation jobs of the plan's installation; want 1", workers*each, n)
	}
	ended, err := st.EndedPushTokens(context.Background(), "gh", 100)
	if err != nil || len(ended) != workers*each {
		t.Fatalf("ended push tokens = %d, %v; want %d, all left for the job", len(ended), err, workers*each)
	}
}

// TestALeaseEndedWhileItsPlanIsRevokedIsRevoked: the installation's revocation job clears
// revoke_at before it lists the plan's ended tokens (StartRevocation), so a lease that ends after the
// clear enqueues the next job, and one whose transaction took the mirror row's lock first
// makes the clear wait for its commit, so the job's list sees it — no ended lease waits
// for the periodic sweep. A failed job marks the plan waiting again (its retry lists
// anew), and a job lost for longer than the bound is replaced by the next change.
func TestALeaseEndedWhileItsPlanIsRevokedIsRevoked(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testkit.DB(t)
	h := servingHooks(t, pool)
	var (
		hold    atomic.Bool
		entered = make(chan struct{})
		release = make(chan struct{})
	)
	serve := h.PlanChanged
	h.PlanChanged = func(ctx context.Context, tx pgx.Tx, c queue.ChangedPlan) error {
		if err := serve(ctx, tx, c); err != nil {
			return err
		}
		if hold.CompareAndSwap(true, false) {
			close(entered)
			<-release
		}
		return nil
	}
	st := queue.NewStore(pool, nil, queue.Config{Hooks: h})
	if _, err := st.Import(ctx, widePlan("gh", 10), queue.ImportOptions{InstallationID: 7}); err != nil {
		t.Fatal(err)
	}
	w := register(t, st)
	jobs := func(want int, when string) {
		t.Helper()
		if n := revocationJobs(t, pool, 7); n != want {
			t.Fatalf("%s: %d revocation jobs of the plan's installation; want %d", when, n, want)
		}
	}
	endLeaseWithToken(t, st, w, "gh")
	jobs(1, "a lease ended")

	// The job starts: a lease that ends from then on enqueues the next job, once.
	if _, err := st.StartRevocation(ctx, 7); err != nil {
		t.Fatal(err)
	}
	endLeaseWithToken(t, st, w, "gh")
	jobs(2, "a lease ended after the job started")
	endLeaseWithToken(t, st, w, "gh")
	jobs(2, "another lease ended while the next job waits")

	// A lease ends in a transaction that holds the mirror row's lock while the job
	// starts: the job's clear waits for that commit, so its list sees the lease ended.
	l := leaseOf(mustClaim(t, st, w, "gh"), w.ID)
	if _, err := st.RecordPushToken(ctx, queue.PushToken{LeaseID: l.LeaseID, PlanID: l.PlanID, TaskID: l.TaskID,
		InstallationID: 7, Sealed: []byte("sealed"), ExpiresAt: time.Now().Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	hold.Store(true)
	completed := make(chan error, 1)
	go func() {
		_, err := st.Complete(ctx, l, queue.CompleteInput{})
		completed <- err
	}()
	<-entered
	cleared := make(chan error, 1)
	go func() {
		_, err := st.StartRevocation(ctx, 7)
		cleared <- err
	}()
	testkit.WaitingOnLock(t, pool, "UPDATE github_mirror gm SET revoke_at")
	select {
	case err := <-cleared:
		t.Fatalf("the job's clear returned (%v) while a change of the plan held the mirror row", err)
	default:
	}
	close(release)
	if err := <-completed; err != nil {
		t.Fatalf("complete %s: %v", l.TaskID, err)
	}
	if err := <-cleared; err != nil {
		t.Fatal(err)
	}
	jobs(2, "a lease ended while the next job waited")
	ended, err := st.EndedPushTokens(ctx, "gh", 100)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(ended, func(pt queue.PushToken) bool { return pt.LeaseID == l.LeaseID }) {
		t.Fatalf("the job's list after its clear = %+v; want the lease %s that ended before the clear", ended, l.LeaseID)
	}

	// The job failed: it says it waits again (its retry will clear and list), so a
	// change meanwhile enqueues no other.
	if err := st.RetryRevocation(ctx, 7, []string{"gh"}); err != nil {
		t.Fatal(err)
	}
	endLeaseWithToken(t, st, w, "gh")
	jobs(2, "a lease ended while a failed job waits to retry")

	// A job lost (deleted, discarded) longer than the bound ago is replaced.
	if _, err := pool.Exec(ctx, `DELETE FROM river_job WHERE kind = $1`, app.KindRevokePushTokens); err != nil {
		t.Fatal(err)
	}
	endLeaseWithToken(t, st, w, "gh")
	jobs(0, "a lease ended within the bound of a lost job")
	if _, err := pool.Exec(ctx, `UPDATE github_mirror SET revoke_at = now() - interval '11 minutes' WHERE plan_id = 'gh'`); err != nil {
		t.Fatal(err)
	}
	endLeaseWithToken(t, st, w, "gh")
	jobs(0, "a lease ended within the bound of its installation's lost job")
	if _, err := pool.Exec(ctx, `UPDATE github_mirror SET revoke_at = now() - interval '11 minutes' WHERE plan_id = 'gh';
		UPDATE push_token_revocations SET since = now() - interval '11 minutes'`); err != nil {
		t.Fatal(err)
	}
	endLeaseWithToken(t, st, w, "gh")
	jobs(1, "a lease ended long after the last job was enqueued")
	endLeaseWithToken(t, st, w, "gh")
	jobs(1, "another lease ended while the replacement waits")
}
