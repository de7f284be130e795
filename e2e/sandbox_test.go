//go:build linux

package e2e_test

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/whilly-go/whilly/testkit"
)

// A worker killed with SIGKILL while its agent runs in the sandbox: the box dies with it,
// and so does every process the agent started in it — in its group, after setsid, after
// env -i — however the worker died. No pid file is needed: each of them appends to a file
// in the workspace until it is gone.
func TestSIGKILLedWorkersSandboxDiesWithIt(t *testing.T) {
	t.Parallel()
	requireSandbox(t)
	c := newCluster(t, "WHILLY_LEASE_TTL=2s")
	base := c.serveOne()
	c.importPlan(base, planDoc("boxkill", 1, 0))
	ws, bin := t.TempDir(), t.TempDir()
	t.Cleanup(func() { _ = os.WriteFile(filepath.Join(ws, "stop"), nil, 0o600) })
	loop := `while [ -d "$0" ] && [ ! -e "$0/stop" ]; do echo x >> "$0/$1"; sleep 0.05; done`
	script := filepath.Join(bin, "agent.sh")
	body := "#!/bin/sh\ncat >/dev/null\n" +
		"/bin/sh -c '" + loop + "' \"$PWD\" alive-group &\n" +
		"setsid /bin/sh -c '" + loop + "' \"$PWD\" alive-setsid </dev/null >/dev/null 2>&1 &\n" +
		"env -i setsid /bin/sh -c '" + loop + "' \"$PWD\" alive-envi </dev/null >/dev/null 2>&1 &\n" +
		"sleep 600\n"
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	w := c.worker("worker", base, []string{"WHILLY_AGENT=command", "WHILLY_AGENT_CMD=" + script}, "--plan", "boxkill", "--workdir", ws)
	names := []string{"alive-group", "alive-setsid", "alive-envi"}
	sizes := func() []int64 {
		out := make([]int64, len(names))
		for i, n := range names {
			if fi, err := os.Stat(filepath.Join(ws, n)); err == nil {
				out[i] = fi.Size()
			}
		}
		return out
	}
	testkit.Eventually(t, 60*time.Second, "the boxed agent's daemons to run", func() bool {
		for _, s := range sizes() {
			if s == 0 {
				return false
			}
		}
		return true
	})
	w.kill(syscall.SIGKILL)
	w.wait(t, 30*time.Second)
	still := func() bool {
		before := sizes()
		time.Sleep(300 * time.Millisecond) // each writes every 50 ms
		after := sizes()
		for i := range before {
			if before[i] != after[i] {
				return false
			}
		}
		return true
	}
	testkit.Eventually(t, 10*time.Second, "every process of the killed worker's box to die", still)
	if !still() {
		t.Errorf("a process of the box came back to life")
	}
}
