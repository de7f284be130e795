package queue_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/whilly-go/whilly/plan"
	"github.com/whilly-go/whilly/queue"
	"github.com/whilly-go/whilly/testkit"
)

// genericPlan returns the generic plan of sql with args (SQL literals), in a transaction
// with the settings of hot batches and then those of settings: the plan a pooled
// connection keeps for it.
func genericPlan(t *testing.T, pool *pgxpool.Pool, sql, args string, settings ...string) []string {
	t.Helper()
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	for _, set := range append([]string{queue.HotSettings}, settings...) {
		if _, err := tx.Exec(ctx, set); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := tx.Prepare(ctx, "explained", sql); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Conn().Deallocate(ctx, "explained") }()
	rows, err := tx.Query(ctx, `EXPLAIN (COSTS OFF) EXECUTE explained(`+args+`)`)
	if err != nil {
		t.Fatal(err)
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return lines
}

// TestClaimWalksTheClaimOrderAfterABurstOfImports: after a burst of issue plans — chains
// of 20 tasks, as intake makes them — a claim of any plan walks the claim order and probes
// each task's plan by its key, with the statistics of a young install (tables analyzed
// empty) and with fresh ones. It once read and sorted every pending task of every live
// plan instead (28–54 ms a claim with 300 issues in bench scale).
func TestClaimWalksTheClaimOrderAfterABurstOfImports(t *testing.T) {
	ctx := context.Background()
	pool := testkit.DB(t)
	st := queue.NewStore(pool, nil, queue.Config{})
	if _, err := pool.Exec(ctx, `ANALYZE tasks, plans`); err != nil {
		t.Fatal(err)
	}
	for i := range 100 {
		p := &plan.Plan{ID: fmt.Sprintf("issue-%03d", i), Name: "issue"}
		for k := range 20 {
			var deps []string
			if k > 0 {
				deps = []string{fmt.Sprintf("T%d", k)}
			}
			p.Tasks = append(p.Tasks, goodTask(fmt.Sprintf("T%d", k+1), deps...))
		}
		importTasks(t, st, p)
	}
	w := register(t, st)
	for _, analyzed := range []bool{false, true} {
		if analyzed {
			if _, err := pool.Exec(ctx, `ANALYZE tasks, plans`); err != nil {
				t.Fatal(err)
			}
		}
		lines := genericPlan(t, pool, queue.ClaimAnySQL, fmt.Sprintf(`'', '{}', ARRAY['%s'], 60, ARRAY[''], '{}'`, w.ID), queue.WalkStart)
		got := strings.Join(lines, "\n")
		if !strings.Contains(got, "tasks_claim_fair") || strings.Contains(got, "Sort Key: t.priority_rank") ||
			!strings.Contains(got, "Index Cond: (id = t.plan_id)") {
			t.Errorf("analyzed %v: the claim does not walk the claim order (tasks_claim_fair) probing plans by key:\n%s", analyzed, got)
		}
	}
}

// TestAWorkersClaimsAreLookedUpByIndexScans: markChangedSQL finds the tasks a batch's
// claims just leased by their workers, walking tasks_claimed_by one worker at a time,
// with an index scan. tasks_claimed_by keeps an entry for every claim until vacuum; a
// bitmap scan for all the workers at once visited every such entry's heap page on every
// call, and left them for the next (late in bench scale, 431 entries and 240 pages for
// five workers: 5 ms of a handoff's transaction), where an index scan marks the dead ones
// and passes over them afterwards.
func TestAWorkersClaimsAreLookedUpByIndexScans(t *testing.T) {
	pool, workers := busyFleet(t)
	lines := genericPlan(t, pool, queue.MarkChangedSQL, `'{}', 'p00', '{T00}', ARRAY[`+strings.Join(workers, ", ")+`]`)
	lookups := 0
	for i, l := range lines {
		if strings.Contains(l, "Index Cond: (claimed_by = ") {
			lookups++
			if !strings.Contains(lines[i-1], "->  Index Scan using tasks_claimed_by") {
				t.Errorf("markChangedSQL looks the workers' claims up with %q, not an index scan:\n%s", strings.TrimSpace(lines[i-1]), strings.Join(lines, "\n"))
			}
		}
	}
	if lookups == 0 {
		t.Errorf("markChangedSQL does not look the workers' claims up in tasks_claimed_by:\n%s", strings.Join(lines, "\n"))
	}
}

// TestARevocationCheckProbesItsPlansTokens: markChangedSQL asks whether a plan has a push
// token of an ended lease by walking that plan's tokens and probing each one's task by
// key (leaseEnded), not by joining every token with every running task: its generic plan
// once read all the tokens of all plans for it (8 ms a claim or completion, late in bench
// scale).
func TestARevocationCheckProbesItsPlansTokens(t *testing.T) {
	pool, workers := busyFleet(t)
	lines := genericPlan(t, pool, queue.MarkChangedSQL, `'{}', 'p00', '{T00}', ARRAY[`+strings.Join(workers, ", ")+`]`)
	got := strings.Join(lines, "\n")
	tokens := 0
	for i, l := range lines {
		if strings.Contains(l, " on push_tokens ") {
			tokens++
			if i+1 == len(lines) || !strings.Contains(lines[i+1], "Index Cond: (plan_id = ") {
				t.Errorf("markChangedSQL reads push_tokens without its plan's key: %q\n%s", strings.TrimSpace(l), got)
			}
		}
	}
	if tokens == 0 || strings.Contains(got, "Anti Join") {
		t.Errorf("markChangedSQL does not probe the plan's push tokens one by one:\n%s", got)
	}
}

// busyFleet imports 20 plans of 20 tasks and has 8 workers claim 10 tasks each, each
// claim with a push token, then analyzes: the workers' ids come back as SQL literals.
func busyFleet(t *testing.T) (*pgxpool.Pool, []string) {
	t.Helper()
	ctx := context.Background()
	pool := testkit.DB(t)
	st := queue.NewStore(pool, nil, queue.Config{})
	for i := range 20 {
		importTasks(t, st, widePlan(fmt.Sprintf("p%02d", i), 20))
	}
	var workers []string
	for range 8 {
		w := register(t, st)
		workers = append(workers, "'"+w.ID+"'")
		for range 10 {
			c, err := st.Claim(ctx, queue.ClaimRequest{WorkerID: w.ID})
			if err != nil || c == nil {
				t.Fatalf("claim: %v, %v", c, err)
			}
			_, err = st.RecordPushToken(ctx, queue.PushToken{LeaseID: c.Lease.ID, PlanID: c.Task.PlanID, TaskID: c.Task.ID,
				InstallationID: 1, Sealed: []byte("sealed"), ExpiresAt: time.Now().Add(time.Hour)})
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := pool.Exec(ctx, `ANALYZE tasks, plans, push_tokens`); err != nil {
		t.Fatal(err)
	}
	return pool, workers
}
