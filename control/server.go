// Package control is whilly's control-plane HTTP API: worker registration and
// heartbeats, long-polling claims woken by Postgres LISTEN/NOTIFY, lease-fenced task
// transitions, the plans and events APIs with an SSE stream, health and Prometheus
// metrics. It owns routing, authentication, request validation and the mapping of store
// errors to HTTP; state lives in package queue, wire types in control/client. It must not
// import the GitHub, webhook, worker or CLI layers, and keeps no state of its own beyond
// metrics: any number of replicas may serve one database.
package control

import (
	"context"
	"log/slog"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/whilly-go/whilly/control/client"
	"github.com/whilly-go/whilly/queue"
)

// WorkspaceProvider returns the workspace of the claim l of plan p, a plan tied to a
// repository (p.Repo set): clone URL, branch and a token minted for that one claim and
// that one repository, revoked when the lease ends. nil means the plan's tasks run
// without one.
type WorkspaceProvider func(ctx context.Context, p queue.PlanInfo, l queue.Lease) (*client.Workspace, error)

// Config tunes the server. Zero values take the defaults.
type Config struct {
	// BootstrapToken (WHILLY_BOOTSTRAP_TOKEN) registers workers and may do nothing else;
	// empty disables it.
	BootstrapToken string
	// MetricsToken (WHILLY_METRICS_TOKEN) guards /metrics when set.
	MetricsToken string
	// MaxClaimWait caps a claim's wait_seconds; default 30 s.
	MaxClaimWait time.Duration
	// MaxBodyBytes caps request bodies; default 1 MiB.
	MaxBodyBytes int64
	// MaxPlanBytes caps a plan file posted to /v1/plans; default 64 MiB.
	MaxPlanBytes int64
	// HeaderTimeout bounds the arrival of a request's line and headers; default 10 s.
	HeaderTimeout time.Duration
	// BodyTimeout bounds the arrival of a request's body, on every route and on handlers
	// mounted (the webhook); default 30 s.
	BodyTimeout time.Duration
	// SSEHeartbeat is how long an event stream stays silent before it sends a keep-alive
	// comment; default 15 s.
	SSEHeartbeat time.Duration
	// Workspaces, when set, is asked for the workspace of every claim of a plan with a
	// repository (the GitHub App mints its token). When it fails, the claim is released
	// and answered 503, so the worker tries again later. nil: no workspaces.
	Workspaces WorkspaceProvider
}

func (c Config) withDefaults() Config {
	if c.MaxClaimWait <= 0 {
		c.MaxClaimWait = 30 * time.Second
	}
	if c.MaxBodyBytes <= 0 {
		c.MaxBodyBytes = 1 << 20
	}
	if c.MaxPlanBytes <= 0 {
		c.MaxPlanBytes = 64 << 20
	}
	if c.SSEHeartbeat <= 0 {
		c.SSEHeartbeat = 15 * time.Second
	}
	if c.HeaderTimeout <= 0 {
		c.HeaderTimeout = 10 * time.Second
	}
	if c.BodyTimeout <= 0 {
		c.BodyTimeout = 30 * time.Second
	}
	return c
}

// Server is the control-plane HTTP API. Serve it with HTTPServer (or an http.Server that
// sets ReadHeaderTimeout); any WriteTimeout works, since long-polling claims push their
// write deadline past their wait and event streams clear theirs.
type Server struct {
	store    *queue.Store
	listener *queue.Listener
	log      *slog.Logger
	cfg      Config
	router   chi.Router
	metrics  *metrics
	workers  workerCache

	drainOnce sync.Once
	draining  chan struct{} // closed by Drain
	// room parks long-polling claims, so that an event wakes only those it can serve.
	room   *waitRoom
	dbDown atomic.Bool // a database outage is under way (logged once; errors.go)
}

// New builds the server over store; listener wakes long-polls and streams and must be
// running (Run) for them to see changes.
func New(store *queue.Store, listener *queue.Listener, log *slog.Logger, cfg Config) *Server {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Server{store: store, listener: listener, log: log, cfg: cfg.withDefaults(), draining: make(chan struct{})}
	s.room = newWaitRoom(listener)
	s.metrics = newMetrics(s)
	s.router = s.routes()
	return s
}

// Handler returns the server's http.Handler.
func (s *Server) Handler() http.Handler { return s.router }

// Mount adds another handler (the webhook receiver) at pattern, for every method. Call it
// before serving.
func (s *Server) Mount(pattern string, h http.Handler) { s.router.Handle(pattern, h) }

// Drain ends waiting claims (answered 204, so their workers claim again elsewhere) and
// event streams (their clients reconnect elsewhere) now and stops new ones from waiting.
// http.Server.Shutdown does not cancel requests in flight: register Drain with
// RegisterOnShutdown so that shutdown is not held up by long-polls and streams.
func (s *Server) Drain() { s.drainOnce.Do(func() { close(s.draining) }) }

