//go:build linux

package e2e_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/whilly-go/whilly/testkit"
)

// costlyAgent writes a command agent that appends its task id to $E2E_DIR/runs, records
// its pid like agentScript, works for seconds, then succeeds at a cost of $0.50.
func costlyAgent(t *testing.T, dir string, seconds string) string {
	t.Helper()
	path := filepath.Join(dir, "agent.sh")
	script := "#!/bin/sh\n" +
		`echo "$WHILLY_TASK_ID" >> "$E2E_DIR/runs"` + "\n" +
		`echo $$ > "$E2E_DIR/$WHILLY_TASK_ID.$WHILLY_ATTEMPT.pid"` + "\n" +
		"sleep " + seconds + "\n" +
		`echo '{"result":"done <promise>COMPLETE</promise>","total_cost_usd":0.5,"is_error":false}'` + "\n"
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

// agentRuns reads which tasks' agents ran, one line per run.
func agentRuns(t *testing.T, dir string) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "runs"))
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	runs := strings.Fields(string(b))
	slices.Sort(runs)
	return runs
}

// assertSpent checks the plan's spend and each task's cost.
func (c *cluster) assertSpent(planID string, plan string, perTask string) {
	c.t.Helper()
	var spent string
	if err := c.pool.QueryRow(c.t.Context(), `SELECT spent_usd::text FROM plans WHERE id = $1`, planID).Scan(&spent); err != nil {
		c.t.Fatal(err)
	}
	if spent != plan {
		c.t.Errorf("plan %s spent %s, want %s: every run's cost charged once", planID, spent, plan)
	}
	rows, err := c.pool.Query(c.t.Context(), `SELECT id, cost_usd::text FROM tasks WHERE plan_id = $1`, planID)
	if err != nil {
		c.t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var id, cost string
		if err := rows.Scan(&id, &cost); err != nil {
			c.t.Fatal(err)
		}
		if cost != perTask {
			c.t.Errorf("task %s cost %s, want %s", id, cost, perTask)
		}
	}
	if err := rows.Err(); err != nil {
		c.t.Fatal(err)
	}
}

// The repro of issue 14 item 1: lease 20 s, `whilly serve` SIGKILLed 2 s into the agents'
// 4 s runs and started again 4 s later. The workers' COMPLETEs, refused while the control
// plane is down, are retried until the new one accepts them: every task's agent runs
// once, every run's $0.50 is charged, and no lease expires.
func TestServeKilledWhileAgentsFinish(t *testing.T) {
	t.Parallel()
	c := newCluster(t, "WHILLY_LEASE_TTL=20s")
	addr := freeAddr(t)
	base := "http://" + addr
	first := c.serve("serve-1", addr)
	const n = 3
	c.importPlan(base, planDoc("outage", n, 0))

	dir := t.TempDir()
	env := []string{"WHILLY_AGENT=command", "WHILLY_AGENT_CMD=" + costlyAgent(t, dir, "4"), "E2E_DIR=" + dir, "WHILLY_SANDBOX=none", "WHILLY_AGENT_ENV=E2E_DIR"}
	var workers []workerProc
	for _, name := range []string{"worker-1", "worker-2", "worker-3"} {
		workers = append(workers, c.worker(name, base, env, "--plan", "outage", "--drain"))
	}
	testkit.Eventually(t, 60*time.Second, "every task's agent to start", func() bool { return len(agentRuns(t, dir)) == n })
	// The fault schedule, not a wait for a condition: the agents are 2 s into their 4 s.
	time.Sleep(2 * time.Second)
	first.kill(syscall.SIGKILL)
	first.wait(t, 30*time.Second)
	time.Sleep(4 * time.Second) // the agents finish while nothing listens
	c.serve("serve-2", addr)

	for _, w := range workers {
		if code := w.wait(t, 90*time.Second); code != 0 {
			t.Fatalf("%s exited %d, want 0", w.name, code)
		}
	}
	c.assertDoneOnce("outage", n)
	if runs := agentRuns(t, dir); !slices.Equal(runs, []string{"T001", "T002", "T003"}) {
		t.Errorf("agent runs %v, want each task once", runs)
	}
	c.assertSpent("outage", "1.500000", "0.500000")
	if counts := c.eventCounts("outage", "RELEASE"); len(counts) != 0 {
		t.Errorf("RELEASE events %v, want none (no lease expired)", counts)
	}
	retried := 0
	for _, w := range workers {
		if strings.Contains(w.stderr.String(), "could not report the task; retrying") {
			retried++
		}
	}
	if retried == 0 {
		t.Error("no worker had to retry its report: the control plane was never down when one was sent")
	}
}

// A whilly-worker SIGKILLed mid-task and started again under the same id hands the task
// back at once (RELEASE worker_restarted) and runs it, instead of waiting out the lease.
func TestRestartedWorkerReleasesWhatItsPredecessorHeld(t *testing.T) {
	t.Parallel()
	c := newCluster(t, "WHILLY_LEASE_TTL=10m")
	base := c.serveOne()
	c.importPlan(base, planDoc("restarted", 1, 0))
	dir := t.TempDir()
	script := agentScript(t, dir, `if [ ! -e "$E2E_DIR/ran" ]; then touch "$E2E_DIR/ran"; exec sleep 600; fi`)
	killLeftovers(t, func() []int { return []int{readPID(filepath.Join(dir, "T001.1.pid"))} })
	env := []string{"WHILLY_AGENT=command", "WHILLY_AGENT_CMD=" + script, "E2E_DIR=" + dir, "WHILLY_SANDBOX=none", "WHILLY_AGENT_ENV=E2E_DIR"}
	first := c.worker("worker-first", base, env, "--plan", "restarted", "--drain")
	// The agent dies with its worker: killed before it marks its run, the next run would
	// take itself for the first and sleep too.
	testkit.Eventually(t, 60*time.Second, "the first run's agent to mark its run", func() bool {
		_, err := os.Stat(filepath.Join(dir, "ran"))
		return err == nil
	})
	first.kill(syscall.SIGKILL)
	first.wait(t, 30*time.Second)

	again := start(t, "worker-again", bins.worker, first.cmd.Env[len(first.cmd.Env)-len(env)-3:], "--plan", "restarted", "--drain")
	if code := again.wait(t, 60*time.Second); code != 0 {
		t.Fatalf("the restarted worker exited %d, want 0", code)
	}
	c.assertDoneOnce("restarted", 1)
	reason, _, err := c.releaseEvent("restarted", "T001")
	if err != nil || reason != "worker_restarted" {
		t.Errorf("RELEASE reason %q (%v), want worker_restarted", reason, err)
	}
	if got := c.task("restarted", "T001").attempts; got != 1 {
		t.Errorf("T001 took %d attempts, want 1 (the killed run is not counted)", got)
	}
}
