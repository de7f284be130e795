// Package server is the control plane as a value: FromEnv reads its configuration, New
// builds it — the one store with its hooks, River with its queues, the GitHub App, the
// TRIZ analyzer, the HTTP API, the web page and the webhook — and Start serves it.
// Every command that runs a control plane (serve, run, dashboard, forge, bench) and the
// tests that need one build it here, so what they run is what `whilly serve` runs.
//
// Each capability builds its own part (githubPart, trizPart, operator…), in a file of
// its own; New only composes them.
package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/riverqueue/river"

	"github.com/whilly-go/whilly/control"
	"github.com/whilly-go/whilly/intake"
	"github.com/whilly-go/whilly/queue"
	"github.com/whilly-go/whilly/web"
)

// part is what a capability (the GitHub App, the TRIZ analyzer) plugs into the control
// plane, without New knowing its insides.
type part struct {
	// register adds River job workers and returns periodic jobs.
	register func(*river.Workers) []*river.PeriodicJob
	// queues are River queues the part's jobs run in (besides the default one): only
	// processes with the part work them.
	queues map[string]river.QueueConfig
	// schedules are periodic jobs this process enqueues itself, leader of River or not.
	schedules []queue.Schedule
	// routes are mounted on the control plane's router (pattern → handler).
	routes map[string]http.Handler
	// workspaces gives claims of repository plans their workspace (the GitHub App).
	workspaces control.WorkspaceProvider
	// collectors are the part's metrics, served on /metrics.
	collectors []prometheus.Collector
	// writeAccess asks GitHub whether a user may still write to a plan's repository (the
	// dashboard's buttons under "Sign in with GitHub").
	writeAccess web.WriteAccess
	// github is the GitHub side's assembly (whilly forge takes issues in through it).
	github *intake.GitHub
}

// Server is a control plane: built by New, served by Start, stopped by Shutdown.
type Server struct {
	store    *queue.Store // the one store, with the hooks
	control  *control.Server
	http     *http.Server
	jobs     *river.Client[pgx.Tx]
	listener *queue.Listener
	log      *slog.Logger
	github   *intake.GitHub
	// schedules are the parts' periodic jobs, enqueued from Start to Shutdown.
	schedules []queue.Schedule

	ctx    context.Context // cancelled by cancel; the listener's and River's
	cancel context.CancelFunc

	started  bool
	routines sync.WaitGroup // the LISTEN connection and the HTTP server
	served   chan struct{}  // closed when the HTTP server's Serve returns
	serveErr error          // what it returned
}

// New builds the control plane over pool and starts nothing, so that every error of
// configuration comes before a port is opened (a *ConfigError for those). The store is
// built here, once, with its hooks fixed, after the insert-only River client they use.
// ctx bounds the control plane's background work until Shutdown.
func New(ctx context.Context, pool *pgxpool.Pool, log *slog.Logger, cfg Config) (*Server, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	// The inserter puts jobs in the configured queues (a benchmark's own), with no hooks.
	jobs, err := queue.NewInserter(queue.NewStore(pool, log, cfg.Queue))
	if err != nil {
		return nil, asConfigError(err)
	}
	qcfg := cfg.Queue
	qcfg.Hooks = StoreHooks(cfg, jobs, log)
	st := queue.NewStore(pool, log, qcfg)
	parts, err := buildParts(ctx, st, jobs, log, cfg)
	if err != nil {
		return nil, err
	}
	rc, err := newRiver(st, log, cfg, parts)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	s := &Server{store: st, jobs: rc, listener: queue.NewListener(st.Pool(), log), log: log,
		ctx: ctx, cancel: cancel, served: make(chan struct{})}
	if err := s.buildHTTP(ctx, cfg, parts); err != nil {
		cancel()
		return nil, err
	}
	for _, p := range parts {
		s.schedules = append(s.schedules, p.schedules...)
		if s.github == nil {
			s.github = p.github
		}
	}
	return s, nil
}

// buildParts returns the capabilities cfg configures, over the one store (whose hooks
// are StoreHooks), so what a part writes fires every hook too.
func buildParts(ctx context.Context, st *queue.Store, jobs *river.Client[pgx.Tx], log *slog.Logger, cfg Config) ([]*part, error) {
	makers := []func() (*part, error){
		func() (*part, error) { return githubPart(ctx, st, jobs, log, cfg) },
		func() (*part, error) { return trizPart(st, log, cfg) },
	}
	var parts []*part
	for _, newPart := range makers {
		p, err := newPart()
		if err != nil {
			return nil, err
		}
		if p != nil {
			parts = append(parts, p)
		}
	}
	return parts, nil
}

