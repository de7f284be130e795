package app_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/whilly-go/whilly/app"
	"github.com/whilly-go/whilly/queue"
	"github.com/whilly-go/whilly/testkit"
)

func issuePlan() queue.PlanInfo {
	return queue.PlanInfo{ID: "gh/octo/shop/12", Repo: repo, GitHubIssueRef: "octo/shop#12", InstallationID: 7}
}

// lease makes a fresh lease of the issue plan's task T.
func lease() queue.Lease {
	return queue.Lease{PlanID: issuePlan().ID, TaskID: "T", LeaseID: uuid(), WorkerID: "w-1"}
}

var leaseSeq atomic.Int64

func uuid() string { return fmt.Sprintf("00000000-0000-4000-8000-%012d", leaseSeq.Add(1)) }

// newWorkspaces returns the workspaces of f over a test database, and its store.
func newWorkspaces(t *testing.T, f *app.Factory, cfg app.WorkspaceConfig) (*app.Workspaces, *queue.Store) {
	t.Helper()
	st := queue.NewStore(testkit.DB(t), nil, queue.Config{})
	ws, err := app.NewWorkspaces(f, st, nil, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return ws, st
}

// A claim of an issue plan gets the clone URL, the default branch as the base, the
// issue's branch, the bot as author and a token that can push to that one repository
// and do nothing else; every claim of a burst gets a token of its own, recorded with its
// lease for revocation.
func TestWorkspaceOfAnIssuePlan(t *testing.T) {
	t.Parallel()
	gh, f := newFake(t)
	gh.Install(7, "octo/other")
	gh.SetDefaultBranch(repo, "trunk")
	ws, st := newWorkspaces(t, f, app.WorkspaceConfig{MaxFiles: 10})
	ctx := context.Background()

	var (
		wg  sync.WaitGroup
		mu  sync.Mutex
		got []string
	)
	for range 10 {
		wg.Go(func() {
			w, err := ws.Workspace(ctx, issuePlan(), lease())
			if err != nil || w == nil {
				t.Errorf("workspace = %v, %v", w, err)
				return
			}
			mu.Lock()
			got = append(got, w.Token)
			mu.Unlock()
		})
	}
	wg.Wait()
	reads := gh.CountRequests("GET", `/repos/octo/shop`)
	w, err := ws.Workspace(ctx, issuePlan(), lease())
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("clone=%s/octo/shop.git base=trunk branch=whilly/issue-12 author=%s <%d+%s@users.noreply.127.0.0.1> files=10",
		gh.Server.URL, testkit.BotLogin, testkit.BotUserID, testkit.BotLogin)
	if have := fmt.Sprintf("clone=%s base=%s branch=%s author=%s <%s> files=%d", w.CloneURL, w.BaseBranch, w.Branch,
		w.AuthorName, w.AuthorEmail, w.MaxFiles); have != want {
		t.Errorf("workspace\n got %s\nwant %s", have, want)
	}
	if w.TokenExpiresAt == nil || time.Until(*w.TokenExpiresAt) < 50*time.Minute {
		t.Errorf("token expires at %v, want about an hour from now", w.TokenExpiresAt)
	}
	got = append(got, w.Token)
	slices.Sort(got)
	if len(slices.Compact(got)) != 11 {
		t.Fatalf("11 claims got %d different tokens, want one each", len(slices.Compact(got)))
	}
	var scoped []testkit.TokenRequest
	for _, r := range gh.TokenRequests() {
		if r.Repositories != nil {
			scoped = append(scoped, r)
			if !slices.Equal(r.Repositories, []string{"shop"}) || r.Installation != 7 || len(r.Permissions) != 1 || r.Permissions["contents"] != "write" {
				t.Errorf("scoped token request = %+v, want shop with contents: write only", r)
			}
		}
	}
	if len(scoped) != 11 {
		t.Errorf("%d scoped token requests, want 11", len(scoped))
	}
	// Each is recorded (sealed: the token itself is nowhere in the database) for revocation.
	ended, err := st.EndedPushTokens(ctx, issuePlan().ID, 100) // no task holds these leases
	if err != nil || len(ended) != 11 {
		t.Fatalf("recorded push tokens: %d, %v; want 11", len(ended), err)
	}
	for _, pt := range ended {
		if strings.Contains(string(pt.Sealed), "ghs_") || pt.InstallationID != 7 {
			t.Errorf("push token record %+v: want installation 7 and the token sealed", pt)
		}
	}
	if n := gh.CountRequests("GET", `/repos/octo/shop`); n != reads || n == 0 {
		t.Errorf("%d reads of the repository after %d, want none more (cached)", n, reads)
	}

	// The push token reads its repository's metadata, and nothing else.
	call := func(method, path, body string) int {
		req, _ := http.NewRequestWithContext(ctx, method, gh.Server.URL+path, strings.NewReader(body))
		req.Header.Set("Authorization", "token "+w.Token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, c := range []struct {
		method, path, body string
		want               int
	}{
		{"GET", "/repos/octo/shop", "", 200},
		{"POST", "/repos/octo/shop/issues/12/comments", `{"body":"hi"}`, 403},
		{"GET", "/repos/octo/shop/issues/12", "", 403},
		{"GET", "/repos/octo/other", "", 403},
		{"POST", "/repos/octo/shop/dispatches", `{"event_type":"whilly"}`, 403},
	} {
		if got := call(c.method, c.path, c.body); got != c.want {
			t.Errorf("%s %s with the push token = %d, want %d", c.method, c.path, got, c.want)
		}
	}
}

func TestWorkspaceOnlyForIssuePlansAndFindsTheInstallation(t *testing.T) {
	t.Parallel()
	gh, f := newFake(t)
	ws, _ := newWorkspaces(t, f, app.WorkspaceConfig{})
	ctx := context.Background()
	for _, p := range []queue.PlanInfo{{ID: "local"}, {ID: "file", Repo: repo}} {
		if w, err := ws.Workspace(ctx, p, lease()); w != nil || err != nil {
			t.Errorf("plan %+v: workspace %v, %v; want none", p, w, err)
		}
	}
	p := issuePlan()
	p.InstallationID = 0 // taken in with WHILLY_GITHUB_TOKEN
	if w, err := ws.Workspace(ctx, p, lease()); err != nil || w == nil || w.Token == "" {
		t.Fatalf("workspace of a token-intake plan = %v, %v", w, err)
	}
	if n := gh.CountRequests("GET", `/repos/octo/shop/installation`); n != 1 {
		t.Errorf("%d installation look-ups, want 1", n)
	}
	p.InstallationID = 99 // the App was installed anew since the intake
	if w, err := ws.Workspace(ctx, p, lease()); err != nil || w == nil || w.Token == "" {
		t.Fatalf("workspace of a plan whose installation is gone = %v, %v; want the new installation's", w, err)
	}
	p.Repo = "octo/missing"
	if _, err := ws.Workspace(ctx, p, lease()); !errors.Is(err, app.ErrNotFound) {
		t.Errorf("workspace of a repository the App does not cover = %v, want ErrNotFound", err)
	}
}

func TestGitAndGraphQLURLsFollowTheAPIURL(t *testing.T) {
	t.Parallel()
	r := app.Repo{Owner: "octo", Name: "shop"}
	for _, c := range []struct{ api, git, graphql string }{
		{"", "https://github.com/octo/shop.git", "https://api.github.com/graphql"},
		{"https://ghes.example.com/api/v3/", "https://ghes.example.com/octo/shop.git", "https://ghes.example.com/api/graphql"},
		{"https://api.acme.ghe.com/", "https://acme.ghe.com/octo/shop.git", "https://api.acme.ghe.com/graphql"},
		{"http://127.0.0.1:8080/", "http://127.0.0.1:8080/octo/shop.git", "http://127.0.0.1:8080/graphql"},
	} {
		f, err := app.NewFactory(app.Config{APIURL: c.api, Token: "t"})
		if err != nil {
			t.Fatal(err)
		}
		if got := f.GitURL(r); got != c.git {
			t.Errorf("%q: git URL %s, want %s", c.api, got, c.git)
		}
		if got := f.GraphQLURL(); got != c.graphql {
			t.Errorf("%q: GraphQL URL %s, want %s", c.api, got, c.graphql)
		}
	}
}

// The pull request calls, the GraphQL mutation and repository_dispatch, through the
// real go-github code against the fake.
func TestPullRequestCallsAndDispatch(t *testing.T) {
	t.Parallel()
	gh, c := newInstallation(t)
	ctx := context.Background()
	r := app.Repo{Owner: "octo", Name: "shop"}
	if _, err := c.FindPull(ctx, r, "whilly/issue-12"); !errors.Is(err, app.ErrNotFound) {
		t.Fatalf("find before any = %v, want ErrNotFound", err)
	}
	p, err := c.CreatePull(ctx, r, app.NewPull{Title: "Harden login", Body: "Closes #12", Head: "whilly/issue-12", Base: "main", Draft: true})
	if err != nil || p.Number != 13 || !p.Draft || p.NodeID == "" || p.URL != "https://github.com/octo/shop/pull/13" {
		t.Fatalf("create = %+v, %v", p, err)
	}
	_, err = c.CreatePull(ctx, r, app.NewPull{Title: "again", Head: "whilly/issue-12", Base: "main"})
	var se *app.StatusError
	if !errors.As(err, &se) || se.Status != http.StatusUnprocessableEntity || !strings.Contains(se.Message, "already exists") {
		t.Errorf("second create = %v, want a 422 saying it exists", err)
	}
	found, err := c.FindPull(ctx, r, "whilly/issue-12")
	if err != nil || found.Number != 13 || found.Head != "whilly/issue-12" {
		t.Errorf("find = %+v, %v", found, err)
	}
	if err := c.EditPullBody(ctx, r, 13, "Closes #12\n\n- [x] done"); err != nil {
		t.Fatal(err)
	}
	if err := c.MarkPullReady(ctx, p.NodeID); err != nil {
		t.Fatal(err)
	}
	if err := c.MarkPullReady(ctx, "PR_nope"); !errors.Is(err, app.ErrNotFound) {
		t.Errorf("ready of an unknown node = %v, want ErrNotFound", err)
	}
	got, err := c.GetPull(ctx, r, 13)
	if err != nil || got.Draft || got.Body != "Closes #12\n\n- [x] done" || got.State != "open" {
		t.Errorf("pull request after edit and ready = %+v, %v", got, err)
	}
	if err := c.ConvertPullToDraft(ctx, p.NodeID); err != nil {
		t.Fatal(err)
	}
	if got, err := c.GetPull(ctx, r, 13); err != nil || !got.Draft {
		t.Errorf("pull request after its conversion to a draft = %+v, %v", got, err)
	}
	if err := c.ConvertPullToDraft(ctx, "PR_nope"); !errors.Is(err, app.ErrNotFound) {
		t.Errorf("draft of an unknown node = %v, want ErrNotFound", err)
	}
	if err := c.Dispatch(ctx, r, app.DispatchEventType, map[string]any{"plan": "gh/octo/shop/12"}); err != nil {
		t.Fatal(err)
	}
	ds := gh.Dispatches(repo)
	if len(ds) != 1 || ds[0].EventType != "whilly-work" || ds[0].ClientPayload["plan"] != "gh/octo/shop/12" {
		t.Errorf("dispatches = %+v", ds)
	}
	info, err := c.RepoInfo(ctx, r)
	if err != nil || info.DefaultBranch != "main" {
		t.Errorf("repository = %+v, %v", info, err)
	}
}
