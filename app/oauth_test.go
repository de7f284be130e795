package app

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"testing"

	"github.com/whilly-go/whilly/testkit"
)

// oauthFixture is the fake GitHub with the App installed on two accounts, and alice's
// and bob's permissions on their repositories.
func oauthFixture(t *testing.T) (*testkit.GitHub, *OAuth) {
	t.Helper()
	gh := testkit.NewGitHub(t)
	gh.Install(1, "acme/shop", "acme/site", "acme/secret")
	gh.Install(2, "bobco/tools")
	gh.SetPermission("acme/shop", "alice", "write")
	gh.SetPermission("acme/site", "alice", "read")
	gh.SetPermission("acme/secret", "alice", "none")
	gh.SetPermission("acme/secret", "bob", "admin")
	gh.SetPermission("bobco/tools", "alice", "maintain")
	id, secret := gh.OAuthClient()
	o, err := NewOAuth(OAuthConfig{ClientID: id, ClientSecret: secret, APIURL: gh.URL()})
	if err != nil {
		t.Fatal(err)
	}
	return gh, o
}

// authorize follows the authorize URL as a browser would and returns the query GitHub
// sent the browser back with.
func authorize(t *testing.T, authURL string) url.Values {
	t.Helper()
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, authURL, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusFound {
		t.Fatalf("authorize answered %s, want a redirect", resp.Status)
	}
	loc, err := url.Parse(resp.Header.Get("Location"))
	if err != nil {
		t.Fatal(err)
	}
	if got := loc.Scheme + "://" + loc.Host + loc.Path; got != "https://whilly.test/auth/github/callback" {
		t.Fatalf("GitHub sent the browser to %s, not the redirect URI", got)
	}
	return loc.Query()
}

const testRedirect = "https://whilly.test/auth/github/callback"

func TestOAuthSignInReadsTheUsersRepositoriesWithTheirPermissions(t *testing.T) {
	t.Parallel()
	gh, o := oauthFixture(t)
	gh.SignInAs("alice")
	ctx := context.Background()
	verifier := NewVerifier()
	q := authorize(t, o.AuthorizeURL(testRedirect, "st-1", verifier))
	if q.Get("state") != "st-1" || q.Get("code") == "" {
		t.Fatalf("callback query %v: want state st-1 and a code", q)
	}
	tok, err := o.Exchange(ctx, q.Get("code"), testRedirect, verifier)
	if err != nil {
		t.Fatal(err)
	}
	ua, err := o.UserAccess(ctx, tok)
	if err != nil {
		t.Fatal(err)
	}
	got := fmt.Sprint(ua.Login, ua.Repos)
	want := "alice[{acme/shop 1 write} {acme/site 1 read} {bobco/tools 2 maintain}]"
	if got != want {
		t.Errorf("user access = %s\nwant %s", got, want)
	}
	// The code works once.
	if _, err := o.Exchange(ctx, q.Get("code"), testRedirect, verifier); !isOAuthError(err, "bad_verification_code") {
		t.Errorf("replayed code: %v, want bad_verification_code", err)
	}
	// Revoked, the token reads nothing more.
	if err := o.Revoke(ctx, tok); err != nil {
		t.Fatal(err)
	}
	if issued, live := gh.UserTokens(); issued != 1 || live != 0 {
		t.Errorf("user tokens: %d issued, %d live; want 1, 0", issued, live)
	}
	if _, err := o.UserAccess(ctx, tok); err == nil {
		t.Error("a revoked token still reads the user")
	}
	if err := o.Revoke(ctx, tok); !errors.Is(err, ErrNotFound) {
		t.Errorf("revoking twice: %v, want not found", err)
	}
}

func isOAuthError(err error, code string) bool {
	var oe *OAuthError
	return errors.As(err, &oe) && oe.Code == code
}

