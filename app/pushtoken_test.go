package app_test

import (
	"context"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/whilly-go/whilly/app"
	"github.com/whilly-go/whilly/plan"
	"github.com/whilly-go/whilly/queue"
	"github.com/whilly-go/whilly/testkit"
)

// An installation's revocation job says it no longer waits for its plans (revoke_at
// cleared), under each mirror row's lock, before it lists the plans' ended tokens: a
// change holding the row makes it wait before it revokes anything, and a lease ending
// after the clear enqueues the next job. When it fails it says again that it waits, for
// its retry, so that the plans' changes in the meantime enqueue no other. Each run
// revokes every token and forgets it.
func TestARevocationJobClearsItsMarkAndRestoresItWhenItFails(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	gh, f := newFake(t)
	pool := testkit.DB(t)
	st := queue.NewStore(pool, nil, queue.Config{})
	info := importIssuePlan(t, st)
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
	go func() { done <- pt.RevokeInstallation(ctx, 7) }()
	testkit.WaitingOnLock(t, pool, "UPDATE github_mirror gm SET revoke_at")
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
	if err := pt.RevokeInstallation(ctx, 7); err == nil {
		t.Fatal("the revocation succeeded while GitHub answered 502")
	}
	if !waiting() {
		t.Fatal("a failed revocation job left its plan marked as waiting for none: each change would enqueue another")
	}
	// Its page's other token was revoked meanwhile (8 at a time) and is forgotten: the retry
	// has only the failed one left.
	if left, err := st.EndedPushTokens(ctx, info.ID, 100); err != nil || len(left) != 1 {
		t.Fatalf("after one of two revocations failed: %d tokens left (%v), want the failed one only", len(left), err)
	}
	if err := pt.RevokeInstallation(ctx, 7); err != nil {
		t.Fatal(err)
	}
	if waiting() {
		t.Fatal("the retry left its plan marked as waiting")
	}
	allRevoked(tokens)
}

// importIssuePlan imports the issue plan (issuePlan) with its one task T, pending.
func importIssuePlan(t *testing.T, st *queue.Store) queue.PlanInfo {
	t.Helper()
	info := issuePlan()
	p := &plan.Plan{ID: info.ID, Name: info.ID, Repo: repo, Tasks: []plan.Task{{ID: "T", Priority: plan.PriorityMedium,
		Status: plan.StatusPending, Description: "Fix the spelling of commit in README.md", AcceptanceCriteria: []string{"no commmit"},
		TestSteps: []string{"grep commmit"}, MaxAttempts: 1}}}
	if _, err := st.Import(context.Background(), p, queue.ImportOptions{GitHubIssueRef: info.GitHubIssueRef, InstallationID: 7}); err != nil {
		t.Fatal(err)
	}
	return info
}

// listTracer counts the statements that list ended push tokens.
type listTracer struct{ lists atomic.Int64 }

func (l *listTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if strings.Contains(d.SQL, "FROM push_tokens pt") {
		l.lists.Add(1)
	}
	return ctx
}

func (l *listTracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// A revocation lists the ended leases' tokens a page (100) at a time and stops at a page
// that is not full: two tokens take one list, 101 take two, and every one is revoked.
func TestARevocationListsTheEndedTokensOncePerPage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	gh, f := newFake(t)
	cfg, err := pgxpool.ParseConfig(testkit.DSN(t))
	if err != nil {
		t.Fatal(err)
	}
	tr := &listTracer{}
	cfg.ConnConfig.Tracer = tr
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	st := queue.NewStore(pool, nil, queue.Config{})
	info := importIssuePlan(t, st)
	ws, err := app.NewWorkspaces(f, st, nil, app.WorkspaceConfig{})
	if err != nil {
		t.Fatal(err)
	}
	pt := app.NewPushTokens(st, f, nil, 0)
	for _, c := range []struct{ tokens, lists int }{{2, 1}, {101, 2}} {
		for range c.tokens {
			if _, err := ws.Workspace(ctx, info, lease()); err != nil { // no task holds the lease: it has ended
				t.Fatal(err)
			}
		}
		before := tr.lists.Load()
		if err := pt.RevokeEnded(ctx, info.ID); err != nil {
			t.Fatal(err)
		}
		if n := tr.lists.Load() - before; n != int64(c.lists) {
			t.Errorf("%d ended tokens: listed %d times, want %d", c.tokens, n, c.lists)
		}
		if left, err := st.EndedPushTokens(ctx, info.ID, 1000); err != nil || len(left) != 0 {
			t.Fatalf("%d ended tokens: %d left after the revocation (%v), want none", c.tokens, len(left), err)
		}
	}
	if n := gh.CountRequests("DELETE", "/installation/token"); n != 103 {
		t.Errorf("GitHub revoked %d tokens, want 103", n)
	}
}
