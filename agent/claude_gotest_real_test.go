//go:build linux

package agent

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/whilly-go/whilly/sandbox"
	"github.com/whilly-go/whilly/testkit"
)

// The real Go project the Claude Code CLI tests in the box (as e2e's real-project test
// does): its own tests need a non-root uid (TestWalker expects a permission error from a
// directory it made unreadable), and it has a dependency.
const (
	realGoModule  = "github.com/saracen/walker"
	realGoVersion = "v0.1.3"
)

// The real Claude Code CLI in the box runs `go test ./...` of a checkout of a real Go
// project through its Bash tool, and it passes: the project's dependency comes from the
// module cache test runs share, bound read-only into the box (GOPROXY=off), and the
// project's permission tests see a non-root uid even when the test runs as root.
func TestRealClaudeCodeRunsGoTestInTheSandbox(t *testing.T) {
	t.Parallel()
	sb := boxed(t, sandbox.Settings{Net: sandbox.NetProxy})
	bin := realClaude(t)
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go is not on PATH")
	}
	ws := t.TempDir()
	if err := os.CopyFS(ws, os.DirFS(testkit.GoModule(t, realGoModule, realGoVersion))); err != nil {
		t.Fatal(err)
	}
	modCache := testkit.GoModCache(t)
	// A build cache test runs share, so that only a first run compiles the standard
	// library (minutes on a busy machine).
	buildCache := filepath.Join(testkit.CacheDir(t), "go-build-box")
	if err := os.MkdirAll(buildCache, 0o755); err != nil {
		t.Fatal(err)
	}
	api := &fakeMessagesAPI{ws: ws, bash: "go test ./..."}
	srv := httptest.NewServer(api)
	defer srv.Close()
	cfg := testConfig()
	cfg.ClaudeBin, cfg.Sandbox = bin, sb
	cfg.BaseEnv = []string{"PATH=" + filepath.Dir(goBin) + ":/usr/local/bin:/usr/bin:/bin", "HOME=" + t.TempDir(),
		"ANTHROPIC_API_KEY=sk-ant-api03-fake", "ANTHROPIC_BASE_URL=" + srv.URL}
	a, err := New(NameClaude, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	log := &strings.Builder{}
	res, err := a.Run(ctx, Request{Prompt: "Write hello.txt, then run the project's tests.", WorkDir: ws, Timeout: 10 * time.Minute,
		Env:   []string{"GOMODCACHE=" + modCache, "GOPROXY=off", "GOCACHE=" + buildCache},
		Binds: []sandbox.Bind{{Src: modCache, ReadOnly: true}, {Src: buildCache}},
		Log:   &lockedWriter{w: log}})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Succeeded() || res.Sandbox != sandbox.ModeBwrap {
		t.Fatalf("claude in the box: reason %q detail %q sandbox %q\n%s", res.Reason, res.Detail, res.Sandbox, log)
	}
	api.mu.Lock()
	defer api.mu.Unlock()
	if len(api.toolResults) < 2 {
		t.Fatalf("tool results seen by the model: %v", api.toolResults)
	}
	bash, _ := json.Marshal(api.toolResults[1])
	// JSON writes go test's tab as \t.
	if api.toolResults[1]["is_error"] == true || !strings.Contains(string(bash), `ok  \t`+realGoModule) {
		t.Errorf("the Bash call of go test ./... in a checkout of %s did not pass: %s", realGoModule, bash)
	}
	t.Logf("claude ran go test in the box: %d model requests, %s", api.requests, res.Duration)
}
