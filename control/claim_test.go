package control_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/whilly-go/whilly/control"
	"github.com/whilly-go/whilly/control/client"
	"github.com/whilly-go/whilly/plan"
	"github.com/whilly-go/whilly/queue"
	"github.com/whilly-go/whilly/testkit"
)

type claimResult struct {
	claim *client.Claim
	err   error
	at    time.Time
}

func claimAsync(ctx context.Context, c *client.Client, req client.ClaimRequest) <-chan claimResult {
	out := make(chan claimResult, 1)
	go func() {
		cl, err := c.Claim(ctx, req)
		out <- claimResult{cl, err, time.Now()}
	}()
	return out
}

func receive(t *testing.T, ch <-chan claimResult) claimResult {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(30 * time.Second):
		t.Fatal("the claim did not return")
		return claimResult{}
	}
}

// A waiting claim returns as soon as a task becomes ready: the import's NOTIFY wakes it.
func TestLongPollReturnsWhenATaskAppears(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	ctx := context.Background()
	w, _ := e.worker()
	const rounds = 15
	var lat []time.Duration
	for i := range rounds {
		ch := claimAsync(ctx, w, client.ClaimRequest{WaitSeconds: 20})
		testkit.Eventually(t, 20*time.Second, "the claim to wait", func() bool { return e.listener.Subscribers() == 1 })
		p, err := plan.Parse([]byte(planDoc(fmt.Sprintf("late-%d", i), "T1")))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.store.Import(ctx, p, queue.ImportOptions{}); err != nil {
			t.Fatal(err)
		}
		ready := time.Now()
		r := receive(t, ch)
		if r.err != nil || r.claim == nil || r.claim.Task.PlanID != p.ID {
			t.Fatalf("round %d: claim = %+v, %v", i, r.claim, r.err)
		}
		lat = append(lat, max(r.at.Sub(ready), 0))
		testkit.Eventually(t, 20*time.Second, "the handler to finish", func() bool { return e.listener.Subscribers() == 0 })
	}
	slices.Sort(lat)
	t.Logf("ready → claimed over HTTP, %d rounds: p50 %v, max %v", rounds, lat[rounds/2], lat[rounds-1])
	if lat[rounds/2] > 250*time.Millisecond {
		t.Errorf("median ready → claimed latency %v; a NOTIFY should wake the claim within milliseconds", lat[rounds/2])
	}
}

