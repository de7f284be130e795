//go:build linux

package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/whilly-go/whilly/sandbox"
)

// claudeCodeVersion is the npm version range of the real CLI the sandbox is tested with.
const claudeCodeVersion = "2.1"

// realClaude installs @anthropic-ai/claude-code@2.1 with npm and returns its executable.
func realClaude(t *testing.T) string {
	t.Helper()
	return realNpmCLI(t, "@anthropic-ai/claude-code", claudeCodeVersion, "claude")
}

// realNpmCLI installs pkg@version with npm into a cache directory shared by test runs
// (WHILLY_TEST_CACHE, default <user cache>/whilly-test) and returns its executable bin.
// It skips only when npm is missing or cannot reach the registry.
func realNpmCLI(t *testing.T, pkg, version, bin string) string {
	t.Helper()
	base := os.Getenv("WHILLY_TEST_CACHE")
	if base == "" {
		c, err := os.UserCacheDir()
		if err != nil {
			t.Skipf("no cache directory for %s: %v", pkg, err)
		}
		base = filepath.Join(c, "whilly-test")
	}
	dir := filepath.Join(base, filepath.Base(pkg)+"-"+version)
	exe := filepath.Join(dir, "node_modules", ".bin", bin)
	if _, err := os.Stat(exe); err == nil {
		return exe
	}
	npm, err := exec.LookPath("npm")
	if err != nil {
		t.Skipf("npm is not installed: cannot install %s", pkg)
	}
	if err := os.MkdirAll(base, 0o755); err != nil {
		t.Fatal(err)
	}
	tmp, err := os.MkdirTemp(base, "install-")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = os.RemoveAll(tmp) }()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, npm, "install", "--no-audit", "--no-fund", "--prefix", tmp, pkg+"@"+version)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Skipf("npm could not install %s@%s (is the registry reachable?): %v\n%s", pkg, version, err, out)
	}
	// Another test process may have won the race: then its copy is used.
	if err := os.Rename(tmp, dir); err != nil {
		if _, serr := os.Stat(exe); serr != nil {
			t.Fatalf("install %s into %s: %v", pkg, dir, err)
		}
	}
	return exe
}

