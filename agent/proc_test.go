//go:build unix

package agent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/whilly-go/whilly/sandbox"
)

const successLine = `{"type":"result","subtype":"success","is_error":false,"result":"All done.\n<promise>COMPLETE</promise>","session_id":"s-1","num_turns":3,"duration_ms":1200,"total_cost_usd":0.0123,"usage":{"input_tokens":10,"output_tokens":20,"cache_read_input_tokens":5,"cache_creation_input_tokens":1}}`

// spawnerScript records its own pid (the process group id), a background child and a
// grandchild (a child of a subshell), says "ready" and hangs. It and all its descendants
// ignore SIGTERM (an ignored signal stays ignored across fork and exec), so only the
// SIGKILL after the grace can end them. Every process holds the stdout pipe.
const spawnerScript = `trap '' TERM
echo $$ > "$PIDS"
sleep 1000 &
echo $! >> "$PIDS"
sh -c 'sleep 1000 & echo $! >> "$PIDS"; wait' &
echo $! >> "$PIDS"
while [ "$(wc -l < "$PIDS")" -lt 4 ]; do :; done
echo ready
wait
`

// readPids returns the pids a spawner wrote: the leader (= pgid) first.
func readPids(t *testing.T, path string) []int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read pids: %v", err)
	}
	var pids []int
	for _, f := range strings.Fields(string(b)) {
		p, err := strconv.Atoi(f)
		if err != nil {
			t.Fatalf("bad pid %q", f)
		}
		pids = append(pids, p)
	}
	if len(pids) != 4 {
		t.Fatalf("want 4 pids (leader, child, subshell, grandchild), got %v", pids)
	}
	return pids
}

// assertGroupGone waits (polling, with a deadline) until every pid and the process group
// are gone: kill(pid, 0) and kill(-pgid, 0) fail with ESRCH. Orphans re-parented to this
// test process (see TestMain) are reaped on the way, each only until it is seen gone.
func assertGroupGone(t *testing.T, pgid int, pids []int) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	live := append([]int(nil), pids...)
	for {
		next := live[:0]
		for _, p := range live {
			var ws syscall.WaitStatus
			_, _ = syscall.Wait4(p, &ws, syscall.WNOHANG, nil)
			if !errors.Is(syscall.Kill(p, 0), syscall.ESRCH) {
				next = append(next, p)
			}
		}
		live = next
		groupErr := syscall.Kill(-pgid, 0)
		if len(live) == 0 && errors.Is(groupErr, syscall.ESRCH) {
			return
		}
		if time.Now().After(deadline) {
			var states []string
			for _, p := range live {
				st, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p))
				states = append(states, fmt.Sprintf("%d: %s", p, st))
			}
			t.Fatalf("process group %d survives: kill(-pgid, 0) = %v; live pids %v %v", pgid, groupErr, live, states)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestTimeoutKillsWholeProcessGroup(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "pids")
	cfg := testConfig()
	cfg.ClaudeBin = writeScript(t, dir, "claude", spawnerScript)
	a, err := New(NameClaude, cfg)
	if err != nil {
		t.Fatal(err)
	}
	log := newReadyWriter("ready")
	const timeout = 2 * time.Second
	res, err := a.Run(testCtx(t), Request{Prompt: "p", WorkDir: dir, Env: []string{"PIDS=" + pidFile}, Timeout: timeout, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-log.ready:
	default:
		t.Fatalf("the script never got ready within the %s timeout; log: %q", timeout, log.String())
	}
	if res.Reason != ReasonTimeout || res.Succeeded() {
		t.Fatalf("reason = %q (%s), want timeout", res.Reason, res.Detail)
	}
	if res.ExitCode != -1 {
		t.Errorf("exit code = %d, want -1 (killed)", res.ExitCode)
	}
	// The leader ignores SIGTERM: it took the SIGKILL after the grace.
	if res.Duration < timeout+cfg.KillGrace {
		t.Errorf("duration %s: the SIGTERM-ignoring leader ended before timeout+grace", res.Duration)
	}
	pids := readPids(t, pidFile)
	assertGroupGone(t, pids[0], pids)
}

