package queue_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/whilly-go/whilly/plan"
	"github.com/whilly-go/whilly/queue"
)

func register(t testing.TB, st *queue.Store, labels ...string) queue.Worker {
	t.Helper()
	w, _, err := st.RegisterWorker(context.Background(), "host", labels)
	if err != nil {
		t.Fatalf("register worker: %v", err)
	}
	return w
}

func importTasks(t testing.TB, st *queue.Store, p *plan.Plan) {
	t.Helper()
	if _, err := st.Import(context.Background(), p, queue.ImportOptions{}); err != nil {
		t.Fatalf("import %s: %v", p.ID, err)
	}
}

func leaseOf(c *queue.Claim, workerID string) queue.Lease {
	return queue.Lease{PlanID: c.Task.PlanID, TaskID: c.Task.ID, LeaseID: c.Lease.ID, WorkerID: workerID}
}

// widePlan is a plan of n independent tasks T0000, T0001, …
func widePlan(id string, n int) *plan.Plan {
	p := &plan.Plan{ID: id, Name: id}
	for i := range n {
		p.Tasks = append(p.Tasks, goodTask(fmt.Sprintf("T%04d", i)))
	}
	return p
}

// chainPlan is a plan of n tasks PREFIX00, PREFIX01, … each depending on the one before,
// as an issue's task list is.
func chainPlan(id, prefix string, n int) *plan.Plan {
	p := &plan.Plan{ID: id, Name: id}
	for i := range n {
		var deps []string
		if i > 0 {
			deps = []string{fmt.Sprintf("%s%02d", prefix, i-1)}
		}
		p.Tasks = append(p.Tasks, goodTask(fmt.Sprintf("%s%02d", prefix, i), deps...))
	}
	return p
}

func mustClaim(t testing.TB, st *queue.Store, w queue.Worker, planID string) *queue.Claim {
	t.Helper()
	c, err := st.Claim(context.Background(), queue.ClaimRequest{WorkerID: w.ID, PlanID: planID, Labels: w.Labels})
	if err != nil || c == nil {
		t.Fatalf("claim from %s = %v, %v; want a task", planID, c, err)
	}
	return c
}

func TestConcurrentClaimersGetEachTaskOnce(t *testing.T) {
	eachStore(t, testConcurrentClaimersGetEachTaskOnce)
}

