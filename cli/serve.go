package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/riverqueue/river"
	"github.com/spf13/cobra"

	"github.com/whilly-go/whilly/control"
	"github.com/whilly-go/whilly/internal/config"
	"github.com/whilly-go/whilly/queue"
	"github.com/whilly-go/whilly/sandbox"
	"github.com/whilly-go/whilly/triz"
	"github.com/whilly-go/whilly/web"
)

func (a *app) serveCommand() *cobra.Command {
	var listen string
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the control plane: worker API, events, metrics and background jobs",
		Long: `Run the control plane against the configured database (WHILLY_DATABASE_URL, or the
embedded cluster). It applies migrations under an advisory lock, starts River's background
jobs (lease reaper, offline-worker sweep) and serves the HTTP API on WHILLY_LISTEN
(default 127.0.0.1:8000). Any number of replicas may share one database.

It checks every variable below before it opens the database, builds everything, and only
then listens: a bad configuration exits 2 with all its problems in one message, and
"listening" means it serves. SIGTERM or SIGINT shuts down in order: HTTP, then background
jobs, then the database pool.

Environment (the table of docs/configuration.md):
` + config.Help(config.Serve),
		Example: `  WHILLY_BOOTSTRAP_TOKEN=$(openssl rand -hex 32) WHILLY_LOG_FORMAT=json whilly serve --listen :8000`,
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// A server's log is its record: info by default, not only warnings.
			if err := a.useLogger(slog.LevelInfo); err != nil {
				return err
			}
			// It holds the App key and the database: no process of its user may read its memory.
			if err := sandbox.NotDumpable(); err != nil {
				return envf("%w", err)
			}
			if listen == "" {
				listen = a.cfg.String(config.Listen)
			}
			st, closeDB, err := a.openStore(cmd.Context())
			if err != nil {
				return err
			}
			defer closeDB()
			cp, err := a.newControlPlane(cmd.Context(), st)
			if err != nil {
				return err
			}
			ln, err := (&net.ListenConfig{}).Listen(cmd.Context(), "tcp", listen)
			if err != nil {
				cp.cancel()
				return envf("listen on %s: %w", listen, err)
			}
			return a.serve(cmd.Context(), cp, ln)
		},
	}
	cmd.Flags().StringVar(&listen, "listen", "", "address to listen on (default $WHILLY_LISTEN or 127.0.0.1:8000)")
	return cmd
}

// controlPlane is a running control plane: HTTP server, listener and River.
type controlPlane struct {
	store  *queue.Store // the store with the hooks, built once by newControlPlane
	srv    *http.Server
	done   chan error
	cancel context.CancelFunc
	stop   func(context.Context) error

	ctx      context.Context // cancelled by cancel; the listener's and River's
	jobs     *river.Client[pgx.Tx]
	listener *queue.Listener
	log      *slog.Logger
	// schedules are the extensions' periodic jobs, enqueued from start to shutdown.
	schedules []queue.Schedule
}

// extension plugs a capability (the GitHub App, the TRIZ analyzer) into the control
// plane without the composition root knowing its insides.
type extension struct {
	// register adds River job workers and returns periodic jobs.
	register func(*river.Workers) []*river.PeriodicJob
	// queues are River queues the extension's jobs run in (besides the default one):
	// only processes with the extension work them.
	queues map[string]river.QueueConfig
	// schedules are periodic jobs this process enqueues itself, leader of River or not.
	schedules []queue.Schedule
	// routes are mounted on the control plane's router (pattern → handler).
	routes map[string]http.Handler
	// workspaces gives claims of repository plans their workspace (the GitHub App).
	workspaces control.WorkspaceProvider
	// collectors are the extension's metrics, served on /metrics.
	collectors []prometheus.Collector
	// writeAccess asks GitHub whether a user may still write to a plan's repository (the
	// dashboard's buttons under "Sign in with GitHub").
	writeAccess web.WriteAccess
}

// storeHooks are the store's hooks for the capabilities configured in the environment,
// inserting through jobs: the GitHub App's (mirror, push tokens, dispatch) and the TRIZ
// analyzer's. The store is built with them, before anything that uses it.
func (a *app) storeHooks(jobs *river.Client[pgx.Tx]) (queue.Hooks, error) {
	var h queue.Hooks
	env, hasApp, err := a.readGitHubEnv()
	if err != nil {
		return h, err
	}
	if hasApp {
		h = githubConfig(env, hasApp).Hooks(jobs)
	}
	on, err := a.cfg.Bool(config.TrizEnabled)
	if err != nil {
		return h, envErr(err)
	}
	if on {
		h.TaskFailed = func(ctx context.Context, tx pgx.Tx, f queue.TaskFailure) error {
			return triz.Enqueue(ctx, tx, jobs, f, a.log)
		}
	}
	return h, nil
}

// extensions returns the capabilities configured in the environment, over the one store
// (whose hooks are storeHooks), so what an extension writes fires every hook too.
func (a *app) extensions(ctx context.Context, st *queue.Store, jobs *river.Client[pgx.Tx]) ([]*extension, error) {
	makers := []func(context.Context, *queue.Store, *river.Client[pgx.Tx]) (*extension, error){
		a.githubExtension,
		func(_ context.Context, st *queue.Store, _ *river.Client[pgx.Tx]) (*extension, error) {
			return a.trizExtension(st)
		},
	}
	var exts []*extension
	for _, newExt := range makers {
		e, err := newExt(ctx, st, jobs)
		if err != nil {
			return nil, err
		}
		if e != nil {
			exts = append(exts, e)
		}
	}
	return exts, nil
}

