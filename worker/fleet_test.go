package worker_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/whilly-go/whilly/agent"
	"github.com/whilly-go/whilly/control/client"
	"github.com/whilly-go/whilly/queue"
	"github.com/whilly-go/whilly/worker"
)

// emptyClaims counts the claims answered "nothing" (204).
type emptyClaims struct{ n atomic.Int32 }

func (c *emptyClaims) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := http.DefaultTransport.RoundTrip(r)
	if err == nil && strings.HasSuffix(r.URL.Path, "/tasks/claim") && resp.StatusCode == http.StatusNoContent {
		c.n.Add(1)
	}
	return resp, err
}

// fleetWorker is a sim worker whose log goes to the returned buffer and whose empty
// claims are counted.
func (e *env) fleetWorker(t *testing.T, cfg worker.Config) (*worker.Worker, *syncBuffer, *emptyClaims) {
	t.Helper()
	w, token, err := e.st.RegisterWorker(context.Background(), "fleet", nil)
	if err != nil {
		t.Fatal(err)
	}
	empty := &emptyClaims{}
	api, err := client.New(e.url, token, client.Options{HTTPClient: &http.Client{Transport: empty}})
	if err != nil {
		t.Fatal(err)
	}
	ag, err := agent.New(agent.NameSim, agent.Config{})
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncBuffer{}
	cfg.WorkerID = w.ID
	wk, err := worker.New(api, ag, slog.New(slog.NewTextHandler(logs, nil)), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return wk, logs, empty
}

// waitFor polls cond until it holds, failing the test after d.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting: %s", what)
		}
		time.Sleep(10 * time.Millisecond) // polling a condition, not waiting for time
	}
}

// TestFleetPauseIsSaidAndEndsADrain: while the fleet is paused, a worker says so — who
// paused it and since when — once, not at every empty claim, and says when it is resumed;
// a --drain worker (an Action job) does not wait out its timeout in silence: it stops at
// once with worker.ErrFleetPaused.
func TestFleetPauseIsSaidAndEndsADrain(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t)
	e.importTasks(t, "fleet", 1)
	if _, err := e.st.PauseFleet(ctx, queue.Actor{By: "token:ops@example.com"}); err != nil {
		t.Fatal(err)
	}

	drain, logs, _ := e.fleetWorker(t, worker.Config{PlanID: "fleet", Drain: true})
	runCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	began := time.Now()
	sum, err := drain.Run(runCtx)
	if !errors.Is(err, worker.ErrFleetPaused) || sum.Done != 0 {
		t.Fatalf("drain in a paused fleet = %+v, %v; want worker.ErrFleetPaused", sum, err)
	}
	if took := time.Since(began); took > 5*time.Second {
		t.Errorf("drain took %s to see the pause; want it at once", took.Round(time.Millisecond))
	}
	if !strings.Contains(err.Error(), "token:ops@example.com") || !strings.Contains(logs.String(), "paused_by=token:ops@example.com") {
		t.Errorf("the pause is not said with who paused: %v\n%s", err, logs.String())
	}

	w, logs, empty := e.fleetWorker(t, worker.Config{PlanID: "fleet", Once: true, ClaimWait: 200 * time.Millisecond})
	done := make(chan error, 1)
	go func() { _, err := w.Run(runCtx); done <- err }()
	waitFor(t, 30*time.Second, "three empty claims", func() bool { return empty.n.Load() >= 3 })
	if n := strings.Count(logs.String(), "the fleet is paused"); n != 1 {
		t.Errorf("the pause was said %d times over three empty claims, want once:\n%s", n, logs.String())
	}
	if !strings.Contains(logs.String(), "paused_since=") {
		t.Errorf("the pause is not said with since when:\n%s", logs.String())
	}
	if _, err := e.st.ResumeFleet(ctx, queue.Actor{By: "token:ops@example.com"}); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("worker after the resume: %v", err)
	}
	if !strings.Contains(logs.String(), "the fleet was resumed") {
		t.Errorf("the resume is not said:\n%s", logs.String())
	}
	if st := taskStatus(t, e.st, "fleet", "T00"); st != "DONE" {
		t.Errorf("T00 is %s after the resume, want DONE", st)
	}
}

// TestDrainInAPausedFleetExitsThree: whilly-worker --drain in a paused fleet exits 3 at
// once, saying who paused it and since when, and what to do.
func TestDrainInAPausedFleetExitsThree(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.importTasks(t, "fleet", 1)
	if _, err := e.st.PauseFleet(context.Background(), queue.Actor{By: "token:ops@example.com"}); err != nil {
		t.Fatal(err)
	}
	_, token, err := e.st.RegisterWorker(context.Background(), "fleet", nil)
	if err != nil {
		t.Fatal(err)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, exe, workerMainArg, "--connect", e.url, "--plan", "fleet", "--drain")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "WHILLY_WORKER_TOKEN=" + token, "WHILLY_AGENT=sim"}
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatal(err)
	}
	if code := cmd.ProcessState.ExitCode(); code != 3 || !strings.Contains(string(out), "the fleet is paused by token:ops@example.com since ") ||
		!strings.Contains(string(out), "'whilly resume'") {
		t.Fatalf("drain in a paused fleet: exit %d; want 3 saying who paused it:\n%s", code, out)
	}
}