func testConcurrentClaimersGetEachTaskOnce(t *testing.T, newStore storeMaker) {
	t.Parallel()
	ctx := context.Background()
	st, pool := newStore(t)
	const n = 1000
	importTasks(t, st, widePlan("many", n))
	w := register(t, st)

	var (
		mu   sync.Mutex
		seen = map[string]int{}
		wg   sync.WaitGroup
	)
	for range 100 {
		wg.Go(func() {
			for {
				c, err := st.Claim(ctx, queue.ClaimRequest{WorkerID: w.ID, PlanID: "many"})
				if err != nil {
					t.Errorf("claim: %v", err)
					return
				}
				if c == nil {
					return
				}
				mu.Lock()
				seen[c.Task.ID]++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(seen) != n {
		t.Fatalf("claimed %d distinct tasks, want %d", len(seen), n)
	}
	for id, k := range seen {
		if k != 1 {
			t.Fatalf("task %s claimed %d times", id, k)
		}
	}
	if got := countEvents(t, pool, "many", queue.EventClaim); got != n {
		t.Fatalf("CLAIM events = %d, want %d", got, n)
	}
}

func TestDependencyChainRunsInOrderWithEightWorkers(t *testing.T) {
	eachStore(t, testDependencyChainRunsInOrderWithEightWorkers)
}

func testDependencyChainRunsInOrderWithEightWorkers(t *testing.T, newStore storeMaker) {
	t.Parallel()
	ctx := context.Background()
	st, _ := newStore(t)
	const n = 30
	importTasks(t, st, chainPlan("chain", "C", n))

	var (
		mu      sync.Mutex
		order   []string
		running atomic.Int32
		wg      sync.WaitGroup
		done    atomic.Int32
	)
	for range 8 {
		w := register(t, st)
		wg.Go(func() {
			for done.Load() < n {
				c, err := st.Claim(ctx, queue.ClaimRequest{WorkerID: w.ID, PlanID: "chain"})
				if err != nil {
					t.Errorf("claim: %v", err)
					return
				}
				if c == nil {
					continue
				}
				if running.Add(1) != 1 {
					t.Errorf("two tasks of a chain ran at once")
				}
				mu.Lock()
				order = append(order, c.Task.ID)
				mu.Unlock()
				running.Add(-1)
				if _, err := st.Complete(ctx, leaseOf(c, w.ID), queue.CompleteInput{}); err != nil {
					t.Errorf("complete %s: %v", c.Task.ID, err)
					return
				}
				done.Add(1)
			}
		})
	}
	wg.Wait()
	for i, id := range order {
		if want := fmt.Sprintf("C%02d", i); id != want {
			t.Fatalf("position %d ran %s, want %s (order %v)", i, id, want, order)
		}
	}
	pi, err := st.GetPlan(ctx, "chain")
	if err != nil || pi.Status != plan.PlanDone {
		t.Fatalf("plan after the chain = %s, %v; want DONE", pi.Status, err)
	}
}

// expireLeases moves every lease of the plan into the past, as time would.
func expireLeases(t testing.TB, pool *pgxpool.Pool, planID string) {
	t.Helper()
	_, err := pool.Exec(context.Background(), `UPDATE tasks SET lease_expires_at = now() - interval '1 second'
		WHERE plan_id = $1 AND lease_expires_at IS NOT NULL`, planID)
	if err != nil {
		t.Fatal(err)
	}
}

func TestExpiredLeaseIsReclaimedAndOldHolderGetsLeaseLost(t *testing.T) {
	eachStore(t, testExpiredLeaseIsReclaimedAndOldHolderGetsLeaseLost)
}

func testExpiredLeaseIsReclaimedAndOldHolderGetsLeaseLost(t *testing.T, newStore storeMaker) {
	t.Parallel()
	ctx := context.Background()
	st, pool := newStore(t)
	importTasks(t, st, &plan.Plan{ID: "lease", Name: "lease", Tasks: []plan.Task{goodTask("A")}})
	w1, w2 := register(t, st), register(t, st)

	c1 := mustClaim(t, st, w1, "lease")
	if _, err := st.Start(ctx, leaseOf(c1, w1.ID)); err != nil {
		t.Fatal(err)
	}
	if c, err := st.Claim(ctx, queue.ClaimRequest{WorkerID: w2.ID}); err != nil || c != nil {
		t.Fatalf("claim while leased = %v, %v; want nothing", c, err)
	}
	expireLeases(t, pool, "lease")
	n, err := st.ReapExpiredLeases(ctx)
	if err != nil || n != 1 {
		t.Fatalf("reap = %d, %v; want 1", n, err)
	}
	c2 := mustClaim(t, st, w2, "lease")
	if c2.Task.Attempts != 2 {
		t.Fatalf("attempt after expiry = %d, want 2 (the expired one counts)", c2.Task.Attempts)
	}
	if _, err := st.Complete(ctx, leaseOf(c1, w1.ID), queue.CompleteInput{Cost: 1}); !errors.Is(err, queue.ErrLeaseLost) {
		t.Fatalf("old holder's complete: %v, want lease lost", err)
	}
	// The new lease presented by the wrong worker is refused too.
	if _, err := st.Complete(ctx, leaseOf(c2, w1.ID), queue.CompleteInput{}); !errors.Is(err, queue.ErrLeaseLost) {
		t.Fatalf("complete by a non-holder: %v, want lease lost", err)
	}
	task, err := st.Complete(ctx, leaseOf(c2, w2.ID), queue.CompleteInput{Cost: 2})
	if err != nil || task.Status != plan.StatusDone || task.Cost != 2 {
		t.Fatalf("holder's complete = %+v, %v", task, err)
	}
	if got := countEvents(t, pool, "lease", queue.EventRelease); got != 1 {
		t.Fatalf("RELEASE events = %d, want 1 (lease_expired)", got)
	}
}

func TestFailRetriesWithBackoffThenFails(t *testing.T) {
	eachStore(t, testFailRetriesWithBackoffThenFails)
}

func testFailRetriesWithBackoffThenFails(t *testing.T, newStore storeMaker) {
	t.Parallel()
	ctx := context.Background()
	st, pool := newStore(t)
	task := goodTask("F")
	task.MaxAttempts = 2
	importTasks(t, st, &plan.Plan{ID: "retry", Name: "retry", Tasks: []plan.Task{task, goodTask("G", "F")}})
	w := register(t, st)

	c := mustClaim(t, st, w, "retry")
	got, err := st.Fail(ctx, leaseOf(c, w.ID), queue.FailInput{Cost: 10, Reason: "exit_code"})
	if err != nil || got.Status != plan.StatusPending || got.NotBefore == nil {
		t.Fatalf("first failure = %+v, %v; want PENDING with not_before", got, err)
	}
	var backoff float64
	if err := pool.QueryRow(ctx, `SELECT extract(epoch FROM not_before - now()) FROM tasks WHERE id = 'F'`).Scan(&backoff); err != nil {
		t.Fatal(err)
	}
	if backoff < 8 || backoff > 10.5 {
		t.Fatalf("backoff after attempt 1 = %.1fs, want about 10s", backoff)
	}
	if c, err := st.Claim(ctx, queue.ClaimRequest{WorkerID: w.ID}); err != nil || c != nil {
		t.Fatalf("claim during backoff = %v, %v; want nothing", c, err)
	}
	at, err := st.NextReadyAt(ctx, "retry")
	if err != nil || at == nil {
		t.Fatalf("next ready = %v, %v", at, err)
	}
	if _, err := pool.Exec(ctx, `UPDATE tasks SET not_before = now() - interval '1 second' WHERE id = 'F'`); err != nil {
		t.Fatal(err)
	}
	// A backoff that ended between a claim that found nothing and this question is still
	// news: that claim must look again, since no event will say the task is ready.
	if at, err := st.NextReadyAt(ctx, "retry"); err != nil || at == nil || time.Until(*at) > 0 {
		t.Fatalf("next ready just after the backoff ended = %v, %v; want a time in the past", at, err)
	}
	c = mustClaim(t, st, w, "retry")
	if c.Task.Attempts != 2 || c.Task.LastError != "exit_code" {
		t.Fatalf("second claim = attempt %d, last error %q", c.Task.Attempts, c.Task.LastError)
	}
	got, err = st.Fail(ctx, leaseOf(c, w.ID), queue.FailInput{Cost: 5, Reason: "exit_code"})
	if err != nil || got.Status != plan.StatusFailed || got.Cost != 15 {
		t.Fatalf("last failure = %+v, %v; want FAILED with both costs", got, err)
	}
	pi, err := st.GetPlan(ctx, "retry")
	if err != nil || pi.Status != plan.PlanFailed || pi.Spent != 15 {
		t.Fatalf("plan = %s spent %s, %v; want FAILED having spent both attempts", pi.Status, pi.Spent, err)
	}
	if c, err := st.Claim(ctx, queue.ClaimRequest{WorkerID: w.ID}); err != nil || c != nil {
		t.Fatalf("dependent of a failed task was claimable: %v, %v", c, err)
	}
	if n := countEvents(t, pool, "retry", queue.EventRetry); n != 1 {
		t.Fatalf("RETRY events = %d", n)
	}
	if n := countEvents(t, pool, "retry", queue.EventPlanFailed); n != 1 {
		t.Fatalf("plan.failed events = %d", n)
	}
}

func TestNonRetryableFailureFailsAtOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, _ := newStore(t)
	importTasks(t, st, &plan.Plan{ID: "nr", Name: "nr", Tasks: []plan.Task{goodTask("A")}})
	w := register(t, st)
	c := mustClaim(t, st, w, "nr")
	no := false
	got, err := st.Fail(ctx, leaseOf(c, w.ID), queue.FailInput{Reason: "prompt_injection_blocked", Retryable: &no})
	if err != nil || got.Status != plan.StatusFailed {
		t.Fatalf("non-retryable failure = %s, %v", got.Status, err)
	}
	if _, err := st.Fail(ctx, leaseOf(c, w.ID), queue.FailInput{Reason: "x", Cost: -1}); !errors.Is(err, queue.ErrInvalid) {
		t.Fatalf("negative cost: %v, want invalid", err)
	}
}

func TestBudgetCrossingIsRecordedExactlyOnce(t *testing.T) {
	eachStore(t, testBudgetCrossingIsRecordedExactlyOnce)
}

func testBudgetCrossingIsRecordedExactlyOnce(t *testing.T, newStore storeMaker) {
	t.Parallel()
	ctx := context.Background()
	st, pool := newStore(t)
	budget := plan.USD(1_000_000) // $1
	p := &plan.Plan{ID: "budget", Name: "budget", Budget: &budget}
	for i := range 20 {
		p.Tasks = append(p.Tasks, goodTask(fmt.Sprintf("B%02d", i)))
	}
	importTasks(t, st, p)

	var claims []*queue.Claim
	var workers []queue.Worker
	for range 16 {
		w := register(t, st)
		workers = append(workers, w)
		claims = append(claims, mustClaim(t, st, w, "budget"))
	}
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i, c := range claims {
		wg.Go(func() {
			<-start
			if _, err := st.Complete(ctx, leaseOf(c, workers[i].ID), queue.CompleteInput{Cost: 100_000}); err != nil {
				t.Errorf("complete: %v", err)
			}
		})
	}
	close(start)
	wg.Wait()
	if n := countEvents(t, pool, "budget", queue.EventPlanBudgetExceeded); n != 1 {
		t.Fatalf("plan.budget_exceeded events = %d, want exactly 1", n)
	}
	pi, err := st.GetPlan(ctx, "budget")
	if err != nil || pi.Status != plan.PlanPaused || pi.PauseReason != "budget" || pi.Spent != 1_600_000 {
		t.Fatalf("plan = %+v, %v; want PAUSED on budget having spent $1.60", pi, err)
	}
	if c, err := st.Claim(ctx, queue.ClaimRequest{WorkerID: workers[0].ID}); err != nil || c != nil {
		t.Fatalf("claim over budget = %v, %v; want nothing", c, err)
	}
	raised := plan.USD(5_000_000)
	pi, err = st.SetBudget(ctx, "budget", &raised, "")
	if err != nil || pi.Status != plan.PlanActive {
		t.Fatalf("raise budget = %s, %v; want ACTIVE again", pi.Status, err)
	}
	mustClaim(t, st, workers[0], "budget")
	if n := countEvents(t, pool, "budget", queue.EventPlanBudgetRaised); n != 1 {
		t.Fatalf("plan.budget_raised events = %d", n)
	}
}

func TestClaimHonoursLabelsPriorityStrictGateAndPlanState(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, _ := newStore(t)
	gpu := goodTask("GPU")
	gpu.Labels = []string{"gpu"}
	gpu.Priority = plan.PriorityCritical
	low := goodTask("LOW")
	low.Priority = plan.PriorityLow
	high := goodTask("HIGH")
	high.Priority = plan.PriorityHigh
	weak := plan.Task{ID: "WEAK", Priority: plan.PriorityCritical, Description: "too short"}
	importTasks(t, st, &plan.Plan{ID: "mix", Name: "mix", Strict: true, Tasks: []plan.Task{low, weak, gpu, high}})

	plain := register(t, st)
	if c := mustClaim(t, st, plain, "mix"); c.Task.ID != "HIGH" {
		t.Fatalf("first claim without labels = %s, want HIGH (GPU needs a label, WEAK is gate-rejected)", c.Task.ID)
	}
	withGPU := register(t, st, "gpu", "linux")
	if c := mustClaim(t, st, withGPU, "mix"); c.Task.ID != "GPU" {
		t.Fatalf("claim with the gpu label = %s, want GPU", c.Task.ID)
	}
	if _, err := st.CancelPlan(ctx, "mix", "test", ""); err != nil {
		t.Fatal(err)
	}
	if c, err := st.Claim(ctx, queue.ClaimRequest{WorkerID: plain.ID}); err != nil || c != nil {
		t.Fatalf("claim from a cancelled plan = %v, %v", c, err)
	}
}

func TestHeartbeatExtendsLeasesAndReportsCancellation(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, pool := newStore(t)
	importTasks(t, st, &plan.Plan{ID: "hb", Name: "hb", Tasks: []plan.Task{goodTask("A"), goodTask("B")}})
	w := register(t, st)
	a, b := mustClaim(t, st, w, "hb"), mustClaim(t, st, w, "hb")

	expireLeases(t, pool, "hb")
	res, err := st.Heartbeat(ctx, w.ID, []queue.Lease{leaseOf(a, w.ID), leaseOf(b, w.ID)})
	if err != nil || len(res.Cancel) != 0 || time.Until(res.LeaseExpiresAt) < 30*time.Second {
		t.Fatalf("heartbeat = %+v, %v; want both leases extended", res, err)
	}
	if n, err := st.ReapExpiredLeases(ctx); err != nil || n != 0 {
		t.Fatalf("reap after heartbeat = %d, %v; want 0", n, err)
	}
	if _, err := st.CancelPlan(ctx, "hb", "test", ""); err != nil {
		t.Fatal(err)
	}
	res, err = st.Heartbeat(ctx, w.ID, []queue.Lease{leaseOf(a, w.ID), leaseOf(b, w.ID)})
	if err != nil || len(res.Cancel) != 2 || res.Cancel[0].Reason != "cancelled" {
		t.Fatalf("heartbeat after cancel = %+v, %v; want both tasks cancelled", res, err)
	}
	if _, err := st.Complete(ctx, leaseOf(a, w.ID), queue.CompleteInput{}); !errors.Is(err, queue.ErrLeaseLost) {
		t.Fatalf("complete of a cancelled task: %v, want lease lost", err)
	}
}

func TestRevokeWorkerReleasesItsTasks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, _ := newStore(t)
	importTasks(t, st, &plan.Plan{ID: "rv", Name: "rv", Tasks: []plan.Task{goodTask("A")}})
	w, token, err := st.RegisterWorker(ctx, "host", nil)
	if err != nil {
		t.Fatal(err)
	}
	c := mustClaim(t, st, w, "rv")
	n, err := st.RevokeWorker(ctx, w.ID)
	if err != nil || n != 1 {
		t.Fatalf("revoke = %d, %v; want 1 task released", n, err)
	}
	if _, err := st.AuthenticateWorker(ctx, token); !errors.Is(err, queue.ErrUnauthorized) {
		t.Fatalf("revoked token: %v, want unauthorized", err)
	}
	if _, err := st.Complete(ctx, leaseOf(c, w.ID), queue.CompleteInput{}); !errors.Is(err, queue.ErrLeaseLost) {
		t.Fatalf("complete after revoke: %v, want lease lost", err)
	}
	// A control plane that still trusts the token from its cache gets nothing for it.
	if c, err := st.Claim(ctx, queue.ClaimRequest{WorkerID: w.ID, PlanID: "rv"}); err != nil || c != nil {
		t.Fatalf("claim by the revoked worker = %v, %v; want nothing", c, err)
	}
	other := register(t, st)
	if again := mustClaim(t, st, other, "rv"); again.Task.Attempts != 1 {
		t.Fatalf("attempt after a revoke = %d, want 1 (a release does not count)", again.Task.Attempts)
	}
}

func TestTokens(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, _ := newStore(t)
	tok, info, err := st.MintToken(ctx, "ops@example.com", true, nil)
	if err != nil {
		t.Fatal(err)
	}
	got, err := st.AuthenticateToken(ctx, tok)
	if err != nil || !got.Admin || got.Prefix != info.Prefix {
		t.Fatalf("authenticate = %+v, %v", got, err)
	}
	past := time.Now().Add(-time.Hour)
	expired, _, err := st.MintToken(ctx, "old", false, &past)
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{expired, tok + "x", "", "whilly_a_nope"} {
		if _, err := st.AuthenticateToken(ctx, bad); !errors.Is(err, queue.ErrUnauthorized) {
			t.Errorf("token %q: %v, want unauthorized", bad, err)
		}
	}
	// A prefix that several tokens begin with is ambiguous, not "not found", and revokes
	// nothing.
	other, _, err := st.MintToken(ctx, "dev@example.com", true, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.RevokeToken(ctx, "whilly_a_"); !errors.Is(err, queue.ErrConflict) || !strings.Contains(err.Error(), "ambiguous") {
		t.Fatalf("revoke by a prefix of two tokens: %v, want ambiguous", err)
	}
	if _, err := st.AuthenticateToken(ctx, other); err != nil {
		t.Fatalf("an ambiguous revoke revoked a token: %v", err)
	}
	if err := st.RevokeToken(ctx, info.Prefix); err != nil {
		t.Fatal(err)
	}
	if _, err := st.AuthenticateToken(ctx, tok); !errors.Is(err, queue.ErrUnauthorized) {
		t.Fatalf("revoked token: %v", err)
	}
	if err := st.RevokeToken(ctx, "whilly_a_missing"); !errors.Is(err, queue.ErrNotFound) {
		t.Fatalf("revoke unknown: %v", err)
	}
}
