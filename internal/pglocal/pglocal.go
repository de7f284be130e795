// Package pglocal owns the embedded PostgreSQL cluster: the private server whilly runs
// in its data directory when WHILLY_DATABASE_URL is unset, and the one all test
// packages share. It finds the server binaries on the machine, runs initdb once, starts
// the server (or reuses a running one), serializes all of that across processes with a
// file lock, and stops it. The server listens only on a unix socket in a directory only
// its owner can enter, with trust authentication on that socket; TCP is off.
//
// It imports pgx only to create the whilly database, and must not import any other
// whilly package: it knows nothing of the schema (that is package migrations).
package pglocal

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/whilly-go/whilly/internal/config"
)

const (
	// Superuser is the role initdb creates (initdb -U); every connection uses it.
	Superuser = "whilly"
	// Database is the database Ensure creates for whilly.
	Database = "whilly"

	port       = 5432
	socketName = ".s.PGSQL.5432"
	// maxSocketPath is the longest unix socket path that fits in sockaddr_un.sun_path
	// on every supported system (104 bytes on macOS, 108 on Linux, both counting NUL).
	maxSocketPath       = 103
	defaultStartTimeout = 60 * time.Second
	// maxLogSize bounds pg.log: a bigger one is moved to pg.log.1 before a start.
	maxLogSize = 16 << 20
	confFile   = "whilly.conf"
)

// Options tune a cluster started by EnsureWith. They apply when the server is started;
// a running server is reused as it is.
type Options struct {
	// Fast trades crash safety for speed: fsync, synchronous_commit and
	// full_page_writes off, and initdb skips its final sync. Only for throwaway test
	// clusters — a crash of the machine can corrupt such a cluster.
	Fast bool
	// StartTimeout bounds the server start (including crash recovery) and the first
	// connection. Zero means 60s.
	StartTimeout time.Duration
}

// Cluster is a running embedded cluster.
type Cluster struct {
	Dir       string // the whilly data directory (absolute); what Stop and Status take
	URL       string // DSN of the whilly database for pgx and psql, over the unix socket
	PGData    string // <Dir>/pg, the server's data directory
	SocketDir string // directory of the server's unix socket
	LogFile   string // <Dir>/pg.log, the server's log
	BinDir    string // directory of the server binaries in use
	Version   string // server version of BinDir, e.g. "15.18"
	PID       int    // postmaster process id
	Started   bool   // whether this call started the server (false: it was running)
}

// State describes a cluster without changing it; see Status.
type State struct {
	DataDir     string `json:"data_dir"`
	PGData      string `json:"pgdata"`
	LogFile     string `json:"log_file"`
	Initialized bool   `json:"initialized"`           // initdb has run
	Running     bool   `json:"running"`               // a postmaster is alive
	PID         int    `json:"pid,omitempty"`         // postmaster process id when Running
	SocketDir   string `json:"socket_dir"`            // where the socket is (or will be)
	URL         string `json:"url,omitempty"`         // DSN of the whilly database; set when Initialized
	BinDir      string `json:"bin_dir,omitempty"`     // binaries that can run this cluster; empty when none are found
	BinVersion  string `json:"bin_version,omitempty"` // server version in BinDir
	Version     string `json:"version,omitempty"`     // major version the cluster was created with (PG_VERSION)
}

// String renders the state for people, one "name: value" line each.
func (s State) String() string {
	var b strings.Builder
	line := func(name, value string) { fmt.Fprintf(&b, "%-15s %s\n", name+":", value) }
	line("data directory", s.DataDir)
	switch {
	case !s.Initialized:
		line("cluster", "not created yet (the next whilly command creates it)")
	case s.Running:
		line("cluster", fmt.Sprintf("PostgreSQL %s, running (pid %d)", s.Version, s.PID))
	default:
		line("cluster", fmt.Sprintf("PostgreSQL %s, stopped (the next whilly command starts it)", s.Version))
	}
	if s.URL != "" {
		line("url", s.URL)
	}
	if s.BinDir != "" {
		line("binaries", fmt.Sprintf("%s (PostgreSQL %s)", s.BinDir, s.BinVersion))
	} else {
		line("binaries", "none found")
	}
	line("log", s.LogFile)
	return b.String()
}

