package fakegithub

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The App's OAuth user-to-server flow ("Sign in with GitHub"): GitHub's authorize page
// sends the browser back to the redirect URI with a code and the state; the code is
// exchanged once, within ten minutes, for a user token (ghu_…) that reads the user
// (GET /user) and the installations and repositories of the App the user can reach
// (GET /user/installations, GET /user/installations/{id}/repositories, each repository
// with the user's permissions). The fake's authorize page approves at once, as the user
// set with SignInAs; a user's permission on a repository is what SetPermission gave
// them. PKCE (S256) is checked when the authorize request carried a challenge.

// OAuthAuthorization is one authorize request the fake's page received.
type OAuthAuthorization struct {
	ClientID, RedirectURI, State, Challenge, Login string
}

type fakeOAuth struct {
	mu       sync.Mutex
	id       string
	secret   string
	user     string // who the authorize page signs in as; "" refuses (access_denied)
	codes    map[string]*oauthCode
	tokens   map[string]oauthToken
	requests []OAuthAuthorization
}

type oauthCode struct {
	login, redirect, challenge string
	issued                     time.Time
	used                       bool
}

type oauthToken struct {
	login   string
	expires time.Time
	revoked bool
}

// oauthCodeTTL is how long GitHub honours an authorization code.
const oauthCodeTTL = 10 * time.Minute

// OAuthClient returns the App's OAuth client id and secret (the ones the manifest
// conversion hands out).
func (g *GitHub) OAuthClient() (id, secret string) {
	g.oauth.mu.Lock()
	defer g.oauth.mu.Unlock()
	g.oauthInitLocked()
	return g.oauth.id, g.oauth.secret
}

func (g *GitHub) oauthInitLocked() {
	if g.oauth.id == "" {
		g.oauth.id = "Iv23" + randomHex(8)
		g.oauth.secret = randomHex(20)
		g.oauth.codes = map[string]*oauthCode{}
		g.oauth.tokens = map[string]oauthToken{}
	}
}

// SignInAs makes the authorize page approve as login from now on; "" makes it answer as
// when the user clicks Cancel (error=access_denied).
func (g *GitHub) SignInAs(login string) {
	g.oauth.mu.Lock()
	defer g.oauth.mu.Unlock()
	g.oauth.user = login
}

// OAuthAuthorizations returns the authorize requests received, in order.
func (g *GitHub) OAuthAuthorizations() []OAuthAuthorization {
	g.oauth.mu.Lock()
	defer g.oauth.mu.Unlock()
	return slices.Clone(g.oauth.requests)
}

// UserTokens counts the user tokens issued so far, and those of them still live (not
// revoked, not expired).
func (g *GitHub) UserTokens() (issued, live int) {
	g.oauth.mu.Lock()
	defer g.oauth.mu.Unlock()
	for _, t := range g.oauth.tokens {
		if !t.revoked && time.Now().Before(t.expires) {
			live++
		}
	}
	return len(g.oauth.tokens), live
}

// oauthRoutes come before the route table: GET /user answers a user token here and
// anything else as the table's route does.
func (g *GitHub) oauthRoutes() []fakeRoute {
	rt := func(method, pattern string, h func(http.ResponseWriter, *http.Request, int64, []string) int) fakeRoute {
		return fakeRoute{method: method, re: regexp.MustCompile("^" + pattern + "$"), auth: authNone, h: h}
	}
	return []fakeRoute{
		rt("GET", `/login/oauth/authorize`, g.oauthAuthorize),
		rt("POST", `/login/oauth/access_token`, g.oauthAccessToken),
		rt("GET", `/user`, g.oauthUser),
		rt("GET", `/user/installations`, g.userInstallations),
		rt("GET", `/user/installations/([0-9]+)/repositories`, g.userInstallationRepos),
		rt("DELETE", `/applications/([^/]+)/token`, g.revokeUserToken),
	}
}

func (g *GitHub) oauthAuthorize(w http.ResponseWriter, r *http.Request, _ int64, _ []string) int {
	q := r.URL.Query()
	req := OAuthAuthorization{ClientID: q.Get("client_id"), RedirectURI: q.Get("redirect_uri"), State: q.Get("state"),
		Challenge: q.Get("code_challenge"), Login: q.Get("login")}
	g.oauth.mu.Lock()
	defer g.oauth.mu.Unlock()
	g.oauthInitLocked()
	g.oauth.requests = append(g.oauth.requests, req)
	target, err := url.Parse(req.RedirectURI)
	if req.ClientID != g.oauth.id || err != nil || target.Scheme == "" || target.Host == "" {
		// GitHub shows a page, not a redirect, for an unknown client or a bad redirect.
		return writeJSON(w, http.StatusNotFound, map[string]string{"message": "Not Found (unknown client_id or redirect_uri)"})
	}
	if req.Challenge != "" && q.Get("code_challenge_method") != "S256" {
		return writeJSON(w, http.StatusBadRequest, map[string]string{"message": "code_challenge_method must be S256"})
	}
	tq := target.Query()
	tq.Set("state", req.State)
	if g.oauth.user == "" {
		tq.Set("error", "access_denied")
		tq.Set("error_description", "The user has denied your application access.")
	} else {
		code := randomHex(10)
		g.oauth.codes[code] = &oauthCode{login: g.oauth.user, redirect: req.RedirectURI, challenge: req.Challenge, issued: time.Now()}
		tq.Set("code", code)
	}
	target.RawQuery = tq.Encode()
	http.Redirect(w, r, target.String(), http.StatusFound)
	return http.StatusFound
}

