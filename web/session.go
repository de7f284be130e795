package web

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/whilly-go/whilly/queue"
)

const (
	// sessionCookie holds the session id; only its hash is stored (web_sessions).
	sessionCookie = "whilly_session"
	// signinCookie holds the sign-in form's CSRF token until the session exists
	// (double submit: the form carries the same value).
	signinCookie = "whilly_signin"
	// csrfField is the form field of the CSRF token.
	csrfField = "csrf"
	// signinTokenLen is the length of the sign-in form's token (32 bytes, base64url).
	signinTokenLen = 43
	// maxFormBytes bounds a form post.
	maxFormBytes = 16 << 10
)

type sessionKey struct{}

// SessionFrom returns the session of a request that RequireSession let through.
func SessionFrom(ctx context.Context) (queue.Session, bool) {
	s, ok := ctx.Value(sessionKey{}).(queue.Session)
	return s, ok
}

// session authenticates the request's session cookie.
func (h *Handler) session(r *http.Request) (queue.Session, bool) {
	c, err := r.Cookie(sessionCookie)
	if err != nil {
		return queue.Session{}, false
	}
	s, err := h.store.AuthenticateSession(r.Context(), c.Value)
	if err != nil {
		if !errors.Is(err, queue.ErrUnauthorized) && r.Context().Err() == nil {
			h.log.WarnContext(r.Context(), "session lookup failed", "error", err)
		}
		return queue.Session{}, false
	}
	return s, true
}

// RequireSession lets through requests with a live session (SessionFrom then returns
// it); others go to the sign-in page, which brings the user back to where they were.
func (h *Handler) RequireSession(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s, ok := h.session(r)
		if !ok {
			h.toSignin(w, r)
			return
		}
		w.Header().Set("Cache-Control", "no-store")
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), sessionKey{}, s)))
	})
}

// toSignin redirects to the sign-in page, keeping the page asked for (GET only: a post
// without a session is not replayed after sign-in).
//
// A page asked for by a link on another site (a status comment on github.com) comes
// without the session cookie, whether or not the browser holds one: SameSite=Strict
// keeps it home on cross-site navigations. That page is loaded once more from here, a
// same-site navigation that carries the cookie; only then, still without a session, is
// it sign-in.
func (h *Handler) toSignin(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodGet && r.Header.Get("Sec-Fetch-Site") == "cross-site" {
		continueTo(w, r.URL.RequestURI(), "Opening the page.")
		return
	}
	target := "/signin"
	if r.Method == http.MethodGet {
		if next := r.URL.RequestURI(); next != "/" && safeNext(next) != "/" {
			target += "?next=" + url.QueryEscape(next)
		}
	}
	http.Redirect(w, r, target, http.StatusSeeOther)
}

// safeNext returns next when it is a path of this site ("/plans/x?y"), else "/": never
// another host ("//evil", "/\evil", "https://evil"), never a scheme, never control
// characters.
func safeNext(next string) string {
	if next == "" || len(next) > 2048 || next[0] != '/' || strings.HasPrefix(next, "//") || strings.HasPrefix(next, "/\\") {
		return "/"
	}
	for _, c := range next {
		if c < 0x20 || c == 0x7f || c == '\\' {
			return "/"
		}
	}
	u, err := url.Parse(next)
	if err != nil || u.Scheme != "" || u.Host != "" || u.User != nil || u.Opaque != "" {
		return "/"
	}
	return next
}

// requireCSRF refuses (403) a form post without the session's CSRF token.
func (h *Handler) requireCSRF(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s, _ := SessionFrom(r.Context())
		r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
		if err := r.ParseForm(); err != nil {
			h.fail(w, r, http.StatusBadRequest, "The form could not be read.")
			return
		}
		if s.CSRF == "" || !equalSecret(r.PostForm.Get(csrfField), s.CSRF) {
			h.fail(w, r, http.StatusForbidden, "This form has expired or did not come from this page; reload the page and try again.")
			return
		}
		next.ServeHTTP(w, r)
	})
}

func equalSecret(a, b string) bool {
	ha, hb := sha256.Sum256([]byte(a)), sha256.Sum256([]byte(b))
	return subtle.ConstantTimeCompare(ha[:], hb[:]) == 1
}

// secureRequest reports whether cookies must be Secure: https here, or behind a proxy
// whose public URL is https.
func (h *Handler) secureRequest(r *http.Request) bool { return h.secure || r.TLS != nil }

