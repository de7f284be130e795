package queue_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/whilly-go/whilly/internal/testkit"
	"github.com/whilly-go/whilly/plan"
	"github.com/whilly-go/whilly/queue"
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
