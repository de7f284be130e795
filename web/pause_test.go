package web_test

import (
	"context"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/whilly-go/whilly/control/client"
	"github.com/whilly-go/whilly/plan"
	"github.com/whilly-go/whilly/queue"
)

// TestFleetPauseButtonsStopAndRestartClaims presses "Pause all claims": a worker then
// gets nothing; "Resume all claims" lets it claim again. Both events name the admin.
func TestFleetPauseButtonsStopAndRestartClaims(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.importPlan(twoTaskPlan)
	w := e.worker()
	b := e.browser()
	b.mustSignIn(e.admin)
	page := b.get("/")
	if !strings.Contains(page.body, `id="fleet-pause"`) {
		t.Fatalf("no fleet pause button for an admin:\n%s", page.body)
	}
	csrf := csrfOf(t, page.body)
	if a := b.do(http.MethodPost, "/pause", url.Values{"csrf": {csrf}}); a.status != http.StatusSeeOther {
		t.Fatalf("pause: %d\n%s", a.status, a.body)
	}
	if !strings.Contains(b.get("/").body, `id="fleet-paused"`) {
		t.Fatal("the plans page does not say claims are paused")
	}
	if c, err := w.Claim(context.Background(), client.ClaimRequest{PlanID: "shop", WaitSeconds: 0.5}); err != nil || c != nil {
		t.Fatalf("a claim while paused: %v, %v", c, err)
	}
	if a := b.do(http.MethodPost, "/resume", url.Values{"csrf": {csrf}}); a.status != http.StatusSeeOther {
		t.Fatalf("resume: %d", a.status)
	}
	claim(t, w, "shop")
	for _, typ := range []string{queue.EventSystemPaused, queue.EventSystemResumed} {
		evs, err := e.store.RecentEvents(context.Background(), queue.RecentFilter{Type: typ})
		if err != nil || len(evs) != 1 || !strings.Contains(string(evs[0].Payload), `"by": "token:ops@example.com"`) {
			t.Fatalf("%s events: %v (%v)", typ, evs, err)
		}
	}
	// A read session has no such button, and its post is refused.
	r := e.browser()
	r.mustSignIn(e.read)
	rp := r.get("/")
	if strings.Contains(rp.body, "fleet-pause") {
		t.Fatal("a read session sees the fleet pause button")
	}
	if a := r.do(http.MethodPost, "/pause", url.Values{"csrf": {csrfOf(t, rp.body)}}); a.status != http.StatusForbidden {
		t.Fatalf("pause by a read session: %d, want 403", a.status)
	}
}

func TestPlanPauseAndResumeButtons(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.importPlan(twoTaskPlan)
	b := e.browser()
	b.mustSignIn(e.admin)
	csrf := csrfOf(t, b.get("/plans/shop").body)
	if a := b.do(http.MethodPost, "/plans/shop/pause", url.Values{"csrf": {csrf}}); a.status != http.StatusSeeOther {
		t.Fatalf("pause: %d\n%s", a.status, a.body)
	}
	if p, _ := e.store.GetPlan(context.Background(), "shop"); p.Status != plan.PlanPaused || p.PauseReason != queue.PauseOperator {
		t.Fatalf("after pause: %s (%s)", p.Status, p.PauseReason)
	}
	if !strings.Contains(b.get("/plans/shop").body, `id="resume-button"`) {
		t.Fatal("no resume button on a paused plan")
	}
	if a := b.do(http.MethodPost, "/plans/shop/resume", url.Values{"csrf": {csrf}}); a.status != http.StatusSeeOther {
		t.Fatalf("resume: %d", a.status)
	}
	for _, typ := range []string{queue.EventPlanPaused, queue.EventPlanResumed} {
		if evs := e.events("shop", typ); len(evs) != 1 || evs[0]["by"] != "token:ops@example.com" {
			t.Fatalf("%s: %v", typ, evs)
		}
	}
}

// digestPattern finds the digest an approval form carries.
var digestPattern = regexp.MustCompile(`name="digest" value="([0-9a-f]+)"`)

// TestApproveRefusesAStaleDigest: the approve form carries the digest its page showed; a
// plan changed since is refused (409) and stays paused.
func TestApproveRefusesAStaleDigest(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.importPausedForApproval(t)
	b := e.browser()
	b.mustSignIn(e.admin)
	page := b.get("/plans/shop").body
	m := digestPattern.FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("no approve form with a digest:\n%s", page)
	}
	// Someone edits a task after the page was shown: its digest is stale.
	edit := `{"id": "A-2", "priority": "low", "description": "Document the login limits for operators, with examples", "dependencies": ["A-1"], "acceptance_criteria": ["doc"], "test_steps": ["read"]}`
	if _, err := e.store.EditTask(context.Background(), "shop", "A-2", []byte(edit), "test"); err != nil {
		t.Fatal(err)
	}
	a := b.do(http.MethodPost, "/plans/shop/approve", url.Values{"csrf": {csrfOf(t, page)}, "digest": {m[1]}})
	if a.status != http.StatusConflict || !strings.Contains(a.body, "changed since digest") {
		t.Fatalf("a stale approval: %d\n%s", a.status, a.body)
	}
	if pi, _ := e.store.GetPlan(context.Background(), "shop"); pi.Status != plan.PlanPaused {
		t.Fatalf("a stale approval changed the plan: %s", pi.Status)
	}
	if evs := e.events("shop", queue.EventPlanApproved); len(evs) != 0 {
		t.Fatalf("a stale approval wrote %v", evs)
	}
	fresh := digestPattern.FindStringSubmatch(b.get("/plans/shop").body)
	if fresh == nil || fresh[1] == m[1] {
		t.Fatalf("the page's digest did not change with the plan: %v", fresh)
	}
}

func (e *env) importPausedForApproval(t *testing.T) {
	t.Helper()
	p, err := plan.Parse([]byte(twoTaskPlan))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.store.Import(context.Background(), p, queue.ImportOptions{PauseReason: queue.PauseApproval}); err != nil {
		t.Fatal(err)
	}
}

// TestBrowserApproveButtonStartsThePlan approves a plan awaiting approval with the button.
func TestBrowserApproveButtonStartsThePlan(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.importPausedForApproval(t)
	ctx := tab(t, 30*time.Second)
	signInAt(t, ctx, e.url+"/plans/shop", e.admin)
	run(t, ctx, chromedp.WaitVisible(chromedp.CSS(`#approve-button`)))
	shown := text(t, ctx, `#digest`)
	run(t, ctx, chromedp.Click(chromedp.CSS(`#approve-button`)))
	poll(t, ctx, `document.querySelector("#summary .state") !== null && document.querySelector("#summary .state").textContent === "ACTIVE"`, 5*time.Second)
	if evs := e.events("shop", queue.EventPlanApproved); len(evs) != 1 || evs[0]["by"] != "token:ops@example.com" || evs[0]["digest"] != shown {
		t.Fatalf("plan.approved: %v (the page showed %s)", evs, shown)
	}
}
