package testkit

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/whilly-go/whilly/migrations"
)

func TestDBIsMigratedAndPrivate(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	a, b := DB(t), DB(t)

	states, err := migrations.Status(ctx, a)
	if err != nil {
		t.Fatalf("migrations.Status: %v", err)
	}
	for _, s := range states {
		if !s.Applied {
			t.Errorf("%s migration %d (%s) is pending in a test database", s.Line, s.Version, s.Name)
		}
	}

	if _, err := a.Exec(ctx, "INSERT INTO plans (id, name) VALUES ('p1', 'only in a')"); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := b.QueryRow(ctx, "SELECT count(*) FROM plans").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("database b sees %d plans of database a", n)
	}

	var super bool
	if err := a.QueryRow(ctx, "SELECT rolsuper FROM pg_roles WHERE rolname = current_user").Scan(&super); err != nil {
		t.Fatal(err)
	}
	if super {
		t.Error("tests connect as a superuser")
	}
}

func TestDSNIsDroppedAfterTest(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	var name string
	t.Run("inner", func(t *testing.T) {
		pool := DB(t)
		if err := pool.QueryRow(ctx, "SELECT current_database()").Scan(&name); err != nil {
			t.Fatal(err)
		}
	})
	pool := DB(t)
	var exists bool
	if err := pool.QueryRow(ctx, "SELECT EXISTS (SELECT FROM pg_database WHERE datname = $1)", name).Scan(&exists); err != nil {
		t.Fatal(err)
	}
	if exists {
		t.Errorf("database %s of a finished test still exists", name)
	}
}

// fatalRecorder captures Fatalf instead of failing the real test.
type fatalRecorder struct {
	testing.TB
	msg string
}

func (r *fatalRecorder) Helper() {}

func (r *fatalRecorder) Fatalf(format string, args ...any) {
	r.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func TestNoServerFailsClearly(t *testing.T) {
	t.Parallel()
	rec := &fatalRecorder{TB: t}
	var wg sync.WaitGroup
	wg.Go(func() {
		dsn(rec, func() (*server, error) { return nil, errors.New("no binaries here") })
	})
	wg.Wait()
	for _, want := range []string{"no binaries here", "install", DatabaseURLEnv} {
		if !strings.Contains(rec.msg, want) {
			t.Errorf("failure message %q does not mention %q", rec.msg, want)
		}
	}
}

func TestNewServerFromURL(t *testing.T) {
	t.Parallel()
	srv, err := newServer("postgres://ad%40min:p%40ss:w@db.example:6543/maint?sslmode=require")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := pgconn.ParseConfig(srv.admin.URL())
	if err != nil {
		t.Fatalf("pgx cannot parse pgtestdb's URL %s: %v", srv.admin.URL(), err)
	}
	if cfg.User != "ad@min" || cfg.Password != "p@ss:w" || cfg.Host != "db.example" || cfg.Port != 6543 ||
		cfg.Database != "maint" || cfg.TLSConfig == nil {
		t.Errorf("pgtestdb's URL %s means %+v", srv.admin.URL(), cfg)
	}
	if _, err := newServer("host=/tmp dbname=x"); err == nil {
		t.Error("a keyword/value DSN was accepted")
	}
}

// BenchmarkDSN measures the cost of one test database: cloning the template (the
// databases are dropped when the benchmark ends).
func BenchmarkDSN(b *testing.B) {
	DSN(b) // make sure the cluster and the template exist
	for b.Loop() {
		DSN(b)
	}
}