// newRiver is the control plane's River client: the default queue and the parts'.
func newRiver(st *queue.Store, log *slog.Logger, cfg Config, parts []*part) (*river.Client[pgx.Tx], error) {
	queues := map[string]river.QueueConfig{}
	for _, p := range parts {
		maps.Copy(queues, p.queues)
	}
	return queue.NewRiver(st, log, queue.JobsConfig{Queues: queues, PollInterval: cfg.PollInterval, Register: func(w *river.Workers) []*river.PeriodicJob {
		var periodic []*river.PeriodicJob
		for _, p := range parts {
			if p.register != nil {
				periodic = append(periodic, p.register(w)...)
			}
		}
		return periodic
	}})
}

// buildHTTP builds the HTTP API with the parts' routes and metrics, the web dashboard at
// / and the operator's additions to it.
func (s *Server) buildHTTP(ctx context.Context, cfg Config, parts []*part) error {
	var workspaces control.WorkspaceProvider
	var access web.WriteAccess
	for _, p := range parts {
		if workspaces == nil {
			workspaces = p.workspaces
		}
		if access == nil {
			access = p.writeAccess
		}
	}
	srv := control.New(s.store, s.listener, s.log, control.Config{
		BootstrapToken: cfg.BootstrapToken,
		MetricsToken:   cfg.MetricsToken,
		Workspaces:     workspaces,
	})
	for _, p := range parts {
		for pattern, h := range p.routes {
			srv.Mount(pattern, h)
		}
		for _, c := range p.collectors {
			if err := srv.Registry().Register(c); err != nil {
				return fmt.Errorf("register metrics: %w", err)
			}
		}
	}
	// The web dashboard at / (after the routes above, which keep their paths).
	dash, err := web.New(s.store, s.log, web.Config{PublicURL: cfg.PublicURL, Events: srv.StreamEvents, AttemptLog: srv.AttemptLog})
	if err != nil {
		return err
	}
	srv.Mount("/*", dash)
	if err := mountOperator(ctx, srv, dash, s.jobs, access, cfg, s.log); err != nil {
		return err
	}
	hs := srv.HTTPServer()
	// Shutdown does not cancel requests in flight: end long-polls and streams at once.
	hs.RegisterOnShutdown(srv.Drain)
	s.control, s.http = srv, hs
	return nil
}

// Store is the control plane's store, with its hooks: what the control plane's owner
// writes through it fires them as the API's writes do.
func (s *Server) Store() *queue.Store { return s.store }

// Handler is the control plane's HTTP handler (the API, the webhook, the web page).
func (s *Server) Handler() http.Handler { return s.http.Handler }

// Jobs is the control plane's River client: it inserts jobs, and works them once
// started.
func (s *Server) Jobs() *river.Client[pgx.Tx] { return s.jobs }

// GitHub is the GitHub side's assembly, or nil without the App (or, with
// GitHub.IntakeOnly, the token).
func (s *Server) GitHub() *intake.GitHub { return s.github }

// Start runs the LISTEN connection, the background jobs and the HTTP server on ln, and
// returns at once. On an error ln is closed and the control plane stopped.
func (s *Server) Start(ln net.Listener) error {
	s.started = true
	s.routines.Go(func() {
		if err := s.listener.Run(s.ctx); err != nil && !errors.Is(err, context.Canceled) {
			s.log.ErrorContext(s.ctx, "event listener stopped", "error", err)
		}
	})
	if err := s.jobs.Start(s.ctx); err != nil {
		_ = ln.Close() // nothing was served on it
		s.cancel()
		close(s.served)
		s.routines.Wait()
		return fmt.Errorf("start background jobs: %w", err)
	}
	queue.RunSchedules(s.ctx, s.jobs, s.log, s.schedules)
	s.routines.Go(func() {
		s.serveErr = s.http.Serve(ln)
		close(s.served)
	})
	return nil
}

// Done is closed when the HTTP server stops serving: at Shutdown, or on an error of its
// listener (Err says which).
func (s *Server) Done() <-chan struct{} { return s.served }

// Err is what the HTTP server's Serve returned once Done is closed: http.ErrServerClosed
// after Shutdown.
func (s *Server) Err() error {
	<-s.served
	return s.serveErr
}

// Shutdown stops accepting HTTP, lets requests in flight end, stops River, then the
// listener, and returns when the listener and the HTTP server have returned. The
// caller closes the pool afterwards. A control plane never started is only let go.
func (s *Server) Shutdown(ctx context.Context) error {
	if !s.started {
		s.cancel()
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	errHTTP := s.http.Shutdown(ctx)
	errRiver := s.jobs.Stop(ctx)
	s.cancel()
	s.routines.Wait()
	return errors.Join(errHTTP, errRiver)
}