// DefaultDataDir returns WHILLY_DATA_DIR, else $XDG_DATA_HOME/whilly, else
// ~/.local/share/whilly.
func DefaultDataDir(env *config.Env) string {
	if d := env.Raw(config.DataDir); d != "" {
		return d
	}
	if d := os.Getenv("XDG_DATA_HOME"); filepath.IsAbs(d) { // the XDG spec ignores relative values
		return filepath.Join(d, "whilly")
	}
	home, err := os.UserHomeDir()
	if err != nil || home == "" {
		return filepath.Join(os.TempDir(), "whilly-"+strconv.Itoa(os.Getuid()))
	}
	return filepath.Join(home, ".local", "share", "whilly")
}

// Ensure returns the cluster in dataDir, running: it runs initdb the first time, starts
// the server when it is not running, and creates the whilly database when missing.
// Concurrent calls, from goroutines or processes, end up sharing one server.
func Ensure(ctx context.Context, dataDir string, log *slog.Logger) (*Cluster, error) {
	return EnsureWith(ctx, dataDir, log, Options{})
}

// EnsureWith is Ensure with options.
func EnsureWith(ctx context.Context, dataDir string, log *slog.Logger, opts Options) (*Cluster, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if opts.StartTimeout <= 0 {
		opts.StartTimeout = defaultStartTimeout
	}
	l, err := newLayout(dataDir)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(l.dir, 0o700); err != nil {
		return nil, fmt.Errorf("create data directory: %w", err)
	}
	unlock, err := lockFile(ctx, l.lockFile)
	if err != nil {
		return nil, fmt.Errorf("lock data directory %s: %w", l.dir, err)
	}
	defer unlock()
	c, err := ensureLocked(ctx, l, log, opts)
	if err != nil {
		return nil, fmt.Errorf("ensure postgres cluster in %s: %w", l.dir, err)
	}
	return c, nil
}

func ensureLocked(ctx context.Context, l layout, log *slog.Logger, opts Options) (*Cluster, error) {
	o, err := clusterOwner(l.pgdata)
	if err != nil {
		return nil, err
	}
	major, initialized, err := clusterVersion(l.pgdata)
	if err != nil {
		return nil, err
	}
	bin, err := findBinaries(ctx, binaryCandidates(ctx), major)
	if err != nil {
		if initialized {
			return nil, fmt.Errorf("find PostgreSQL %d binaries to run the existing cluster in %s: %w", major, l.pgdata, err)
		}
		return nil, err
	}
	if err := o.grantTraversal(ctx, l.dir, log); err != nil {
		return nil, err
	}
	if !initialized {
		if err := initCluster(ctx, l, o, bin, opts, log); err != nil {
			return nil, err
		}
	} else if st, err := statT(l.pgdata); err == nil && o.switchUser && st.Uid == 0 {
		log.InfoContext(ctx, "giving a root-owned postgres cluster to the database user",
			slog.String("path", l.pgdata), slog.String("user", o.name))
		if err := o.chownTree(l.pgdata); err != nil {
			return nil, err
		}
	}

	c := &Cluster{Dir: l.dir, PGData: l.pgdata, LogFile: l.logFile, BinDir: bin.dir, Version: bin.version, SocketDir: l.socketDir}
	pid, running := runningServer(l.pgdata)
	if !running {
		log.InfoContext(ctx, "starting postgres", slog.String("data_dir", l.pgdata),
			slog.String("bin_dir", bin.dir), slog.String("user", o.name))
		if err := startServer(ctx, l, o, bin, opts, log); err != nil {
			return nil, err
		}
		c.Started = true
		if pid, running = runningServer(l.pgdata); !running {
			return nil, fmt.Errorf("postgres exited right after starting; see %s", l.logFile)
		}
	}
	c.PID = pid.pid
	if pid.socketDir != "" {
		c.SocketDir = pid.socketDir
	}
	c.URL = connURL(c.SocketDir, Database)

	ctx, cancel := context.WithTimeout(ctx, opts.StartTimeout)
	defer cancel()
	if err := ensureDatabase(ctx, c.SocketDir); err != nil {
		return nil, err
	}
	return c, nil
}

