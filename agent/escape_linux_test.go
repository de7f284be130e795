//go:build linux

package agent

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestSetsidEscapeeIsKilled: a descendant that leaves the attempt's process group with
// setsid (and so its session) is found by the attempt's environment tag and killed too,
// even though the agent exited cleanly and its group is gone.
func TestSetsidEscapeeIsKilled(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("setsid"); err != nil {
		t.Skip("no setsid on this machine")
	}
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "escapee")
	cfg := testConfig()
	cfg.ClaudeBin = writeScript(t, dir, "claude", `setsid sh -c 'echo $$ > "$ESCAPEE.tmp"; mv "$ESCAPEE.tmp" "$ESCAPEE"; exec sleep 1000' </dev/null >/dev/null 2>&1 &
while [ ! -s "$ESCAPEE" ]; do sleep 0.01; done
printf '%s\n' `+shQuote(successLine)+`
exit 0
`)
	a, _ := New(NameClaude, cfg)
	res, err := a.Run(testCtx(t), Request{Prompt: "p", WorkDir: dir, Env: []string{"ESCAPEE=" + pidFile}, Timeout: time.Hour})
	if err != nil || !res.Succeeded() {
		t.Fatalf("run = %q %q, %v", res.Reason, res.Detail, err)
	}
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	if pgid, err := syscall.Getpgid(pid); err == nil && pgid != pid {
		t.Fatalf("the escapee %d is in process group %d: it did not leave with setsid", pid, pgid)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		var ws syscall.WaitStatus
		_, _ = syscall.Wait4(pid, &ws, syscall.WNOHANG, nil) // reaped here when this test process is its subreaper
		if errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) {
			return
		}
		if time.Now().After(deadline) {
			st, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
			t.Fatalf("the process that left the group with setsid survives the attempt: %s", st)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestChattyEscapeeDoesNotHoldTheAttempt: a descendant that hides from the attempt's tag
// (env -i) and its group (setsid), keeps the output pipe and writes to it for ever, does
// not keep the attempt reading: the pipes are let go within a bound of the kill grace.
func TestChattyEscapeeDoesNotHoldTheAttempt(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("setsid"); err != nil {
		t.Skip("no setsid on this machine")
	}
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "escapee")
	cfg := testConfig()
	cfg.ClaudeBin = writeScript(t, dir, "claude", `env -i ESCAPEE="$ESCAPEE" setsid sh -c 'echo $$ > "$ESCAPEE.tmp"; mv "$ESCAPEE.tmp" "$ESCAPEE"; while :; do echo spam; done' </dev/null 2>&1 &
while [ ! -s "$ESCAPEE" ]; do sleep 0.01; done
printf '%s\n' `+shQuote(successLine)+`
exit 0
`)
	t.Cleanup(func() {
		if b, err := os.ReadFile(pidFile); err == nil {
			if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})
	a, _ := New(NameClaude, cfg)
	start := time.Now()
	if _, err := a.Run(testCtx(t), Request{Prompt: "p", WorkDir: dir, Env: []string{"ESCAPEE=" + pidFile}, Timeout: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if took, bound := time.Since(start), 20*cfg.KillGrace+5*time.Second; took > bound {
		t.Errorf("the attempt took %s with an escapee writing to its pipe, more than %s", took, bound)
	}
}
