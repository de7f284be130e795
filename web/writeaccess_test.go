package web_test

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/whilly-go/whilly/queue"
	"github.com/whilly-go/whilly/web"
)

// githubAlice is a browser with the session of alice, signed in with GitHub when she had
// write access to acme/shop.
func (e *env) githubAlice() (*browser, string) {
	e.t.Helper()
	id, _, err := e.store.CreateSession(context.Background(), queue.Principal{Kind: queue.PrincipalGitHub, Name: "alice",
		ReadRepos: []string{"acme/shop"}, WriteRepos: []string{"acme/shop"}}, time.Hour)
	if err != nil {
		e.t.Fatal(err)
	}
	b := e.browser()
	u, _ := url.Parse(e.url)
	b.c.Jar.SetCookies(u, []*http.Cookie{{Name: "whilly_session", Value: id, Path: "/"}})
	page := b.get("/plans/shop")
	if page.status != http.StatusOK {
		e.t.Fatalf("alice's plan page: %d", page.status)
	}
	return b, csrfOf(e.t, page.body)
}

// Every button's post of a GitHub user asks GitHub whether they may still write; the
// answer is used for a minute at most, so write access taken away on GitHub stops the
// buttons within a minute. GitHub not answering refuses the post (503).
func TestAGitHubUsersButtonsFollowGitHubWithinAMinute(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.importPlan(strings.Replace(twoTaskPlan, `"plan_id": "shop"`, `"plan_id": "shop", "repo": "acme/shop"`, 1))
	var mu sync.Mutex
	allowed, calls, down := true, 0, false
	access := func(_ context.Context, p queue.PlanInfo, login string) (bool, error) {
		mu.Lock()
		defer mu.Unlock()
		calls++
		if p.Repo != "acme/shop" || login != "alice" {
			t.Errorf("GitHub was asked about %s on %s", login, p.Repo)
		}
		if down {
			return false, errors.New("GitHub is down")
		}
		return allowed, nil
	}
	set := func(a, d bool) { mu.Lock(); allowed, down = a, d; mu.Unlock() }
	asked := func() int { mu.Lock(); defer mu.Unlock(); return calls }
	if err := e.dash.EnableGitHubSignIn(nil, e.url, access); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	var clock sync.Mutex
	web.SetClock(e.dash, func() time.Time { clock.Lock(); defer clock.Unlock(); return now })
	advance := func(d time.Duration) { clock.Lock(); now = now.Add(d); clock.Unlock() }

	b, csrf := e.githubAlice()
	press := func(what string) answer {
		return b.do(http.MethodPost, "/plans/shop/"+what, url.Values{"csrf": {csrf}})
	}
	if a := press("pause"); a.status != http.StatusSeeOther || asked() != 1 {
		t.Fatalf("pause with write access: %d, GitHub asked %d times\n%s", a.status, asked(), a.body)
	}
	set(false, false) // GitHub takes alice's write access away
	advance(30 * time.Second)
	if a := press("resume"); a.status != http.StatusSeeOther || asked() != 1 {
		t.Fatalf("resume within the minute of GitHub's answer: %d, GitHub asked %d times", a.status, asked())
	}
	advance(31 * time.Second)
	if a := press("pause"); a.status != http.StatusForbidden || asked() != 2 || !strings.Contains(a.body, "no longer have write access") {
		t.Fatalf("pause a minute after GitHub took write access away: %d, GitHub asked %d times\n%s", a.status, asked(), a.body)
	}
	if evs := e.events("shop", "plan.paused"); len(evs) != 1 {
		t.Errorf("plan.paused events: %d, want the first pause only", len(evs))
	}
	set(true, true)
	advance(time.Minute)
	if a := press("cancel"); a.status != http.StatusServiceUnavailable {
		t.Fatalf("cancel while GitHub does not answer: %d, want 503", a.status)
	}
	if p, _ := e.store.GetPlan(context.Background(), "shop"); p.Status == "CANCELLED" {
		t.Fatal("the plan was cancelled though GitHub did not confirm write access")
	}
}

// Without a way to ask GitHub, a GitHub user presses no button at all.
func TestAGitHubUserPressesNothingWhenGitHubCannotBeAsked(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.importPlan(strings.Replace(twoTaskPlan, `"plan_id": "shop"`, `"plan_id": "shop", "repo": "acme/shop"`, 1))
	if err := e.dash.EnableGitHubSignIn(nil, e.url, nil); err != nil {
		t.Fatal(err)
	}
	b, csrf := e.githubAlice()
	if a := b.do(http.MethodPost, "/plans/shop/cancel", url.Values{"csrf": {csrf}}); a.status != http.StatusForbidden {
		t.Fatalf("cancel: %d, want 403", a.status)
	}
}

// "Sign in with GitHub" is refused without an https public URL, but for loopback hosts.
func TestGitHubSignInNeedsAnHTTPSPublicURL(t *testing.T) {
	t.Parallel()
	for u, ok := range map[string]bool{
		"https://whilly.example.com": true, "https://whilly.example.com/base/": true,
		"http://localhost:8080": true, "http://127.0.0.1:9": true, "http://[::1]:8080": true, "http://LOCALHOST": true,
		"": false, "http://whilly.example.com": false, "http://10.0.0.5:8080": false, "whilly.example.com": false,
		"ftp://whilly.example.com": false, "http://localhost.evil.example": false, "https://user:pw@whilly.example.com": false,
	} {
		err := web.CheckPublicURL(u)
		if (err == nil) != ok || (err != nil && !errors.Is(err, web.ErrPublicURL)) {
			t.Errorf("CheckPublicURL(%q) = %v, want ok %t", u, err, ok)
		}
	}
	e := newEnv(t)
	if err := e.dash.EnableGitHubSignIn(nil, "http://whilly.example.com", nil); !errors.Is(err, web.ErrPublicURL) {
		t.Fatalf("EnableGitHubSignIn over plain http: %v", err)
	}
	if a := e.browser().get("/auth/github"); a.status == http.StatusSeeOther && strings.Contains(a.location, "authorize") {
		t.Fatalf("/auth/github still sends to GitHub: %d %s", a.status, a.location)
	}
}
