package web_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// TestButtonsCallTheQueueAndNameWhoPressedThem presses budget, cancel and retry as an
// admin session and checks the plan, the tasks and the events with their "by".
func TestButtonsCallTheQueueAndNameWhoPressedThem(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.importPlan(twoTaskPlan)
	ctx := context.Background()

	// A read session sees no buttons and may not press them.
	reader := e.browser()
	reader.mustSignIn(e.read)
	rp := reader.get("/plans/shop")
	if a := reader.do(http.MethodPost, "/plans/shop/cancel", url.Values{"csrf": {csrfOf(t, rp.body)}}); a.status != http.StatusForbidden {
		t.Fatalf("cancel by a read session: %d, want 403", a.status)
	}

	b := e.browser()
	b.mustSignIn(e.admin)
	page := b.get("/plans/shop")
	for _, want := range []string{"budget-button", "cancel-button"} {
		if !strings.Contains(page.body, want) {
			t.Fatalf("the admin's plan page has no %s", want)
		}
	}
	csrf := csrfOf(t, page.body)

	for _, bad := range []string{"-1", "0", "ten", "100000000", ""} {
		if a := b.do(http.MethodPost, "/plans/shop/budget", url.Values{"csrf": {csrf}, "budget_usd": {bad}}); a.status != http.StatusBadRequest {
			t.Errorf("budget %q: %d, want 400", bad, a.status)
		}
	}
	if a := b.do(http.MethodPost, "/plans/shop/budget", url.Values{"csrf": {csrf}, "budget_usd": {"7.5"}}); a.status != http.StatusSeeOther || a.location != "/plans/shop" {
		t.Fatalf("budget: %d to %q:\n%s", a.status, a.location, a.body)
	}
	p, err := e.store.GetPlan(ctx, "shop")
	if err != nil || p.Budget == nil || p.Budget.String() != "7.5" {
		t.Fatalf("budget after the button: %v (%v)", p.Budget, err)
	}
	if evs := e.events("shop", "plan.budget_raised"); len(evs) != 1 || evs[0]["by"] != "token:ops@example.com" || evs[0]["to"] != "7.5" {
		t.Fatalf("plan.budget_raised events: %v", evs)
	}

	// Retrying a task that has not failed is refused, in a sentence.
	if a := b.do(http.MethodPost, "/plans/shop/tasks/A-1/retry", url.Values{"csrf": {csrf}}); a.status != http.StatusConflict || !strings.Contains(a.body, "only FAILED or CANCELLED tasks can be retried") {
		t.Fatalf("retry of a pending task: %d\n%s", a.status, a.body)
	}

	if a := b.do(http.MethodPost, "/plans/shop/cancel", url.Values{"csrf": {csrf}}); a.status != http.StatusSeeOther {
		t.Fatalf("cancel: %d\n%s", a.status, a.body)
	}
	if p, _ := e.store.GetPlan(ctx, "shop"); p.Status != "CANCELLED" {
		t.Fatalf("plan after cancel: %s", p.Status)
	}
	if evs := e.events("shop", "plan.cancelled"); len(evs) != 1 || evs[0]["by"] != "token:ops@example.com" {
		t.Fatalf("plan.cancelled events: %v", evs)
	}
	if evs := e.events("shop", "CANCEL"); len(evs) != 2 || evs[0]["by"] != "token:ops@example.com" {
		t.Fatalf("CANCEL events: %v", evs)
	}

	// The cancelled task now has a retry button, which brings it and the plan back.
	page = b.get("/plans/shop")
	if !strings.Contains(page.body, `action="/plans/shop/tasks/A-1/retry"`) {
		t.Fatalf("no retry button on a cancelled task:\n%s", page.body)
	}
	if a := b.do(http.MethodPost, "/plans/shop/tasks/A-1/retry", url.Values{"csrf": {csrf}}); a.status != http.StatusSeeOther {
		t.Fatalf("retry: %d\n%s", a.status, a.body)
	}
	task, err := e.store.GetTask(ctx, "shop", "A-1")
	if err != nil || task.Status != "PENDING" {
		t.Fatalf("A-1 after retry: %s (%v)", task.Status, err)
	}
	if p, _ := e.store.GetPlan(ctx, "shop"); p.Status != "ACTIVE" {
		t.Fatalf("plan after retry: %s", p.Status)
	}
	if evs := e.events("shop", "RESET"); len(evs) != 1 || evs[0]["by"] != "token:ops@example.com" {
		t.Fatalf("RESET events: %v", evs)
	}
	if a := b.do(http.MethodPost, "/plans/nope/cancel", url.Values{"csrf": {csrf}}); a.status != http.StatusNotFound {
		t.Fatalf("cancel of an unknown plan: %d", a.status)
	}
}
