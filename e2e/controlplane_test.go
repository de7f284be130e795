//go:build linux

package e2e_test

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/whilly-go/whilly/control/client"
	"github.com/whilly-go/whilly/plan"
	"github.com/whilly-go/whilly/testkit"
)

// gatedPlan is n tasks that all wait for a gate task G which only a worker labelled
// "human" may take: workers without that label wait in long-poll until the test
// completes G itself.
func gatedPlan(planID string, n int) []byte {
	ts := tasks(n, 0)
	for i := range ts {
		ts[i].Dependencies = []string{"G"}
	}
	gate := taskSpec{ID: "G", Priority: "critical", Description: "The gate every other task of the plan waits for",
		Labels: []string{"human"}, AcceptanceCriteria: []string{"a human says go"}, TestSteps: []string{"true"}}
	return planFile(planID, append([]taskSpec{gate}, ts...))
}

// openGate claims and completes the gate task G as a worker labelled "human".
func (c *cluster) openGate(base, planID string) {
	c.t.Helper()
	_, token := c.register(base, "human")
	api := c.api(base, token)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := api.Claim(ctx, client.ClaimRequest{PlanID: planID})
	if err != nil || cl == nil || cl.Task.ID != "G" {
		c.t.Fatalf("claim the gate: %+v, %v", cl, err)
	}
	if _, err := api.Complete(ctx, planID, "G", client.CompleteRequest{LeaseID: cl.Lease.ID, CostUSD: plan.USD(0)}); err != nil {
		c.t.Fatalf("complete the gate: %v", err)
	}
}

// Restarting the control plane — SIGKILL, then a new `whilly serve` on the same port —
// while the workers wait in long-poll does not stop them: they wait it out and finish
// the plan once work appears.
func TestWorkersOutliveAControlPlaneRestart(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	addr := freeAddr(t)
	port := portOf(t, addr)
	base := "http://" + addr
	first := c.serve("serve-1", addr)
	const n = 30
	c.importPlan(base, gatedPlan("restart", n))

	var workers []workerProc
	for i := range 3 {
		workers = append(workers, c.worker(fmt.Sprintf("worker-%d", i+1), base, []string{"WHILLY_AGENT=sim"}, "--plan", "restart", "--drain"))
	}
	// Nothing is claimable: each worker holds one connection, its waiting claim.
	testkit.Eventually(t, 60*time.Second, "three workers waiting in long-poll", func() bool { return established(port) >= 3 })

	first.kill(syscall.SIGKILL)
	first.wait(t, 30*time.Second)
	for _, w := range workers {
		if w.exited() {
			t.Fatalf("%s exited when the control plane went away: %v\n%s", w.name, w.state, w.stderr.String())
		}
	}
	c.serve("serve-2", addr)
	testkit.Eventually(t, 60*time.Second, "the workers to wait on the new control plane", func() bool { return established(port) >= 3 })

	c.openGate(base, "restart")
	for _, w := range workers {
		if code := w.wait(t, 90*time.Second); code != 0 {
			t.Fatalf("%s exited %d, want 0", w.name, code)
		}
		if !strings.Contains(w.stderr.String(), "control plane unavailable") {
			t.Logf("%s never saw the control plane down (its claim may have been between requests)", w.name)
		}
	}
	c.assertDoneOnce("restart", n+1)
}

// Two `whilly serve` replicas on one database, with workers spread over both, complete a
// 500-task plan with no task done twice: each task is claimed once and completed once.
func TestTwoReplicasShareOnePlanWithoutDoubleWork(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	addrs := []string{freeAddr(t), freeAddr(t)}
	for i, a := range addrs {
		c.serve(fmt.Sprintf("serve-%d", i+1), a)
	}
	const n = 500
	c.importPlan("http://"+addrs[0], planDoc("replicas", n, 0))

	var workers []workerProc
	for i := range 4 {
		base := "http://" + addrs[i%2]
		workers = append(workers, c.worker(fmt.Sprintf("worker-%d@serve-%d", i+1, i%2+1), base,
			[]string{"WHILLY_AGENT=sim"}, "--plan", "replicas", "--drain"))
	}
	for _, w := range workers {
		if code := w.wait(t, 100*time.Second); code != 0 {
			t.Fatalf("%s exited %d, want 0", w.name, code)
		}
	}
	c.assertDoneOnce("replicas", n)
	claims := c.eventCounts("replicas", "CLAIM")
	for id, k := range claims {
		if k != 1 {
			t.Errorf("task %s was claimed %d times", id, k)
		}
	}
	// Both replicas handed out work: some worker of each one claimed a task.
	perWorker := map[string]int{}
	rows, err := c.pool.Query(t.Context(), `SELECT payload->>'worker_id', count(*) FROM events
		WHERE plan_id = 'replicas' AND type = 'CLAIM' GROUP BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id string
		var k int
		if err := rows.Scan(&id, &k); err != nil {
			t.Fatal(err)
		}
		perWorker[id] = k
	}
	rows.Close()
	served := [2]int{}
	for i, w := range workers {
		served[i%2] += perWorker[w.id]
	}
	t.Logf("claims through serve-1: %d, through serve-2: %d", served[0], served[1])
	if served[0] == 0 || served[1] == 0 {
		t.Errorf("claims per replica %v: one replica handed out nothing", served)
	}
}
