package control_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/whilly-go/whilly/control"
	"github.com/whilly-go/whilly/control/client"
	"github.com/whilly-go/whilly/testkit"
)

// A task appearing in a plan that many claims wait on wakes one of them, not the herd:
// one claim gets it, one more is woken in case there is more (and finds nothing), the
// others sleep on without a query. Three tasks at once go to three claims; the plan's end
// wakes every claim at once.
func TestWaitingClaimsAreNotAHerd(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{control: control.Config{MetricsToken: "m"}})
	ctx := context.Background()
	const n = 20
	// A task no worker may take keeps the plan active while the claims wait.
	gpu := `{"id": "G", "priority": "high", "description": "a task only a gpu worker may take", "labels": ["gpu"]}`
	e.importPlan(`{"plan_id": "herd", "project": "Herd", "tasks": [` + gpu + `]}`)
	waiting := func() string {
		_, body := e.do("GET", "/metrics", "m", nil)
		for line := range strings.SplitSeq(body, "\n") {
			if v, ok := strings.CutPrefix(line, "whilly_claims_waiting "); ok {
				return v
			}
		}
		return ""
	}
	results := make(chan claimResult, n)
	for range n {
		w, _ := e.worker()
		go func() { results <- <-claimAsync(ctx, w, client.ClaimRequest{PlanID: "herd", WaitSeconds: 20}) }()
	}
	testkit.Eventually(t, 20*time.Second, "every claim to be asleep", func() bool { return waiting() == "20" })
	if got := e.listener.Subscribers(); got != 1 {
		t.Errorf("%d listener subscriptions for %d alike claims, want 1", got, n)
	}

	nextReady := func(from int) int {
		k := 0
		for _, q := range e.queries.snapshot()[from:] {
			if strings.Contains(q.sql, "min(not_before)") {
				k++
			}
		}
		return k
	}
	from := len(e.queries.snapshot())
	e.importPlan(`{"plan_id": "herd", "project": "Herd", "tasks": [` + gpu + `,
		{"id": "A", "priority": "high", "description": "the one task any worker may take"}]}`)
	r := receive(t, results)
	if r.err != nil || r.claim == nil || r.claim.Task.ID != "A" {
		t.Fatalf("claim = %+v, %v; want task A", r.claim, r.err)
	}
	testkit.Eventually(t, 20*time.Second, "the other claims to be asleep again", func() bool { return waiting() == "19" })
	if k := nextReady(from); k > 2 {
		t.Errorf("one task woke %d claims that found nothing (next-retry lookups); want at most 2 of %d", k, n-1)
	}
	select {
	case r := <-results:
		t.Fatalf("a second claim returned: %+v, %v", r.claim, r.err)
	default:
	}

	e.importPlan(`{"plan_id": "herd", "project": "Herd", "tasks": [` + gpu + `,
		{"id": "A", "priority": "high", "description": "the one task any worker may take"},
		{"id": "B", "priority": "high", "description": "a second task"},
		{"id": "C", "priority": "high", "description": "a third task"},
		{"id": "D", "priority": "high", "description": "a fourth task"}]}`)
	got := map[string]bool{}
	for range 3 {
		r := receive(t, results)
		if r.err != nil || r.claim == nil {
			t.Fatalf("claim = %+v, %v; want one of B, C, D", r.claim, r.err)
		}
		got[r.claim.Task.ID] = true
	}
	if !got["B"] || !got["C"] || !got["D"] {
		t.Fatalf("claimed %v; want B, C and D", got)
	}

	begin := time.Now()
	if _, err := e.store.CancelPlan(ctx, "herd", "test", "tester"); err != nil {
		t.Fatal(err)
	}
	for range n - 4 {
		if r := receive(t, results); r.err != nil || r.claim != nil {
			t.Fatalf("claim after the plan's end = %+v, %v; want nothing", r.claim, r.err)
		}
	}
	if took := time.Since(begin); took > 10*time.Second {
		t.Errorf("the plan's end reached the waiting claims after %v", took)
	}
}