func TestCancelKillsWholeProcessGroup(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "pids")
	cfg := testConfig()
	cfg.Command = writeScript(t, dir, "agent", spawnerScript)
	a, err := New(NameCommand, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancelCause(testCtx(t))
	log := newReadyWriter("ready")
	go func() {
		<-log.ready
		cancel(errors.New("lease lost"))
	}()
	res, err := a.Run(ctx, Request{Prompt: "p", WorkDir: dir, Env: []string{"PIDS=" + pidFile}, Timeout: time.Hour, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	if res.Reason != ReasonCancelled || !strings.Contains(res.Detail, "lease lost") {
		t.Fatalf("reason = %q detail = %q, want cancelled by lease lost", res.Reason, res.Detail)
	}
	pids := readPids(t, pidFile)
	assertGroupGone(t, pids[0], pids)
}

// A leader that exits normally but leaves a background job holding stdout must not make
// Run wait for that job, and the job must not outlive the attempt.
func TestLeftoverChildrenAreKilledAfterExit(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "pids")
	cfg := testConfig()
	cfg.ClaudeBin = writeScript(t, dir, "claude", `echo $$ > "$PIDS"
sleep 1000 &
echo $! >> "$PIDS"
sh -c 'sleep 1000 & echo $! >> "$PIDS"; wait' &
echo $! >> "$PIDS"
while [ "$(wc -l < "$PIDS")" -lt 4 ]; do :; done
printf '%s\n' `+shQuote(successLine)+`
exit 0
`)
	a, _ := New(NameClaude, cfg)
	res, err := a.Run(testCtx(t), Request{Prompt: "p", WorkDir: dir, Env: []string{"PIDS=" + pidFile}, Timeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Succeeded() {
		t.Fatalf("not succeeded: %q %q", res.Reason, res.Detail)
	}
	pids := readPids(t, pidFile)
	assertGroupGone(t, pids[0], pids)
}

// A child that never reads its (large) prompt must not block the run.
func TestUnreadPromptDoesNotHang(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := testConfig()
	cfg.ClaudeBin = writeScript(t, dir, "claude", "printf '%s\\n' "+shQuote(successLine)+"\n")
	a, _ := New(NameClaude, cfg)
	res, err := a.Run(testCtx(t), Request{Prompt: strings.Repeat("x", 4<<20), WorkDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Succeeded() {
		t.Fatalf("not succeeded: %q %q", res.Reason, res.Detail)
	}
}

// Output larger than the buffer keeps its tail, where the result is.
func TestLongOutputKeepsTail(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := testConfig()
	cfg.MaxOutputBytes = 64 << 10
	cfg.ClaudeBin = writeScript(t, dir, "claude", `i=0
while [ $i -lt 3000 ]; do echo "progress line $i with some padding to make it longer"; i=$((i+1)); done
printf '%s\n' `+shQuote(successLine)+"\n")
	a, _ := New(NameClaude, cfg)
	var log strings.Builder
	res, err := a.Run(testCtx(t), Request{Prompt: "p", WorkDir: dir, Log: &log})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Succeeded() || res.Cost != 12300 {
		t.Fatalf("got %q %q cost %d", res.Reason, res.Detail, res.Cost)
	}
	if len(res.Excerpt) > MaxExcerptBytes {
		t.Errorf("excerpt is %d bytes", len(res.Excerpt))
	}
	if !strings.Contains(log.String(), "progress line 0 ") || !strings.Contains(log.String(), "progress line 2999 ") {
		t.Error("the log did not get the whole output")
	}
}

func TestOutputIsRedactedInLogAndExcerpt(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := testConfig()
	const token = "ghp_" + "abcdefghijklmnopqrstuvwxyz0123456789"
	const keyBody = "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7"
	cfg.Command = writeScript(t, dir, "agent", `echo "using token `+token+`"
echo "-----BEGIN RSA PRIVATE KEY-----"
echo "`+keyBody+`"
echo "-----END RSA PRIVATE KEY-----"
echo "password=hunter22 and Authorization: Bearer abcdefghijklmnop" >&2
echo '{"result": "leaked `+token+` <promise>COMPLETE</promise>", "total_cost_usd": 0.5, "is_error": false}'
`)
	a, _ := New(NameCommand, cfg)
	var log strings.Builder
	res, err := a.Run(testCtx(t), Request{Prompt: "p", WorkDir: dir, Log: &log})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Succeeded() {
		t.Fatalf("not succeeded: %q %q", res.Reason, res.Detail)
	}
	for name, s := range map[string]string{"log": log.String(), "excerpt": res.Excerpt, "text": res.Text} {
		for _, secret := range []string{token, keyBody, "hunter22", "abcdefghijklmnop"} {
			if strings.Contains(s, secret) {
				t.Errorf("%s leaks %q:\n%s", name, secret, s)
			}
		}
	}
	if !strings.Contains(log.String(), "[REDACTED:github_token]") || !strings.Contains(log.String(), redactedKey) {
		t.Errorf("log lacks redaction markers:\n%s", log.String())
	}
}

func TestMissingExecutableIsErrNotFound(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	notExec := writeFile(t, dir, "claude-not-executable", "#!/bin/sh\necho hi\n")
	for _, bin := range []string{filepath.Join(dir, "nope"), notExec} {
		cfg := testConfig()
		cfg.ClaudeBin, cfg.CodexBin, cfg.Command = bin, bin, bin
		for _, name := range []string{NameClaude, NameCodex, NameCommand} {
			a, err := New(name, cfg)
			if err != nil {
				t.Fatal(err)
			}
			_, err = a.Run(testCtx(t), Request{Prompt: "p", WorkDir: dir})
			if !errors.Is(err, ErrNotFound) {
				t.Errorf("%s with %s: err = %v, want ErrNotFound", name, filepath.Base(bin), err)
			}
		}
	}
	// In the shell form, sh reports the missing program as exit status 127.
	cfg := testConfig()
	cfg.Command = "no-such-agent-binary-xyz --flag 'quoted arg'"
	a, _ := New(NameCommand, cfg)
	if _, err := a.Run(testCtx(t), Request{Prompt: "p", WorkDir: dir}); !errors.Is(err, ErrNotFound) {
		t.Errorf("shell form: err = %v, want ErrNotFound", err)
	}
}

func TestMissingWorkDirIsNotErrNotFound(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := testConfig()
	cfg.ClaudeBin = writeScript(t, dir, "claude", "printf '%s\\n' "+shQuote(successLine)+"\n")
	a, _ := New(NameClaude, cfg)
	_, err := a.Run(testCtx(t), Request{Prompt: "p", WorkDir: filepath.Join(dir, "gone")})
	if err == nil || errors.Is(err, ErrNotFound) {
		t.Fatalf("err = %v, want a workspace error that is not ErrNotFound", err)
	}
}

// The agent's environment is built from an allow-list, with or without a box:
// whilly's own secrets and whatever else the worker holds (GH_TOKEN, AWS keys, PGPASSWORD,
// WHILLY_PLAN) stay out; the model's key, the locale and the request's context go in.
func TestAgentEnvIsAllowListed(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := testConfig()
	cfg.BaseEnv = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir, "WHILLY_WORKER_TOKEN=wt-secret", "WHILLY_DATABASE_URL=postgres://x",
		"WHILLY_GITHUB_PRIVATE_KEY=pem", "WHILLY_BOOTSTRAP_TOKEN=bt", "ANTHROPIC_API_KEY=keep-me", "WHILLY_PLAN=drop-plan",
		"GH_TOKEN=ghp_drop", "AWS_SECRET_ACCESS_KEY=drop", "PGPASSWORD=drop", "LC_ALL=C.UTF-8"}
	cfg.Command = writeScript(t, dir, "agent", `env > "$OUT"
echo '{"result": "<promise>COMPLETE</promise>", "total_cost_usd": 0, "is_error": false}'
`)
	a, _ := New(NameCommand, cfg)
	out := filepath.Join(dir, "env")
	res, err := a.Run(testCtx(t), Request{Prompt: "p", WorkDir: dir, Env: []string{"OUT=" + out, "WHILLY_TASK_ID=T-1", "WHILLY_ATTEMPT=2"}})
	if err != nil || !res.Succeeded() {
		t.Fatalf("run: %v %q %q", err, res.Reason, res.Detail)
	}
	if res.Sandbox != sandbox.ModeNone {
		t.Errorf("Result.Sandbox = %q, want none", res.Sandbox)
	}
	b, _ := os.ReadFile(out)
	env := string(b)
	for _, gone := range []string{"WHILLY_WORKER_TOKEN", "WHILLY_DATABASE_URL", "WHILLY_GITHUB_PRIVATE_KEY", "WHILLY_BOOTSTRAP_TOKEN",
		"WHILLY_PLAN", "GH_TOKEN", "AWS_SECRET_ACCESS_KEY", "PGPASSWORD"} {
		if strings.Contains(env, gone+"=") {
			t.Errorf("agent env has %s", gone)
		}
	}
	for _, kept := range []string{"ANTHROPIC_API_KEY=keep-me", "LC_ALL=C.UTF-8", "HOME=" + dir, "WHILLY_TASK_ID=T-1", "WHILLY_ATTEMPT=2"} {
		if !strings.Contains(env, kept+"\n") {
			t.Errorf("agent env lacks %s", kept)
		}
	}
}

func TestTailBuffer(t *testing.T) {
	t.Parallel()
	b := &tailBuffer{limit: 10}
	var all strings.Builder
	for i := range 1000 {
		s := strconv.Itoa(i) + ","
		all.WriteString(s)
		_, _ = b.Write([]byte(s))
	}
	want := all.String()[all.Len()-10:]
	if got := string(b.Bytes()); got != want || !b.Truncated() {
		t.Fatalf("tail = %q truncated=%v, want %q", got, b.Truncated(), want)
	}
	_, _ = b.Write([]byte(strings.Repeat("z", 25)))
	if got := string(b.Bytes()); got != strings.Repeat("z", 10) {
		t.Fatalf("after a big write tail = %q", got)
	}
}

// TestKnownSecretsAreMaskedInLog: a secret the worker knows (its token, the push token)
// glued to other text slips past Redact's patterns (\bghs_ needs a word boundary); passed
// as Request.Secrets it is masked all the same, for process agents and the sim alike.
func TestKnownSecretsAreMaskedInLog(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	const push = "ghs_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
	const custom = "s3cr3t-value-without-a-known-shape"
	cfg := testConfig()
	cfg.Command = writeScript(t, dir, "agent", `echo "glued X`+push+`"
echo "plain `+custom+` end"
echo '{"result": "<promise>COMPLETE</promise>", "total_cost_usd": 0, "is_error": false}'
`)
	a, _ := New(NameCommand, cfg)
	var log strings.Builder
	if _, err := a.Run(testCtx(t), Request{Prompt: "p", WorkDir: dir, Log: &log}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(log.String(), push) {
		t.Fatalf("without Secrets the glued token is not masked; the test no longer shows the gap:\n%s", log.String())
	}
	log.Reset()
	if _, err := a.Run(testCtx(t), Request{Prompt: "p", WorkDir: dir, Log: &log, Secrets: []string{push, custom, "short"}}); err != nil {
		t.Fatal(err)
	}
	for _, secret := range []string{push, custom, push[4:]} {
		if strings.Contains(log.String(), secret) {
			t.Errorf("the log leaks %q:\n%s", secret, log.String())
		}
	}
	if !strings.Contains(log.String(), "glued X[REDACTED]") || !strings.Contains(log.String(), "plain [REDACTED] end") {
		t.Errorf("the log lost its text around the secrets:\n%s", log.String())
	}
}
