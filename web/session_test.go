package web_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/whilly-go/whilly/queue"
)

func TestSignInWithATokenStartsASession(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.importPlan(twoTaskPlan)
	b := e.browser()
	a := b.signIn(e.read, "/")
	if a.status != http.StatusSeeOther || a.location != "/" {
		t.Fatalf("sign-in answered %d to %q", a.status, a.location)
	}
	var cookie string
	for _, c := range a.header.Values("Set-Cookie") {
		if strings.HasPrefix(c, "whilly_session=") {
			cookie = c
		}
	}
	for _, attr := range []string{"HttpOnly", "SameSite=Strict", "Path=/"} {
		if !strings.Contains(cookie, attr) {
			t.Errorf("session cookie %q lacks %s", cookie, attr)
		}
	}
	if strings.Contains(cookie, e.read) {
		t.Error("the session cookie holds the token")
	}
	page := b.get("/")
	if page.status != http.StatusOK || !strings.Contains(page.body, `href="/plans/shop"`) || !strings.Contains(page.body, "viewer@example.com") {
		t.Fatalf("plans page: %d\n%s", page.status, page.body)
	}
	// A read session gets no buttons.
	if plan := b.get("/plans/shop"); strings.Contains(plan.body, "cancel-button") {
		t.Error("a read session sees the cancel button")
	}
}

func TestSignInRefusesBadTokens(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	boot := e.mint(queue.TokenSpec{Owner: "ci", Registrar: true})
	for name, tc := range map[string]struct {
		token  string
		status int
	}{
		"unknown":   {"whilly_r_nope", http.StatusUnauthorized},
		"empty":     {"", http.StatusBadRequest},
		"bootstrap": {boot, http.StatusForbidden},
	} {
		a := e.browser().signIn(tc.token, "/")
		if a.status != tc.status || strings.Contains(strings.Join(a.header.Values("Set-Cookie"), ";"), "whilly_session=") {
			t.Errorf("%s token: %d (want %d), cookies %q", name, a.status, tc.status, a.header.Values("Set-Cookie"))
		}
	}
	// The sign-in form itself carries a CSRF token: a post without it is refused.
	b := e.browser()
	if a := b.do(http.MethodPost, "/signin", url.Values{"token": {e.admin}}); a.status != http.StatusForbidden {
		t.Errorf("sign-in without the form's token: %d, want 403", a.status)
	}
}

func TestWithoutASessionEveryPageGoesToSignInAndTheAPIIs401(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.importPlan(twoTaskPlan)
	b := e.browser()
	for _, path := range []string{"/", "/plans/shop", "/plans/shop/live?task=A-1", "/live/plans?plan=shop", "/workers",
		"/events?plan=shop", "/events/stream", "/plans/shop/tasks/A-1/attempts/1", "/nope", "/?plan=shop"} {
		a := b.get(path)
		want := "/signin?next=" + url.QueryEscape(path)
		if path == "/" {
			want = "/signin"
		}
		if a.status != http.StatusSeeOther || a.location != want {
			t.Errorf("GET %s: %d to %q, want 303 to %q", path, a.status, a.location, want)
		}
	}
	for _, path := range []string{"/plans/shop/cancel", "/plans/shop/budget", "/plans/shop/tasks/A-1/retry", "/signout"} {
		if a := b.do(http.MethodPost, path, url.Values{}); a.status != http.StatusSeeOther || a.location != "/signin" {
			t.Errorf("POST %s: %d to %q, want 303 to /signin", path, a.status, a.location)
		}
	}
	// A signed-in browser's cookie does not open the API either.
	b.mustSignIn(e.admin)
	for _, path := range []string{"/v1/plans", "/v1/plans/shop", "/v1/plans/shop/tasks", "/v1/workers", "/v1/events", "/v1/events/stream"} {
		if a := b.get(path); a.status != http.StatusUnauthorized {
			t.Errorf("GET %s with a session cookie and no token: %d, want 401", path, a.status)
		}
	}
	if a := b.do(http.MethodPatch, "/v1/plans/shop", url.Values{}); a.status != http.StatusUnauthorized {
		t.Errorf("PATCH /v1/plans/shop with a session cookie: %d, want 401", a.status)
	}
	if a := b.get("/healthz"); a.status != http.StatusOK {
		t.Errorf("/healthz: %d", a.status)
	}
}

func TestADeepLinkSurvivesSignInAndOpenRedirectsDoNot(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.importPlan(twoTaskPlan)
	b := e.browser()
	first := b.get("/plans/shop")
	if first.location != "/signin?next=%2Fplans%2Fshop" {
		t.Fatalf("deep link went to %q", first.location)
	}
	next, err := url.Parse(first.location)
	if err != nil {
		t.Fatal(err)
	}
	if a := b.signIn(e.read, next.Query().Get("next")); a.location != "/plans/shop" {
		t.Fatalf("after sign-in: %q, want /plans/shop", a.location)
	}
	for _, evil := range []string{"//evil.example", "https://evil.example/", "/\\evil.example", "javascript:alert(1)",
		"/%0d%0aSet-Cookie:x=1", "\\\\evil.example", "/\t/evil.example", "http:/evil.example"} {
		a := e.browser().signIn(e.read, evil)
		// Only a path of this site may come back: here the encoded newline one, harmless.
		sameSite := evil == "/%0d%0aSet-Cookie:x=1"
		if ok := a.location == "/" || (sameSite && a.location == evil); a.status != http.StatusSeeOther || !ok {
			t.Errorf("next=%q: %d to %q, want 303 to /", evil, a.status, a.location)
		}
		if u, err := url.Parse(a.location); err != nil || u.Host != "" || strings.HasPrefix(a.location, "//") {
			t.Errorf("next=%q redirected off the site: %q", evil, a.location)
		}
	}
}

