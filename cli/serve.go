package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/whilly-go/whilly/internal/config"
	"github.com/whilly-go/whilly/sandbox"
	"github.com/whilly-go/whilly/server"
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
			pool, err := a.openDB(cmd.Context())
			if err != nil {
				return err
			}
			defer pool.Close()
			cp, err := a.newControlPlane(cmd.Context(), pool)
			if err != nil {
				return err
			}
			ln, err := (&net.ListenConfig{}).Listen(cmd.Context(), "tcp", listen)
			if err != nil {
				_ = cp.Shutdown(cmd.Context())
				return envf("listen on %s: %w", listen, err)
			}
			return a.serve(cmd.Context(), cp, ln)
		},
	}
	cmd.Flags().StringVar(&listen, "listen", "", "address to listen on (default $WHILLY_LISTEN or 127.0.0.1:8000)")
	return cmd
}

// serverConfig is the control plane's configuration in the environment
// (server.FromEnv), every problem of it at once (exit 2).
func (a *app) serverConfig() (server.Config, error) {
	cfg, err := server.FromEnv(a.io.Getenv)
	return cfg, serverErr(err)
}

// serverErr makes a problem of the control plane's configuration exit 2.
func serverErr(err error) error {
	var ce *server.ConfigError
	if errors.As(err, &ce) {
		return envErr(err)
	}
	return err
}

// newControlPlane builds the control plane of the environment over pool (server.New)
// and starts nothing, so every error of configuration comes before a port is opened.
// edits change the configuration read from the environment (the benchmarks', the
// tests').
func (a *app) newControlPlane(ctx context.Context, pool *pgxpool.Pool, edits ...func(*server.Config)) (*server.Server, error) {
	cfg, err := a.serverConfig()
	if err != nil {
		return nil, err
	}
	for _, edit := range edits {
		edit(&cfg)
	}
	cp, err := server.New(ctx, pool, a.log, cfg)
	return cp, serverErr(err)
}

// startControlPlane builds the control plane (newControlPlane) and starts it on ln,
// returning at once; Shutdown stops it in order. Used by `whilly run`, the dashboard
// and bench.
func (a *app) startControlPlane(ctx context.Context, pool *pgxpool.Pool, ln net.Listener, edits ...func(*server.Config)) (*server.Server, error) {
	cp, err := a.newControlPlane(ctx, pool, edits...)
	if err != nil {
		_ = ln.Close() // nothing was served on it
		return nil, err
	}
	if err := cp.Start(ln); err != nil {
		return nil, err
	}
	return cp, nil
}

// localControlPlane is the in-process control plane of `whilly run` and `whilly
// dashboard`: the one `whilly serve` runs (startControlPlane), over the configured
// database, on a loopback port at url. stop shuts it down, then closes the pool.
func (a *app) localControlPlane(ctx context.Context) (cp *server.Server, url string, stop func(), err error) {
	pool, err := a.openDB(ctx)
	if err != nil {
		return nil, "", nil, err
	}
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		pool.Close()
		return nil, "", nil, envf("listen on a loopback port: %w", err)
	}
	if cp, err = a.startControlPlane(ctx, pool, ln); err != nil {
		pool.Close()
		return nil, "", nil, err
	}
	stop = func() {
		if err := cp.Shutdown(context.WithoutCancel(ctx)); err != nil {
			a.log.WarnContext(ctx, "stop the local control plane", "error", err)
		}
		pool.Close()
	}
	return cp, "http://" + ln.Addr().String(), stop, nil
}

// serve starts cp on ln, says so, and serves until ctx ends.
func (a *app) serve(ctx context.Context, cp *server.Server, ln net.Listener) error {
	if err := cp.Start(ln); err != nil {
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
	case <-cp.Done():
		if err := cp.Err(); err != nil && !errors.Is(err, http.ErrServerClosed) {
			_ = cp.Shutdown(context.WithoutCancel(ctx))
			return fmt.Errorf("serve http: %w", err)
		}
	}
	a.log.InfoContext(ctx, "shutting down")
	return cp.Shutdown(context.WithoutCancel(ctx))
}
