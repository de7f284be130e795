package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/whilly-go/whilly/plan"
	"github.com/whilly-go/whilly/queue"
	"github.com/whilly-go/whilly/testkit"
)

// operatorSite is `whilly serve` with the dashboard, "Sign in with GitHub" against the
// fake GitHub, and River's UI; three repository plans: shop, secret and site (in that
// order), and alice with write on acme/shop, read on acme/site and nothing on
// acme/secret.
type operatorSite struct {
	url   string
	gh    *testkit.GitHub
	store *queue.Store
}

func newOperatorSite(t *testing.T) operatorSite {
	t.Helper()
	gh := testkit.NewGitHub(t)
	gh.Install(1, "acme/shop", "acme/secret", "acme/site")
	gh.SetPermission("acme/shop", "alice", "write")
	gh.SetPermission("acme/site", "alice", "read")
	gh.SetPermission("acme/secret", "alice", "none")
	id, secret := gh.OAuthClient()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	a, _ := githubTestApp(map[string]string{
		"WHILLY_GITHUB_CLIENT_ID": id, "WHILLY_GITHUB_CLIENT_SECRET": secret,
		"WHILLY_GITHUB_APP_ID": strconv.FormatInt(gh.AppID, 10), "WHILLY_GITHUB_PRIVATE_KEY": string(gh.KeyPEM),
		"WHILLY_GITHUB_WEBHOOK_SECRET": "s", "WHILLY_PUBLIC_URL": "http://" + ln.Addr().String(),
		"WHILLY_GITHUB_API_URL": gh.URL(), "WHILLY_DATA_DIR": t.TempDir(),
	})
	st := queue.NewStore(testkit.DB(t), nil, queue.Config{})
	ctx := context.Background()
	cp, err := a.startControlPlane(ctx, st.Pool(), ln)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cp.Shutdown(ctx) })
	for _, name := range []string{"shop", "secret", "site"} {
		p := &plan.Plan{ID: name, Name: "Plan of acme/" + name, Repo: "acme/" + name, Tasks: []plan.Task{
			{ID: "T1", Priority: plan.PriorityMedium, Description: "Fix the spelling of commit in README.md"}}}
		if _, err := cp.Store().Import(ctx, p, queue.ImportOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	return operatorSite{url: "http://" + ln.Addr().String(), gh: gh, store: cp.Store()}
}

// browser is an HTTP client with a cookie jar that follows redirects, as a browser does.
func browser(t *testing.T) *http.Client {
	t.Helper()
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	return &http.Client{Jar: jar, Timeout: 30 * time.Second}
}

type page struct {
	status int
	url    string
	body   string
}

func get(t *testing.T, c *http.Client, u string) page {
	t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	return do(t, c, req)
}

func post(t *testing.T, c *http.Client, u string, form url.Values) page {
	t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, u, strings.NewReader(form.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	return do(t, c, req)
}

func do(t *testing.T, c *http.Client, req *http.Request) page {
	t.Helper()
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return page{status: resp.StatusCode, url: resp.Request.URL.String(), body: string(b)}
}

// signInWithGitHub opens /auth/github?next=… and follows GitHub's redirects back to the
// page that moves on to next, which it opens as the browser would.
func (s operatorSite) signInWithGitHub(t *testing.T, c *http.Client, next string) page {
	t.Helper()
	p := get(t, c, s.url+"/auth/github?next="+url.QueryEscape(next))
	if p.status != http.StatusOK {
		return p
	}
	m := regexp.MustCompile(`<meta http-equiv="refresh" content="0; url=([^"]+)">`).FindStringSubmatch(p.body)
	if m == nil {
		t.Fatalf("after GitHub's redirect, %s answered a page that does not move on:\n%s", p.url, p.body)
	}
	return get(t, c, s.url+strings.ReplaceAll(m[1], "&amp;", "&"))
}

var csrfInput = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

func TestSignInWithGitHubShowsTheUsersPlansAndTheirButtons(t *testing.T) {
	t.Parallel()
	s := newOperatorSite(t)
	s.gh.SignInAs("alice")
	c := browser(t)

	// The sign-in page offers GitHub; the deep link survives the trip through GitHub.
	if p := get(t, c, s.url+"/plans/site"); !strings.Contains(p.url, "/signin?next=%2Fplans%2Fsite") || !strings.Contains(strings.ToLower(p.body), "/auth/github?next=%2fplans%2fsite") {
		t.Fatalf("without a session /plans/site went to %s, offering:\n%s", p.url, p.body)
	}
	p := s.signInWithGitHub(t, c, "/plans/site")
	if p.status != http.StatusOK || p.url != s.url+"/plans/site" || !strings.Contains(p.body, "Plan of acme/site") {
		t.Fatalf("after sign-in: %d at %s:\n%s", p.status, p.url, p.body)
	}
	auth := s.gh.OAuthAuthorizations()
	if len(auth) != 1 || auth[0].Challenge == "" || auth[0].RedirectURI != s.url+"/auth/github/callback" {
		t.Errorf("GitHub saw the authorize requests %+v; want one with a PKCE challenge and the callback", auth)
	}
	// whilly keeps no token of the user: it was revoked once read.
	if issued, live := s.gh.UserTokens(); issued != 1 || live != 0 {
		t.Errorf("user tokens: %d issued, %d live; want 1 and 0", issued, live)
	}

	// The plans of repositories alice cannot read are nowhere: list, page, stream.
	list := get(t, c, s.url+"/")
	if !strings.Contains(list.body, "Plan of acme/shop") || !strings.Contains(list.body, "Plan of acme/site") || strings.Contains(list.body, "acme/secret") {
		t.Errorf("plan list of alice:\n%s", list.body)
	}
	for _, path := range []string{"/plans/secret", "/plans/secret/live", "/plans/secret/tasks/T1/attempts/1", "/plans/secret/tasks/T1/attempts/1/log"} {
		if p := get(t, c, s.url+path); p.status != http.StatusNotFound || strings.Contains(p.body, "acme/secret") {
			t.Errorf("%s: %d\n%s", path, p.status, p.body)
		}
	}
	if p := get(t, c, s.url+"/events"); p.status != http.StatusOK || !strings.Contains(p.body, "site") || strings.Contains(p.body, "secret") {
		t.Errorf("/events of alice: %d\n%s", p.status, p.body)
	}
	if seen := streamPlans(t, c, s.url+"/events/stream?after=0", "site"); seen["secret"] || !seen["shop"] {
		t.Errorf("the event stream showed the plans %v; want shop and site, never secret", seen)
	}

	// Write on acme/shop: the buttons, and they work, in alice's name.
	shop := get(t, c, s.url+"/plans/shop")
	m := csrfInput.FindStringSubmatch(shop.body)
	if !strings.Contains(shop.body, `action="/plans/shop/cancel"`) || m == nil {
		t.Fatalf("alice (write) sees no cancel button on shop:\n%s", shop.body)
	}
	csrf := m[1]
	// Read on acme/site: no buttons, and a forged post is refused.
	site := get(t, c, s.url+"/plans/site")
	if strings.Contains(site.body, `action="/plans/site/cancel"`) {
		t.Errorf("alice (read) sees a cancel button on site")
	}
	if p := post(t, c, s.url+"/plans/site/cancel", url.Values{"csrf": {csrf}}); p.status != http.StatusForbidden {
		t.Errorf("alice's forged cancel of site: %d, want 403", p.status)
	}
	if p := post(t, c, s.url+"/plans/secret/cancel", url.Values{"csrf": {csrf}}); p.status != http.StatusNotFound {
		t.Errorf("alice's forged cancel of secret: %d, want 404", p.status)
	}
	if p := post(t, c, s.url+"/plans/shop/cancel", url.Values{"csrf": {csrf}}); p.status != http.StatusOK || p.url != s.url+"/plans/shop" {
		t.Errorf("alice's cancel of shop: %d at %s", p.status, p.url)
	}
	ctx := context.Background()
	for id, want := range map[string]plan.PlanStatus{"shop": plan.PlanCancelled, "site": plan.PlanActive, "secret": plan.PlanActive} {
		if pi, err := s.store.GetPlan(ctx, id); err != nil || pi.Status != want {
			t.Errorf("plan %s is %v (%v), want %v", id, pi.Status, err, want)
		}
	}
	evs, err := s.store.Events(ctx, queue.EventFilter{PlanID: "shop"})
	if err != nil {
		t.Fatal(err)
	}
	if raw, _ := json.Marshal(evs); !strings.Contains(string(raw), "@alice") {
		t.Errorf("no event of shop names @alice: %s", raw)
	}
}

// A user whose write access GitHub takes away after the sign-in can no longer press the
// buttons: each post asks GitHub again (through the App), and the session's list of
// write repositories, from the sign-in, is not enough.
func TestAButtonAsksGitHubWhetherTheUserStillMayWrite(t *testing.T) {
	t.Parallel()
	s := newOperatorSite(t)
	s.gh.SignInAs("alice")
	c := browser(t)
	if p := s.signInWithGitHub(t, c, "/plans/shop"); p.status != http.StatusOK || p.url != s.url+"/plans/shop" {
		t.Fatalf("after sign-in: %d at %s:\n%s", p.status, p.url, p.body)
	}
	shop := get(t, c, s.url+"/plans/shop")
	m := csrfInput.FindStringSubmatch(shop.body)
	if !strings.Contains(shop.body, `action="/plans/shop/cancel"`) || m == nil {
		t.Fatalf("alice (write at sign-in) sees no cancel button on shop:\n%s", shop.body)
	}
	s.gh.SetPermission("acme/shop", "alice", "read")
	p := post(t, c, s.url+"/plans/shop/cancel", url.Values{"csrf": {m[1]}})
	if p.status != http.StatusForbidden || !strings.Contains(p.body, "write access") {
		t.Errorf("cancel by alice after GitHub took her write access: %d at %s, want 403:\n%s", p.status, p.url, p.body)
	}
	if pi, err := s.store.GetPlan(context.Background(), "shop"); err != nil || pi.Status != plan.PlanActive {
		t.Errorf("shop after the refused cancel: %v (%v), want ACTIVE", pi.Status, err)
	}
}

// streamPlans reads the event stream until an event of plan `until` arrives (or 10 s
// pass) and returns the plans its events named.
func streamPlans(t *testing.T, c *http.Client, u, until string) map[string]bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("event stream: %s", resp.Status)
	}
	seen := map[string]bool{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data:")
		if !ok {
			continue
		}
		var ev struct {
			PlanID string `json:"plan_id"`
		}
		if err := json.Unmarshal([]byte(strings.TrimSpace(data)), &ev); err != nil {
			t.Fatalf("event stream frame %q: %v", data, err)
		}
		seen[ev.PlanID] = true
		if ev.PlanID == until {
			return seen
		}
	}
	t.Fatalf("the event stream ended without an event of plan %s (saw %v): %v", until, seen, sc.Err())
	return nil
}

