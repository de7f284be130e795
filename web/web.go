// Package web is whilly's web dashboard, served by `whilly serve` at `/`:
// server-rendered pages (html/template) of the plans, a plan's task graph, the workers
// and the event log, kept live by a little plain JavaScript that follows the event
// stream; sign-in with an API token into a server-side session; and the operator's
// buttons (retry, cancel, budget), which call the same queue functions as the CLI, the
// API and the comment commands. Templates, CSS and JavaScript are embedded: nothing is
// fetched from elsewhere and nothing is built.
//
// It owns the dashboard's routes, sessions (cookie, CSRF) and rendering; state lives in
// package queue. It may import queue, plan and internal packages; control, the worker and
// the GitHub layers must not import it (the composition root, cli, mounts it).
//
// # Sessions, for other sign-in methods
//
// A session acts for a queue.Principal (Principal here): an API token's owner, or a
// GitHub user with the repositories it may read and write. Another way of signing in
// (such as "Sign in with GitHub") proves who the user is, builds a Principal and calls
// Handler.StartSession, which stores the session, sets the cookie and redirects to the
// page the user first asked for. Its routes go into routes (see Handler.Handle for
// routes added from outside), and it reads the session of a request with SessionFrom
// inside handlers wrapped by Handler.RequireSession.
package web

import (
	"embed"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/whilly-go/whilly/queue"
)

// Principal is who a session acts for (see queue.Principal).
type Principal = queue.Principal

// EventStream serves the event stream (server-sent events) limited to scopes, the
// control plane's one implementation of it (control.Server.StreamEvents): the dashboard
// authenticates the session, the stream does the rest.
type EventStream func(w http.ResponseWriter, r *http.Request, scopes queue.Scopes)

// Config tunes the dashboard. Zero values take the defaults.
type Config struct {
	// PublicURL (WHILLY_PUBLIC_URL): when it is https, cookies are Secure even if TLS
	// ends at a proxy in front.
	PublicURL string
	// SessionTTL is how long a session lasts; default 12 h.
	SessionTTL time.Duration
	// Events serves the live stream; nil: pages do not update live.
	Events EventStream
	// GitHubURL is the web address of GitHub for links to issues; default https://github.com.
	GitHubURL string
	// AttemptLog serves the attempt page's live log; nil: the page does not follow it.
	AttemptLog AttemptLogFunc
}

func (c Config) withDefaults() Config {
	if c.SessionTTL <= 0 {
		c.SessionTTL = 12 * time.Hour
	}
	if c.GitHubURL == "" {
		c.GitHubURL = "https://github.com"
	}
	c.GitHubURL = strings.TrimRight(c.GitHubURL, "/")
	return c
}

//go:embed templates/*.html
var templateFiles embed.FS

//go:embed static
var staticFiles embed.FS

// Handler is the dashboard's http.Handler.
type Handler struct {
	store  *queue.Store
	log    *slog.Logger
	cfg    Config
	mux    *http.ServeMux
	pages  map[string]*template.Template
	secure bool // cookies are Secure whatever the request says
	// github is "Sign in with GitHub" (github.go); nil: not offered.
	github *githubSignIn
	// now is the clock of GitHub's cached answers (tests move it).
	now func() time.Time
}

// New builds the dashboard over store.
func New(store *queue.Store, log *slog.Logger, cfg Config) (*Handler, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	cfg = cfg.withDefaults()
	h := &Handler{store: store, log: log, cfg: cfg, mux: http.NewServeMux(), now: time.Now}
	if u, err := url.Parse(cfg.PublicURL); err == nil && u.Scheme == "https" {
		h.secure = true
	}
	pages, err := parsePages()
	if err != nil {
		return nil, err
	}
	h.pages = pages
	h.routes()
	return h, nil
}

// ServeHTTP serves the dashboard.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	hd := w.Header()
	// The pages use only their own scripts and styles, never frames.
	hd.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; form-action 'self'; base-uri 'none'")
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("Referrer-Policy", "same-origin")
	h.mux.ServeHTTP(w, r)
}

// Handle adds a route (a http.ServeMux pattern) to the dashboard, for parts built
// elsewhere. Wrap it with RequireSession when it needs a signed-in user.
func (h *Handler) Handle(pattern string, handler http.Handler) { h.mux.Handle(pattern, handler) }

func (h *Handler) routes() {
	static, _ := fs.Sub(staticFiles, "static") // the directory is embedded: cannot fail
	h.mux.Handle("GET /static/", http.StripPrefix("/static/", cacheStatic(http.FileServerFS(static))))
	h.mux.HandleFunc("GET /favicon.ico", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) })
	h.mux.HandleFunc("GET /signin", h.signinPage)
	h.mux.HandleFunc("POST /signin", h.signin)
	h.mux.Handle("POST /signout", h.RequireSession(h.requireCSRF(http.HandlerFunc(h.signout))))

	page := func(pattern string, fn http.HandlerFunc) { h.mux.Handle(pattern, h.RequireSession(fn)) }
	post := func(pattern string, fn http.HandlerFunc) { h.mux.Handle(pattern, h.RequireSession(h.requireCSRF(fn))) }
	page("GET /{$}", h.plansPage)
	page("GET /plans/{plan}", h.planPage)
	page("GET /plans/{plan}/live", h.planLive)
	page("GET /live/plans", h.plansLive)
	page("GET /workers", h.workersPage)
	page("GET /events", h.eventsPage)
	page("GET /events/stream", h.stream)
	page("GET /plans/{plan}/tasks/{task}/attempts/{n}", h.attemptPage) // attempt.go
	page("GET /plans/{plan}/tasks/{task}/attempts/{n}/log", h.attemptLog)
	post("POST /plans/{plan}/cancel", h.cancelPlan)
	post("POST /plans/{plan}/budget", h.setBudget)
	post("POST /plans/{plan}/tasks/{task}/retry", h.retryTask)
	post("POST /plans/{plan}/pause", h.pausePlan)
	post("POST /plans/{plan}/resume", h.resumePlan)
	post("POST /plans/{plan}/approve", h.approvePlan)
	post("POST /pause", h.fleet(true))
	post("POST /resume", h.fleet(false))
	h.mux.HandleFunc("/", h.notFound)
}

func cacheStatic(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-cache")
		next.ServeHTTP(w, r)
	})
}

// notFound answers paths the dashboard does not have: HTML for a person, after sign-in.
func (h *Handler) notFound(w http.ResponseWriter, r *http.Request) {
	if _, ok := h.session(r); !ok {
		h.toSignin(w, r)
		return
	}
	h.fail(w, r, http.StatusNotFound, fmt.Sprintf("There is no page %s.", r.URL.EscapedPath()))
}
