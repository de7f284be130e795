package intake_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/whilly-go/whilly/agent"
	"github.com/whilly-go/whilly/app"
	"github.com/whilly-go/whilly/control"
	"github.com/whilly-go/whilly/control/client"
	"github.com/whilly-go/whilly/plan"
	"github.com/whilly-go/whilly/queue"
	"github.com/whilly-go/whilly/testkit"
	"github.com/whilly-go/whilly/worker"
)

// blockBody is an issue holding a ```whilly block of n independent tasks.
func blockBody(n int) string {
	type task struct {
		ID       string   `json:"id"`
		Priority string   `json:"priority"`
		Desc     string   `json:"description"`
		AC       []string `json:"acceptance_criteria"`
		Steps    []string `json:"test_steps"`
		Files    []string `json:"key_files"`
	}
	var ts []task
	for i := range n {
		ts = append(ts, task{ID: fmt.Sprintf("T%02d", i+1), Priority: "medium",
			Desc: fmt.Sprintf("Fix spelling mistake number %d in the docs", i+1),
			AC:   []string{"the word is spelled right"}, Steps: []string{"make spellcheck"}, Files: []string{"docs/guide.md"}})
	}
	b, _ := json.Marshal(map[string]any{"project": "Docs spelling", "tasks": ts})
	return "Many small fixes.\n\n```whilly\n" + string(b) + "\n```\n"
}

// runWithSimWorkers runs the plan to its end with `workers` sim-agent workers claiming
// through the control-plane HTTP API, as `whilly run` and remote workers do.
func runWithSimWorkers(t testing.TB, e *env, planID string, workers int, delay time.Duration) {
	t.Helper()
	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	listener := queue.NewListener(e.pool, nil)
	go func() { _ = listener.Run(ctx) }()
	srv := control.New(e.store, listener, nil, control.Config{})
	hs := httptest.NewServer(srv.Handler())
	defer hs.Close()
	defer srv.Drain()
	ag, err := agent.New(agent.NameSim, agent.Config{Sim: agent.SimConfig{Delay: delay, Cost: 10_000}})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := range workers {
		w, token, err := e.store.RegisterWorker(e.ctx, fmt.Sprintf("sim-%d", i+1), nil)
		if err != nil {
			t.Fatal(err)
		}
		api, err := client.New(hs.URL, token, client.Options{})
		if err != nil {
			t.Fatal(err)
		}
		wk, err := worker.New(api, ag, nil, worker.Config{WorkerID: w.ID, PlanID: planID, Drain: true, ClaimWait: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			if _, err := wk.Run(ctx); err != nil {
				t.Errorf("worker: %v", err)
			}
		})
	}
	wg.Wait()
}

func TestSimWorkersRunTheIssuePlanToWhillyDone(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{body: blockBody(4)})
	pi := e.intake()
	runWithSimWorkers(t, e, pi.ID, 2, 20*time.Millisecond)
	if st := e.plan().Status; st != plan.PlanDone {
		t.Fatalf("plan is %s after the workers drained it, want DONE", st)
	}
	e.waitState(app.LabelDone)
	e.idle()
	cs := e.statusComments()
	if len(cs) != 1 || !contains(cs[0].Body, "✅ whilly: done") || !contains(cs[0].Body, "**4/4** tasks finished (100%)") || !contains(cs[0].Body, "$0.04 spent") {
		t.Errorf("final status comment:\n%+v", cs)
	}
}

// BenchmarkGitHubWritesPerTransition runs a 20-task issue plan with two sim workers
// (300 ms a task, as `whilly run`'s default) under the production coalescing interval
// (3 s), from the whilly-pending label to whilly-done, and reports the GitHub content
// writes (labels, comments, reactions, label creation) per task transition (CLAIM,
// START, COMPLETE: 60) and per task.
func BenchmarkGitHubWritesPerTransition(b *testing.B) {
	for range b.N {
		e := newEnv(b, envOptions{body: blockBody(20), coalesce: 3 * time.Second})
		pi := e.intake()
		runWithSimWorkers(b, e, pi.ID, 2, 300*time.Millisecond)
		e.waitState(app.LabelDone)
		testkit.Eventually(b, 20*time.Second, "the final comment", func() bool {
			cs := e.statusComments()
			return len(cs) == 1 && contains(cs[0].Body, "**20/20**")
		})
		e.idle()
		var transitions int
		if err := e.pool.QueryRow(e.ctx, `SELECT count(*) FROM events WHERE plan_id = $1 AND type IN ('CLAIM', 'START', 'COMPLETE', 'FAIL', 'RETRY', 'RELEASE')`, pi.ID).Scan(&transitions); err != nil {
			b.Fatal(err)
		}
		writes := e.gh.Writes()
		b.ReportMetric(float64(writes)/float64(transitions), "writes/transition")
		b.ReportMetric(float64(writes)/20, "writes/task")
		b.ReportMetric(float64(writes), "writes")
		b.ReportMetric(float64(transitions), "transitions")
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }
