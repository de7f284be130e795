//go:build linux

package e2e_test

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/whilly-go/whilly/testkit"
)

// whilly serve and three whilly-worker processes with a command agent drain a 30-task
// plan; every task is completed exactly once and every worker exits 0 (--drain).
func TestServeAndThreeWorkersDrainAPlan(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	base := c.serveOne()
	const n = 30
	c.importPlan(base, planDoc("drain", n, 0))

	dir := t.TempDir()
	script := agentScript(t, dir, "sleep 0.05")
	env := []string{"WHILLY_AGENT=command", "WHILLY_AGENT_CMD=" + script, "E2E_DIR=" + dir, "WHILLY_SANDBOX=none", "WHILLY_AGENT_ENV=E2E_DIR"}
	var workers []workerProc
	for i := range 3 {
		workers = append(workers, c.worker(fmt.Sprintf("worker-%d", i+1), base, env, "--plan", "drain", "--drain"))
	}
	for _, w := range workers {
		if code := w.wait(t, 90*time.Second); code != 0 {
			t.Fatalf("%s exited %d, want 0 (--drain)", w.name, code)
		}
	}
	c.assertDoneOnce("drain", n)

	// Every worker did its share through the protocol: the claims name all three.
	var claimers []string
	rows, err := c.pool.Query(t.Context(), `SELECT DISTINCT payload->>'worker_id' FROM events WHERE plan_id = 'drain' AND type = 'CLAIM'`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		claimers = append(claimers, id)
	}
	rows.Close()
	for _, w := range workers {
		if !slices.Contains(claimers, w.id) {
			t.Logf("%s (%s) claimed nothing; claimers %v", w.name, w.id, claimers)
		}
	}
}

// A worker killed with SIGKILL in the middle of a task: its agent dies with it
// (Pdeathsig), its lease expires (WHILLY_LEASE_TTL=2s), the reaper returns the task, and
// another worker runs it again; it ends DONE, completed exactly once.
func TestSIGKILLedWorkersTaskIsRerunElsewhere(t *testing.T) {
	t.Parallel()
	c := newCluster(t, "WHILLY_LEASE_TTL=2s")
	base := c.serveOne()
	c.importPlan(base, planDoc("sigkill", 1, 0))

	dir := t.TempDir()
	// The first attempt hangs; any later one finishes at once. The child sleep's pid is
	// recorded too, to see what becomes of the agent's process group.
	// One more leaves the group with setsid (where there is one): only the watchdog's
	// search for the attempt's environment tag finds it.
	escape := `echo 1 > "$E2E_DIR/escapee.pid"`
	if _, err := exec.LookPath("setsid"); err == nil {
		escape = `setsid sh -c 'echo $$ > "$E2E_DIR/escapee.tmp"; mv "$E2E_DIR/escapee.tmp" "$E2E_DIR/escapee.pid"; exec sleep 600' </dev/null >/dev/null 2>&1 &`
	} else {
		t.Log("no setsid here: the escape from the process group is not tried")
	}
	script := agentScript(t, dir, `if [ "$WHILLY_ATTEMPT" = 1 ]; then
  sleep 600 &
  echo $! > "$E2E_DIR/child.pid"
  `+escape+`
  wait
fi`)
	killLeftovers(t, func() []int {
		ids := []int{readPID(filepath.Join(dir, "child.pid"))}
		if p := readPID(filepath.Join(dir, "escapee.pid")); p > 1 {
			ids = append(ids, p)
		}
		return ids
	})
	env := []string{"WHILLY_AGENT=command", "WHILLY_AGENT_CMD=" + script, "E2E_DIR=" + dir, "WHILLY_SANDBOX=none", "WHILLY_AGENT_ENV=E2E_DIR"}
	a := c.worker("worker-a", base, env, "--plan", "sigkill", "--drain")
	b := c.worker("worker-b", base, env, "--plan", "sigkill", "--drain")
	byID := map[string]workerProc{a.id: a, b.id: b}

	agentPID := filepath.Join(dir, "T001.1.pid")
	testkit.Eventually(t, 60*time.Second, "the first attempt's agent to start", func() bool {
		return readPID(agentPID) > 0 && readPID(filepath.Join(dir, "child.pid")) > 0 && readPID(filepath.Join(dir, "escapee.pid")) > 0
	})
	holder, ok := byID[c.task("sigkill", "T001").claimedBy]
	if !ok {
		t.Fatalf("task T001 is held by %q, not by one of the workers", c.task("sigkill", "T001").claimedBy)
	}
	other := a
	if holder.id == a.id {
		other = b
	}
	holder.kill(syscall.SIGKILL)
	holder.wait(t, 30*time.Second)

	leader := readPID(agentPID)
	testkit.Eventually(t, 10*time.Second, "the killed worker's agent to die with it", func() bool { return !alive(leader) })
	// Pdeathsig reaches the group leader only; the agent's watchdog kills the rest of
	// its group when the worker's end of its pipe closes.
	child := readPID(filepath.Join(dir, "child.pid"))
	testkit.Eventually(t, 10*time.Second, "the killed worker's agent's child to die too", func() bool { return !alive(child) })
	if escapee := readPID(filepath.Join(dir, "escapee.pid")); escapee != 1 {
		testkit.Eventually(t, 10*time.Second, "the process that left the agent's group with setsid to die too", func() bool { return !alive(escapee) })
	}

	if code := other.wait(t, 60*time.Second); code != 0 {
		t.Fatalf("%s exited %d, want 0", other.name, code)
	}
	c.assertDoneOnce("sigkill", 1)
	if reason, _, err := c.releaseEvent("sigkill", "T001"); err != nil || reason != "lease_expired" {
		t.Errorf("RELEASE reason %q (%v), want lease_expired", reason, err)
	}
	var completer string
	if err := c.pool.QueryRow(t.Context(), `SELECT payload->>'worker_id' FROM events
		WHERE plan_id = 'sigkill' AND type = 'COMPLETE'`).Scan(&completer); err != nil {
		t.Fatal(err)
	}
	if completer != other.id {
		t.Errorf("T001 was completed by %s, want the surviving worker %s", completer, other.id)
	}
	if got := c.task("sigkill", "T001").attempts; got != 2 {
		t.Errorf("T001 took %d attempts, want 2 (the expired one counts)", got)
	}
}

