//go:build linux

package agent

import (
	"context"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/whilly-go/whilly/plan"
	"github.com/whilly-go/whilly/sandbox"
)

// An agent that hogs memory, forks without end or fills the disk ends in resource_limit
// naming the limit, while an attempt beside it finishes, and the next attempt runs: the
// worker goes on.
func TestSandboxLimitsEndTheAttempt(t *testing.T) {
	t.Parallel()
	sb := boxed(t, sandbox.Settings{Net: sandbox.NetNone, Memory: 64 << 20, Pids: 64, Disk: 8 << 20})
	if !sb.LimitsEnforced() && os.Getuid() != 0 {
		t.Skipf("no cgroup here: %s", sb.LimitsNote())
	}
	const done = `; echo '{"result": "<promise>COMPLETE</promise>"}'`
	run := func(script string) Result {
		t.Helper()
		dir := t.TempDir()
		a, err := New(NameCommand, Config{Command: writeScript(t, dir, "agent.sh", script+done), Sandbox: sb, KillGrace: 300 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		res, err := a.Run(ctx, Request{Prompt: "p", WorkDir: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	var wg sync.WaitGroup
	var beside Result
	wg.Add(1)
	go func() { defer wg.Done(); beside = run(`sleep 2`) }()
	for _, c := range []struct{ name, script, want string }{
		{"hog", `head -c 134217728 /dev/zero | tail | wc -c; sleep 20`, "memory limit 64 MiB"},
		{"bomb", `i=0; while [ $i -lt 200 ]; do sleep 20 & i=$((i+1)); done; wait`, "process limit 64"},
		{"disk", `dd if=/dev/zero of=/tmp/fill bs=1M count=16; sleep 20`, "disk limit 8 MiB"},
	} {
		res := run(c.script)
		if res.Reason != ReasonResourceLimit || !strings.Contains(res.Detail, c.want) || res.Complete {
			t.Errorf("%s: reason %q, detail %q, complete %v; want %s", c.name, res.Reason, res.Detail, res.Complete, c.want)
		}
	}
	wg.Wait()
	if next := run(`true`); next.Reason != "" || !next.Complete {
		t.Errorf("the next attempt: %+v", next)
	}
	if beside.Reason != "" || !beside.Complete {
		t.Errorf("the attempt beside: %+v", beside)
	}
}

// A verification command that goes over a limit fails, naming it.
func TestVerifyOverALimitFails(t *testing.T) {
	t.Parallel()
	sb := boxed(t, sandbox.Settings{Net: sandbox.NetNone, Disk: 4 << 20})
	rs := RunVerify(context.Background(), sb, t.TempDir(), []plan.Verify{
		{Name: "fill", Command: "dd if=/dev/zero of=fill bs=1M count=8", Required: true}}, time.Minute)
	if len(rs) != 1 || rs[0].Passed || !strings.Contains(rs[0].Error, "disk limit 4 MiB") {
		t.Errorf("verification over the disk limit: %+v", rs)
	}
}
