package control_test

import (
	"context"
	"strings"
	"testing"

	"github.com/whilly-go/whilly/control/client"
	"github.com/whilly-go/whilly/queue"
)

// TestPlanAnswersItsPullRequest: GET /v1/plans/{plan} answers the pull request the plan's
// commits are delivered in, once the GitHub App recorded it, to the worker that works on
// the plan (what the Action's pull-request-url output comes from); none before.
func TestPlanAnswersItsPullRequest(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	ctx := context.Background()
	e.importGitHubPlan("gh/acme/shop/3", "acme/shop", 1, "T1")
	minted, _, err := e.store.Mint(ctx, queue.TokenSpec{Owner: "ci", Registrar: true, Scopes: queue.Scopes{"repo:acme/shop"}})
	if err != nil {
		t.Fatal(err)
	}
	reg, err := e.registerWith(minted)
	if err != nil {
		t.Fatal(err)
	}
	w := e.client(reg.Token)
	if status, body := e.do("GET", "/v1/plans/gh%2Facme%2Fshop%2F3", reg.Token, nil); status != 200 || strings.Contains(body, "pull_request") {
		t.Fatalf("GET the plan before its pull request: %d %s; want 200 without pull_request", status, body)
	}
	if err := e.store.RecordPull(ctx, queue.PullRequest{PlanID: "gh/acme/shop/3", Repo: "acme/shop", Number: 12, NodeID: "PR_12",
		URL: "https://github.com/acme/shop/pull/12", Branch: "whilly/gh-acme-shop-3", Draft: true}, false); err != nil {
		t.Fatal(err)
	}
	p, err := w.GetPlan(ctx, "gh/acme/shop/3")
	if err != nil {
		t.Fatal(err)
	}
	want := client.PullRequest{Number: 12, URL: "https://github.com/acme/shop/pull/12", State: queue.PullOpen, Draft: true}
	if p.PullRequest == nil || *p.PullRequest != want {
		t.Fatalf("the plan's pull_request = %+v, want %+v", p.PullRequest, want)
	}
	// Merged: the answer follows.
	if _, err := e.store.PullChanged(ctx, "acme/shop", 12, queue.PullMerged, nil); err != nil {
		t.Fatal(err)
	}
	if p, err = w.GetPlan(ctx, "gh/acme/shop/3"); err != nil || p.PullRequest == nil || p.PullRequest.State != queue.PullMerged {
		t.Fatalf("after the merge: %+v, %v; want state merged", p.PullRequest, err)
	}
}
