package control_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"testing"

	"github.com/whilly-go/whilly/control/client"
	"github.com/whilly-go/whilly/plan"
)

// dropAnswers is a proxy to the control plane that forwards every request and lets the
// server commit it, then drops the answer of the requests drop says: the connection is
// cut as when `whilly serve` dies after its commit.
func dropAnswers(t *testing.T, target string, drop func(*http.Request) bool) string {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(u)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !drop(r) {
			proxy.ServeHTTP(w, r)
			return
		}
		proxy.ServeHTTP(httptest.NewRecorder(), r) // committed, answer thrown away
		panic(http.ErrAbortHandler)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// A claim whose answer is lost, retried with its idempotency key, gets the task it had
// claimed; so does the next claim carried by a COMPLETE whose answer is lost. Each task
// is claimed once.
func TestClaimRetriedAfterItsAnswerWasLostGetsTheSameTask(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	ctx := context.Background()
	e.importPlan(planDoc("dropped", "T1", "T2", "T3"))
	tok, _ := e.register()
	direct := e.client(tok)
	lossy, err := client.New(dropAnswers(t, e.url, func(r *http.Request) bool { return r.Method == http.MethodPost }), tok, client.Options{})
	if err != nil {
		t.Fatal(err)
	}

	const key = "0b7e7f4c-3f4e-4a7e-9d55-6f0e1d2c3b4a"
	req := client.ClaimRequest{PlanID: "dropped", IdempotencyKey: key}
	if c, err := lossy.Claim(ctx, req); err == nil {
		t.Fatalf("claim through the lossy proxy = %+v, want its answer lost", c)
	}
	got, err := direct.Claim(ctx, req)
	if err != nil || got == nil || got.Task.ID != "T1" || got.Lease.ID != key {
		t.Fatalf("retried claim = %+v, %v; want T1 under lease %s", got, err, key)
	}
	if got.Lease.TTLSeconds <= 0 {
		t.Errorf("lease ttl_seconds = %v, want the lease TTL", got.Lease.TTLSeconds)
	}

	const nextKey = "1c8f8a5d-4a5f-4b8f-8e66-7a1f2e3d4c5b"
	done := client.CompleteRequest{LeaseID: got.Lease.ID, CostUSD: plan.USD(250000),
		ClaimNext: &client.NextClaim{PlanID: "dropped", IdempotencyKey: nextKey}}
	if _, err := lossy.Complete(ctx, "dropped", "T1", done); err == nil {
		t.Fatal("complete through the lossy proxy answered, want its answer lost")
	}
	res, err := direct.Complete(ctx, "dropped", "T1", done)
	if err != nil || res.Status != plan.StatusDone {
		t.Fatalf("retried complete = %+v, %v; want DONE", res, err)
	}
	if res.Next == nil || res.Next.Task.ID != "T2" || res.Next.Lease.ID != nextKey {
		t.Fatalf("retried complete's next claim = %+v, want T2 under lease %s", res.Next, nextKey)
	}

	var claims, completes int
	var spent string
	if err := e.pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE type = 'CLAIM'), count(*) FILTER (WHERE type = 'COMPLETE'),
		(SELECT spent_usd::text FROM plans WHERE id = 'dropped') FROM events WHERE plan_id = 'dropped'`).Scan(&claims, &completes, &spent); err != nil {
		t.Fatal(err)
	}
	if claims != 2 || completes != 1 || spent != "0.250000" {
		t.Errorf("%d CLAIM, %d COMPLETE events, spent %s; want 2, 1 and 0.250000", claims, completes, spent)
	}
	var holder string
	if err := e.pool.QueryRow(ctx, `SELECT coalesce(claimed_by, '') FROM tasks WHERE plan_id = 'dropped' AND id = 'T3'`).Scan(&holder); err != nil || holder != "" {
		t.Errorf("T3 held by %q (%v), want nobody", holder, err)
	}
}