func TestOAuthExchangeRefusals(t *testing.T) {
	t.Parallel()
	gh, o := oauthFixture(t)
	gh.SignInAs("alice")
	ctx := context.Background()
	verifier := NewVerifier()

	// A code stolen without its verifier (PKCE) is useless.
	q := authorize(t, o.AuthorizeURL(testRedirect, "s", verifier))
	if _, err := o.Exchange(ctx, q.Get("code"), testRedirect, NewVerifier()); !isOAuthError(err, "bad_verification_code") {
		t.Errorf("wrong verifier: %v", err)
	}
	// A made-up code.
	if _, err := o.Exchange(ctx, "nope", testRedirect, verifier); !isOAuthError(err, "bad_verification_code") {
		t.Errorf("unknown code: %v", err)
	}
	// Another redirect URI than the one the code was issued for.
	q = authorize(t, o.AuthorizeURL(testRedirect, "s", verifier))
	if _, err := o.Exchange(ctx, q.Get("code"), "https://evil.test/cb", verifier); !isOAuthError(err, "redirect_uri_mismatch") {
		t.Errorf("other redirect: %v", err)
	}
	// A wrong client secret.
	id, _ := gh.OAuthClient()
	bad, err := NewOAuth(OAuthConfig{ClientID: id, ClientSecret: "wrong", APIURL: gh.URL()})
	if err != nil {
		t.Fatal(err)
	}
	q = authorize(t, o.AuthorizeURL(testRedirect, "s", verifier))
	if _, err := bad.Exchange(ctx, q.Get("code"), testRedirect, verifier); !isOAuthError(err, "incorrect_client_credentials") {
		t.Errorf("wrong secret: %v", err)
	}
	// The user clicks Cancel on GitHub's page.
	gh.SignInAs("")
	q = authorize(t, o.AuthorizeURL(testRedirect, "s2", verifier))
	if q.Get("error") != "access_denied" || q.Get("code") != "" || q.Get("state") != "s2" {
		t.Errorf("denied: callback query %v", q)
	}
	if n, _ := gh.UserTokens(); n != 0 {
		t.Errorf("%d user tokens issued, want none", n)
	}
	// The token endpoint failing.
	gh.SignInAs("alice")
	q = authorize(t, o.AuthorizeURL(testRedirect, "s", verifier))
	gh.Fail(testkit.Fault{Method: "POST", Path: "/login/oauth/access_token", Status: http.StatusBadGateway, Times: 1})
	var se *StatusError
	if _, err := o.Exchange(ctx, q.Get("code"), testRedirect, verifier); !errors.As(err, &se) || se.Status != http.StatusBadGateway {
		t.Errorf("token endpoint 502: %v", err)
	}
}

func TestOAuthUserAccessReadsEveryPage(t *testing.T) {
	t.Parallel()
	gh, o := oauthFixture(t)
	var repos []string
	for i := range 230 {
		r := fmt.Sprintf("many/r%03d", i)
		repos = append(repos, r)
		gh.SetPermission(r, "carol", "read")
	}
	gh.Install(3, repos...)
	gh.SignInAs("carol")
	ctx := context.Background()
	v := NewVerifier()
	tok, err := o.Exchange(ctx, authorize(t, o.AuthorizeURL(testRedirect, "s", v)).Get("code"), testRedirect, v)
	if err != nil {
		t.Fatal(err)
	}
	ua, err := o.UserAccess(ctx, tok)
	if err != nil {
		t.Fatal(err)
	}
	if len(ua.Repos) != 230 || ua.Repos[229].Repo.String() != "many/r229" {
		t.Fatalf("read %d repositories, want 230 ending with many/r229", len(ua.Repos))
	}
	if n := gh.CountRequests("GET", "/user/installations/3/repositories"); n != 3 {
		t.Errorf("%d pages requested, want 3", n)
	}
	// GitHub failing midway is an error, not a partial answer.
	gh.Fail(testkit.Fault{Method: "GET", Path: "/user/installations/3/repositories", Status: http.StatusInternalServerError})
	if _, err := o.UserAccess(ctx, tok); err == nil {
		t.Error("UserAccess succeeded while GitHub failed")
	}
	// Another token than a user's.
	if _, err := o.UserAccess(ctx, "ghu_forged"); err == nil {
		t.Error("UserAccess succeeded with a forged token")
	}
}

func TestOAuthAuthorizeURLIsOnTheWebSide(t *testing.T) {
	t.Parallel()
	o, err := NewOAuth(OAuthConfig{ClientID: "Iv1.x", ClientSecret: "s", APIURL: "https://ghe.corp/api/v3/"})
	if err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(o.AuthorizeURL(testRedirect, "st", "v"))
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	if u.Host != "ghe.corp" || u.Path != "/login/oauth/authorize" || q.Get("client_id") != "Iv1.x" ||
		q.Get("code_challenge_method") != "S256" || q.Get("code_challenge") == "" || q.Get("redirect_uri") != testRedirect {
		t.Errorf("authorize URL %s", u)
	}
	if _, err := NewOAuth(OAuthConfig{ClientID: "x"}); err == nil {
		t.Error("NewOAuth without a secret succeeded")
	}
}
