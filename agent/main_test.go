package agent

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/whilly-go/whilly/sandbox"
)

func TestMain(m *testing.M) {
	// This binary is also the sandbox's init, an evil agent and a worker holding secrets
	// (sandbox_test.go).
	sandbox.HandleInit()
	if len(os.Args) > 1 && os.Args[1] == evilAgentArg {
		os.Exit(evilAgent(os.Args[2:]))
	}
	if spec := os.Getenv(workerHelperEnv); spec != "" {
		os.Exit(workerHelper(spec))
	}
	// Orphaned grandchildren of the fake agents are re-parented to this process, so the
	// process-group tests can reap them and see kill(-pgid, 0) fail with ESRCH even where
	// PID 1 does not reap orphans (as in this machine's container).
	becomeSubreaper()
	os.Exit(m.Run())
}

// fixture returns the path of a file in testdata/fixtures/agent-output at the repository
// root (a copy of the shared fixtures) and fails the test clearly when it is missing.
func fixture(t testing.TB, name string) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("runtime.Caller failed: cannot locate the fixtures")
	}
	p := filepath.Join(filepath.Dir(file), "..", "testdata", "fixtures", "agent-output", name)
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("agent output fixture missing: %v", err)
	}
	return p
}

// writeFile writes content to dir/name and returns its path.
func writeFile(t testing.TB, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// writeScript writes an executable sh script and returns its path.
func writeScript(t testing.TB, dir, name, body string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// shQuote quotes s for sh.
func shQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// readyWriter is a Request.Log that closes ready when the output contains marker.
type readyWriter struct {
	mu     sync.Mutex
	buf    strings.Builder
	marker string
	ready  chan struct{}
	once   sync.Once
}

func newReadyWriter(marker string) *readyWriter {
	return &readyWriter{marker: marker, ready: make(chan struct{})}
}

func (w *readyWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	if strings.Contains(w.buf.String(), w.marker) {
		w.once.Do(func() { close(w.ready) })
	}
	return len(p), nil
}

func (w *readyWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// testCtx is a context that ends with the test, with a generous ceiling so a hung process
// fails the test instead of hanging it.
func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// testConfig points every adapter at fakes in dir and keeps the kill grace short.
func testConfig() Config {
	return Config{KillGrace: 300 * time.Millisecond}
}
