package pglocal

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/whilly-go/whilly/internal/config"
)

// helperDirEnv makes the test binary a helper process that calls EnsureWith on the
// directory it names and prints the resulting cluster as JSON.
const helperDirEnv = "PGLOCAL_TEST_HELPER_DIR"

func TestMain(m *testing.M) {
	if dir := os.Getenv(helperDirEnv); dir != "" {
		os.Exit(helperEnsure(dir))
	}
	os.Exit(m.Run())
}

func helperEnsure(dir string) int {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := EnsureWith(ctx, dir, nil, Options{Fast: true})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := json.NewEncoder(os.Stdout).Encode(report{URL: c.URL, PID: c.PID, Started: c.Started}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

type report struct {
	URL     string `json:"url"`
	PID     int    `json:"pid"`
	Started bool   `json:"started"`
}

func testContext(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// stopAtCleanup stops the cluster in dir when the test ends (before t.TempDir removes it).
func stopAtCleanup(t *testing.T, dir string) {
	t.Helper()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := Stop(ctx, dir); err != nil {
			t.Errorf("stop cluster: %v", err)
		}
	})
}

func mustEnsure(ctx context.Context, t *testing.T, dir string, opts Options) *Cluster {
	t.Helper()
	start := time.Now()
	c, err := EnsureWith(ctx, dir, nil, opts)
	if err != nil {
		t.Fatalf("EnsureWith: %v", err)
	}
	t.Logf("EnsureWith took %v (started: %v)", time.Since(start).Round(time.Millisecond), c.Started)
	return c
}

func connect(ctx context.Context, t *testing.T, dsn string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("connect to %s: %v", dsn, err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

func queryString(ctx context.Context, t *testing.T, conn *pgx.Conn, sql string) string {
	t.Helper()
	var s string
	if err := conn.QueryRow(ctx, sql).Scan(&s); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return s
}

// waitUntil polls cond until it holds or the deadline passes.
func waitUntil(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		<-tick.C
	}
}

func TestEnsureReusesRunningCluster(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	dir := t.TempDir()
	stopAtCleanup(t, dir)

	first := mustEnsure(ctx, t, dir, Options{}) // the settings the CLI uses
	if !first.Started {
		t.Error("first Ensure did not report starting the server")
	}
	conn := connect(ctx, t, first.URL)
	for sql, want := range map[string]string{
		"SELECT current_user":            Superuser,
		"SELECT current_database()":      Database,
		"SHOW listen_addresses":          "",
		"SHOW fsync":                     "on",
		"SHOW max_connections":           "200",
		"SHOW server_encoding":           "UTF8",
		"SHOW unix_socket_permissions":   "0700",
		"SHOW unix_socket_directories":   first.SocketDir,
		"SELECT current_setting('port')": "5432",
	} {
		if got := queryString(ctx, t, conn, sql); got != want {
			t.Errorf("%s = %q, want %q", sql, got, want)
		}
	}

	second := mustEnsure(ctx, t, dir, Options{})
	if second.Started {
		t.Error("second Ensure started a server although one was running")
	}
	if second.URL != first.URL || second.PID != first.PID {
		t.Errorf("second Ensure = (%s, pid %d), want (%s, pid %d)", second.URL, second.PID, first.URL, first.PID)
	}

	st, err := Status(ctx, dir)
	if err != nil {
		t.Fatalf("Status: %v", err)
	}
	if !st.Initialized || !st.Running || st.PID != first.PID || st.URL != first.URL || st.BinDir != first.BinDir ||
		st.Version == "" || !strings.HasPrefix(first.Version, st.Version) {
		t.Errorf("Status = %+v, want running cluster of %+v", st, first)
	}

	if os.Geteuid() == 0 {
		// As root the server must run as an unprivileged user.
		fi, err := os.Stat(first.PGData)
		if err != nil {
			t.Fatal(err)
		}
		if uid := fi.Sys().(*syscall.Stat_t).Uid; uid == 0 {
			t.Errorf("data directory %s is owned by root", first.PGData)
		}
	}
}

func TestStopThenEnsureRestarts(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	dir := t.TempDir()
	stopAtCleanup(t, dir)

	if err := Stop(ctx, dir); err != nil {
		t.Fatalf("Stop before anything exists: %v", err)
	}
	st, err := Status(ctx, dir)
	if err != nil || st.Initialized || st.Running {
		t.Fatalf("Status of an empty directory = %+v, %v", st, err)
	}

	first := mustEnsure(ctx, t, dir, Options{Fast: true})
	conn := connect(ctx, t, first.URL)
	if _, err := conn.Exec(ctx, "CREATE TABLE kept (v text); INSERT INTO kept VALUES ('still here')"); err != nil {
		t.Fatal(err)
	}
	if got := queryString(ctx, t, conn, "SHOW fsync"); got != "off" {
		t.Errorf("fsync = %s with Fast, want off", got)
	}
	_ = conn.Close(ctx)

	if err := Stop(ctx, dir); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if st, err := Status(ctx, dir); err != nil || !st.Initialized || st.Running {
		t.Fatalf("Status after Stop = %+v, %v; want initialized, not running", st, err)
	}
	if err := Stop(ctx, dir); err != nil {
		t.Fatalf("second Stop: %v", err)
	}

	second := mustEnsure(ctx, t, dir, Options{Fast: true})
	if !second.Started || second.PID == first.PID || second.URL != first.URL {
		t.Errorf("Ensure after Stop = %+v, want a new server at the same URL as %+v", second, first)
	}
	conn = connect(ctx, t, second.URL)
	if got := queryString(ctx, t, conn, "SELECT v FROM kept"); got != "still here" {
		t.Errorf("row after restart = %q", got)
	}
}

func TestEnsureRecoversFromSIGKILL(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	dir := t.TempDir()
	stopAtCleanup(t, dir)

	// Durable settings: a committed row must survive the crash.
	first := mustEnsure(ctx, t, dir, Options{})
	conn := connect(ctx, t, first.URL)
	if _, err := conn.Exec(ctx, "CREATE TABLE kept (v text); INSERT INTO kept VALUES ('survived')"); err != nil {
		t.Fatal(err)
	}
	_ = conn.Close(ctx)

	if err := syscall.Kill(first.PID, syscall.SIGKILL); err != nil {
		t.Fatalf("kill postmaster: %v", err)
	}
	waitUntil(t, 30*time.Second, "the killed postmaster to be gone", func() bool {
		st, err := Status(ctx, dir)
		return err == nil && !st.Running
	})
	if _, err := os.Stat(filepath.Join(first.PGData, "postmaster.pid")); err != nil {
		t.Fatalf("the crash should leave postmaster.pid behind: %v", err)
	}

	second := mustEnsure(ctx, t, dir, Options{})
	if !second.Started || second.PID == first.PID {
		t.Errorf("Ensure after SIGKILL = %+v, want a new server", second)
	}
	conn = connect(ctx, t, second.URL)
	if got := queryString(ctx, t, conn, "SELECT v FROM kept"); got != "survived" {
		t.Errorf("row after crash recovery = %q", got)
	}
}

func TestConcurrentEnsureSharesOneCluster(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	dir := t.TempDir()
	stopAtCleanup(t, dir)

	const n = 6
	results := make([]*Cluster, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			results[i], errs[i] = EnsureWith(ctx, dir, nil, Options{Fast: true})
		})
	}
	wg.Wait()
	started := 0
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("Ensure %d: %v", i, errs[i])
		}
		if results[i].Started {
			started++
		}
		if results[i].URL != results[0].URL || results[i].PID != results[0].PID {
			t.Errorf("Ensure %d = (%s, pid %d), Ensure 0 = (%s, pid %d)",
				i, results[i].URL, results[i].PID, results[0].URL, results[0].PID)
		}
	}
	if started != 1 {
		t.Errorf("%d calls started a server, want 1", started)
	}
}

