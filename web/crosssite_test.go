package web_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
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