// The real Codex CLI starts in the box, which binds its package and its platform
// package (the native binary), not the rest of node_modules.
func TestRealCodexStartsInTheSandbox(t *testing.T) {
	t.Parallel()
	sb := boxed(t, sandbox.Settings{Net: sandbox.NetNone})
	bin := realNpmCLI(t, "@openai/codex", "0.171", "codex")
	c, err := sb.Prepare(testCtx(t), sandbox.Spec{Path: bin, Args: []string{"--version"}, Dir: t.TempDir(), Agent: sandbox.AgentCodex,
		Environ: []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + t.TempDir()}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	pr, err := runProcess(testCtx(t), procSpec{path: c.Path, args: c.Args, dir: c.Dir, env: c.Env, timeout: time.Minute, grace: DefaultKillGrace,
		maxOut: 1 << 16, merge: true, extraFiles: c.ExtraFiles, started: c.Started})
	if err != nil || pr.exitCode != 0 || !strings.HasPrefix(string(pr.stdout), "codex-cli 0.171") {
		t.Errorf("codex --version in the box: %v exit %d\n%s", err, pr.exitCode, pr.stdout)
	}
}

// fakeMessagesAPI is a scripted Anthropic Messages API: the agent loop's first turn asks
// for a Write of hello.txt in the workspace, the second for a Bash `go version` (or the
// command in bash), the third ends the task. Requests without tools (Claude Code's side
// questions) get a short text.
type fakeMessagesAPI struct {
	ws   string
	bash string // the Bash call's command; "" is go version

	mu          sync.Mutex
	toolResults []map[string]any
	requests    int
	auth        map[string]bool // the credentials the requests carried
}

func (f *fakeMessagesAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || !strings.HasSuffix(r.URL.Path, "/v1/messages") {
		http.Error(w, `{"type":"error","error":{"type":"not_found_error","message":"not here"}}`, http.StatusNotFound)
		return
	}
	var req struct {
		Stream   bool  `json:"stream"`
		Tools    []any `json:"tools"`
		Messages []struct {
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		} `json:"messages"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var results []map[string]any
	for _, m := range req.Messages {
		var blocks []map[string]any
		if json.Unmarshal(m.Content, &blocks) != nil {
			continue
		}
		for _, b := range blocks {
			if b["type"] == "tool_result" {
				results = append(results, b)
			}
		}
	}
	f.mu.Lock()
	f.requests++
	if f.auth == nil {
		f.auth = map[string]bool{}
	}
	f.auth[r.Header.Get("X-Api-Key")+r.Header.Get("Authorization")] = true
	if len(results) > len(f.toolResults) {
		f.toolResults = results
	}
	f.mu.Unlock()

	var block map[string]any
	stop := "tool_use"
	switch {
	case len(req.Tools) == 0:
		block, stop = map[string]any{"type": "text", "text": "ok"}, "end_turn"
	case len(results) == 0:
		block = map[string]any{"type": "tool_use", "id": "toolu_write", "name": "Write",
			"input": map[string]any{"file_path": filepath.Join(f.ws, "hello.txt"), "content": "written in the box\n"}}
	case len(results) == 1:
		input := map[string]any{"command": "go version", "description": "Print the Go version"}
		if f.bash != "" {
			// The longest timeout the tool takes: a cold build cache compiles the
			// standard library first.
			input = map[string]any{"command": f.bash, "description": "Run the command", "timeout": 600000}
		}
		block = map[string]any{"type": "tool_use", "id": "toolu_bash", "name": "Bash", "input": input}
	default:
		block, stop = map[string]any{"type": "text", "text": "Wrote hello.txt and ran go version. " + CompletionMarker}, "end_turn"
	}
	msg := map[string]any{"id": fmt.Sprintf("msg_%d", f.requests), "type": "message", "role": "assistant",
		"model": "claude-sonnet-4-5", "content": []any{block}, "stop_reason": stop, "stop_sequence": nil,
		"usage": map[string]any{"input_tokens": 100, "output_tokens": 20}}
	if !req.Stream {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(msg)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	event := func(name string, data map[string]any) {
		b, _ := json.Marshal(data)
		fmt.Fprintf(w, "event: %s\ndata: %s\n\n", name, b)
	}
	start := map[string]any{}
	for k, v := range msg {
		start[k] = v
	}
	start["content"], start["stop_reason"] = []any{}, nil
	start["usage"] = map[string]any{"input_tokens": 100, "output_tokens": 1}
	event("message_start", map[string]any{"type": "message_start", "message": start})
	if block["type"] == "text" {
		event("content_block_start", map[string]any{"type": "content_block_start", "index": 0, "content_block": map[string]any{"type": "text", "text": ""}})
		event("content_block_delta", map[string]any{"type": "content_block_delta", "index": 0, "delta": map[string]any{"type": "text_delta", "text": block["text"]}})
	} else {
		input, _ := json.Marshal(block["input"])
		event("content_block_start", map[string]any{"type": "content_block_start", "index": 0,
			"content_block": map[string]any{"type": "tool_use", "id": block["id"], "name": block["name"], "input": map[string]any{}}})
		event("content_block_delta", map[string]any{"type": "content_block_delta", "index": 0, "delta": map[string]any{"type": "input_json_delta", "partial_json": string(input)}})
	}
	event("content_block_stop", map[string]any{"type": "content_block_stop", "index": 0})
	event("message_delta", map[string]any{"type": "message_delta", "delta": map[string]any{"stop_reason": stop, "stop_sequence": nil},
		"usage": map[string]any{"output_tokens": 20}})
	event("message_stop", map[string]any{"type": "message_stop"})
}

// The real Claude Code CLI runs in the box with a full shell (bypassPermissions), reaching
// its model API — a local fake, allowed through the proxy as ANTHROPIC_BASE_URL's host —
// only through the proxy: the file it writes lands in the workspace and its Bash call of
// `go version` succeeds. It does so with an API key, and with the worker's login, which
// the box holds read-only and without its refresh token.
func TestRealClaudeCodeInTheSandbox(t *testing.T) {
	t.Parallel()
	sb := boxed(t, sandbox.Settings{Net: sandbox.NetProxy})
	bin := realClaude(t)
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go is not on PATH")
	}
	login := fmt.Sprintf(`{"claudeAiOauth":{"accessToken":"sk-ant-oat01-fakeAccess","refreshToken":"sk-ant-ort01-fakeRefresh",`+
		`"expiresAt":%d,"scopes":["user:inference","user:profile"],"subscriptionType":"max"}}`, time.Now().Add(time.Hour).UnixMilli())
	for _, c := range []struct {
		name string
		key  []string // more of the worker's environment
		auth string   // what the model API must see
	}{
		{"api key", []string{"ANTHROPIC_API_KEY=sk-ant-api03-fake"}, "sk-ant-api03-fake"},
		{"login", nil, "Bearer sk-ant-oat01-fakeAccess"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			home := t.TempDir()
			if c.key == nil {
				if err := os.MkdirAll(filepath.Join(home, ".claude"), 0o700); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(home, ".claude", ".credentials.json"), []byte(login), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			ws := t.TempDir()
			api := &fakeMessagesAPI{ws: ws}
			srv := httptest.NewServer(api)
			defer srv.Close()
			cfg := testConfig()
			cfg.ClaudeBin, cfg.Sandbox = bin, sb
			cfg.BaseEnv = append([]string{"PATH=" + filepath.Dir(goBin) + ":/usr/local/bin:/usr/bin:/bin", "HOME=" + home,
				"ANTHROPIC_BASE_URL=" + srv.URL}, c.key...)
			a, err := New(NameClaude, cfg)
			if err != nil {
				t.Fatal(err)
			}
			if err := Check(a, func(k string) string { return getenvIn(cfg.BaseEnv, k) }); err != nil {
				t.Fatalf("the readiness check: %v", err)
			}
			var denied []sandbox.Denial
			var mu sync.Mutex
			log := &strings.Builder{}
			res, err := a.Run(testCtx(t), Request{Prompt: "Write hello.txt, then run go version.", WorkDir: ws, Timeout: 2 * time.Minute,
				Log: &lockedWriter{w: log}, OnEgressDenied: func(d sandbox.Denial) { mu.Lock(); denied = append(denied, d); mu.Unlock() }})
			if err != nil {
				t.Fatal(err)
			}
			if !res.Succeeded() || res.Sandbox != sandbox.ModeBwrap {
				t.Fatalf("claude in the box: reason %q detail %q sandbox %q\n%s", res.Reason, res.Detail, res.Sandbox, log)
			}
			if b, err := os.ReadFile(filepath.Join(ws, "hello.txt")); err != nil || string(b) != "written in the box\n" {
				t.Errorf("hello.txt in the workspace: %q %v", b, err)
			}
			api.mu.Lock()
			defer api.mu.Unlock()
			if len(api.toolResults) < 2 {
				t.Fatalf("tool results seen by the model: %v", api.toolResults)
			}
			bash, _ := json.Marshal(api.toolResults[1])
			if api.toolResults[1]["is_error"] == true || !strings.Contains(string(bash), "go version go1.") {
				t.Errorf("the Bash call of go version did not succeed: %s", bash)
			}
			if len(api.auth) != 1 || !api.auth[c.auth] {
				t.Errorf("the model API saw credentials %q, want only %q", keys(api.auth), c.auth)
			}
			if c.key == nil {
				if b, _ := os.ReadFile(filepath.Join(home, ".claude", ".credentials.json")); string(b) != login {
					t.Errorf("the worker's login changed: %s", b)
				}
			}
			t.Logf("claude %s: %d model requests, denials %v, %s", bin, api.requests, denied, res.Duration)
		})
	}
}

func getenvIn(environ []string, k string) string {
	for _, kv := range environ {
		if v, ok := strings.CutPrefix(kv, k+"="); ok {
			return v
		}
	}
	return ""
}

func keys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