func TestConcurrentEnsureFromProcesses(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	dir := t.TempDir()
	stopAtCleanup(t, dir)

	const n = 3
	cmds := make([]*exec.Cmd, n)
	outs := make([]strings.Builder, n)
	errOuts := make([]strings.Builder, n)
	for i := range n {
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), helperDirEnv+"="+dir)
		cmd.Stdout, cmd.Stderr = &outs[i], &errOuts[i]
		if err := cmd.Start(); err != nil {
			t.Fatalf("start helper %d: %v", i, err)
		}
		cmds[i] = cmd
	}
	reports := make([]report, n)
	for i, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Fatalf("helper %d: %v\n%s", i, err, errOuts[i].String())
		}
		if err := json.Unmarshal([]byte(outs[i].String()), &reports[i]); err != nil {
			t.Fatalf("helper %d printed %q: %v", i, outs[i].String(), err)
		}
	}
	started := 0
	for i, r := range reports {
		if r.Started {
			started++
		}
		if r.URL != reports[0].URL || r.PID != reports[0].PID {
			t.Errorf("process %d got %+v, process 0 got %+v", i, r, reports[0])
		}
	}
	if started != 1 {
		t.Errorf("%d processes started a server, want 1", started)
	}
	conn := connect(ctx, t, reports[0].URL)
	if got := queryString(ctx, t, conn, "SELECT current_database()"); got != Database {
		t.Errorf("current_database() = %q", got)
	}
}