// Stop stops the cluster in dataDir (pg_ctl stop -m fast: sessions are disconnected,
// their transactions rolled back). A cluster that is not running, or does not exist,
// is not an error.
func Stop(ctx context.Context, dataDir string) error {
	l, err := newLayout(dataDir)
	if err != nil {
		return err
	}
	if _, err := os.Stat(l.pgdata); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	unlock, err := lockFile(ctx, l.lockFile)
	if err != nil {
		return fmt.Errorf("lock data directory %s: %w", l.dir, err)
	}
	defer unlock()
	pid, running := runningServer(l.pgdata)
	if !running {
		return nil
	}
	o, err := clusterOwner(l.pgdata)
	if err != nil {
		return fmt.Errorf("stop postgres in %s: %w", l.pgdata, err)
	}
	major, _, err := clusterVersion(l.pgdata)
	if err != nil {
		return fmt.Errorf("stop postgres in %s: %w", l.pgdata, err)
	}
	bin, err := findBinaries(ctx, binaryCandidates(ctx), major)
	if err != nil {
		return fmt.Errorf("stop postgres in %s: %w", l.pgdata, err)
	}
	cmd := o.command(ctx, filepath.Join(bin.dir, "pg_ctl"), "stop", "-D", l.pgdata, "-m", "fast", "-w", "-s",
		"-t", strconv.Itoa(int(defaultStartTimeout.Seconds())))
	if err := run(cmd); err != nil {
		if _, still := runningServer(l.pgdata); !still {
			return nil // it went away by itself meanwhile
		}
		return fmt.Errorf("stop postgres (pid %d) in %s: %w", pid.pid, l.pgdata, err)
	}
	return nil
}

// Status describes the cluster in dataDir without starting, stopping or locking it.
func Status(ctx context.Context, dataDir string) (State, error) {
	l, err := newLayout(dataDir)
	if err != nil {
		return State{}, err
	}
	st := State{DataDir: l.dir, PGData: l.pgdata, LogFile: l.logFile, SocketDir: l.socketDir}
	major, initialized, err := clusterVersion(l.pgdata)
	if err != nil {
		return st, err
	}
	st.Initialized = initialized
	if initialized {
		st.Version = strconv.Itoa(major)
	}
	if pid, ok := runningServer(l.pgdata); ok {
		st.Running, st.PID = true, pid.pid
		if pid.socketDir != "" {
			st.SocketDir = pid.socketDir
		}
	}
	if initialized {
		st.URL = connURL(st.SocketDir, Database)
	}
	if bin, err := findBinaries(ctx, binaryCandidates(ctx), major); err == nil {
		st.BinDir, st.BinVersion = bin.dir, bin.version
	}
	return st, nil
}

// layout is where a cluster's files live inside the whilly data directory.
type layout struct {
	dir       string // the whilly data directory, absolute
	pgdata    string // <dir>/pg
	initTmp   string // <dir>/pg.init: initdb's target, renamed to pgdata once complete
	lockFile  string // <dir>/.lock
	logFile   string // <dir>/pg.log
	socketDir string
}

