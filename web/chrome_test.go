package web_test

import (
	"context"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/whilly-go/whilly/app"
	"github.com/whilly-go/whilly/control/client"
	"github.com/whilly-go/whilly/plan"
)

// worker registers a worker and returns its API client.
func (e *env) worker() *client.Client {
	e.t.Helper()
	_, tok, err := e.store.RegisterWorker(context.Background(), "test-host", nil)
	if err != nil {
		e.t.Fatal(err)
	}
	c, err := client.New(e.url, tok, client.Options{})
	if err != nil {
		e.t.Fatal(err)
	}
	return c
}

// claim claims the next task of planID over the API.
func claim(t testing.TB, w *client.Client, planID string) *client.Claim {
	t.Helper()
	c, err := w.Claim(context.Background(), client.ClaimRequest{PlanID: planID})
	if err != nil || c == nil {
		t.Fatalf("claim in %s: %v, %v", planID, c, err)
	}
	return c
}

// complete completes a claimed task over the API, at cost.
func complete(t testing.TB, w *client.Client, c *client.Claim, cost plan.USD) {
	t.Helper()
	if _, err := w.Complete(context.Background(), c.Task.PlanID, c.Task.ID, client.CompleteRequest{LeaseID: c.Lease.ID, CostUSD: cost}); err != nil {
		t.Fatal(err)
	}
}

func TestBrowserSignInShowsThePlans(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.importPlan(twoTaskPlan)
	ctx := tab(t, 30*time.Second)

	// Without a session, a page goes to the sign-in form; signing in comes back to it.
	run(t, ctx, chromedp.Navigate(e.url+"/workers"), chromedp.WaitVisible(chromedp.CSS(`#token`)))
	if loc := location(t, ctx); !strings.HasSuffix(loc, "/signin?next=%2Fworkers") {
		t.Fatalf("without a session /workers went to %s", loc)
	}
	run(t, ctx,
		chromedp.SendKeys(chromedp.CSS(`#token`), e.read),
		chromedp.Submit(chromedp.CSS(`#token`)),
		chromedp.WaitVisible(chromedp.CSS(`header nav`)),
	)
	if loc := location(t, ctx); loc != e.url+"/workers" {
		t.Fatalf("after sign-in: %s, want %s/workers", loc, e.url)
	}
	run(t, ctx, chromedp.Navigate(e.url+"/"), chromedp.WaitVisible(chromedp.CSS(`#plans`)))
	if row := text(t, ctx, `#plan-shop`); !strings.Contains(row, "shop") || !strings.Contains(row, "ACTIVE") || !strings.Contains(row, "0/2") {
		t.Fatalf("the plan's row reads %q", row)
	}
	// The session cookie is not readable from scripts (HttpOnly).
	cookies := eval[string](t, ctx, `document.cookie`)
	if strings.Contains(cookies, "whilly_session") {
		t.Fatalf("document.cookie shows the session: %q", cookies)
	}
}

func TestBrowserRowChangesLiveWhenATaskCompletes(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.importPlan(twoTaskPlan)
	w := e.worker()
	c := claim(t, w, "shop")
	ctx := tab(t, 30*time.Second)
	signInAt(t, ctx, e.url+"/plans/shop", e.read)
	run(t, ctx, chromedp.WaitVisible(chromedp.CSS(`#task-A-1`)))
	// Wait until the stream is open, then mark the page: a reload would lose the mark.
	poll(t, ctx, `document.getElementById("live").classList.contains("on")`, 5*time.Second)
	eval[bool](t, ctx, `window.notReloaded = true`)
	if st := text(t, ctx, `#task-A-1 .state`); st != "CLAIMED" {
		t.Fatalf("A-1 shows %q before completing", st)
	}
	start := time.Now()
	complete(t, w, c, 25_000) // $0.025
	poll(t, ctx, `document.querySelector("#task-A-1 .state").textContent === "DONE"`, 2*time.Second)
	took := time.Since(start)
	if !eval[bool](t, ctx, `window.notReloaded === true`) {
		t.Fatal("the page reloaded")
	}
	if s := text(t, ctx, `#spend`); s != "$0.025" {
		t.Errorf("the summary's spend reads %q, want $0.025", s)
	}
	if p := text(t, ctx, `#progress`); p != "1/2" {
		t.Errorf("the summary's progress reads %q, want 1/2", p)
	}
	t.Logf("COMPLETE over the API to DONE on the open page: %s", took.Round(time.Millisecond))
}

// statusLink is the dashboard link of a rendered status comment.
var statusLink = regexp.MustCompile(`\[Dashboard\]\(([^)]+)\)`)

