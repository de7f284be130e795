package queue_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/whilly-go/whilly/queue"
)

// TestKEDAQueryCountsTasksThatNeedAWorker runs the query of the Helm chart's KEDA
// ScaledObject (deploy/helm/whilly/files/ready-tasks.sql) against the real schema: it
// must count the claimable tasks exactly as ReadyCounts (and so whilly_ready_tasks) does,
// plus the tasks being worked on, whatever their plan's state, so that KEDA neither
// scales to zero under a running task nor wakes workers for work they cannot claim.
func TestKEDAQueryCountsTasksThatNeedAWorker(t *testing.T) {
	t.Parallel()
	query, err := os.ReadFile(filepath.Join("..", "deploy", "helm", "whilly", "files", "ready-tasks.sql"))
	if err != nil {
		t.Fatal(err)
	}
	st, pool := newStore(t)
	ctx := context.Background()
	count := func() int {
		t.Helper()
		var n int
		if err := pool.QueryRow(ctx, string(query)).Scan(&n); err != nil {
			t.Fatalf("the KEDA query fails: %v", err)
		}
		return n
	}
	if n := count(); n != 0 {
		t.Fatalf("empty database: the query counts %d", n)
	}

	importTasks(t, st, mustParse(t, `{"plan_id": "live", "project": "Live", "tasks": [
		{"id": "A", "priority": "high", "description": "first task, nothing before it"},
		{"id": "B", "priority": "high", "description": "waits for A to be done", "dependencies": ["A"]},
		{"id": "C", "priority": "high", "description": "second task, nothing before it"},
		{"id": "D", "priority": "high", "description": "waits for C to be done", "dependencies": ["C"]},
		{"id": "E", "priority": "low", "description": "third task, nothing before it"}]}`))
	importTasks(t, st, mustParse(t, `{"plan_id": "paused", "project": "Paused", "tasks": [
		{"id": "P1", "priority": "high", "description": "claimed before the plan paused"},
		{"id": "P2", "priority": "high", "description": "pending in a paused plan"}]}`))
	importTasks(t, st, mustParse(t, `{"plan_id": "broke", "project": "Broke", "budget_usd": 1, "tasks": [
		{"id": "X", "priority": "high", "description": "pending in a plan without budget"}]}`))
	if n := count(); n != 6 {
		t.Fatalf("after import: the query counts %d, want 6 (A, C, E, P1, P2, X)", n)
	}

	w := register(t, st)
	claim := func(planID string) *queue.Claim {
		t.Helper()
		c, err := st.Claim(ctx, queue.ClaimRequest{WorkerID: w.ID, PlanID: planID})
		if err != nil || c == nil {
			t.Fatalf("claim from %s: %v, %v", planID, c, err)
		}
		return c
	}
	a, c := claim("live"), claim("live") // A, then C (E is low priority)
	if a.Task.ID != "A" || c.Task.ID != "C" {
		t.Fatalf("claimed %s and %s, want A and C", a.Task.ID, c.Task.ID)
	}
	retry := true
	if _, err := st.Fail(ctx, queue.Lease{PlanID: "live", TaskID: "C", LeaseID: c.Lease.ID, WorkerID: w.ID},
		queue.FailInput{Reason: "exit_code: 1", Retryable: &retry}); err != nil {
		t.Fatal(err) // C waits out its backoff: not claimable, not running
	}
	if _, err := st.Start(ctx, queue.Lease{PlanID: "live", TaskID: "A", LeaseID: a.Lease.ID, WorkerID: w.ID}); err != nil {
		t.Fatal(err) // A is IN_PROGRESS
	}
	claim("paused") // P1 stays CLAIMED
	for _, q := range []string{
		`UPDATE plans SET status = 'PAUSED', pause_reason = 'operator' WHERE id = 'paused'`,
		`UPDATE plans SET spent_usd = budget_usd WHERE id = 'broke'`,
	} {
		if _, err := pool.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}

	ready, err := st.ReadyCounts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sum := 0
	for _, n := range ready {
		sum += n
	}
	var running int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM tasks WHERE status IN ('CLAIMED', 'IN_PROGRESS')`).Scan(&running); err != nil {
		t.Fatal(err)
	}
	// Ready: E. Running: A (IN_PROGRESS), and P1 (CLAIMED) of the paused plan. Not counted: B and D (dependencies),
	// C (backoff), P2 (plan paused), X (budget spent).
	if sum != 1 || running != 2 {
		t.Fatalf("ReadyCounts = %v and %d running; the fixture is not what this test expects", ready, running)
	}
	if n := count(); n != sum+running {
		t.Errorf("the KEDA query counts %d, want %d ready + %d running", n, sum, running)
	}
}

// TestKEDAQueryCountsOnlyTheChartsWorkers runs the query as the Helm chart renders it for
// workers with labels and scopes (its first line set, as the chart sets it): tasks those
// workers may not claim (labels they lack, plans outside their scopes), tasks held by
// workers outside the chart (a laptop, an Actions runner), and pending tasks while the
// fleet is paused do not wake or keep pods.
func TestKEDAQueryCountsOnlyTheChartsWorkers(t *testing.T) {
	t.Parallel()
	body, err := os.ReadFile(filepath.Join("..", "deploy", "helm", "whilly", "files", "ready-tasks.sql"))
	if err != nil {
		t.Fatal(err)
	}
	first, rest, _ := strings.Cut(strings.TrimSpace(string(body)), "\n")
	if !strings.HasPrefix(first, "WITH chart AS (SELECT ") {
		t.Fatalf("ready-tasks.sql begins with %q, not the line of parameters the chart replaces", first)
	}
	// As the chart's whilly.kedaQuery renders it for labels gpu,linux, scope plan:mine.
	query := func(running bool) string {
		return fmt.Sprintf("WITH chart AS (SELECT ARRAY['gpu', 'linux']::text[] AS labels, ARRAY['plan:mine']::text[] AS scopes, %t AS running, 'whilly-worker-' AS pods)\n%s", running, rest)
	}
	st, pool := newStore(t)
	ctx := context.Background()
	count := func(running bool) int {
		t.Helper()
		var n int
		if err := pool.QueryRow(ctx, query(running)).Scan(&n); err != nil {
			t.Fatalf("the KEDA query fails: %v", err)
		}
		return n
	}
	importTasks(t, st, mustParse(t, `{"plan_id": "mine", "project": "Mine", "tasks": [
		{"id": "A", "priority": "high", "description": "runs on a pod of the chart"},
		{"id": "B", "priority": "high", "description": "runs on a laptop"},
		{"id": "C", "priority": "high", "description": "ready, no labels"},
		{"id": "G", "priority": "high", "description": "ready, needs a gpu", "labels": ["gpu"]},
		{"id": "W", "priority": "high", "description": "ready, needs windows", "labels": ["windows"]}]}`))
	importTasks(t, st, mustParse(t, `{"plan_id": "theirs", "project": "Theirs", "tasks": [
		{"id": "T", "priority": "high", "description": "ready, outside the chart's scopes"}]}`))

	claimAs := func(hostname, want string) {
		t.Helper()
		w, _, err := st.RegisterWorker(ctx, hostname, nil)
		if err != nil {
			t.Fatal(err)
		}
		c, err := st.Claim(ctx, queue.ClaimRequest{WorkerID: w.ID, PlanID: "mine"})
		if err != nil || c == nil || c.Task.ID != want {
			t.Fatalf("%s claims %v, %v; want %s", hostname, c, err, want)
		}
	}
	claimAs("whilly-worker-7d9f8-x2x4q", "A")
	claimAs("laptop", "B")

	// Ready for the chart's workers: C and G. Running on its pods: A.
	if n := count(false); n != 2 {
		t.Errorf("ScaledJob query = %d, want 2 (C, G)", n)
	}
	if n := count(true); n != 3 {
		t.Errorf("ScaledObject query = %d, want 3 (C, G ready; A on a pod)", n)
	}
	if _, err := st.PauseFleet(ctx, queue.Actor{By: "test"}); err != nil {
		t.Fatal(err)
	}
	if n := count(false); n != 0 {
		t.Errorf("fleet paused: ScaledJob query = %d, want 0", n)
	}
	if n := count(true); n != 1 {
		t.Errorf("fleet paused: ScaledObject query = %d, want 1 (A still runs on its pod)", n)
	}
}