func newLayout(dataDir string) (layout, error) {
	if dataDir == "" {
		return layout{}, errors.New("postgres data directory is not set")
	}
	abs, err := filepath.Abs(dataDir)
	if err != nil {
		return layout{}, fmt.Errorf("resolve data directory %s: %w", dataDir, err)
	}
	l := layout{
		dir:      abs,
		pgdata:   filepath.Join(abs, "pg"),
		initTmp:  filepath.Join(abs, "pg.init"),
		lockFile: filepath.Join(abs, ".lock"),
		logFile:  filepath.Join(abs, "pg.log"),
	}
	l.socketDir = l.pgdata
	if len(l.socketDir)+1+len(socketName) > maxSocketPath {
		// The socket path would not fit in sockaddr_un, so the socket goes to a short
		// directory under /tmp instead, named by a hash of the data directory so that
		// each cluster keeps its own. startServer creates it mode 0700, owned by the
		// server's user, and refuses one that somebody else owns.
		sum := sha256.Sum256([]byte(l.pgdata))
		l.socketDir = "/tmp/whilly-" + hex.EncodeToString(sum[:8])
	}
	return l, nil
}

// clusterVersion reads PG_VERSION; a directory without it is not initialized.
func clusterVersion(pgdata string) (major int, initialized bool, err error) {
	b, err := os.ReadFile(filepath.Join(pgdata, "PG_VERSION"))
	if errors.Is(err, fs.ErrNotExist) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("read cluster version: %w", err)
	}
	major, err = strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0, false, fmt.Errorf("parse %s: %w", filepath.Join(pgdata, "PG_VERSION"), err)
	}
	return major, true, nil
}

// initCluster runs initdb into a scratch directory and renames it into place, so an
// interrupted initdb never leaves a half-made cluster that looks initialized.
func initCluster(ctx context.Context, l layout, o owner, bin binaries, opts Options, log *slog.Logger) error {
	log.InfoContext(ctx, "initializing postgres cluster", slog.String("data_dir", l.pgdata),
		slog.String("bin_dir", bin.dir), slog.String("version", bin.version), slog.String("user", o.name))
	if err := os.RemoveAll(l.initTmp); err != nil {
		return fmt.Errorf("remove leftover %s: %w", l.initTmp, err)
	}
	if err := os.Mkdir(l.initTmp, 0o700); err != nil {
		return fmt.Errorf("create %s: %w", l.initTmp, err)
	}
	if err := o.chown(l.initTmp); err != nil {
		return err
	}
	args := []string{
		"-D", l.initTmp,
		"-U", Superuser,
		// Trust is safe only because the socket is the sole way in and sits in a
		// directory (and has permissions) that only the server's user and root can use.
		"--auth-local=trust", "--auth-host=reject",
		"--encoding=UTF8", "--locale=C",
		"--no-instructions",
	}
	if opts.Fast {
		args = append(args, "--no-sync")
	}
	if err := run(o.command(ctx, filepath.Join(bin.dir, "initdb"), args...)); err != nil {
		return fmt.Errorf("initdb: %w", err)
	}
	conf, err := os.OpenFile(filepath.Join(l.initTmp, "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("open postgresql.conf: %w", err)
	}
	_, err = fmt.Fprintf(conf, "\n# Settings whilly rewrites before every start.\ninclude_if_exists = '%s'\n", confFile)
	if cerr := conf.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write postgresql.conf: %w", err)
	}
	if err := os.Rename(l.initTmp, l.pgdata); err != nil {
		return fmt.Errorf("move new cluster into place: %w", err)
	}
	return nil
}

// startServer starts the server with pg_ctl and waits until it accepts connections.
func startServer(ctx context.Context, l layout, o owner, bin binaries, opts Options, log *slog.Logger) error {
	if err := removeStaleLocks(l); err != nil {
		return err
	}
	if l.socketDir != l.pgdata {
		if err := prepareSocketDir(l.socketDir, o); err != nil {
			return err
		}
	}
	if err := writeConf(l, o, opts); err != nil {
		return err
	}
	if err := prepareLog(l.logFile, o); err != nil {
		return err
	}
	deadline := time.Now().Add(opts.StartTimeout)
	waitSecs := strconv.Itoa(max(1, int(opts.StartTimeout.Seconds())))
	for {
		cmd := o.command(ctx, filepath.Join(bin.dir, "pg_ctl"), "start", "-w", "-s",
			"-t", waitSecs, "-D", l.pgdata, "-l", l.logFile)
		err := run(cmd)
		if err == nil {
			return nil
		}
		tail := logTail(l.logFile)
		// After a crash (SIGKILL of the postmaster) its children may hold the old
		// shared memory for a moment longer; the server refuses to start until they
		// are gone, which they soon are.
		if strings.Contains(tail, "pre-existing shared memory block") && time.Now().Before(deadline) {
			log.InfoContext(ctx, "postgres waits for the processes of a crashed server to exit", slog.String("data_dir", l.pgdata))
			t := time.NewTimer(250 * time.Millisecond)
			select {
			case <-ctx.Done():
				t.Stop()
				return fmt.Errorf("start postgres: %w", ctx.Err())
			case <-t.C:
			}
			continue
		}
		return fmt.Errorf("start postgres: %w; last lines of %s:\n%s", err, l.logFile, tail)
	}
}

