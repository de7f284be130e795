package control_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/whilly-go/whilly/control"
	"github.com/whilly-go/whilly/control/client"
	"github.com/whilly-go/whilly/plan"
	"github.com/whilly-go/whilly/queue"
)

// The WorkspaceProvider gives claims of repository plans their workspace; it is not
// asked for other plans; when it fails the claim is released and answered 503.
func TestClaimCarriesTheWorkspaceOfRepositoryPlans(t *testing.T) {
	t.Parallel()
	var (
		mu     sync.Mutex
		asked  []string
		broken bool
	)
	provider := func(_ context.Context, p queue.PlanInfo, _ queue.Lease) (*client.Workspace, error) {
		mu.Lock()
		defer mu.Unlock()
		asked = append(asked, p.ID+"@"+p.Repo)
		if broken {
			return nil, errors.New("github is down")
		}
		return &client.Workspace{CloneURL: "https://github.com/" + p.Repo + ".git", BaseBranch: "main",
			Branch: "whilly/issue-3", Token: "ghs_secret", MaxFiles: 10}, nil
	}
	e := newEnv(t, envOptions{control: control.Config{Workspaces: provider}})
	ctx := context.Background()
	w, _ := e.worker()
	e.importPlan(planDoc("local", "T1"))
	e.importPlan(strings.Replace(planDoc("repo", "T1", "T2"), `"project"`, `"repo": "acme/shop", "project"`, 1))

	c, err := w.Claim(ctx, client.ClaimRequest{PlanID: "local"})
	if err != nil || c == nil || c.Workspace != nil {
		t.Fatalf("claim of a plan without a repository = %+v, %v; want no workspace", c, err)
	}
	c, err = w.Claim(ctx, client.ClaimRequest{PlanID: "repo"})
	if err != nil || c == nil || c.Workspace == nil {
		t.Fatalf("claim of a repository plan = %+v, %v; want a workspace", c, err)
	}
	if ws := *c.Workspace; ws.CloneURL != "https://github.com/acme/shop.git" || ws.Branch != "whilly/issue-3" || ws.Token != "ghs_secret" || ws.MaxFiles != 10 {
		t.Fatalf("workspace = %+v", ws)
	}
	mu.Lock()
	if len(asked) != 1 || asked[0] != "repo@acme/shop" {
		t.Fatalf("provider asked for %v, want the repository plan only", asked)
	}
	broken = true
	mu.Unlock()

	_, err = w.Claim(ctx, client.ClaimRequest{PlanID: "repo"})
	if client.StatusOf(err) != http.StatusServiceUnavailable {
		t.Fatalf("claim with a failing provider = %v, want 503", err)
	}
	task, err := e.store.GetTask(ctx, "repo", "T2")
	if err != nil || task.Status != plan.StatusPending || task.Attempts != 0 {
		t.Fatalf("task after the failed workspace = %s, %d attempts, %v; want PENDING, none counted", task.Status, task.Attempts, err)
	}
	evs, err := e.store.Events(ctx, queue.EventFilter{PlanID: "repo"})
	if err != nil {
		t.Fatal(err)
	}
	last := evs[len(evs)-1]
	if last.Type != queue.EventRelease || !strings.Contains(string(last.Payload), "workspace_unavailable") {
		t.Fatalf("last event %s %s, want RELEASE workspace_unavailable", last.Type, last.Payload)
	}
}

// COMPLETE records the pushed head (or that nothing changed) in its event; a head that
// is no commit id is refused.
func TestCompleteRecordsTheHeadSHA(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	ctx := context.Background()
	w, _ := e.worker()
	e.importPlan(planDoc("pushed", "T1", "T2"))
	sha := strings.Repeat("ab12", 10)

	c, err := w.Claim(ctx, client.ClaimRequest{PlanID: "pushed"})
	if err != nil || c == nil {
		t.Fatal(c, err)
	}
	before := e.stateDigest()
	for _, bad := range []string{"main", strings.Repeat("z", 40), sha[:39]} {
		_, err := w.Complete(ctx, "pushed", c.Task.ID, client.CompleteRequest{LeaseID: c.Lease.ID, HeadSHA: bad})
		if client.StatusOf(err) != http.StatusBadRequest {
			t.Fatalf("complete with head_sha %q = %v, want 400", bad, err)
		}
	}
	if e.stateDigest() != before {
		t.Fatal("a refused COMPLETE changed the state")
	}
	if _, err := w.Complete(ctx, "pushed", c.Task.ID, client.CompleteRequest{LeaseID: c.Lease.ID, HeadSHA: strings.ToUpper(sha)}); err != nil {
		t.Fatal(err)
	}
	c, err = w.Claim(ctx, client.ClaimRequest{PlanID: "pushed"})
	if err != nil || c == nil {
		t.Fatal(c, err)
	}
	if _, err := w.Complete(ctx, "pushed", c.Task.ID, client.CompleteRequest{LeaseID: c.Lease.ID, NoChanges: true}); err != nil {
		t.Fatal(err)
	}
	evs, err := e.store.Events(ctx, queue.EventFilter{PlanID: "pushed"})
	if err != nil {
		t.Fatal(err)
	}
	var payloads []map[string]any
	for _, ev := range evs {
		if ev.Type == queue.EventComplete {
			var p map[string]any
			if err := json.Unmarshal(ev.Payload, &p); err != nil {
				t.Fatal(err)
			}
			payloads = append(payloads, p)
		}
	}
	if len(payloads) != 2 || payloads[0]["head_sha"] != sha || payloads[0]["no_changes"] != nil ||
		payloads[1]["no_changes"] != true || payloads[1]["head_sha"] != nil {
		t.Fatalf("COMPLETE payloads = %v", payloads)
	}
}