// oauthAccessToken answers like GitHub: 200 with an "error" field when the exchange is
// refused, JSON when asked for (Accept), form-encoded otherwise.
func (g *GitHub) oauthAccessToken(w http.ResponseWriter, r *http.Request, _ int64, _ []string) int {
	answer := func(v map[string]any) int {
		if strings.Contains(r.Header.Get("Accept"), "application/json") {
			return writeJSON(w, http.StatusOK, v)
		}
		form := url.Values{}
		for k, x := range v {
			form.Set(k, strings.Trim(mustJSON(x), `"`))
		}
		w.Header().Set("Content-Type", "application/x-www-form-urlencoded; charset=utf-8")
		_, _ = w.Write([]byte(form.Encode()))
		return http.StatusOK
	}
	refuse := func(code, desc string) int {
		return answer(map[string]any{"error": code, "error_description": desc})
	}
	if err := r.ParseForm(); err != nil {
		return writeJSON(w, http.StatusBadRequest, map[string]string{"message": "bad form"})
	}
	f := r.Form
	if strings.HasPrefix(r.Header.Get("Content-Type"), "application/json") {
		var body map[string]string
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			return writeJSON(w, http.StatusBadRequest, map[string]string{"message": "Problems parsing JSON"})
		}
		f = url.Values{}
		for k, v := range body {
			f.Set(k, v)
		}
	}
	g.oauth.mu.Lock()
	defer g.oauth.mu.Unlock()
	g.oauthInitLocked()
	if f.Get("client_id") != g.oauth.id || f.Get("client_secret") != g.oauth.secret {
		return refuse("incorrect_client_credentials", "The client_id and/or client_secret passed are incorrect.")
	}
	c := g.oauth.codes[f.Get("code")]
	if c == nil || c.used || time.Since(c.issued) > oauthCodeTTL {
		return refuse("bad_verification_code", "The code passed is incorrect or expired.")
	}
	if ru := f.Get("redirect_uri"); ru != "" && ru != c.redirect {
		return refuse("redirect_uri_mismatch", "The redirect_uri MUST match the registered callback URL for this application.")
	}
	if c.challenge != "" {
		sum := sha256.Sum256([]byte(f.Get("code_verifier")))
		if base64.RawURLEncoding.EncodeToString(sum[:]) != c.challenge {
			return refuse("bad_verification_code", "The code_verifier does not match the code_challenge.")
		}
	}
	c.used = true
	tok := "ghu_" + randomHex(18)
	g.oauth.tokens[tok] = oauthToken{login: c.login, expires: time.Now().Add(8 * time.Hour)}
	return answer(map[string]any{"access_token": tok, "token_type": "bearer", "scope": "",
		"expires_in": 28800, "refresh_token": "ghr_" + randomHex(30), "refresh_token_expires_in": 15897600})
}

// revokeUserToken is DELETE /applications/{client_id}/token: the App's OAuth client
// (basic auth) revokes one of its user tokens.
func (g *GitHub) revokeUserToken(w http.ResponseWriter, r *http.Request, _ int64, m []string) int {
	id, secret, ok := r.BasicAuth()
	var body struct {
		AccessToken string `json:"access_token"`
	}
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		return writeJSON(w, http.StatusBadRequest, map[string]string{"message": "Problems parsing JSON"})
	}
	g.oauth.mu.Lock()
	defer g.oauth.mu.Unlock()
	g.oauthInitLocked()
	if !ok || id != g.oauth.id || secret != g.oauth.secret || m[1] != g.oauth.id {
		return writeJSON(w, http.StatusUnauthorized, map[string]string{"message": "Bad credentials"})
	}
	t, ok := g.oauth.tokens[body.AccessToken]
	if !ok || t.revoked {
		return notFound(w)
	}
	t.revoked = true
	g.oauth.tokens[body.AccessToken] = t
	w.WriteHeader(http.StatusNoContent)
	return http.StatusNoContent
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// userOf returns the login of the request's user token.
func (g *GitHub) userOf(r *http.Request) (string, bool) {
	tok := strings.TrimPrefix(strings.TrimPrefix(r.Header.Get("Authorization"), "token "), "Bearer ")
	g.oauth.mu.Lock()
	defer g.oauth.mu.Unlock()
	t, ok := g.oauth.tokens[tok]
	if !ok || t.revoked || time.Now().After(t.expires) {
		return "", false
	}
	return t.login, true
}