// removeStaleLocks deletes a postmaster.pid, and the socket lock file, left by a dead
// server whose process id kill(2) still finds: a zombie, or a process that reused the
// number. The server itself would take them for a live postmaster and refuse to start.
// (Removing them is safe: the server's shared-memory interlock, keyed on the data
// directory, still catches leftover processes of the old server.)
func removeStaleLocks(l layout) error {
	for _, path := range []string{
		filepath.Join(l.pgdata, "postmaster.pid"),
		filepath.Join(l.socketDir, socketName+".lock"),
	} {
		pid, err := readPidFile(path)
		if err != nil || pid.pid <= 0 || !processExists(pid.pid) || !notPostmaster(pid.pid) {
			continue
		}
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("remove stale lock file: %w", err)
		}
	}
	return nil
}

// prepareSocketDir creates the short socket directory, or checks one left from an
// earlier start: it must be a real directory of the server's user (or ours, being
// root), never a symlink or someone else's, since trust authentication rests on it.
func prepareSocketDir(dir string, o owner) error {
	fi, err := os.Lstat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if err := os.Mkdir(dir, 0o700); err != nil {
			return fmt.Errorf("create socket directory: %w", err)
		}
	case err != nil:
		return fmt.Errorf("check socket directory: %w", err)
	case !fi.IsDir():
		return fmt.Errorf("socket directory %s is not a directory; remove it", dir)
	default:
		st, err := statT(dir)
		if err != nil {
			return fmt.Errorf("check socket directory: %w", err)
		}
		if st.Uid != o.uid && int(st.Uid) != os.Geteuid() {
			return fmt.Errorf("socket directory %s belongs to uid %d, not %s; remove it", dir, st.Uid, o.name)
		}
	}
	if err := o.chown(dir); err != nil {
		return err
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return fmt.Errorf("protect socket directory: %w", err)
	}
	return nil
}

// writeConf rewrites whilly.conf, included at the end of postgresql.conf, so that every
// start uses the current socket directory and options. ALTER SYSTEM still wins.
func writeConf(l layout, o owner, opts Options) error {
	var b strings.Builder
	b.WriteString("# Written by whilly before every start of this cluster: edits are lost.\n")
	b.WriteString("# Use ALTER SYSTEM for settings of your own.\n")
	b.WriteString("listen_addresses = ''\n")
	fmt.Fprintf(&b, "port = %d\n", port)
	fmt.Fprintf(&b, "unix_socket_directories = %s\n", quoteConf(l.socketDir))
	b.WriteString("unix_socket_permissions = 0700\n")
	b.WriteString("max_connections = 200\n")
	if opts.Fast {
		b.WriteString("fsync = off\nsynchronous_commit = off\nfull_page_writes = off\n")
		// Every DROP DATABASE of a test forces a checkpoint; do not log each one.
		b.WriteString("log_checkpoints = off\n")
	}
	path := filepath.Join(l.pgdata, confFile)
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return o.chown(path)
}

