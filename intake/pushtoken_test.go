package intake_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/whilly-go/whilly/control"
	"github.com/whilly-go/whilly/control/client"
	"github.com/whilly-go/whilly/queue"
	"github.com/whilly-go/whilly/testkit"
)

// Each claim of an issue plan gets a push token of its own — minted for the one
// repository with contents: write only — and that token is revoked on GitHub when the
// lease ends, however it ends: complete, fail, release, or expiry (the lease reaper). A
// revoked token is refused from then on. Before, one token per repository was cached
// and handed to every claim for 35 minutes, and never revoked.
func TestPushTokenPerClaimRevokedWhenTheLeaseEnds(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{git: true, body: threeTasks})
	p := e.intake()
	ctx, cancel := context.WithTimeout(e.ctx, time.Minute)
	defer cancel()
	listener := queue.NewListener(e.pool, nil)
	go func() { _ = listener.Run(ctx) }()
	srv := control.New(e.store, listener, nil, control.Config{Workspaces: e.ws.Workspace})
	hs := httptest.NewServer(srv.Handler())
	defer hs.Close()
	defer srv.Drain()
	_, token, err := e.store.RegisterWorker(ctx, "w", nil)
	if err != nil {
		t.Fatal(err)
	}
	api, err := client.New(hs.URL, token, client.Options{})
	if err != nil {
		t.Fatal(err)
	}

	tokenRequest := func(tok string) testkit.TokenRequest {
		for _, tr := range e.gh.TokenRequests() {
			if tr.Token == tok {
				return tr
			}
		}
		t.Fatalf("the fake minted no token %.8s…", tok)
		return testkit.TokenRequest{}
	}
	// apiStatus is GitHub's answer to the token reading the repository's metadata.
	apiStatus := func(tok string) int {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, e.gh.URL()+"repos/"+repoName, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "token "+tok)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	var seen []string
	claim := func(key string) *client.Claim {
		t.Helper()
		c, err := api.Claim(ctx, client.ClaimRequest{PlanID: p.ID, WaitSeconds: 5, IdempotencyKey: key})
		if err != nil || c == nil || c.Workspace == nil || c.Workspace.Token == "" {
			t.Fatalf("claim = %+v, %v; want a task with a workspace and its token", c, err)
		}
		tok := c.Workspace.Token
		if slices.Contains(seen, tok) {
			t.Fatalf("claim of %s got a token an earlier lease had", c.Task.ID)
		}
		seen = append(seen, tok)
		tr := tokenRequest(tok)
		if !slices.Equal(tr.Repositories, []string{"Hello-World"}) || len(tr.Permissions) != 1 || tr.Permissions["contents"] != "write" || tr.Installation != instID {
			t.Errorf("token of %s: %+v; want installation %d, Hello-World only, contents: write only", c.Task.ID, tr, instID)
		}
		if !tr.RevokedAt.IsZero() || apiStatus(tok) != http.StatusOK {
			t.Errorf("the token of a live lease does not work")
		}
		return c
	}
	revoked := func(how string, c *client.Claim) {
		t.Helper()
		testkit.Eventually(t, 20*time.Second, "the token revoked after "+how, func() bool { return !tokenRequest(c.Workspace.Token).RevokedAt.IsZero() })
		if st := apiStatus(c.Workspace.Token); st != http.StatusUnauthorized {
			t.Errorf("the token revoked after %s: GitHub answers %d, want 401", how, st)
		}
	}

	c := claim("")
	if _, err := api.Complete(ctx, p.ID, c.Task.ID, client.CompleteRequest{LeaseID: c.Lease.ID, NoChanges: true}); err != nil {
		t.Fatal(err)
	}
	revoked("complete", c)

	// A claim delivered again (its answer was lost) gets a new token for the same lease;
	// the one it replaces is revoked at once.
	const key = "0f0e0d0c-0b0a-4908-8706-050403020100"
	lost := claim(key)
	c = claim(key)
	if c.Lease.ID != lost.Lease.ID {
		t.Fatalf("the claim delivered again has lease %s, want %s", c.Lease.ID, lost.Lease.ID)
	}
	if tokenRequest(lost.Workspace.Token).RevokedAt.IsZero() {
		t.Error("the token of the lost answer is still live")
	}
	retry := true
	if _, err := api.Fail(ctx, p.ID, c.Task.ID, client.FailRequest{LeaseID: c.Lease.ID, Reason: "agent_error", Retryable: &retry}); err != nil {
		t.Fatal(err)
	}
	revoked("fail", c)

	c = claim("")
	if _, err := api.Release(ctx, p.ID, c.Task.ID, client.LeaseRequest{LeaseID: c.Lease.ID, Reason: "shutdown"}); err != nil {
		t.Fatal(err)
	}
	revoked("release", c)

	c = claim("")
	if _, err := e.pool.Exec(ctx, `UPDATE tasks SET lease_expires_at = now() - interval '1 second' WHERE lease_id = $1`, c.Lease.ID); err != nil {
		t.Fatal(err)
	}
	if n, err := e.store.ReapExpiredLeases(ctx); err != nil || n != 1 {
		t.Fatalf("reaper returned %d tasks, %v; want 1", n, err)
	}
	revoked("lease expiry", c)

	// The job forgets a token (DELETE) after GitHub has revoked it.
	testkit.Eventually(t, 20*time.Second, "every push token forgotten", func() bool {
		var left int
		if err := e.pool.QueryRow(ctx, `SELECT count(*) FROM push_tokens`).Scan(&left); err != nil {
			t.Fatal(err)
		}
		return left == 0
	})
}
