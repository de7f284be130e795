package control_test

import (
	"context"
	"log/slog"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/whilly-go/whilly/control"
	"github.com/whilly-go/whilly/control/client"
	"github.com/whilly-go/whilly/queue"
	"github.com/whilly-go/whilly/testkit"
)

func TestMetrics(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{control: control.Config{MetricsToken: "metrics-token"}})
	ctx := context.Background()
	e.importPlan(`{"plan_id": "m/1", "project": "Metrics", "budget_usd": 2.5, "tasks": [
		{"id": "A", "priority": "high", "description": "first task of the metrics plan"},
		{"id": "B", "priority": "high", "description": "second task of the metrics plan"},
		{"id": "C", "priority": "high", "description": "third task, after A", "dependencies": ["A"]}]}`)
	w, _ := e.worker()
	c1, err := w.Claim(ctx, client.ClaimRequest{})
	if err != nil || c1 == nil {
		t.Fatal(c1, err)
	}
	if _, err := w.Complete(ctx, c1.Task.PlanID, c1.Task.ID, client.CompleteRequest{LeaseID: c1.Lease.ID, CostUSD: 250_000, DurationMS: 90_000}); err != nil {
		t.Fatal(err)
	}
	c2, err := w.Claim(ctx, client.ClaimRequest{})
	if err != nil || c2 == nil {
		t.Fatal(c2, err)
	}
	no := false
	if _, err := w.Fail(ctx, c2.Task.PlanID, c2.Task.ID, client.FailRequest{LeaseID: c2.Lease.ID, Reason: "exit_code: 2", Retryable: &no, DurationMS: 2_000}); err != nil {
		t.Fatal(err)
	}
	if c, err := w.Claim(ctx, client.ClaimRequest{PlanID: "m/1", WaitSeconds: 0}); err != nil || c == nil {
		t.Fatal(c, err) // C, now that A is done; leaves nothing ready
	}

	if status, _ := e.do("GET", "/metrics", "", nil); status != 401 {
		t.Errorf("/metrics without its token: %d, want 401", status)
	}
	status, body := e.do("GET", "/metrics", "metrics-token", nil)
	if status != 200 {
		t.Fatalf("/metrics: %d %s", status, body)
	}
	for _, want := range []string{
		"whilly_claims_total 3",
		"whilly_completions_total 1",
		`whilly_failures_total{reason_class="exit_code"} 1`,
		`whilly_failures_total{reason_class="other"} 0`,
		`whilly_ready_tasks{plan="m/1"} 0`,
		"whilly_workers_online 1",
		`whilly_budget_remaining_usd{plan="m/1"} 2.25`,
		`whilly_claim_wait_seconds_count{outcome="claimed"} 3`,
		`whilly_http_requests_total{code="200",method="POST",route="/v1/tasks/claim"} 3`,
		`whilly_http_requests_total{code="200",method="POST",route="/v1/plans/{plan}/tasks/{task}/complete"} 1`,
		"whilly_listener_up 1",
		`whilly_attempts_total{outcome="done"} 1`,
		`whilly_attempts_total{outcome="failed"} 1`,
		`whilly_attempts_total{outcome="retry"} 0`,
		`whilly_attempt_duration_seconds_bucket{outcome="done",le="60"} 0`,
		`whilly_attempt_duration_seconds_bucket{outcome="done",le="120"} 1`,
		`whilly_attempt_duration_seconds_sum{outcome="failed"} 2`,
		`whilly_spend_usd_total{installation="none"} 0.25`,
		`whilly_tasks{state="DONE"} 1`,
		`whilly_tasks{state="FAILED"} 1`,
		`whilly_tasks{state="CLAIMED"} 1`,
		`whilly_tasks{state="PENDING"} 0`,
		"go_goroutines",
	} {
		if !strings.Contains(body, want+"\n") && !strings.Contains(body, want+" ") {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if strings.Contains(body, "/v1/plans/m") {
		t.Error("a raw path leaked into a label")
	}
}

func TestHealthAndReadiness(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	if status, body := e.do("GET", "/healthz", "", nil); status != 200 || !strings.Contains(body, `"status":"ok"`) {
		t.Errorf("/healthz: %d %s", status, body)
	}
	if status, body := e.do("GET", "/readyz", "", nil); status != 200 || !strings.Contains(body, `"listener":true`) {
		t.Errorf("/readyz: %d %s", status, body)
	}
	if err := e.client("").Readyz(context.Background()); err != nil {
		t.Error(err)
	}

	// A server whose listener is not running is alive but not ready.
	log := slog.New(slog.DiscardHandler)
	idle := queue.NewListener(e.pool, log)
	srv := httptest.NewServer(control.New(e.store, idle, log, control.Config{}).Handler())
	defer srv.Close()
	c, err := client.New(srv.URL, "", client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Healthz(context.Background()); err != nil {
		t.Errorf("healthz: %v", err)
	}
	if err := c.Readyz(context.Background()); client.StatusOf(err) != 503 {
		t.Errorf("readyz without a listener: %v, want 503", err)
	}
}

// Without WHILLY_METRICS_TOKEN, /metrics is open: no label names a plan (plan ids and
// names, and through them repositories, may be private). Spend is by installation id,
// background jobs by queue.
func TestMetricsWithoutTokenNameNoPlan(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	ctx := context.Background()
	e.importPlan(`{"plan_id": "acme-secret-launch", "project": "Acme secret launch", "budget_usd": 5, "tasks": [
		{"id": "A", "priority": "high", "description": "first task of the secret plan"},
		{"id": "B", "priority": "high", "description": "second task of the secret plan"},
		{"id": "C", "priority": "low", "description": "third task of the secret plan"}]}`)
	if _, err := e.pool.Exec(ctx, `UPDATE plans SET installation_id = 4242, repo = 'acme/secret-repo' WHERE id = 'acme-secret-launch'`); err != nil {
		t.Fatal(err)
	}
	if _, err := e.pool.Exec(ctx, `INSERT INTO river_job (kind, args, max_attempts, queue) VALUES ('metrics_test', '{}', 1, 'github')`); err != nil {
		t.Fatal(err)
	}
	w, _ := e.worker()
	c, err := w.Claim(ctx, client.ClaimRequest{})
	if err != nil || c == nil {
		t.Fatal(c, err)
	}
	if _, err := w.Fail(ctx, c.Task.PlanID, c.Task.ID, client.FailRequest{LeaseID: c.Lease.ID, CostUSD: 1_500_000, Reason: "timeout"}); err != nil {
		t.Fatal(err)
	}
	status, body := e.do("GET", "/metrics", "", nil)
	if status != 200 {
		t.Fatalf("/metrics: %d %s", status, body)
	}
	for _, want := range []string{
		"whilly_ready_tasks 2", // B and C; A waits out its backoff
		`whilly_attempts_total{outcome="retry"} 1`,
		`whilly_spend_usd_total{installation="4242"} 1.5`,
		`whilly_tasks{state="PENDING"} 3`,
		`whilly_river_jobs{queue="github",state="available"} 1`,
	} {
		if !strings.Contains(body, want+"\n") {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	for _, leak := range []string{"acme", "secret", `plan="`, "whilly_budget_remaining_usd{"} {
		if strings.Contains(body, leak) {
			t.Errorf("/metrics without a token carries %q", leak)
		}
	}
}

// A lost attempt's charge counts in the spend once, however often it is sent.
func TestMetricsCountALostAttemptsChargeOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	ctx := context.Background()
	e.importPlan(`{"plan_id": "lost", "project": "Lost", "tasks": [
		{"id": "A", "priority": "high", "description": "the task whose report is lost"}]}`)
	w, _ := e.worker()
	c, err := w.Claim(ctx, client.ClaimRequest{})
	if err != nil || c == nil {
		t.Fatal(c, err)
	}
	// Cancelling the plan withdraws the task: the worker's lease is lost, not ended by it.
	if _, err := e.client(e.admin).PatchPlan(ctx, "lost", client.PatchPlanRequest{Status: "CANCELLED"}); err != nil {
		t.Fatal(err)
	}
	for i, want := range []bool{true, false} {
		res, err := w.Charge(ctx, c.Task.PlanID, c.Task.ID, client.ChargeRequest{LeaseID: c.Lease.ID, CostUSD: 500_000, Reason: "report lost"})
		if err != nil || res.Charged != want {
			t.Fatalf("charge %d: %+v, %v; want charged=%v", i+1, res, err, want)
		}
	}
	_, body := e.do("GET", "/metrics", "", nil)
	for _, want := range []string{`whilly_spend_usd_total{installation="none"} 0.5`, `whilly_attempts_total{outcome="released"} 0`} {
		if !strings.Contains(body, want+"\n") {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

// whilly_claims_waiting counts the long-polling claims asleep: one while a claim waits,
// none once it has been answered. whilly_claim_queries_total counts their attempts on the
// database: none while one sleeps, one more when a task wakes it.
func TestMetricsClaimsWaiting(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{control: control.Config{MetricsToken: "metrics-token"}})
	e.importPlan(`{"plan_id": "wait/1", "project": "Waiting", "tasks": [
		{"id": "A", "priority": "high", "description": "a task no worker may take", "labels": ["gpu"]}]}`)
	w, _ := e.worker()
	metric := func(name string) string {
		status, body := e.do("GET", "/metrics", "metrics-token", nil)
		if status != 200 {
			t.Fatalf("/metrics: %d %s", status, body)
		}
		for line := range strings.SplitSeq(body, "\n") {
			if v, ok := strings.CutPrefix(line, name+" "); ok {
				return v
			}
		}
		t.Fatalf("/metrics lacks %s:\n%s", name, body)
		return ""
	}
	waiting := func() string { return metric("whilly_claims_waiting") }
	queries := func() int {
		n, err := strconv.Atoi(metric("whilly_claim_queries_total"))
		if err != nil {
			t.Fatalf("whilly_claim_queries_total: %v", err)
		}
		return n
	}
	if got := waiting(); got != "0" {
		t.Fatalf("whilly_claims_waiting = %s before any claim, want 0", got)
	}
	ch := claimAsync(context.Background(), w, client.ClaimRequest{PlanID: "wait/1", WaitSeconds: 20})
	testkit.Eventually(t, 20*time.Second, "the claim to be counted as waiting", func() bool { return waiting() == "1" })
	asleep := queries()
	if asleep < 1 {
		t.Fatalf("whilly_claim_queries_total = %d with a claim asleep after its attempt, want at least 1", asleep)
	}
	e.importPlan(`{"plan_id": "wait/1", "project": "Waiting", "tasks": [
		{"id": "A", "priority": "high", "description": "a task no worker may take", "labels": ["gpu"]},
		{"id": "B", "priority": "high", "description": "a task any worker may take"}]}`)
	if r := receive(t, ch); r.err != nil || r.claim == nil || r.claim.Task.ID != "B" {
		t.Fatalf("claim = %+v, %v; want task B", r.claim, r.err)
	}
	if got := waiting(); got != "0" {
		t.Errorf("whilly_claims_waiting = %s after the claim was answered, want 0", got)
	}
	if got := queries(); got != asleep+1 {
		t.Errorf("whilly_claim_queries_total = %d after one wake-up, want %d", got, asleep+1)
	}
}