// quoteConf quotes a postgresql.conf string value.
func quoteConf(s string) string {
	s = strings.ReplaceAll(s, `\`, `\\`)
	return "'" + strings.ReplaceAll(s, "'", "''") + "'"
}

// prepareLog makes sure the server's user can append to the log (pg_ctl opens it as
// that user), moving an oversized one aside first.
func prepareLog(path string, o owner) error {
	if fi, err := os.Stat(path); err == nil && fi.Size() > maxLogSize {
		if err := os.Rename(path, path+".1"); err != nil {
			return fmt.Errorf("rotate postgres log: %w", err)
		}
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("create postgres log: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("create postgres log: %w", err)
	}
	return o.chown(path)
}

// logTail returns the last lines of the server log, for error messages.
func logTail(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer func() { _ = f.Close() }() // opened read-only: nothing to lose on close
	const tailBytes = 4096
	if fi, err := f.Stat(); err == nil && fi.Size() > tailBytes {
		if _, err := f.Seek(-tailBytes, io.SeekEnd); err != nil {
			return ""
		}
	}
	b, _ := io.ReadAll(f)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > 12 {
		lines = lines[len(lines)-12:]
	}
	return strings.Join(lines, "\n")
}

// pidFile is what postmaster.pid says.
type pidFile struct {
	pid       int
	socketDir string // empty until the server has created its socket
}

// readPidFile parses a postmaster.pid (line 1: pid, line 5: first socket directory) or
// a socket lock file (line 1: pid).
func readPidFile(path string) (pidFile, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return pidFile{}, err
	}
	lines := strings.Split(string(b), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(lines[0]))
	if err != nil {
		return pidFile{}, fmt.Errorf("parse %s: %w", path, err)
	}
	var p pidFile
	p.pid = pid
	if len(lines) > 4 {
		p.socketDir = strings.TrimSpace(lines[4])
	}
	return p, nil
}

// runningServer reports the live postmaster of pgdata, if any.
func runningServer(pgdata string) (pidFile, bool) {
	p, err := readPidFile(filepath.Join(pgdata, "postmaster.pid"))
	if err != nil || p.pid <= 0 {
		return pidFile{}, false
	}
	if !processExists(p.pid) || notPostmaster(p.pid) {
		return pidFile{}, false
	}
	return p, true
}

// connURL is the DSN of database db over the socket in socketDir. The port is spelled
// out so that a PGPORT in the user's environment cannot send the client elsewhere.
func connURL(socketDir, db string) string {
	q := url.Values{}
	q.Set("host", socketDir)
	q.Set("port", strconv.Itoa(port))
	q.Set("sslmode", "disable")
	u := url.URL{Scheme: "postgres", User: url.User(Superuser), Path: "/" + db, RawQuery: q.Encode()}
	return u.String()
}

// ensureDatabase creates the whilly database if it is missing, waiting (until ctx is
// done) for a server that is still starting up.
func ensureDatabase(ctx context.Context, socketDir string) error {
	conn, err := connectWhenReady(ctx, connURL(socketDir, "postgres"))
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	var exists bool
	err = conn.QueryRow(ctx, "SELECT EXISTS (SELECT FROM pg_database WHERE datname = $1)", Database).Scan(&exists)
	if err != nil {
		return fmt.Errorf("look for database %s: %w", Database, err)
	}
	if exists {
		return nil
	}
	_, err = conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{Database}.Sanitize())
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42P04" { // duplicate_database: created meanwhile
		return nil
	}
	if err != nil {
		return fmt.Errorf("create database %s: %w", Database, err)
	}
	return nil
}

// connectWhenReady connects, retrying while the socket is missing or the server says
// it is starting up (57P03); any other refusal is final.
func connectWhenReady(ctx context.Context, dsn string) (*pgx.Conn, error) {
	for {
		conn, err := pgx.Connect(ctx, dsn)
		if err == nil {
			return conn, nil
		}
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code != "57P03" {
			return nil, fmt.Errorf("connect to postgres: %w", err)
		}
		t := time.NewTimer(50 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("connect to postgres: %w", err)
		case <-t.C:
		}
	}
}
