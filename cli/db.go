package cli

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/whilly-go/whilly/internal/config"
	"github.com/whilly-go/whilly/internal/pglocal"
	"github.com/whilly-go/whilly/migrations"
	"github.com/whilly-go/whilly/queue"
)

// databaseURL returns WHILLY_DATABASE_URL, or starts (or reuses) the embedded cluster and
// returns its URL.
func (a *app) databaseURL(ctx context.Context) (string, error) {
	if u := a.cfg.Raw(config.DatabaseURL); u != "" {
		return u, nil
	}
	c, err := pglocal.Ensure(ctx, a.dataDir(), a.log)
	if err != nil {
		return "", envf("start the embedded database: %w", err)
	}
	shareCores()
	return c.URL, nil
}

// shareCores leaves a core to the embedded Postgres, which runs on this machine and does
// the work whilly waits on: Go's idle threads spin looking for work, and on a small
// machine they take the database's CPU (on 2 cores, bench claims made about 15% more
// claims per second with GOMAXPROCS=1). GOMAXPROCS set in the environment wins.
func shareCores() {
	if os.Getenv("GOMAXPROCS") != "" {
		return
	}
	if n := runtime.NumCPU() - 1; n >= 1 && n < runtime.GOMAXPROCS(0) {
		runtime.GOMAXPROCS(n)
	}
}

func (a *app) dataDir() string {
	return pglocal.DefaultDataDir(a.cfg)
}

// poolConfig is the configured database's pool configuration.
func (a *app) poolConfig(ctx context.Context) (*pgxpool.Config, error) {
	url, err := a.databaseURL(ctx)
	if err != nil {
		return nil, err
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, envf("WHILLY_DATABASE_URL is not a valid Postgres URL: %w", err)
	}
	if !strings.Contains(url, "pool_max_conns") {
		cfg.MaxConns = defaultPoolSize(a.cfg.Raw(config.DatabaseURL) == "", runtime.NumCPU())
	}
	return cfg, nil
}

// defaultPoolSize is the pool's size when the URL does not set pool_max_conns: 16, or 4
// per core when the embedded cluster shares a machine of fewer than 4 cores. pgx's own
// default (4 on a 2-core machine) makes a control plane's requests queue for connections
// long before Postgres is busy; 16 busy connections on 2 cores make every statement wait
// for a core instead (bench scale on 2 cores: first claim p50 187–376 ms and p99
// 513–852 ms over eight runs with 16, p50 126–398 ms and p99 246–688 ms over eight with 8;
// the medians of the runs 250 and 711 ms against 152 and 401 ms).
func defaultPoolSize(embedded bool, cores int) int32 {
	if embedded && cores < 4 {
		return int32(4 * max(cores, 1))
	}
	return 16
}

// connect opens a pool on the configured database and checks it answers.
func (a *app) connect(ctx context.Context) (*pgxpool.Pool, error) {
	cfg, err := a.poolConfig(ctx)
	if err != nil {
		return nil, err
	}
	return a.openPool(ctx, cfg)
}

// openPool opens a pool and checks that the database answers.
func (a *app) openPool(ctx context.Context, cfg *pgxpool.Config) (*pgxpool.Pool, error) {
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, envf("open database: %w", err)
	}
	pingCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := pool.Ping(pingCtx); err != nil {
		pool.Close()
		return nil, envf("cannot reach the database (%v); check WHILLY_DATABASE_URL or unset it to use the embedded one", err)
	}
	return pool, nil
}

// openDB connects and brings the schema up to date (under the migration lock, so
// concurrent commands are safe). The caller closes the pool.
func (a *app) openDB(ctx context.Context) (*pgxpool.Pool, error) {
	pool, err := a.connect(ctx)
	if err != nil {
		return nil, err
	}
	if _, err := migrations.Up(ctx, pool); err != nil {
		pool.Close()
		return nil, envf("migrate the database: %w", err)
	}
	return pool, nil
}

// openStore is openDB with a store without hooks over it, for commands that run no
// control plane. The caller closes the pool.
func (a *app) openStore(ctx context.Context) (*queue.Store, func(), error) {
	pool, err := a.openDB(ctx)
	if err != nil {
		return nil, nil, err
	}
	cfg, err := a.queueConfig()
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	return queue.NewStore(pool, a.log, cfg), pool.Close, nil
}

// queueConfig reads the queue tuning variables.
func (a *app) queueConfig() (queue.Config, error) {
	ttl, err := a.cfg.Duration(config.LeaseTTL)
	if err != nil {
		return queue.Config{}, envErr(err)
	}
	attempts, err := a.maxAttempts()
	if err != nil {
		return queue.Config{}, err
	}
	return queue.Config{LeaseTTL: ttl, MaxAttempts: attempts}, nil
}

// maxAttempts reads WHILLY_MAX_ATTEMPTS, the attempt limit of tasks that name none.
func (a *app) maxAttempts() (int, error) {
	n, err := a.cfg.Int(config.MaxAttempts)
	return n, envErr(err)
}

// printf writes to stdout; write errors on a terminal are not actionable.
func (a *app) printf(format string, args ...any) {
	_, _ = fmt.Fprintf(a.io.Out, format, args...)
}