// SIGTERM stops the agent's process group and releases the task (reason shutdown) within
// a second; the worker exits 0.
func TestSIGTERMReleasesTheTaskAndExitsZero(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	base := c.serveOne()
	c.importPlan(base, planDoc("sigterm", 1, 0))

	dir := t.TempDir()
	script := agentScript(t, dir, "sleep 600 &\necho $! > \"$E2E_DIR/child.pid\"\nwait")
	childPID := filepath.Join(dir, "child.pid")
	killLeftovers(t, func() []int { return []int{readPID(childPID)} })
	w := c.worker("worker", base, []string{"WHILLY_AGENT=command", "WHILLY_AGENT_CMD=" + script, "E2E_DIR=" + dir, "WHILLY_SANDBOX=none", "WHILLY_AGENT_ENV=E2E_DIR"}, "--plan", "sigterm")

	testkit.Eventually(t, 60*time.Second, "the agent to start", func() bool { return readPID(childPID) > 0 })
	if st := c.task("sigterm", "T001").status; st != "IN_PROGRESS" {
		t.Fatalf("T001 is %s while its agent runs, want IN_PROGRESS", st)
	}
	var sent time.Time
	if err := c.pool.QueryRow(t.Context(), `SELECT clock_timestamp()`).Scan(&sent); err != nil {
		t.Fatal(err)
	}
	w.kill(syscall.SIGTERM)
	if code := w.wait(t, 30*time.Second); code != 0 {
		t.Fatalf("worker exited %d after SIGTERM, want 0", code)
	}
	reason, at, err := c.releaseEvent("sigterm", "T001")
	if err != nil || reason != "shutdown" {
		t.Fatalf("RELEASE reason %q (%v), want shutdown", reason, err)
	}
	// The agent stops on SIGTERM; had it needed the SIGKILL that follows after the 2 s
	// grace, this would take longer than a second.
	if took := at.Sub(sent); took > time.Second {
		t.Errorf("the task was released %v after SIGTERM, want within a second", took)
	} else {
		t.Logf("released %v after SIGTERM", took.Round(time.Millisecond))
	}
	if tr := c.task("sigterm", "T001"); tr.status != "PENDING" || tr.attempts != 0 || tr.claimedBy != "" {
		t.Errorf("after release T001 is %+v, want PENDING, unclaimed, attempt not counted", tr)
	}
	leader, child := readPID(filepath.Join(dir, "T001.1.pid")), readPID(childPID)
	if alive(leader) || alive(child) {
		t.Errorf("agent processes survived the worker's shutdown: leader %d alive %v, child %d alive %v",
			leader, alive(leader), child, alive(child))
	}
}