func (g *GitHub) oauthUser(w http.ResponseWriter, r *http.Request, _ int64, m []string) int {
	if login, ok := g.userOf(r); ok {
		return writeJSON(w, http.StatusOK, map[string]any{"login": login, "id": userID(login), "type": "User"})
	}
	tok, status := g.authenticate(r, authToken, m)
	if status != 0 {
		return writeJSON(w, status, map[string]string{"message": "Bad credentials"})
	}
	return g.getAuthenticatedUser(w, r, tok.installation, m)
}

func userID(login string) int64 {
	id := int64(7)
	for _, c := range strings.ToLower(login) {
		id = (id*31 + int64(c)) % 1_000_000_007
	}
	return id + 1
}

// userPermissions is GitHub's permissions object of a repository for a permission level.
func userPermissions(level string) map[string]bool {
	order := []string{"pull", "triage", "push", "maintain", "admin"}
	n := map[string]int{"read": 1, "triage": 2, "write": 3, "maintain": 4, "admin": 5}[level]
	p := map[string]bool{}
	for i, k := range order {
		p[k] = i < n
	}
	return p
}

// userReposLocked returns the repositories of installation inst the user can read, with
// their permission level, in the installation's order.
func (g *GitHub) userReposLocked(inst int64, login string) (names, levels []string) {
	for _, full := range g.installations[inst] {
		r, ok := g.repos[full]
		if !ok {
			continue
		}
		if p := r.perms[strings.ToLower(login)]; userPermissions(p)["pull"] {
			names, levels = append(names, r.name), append(levels, p)
		}
	}
	return names, levels
}

func (g *GitHub) requireUser(w http.ResponseWriter, r *http.Request) (string, int) {
	login, ok := g.userOf(r)
	if !ok {
		return "", writeJSON(w, http.StatusUnauthorized, map[string]string{"message": "Bad credentials"})
	}
	return login, 0
}

// page answers one page of items (per_page, page; Link rel="next" when more follow).
func page[T any](w http.ResponseWriter, r *http.Request, items []T) []T {
	per, _ := strconv.Atoi(r.URL.Query().Get("per_page"))
	if per <= 0 || per > 100 {
		per = 30
	}
	n, _ := strconv.Atoi(r.URL.Query().Get("page"))
	n = max(n, 1)
	lo, hi := min((n-1)*per, len(items)), min(n*per, len(items))
	if hi < len(items) {
		next := *r.URL
		q := next.Query()
		q.Set("page", strconv.Itoa(n+1))
		q.Set("per_page", strconv.Itoa(per))
		next.RawQuery = q.Encode()
		next.Scheme, next.Host = "http", r.Host
		w.Header().Set("Link", `<`+next.String()+`>; rel="next"`)
	}
	return items[lo:hi]
}

func (g *GitHub) userInstallations(w http.ResponseWriter, r *http.Request, _ int64, _ []string) int {
	login, status := g.requireUser(w, r)
	if status != 0 {
		return status
	}
	g.mu.Lock()
	ids := make([]int64, 0, len(g.installations))
	for id := range g.installations {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	var out []map[string]any
	for _, id := range ids {
		names, _ := g.userReposLocked(id, login)
		if len(names) == 0 {
			continue
		}
		owner, _, _ := strings.Cut(names[0], "/")
		out = append(out, map[string]any{"id": id, "app_id": g.AppID, "target_type": "Organization",
			"account": map[string]any{"login": owner}, "repository_selection": "selected"})
	}
	g.mu.Unlock()
	total := len(out)
	return writeJSON(w, http.StatusOK, map[string]any{"total_count": total, "installations": page(w, r, out)})
}

func (g *GitHub) userInstallationRepos(w http.ResponseWriter, r *http.Request, _ int64, m []string) int {
	login, status := g.requireUser(w, r)
	if status != 0 {
		return status
	}
	inst, _ := strconv.ParseInt(m[1], 10, 64)
	g.mu.Lock()
	names, levels := g.userReposLocked(inst, login)
	g.mu.Unlock()
	if len(names) == 0 {
		return notFound(w)
	}
	out := make([]map[string]any, len(names))
	for i, full := range names {
		owner, name, _ := strings.Cut(full, "/")
		out[i] = map[string]any{"id": userID(full), "name": name, "full_name": full, "private": true,
			"owner": map[string]any{"login": owner}, "permissions": userPermissions(levels[i])}
	}
	return writeJSON(w, http.StatusOK, map[string]any{"total_count": len(out), "repositories": page(w, r, out)})
}
