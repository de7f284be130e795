// Package testkit holds helpers for tests, and only for tests: a fresh, migrated
// Postgres database per test, cloned from a template on a private cluster that every
// test binary of a `go test` run shares; the fake GitHub of fakegithub wrapped
// to fail the test on what it reports; signed webhook requests from the real payloads;
// Eventually, the one way a test waits for a condition it can only poll.
//
// It imports testing, pglocal, migrations, pgx and pgtestdb; no non-test code may
// import it.
package testkit

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver pgtestdb connects with
	"github.com/peterldowns/pgtestdb"

	"github.com/whilly-go/whilly/internal/pglocal"
	"github.com/whilly-go/whilly/migrations"
)

// DatabaseURLEnv points the tests at an existing server (a postgres:// URL of a role
// that may create roles and databases) instead of the private cluster.
const DatabaseURLEnv = "WHILLY_TEST_DATABASE_URL"

// The role tests connect as. It owns its database but is no superuser, like whilly's
// role on a managed Postgres, so a test cannot pass thanks to privileges production
// lacks.
const (
	testRole     = "whilly_test"
	testPassword = "whilly_test" // only used on servers that ask for one; the private cluster trusts its socket
)

// sharedServer finds (or starts) the server once per test binary.
//
// This is the package's one piece of package-level state, on purpose: every test in a
// binary must share one server lookup, and the tests cannot hand a value to each other.
// sync.OnceValues makes it write-once; across binaries, pglocal's file lock makes the
// private cluster one. (pgtestdb keeps a similar per-binary map of its templates.)
var sharedServer = sync.OnceValues(findServer)

// server is where test databases are made.
type server struct {
	admin pgtestdb.Config // a role that may create roles and databases, on its maintenance database
	base  url.URL         // the server's address and options, to build test DSNs from
}

// DSN returns the connection string of a new database holding whilly's fully migrated
// schema (River's tables included), for this test alone. The database is dropped when
// the test ends, unless it failed: then it is kept for inspection and its DSN logged.
func DSN(t testing.TB) string {
	t.Helper()
	return dsn(t, sharedServer)
}

// DB returns a pool on a new database from DSN, closed when the test ends.
func DB(t testing.TB) *pgxpool.Pool {
	t.Helper()
	d := DSN(t)
	pool, err := pgxpool.New(context.Background(), d)
	if err != nil {
		t.Fatalf("testkit: open pool on the test database: %v", err)
	}
	// Registered after DSN's cleanup, so it runs first: the pool is closed before the
	// database is dropped.
	t.Cleanup(pool.Close)
	return pool
}

func dsn(t testing.TB, get func() (*server, error)) string {
	t.Helper()
	srv, err := get()
	if err != nil {
		t.Fatalf("testkit: no test database: %v\n"+
			"Tests need PostgreSQL: install it (e.g. `apt-get install postgresql`, `brew install postgresql`) "+
			"or set %s to a server where a superuser may create roles and databases.", err, DatabaseURLEnv)
		return ""
	}
	inst := pgtestdb.Custom(t, srv.admin, migrator{})
	u := srv.base
	u.User = url.UserPassword(inst.User, inst.Password)
	u.Path = "/" + inst.Database
	return u.String()
}

// findServer uses WHILLY_TEST_DATABASE_URL, else starts (or reuses) the private cluster.
func findServer() (*server, error) {
	if raw := os.Getenv(DatabaseURLEnv); raw != "" {
		srv, err := newServer(raw)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", DatabaseURLEnv, err)
		}
		return srv, nil
	}
	dir, err := clusterDir()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := pglocal.EnsureWith(ctx, dir, nil, pglocal.Options{Fast: true})
	if err != nil {
		return nil, fmt.Errorf("start the test cluster (delete %s to start afresh): %w", dir, err)
	}
	u, err := url.Parse(c.URL)
	if err != nil {
		return nil, fmt.Errorf("parse cluster URL: %w", err)
	}
	u.Path = "/postgres"
	dropOldFailures(ctx, u.String())
	return newServer(u.String())
}

// dropOldFailures drops the databases of failed tests (pgtestdb keeps them for
// inspection) once they are a day old, so that the long-lived private cluster does not
// grow without bound. It is housekeeping: when it fails, the tests go on regardless.
func dropOldFailures(ctx context.Context, adminURL string) {
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return
	}
	defer func() { _ = conn.Close(ctx) }()
	// PG_VERSION is written when a database is created and never again.
	rows, err := conn.Query(ctx, `
		SELECT datname FROM pg_database
		 WHERE datname LIKE 'testdb\_tpl\_%\_inst\_%' AND NOT datistemplate
		   AND (pg_stat_file('base/' || oid || '/PG_VERSION')).modification < now() - interval '24 hours'`)
	if err != nil {
		return
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return
	}
	for _, name := range names {
		_, _ = conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
	}
}