func TestSignOutAndTokenRevocationEndSessions(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	b := e.browser()
	b.mustSignIn(e.admin)
	page := b.get("/")
	if page.status != http.StatusOK {
		t.Fatalf("signed in: %d", page.status)
	}
	// Sign-out without the CSRF token is refused and ends nothing.
	if a := b.do(http.MethodPost, "/signout", url.Values{}); a.status != http.StatusForbidden {
		t.Fatalf("sign-out without CSRF: %d, want 403", a.status)
	}
	if a := b.get("/"); a.status != http.StatusOK {
		t.Fatalf("after a refused sign-out: %d", a.status)
	}
	stolen := *b // a copy of the cookie, as someone who stole it would hold
	if a := b.do(http.MethodPost, "/signout", url.Values{"csrf": {csrfOf(t, page.body)}}); a.status != http.StatusSeeOther {
		t.Fatalf("sign-out: %d", a.status)
	}
	if a := stolen.get("/"); a.status != http.StatusSeeOther {
		t.Fatalf("a signed-out session still works: %d", a.status)
	}

	// Revoking the token ends the sessions it opened.
	tok, info, err := e.store.Mint(context.Background(), queue.TokenSpec{Owner: "temp@example.com"})
	if err != nil {
		t.Fatal(err)
	}
	b2 := e.browser()
	b2.mustSignIn(tok)
	if a := b2.get("/"); a.status != http.StatusOK {
		t.Fatalf("signed in with the temporary token: %d", a.status)
	}
	if err := e.store.RevokeToken(context.Background(), info.Prefix); err != nil {
		t.Fatal(err)
	}
	if a := b2.get("/"); a.status != http.StatusSeeOther {
		t.Fatalf("the session of a revoked token still works: %d", a.status)
	}
}

func TestAFormPostWithoutCSRFIsRefusedAndChangesNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.importPlan(twoTaskPlan)
	b := e.browser()
	b.mustSignIn(e.admin)
	for _, form := range []url.Values{{}, {"csrf": {"forged"}}, {"csrf": {""}}} {
		form.Set("budget_usd", "50")
		if a := b.do(http.MethodPost, "/plans/shop/budget", form); a.status != http.StatusForbidden {
			t.Errorf("budget post with csrf %q: %d, want 403", form.Get("csrf"), a.status)
		}
		if a := b.do(http.MethodPost, "/plans/shop/cancel", form); a.status != http.StatusForbidden {
			t.Errorf("cancel post with csrf %q: %d, want 403", form.Get("csrf"), a.status)
		}
	}
	// Another session's CSRF token is no good either.
	other := e.browser()
	other.mustSignIn(e.admin)
	foreign := csrfOf(t, other.get("/plans/shop").body)
	if a := b.do(http.MethodPost, "/plans/shop/cancel", url.Values{"csrf": {foreign}}); a.status != http.StatusForbidden {
		t.Errorf("cancel with another session's CSRF token: %d, want 403", a.status)
	}
	p, err := e.store.GetPlan(context.Background(), "shop")
	if err != nil {
		t.Fatal(err)
	}
	if p.Status != "ACTIVE" || p.Budget == nil || p.Budget.String() != "1" {
		t.Fatalf("refused posts changed the plan: %s, budget %v", p.Status, p.Budget)
	}
	if evs := e.events("shop", queue.EventPlanBudgetRaised); len(evs) != 0 {
		t.Fatalf("refused posts wrote events: %v", evs)
	}
}

func TestScopedTokensSeeOnlyTheirPlans(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.importPlan(twoTaskPlan)
	e.importPlan(strings.Replace(twoTaskPlan, `"plan_id": "shop"`, `"plan_id": "secret"`, 1))
	scoped := e.mint(queue.TokenSpec{Owner: "scoped@example.com", Scopes: queue.Scopes{"plan:shop"}})
	b := e.browser()
	b.mustSignIn(scoped)
	list := b.get("/")
	if !strings.Contains(list.body, `href="/plans/shop"`) || strings.Contains(list.body, "secret") {
		t.Fatalf("scoped list:\n%s", list.body)
	}
	if a := b.get("/plans/secret"); a.status != http.StatusNotFound {
		t.Errorf("a plan outside the scopes: %d, want 404", a.status)
	}
	if a := b.get("/live/plans?plan=secret&plan=shop"); strings.Contains(a.body, "secret") || !strings.Contains(a.body, "shop") {
		t.Errorf("live rows leak a plan outside the scopes: %s", a.body)
	}
	if a := b.get("/events?plan=secret"); strings.Contains(a.body, "task.created") {
		t.Errorf("events of a plan outside the scopes are shown")
	}
	if a := b.get("/events"); !strings.Contains(a.body, "shop") || strings.Contains(a.body, `href="/plans/secret"`) {
		t.Errorf("event log of a scoped session:\n%s", a.body)
	}
}
