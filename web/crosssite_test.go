package web_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// A signed-in user who follows a link to a plan from another site (a status comment on
// github.com) lands on the plan, not on the sign-in page: the browser withholds the
// Strict session cookie on that navigation, but not on the one the dashboard starts.
func TestBrowserLinkFromAnotherSiteFindsTheSession(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.importPlan(twoTaskPlan)
	base := strings.Replace(e.url, "127.0.0.1", "localhost", 1)
	if base == e.url {
		t.Fatalf("the dashboard (%s) must be reachable as localhost", e.url)
	}
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = fmt.Fprintf(w, `<!doctype html><a id="go" href="%s/plans/shop">the plan</a>`, base)
	}))
	t.Cleanup(other.Close)

	ctx := tab(t, 30*time.Second)
	signInAt(t, ctx, base+"/", e.read)
	run(t, ctx, chromedp.Navigate(other.URL), chromedp.WaitVisible(chromedp.CSS(`#go`)),
		chromedp.Click(chromedp.CSS(`#go`)), chromedp.WaitVisible(chromedp.CSS(`main`)))
	poll(t, ctx, `!!document.querySelector('#summary') || !!document.querySelector('#token')`, 10*time.Second)
	if loc := location(t, ctx); loc != base+"/plans/shop" {
		t.Fatalf("a signed-in user following a link from another site is at %s, want %s/plans/shop", loc, base)
	}
	if h := text(t, ctx, `#summary h1`); !strings.HasPrefix(h, "shop") {
		t.Fatalf("the page's heading is %q, want plan shop", h)
	}
	// Without a session the same link still ends on the sign-in page, keeping the link.
	fresh := tab(t, 30*time.Second)
	run(t, fresh, chromedp.Navigate(other.URL), chromedp.WaitVisible(chromedp.CSS(`#go`)),
		chromedp.Click(chromedp.CSS(`#go`)), chromedp.WaitVisible(chromedp.CSS(`#token`)))
	if loc := location(t, fresh); !strings.HasPrefix(loc, base+"/signin?next=%2Fplans%2Fshop") {
		t.Fatalf("without a session the link ends at %s, want the sign-in page keeping it", loc)
	}
}

// The page that reloads a cross-site link from the dashboard goes nowhere but to a path
// of this site: a link crafted to look like another host, or to smuggle a second URL
// into the refresh, stays on the dashboard.
func TestCrossSiteReloadStaysOnThisSite(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	refresh := regexp.MustCompile(`content="0; url=([^"]*)"`)
	for _, path := range []string{"/plans/shop", "//evil.example/plans", "/plans/x;url=https://evil.example", `/plans/"><script>alert(1)</script>`} {
		req, err := http.NewRequest(http.MethodGet, e.url+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Sec-Fetch-Site", "cross-site")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		_ = res.Body.Close()
		m := refresh.FindSubmatch(body)
		if res.StatusCode != http.StatusOK || m == nil || strings.Contains(string(body), "<script>") {
			t.Fatalf("cross-site %s: %d %s; want a page that reloads it", path, res.StatusCode, body)
		}
		if u := string(m[1]); !strings.HasPrefix(u, "/") || strings.HasPrefix(u, "//") || strings.HasPrefix(u, "/\\") {
			t.Errorf("cross-site %s reloads %q, not a path of this site", path, u)
		}
	}
}
