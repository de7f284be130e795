package web

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"html/template"
	"net/http"
	"strings"
	"time"

	"github.com/whilly-go/whilly/queue"
)

// "Sign in with GitHub": the App's OAuth user-to-server flow. GET /auth/github sends the
// browser to GitHub's authorize page with a fresh state and PKCE challenge, both kept in
// a short-lived cookie of this browser; GitHub sends it back to GET
// /auth/github/callback with a code and the state, which must be the cookie's (a state
// that is missing, another browser's or already used is refused). The code is exchanged
// for the user's token, which reads who the user is and the repositories they reach
// through the App's installations; the session keeps only the login and those
// repositories (read, and write or more), and the token is revoked at once (by
// GitHubSignIn). So a session never holds a GitHub credential; what the user may see is
// what GitHub said at sign-in, until the session ends.

// GitHubPaths are the routes of "Sign in with GitHub".
const (
	GitHubSignInPath   = "/auth/github"
	GitHubCallbackPath = "/auth/github/callback"
)

// githubCookie carries the state, the PKCE verifier and the page to return to between
// /auth/github and the callback. It is SameSite=Lax: GitHub's redirect back is a
// navigation from another site, which a Strict cookie would not follow.
const githubCookie = "whilly_github"

// githubFlowTTL is how long a sign-in may take on GitHub's pages.
const githubFlowTTL = 10 * time.Minute

// GitHubUser is who signed in with GitHub: the login and the repositories (owner/name)
// the user reaches through the App, those they may read and those where they have
// write, maintain or admin.
type GitHubUser struct {
	Login      string
	ReadRepos  []string
	WriteRepos []string
}

// GitHubSignIn is GitHub's side of the flow (app.OAuth in whilly serve).
type GitHubSignIn interface {
	// AuthorizeURL is GitHub's authorize page for redirectURI, state and the PKCE
	// verifier's challenge.
	AuthorizeURL(redirectURI, state, verifier string) string
	// SignIn exchanges the code, reads the user with the token, and revokes the token.
	SignIn(ctx context.Context, code, redirectURI, verifier string) (GitHubUser, error)
}

// EnableGitHubSignIn adds "Sign in with GitHub" to the dashboard: its routes, and its
// button on the sign-in page. publicURL (WHILLY_PUBLIC_URL) is where GitHub sends the
// browser back; empty, the request's own host is used.
func (h *Handler) EnableGitHubSignIn(gh GitHubSignIn, publicURL string) {
	h.github = &githubSignIn{gh: gh, base: strings.TrimRight(publicURL, "/")}
	h.mux.HandleFunc("GET "+GitHubSignInPath, h.githubStart)
	h.mux.HandleFunc("GET "+GitHubCallbackPath, h.githubCallback)
}

// githubSignIn is the dashboard's "Sign in with GitHub".
type githubSignIn struct {
	gh   GitHubSignIn
	base string // WHILLY_PUBLIC_URL without its trailing slash
}

// githubRedirect is the callback's absolute URL, as registered with the App.
func (h *Handler) githubRedirect(r *http.Request) string {
	if h.github.base != "" {
		return h.github.base + GitHubCallbackPath
	}
	scheme := "http"
	if h.secureRequest(r) {
		scheme = "https"
	}
	return scheme + "://" + r.Host + GitHubCallbackPath
}

func (h *Handler) githubStart(w http.ResponseWriter, r *http.Request) {
	state, verifier := randomToken(), randomToken()
	next := safeNext(r.URL.Query().Get("next"))
	h.setFlowCookie(w, r, state+"."+verifier+"."+base64.RawURLEncoding.EncodeToString([]byte(next)), githubFlowTTL)
	w.Header().Set("Cache-Control", "no-store")
	// To GitHub's authorize page, from the configuration; GitHub takes only a redirect_uri
	// among the App's callback URLs.
	http.Redirect(w, r, h.github.gh.AuthorizeURL(h.githubRedirect(r), state, verifier), http.StatusSeeOther) //nolint:gosec // G710: the target is configured, not the request's
}

