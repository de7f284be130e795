package web_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/whilly-go/whilly/app"
	"github.com/whilly-go/whilly/testkit"
	"github.com/whilly-go/whilly/web"
)

// oauthSignIn is app.OAuth in the dashboard's shape, as `whilly serve` plugs it in.
type oauthSignIn struct{ *app.OAuth }

func (s oauthSignIn) SignIn(ctx context.Context, code, redirectURI, verifier string) (web.GitHubUser, error) {
	ua, err := s.OAuth.SignIn(ctx, code, redirectURI, verifier)
	return web.GitHubUser{Login: ua.Login, ReadRepos: ua.ReadRepos(), WriteRepos: ua.WriteRepos()}, err
}

// TestBrowserSignInWithGitHubLandsOnTheDeepLink runs "Sign in with GitHub" in Chromium
// against the fake GitHub. The dashboard is opened as localhost and GitHub is 127.0.0.1:
// two sites, as whilly and github.com are, so the browser applies SameSite as it would
// for real: the flow's cookie must come back from GitHub's redirect (Lax), and the
// session cookie (Strict) must reach the deep link afterwards, also under the cookie
// draft's rule for redirect chains (the shared browser turns it on).
func TestBrowserSignInWithGitHubLandsOnTheDeepLink(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	gh := testkit.NewGitHub(t)
	gh.Install(1, "acme/shop", "acme/secret")
	gh.SetPermission("acme/shop", "alice", "read")
	gh.SignInAs("alice")
	id, secret := gh.OAuthClient()
	o, err := app.NewOAuth(app.OAuthConfig{ClientID: id, ClientSecret: secret, APIURL: gh.URL()})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"shop", "secret"} {
		e.importPlan(strings.NewReplacer(`"plan_id": "shop"`, `"plan_id": "`+name+`", "repo": "acme/`+name+`"`).Replace(twoTaskPlan))
	}
	base := strings.Replace(e.url, "127.0.0.1", "localhost", 1)
	if err := e.dash.EnableGitHubSignIn(oauthSignIn{o}, base, nil); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(gh.URL(), "http://127.0.0.1:") || base == e.url {
		t.Fatalf("the dashboard (%s) and GitHub (%s) must be on two sites", base, gh.URL())
	}

	ctx := tab(t, 30*time.Second)
	run(t, ctx, chromedp.Navigate(base+"/plans/shop"), chromedp.WaitVisible(chromedp.CSS(`a[href^="/auth/github"]`)))
	run(t, ctx, chromedp.Click(chromedp.CSS(`a[href^="/auth/github"]`)), chromedp.WaitVisible(chromedp.CSS(`#summary`)))
	if loc := location(t, ctx); loc != base+"/plans/shop" {
		t.Fatalf("after signing in with GitHub the browser is at %s, want %s/plans/shop", loc, base)
	}
	if h := text(t, ctx, `#summary h1`); !strings.HasPrefix(h, "shop") {
		t.Fatalf("the page's heading is %q, want plan shop", h)
	}
	if a := gh.OAuthAuthorizations(); len(a) != 1 || a[0].RedirectURI != base+"/auth/github/callback" {
		t.Errorf("GitHub's authorize requests: %+v", a)
	}
	// alice cannot read acme/secret: its plan is not in her list and its page is 404.
	run(t, ctx, chromedp.Navigate(base+"/"), chromedp.WaitVisible(chromedp.CSS(`#plans`)))
	if body := text(t, ctx, `main`); !strings.Contains(body, "shop") || strings.Contains(body, "secret") {
		t.Errorf("alice's plan list reads %q", body)
	}
	run(t, ctx, chromedp.Navigate(base+"/plans/secret"), chromedp.WaitVisible(chromedp.CSS(`main`)))
	if body := text(t, ctx, `main`); !strings.Contains(body, "404") {
		t.Errorf("/plans/secret shows %q, want 404", body)
	}
	// The session cookie is not readable from scripts (HttpOnly).
	if cookies := eval[string](t, ctx, `document.cookie`); strings.Contains(cookies, "whilly_") {
		t.Errorf("document.cookie shows %q", cookies)
	}
}
