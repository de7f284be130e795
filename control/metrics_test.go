package control_test

import (
	"context"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/whilly-go/whilly/control"
	"github.com/whilly-go/whilly/control/client"
	"github.com/whilly-go/whilly/queue"
)

func TestMetrics(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
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
	if _, err := w.Complete(ctx, c1.Task.PlanID, c1.Task.ID, client.CompleteRequest{LeaseID: c1.Lease.ID, CostUSD: 250_000}); err != nil {
		t.Fatal(err)
	}
	c2, err := w.Claim(ctx, client.ClaimRequest{})
	if err != nil || c2 == nil {
		t.Fatal(c2, err)
	}
	no := false
	if _, err := w.Fail(ctx, c2.Task.PlanID, c2.Task.ID, client.FailRequest{LeaseID: c2.Lease.ID, Reason: "exit_code: 2", Retryable: &no}); err != nil {
		t.Fatal(err)
	}
	if c, err := w.Claim(ctx, client.ClaimRequest{PlanID: "m/1", WaitSeconds: 0}); err != nil || c == nil {
		t.Fatal(c, err) // C, now that A is done; leaves nothing ready
	}

	status, body := e.do("GET", "/metrics", "", nil)
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