// Registry returns the server's Prometheus registry, for other components' metrics.
func (s *Server) Registry() *prometheus.Registry { return s.metrics.reg }

func (s *Server) routes() chi.Router {
	r := chi.NewRouter()
	r.Use(escapedRouting, s.recoverer, s.instrument, s.bodyDeadline)
	r.NotFound(func(w http.ResponseWriter, r *http.Request) {
		s.writeError(w, r, errorf(http.StatusNotFound, codeNotFound, "There is no %s.", r.URL.EscapedPath()))
	})
	r.MethodNotAllowed(func(w http.ResponseWriter, r *http.Request) {
		s.writeError(w, r, errorf(http.StatusMethodNotAllowed, codeMethodNotAllowed, "%s is not allowed on %s.", r.Method, r.URL.EscapedPath()))
	})

	r.Get("/healthz", s.healthz)
	r.Get("/readyz", s.readyz)
	r.Get("/metrics", s.serveMetrics)

	r.Route("/v1", func(r chi.Router) {
		r.Get("/openapi.json", s.serveOpenAPI)
		r.With(s.auth(roleRegistrar)).Post("/workers/register", s.register)
		r.With(s.auth(roleWorker)).Post("/workers/{worker}/heartbeat", s.heartbeat)
		r.With(s.auth(roleWorker)).Post("/workers/{worker}/release", s.releaseHeld)
		r.With(s.auth(roleWorker)).Post("/workers/{worker}/revoke", s.revokeSelf)
		r.With(s.auth(roleReader)).Get("/workers", s.listWorkers)
		r.With(s.auth(roleWorker)).Post("/tasks/claim", s.claim)
		r.With(s.auth(roleWorker)).Get("/tasks/outlook", s.outlook)
		r.With(s.auth(roleWorker)).Get("/workers/me", s.workerMe)

		r.Route("/plans", func(r chi.Router) {
			r.With(s.auth(roleReader)).Get("/", s.listPlans)
			r.With(s.auth(roleAdmin)).Post("/", s.importPlan)
			r.With(s.auth(roleReader)).Get("/{plan}", s.getPlan)
			r.With(s.auth(roleAdmin)).Patch("/{plan}", s.patchPlan)
			r.With(s.auth(roleAdmin)).Post("/{plan}/pause", s.pausePlan)
			r.With(s.auth(roleAdmin)).Post("/{plan}/resume", s.resumePlan)
			r.With(s.auth(roleAdmin)).Post("/{plan}/approve", s.approvePlan)
			r.With(s.auth(roleReader)).Get("/{plan}/tasks", s.listTasks)
			r.With(s.auth(roleAdmin)).Post("/{plan}/tasks", s.addTask)
			r.Route("/{plan}/tasks/{task}", func(r chi.Router) {
				// The worker protocol: worker tokens only.
				r.Group(func(r chi.Router) {
					r.Use(s.auth(roleWorker))
					r.Post("/start", s.start)
					r.Post("/complete", s.complete)
					r.Post("/fail", s.fail)
					r.Post("/release", s.release)
					r.Post("/charge", s.charge)
					r.Post("/events", s.taskEvent)
					r.Post("/attempts/{n}/log", s.appendLog)
				})
				r.With(s.auth(roleReader)).Get("/attempts/{n}/log", s.readLog)
				// Operator changes to one task (tasks.go): admin tokens only.
				r.With(s.auth(roleAdmin)).Patch("/", s.editTask)
				r.With(s.auth(roleAdmin)).Delete("/", s.removeTask)
				r.With(s.auth(roleAdmin)).Post("/reset", s.resetTask)
			})
		})

		r.With(s.auth(roleReader)).Get("/fleet", s.getFleet)
		r.With(s.auth(roleAdmin)).Post("/admin/pause", s.pauseFleet)
		r.With(s.auth(roleAdmin)).Post("/admin/resume", s.resumeFleet)

		r.With(s.auth(roleReader)).Get("/events", s.listEvents)
		r.With(s.auth(roleReader)).Get("/events/stream", s.streamEvents)
	})
	return r
}

// escapedRouting makes chi match the escaped path, so that an id holding "/" (sent as
// %2F) stays one segment; handlers unescape the parameters with param.
func escapedRouting(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if rctx := chi.RouteContext(r.Context()); rctx != nil && rctx.RoutePath == "" {
			rctx.RoutePath = r.URL.EscapedPath()
		}
		next.ServeHTTP(w, r)
	})
}

// param returns the unescaped path parameter name.
func param(r *http.Request, name string) (string, error) {
	raw := chi.URLParam(r, name)
	v, err := url.PathUnescape(raw)
	if err != nil || v == "" {
		return "", errorf(http.StatusBadRequest, codeBadRequest, "The %s in the path is not a valid escaped id.", name)
	}
	if err := checkText("the "+name+" id in the path", v, maxIDBytes); err != nil {
		return "", err
	}
	return v, nil
}