func TestSignInWithGitHubRefusesWhatDidNotStartHere(t *testing.T) {
	t.Parallel()
	s := newOperatorSite(t)
	s.gh.SignInAs("alice")
	signedOut := func(c *http.Client, what string) {
		t.Helper()
		if p := get(t, &http.Client{Jar: c.Jar}, s.url+"/"); !strings.Contains(p.url, "/signin") {
			t.Errorf("%s: / answered %d at %s, not the sign-in page: a session was made", what, p.status, p.url)
		}
	}
	// A callback this browser did not start (login CSRF: someone else's code and state).
	c := browser(t)
	if p := get(t, c, s.url+"/auth/github/callback?code=abc&state=forged"); p.status != http.StatusBadRequest || !strings.Contains(p.body, "sign in with GitHub again") {
		t.Errorf("forged state: %d\n%s", p.status, p.body)
	}
	signedOut(c, "forged state")

	// A state that does not match this browser's.
	noFollow := browser(t)
	noFollow.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	start := get(t, noFollow, s.url+"/auth/github")
	if start.status != http.StatusSeeOther {
		t.Fatalf("/auth/github: %d", start.status)
	}
	req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, s.url+"/auth/github", nil)
	resp, err := noFollow.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	authorize := resp.Header.Get("Location")
	back, err := noFollow.Get(authorize) // GitHub approves and sends the browser back
	if err != nil {
		t.Fatal(err)
	}
	back.Body.Close()
	callback := back.Header.Get("Location")
	tampered := strings.Replace(callback, "state=", "state=x", 1)
	if p := get(t, noFollow, tampered); p.status != http.StatusBadRequest {
		t.Errorf("tampered state: %d", p.status)
	}
	// The refusal ended this sign-in: the genuine callback is refused now too (replay).
	if p := get(t, noFollow, callback); p.status != http.StatusBadRequest {
		t.Errorf("callback after the sign-in was refused: %d", p.status)
	}
	signedOut(noFollow, "tampered state")

	// A replayed callback after a good sign-in.
	c = browser(t)
	var cb string
	c.CheckRedirect = func(req *http.Request, _ []*http.Request) error {
		if req.URL.Path == "/auth/github/callback" {
			cb = req.URL.String()
		}
		return nil
	}
	if p := s.signInWithGitHub(t, c, "/"); p.status != http.StatusOK || cb == "" {
		t.Fatalf("sign-in: %d, callback %q", p.status, cb)
	}
	other := browser(t)
	if p := get(t, other, cb); p.status != http.StatusBadRequest {
		t.Errorf("the callback replayed in another browser: %d", p.status)
	}
	signedOut(other, "replayed callback")

	// The user cancels on GitHub.
	s.gh.SignInAs("")
	c = browser(t)
	if p := s.signInWithGitHub(t, c, "/"); p.status != http.StatusForbidden || !strings.Contains(p.body, "GitHub did not sign you in") {
		t.Errorf("cancelled on GitHub: %d\n%s", p.status, p.body)
	}
	signedOut(c, "cancelled")

	// GitHub fails the exchange, then the user's repositories.
	s.gh.SignInAs("alice")
	for _, f := range []testkit.Fault{
		{Method: "POST", Path: "/login/oauth/access_token", Status: http.StatusBadGateway, Times: 1},
		{Method: "GET", Path: "/user/installations", Status: http.StatusInternalServerError, Times: 1},
	} {
		s.gh.Fail(f)
		c = browser(t)
		if p := s.signInWithGitHub(t, c, "/"); p.status != http.StatusBadRequest || !strings.Contains(p.body, "GitHub did not confirm who you are") {
			t.Errorf("GitHub failing %s: %d\n%s", f.Path, p.status, p.body)
		}
		signedOut(c, "GitHub failing "+f.Path)
	}
	// A next page on another site is not followed: the sign-in ends on the plans.
	for _, next := range []string{"//evil.example/x", "https://evil.example/", "/\\evil.example"} {
		c = browser(t)
		if p := s.signInWithGitHub(t, c, next); p.status != http.StatusOK || p.url != s.url+"/" {
			t.Errorf("sign-in with next=%q ended at %s (%d), want %s/", next, p.url, p.status, s.url)
		}
	}
	// Every token issued along the way was revoked.
	if issued, live := s.gh.UserTokens(); issued != 5 || live != 0 {
		t.Errorf("user tokens: %d issued, %d live; want 5 and 0", issued, live)
	}
}