func TestLongDataDirUsesShortSocketDir(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	dir := filepath.Join(t.TempDir(), strings.Repeat("d", 60), strings.Repeat("e", 60))
	l, err := newLayout(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(l.socketDir, "/tmp/whilly-") {
		t.Fatalf("socket dir for a %d-byte data dir = %s, want a short one under /tmp", len(dir), l.socketDir)
	}
	t.Cleanup(func() { _ = os.RemoveAll(l.socketDir) })
	stopAtCleanup(t, dir)

	c := mustEnsure(ctx, t, dir, Options{Fast: true})
	if c.SocketDir != l.socketDir {
		t.Errorf("cluster socket dir = %s, want %s", c.SocketDir, l.socketDir)
	}
	fi, err := os.Stat(c.SocketDir)
	if err != nil {
		t.Fatal(err)
	}
	if perm := fi.Mode().Perm(); perm != 0o700 {
		t.Errorf("socket dir mode = %o, want 700", perm)
	}
	conn := connect(ctx, t, c.URL)
	if got := queryString(ctx, t, conn, "SELECT current_user"); got != Superuser {
		t.Errorf("current_user = %q", got)
	}
}

func TestFindBinaries(t *testing.T) {
	t.Parallel()
	dir, err := FindBinaries()
	if err != nil {
		t.Fatalf("FindBinaries on a machine with PostgreSQL: %v", err)
	}
	for _, name := range []string{"initdb", "pg_ctl", "postgres"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestFindBinariesNone(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)

	// A directory that looks right but holds a server that is too old.
	old := t.TempDir()
	for _, name := range []string{"initdb", "pg_ctl", "postgres"} {
		script := "#!/bin/sh\necho 'postgres (PostgreSQL) 13.4'\n"
		if err := os.WriteFile(filepath.Join(old, name), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}

	for name, candidates := range map[string][]string{
		"empty":   nil,
		"nothing": {t.TempDir(), "", "/nonexistent/bin"},
		"too old": {old},
	} {
		_, err := findBinaries(ctx, candidates, 0)
		if !errors.Is(err, ErrNoBinaries) {
			t.Errorf("%s: err = %v, want ErrNoBinaries", name, err)
			continue
		}
		for _, hint := range []string{"apt-get install postgresql", "brew install postgresql", "WHILLY_DATABASE_URL"} {
			if !strings.Contains(err.Error(), hint) {
				t.Errorf("%s: error %q does not mention %q", name, err, hint)
			}
		}
	}

	// A cluster of another major version needs binaries of its own version.
	real, err := FindBinaries()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := findBinaries(ctx, []string{real}, 9); !errors.Is(err, ErrNoBinaries) {
		t.Errorf("binaries for major 9: err = %v, want ErrNoBinaries", err)
	}
}

func TestGlobNewestFirst(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	for _, v := range []string{"postgresql@14", "postgresql@16", "postgresql", "postgresql@9.6", "postgresql@15"} {
		if err := os.MkdirAll(filepath.Join(root, v, "bin"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	var got []string
	for _, p := range globNewestFirst(filepath.Join(root, "postgresql*", "bin")) {
		got = append(got, filepath.Base(filepath.Dir(p)))
	}
	want := "postgresql postgresql@16 postgresql@15 postgresql@14 postgresql@9.6"
	if strings.Join(got, " ") != want {
		t.Errorf("order = %v, want %s", got, want)
	}
}

func TestDefaultDataDir(t *testing.T) {
	home, err := os.UserHomeDir()
	if err != nil {
		t.Skip("no home directory")
	}
	t.Setenv("WHILLY_DATA_DIR", "")
	t.Setenv("XDG_DATA_HOME", "")
	if got, want := DefaultDataDir(config.New(os.Getenv)), filepath.Join(home, ".local", "share", "whilly"); got != want {
		t.Errorf("default = %s, want %s", got, want)
	}
	t.Setenv("XDG_DATA_HOME", "relative/ignored")
	if got, want := DefaultDataDir(config.New(os.Getenv)), filepath.Join(home, ".local", "share", "whilly"); got != want {
		t.Errorf("with relative XDG_DATA_HOME = %s, want %s", got, want)
	}
	t.Setenv("XDG_DATA_HOME", "/xdg")
	if got := DefaultDataDir(config.New(os.Getenv)); got != "/xdg/whilly" {
		t.Errorf("with XDG_DATA_HOME = %s", got)
	}
	t.Setenv("WHILLY_DATA_DIR", "/data/w")
	if got := DefaultDataDir(config.New(os.Getenv)); got != "/data/w" {
		t.Errorf("with WHILLY_DATA_DIR = %s", got)
	}
}

func TestQuoteConf(t *testing.T) {
	t.Parallel()
	if got, want := quoteConf(`/a b/it's\x`), `'/a b/it''s\\x'`; got != want {
		t.Errorf("quoteConf = %s, want %s", got, want)
	}
}

func TestStateString(t *testing.T) {
	t.Parallel()
	for _, st := range []State{
		{DataDir: "/d", LogFile: "/d/pg.log"},
		{DataDir: "/d", Initialized: true, Running: true, PID: 42, Version: "15", URL: "postgres://x", BinDir: "/b", BinVersion: "15.1"},
	} {
		s := st.String()
		if !strings.Contains(s, "data directory: /d") || !strings.HasSuffix(s, "\n") {
			t.Errorf("State.String() = %q", s)
		}
		if st.Running && !strings.Contains(s, "running (pid 42)") {
			t.Errorf("State.String() = %q, want the pid", s)
		}
	}
}
