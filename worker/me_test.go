package worker_test

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/whilly-go/whilly/cmd/whilly-worker/workercli"
	"github.com/whilly-go/whilly/testkit"
)

// TestWorkerLearnsItsIDAndWaitsForItsPlan: whilly-worker given only a token learns its
// id (GET /v1/workers/me), and started with --plan X before X exists it waits for X,
// then drains it and exits 0.
func TestWorkerLearnsItsIDAndWaitsForItsPlan(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	_, token, err := e.st.RegisterWorker(context.Background(), "test", nil)
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"WHILLY_CONTROL_URL": e.url, "WHILLY_WORKER_TOKEN": token, "WHILLY_SANDBOX": "none"}
	var (
		out    bytes.Buffer
		errOut syncBuffer
		code   int
		wg     sync.WaitGroup
	)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	wg.Go(func() {
		code = workercli.Main(ctx, []string{"--plan", "later", "--drain", "--agent", "sim"}, &out, &errOut, func(k string) string { return env[k] })
	})
	testkit.Eventually(t, 30*time.Second, "the worker to wait for its plan", func() bool {
		return strings.Contains(errOut.String(), "does not exist yet")
	})
	e.importTasks(t, "later", 2)
	wg.Wait()
	if code != 0 || !strings.Contains(out.String(), "tasks_done=2") {
		t.Fatalf("exit %d, stdout %q, stderr %s; want both tasks done and exit 0", code, out.String(), errOut.String())
	}
}

// TestSimCostIsRunsCost: whilly-worker's sim agent with no WHILLY_SIM_COST charges what
// `whilly run --agent sim` charges by default: $0.02 an attempt.
func TestSimCostIsRunsCost(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	_, token, err := e.st.RegisterWorker(context.Background(), "test", nil)
	if err != nil {
		t.Fatal(err)
	}
	e.importTasks(t, "priced", 2)
	env := map[string]string{"WHILLY_CONTROL_URL": e.url, "WHILLY_WORKER_TOKEN": token, "WHILLY_SANDBOX": "none"}
	var out, errOut bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if code := workercli.Main(ctx, []string{"--plan", "priced", "--drain", "--agent", "sim"}, &out, &errOut, func(k string) string { return env[k] }); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	pi, err := e.st.GetPlan(context.Background(), "priced")
	if err != nil || pi.Spent.String() != "0.04" {
		t.Fatalf("plan spent $%s (%v), want $0.04: two attempts at the sim's $0.02", pi.Spent, err)
	}
}