func (h *Handler) setCookie(w http.ResponseWriter, r *http.Request, name, value string, maxAge time.Duration) {
	//nolint:gosec // G124: Secure over https, here or behind a proxy (secureRequest); plain http on a laptop needs the cookie too
	c := &http.Cookie{Name: name, Value: value, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode,
		Secure: h.secureRequest(r), MaxAge: int(maxAge.Seconds())}
	if maxAge < 0 {
		c.MaxAge = -1
	}
	http.SetCookie(w, c)
}

// StartSession signs the user in as p: it stores a session, sets the session cookie and
// redirects (303) to next when that is a path of this site, else to the plans. The
// caller has proven who p is; for a token, p.TokenPrefix names a live token.
func (h *Handler) StartSession(w http.ResponseWriter, r *http.Request, p Principal, next string) error {
	id, _, err := h.store.CreateSession(r.Context(), p, h.cfg.SessionTTL)
	if err != nil {
		return err
	}
	h.setCookie(w, r, sessionCookie, id, h.cfg.SessionTTL)
	h.setCookie(w, r, signinCookie, "", -1)
	h.log.InfoContext(r.Context(), "dashboard sign-in", "kind", p.Kind, "name", p.Name, "admin", p.Admin)
	http.Redirect(w, r, safeNext(next), http.StatusSeeOther) //nolint:gosec // G710: safeNext lets only paths of this site through
	return nil
}

type signinView struct {
	Next   string
	CSRF   string
	Error  string
	GitHub bool // "Sign in with GitHub" is offered (github.go)
}

// signinPage shows the token form, with a fresh CSRF token in a cookie and the form.
func (h *Handler) signinPage(w http.ResponseWriter, r *http.Request) {
	h.renderSignin(w, r, http.StatusOK, r.URL.Query().Get("next"), "")
}

func (h *Handler) renderSignin(w http.ResponseWriter, r *http.Request, status int, next, msg string) {
	// Keep the token of an earlier sign-in page: a second one (another tab, the browser's
	// own request for /favicon.ico) must not void the form already shown.
	var tok string
	if c, err := r.Cookie(signinCookie); err == nil && len(c.Value) == signinTokenLen {
		tok = c.Value
	} else {
		b := make([]byte, 32)
		if _, err := rand.Read(b); err != nil {
			h.fail(w, r, http.StatusInternalServerError, "The sign-in page could not be made; try again.")
			return
		}
		tok = base64.RawURLEncoding.EncodeToString(b)
	}
	h.setCookie(w, r, signinCookie, tok, time.Hour)
	w.Header().Set("Cache-Control", "no-store")
	h.render(w, r, status, "signin", frame{Title: "Sign in", Page: signinView{Next: safeNext(next), CSRF: tok, Error: msg, GitHub: h.github != nil}})
}

// signin checks the pasted token — a read or admin API token — and starts its session.
func (h *Handler) signin(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
	if err := r.ParseForm(); err != nil {
		h.fail(w, r, http.StatusBadRequest, "The form could not be read.")
		return
	}
	c, err := r.Cookie(signinCookie)
	if err != nil || c.Value == "" || !equalSecret(r.PostForm.Get(csrfField), c.Value) {
		h.fail(w, r, http.StatusForbidden, "This sign-in form has expired or did not come from this site; open the sign-in page again.")
		return
	}
	next := r.PostForm.Get("next")
	tok := strings.TrimSpace(r.PostForm.Get("token"))
	if tok == "" || len(tok) > 1024 {
		h.renderSignin(w, r, http.StatusBadRequest, next, "Paste a read or admin token (whilly admin token mint --owner EMAIL).")
		return
	}
	t, err := h.store.AuthenticateToken(r.Context(), tok)
	switch {
	case errors.Is(err, queue.ErrUnauthorized):
		h.renderSignin(w, r, http.StatusUnauthorized, next, "That token is unknown, revoked or expired.")
		return
	case err != nil:
		h.serverError(w, r, err)
		return
	case t.Registrar:
		h.renderSignin(w, r, http.StatusForbidden, next, "A bootstrap token only registers workers; sign in with a read or admin token.")
		return
	}
	p := Principal{Kind: queue.PrincipalToken, Name: t.Owner, TokenPrefix: t.Prefix, Admin: t.Admin, Scopes: t.Scopes}
	if err := h.StartSession(w, r, p, next); err != nil {
		h.serverError(w, r, err)
	}
}

// signout ends the session on the server and forgets the cookie.
func (h *Handler) signout(w http.ResponseWriter, r *http.Request) {
	if c, err := r.Cookie(sessionCookie); err == nil {
		if err := h.store.RevokeSession(r.Context(), c.Value); err != nil {
			h.serverError(w, r, err)
			return
		}
	}
	h.setCookie(w, r, sessionCookie, "", -1)
	http.Redirect(w, r, "/signin", http.StatusSeeOther)
}