// While nothing happens, a waiting claim makes no database query at all — not even when
// other plans are busy, since it only wakes for its own plan.
func TestIdleLongPollMakesNoQueries(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	ctx := context.Background()
	e.importPlan(planDoc("mine", "T1"))
	other, _ := e.worker()
	if c, err := other.Claim(ctx, client.ClaimRequest{PlanID: "mine"}); err != nil || c == nil {
		t.Fatalf("claim: %v, %v", c, err) // "mine" now has nothing claimable
	}
	w, _ := e.worker()
	const wait = 2 * time.Second
	first := len(e.queries.snapshot())
	begin := time.Now()
	ch := claimAsync(ctx, w, client.ClaimRequest{PlanID: "mine", WaitSeconds: wait.Seconds()})

	// Another plan is imported while the claim waits: 201 NOTIFYs it must ignore.
	testkit.Eventually(t, 20*time.Second, "the claim to wait", func() bool { return e.listener.Subscribers() == 1 })
	p, err := plan.Parse([]byte(planDoc("busy", seq("B", 200)...)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.store.Import(ctx, p, queue.ImportOptions{}); err != nil {
		t.Fatal(err)
	}
	r := receive(t, ch)
	if r.err != nil || r.claim != nil {
		t.Fatalf("claim = %+v, %v; want nothing after %v", r.claim, r.err, wait)
	}
	qs := e.queries.snapshot()[first:]
	// The handler's last query before waiting is the next-retry lookup; from its end up
	// to the deadline, the claim's own statements must not run.
	var idleFrom time.Time
	for _, q := range qs {
		if strings.Contains(q.sql, "min(not_before)") {
			idleFrom = q.end
			break
		}
	}
	if idleFrom.IsZero() {
		t.Fatal("the claim never reached its wait")
	}
	deadline := begin.Add(wait)
	own, during := 0, 0
	for _, q := range qs {
		claimQuery := strings.Contains(q.sql, "SKIP LOCKED") || strings.Contains(q.sql, "min(not_before)") ||
			strings.Contains(q.sql, "FROM workers") || strings.Contains(q.sql, "FROM plans p WHERE p.id")
		if !claimQuery {
			continue
		}
		own++
		if q.start.After(idleFrom) && q.start.Before(deadline) {
			during++
			t.Errorf("query during the idle wait, %v after it began: %.80s", q.start.Sub(idleFrom), q.sql)
		}
	}
	t.Logf("idle claim: waited %v; %d claim-path queries in all, %d during the %v idle window (while 201 events of another plan went by)",
		r.at.Sub(begin).Round(time.Millisecond), own, during, deadline.Sub(idleFrom).Round(time.Millisecond))
	if r.at.Sub(begin) < wait {
		t.Errorf("the claim returned after %v, before its wait of %v", r.at.Sub(begin), wait)
	}
}

func seq(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%04d", prefix, i)
	}
	return out
}

// A task waiting out its retry backoff wakes a waiting claim when the backoff ends, with
// no notification at all.
func TestLongPollWakesWhenABackoffEnds(t *testing.T) {
	t.Parallel()
	const backoff = 400 * time.Millisecond
	e := newEnv(t, envOptions{queue: queue.Config{BackoffBase: backoff, BackoffMax: backoff}})
	ctx := context.Background()
	e.importPlan(planDoc("r", "T1"))
	w, _ := e.worker()
	c, err := w.Claim(ctx, client.ClaimRequest{PlanID: "r"})
	if err != nil || c == nil {
		t.Fatalf("claim: %v, %v", c, err)
	}
	failed, err := w.Fail(ctx, "r", "T1", client.FailRequest{LeaseID: c.Lease.ID, CostUSD: 1000, Reason: "exit_code: 1"})
	if err != nil {
		t.Fatal(err)
	}
	if failed.Status != plan.StatusPending || failed.NotBefore == nil {
		t.Fatalf("after a retryable failure the task is %s, not_before %v", failed.Status, failed.NotBefore)
	}
	r := receive(t, claimAsync(ctx, w, client.ClaimRequest{PlanID: "r", WaitSeconds: 20}))
	if r.err != nil || r.claim == nil || r.claim.Task.Attempt != 2 {
		t.Fatalf("claim after backoff = %+v, %v", r.claim, r.err)
	}
	late := r.at.Sub(*failed.NotBefore)
	t.Logf("claimed %v after not_before", late.Round(time.Millisecond))
	if late > time.Second {
		t.Errorf("claimed %v after the backoff ended", late)
	}
	if r.claim.Task.LastError != "exit_code: 1" {
		t.Errorf("last_error = %q", r.claim.Task.LastError)
	}
}

// 100 workers race over 1,000 tasks through the HTTP API: each task is handed out and
// completed exactly once.
func TestConcurrentClaimersOverHTTP(t *testing.T) {
	t.Parallel()
	const workers, tasks = 100, 1000
	e := newEnv(t, envOptions{})
	ctx := context.Background()
	ids := seq("T", tasks)
	e.importPlan(planDoc("big", ids...))
	clients := make([]*client.Client, workers)
	for i := range clients {
		clients[i], _ = e.worker()
	}
	var (
		mu     sync.Mutex
		got    = map[string]int{}
		errs   []error
		wg     sync.WaitGroup
		before = time.Now()
	)
	for _, c := range clients {
		wg.Go(func() {
			for {
				cl, err := c.Claim(ctx, client.ClaimRequest{PlanID: "big"})
				if err == nil && cl == nil {
					return // nothing left to claim
				}
				if err == nil {
					_, err = c.Complete(ctx, "big", cl.Task.ID, client.CompleteRequest{LeaseID: cl.Lease.ID, CostUSD: 1})
				}
				mu.Lock()
				if err != nil {
					errs = append(errs, err)
					mu.Unlock()
					return
				}
				got[cl.Task.ID]++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(before)
	for _, err := range errs {
		t.Error(err)
	}
	if len(got) != tasks {
		t.Errorf("%d distinct tasks completed, want %d", len(got), tasks)
	}
	for id, n := range got {
		if n != 1 {
			t.Errorf("task %s handed out %d times", id, n)
		}
	}
	p, err := e.client(e.read).GetPlan(ctx, "big")
	if err != nil {
		t.Fatal(err)
	}
	if p.Status != plan.PlanDone || p.Counts[plan.StatusDone] != tasks || p.SpentUSD != tasks {
		t.Errorf("plan after the race: %s, counts %v, spent %s", p.Status, p.Counts, p.SpentUSD)
	}
	var claims, completes int
	err = e.pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE type = 'CLAIM'), count(*) FILTER (WHERE type = 'COMPLETE')
		FROM events WHERE plan_id = 'big'`).Scan(&claims, &completes)
	if err != nil || claims != tasks || completes != tasks {
		t.Errorf("events: %d CLAIM, %d COMPLETE, %v; want %d each", claims, completes, err, tasks)
	}
	t.Logf("%d workers, %d tasks: %v, %.0f claim+complete per second over HTTP",
		workers, tasks, elapsed.Round(time.Millisecond), float64(tasks)/elapsed.Seconds())
}

// Plan and task ids holding "/" and ":" travel through every endpoint intact.
func TestIDsWithSlashAndColonRoundTrip(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	ctx := context.Background()
	const planID = "team/alpha:v2"
	doc := `{"plan_id": "team/alpha:v2", "project": "Slashes", "tasks": [
		{"id": "feat/login:1", "priority": "high", "description": "the first task, with a slash and a colon"},
		{"id": "feat/login:2", "priority": "high", "description": "the second task, after the first one", "dependencies": ["feat/login:1"]}]}`
	res := e.importPlan(doc)
	if res.Import.PlanID != planID || !res.Import.PlanCreated || res.Plan.ID != planID {
		t.Fatalf("import = %+v", res)
	}
	admin, reader := e.client(e.admin), e.client(e.read)
	if p, err := reader.GetPlan(ctx, planID); err != nil || p.ID != planID || p.Total != 2 {
		t.Fatalf("GetPlan = %+v, %v", p, err)
	}
	ts, err := reader.ListTasks(ctx, planID)
	if err != nil || len(ts) != 2 || ts[0].ID != "feat/login:1" || ts[1].Dependencies[0] != "feat/login:1" {
		t.Fatalf("ListTasks = %+v, %v", ts, err)
	}

	w, workerID := e.worker()
	c, err := w.Claim(ctx, client.ClaimRequest{PlanID: planID})
	if err != nil || c == nil || c.Task.ID != "feat/login:1" || c.Task.PlanID != planID || c.Plan.ID != planID {
		t.Fatalf("claim = %+v, %v", c, err)
	}
	if _, err := w.Start(ctx, planID, c.Task.ID, client.LeaseRequest{LeaseID: c.Lease.ID}); err != nil {
		t.Fatal(err)
	}
	hb, err := w.Heartbeat(ctx, workerID, client.HeartbeatRequest{Tasks: []client.HeldLease{{PlanID: planID, TaskID: c.Task.ID, LeaseID: c.Lease.ID}}})
	if err != nil || len(hb.Cancel) != 0 {
		t.Fatalf("heartbeat = %+v, %v", hb, err)
	}
	ev, err := w.TaskEvent(ctx, planID, c.Task.ID, client.TaskEventRequest{LeaseID: c.Lease.ID, Type: "agent.output",
		Payload: json.RawMessage(`{"line": "hello"}`)})
	if err != nil || ev.PlanID != planID || ev.TaskID != c.Task.ID || ev.Type != "agent.output" {
		t.Fatalf("task event = %+v, %v", ev, err)
	}
	done, err := w.Complete(ctx, planID, c.Task.ID, client.CompleteRequest{LeaseID: c.Lease.ID, CostUSD: 13_000, Result: "ok"})
	if err != nil || done.Status != plan.StatusDone || done.CostUSD != 13_000 {
		t.Fatalf("complete = %+v, %v", done, err)
	}
	c2, err := w.Claim(ctx, client.ClaimRequest{PlanID: planID})
	if err != nil || c2 == nil || c2.Task.ID != "feat/login:2" {
		t.Fatalf("second claim = %+v, %v", c2, err)
	}
	no := false
	if _, err := w.Fail(ctx, planID, c2.Task.ID, client.FailRequest{LeaseID: c2.Lease.ID, Reason: "agent_error: boom", Retryable: &no}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.PatchPlan(ctx, planID, client.PatchPlanRequest{BudgetUSD: client.SetBudget(5_000_000)}); err != nil {
		t.Fatal(err)
	}
	evs, err := reader.ListEvents(ctx, client.EventQuery{PlanID: planID})
	if err != nil {
		t.Fatal(err)
	}
	var types []string
	for _, ev := range evs.Events {
		if ev.PlanID != planID {
			t.Errorf("event %d of plan %q", ev.ID, ev.PlanID)
		}
		types = append(types, ev.Type)
	}
	want := []string{"plan.created", "task.created", "task.created", "CLAIM", "START", "agent.output", "COMPLETE",
		"CLAIM", "FAIL", "plan.failed", "plan.budget_lowered"} // a cap on an unlimited plan lowers it
	if !slices.Equal(types, want) {
		t.Errorf("events = %v\nwant %v", types, want)
	}

	// The escaped form is one segment; the raw slash is another route.
	if status, _ := e.do("GET", "/v1/plans/team%2Falpha:v2", e.read, nil); status != 200 {
		t.Errorf("escaped id: %d", status)
	}
	if status, _ := e.do("GET", "/v1/plans/team/alpha:v2", e.read, nil); status != 404 {
		t.Errorf("unescaped slash: %d, want 404", status)
	}
}

// wait_seconds is capped by MaxClaimWait, however large.
func TestClaimWaitIsCapped(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{control: control.Config{MaxClaimWait: 300 * time.Millisecond}})
	tok, _ := e.register()
	begin := time.Now()
	status, body := e.do("POST", "/v1/tasks/claim", tok, `{"wait_seconds": 1e300}`)
	took := time.Since(begin)
	if status != 204 || took < 300*time.Millisecond || took > 5*time.Second {
		t.Errorf("claim with a huge wait: %d %q after %v; want 204 after the 300ms cap", status, body, took)
	}
}

// Drain ends waiting claims with 204 and closes event streams, so that a replica shutting
// down is not held up by them.
func TestDrainEndsLongPollsAndStreams(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	ctx := context.Background()
	w, _ := e.worker()
	claim := claimAsync(ctx, w, client.ClaimRequest{WaitSeconds: 30})
	streamDone := make(chan error, 1)
	go func() {
		streamDone <- e.client(e.read).StreamEvents(ctx, "", 0, func(client.Event) error { return nil })
	}()
	testkit.Eventually(t, 20*time.Second, "the claim and the stream to wait", func() bool { return e.listener.Subscribers() == 2 })
	begin := time.Now()
	e.server.Drain()
	if r := receive(t, claim); r.err != nil || r.claim != nil {
		t.Errorf("claim after Drain = %+v, %v; want 204", r.claim, r.err)
	}
	select {
	case err := <-streamDone:
		if !errors.Is(err, client.ErrStreamClosed) {
			t.Errorf("stream after Drain: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the stream outlived Drain")
	}
	t.Logf("drained in %v", time.Since(begin).Round(time.Millisecond))
	// A new claim does not wait any more.
	begin = time.Now()
	if c, err := w.Claim(ctx, client.ClaimRequest{WaitSeconds: 30}); err != nil || c != nil || time.Since(begin) > 5*time.Second {
		t.Errorf("claim while draining = %+v, %v after %v", c, err, time.Since(begin))
	}
}
