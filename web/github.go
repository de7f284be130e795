package web

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"sync"
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

// WriteAccess asks GitHub, now, whether the user login may write to (write, maintain or
// admin) the repository of plan p. An error is GitHub not answering; the button is then
// refused.
type WriteAccess func(ctx context.Context, p queue.PlanInfo, login string) (bool, error)

// ErrPublicURL: "Sign in with GitHub" needs the dashboard's https address.
var ErrPublicURL = errors.New("sign in with GitHub needs WHILLY_PUBLIC_URL, the https address of the dashboard (http only on localhost), so that GitHub's code and the session cookie never travel in clear")

// CheckPublicURL returns nil when publicURL may receive GitHub's sign-in: an https URL,
// or an http URL of a loopback host (localhost, 127.0.0.0/8, ::1); else ErrPublicURL.
func CheckPublicURL(publicURL string) error {
	u, err := url.Parse(publicURL)
	if err != nil || u.Host == "" || u.User != nil {
		return fmt.Errorf("%w; it is %q", ErrPublicURL, publicURL)
	}
	switch u.Scheme {
	case "https":
		return nil
	case "http":
		host := u.Hostname()
		if ip, err := netip.ParseAddr(host); (err == nil && ip.IsLoopback()) || strings.EqualFold(host, "localhost") {
			return nil
		}
	}
	return fmt.Errorf("%w; it is %q", ErrPublicURL, publicURL)
}

// EnableGitHubSignIn adds "Sign in with GitHub" to the dashboard: its routes, and its
// button on the sign-in page. publicURL (WHILLY_PUBLIC_URL) is where GitHub sends the
// browser back: https, or http on a loopback host (CheckPublicURL; else nothing is
// added and the error says why). access asks GitHub whether a user may still write
// when they press a button; nil, GitHub users may press none.
func (h *Handler) EnableGitHubSignIn(gh GitHubSignIn, publicURL string, access WriteAccess) error {
	if err := CheckPublicURL(publicURL); err != nil {
		return err
	}
	h.github = &githubSignIn{gh: gh, base: strings.TrimRight(publicURL, "/"), access: access,
		writes: map[writeKey]writeAnswer{}}
	h.mux.HandleFunc("GET "+GitHubSignInPath, h.githubStart)
	h.mux.HandleFunc("GET "+GitHubCallbackPath, h.githubCallback)
	return nil
}

// githubSignIn is the dashboard's "Sign in with GitHub".
type githubSignIn struct {
	gh     GitHubSignIn
	base   string // WHILLY_PUBLIC_URL without its trailing slash
	access WriteAccess

	mu     sync.Mutex
	writes map[writeKey]writeAnswer // GitHub's answers of the last writeAccessTTL
}

type writeKey struct{ login, repo string } // lower case

type writeAnswer struct {
	ok bool
	at time.Time
}

// writeAccessTTL is how long GitHub's answer on a user's write access is used.
const writeAccessTTL = time.Minute

// maxWriteAnswers bounds the answers kept; when full, expired ones are dropped first.
const maxWriteAnswers = 10000

// stillWrites asks GitHub (or its answer of the last minute) whether login may still
// write to plan p's repository.
func (h *Handler) stillWrites(ctx context.Context, p queue.PlanInfo, login string) (bool, error) {
	g := h.github
	if g == nil || g.access == nil {
		return false, nil
	}
	key := writeKey{strings.ToLower(login), strings.ToLower(p.Repo)}
	now := h.now()
	g.mu.Lock()
	a, ok := g.writes[key]
	g.mu.Unlock()
	if ok && now.Sub(a.at) < writeAccessTTL && !now.Before(a.at) {
		return a.ok, nil
	}
	yes, err := g.access(ctx, p, login)
	if err != nil {
		return false, err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.writes) >= maxWriteAnswers {
		for k, a := range g.writes {
			if now.Sub(a.at) >= writeAccessTTL || len(g.writes) >= maxWriteAnswers {
				delete(g.writes, k)
			}
		}
	}
	g.writes[key] = writeAnswer{ok: yes, at: now}
	return yes, nil
}

// githubRedirect is the callback's absolute URL, as registered with the App.
func (h *Handler) githubRedirect() string {
	return h.github.base + GitHubCallbackPath
}

func (h *Handler) githubStart(w http.ResponseWriter, r *http.Request) {
	state, verifier := randomToken(), randomToken()
	next := safeNext(r.URL.Query().Get("next"))
	h.setFlowCookie(w, r, state+"."+verifier+"."+base64.RawURLEncoding.EncodeToString([]byte(next)), githubFlowTTL)
	w.Header().Set("Cache-Control", "no-store")
	// To GitHub's authorize page, from the configuration; GitHub takes only a redirect_uri
	// among the App's callback URLs.
	http.Redirect(w, r, h.github.gh.AuthorizeURL(h.githubRedirect(), state, verifier), http.StatusSeeOther)
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
	user, err := h.github.gh.SignIn(r.Context(), code, h.githubRedirect(), flow.verifier)
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