// startControlPlane starts the control plane on ln and returns at once; Shutdown stops
// it in order. Used by `whilly run`, the dashboard and bench.
func (a *app) startControlPlane(ctx context.Context, st *queue.Store, ln net.Listener) (*controlPlane, error) {
	cp, err := a.newControlPlane(ctx, st)
	if err != nil {
		return nil, err
	}
	if err := cp.start(ln); err != nil {
		_ = ln.Close() // nothing was served on it
		return nil, err
	}
	return cp, nil
}

// newControlPlane builds the control plane — extensions, River, the HTTP server — and
// starts nothing, so every error of configuration comes before a port is opened. base
// gives the pool and the store's configuration: the control plane's store is built here,
// once, with its hooks fixed (issue 15), after the insert-only River client they use.
func (a *app) newControlPlane(ctx context.Context, base *queue.Store) (*controlPlane, error) {
	jobs, err := a.jobInserter(base)
	if err != nil {
		return nil, err
	}
	qcfg := base.Config()
	if qcfg.Hooks, err = a.storeHooks(jobs); err != nil {
		return nil, err
	}
	st := queue.NewStore(base.Pool(), a.log, qcfg)
	exts, err := a.extensions(ctx, st, jobs)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	listener := queue.NewListener(st.Pool(), a.log)
	queues := map[string]river.QueueConfig{}
	for _, e := range exts {
		maps.Copy(queues, e.queues)
	}
	rc, err := queue.NewRiver(st, a.log, queue.JobsConfig{Queues: queues, Register: func(w *river.Workers) []*river.PeriodicJob {
		var periodic []*river.PeriodicJob
		for _, e := range exts {
			if e.register != nil {
				periodic = append(periodic, e.register(w)...)
			}
		}
		return periodic
	}})
	if err != nil {
		cancel()
		return nil, err
	}
	var workspaces control.WorkspaceProvider
	for _, e := range exts {
		if workspaces == nil {
			workspaces = e.workspaces
		}
	}
	bootstrap, err := a.cfg.Secret(config.BootstrapToken)
	if err != nil {
		cancel()
		return nil, envErr(err)
	}
	metricsToken, err := a.cfg.Secret(config.MetricsToken)
	if err != nil {
		cancel()
		return nil, envErr(err)
	}
	srv := control.New(st, listener, a.log, control.Config{
		BootstrapToken: bootstrap,
		MetricsToken:   metricsToken,
		Workspaces:     workspaces,
	})
	for _, e := range exts {
		for pattern, h := range e.routes {
			srv.Mount(pattern, h)
		}
		for _, c := range e.collectors {
			if err := srv.Registry().Register(c); err != nil {
				cancel()
				return nil, fmt.Errorf("register metrics: %w", err)
			}
		}
	}
	// The web dashboard at / (after the routes above, which keep their paths).
	dash, err := web.New(st, a.log, web.Config{PublicURL: a.cfg.String(config.PublicURL), Events: srv.StreamEvents, AttemptLog: srv.AttemptLog})
	if err != nil {
		cancel()
		return nil, err
	}
	srv.Mount("/*", dash)
	var access web.WriteAccess
	for _, e := range exts {
		if access == nil {
			access = e.writeAccess
		}
	}
	if err := a.mountOperator(ctx, srv, dash, rc, access); err != nil {
		cancel()
		return nil, err
	}
	hs := srv.HTTPServer()
	// Shutdown does not cancel requests in flight: end long-polls and streams at once.
	hs.RegisterOnShutdown(srv.Drain)
	var schedules []queue.Schedule
	for _, e := range exts {
		schedules = append(schedules, e.schedules...)
	}
	return &controlPlane{store: st, srv: hs, done: make(chan error, 1), cancel: cancel,
		stop: rc.Stop, ctx: ctx, jobs: rc, listener: listener, log: a.log, schedules: schedules}, nil
}

// start runs the LISTEN connection, the background jobs and the HTTP server on ln.
func (cp *controlPlane) start(ln net.Listener) error {
	go func() {
		if err := cp.listener.Run(cp.ctx); err != nil && !errors.Is(err, context.Canceled) {
			cp.log.ErrorContext(cp.ctx, "event listener stopped", "error", err)
		}
	}()
	if err := cp.jobs.Start(cp.ctx); err != nil {
		cp.cancel()
		return fmt.Errorf("start background jobs: %w", err)
	}
	queue.RunSchedules(cp.ctx, cp.jobs, cp.log, cp.schedules)
	go func() { cp.done <- cp.srv.Serve(ln) }()
	return nil
}

// Shutdown stops accepting HTTP, lets requests in flight end, stops River, then the
// listener. The caller closes the pool afterwards.
func (cp *controlPlane) Shutdown(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	errHTTP := cp.srv.Shutdown(ctx)
	errRiver := cp.stop(ctx)
	cp.cancel()
	return errors.Join(errHTTP, errRiver)
}

// serve starts cp on ln, says so, and serves until ctx ends.
func (a *app) serve(ctx context.Context, cp *controlPlane, ln net.Listener) error {
	if err := cp.start(ln); err != nil {
		_ = ln.Close() // nothing was served on it
		return err
	}
	url := "http://" + ln.Addr().String()
	// With JSON logs every line is JSON, wherever the output is collected: the log line
	// alone says it.
	if a.cfg.String(config.LogFormat) != "json" {
		a.printf("whilly control plane listening on %s\n", url)
	}
	a.log.InfoContext(ctx, "listening", "addr", ln.Addr().String(), "url", url)
	select {
	case <-ctx.Done():
	case err := <-cp.done:
		if err != nil && !errors.Is(err, http.ErrServerClosed) {
			_ = cp.Shutdown(context.WithoutCancel(ctx))
			return fmt.Errorf("serve http: %w", err)
		}
	}
	a.log.InfoContext(ctx, "shutting down")
	return cp.Shutdown(context.WithoutCancel(ctx))
}