func (h *Handler) setFlowCookie(w http.ResponseWriter, r *http.Request, value string, maxAge time.Duration) {
	//nolint:gosec // G124: Secure over https (secureRequest); Lax, not Strict, as the type comment says
	c := &http.Cookie{Name: githubCookie, Value: value, Path: GitHubSignInPath, HttpOnly: true,
		SameSite: http.SameSiteLaxMode, Secure: h.secureRequest(r), MaxAge: int(maxAge.Seconds())}
	if maxAge < 0 {
		c.MaxAge = -1
	}
	http.SetCookie(w, c)
}

// githubFlow is what the cookie of one sign-in holds.
type githubFlow struct{ state, verifier, next string }

func readFlowCookie(r *http.Request) (githubFlow, bool) {
	c, err := r.Cookie(githubCookie)
	if err != nil {
		return githubFlow{}, false
	}
	parts := strings.Split(c.Value, ".")
	if len(parts) != 3 || parts[0] == "" || parts[1] == "" {
		return githubFlow{}, false
	}
	next, err := base64.RawURLEncoding.DecodeString(parts[2])
	if err != nil {
		return githubFlow{}, false
	}
	return githubFlow{state: parts[0], verifier: parts[1], next: safeNext(string(next))}, true
}

func (h *Handler) githubCallback(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	flow, ok := readFlowCookie(r)
	// Whatever happens now, this sign-in is over: its state works once.
	h.setFlowCookie(w, r, "", -1)
	w.Header().Set("Cache-Control", "no-store")
	if !ok || q.Get("state") == "" || !equalSecret(q.Get("state"), flow.state) {
		h.fail(w, r, http.StatusBadRequest, "This sign-in did not start in this browser, or it was already used; sign in with GitHub again.")
		return
	}
	if q.Get("error") != "" {
		h.fail(w, r, http.StatusForbidden, "GitHub did not sign you in (the request was cancelled or refused); sign in again.")
		return
	}
	code := q.Get("code")
	if code == "" || len(code) > 512 {
		h.fail(w, r, http.StatusBadRequest, "GitHub sent no sign-in code back; sign in with GitHub again.")
		return
	}
	user, err := h.github.gh.SignIn(r.Context(), code, h.githubRedirect(r), flow.verifier)
	if err != nil {
		h.log.WarnContext(r.Context(), "sign in with GitHub failed", "error", err)
		h.fail(w, r, http.StatusBadRequest, "GitHub did not confirm who you are; sign in with GitHub again. If it keeps failing, see the server's log.")
		return
	}
	p := Principal{Kind: queue.PrincipalGitHub, Name: user.Login, ReadRepos: user.ReadRepos, WriteRepos: user.WriteRepos}
	id, _, err := h.store.CreateSession(r.Context(), p, h.cfg.SessionTTL)
	if err != nil {
		h.serverError(w, r, err)
		return
	}
	h.setCookie(w, r, sessionCookie, id, h.cfg.SessionTTL)
	h.log.InfoContext(r.Context(), "dashboard sign-in", "kind", p.Kind, "name", p.Name,
		"read_repos", len(p.ReadRepos), "write_repos", len(p.WriteRepos))
	// A page that moves on by itself, rather than a redirect: the browser came through
	// GitHub, and a browser that follows the cookie draft (RFC 6265bis: a redirect chain
	// through another site makes the request cross-site) would not send the Strict
	// session cookie along the redirect; a navigation from this page is same-site. The
	// browser test checks it with Chromium's CookieSameSiteConsidersRedirectChain on
	// (with a redirect here, it fails).
	continueTo(w, flow.next, "Signed in as "+user.Login+".")
}

// continueTo answers a page that moves on to next (a path of this site) by itself: the
// navigation it starts is same-site, so the browser sends the Strict session cookie.
func continueTo(w http.ResponseWriter, next, text string) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	_ = continuePage.Execute(w, continueView{Next: safeNext(next), Text: text}) // the browser went away
}

type continueView struct {
	Next string
	Text string
}

var continuePage = template.Must(template.New("continue").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width">
<meta http-equiv="refresh" content="0; url={{.Next}}"><title>whilly</title></head>
<body><p>{{.Text}} <a href="{{.Next}}">Continue</a>.</p></body></html>
`))

// randomToken is 256 random bits, base64url.
func randomToken() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (it crashes the program instead)
	return base64.RawURLEncoding.EncodeToString(b)
}
