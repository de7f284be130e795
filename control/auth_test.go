package control_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/whilly-go/whilly/control"
	"github.com/whilly-go/whilly/control/client"
	"github.com/whilly-go/whilly/testkit"
)

// TestAuthMatrix checks every kind of token against every kind of endpoint: 401 for a
// token that is missing, unknown, revoked or expired; 403 for a valid token of the wrong
// kind, or a worker's token on another worker's path.
func TestAuthMatrix(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	ctx := context.Background()
	e.importPlan(planDoc("p", "T1"))
	tokA, idA := e.register()
	tokB, _ := e.register()
	claim, err := e.client(tokA).Claim(ctx, client.ClaimRequest{PlanID: "p"})
	if err != nil || claim == nil {
		t.Fatalf("claim: %v, %v", claim, err)
	}
	revokedAdmin, tok, err := e.store.MintToken(ctx, "gone@example.com", true, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.store.RevokeToken(ctx, tok.Prefix); err != nil {
		t.Fatal(err)
	}
	past := time.Now().Add(-time.Hour)
	expired, _, err := e.store.MintToken(ctx, "old@example.com", true, &past)
	if err != nil {
		t.Fatal(err)
	}
	revokedWorker, idC := e.register()
	if _, err := e.store.RevokeWorker(ctx, idC); err != nil {
		t.Fatal(err)
	}

	type request struct {
		name, method, path string
		body               any
	}
	requests := []request{
		{"register", "POST", "/v1/workers/register", `{"hostname": "h"}`},
		{"heartbeat", "POST", "/v1/workers/" + idA + "/heartbeat", `{"tasks": []}`},
		{"claim", "POST", "/v1/tasks/claim", `{"plan_id": "p", "wait_seconds": 0}`},
		{"start", "POST", "/v1/plans/p/tasks/T1/start", fmt.Sprintf(`{"lease_id": %q}`, claim.Lease.ID)},
		{"list plans", "GET", "/v1/plans", nil},
		{"get plan", "GET", "/v1/plans/p", nil},
		{"list tasks", "GET", "/v1/plans/p/tasks", nil},
		{"import", "POST", "/v1/plans", planDoc("p", "T1")},
		{"patch", "PATCH", "/v1/plans/p", `{"budget_usd": 100}`},
		{"events", "GET", "/v1/events", nil},
		{"workers", "GET", "/v1/workers", nil},
	}
	all401 := []int{401, 401, 401, 401, 401, 401, 401, 401, 401, 401, 401}
	for _, tc := range []struct {
		who   string
		token string
		want  []int // in the order of requests
	}{
		{"no token", "", all401},
		{"unknown token", "whilly_w_unknown", all401},
		{"garbage", "not a token", all401},
		{"revoked admin token", revokedAdmin, all401},
		{"expired admin token", expired, all401},
		{"revoked worker", revokedWorker, all401},
		{"worker A", tokA, []int{403, 200, 204, 200, 200, 200, 200, 403, 403, 200, 200}},
		{"worker B", tokB, []int{403, 403, 204, 409, 200, 200, 200, 403, 403, 200, 200}},
		{"read token", e.read, []int{403, 403, 403, 403, 200, 200, 200, 403, 403, 200, 200}},
		{"admin token", e.admin, []int{201, 403, 403, 403, 200, 200, 200, 200, 200, 200, 200}},
		{"bootstrap token", bootstrapToken, []int{201, 403, 403, 403, 403, 403, 403, 403, 403, 403, 403}},
	} {
		for i, rq := range requests {
			status, body := e.do(rq.method, rq.path, tc.token, rq.body)
			if status != tc.want[i] {
				t.Errorf("%s → %s %s: %d, want %d (%s)", tc.who, rq.method, rq.path, status, tc.want[i], body)
			}
			if status >= 400 && !strings.Contains(body, `"error":`) {
				t.Errorf("%s → %s: error body is not JSON: %s", tc.who, rq.name, body)
			}
		}
	}

	// The stream checks its token before it streams.
	if status, _ := e.do("GET", "/v1/events/stream", "", nil); status != 401 {
		t.Errorf("stream without a token: %d, want 401", status)
	}
	// The scheme is case-insensitive; other schemes are refused.
	if status, _ := e.do("GET", "/v1/plans", "", nil, "Authorization", "bearer "+e.read); status != 200 {
		t.Errorf("lower-case scheme: %d, want 200", status)
	}
	if status, _ := e.do("GET", "/v1/plans", "", nil, "Authorization", "Basic "+e.read); status != 401 {
		t.Errorf("Basic scheme: %d, want 401", status)
	}
}

func TestMetricsToken(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{control: control.Config{MetricsToken: "scrape-me"}})
	for _, tc := range []struct {
		token string
		want  int
	}{{"", 401}, {"wrong", 401}, {e.admin, 401}, {"scrape-me", 200}} {
		if status, body := e.do("GET", "/metrics", tc.token, nil); status != tc.want {
			t.Errorf("/metrics with %q: %d, want %d (%.200s)", tc.token, status, tc.want, body)
		}
	}
}

// TestWorkerTokenCache: the worker protocol's routes look a worker's token up once, not
// on every request; revoking the worker is heard through the listener, and the token is
// refused (401) from then on, on this replica as on any other.
func TestWorkerTokenCache(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	ctx := context.Background()
	e.importPlan(planDoc("cache", "T1", "T2", "T3"))
	tok, id := e.register()
	w := e.client(tok)
	lookups := func() int {
		n := 0
		for _, q := range e.queries.snapshot() {
			if strings.Contains(q.sql, "FROM workers") && strings.Contains(q.sql, "token_hash") {
				n++
			}
		}
		return n
	}
	c, err := w.Claim(ctx, client.ClaimRequest{PlanID: "cache"})
	if err != nil || c == nil {
		t.Fatalf("claim: %v, %v", c, err)
	}
	before := lookups()
	for range 3 {
		if _, err := w.Start(ctx, "cache", c.Task.ID, client.LeaseRequest{LeaseID: c.Lease.ID}); err != nil {
			t.Fatalf("start: %v", err)
		}
	}
	if n := lookups() - before; n != 0 {
		t.Errorf("%d token look-ups for 3 requests of a known worker, want 0", n)
	}
	if _, err := e.store.RevokeWorker(ctx, id); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 20*time.Second, "the revoked token refused", func() bool {
		c, err := w.Claim(ctx, client.ClaimRequest{PlanID: "cache"})
		if c != nil {
			t.Fatalf("a revoked worker was given %s", c.Task.ID)
		}
		return client.StatusOf(err) == 401
	})
}