// signInWithToken signs c in with an API token through the sign-in form.
func (s operatorSite) signInWithToken(t *testing.T, c *http.Client, token string) {
	t.Helper()
	form := get(t, c, s.url+"/signin")
	m := csrfInput.FindStringSubmatch(form.body)
	if m == nil {
		t.Fatalf("the sign-in page has no CSRF field:\n%s", form.body)
	}
	if p := post(t, c, s.url+"/signin", url.Values{"csrf": {m[1]}, "token": {token}, "next": {"/"}}); p.status != http.StatusOK || strings.Contains(p.url, "/signin") {
		t.Fatalf("token sign-in: %d at %s", p.status, p.url)
	}
}

func TestRiverUIIsForAdminSessionsOnly(t *testing.T) {
	t.Parallel()
	s := newOperatorSite(t)
	ctx := context.Background()
	admin, _, err := s.store.Mint(ctx, queue.TokenSpec{Owner: "ops@example.com", Admin: true})
	if err != nil {
		t.Fatal(err)
	}
	reader, _, err := s.store.Mint(ctx, queue.TokenSpec{Owner: "viewer@example.com"})
	if err != nil {
		t.Fatal(err)
	}

	a := browser(t)
	s.signInWithToken(t, a, admin)
	for _, path := range []string{"/riverui/", "/riverui"} {
		if p := get(t, a, s.url+path); p.status != http.StatusOK || p.url != s.url+"/riverui/" || !strings.Contains(p.body, "River") {
			t.Errorf("admin: %s answered %d at %s\n%.300s", path, p.status, p.url, p.body)
		}
	}
	p := get(t, a, s.url+"/riverui/api/jobs?state=available")
	var jobs struct {
		Data []json.RawMessage `json:"data"`
	}
	if p.status != http.StatusOK || json.Unmarshal([]byte(p.body), &jobs) != nil {
		t.Errorf("admin: River UI's job API %d\n%.300s", p.status, p.body)
	}
	if p := get(t, a, s.url+"/riverui/api/states"); p.status != http.StatusOK || !strings.Contains(p.body, `"available"`) {
		t.Errorf("admin: River UI's states API %d\n%.300s", p.status, p.body)
	}
	// Its buttons call its API: from its own pages, not from another site.
	pause := func(site string) page {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, http.MethodPut, s.url+"/riverui/api/queues/default/pause", strings.NewReader(`{}`))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Sec-Fetch-Site", site)
		if site == "cross-site" {
			req.Header.Set("Origin", "https://evil.example")
		} else {
			req.Header.Set("Origin", s.url)
		}
		return do(t, a, req)
	}
	paused := func() bool {
		t.Helper()
		var q struct {
			PausedAt *time.Time `json:"paused_at"`
		}
		p := get(t, a, s.url+"/riverui/api/queues/default")
		if p.status != http.StatusOK || json.Unmarshal([]byte(p.body), &q) != nil {
			t.Fatalf("admin: River UI's queue API %d\n%.300s", p.status, p.body)
		}
		return q.PausedAt != nil
	}
	if p := pause("cross-site"); p.status != http.StatusForbidden || paused() {
		t.Errorf("admin session, cross-site pause through River UI: %d (paused: %v), want 403 and nothing paused", p.status, paused())
	}
	if p := pause("same-origin"); p.status != http.StatusOK || !paused() {
		t.Errorf("admin session, River UI's own pause: %d (paused: %v)\n%.300s", p.status, paused(), p.body)
	}

	// A read session, a GitHub session: as if there were nothing.
	r := browser(t)
	s.signInWithToken(t, r, reader)
	g := browser(t)
	s.gh.SignInAs("alice")
	s.signInWithGitHub(t, g, "/")
	for who, c := range map[string]*http.Client{"read token": r, "GitHub user": g} {
		for _, path := range []string{"/riverui", "/riverui/", "/riverui/api/jobs?state=available", "/riverui/api/states"} {
			if p := get(t, c, s.url+path); p.status != http.StatusNotFound || strings.Contains(p.body, `"data"`) {
				t.Errorf("%s: %s answered %d, want 404\n%.200s", who, path, p.status, p.body)
			}
		}
	}
	// No session: sign in first.
	if p := get(t, browser(t), s.url+"/riverui/api/jobs?state=available"); !strings.Contains(p.url, "/signin") || strings.Contains(p.body, `"data"`) {
		t.Errorf("no session: River UI's API answered %d at %s", p.status, p.url)
	}
}

