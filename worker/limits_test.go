//go:build linux

package worker_test

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/whilly-go/whilly/agent"
	"github.com/whilly-go/whilly/control/client"
	"github.com/whilly-go/whilly/queue"
	"github.com/whilly-go/whilly/sandbox"
	"github.com/whilly-go/whilly/worker"
)

// An agent that forks without end fails its attempt with resource_limit naming the
// limit; the worker goes on and the next task of the plan is done (the bomb's task waits
// for its retry, which this worker, done after two attempts, leaves).
func TestProcessBombEndsOnlyItsAttempt(t *testing.T) {
	t.Parallel()
	boxedT(t)
	e := newEnv(t)
	e.importTasks(t, "bomb", 2)
	sb, err := sandbox.New(sandbox.Config{Settings: sandbox.Settings{Mode: sandbox.ModeBwrap, Net: sandbox.NetNone, Pids: 32}})
	if err != nil {
		t.Fatal(err)
	}
	if !sb.LimitsEnforced() && os.Getuid() != 0 {
		t.Skipf("no cgroup here: %s", sb.LimitsNote())
	}
	w, token, err := e.st.RegisterWorker(context.Background(), "test", nil)
	if err != nil {
		t.Fatal(err)
	}
	api, err := client.New(e.url, token, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	bomb := `if [ "$WHILLY_TASK_ID" = T00 ]; then i=0; while [ $i -lt 100 ]; do sleep 20 & i=$((i+1)); done; wait; fi; ` +
		`echo '{"result": "done <promise>COMPLETE</promise>"}'`
	ag, err := agent.New(agent.NameCommand, agent.Config{Command: bomb, Sandbox: sb,
		BaseEnv: []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}})
	if err != nil {
		t.Fatal(err)
	}
	wk, err := worker.New(api, ag, nil, worker.Config{WorkerID: w.ID, PlanID: "bomb", Drain: true, ClaimWait: time.Second,
		MaxTasks: 2, WorkDir: t.TempDir(), Sandbox: sb})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sum, err := wk.Run(ctx)
	if err != nil || sum.Done != 1 || sum.Failed != 1 {
		t.Fatalf("%+v %v", sum, err)
	}
	evs, err := e.st.Events(context.Background(), queue.EventFilter{PlanID: "bomb"})
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(evs)
	if !strings.Contains(string(raw), agent.ReasonResourceLimit) || !strings.Contains(string(raw), "process limit 32") {
		t.Errorf("no event names the limit: %s", raw)
	}
}
