package app_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/whilly-go/whilly/app"
	"github.com/whilly-go/whilly/internal/testkit"
	"github.com/whilly-go/whilly/plan"
	"github.com/whilly-go/whilly/queue"
)

// A plan's revocation job says it no longer waits (revoke_at cleared), under the mirror
// row's lock, before it lists the plan's ended tokens: a change holding the row makes it
// wait before it revokes anything, and a lease ending after the clear enqueues the next
// job. When it fails it says again that it waits, for its retry, so that the plan's
// changes in the meantime enqueue no other. Each run revokes every token and forgets it.
func TestARevocationJobClearsItsMarkAndRestoresItWhenItFails(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	gh, f := newFake(t)
	pool := testkit.DB(t)
	st := queue.NewStore(pool, nil, queue.Config{})
	info := issuePlan()
	p := &plan.Plan{ID: info.ID, Name: info.ID, Repo: repo, Tasks: []plan.Task{{ID: "T", Priority: plan.PriorityMedium,
		Status: plan.StatusPending, Description: "Fix the spelling of commit in README.md", AcceptanceCriteria: []string{"no commmit"},
		TestSteps: []string{"grep commmit"}, MaxAttempts: 1}}}
	if _, err := st.Import(ctx, p, queue.ImportOptions{GitHubIssueRef: info.GitHubIssueRef, InstallationID: 7}); err != nil {
		t.Fatal(err)
	}
	// The plan's change enqueued a revocation job (no hook here: set by hand).
	if _, err := pool.Exec(ctx, `INSERT INTO github_mirror (plan_id, revoke_at) VALUES ($1, now())`, info.ID); err != nil {
		t.Fatal(err)
	}
	ws, err := app.NewWorkspaces(f, st, nil, app.WorkspaceConfig{})
	if err != nil {
		t.Fatal(err)
	}
	mint := func() []string {
		t.Helper()
		var tokens []string
		for range 2 {
			w, err := ws.Workspace(ctx, info, lease()) // no task holds the lease: it has ended
			if err != nil {
				t.Fatal(err)
			}
			tokens = append(tokens, w.Token)
		}
		return tokens
	}
	waiting := func() bool {
		t.Helper()
		var w bool
		if err := pool.QueryRow(ctx, `SELECT revoke_at IS NOT NULL FROM github_mirror WHERE plan_id = $1`, info.ID).Scan(&w); err != nil {
			t.Fatal(err)
		}
		return w
	}
	allRevoked := func(tokens []string) {
		t.Helper()
		revoked := map[string]bool{}
		for _, r := range gh.TokenRequests() {
			revoked[r.Token] = !r.RevokedAt.IsZero()
		}
		for i, tok := range tokens {
			if !revoked[tok] {
				t.Errorf("token %d not revoked on GitHub", i)
			}
		}
		if left, err := st.EndedPushTokens(ctx, info.ID, 100); err != nil || len(left) != 0 {
			t.Fatalf("push tokens left after the revocation: %d, %v; want none", len(left), err)
		}
	}
	pt := app.NewPushTokens(st, f, nil, 0)

	// The job clears the mark before it revokes anything: while a change of the plan
	// holds the mirror row, the job waits and GitHub hears nothing.
	tokens := mint()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `SELECT 1 FROM github_mirror WHERE plan_id = $1 FOR UPDATE`, info.ID); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- pt.RevokeEnded(ctx, info.ID) }()
	testkit.WaitingOnLock(t, pool, "UPDATE github_mirror SET revoke_at")
	if n := gh.CountRequests("DELETE", "/installation/token"); n != 0 {
		t.Fatalf("the job revoked %d tokens before it cleared its mark: a lease ending meanwhile would wait for the sweep", n)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if waiting() {
		t.Fatal("a revocation job left its plan marked as waiting for one: the next lease to end would wait for the sweep")
	}
	allRevoked(tokens)

	// A job that fails marks the plan waiting again, for its retry.
	tokens = mint()
	if _, err := pool.Exec(ctx, `UPDATE github_mirror SET revoke_at = now() WHERE plan_id = $1`, info.ID); err != nil {
		t.Fatal(err)
	}
	gh.Fail(testkit.Fault{Method: "DELETE", Path: "/installation/token", Status: http.StatusBadGateway, Times: 1})
	if err := pt.RevokeEnded(ctx, info.ID); err == nil {
		t.Fatal("the revocation succeeded while GitHub answered 502")
	}
	if !waiting() {
		t.Fatal("a failed revocation job left its plan marked as waiting for none: each change would enqueue another")
	}
	if err := pt.RevokeEnded(ctx, info.ID); err != nil {
		t.Fatal(err)
	}
	if waiting() {
		t.Fatal("the retry left its plan marked as waiting")
	}
	allRevoked(tokens)
}
