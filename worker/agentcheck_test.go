package worker_test

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/whilly-go/whilly/agent"
	"github.com/whilly-go/whilly/cmd/whilly-worker/workercli"
	"github.com/whilly-go/whilly/plan"
	"github.com/whilly-go/whilly/worker"
)

// TestMissingAgentCLIExitsTwoBeforeClaiming: whilly-worker with a claude CLI that is not
// there says so, naming CLAUDE_BIN and the install command, and exits 2 without claiming.
func TestMissingAgentCLIExitsTwoBeforeClaiming(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.importTasks(t, "nocli", 1)
	w, token, err := e.st.RegisterWorker(context.Background(), "test", nil)
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{
		"WHILLY_CONTROL_URL": e.url, "WHILLY_WORKER_TOKEN": token, "WHILLY_WORKER_ID": w.ID, "WHILLY_SANDBOX": "none",
		"CLAUDE_BIN": filepath.Join(t.TempDir(), "claude"), "HOME": t.TempDir(),
	}
	var out, errOut bytes.Buffer
	code := workercli.Main(context.Background(), []string{"--plan", "nocli", "--drain"}, &out, &errOut, func(k string) string { return env[k] })
	if code != 2 {
		t.Fatalf("exit %d, want 2; stderr %s", code, errOut.String())
	}
	for _, want := range []string{"CLAUDE_BIN", "npm install -g @anthropic-ai/claude-code"} {
		if !strings.Contains(errOut.String(), want) {
			t.Errorf("stderr does not name %q: %s", want, errOut.String())
		}
	}
	if task, _ := e.st.GetTask(context.Background(), "nocli", "T00"); task.Status != plan.StatusPending || task.Attempts != 0 {
		t.Fatalf("task = %s after %d attempts; want PENDING and never claimed", task.Status, task.Attempts)
	}
}

// TestAgentCLIVanishingReleasesTheTask: a CLI removed while the worker runs is not the
// task's failure: the task goes back uncounted and the worker stops with ErrNotReady.
func TestAgentCLIVanishingReleasesTheTask(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.importTasks(t, "vanish", 1)
	w, api := e.registered(t, e.url)
	ag, err := agent.New(agent.NameClaude, agent.Config{ClaudeBin: filepath.Join(t.TempDir(), "claude")})
	if err != nil {
		t.Fatal(err)
	}
	wk, err := worker.New(api, ag, nil, worker.Config{WorkerID: w.ID, PlanID: "vanish", Drain: true, ClaimWait: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	sum, err := wk.Run(context.Background())
	if !errors.Is(err, agent.ErrNotReady) || sum.Failed != 0 || sum.Released != 1 {
		t.Fatalf("run = %+v, %v; want the task released and ErrNotReady", sum, err)
	}
	task, _ := e.st.GetTask(context.Background(), "vanish", "T00")
	if task.Status != plan.StatusPending || task.Attempts != 0 || task.LastError != "" {
		t.Fatalf("task = %s, %d attempts, last error %q; want PENDING, uncounted", task.Status, task.Attempts, task.LastError)
	}
}
