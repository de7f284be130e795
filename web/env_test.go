package web_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/whilly-go/whilly/control"
	"github.com/whilly-go/whilly/plan"
	"github.com/whilly-go/whilly/queue"
	"github.com/whilly-go/whilly/testkit"
	"github.com/whilly-go/whilly/web"
)

// env is a control plane with the dashboard mounted at / as `whilly serve` mounts it, on
// a fresh database, with an admin and a read token.
type env struct {
	t     testing.TB
	store *queue.Store
	url   string
	admin string
	read  string
	dash  *web.Handler
}

func newEnv(t testing.TB) *env {
	t.Helper()
	pool := testkit.DB(t)
	log := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	store := queue.NewStore(pool, log, queue.Config{})
	ln := queue.NewListener(pool, log)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := ln.Run(ctx); err != nil {
			t.Errorf("listener: %v", err)
		}
	}()
	srv := control.New(store, ln, log, control.Config{SSEHeartbeat: time.Second})
	dash, err := web.New(store, log, web.Config{Events: srv.StreamEvents, AttemptLog: srv.AttemptLog})
	if err != nil {
		t.Fatal(err)
	}
	srv.Mount("/*", dash)
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(func() {
		srv.Drain()
		hs.Close()
		cancel()
		<-done
	})
	deadline := time.Now().Add(20 * time.Second)
	for !ln.Ready() {
		if time.Now().After(deadline) {
			t.Fatal("listener not ready")
		}
		time.Sleep(5 * time.Millisecond)
	}
	e := &env{t: t, store: store, url: hs.URL, dash: dash}
	e.admin = e.mint(queue.TokenSpec{Owner: "ops@example.com", Admin: true})
	e.read = e.mint(queue.TokenSpec{Owner: "viewer@example.com"})
	return e
}

func (e *env) mint(spec queue.TokenSpec) string {
	e.t.Helper()
	tok, _, err := e.store.Mint(context.Background(), spec)
	if err != nil {
		e.t.Fatal(err)
	}
	return tok
}

// importPlan imports a plan file given as JSON.
func (e *env) importPlan(js string) {
	e.t.Helper()
	p, err := plan.Parse([]byte(js))
	if err != nil {
		e.t.Fatal(err)
	}
	if _, err := e.store.Import(context.Background(), p, queue.ImportOptions{}); err != nil {
		e.t.Fatal(err)
	}
}

// browser is an HTTP client with cookies that does not follow redirects, so tests see them.
type browser struct {
	t    testing.TB
	base string
	c    *http.Client
}

func (e *env) browser() *browser {
	jar, err := cookiejar.New(nil)
	if err != nil {
		e.t.Fatal(err)
	}
	return &browser{t: e.t, base: e.url, c: &http.Client{Jar: jar, Timeout: 10 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

type answer struct {
	status   int
	location string
	body     string
	header   http.Header
}

func (b *browser) do(method, path string, form url.Values) answer {
	b.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequestWithContext(context.Background(), method, b.base+path, body)
	if err != nil {
		b.t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	res, err := b.c.Do(req)
	if err != nil {
		b.t.Fatal(err)
	}
	defer res.Body.Close()
	data, err := io.ReadAll(res.Body)
	if err != nil {
		b.t.Fatal(err)
	}
	return answer{status: res.StatusCode, location: res.Header.Get("Location"), body: string(data), header: res.Header}
}

func (b *browser) get(path string) answer { return b.do(http.MethodGet, path, nil) }

var csrfPattern = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// csrfOf returns the CSRF token of the first form of a page.
func csrfOf(t testing.TB, page string) string {
	t.Helper()
	m := csrfPattern.FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("no CSRF token in the page:\n%s", page)
	}
	return m[1]
}

// signIn signs in with token through the form, asking for next, and returns the answer
// to the form's post.
func (b *browser) signIn(token, next string) answer {
	b.t.Helper()
	page := b.get("/signin?next=" + url.QueryEscape(next))
	if page.status != http.StatusOK {
		b.t.Fatalf("GET /signin: %d", page.status)
	}
	return b.do(http.MethodPost, "/signin", url.Values{"csrf": {csrfOf(b.t, page.body)}, "next": {next}, "token": {token}})
}

// mustSignIn signs in and fails the test unless a session began.
func (b *browser) mustSignIn(token string) {
	b.t.Helper()
	a := b.signIn(token, "/")
	if a.status != http.StatusSeeOther || a.location != "/" {
		b.t.Fatalf("sign-in: %d to %q, want 303 to /:\n%s", a.status, a.location, a.body)
	}
}

// events returns the events of a plan of one type.
func (e *env) events(planID, typ string) []map[string]any {
	e.t.Helper()
	evs, err := e.store.RecentEvents(context.Background(), queue.RecentFilter{PlanID: planID, Type: typ, Limit: 500})
	if err != nil {
		e.t.Fatal(err)
	}
	var out []map[string]any
	for _, ev := range evs {
		var m map[string]any
		if err := json.Unmarshal(ev.Payload, &m); err != nil {
			e.t.Fatal(err)
		}
		out = append(out, m)
	}
	return out
}

const twoTaskPlan = `{"plan_id": "shop", "project": "Shop auth", "budget_usd": 1,
  "tasks": [
    {"id": "A-1", "priority": "high", "description": "Add rate limiting to the login handler", "acceptance_criteria": ["429"], "test_steps": ["go test"]},
    {"id": "A-2", "priority": "low", "description": "Document the login limits for operators", "dependencies": ["A-1"], "acceptance_criteria": ["doc"], "test_steps": ["read"]}
  ]}`