// clusterDir is the private cluster's home: one per user and checkout, so that every
// package binary of one `go test ./...` finds the same one and two checkouts never mix.
// It is left running after the tests: the next run reuses it in milliseconds.
func clusterDir() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("find the module directory: %w", err)
	}
	root := wd
	for {
		if _, err := os.Stat(filepath.Join(root, "go.mod")); err == nil {
			break
		}
		parent := filepath.Dir(root)
		if parent == root {
			root = wd
			break
		}
		root = parent
	}
	sum := sha256.Sum256([]byte(root))
	name := fmt.Sprintf("whilly-test-%d-%s", os.Getuid(), hex.EncodeToString(sum[:6]))
	return filepath.Join(clusterParent(name), name), nil
}

// clusterParent prefers /dev/shm, when it is there with room to spare (Linux; Docker's
// default 64 MB is not enough), over the temp directory: cloning a database creates a
// few hundred files, which takes 100-200 ms on ext4 and about 10 ms on tmpfs. A
// cluster that already exists in /dev/shm is kept whatever the room, so that every
// test binary picks the same place.
func clusterParent(name string) string {
	const shm = "/dev/shm"
	if _, err := os.Stat(filepath.Join(shm, name)); err == nil {
		return shm
	}
	var st syscall.Statfs_t
	if err := syscall.Statfs(shm, &st); err == nil && uint64(st.Bavail)*uint64(st.Bsize) >= 2<<30 { //nolint:unconvert // the field types vary by OS
		const wOK, xOK = 2, 1 // access(2) modes, the same on every Unix
		if syscall.Access(shm, wOK|xOK) == nil {
			return shm
		}
	}
	return os.TempDir()
}

// newServer turns an administrator's postgres:// URL into a pgtestdb configuration.
// pgtestdb formats its own URLs (postgres://user:password@host:port/db?options), so
// the user and password are escaped here, and a unix socket directory travels in the
// options as host=, which pgx honours over the empty host of the URL.
func newServer(raw string) (*server, error) {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		return nil, errors.New("not a postgres:// URL")
	}
	user := u.User.Username()
	password, _ := u.User.Password()
	escUser, escPassword, _ := strings.Cut(url.UserPassword(user, password).String(), ":")
	host, port := u.Hostname(), u.Port()
	if h, p, err := net.SplitHostPort(u.Host); err == nil {
		host, port = h, p
	}
	if host != "" && port == "" {
		port = "5432"
	}
	db := strings.TrimPrefix(u.Path, "/")
	if db == "" {
		db = "postgres"
	}
	base := url.URL{Scheme: "postgres", Host: u.Host, RawQuery: u.RawQuery}
	return &server{
		admin: pgtestdb.Config{
			DriverName: "pgx",
			Host:       host,
			Port:       port,
			User:       escUser,
			Password:   escPassword,
			Database:   db,
			Options:    u.RawQuery,
			TestRole: &pgtestdb.Role{
				Username:     testRole,
				Password:     testPassword,
				Capabilities: "NOSUPERUSER NOCREATEDB NOCREATEROLE",
			},
			// A test that leaks a connection must not keep its database alive.
			ForceTerminateConnections: true,
		},
		base: base,
	}, nil
}

// migrator builds the template database with migrations.Up. Its hash covers whilly's
// and River's migrations, so a changed migration gets a new template.
type migrator struct{}

func (migrator) Hash() (string, error) { return migrations.Fingerprint() }

func (migrator) Migrate(ctx context.Context, _ *sql.DB, conf pgtestdb.Config) error {
	pool, err := pgxpool.New(ctx, conf.URL())
	if err != nil {
		return fmt.Errorf("open pool on the template database: %w", err)
	}
	defer pool.Close()
	if _, err := migrations.Up(ctx, pool); err != nil {
		return fmt.Errorf("migrate the template database: %w", err)
	}
	return nil
}

// WaitingOnLock waits until a statement beginning with prefix waits for a lock in the
// database of pool (pg_stat_activity), failing the test after 10 s: the moment a test
// needs to act while a transaction holds what that statement wants.
func WaitingOnLock(t testing.TB, pool *pgxpool.Pool, prefix string) {
	t.Helper()
	Eventually(t, 10*time.Second, "a statement "+prefix+"… waiting for a lock", func() bool {
		var waits bool
		if err := pool.QueryRow(context.Background(), `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND starts_with(query, $1))`, prefix).Scan(&waits); err != nil {
			t.Fatalf("read pg_stat_activity: %v", err)
		}
		return waits
	})
}
