package web_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// hostile is markup an issue's author (or an agent's output) may put in a task's text.
const hostile = `<img src=x onerror="window.pwned=1"><script>window.pwned=2</script>"'><b>bold</b>`

// TestHostileTextIsShownAsText puts markup into a plan's name, a task's description, its
// last error and its TRIZ finding: every page and every live fragment shows it as text
// (no element from it reaches the DOM, whatever the content security policy would block).
func TestHostileTextIsShownAsText(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	js := strings.Replace(twoTaskPlan, `"project": "Shop auth"`, `"project": "Shop `+jsonEscape(hostile)+`"`, 1)
	js = strings.Replace(js, `"Add rate limiting to the login handler"`, `"Add rate limiting `+jsonEscape(hostile)+`"`, 1)
	e.importPlan(js)
	b := e.browser()
	b.mustSignIn(e.admin)
	for _, path := range []string{"/", "/plans/shop", "/events", "/plans/shop/live?task=A-1", "/live/plans?plan=shop"} {
		if body := b.get(path).body; strings.Contains(body, "<img") || strings.Contains(body, "<script>window") || strings.Contains(body, "<b>bold") {
			t.Errorf("%s carries the markup unescaped", path)
		}
	}

	ctx := tab(t, 30*time.Second)
	signInAt(t, ctx, e.url+"/plans/shop", e.admin)
	poll(t, ctx, `document.getElementById("live").classList.contains("on")`, 5*time.Second)
	// Live: the finding arrives by an event, its row by a fragment.
	if err := e.store.SetTrizFinding(context.Background(), "shop", "A-1", hostile, "triz.contradiction", nil); err != nil {
		t.Fatal(err)
	}
	poll(t, ctx, `document.querySelector("#task-A-1").textContent.includes("window.pwned=2")`, 3*time.Second)
	for _, path := range []string{"", "/events"} {
		if path != "" {
			run(t, ctx, chromedp.Navigate(e.url+path), chromedp.WaitVisible(chromedp.CSS(`main`)))
		}
		if n := eval[int](t, ctx, `document.querySelectorAll("main img, main script, main b").length`); n != 0 {
			t.Errorf("page %q: %d elements made from the hostile text", path, n)
		}
		if p := eval[bool](t, ctx, `window.pwned !== undefined`); p {
			t.Errorf("page %q ran the hostile text", path)
		}
	}
}

func jsonEscape(s string) string {
	return strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(s)
}