func TestBrowserDeepLinkFromAStatusCommentLandsOnThePlan(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const id = "gh/octo/shop/12" // the form of an issue plan's id: slashes and all
	e.importPlan(strings.Replace(twoTaskPlan, `"plan_id": "shop"`, `"plan_id": "`+id+`"`, 1))
	pi, err := e.store.GetPlan(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	tasks, err := e.store.Tasks(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	comment := app.RenderStatus(app.StatusView{Plan: pi, Tasks: tasks, PublicURL: e.url})
	m := statusLink.FindStringSubmatch(comment)
	if m == nil {
		t.Fatalf("no dashboard link in the status comment:\n%s", comment)
	}
	ctx := tab(t, 30*time.Second)
	signInAt(t, ctx, m[1], e.read)
	run(t, ctx, chromedp.WaitVisible(chromedp.CSS(`#summary`)))
	if loc := location(t, ctx); loc != m[1] {
		t.Fatalf("after sign-in the browser is at %s, want the link %s", loc, m[1])
	}
	if h := text(t, ctx, `#summary h1`); !strings.HasPrefix(h, id) {
		t.Fatalf("the page's heading is %q, want plan %s", h, id)
	}
	// The links of older comments (/?plan=ID) land there too.
	run(t, ctx, chromedp.Navigate(e.url+"/?plan="+url.QueryEscape(id)), chromedp.WaitVisible(chromedp.CSS(`#summary`)))
	if loc := location(t, ctx); loc != m[1] {
		t.Fatalf("/?plan= went to %s", loc)
	}
}

func TestBrowserButtonsWorkAndAFormWithoutCSRFIsRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.importPlan(twoTaskPlan)
	ctx := tab(t, 30*time.Second)
	signInAt(t, ctx, e.url+"/plans/shop", e.admin)

	// Set the budget with the form.
	run(t, ctx,
		chromedp.WaitVisible(chromedp.CSS(`input[name=budget_usd]`)),
		chromedp.SendKeys(chromedp.CSS(`input[name=budget_usd]`), "12.5"),
		chromedp.Click(chromedp.CSS(`#budget-button`)),
	)
	poll(t, ctx, `document.getElementById("summary") !== null && document.getElementById("summary").textContent.includes("$12.5")`, 5*time.Second)
	if evs := e.events("shop", "plan.budget_raised"); len(evs) != 1 || evs[0]["by"] != "token:ops@example.com" {
		t.Fatalf("plan.budget_raised after the button: %v", evs)
	}

	// Cancel (the confirm dialog is accepted), then retry a cancelled task.
	eval[bool](t, ctx, `(window.confirm = () => true, true)`) // the user answers the cancel button's question: yes
	run(t, ctx, chromedp.Click(chromedp.CSS(`#cancel-button`)))
	poll(t, ctx, `document.querySelector("#summary .state") !== null && document.querySelector("#summary .state").textContent === "CANCELLED"`, 5*time.Second)
	if evs := e.events("shop", "plan.cancelled"); len(evs) != 1 || evs[0]["by"] != "token:ops@example.com" {
		t.Fatalf("plan.cancelled after the button: %v", evs)
	}
	run(t, ctx, chromedp.Click(chromedp.CSS(`#task-A-1 button.retry`)))
	poll(t, ctx, `document.querySelector("#task-A-1 .state") !== null && document.querySelector("#task-A-1 .state").textContent === "PENDING"`, 5*time.Second)
	if evs := e.events("shop", "RESET"); len(evs) != 1 || evs[0]["by"] != "token:ops@example.com" {
		t.Fatalf("RESET after the retry button: %v", evs)
	}

	// The same form with its CSRF token taken out is refused, and changes nothing.
	run(t, ctx, chromedp.WaitVisible(chromedp.CSS(`#budget-button`)))
	eval[bool](t, ctx, `document.querySelector("form[action$='/budget'] input[name=csrf]").remove() === undefined`)
	run(t, ctx,
		chromedp.SendKeys(chromedp.CSS(`input[name=budget_usd]`), "99"),
		chromedp.Click(chromedp.CSS(`#budget-button`)),
		chromedp.WaitVisible(chromedp.CSS(`.failure`)),
	)
	if h := text(t, ctx, `.failure h1`); h != "403" {
		t.Fatalf("a form without its CSRF token got %q, want 403", h)
	}
	if evs := e.events("shop", "plan.budget_raised"); len(evs) != 1 {
		t.Fatalf("the refused form wrote an event: %v", evs)
	}
}

// TestBrowserPagesFitAPhone opens each page at a phone's width (390 CSS pixels): nothing
// may be wider than the screen, so no page scrolls sideways.
func TestBrowserPagesFitAPhone(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.importPlan(twoTaskPlan)
	w := e.worker()
	complete(t, w, claim(t, w, "shop"), 10_000)
	ctx := tab(t, 30*time.Second)
	run(t, ctx, chromedp.EmulateViewport(390, 844, chromedp.EmulateScale(3)))
	signInAt(t, ctx, e.url+"/", e.admin)
	for _, path := range []string{"/", "/plans/shop", "/workers", "/events"} {
		run(t, ctx, chromedp.Navigate(e.url+path), chromedp.WaitVisible(chromedp.CSS(`main`)))
		if wide := eval[float64](t, ctx, `document.documentElement.scrollWidth - window.innerWidth`); wide > 0 {
			t.Errorf("%s is %.0f px wider than a phone's screen", path, wide)
		}
	}
}
