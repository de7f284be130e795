package queue_test

import (
	"context"
	"testing"

	"github.com/whilly-go/whilly/plan"
	"github.com/whilly-go/whilly/queue"
	"github.com/whilly-go/whilly/testkit"
)

// BenchmarkGetClaimedTask reads one claimed task, a row of every task column with its
// lease set: a round trip and the scan of one row, as each claim and COMPLETE answer
// scans its task.
func BenchmarkGetClaimedTask(b *testing.B) {
	ctx := context.Background()
	st, _ := newStore(b)
	importTasks(b, st, &plan.Plan{ID: "scan", Name: "scan", Tasks: []plan.Task{goodTask("A")}})
	w := register(b, st)
	if c, err := st.Claim(ctx, queue.ClaimRequest{WorkerID: w.ID, PlanID: "scan"}); err != nil || c == nil {
		b.Fatalf("claim: %v %v", c, err)
	}
	testkit.ReportCPU(b)
	for b.Loop() {
		if _, err := st.GetTask(ctx, "scan", "A"); err != nil {
			b.Fatal(err)
		}
	}
}
