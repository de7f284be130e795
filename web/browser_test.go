package web_test

// The dashboard in a real browser: headless Chromium (Debian's `chromium` package),
// driven over the DevTools protocol with chromedp. One browser serves the whole package
// run; each test gets its own browser context (cookies included) in it.
//
// Without a browser the tests skip, saying how to install one — except under CI=true or
// WHILLY_TEST_SANDBOX=require, where they fail: CI installs Chromium (.ci/run).

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// chromeNames are the browser binaries looked for on PATH, in order.
var chromeNames = []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "headless-shell"}

// sharedBrowser starts one headless Chromium for every test of the package run.
//
// Package-level on purpose, like testkit's shared database server: the tests of one
// binary share one browser, and sync.OnceValues makes it write-once. TestMain closes it
// once every test has run.
var sharedBrowser = sync.OnceValues(startBrowser)

// started is the browser sharedBrowser started, for TestMain to close (nil: none).
var started *chrome

type chrome struct {
	ctx context.Context // the browser's root context; tabs derive from it
	// close ends the browser and waits until its profile directory (a chromedp-runner
	// directory in the temp directory, a few MB) is removed.
	close func()
}

// TestMain closes the shared browser after the tests, which would otherwise leave its
// profile directory behind at every run.
func TestMain(m *testing.M) {
	code := m.Run()
	if started != nil {
		started.close()
	}
	os.Exit(code)
}

func findChrome() (string, bool) {
	if p := os.Getenv("WHILLY_TEST_CHROME"); p != "" {
		return p, true
	}
	for _, n := range chromeNames {
		if p, err := exec.LookPath(n); err == nil {
			return p, true
		}
	}
	return "", false
}

func startBrowser() (*chrome, error) {
	path, ok := findChrome()
	if !ok {
		return nil, errNoBrowser
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.NoSandbox, // as root (CI, containers) Chromium refuses its own sandbox
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.WindowSize(1280, 900),
		// SameSite as the cookie draft (RFC 6265bis) has it: a navigation whose redirects
		// passed through another site is cross-site, so Strict cookies stay home.
		// Chromium does so only with this feature; the GitHub sign-in must work either way.
		chromedp.Flag("enable-features", "CookieSameSiteConsidersRedirectChain"),
	)
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(alloc)
	c := &chrome{ctx: ctx, close: func() {
		_ = chromedp.Cancel(ctx) // closes the browser and waits for the allocator's clean-up
		cancel()
		cancelAlloc()
	}}
	// The first run starts the browser, which lives as long as the context of that run:
	// no timeout on it.
	if err := chromedp.Do(ctx); err != nil {
		c.close()
		return nil, fmt.Errorf("start %s: %w", path, err)
	}
	started = c
	return c, nil
}

var errNoBrowser = errors.New("no Chromium found on PATH (" + strings.Join(chromeNames, ", ") + ")")

// tab opens a new browser context (its own cookies) in the shared browser, closed when
// the test ends; every action on it is bounded by timeout.
func tab(t *testing.T, timeout time.Duration) context.Context {
	t.Helper()
	c, err := sharedBrowser()
	if errors.Is(err, errNoBrowser) {
		if os.Getenv("CI") == "true" || os.Getenv("WHILLY_TEST_SANDBOX") == "require" {
			t.Fatalf("%v: CI must run the browser tests (apt-get install chromium)", err)
		}
		t.Skipf("%v: install it (apt-get install chromium) to run the browser tests", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := chromedp.NewContext(c.ctx, chromedp.WithNewBrowserContext())
	t.Cleanup(cancel)
	ctx, cancelT := context.WithTimeout(ctx, timeout)
	t.Cleanup(cancelT)
	return ctx
}

// run runs browser actions and fails the test on an error.
func run(t *testing.T, ctx context.Context, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	if err := chromedp.Do(ctx, actions...); err != nil {
		t.Fatal(err)
	}
}

// eval evaluates a JavaScript expression in the page and returns its value.
func eval[T any](t *testing.T, ctx context.Context, expr string) T {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		t.Fatalf("evaluate %s: %v", expr, err)
	}
	return v
}

// poll waits until the expression is true in the page, failing the test after timeout.
func poll(t *testing.T, ctx context.Context, expr string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		left := time.Until(deadline)
		_, err := chromedp.Run(ctx, chromedp.Poll[bool](expr, chromedp.WithPollingTimeout(max(left, time.Millisecond)), chromedp.WithPollingInterval(10*time.Millisecond)))
		if err == nil {
			return
		}
		// A form post navigates: the page the poll ran in went away; poll the next one.
		if left > 0 && (strings.Contains(err.Error(), "navigated or closed") || strings.Contains(err.Error(), "context was destroyed") || strings.Contains(err.Error(), "Cannot find context")) {
			continue
		}
		t.Fatalf("waiting up to %s for %s: %v", timeout, expr, err)
	}
}

// location returns the tab's current URL.
func location(t *testing.T, ctx context.Context) string {
	t.Helper()
	u, err := chromedp.Run(ctx, chromedp.Location())
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// signInAt opens url (a page that needs a session), fills the sign-in form with token
// and submits it.
func signInAt(t *testing.T, ctx context.Context, url, token string) {
	t.Helper()
	run(t, ctx,
		chromedp.Navigate(url),
		chromedp.WaitVisible(chromedp.CSS(`#token`)),
		chromedp.SendKeys(chromedp.CSS(`#token`), token),
		chromedp.Submit(chromedp.CSS(`#token`)),
		chromedp.WaitVisible(chromedp.CSS(`header nav`)),
	)
}

// text returns the text of the first element matching sel.
func text(t *testing.T, ctx context.Context, sel string) string {
	t.Helper()
	s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel), chromedp.NodeVisible))
	if err != nil {
		t.Fatalf("text of %s: %v", sel, err)
	}
	return strings.TrimSpace(s)
}