// TestGitHubSignInTakesTheClientOfAppCreate: half an OAuth client in the variables stops
// the command (exit 2); where the client comes from is server's TestSignInTakesTheClientOfAppCreate.
func TestGitHubSignInTakesTheClientOfAppCreate(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	a, _ := githubTestApp(map[string]string{"WHILLY_DATA_DIR": dir, "WHILLY_GITHUB_CLIENT_ID": "Iv23other"})
	_, err := a.serverConfig()
	var ee *exitError
	if !errors.As(err, &ee) || ee.code != ExitEnv || !strings.Contains(err.Error(), "WHILLY_GITHUB_CLIENT_SECRET") {
		t.Errorf("a client id without its secret: %v, want exit 2 naming WHILLY_GITHUB_CLIENT_SECRET", err)
	}
}

// "Sign in with GitHub" with the client in the variables and a public URL over plain
// http to another host stops `whilly serve` before it opens a port, with a sentence
// naming WHILLY_PUBLIC_URL.
func TestGitHubSignInRefusesAPlainHTTPPublicURL(t *testing.T) {
	t.Parallel()
	gh := testkit.NewGitHub(t)
	id, secret := gh.OAuthClient()
	for _, public := range []string{"http://whilly.example.com", ""} {
		a, _ := githubTestApp(map[string]string{
			"WHILLY_GITHUB_CLIENT_ID": id, "WHILLY_GITHUB_CLIENT_SECRET": secret, "WHILLY_PUBLIC_URL": public,
			"WHILLY_GITHUB_API_URL": gh.URL(), "WHILLY_DATA_DIR": t.TempDir(),
		})
		st := queue.NewStore(testkit.DB(t), nil, queue.Config{})
		cp, err := a.newControlPlane(context.Background(), st.Pool())
		if err == nil {
			_ = cp.Shutdown(context.Background())
			t.Fatalf("public URL %q: the control plane was built", public)
		}
		if !strings.Contains(err.Error(), "WHILLY_PUBLIC_URL") || !strings.Contains(err.Error(), "https") {
			t.Errorf("public URL %q: %v", public, err)
		}
	}
}