// An agent that spawns children and hangs is killed at WHILLY_AGENT_TIMEOUT together with
// every process of its group — one child even ignores SIGTERM and needs the SIGKILL that
// follows — and the attempt fails with reason timeout.
func TestTimedOutAgentIsKilledWithItsChildren(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	base := c.serveOne()
	c.importPlan(base, planDoc("timeout", 1, 1))

	dir := t.TempDir()
	script := agentScript(t, dir, `sleep 600 &
echo $! > "$E2E_DIR/child1.pid"
sh -c 'trap "" TERM; echo $$ > "$E2E_DIR/child2.pid"; while :; do sleep 1; done' &
sleep 600 &
echo $! > "$E2E_DIR/child3.pid"
wait`)
	files := []string{"T001.1.pid", "child1.pid", "child2.pid", "child3.pid"}
	pids := func() []int {
		var out []int
		for _, f := range files {
			out = append(out, readPID(filepath.Join(dir, f)))
		}
		return out
	}
	killLeftovers(t, pids)
	w := c.worker("worker", base, []string{"WHILLY_AGENT=command", "WHILLY_AGENT_CMD=" + script, "E2E_DIR=" + dir, "WHILLY_SANDBOX=none", "WHILLY_AGENT_ENV=E2E_DIR",
		"WHILLY_AGENT_TIMEOUT=1s"}, "--plan", "timeout", "--drain")

	testkit.Eventually(t, 60*time.Second, "the agent and its children to start", func() bool {
		return !slices.Contains(pids(), 0)
	})
	started := pids()
	group := groupMembers(started[0])
	if len(group) < 4 {
		t.Errorf("the agent's process group %d holds %v, want the leader and its children", started[0], group)
	}
	// A drained worker whose task ended FAILED exits 1.
	if code := w.wait(t, 60*time.Second); code != 1 {
		t.Fatalf("worker exited %d, want 1 (--drain, its task and the plan FAILED)", code)
	}
	for i, pid := range started {
		if alive(pid) {
			t.Errorf("%s (pid %d) outlived the timeout", files[i], pid)
		}
	}
	if left := groupMembers(started[0]); len(left) > 0 {
		t.Errorf("processes of the agent's group are still alive: %v", left)
	}
	var reason string
	if err := c.pool.QueryRow(t.Context(), `SELECT payload->>'reason' FROM events
		WHERE plan_id = 'timeout' AND task_id = 'T001' AND type = 'FAIL'`).Scan(&reason); err != nil {
		t.Fatalf("read the FAIL event: %v", err)
	}
	if reason != "timeout" {
		t.Errorf("the attempt failed with %q, want timeout", reason)
	}
	if st := c.planStatus("timeout"); st != "FAILED" {
		t.Errorf("plan is %s, want FAILED", st)
	}
}

// A worker pointed at a plan that has finished (or is paused, or cancelled) gets "nothing"
// at once from every claim, since the control plane will not wait for such a plan; it
// must back off rather than ask again thousands of times a second.
func TestWorkerOnAFinishedPlanDoesNotSpin(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	base := c.serveOne()
	c.importPlan(base, planDoc("finished", 1, 0))
	first := c.worker("worker-once", base, []string{"WHILLY_AGENT=sim"}, "--plan", "finished", "--once")
	if code := first.wait(t, 60*time.Second); code != 0 {
		t.Fatalf("worker --once exited %d", code)
	}
	if st := c.planStatus("finished"); st != "DONE" {
		t.Fatalf("plan is %s, want DONE", st)
	}
	before := c.emptyClaims(base)
	w := c.worker("worker", base, []string{"WHILLY_AGENT=sim"}, "--plan", "finished")
	testkit.Eventually(t, 60*time.Second, "the worker's first claim", func() bool { return c.emptyClaims(base) > before })
	// Not a wait for a condition: the window over which the claims are counted.
	const window = 2 * time.Second
	from := c.emptyClaims(base)
	time.Sleep(window)
	claims := c.emptyClaims(base) - from
	t.Logf("%d empty claims in %v", claims, window)
	if claims > 20 {
		t.Errorf("the worker made %d claims in %v on a finished plan: it spins", claims, window)
	}
	if w.exited() {
		t.Errorf("the worker exited (%v); without --drain it should keep waiting", w.state)
	}
}
