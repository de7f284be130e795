package control_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/whilly-go/whilly/control/client"
	"github.com/whilly-go/whilly/testkit"
)

// BenchmarkCompleteClaimNext drives the worker protocol's hot path the way a fleet does:
// workers each complete their task with a log tail and claim_next, getting the next task
// started in the same answer. One op is one task; the plans are imported first. cpu-ns/op
// counts the workers' client and the control plane, not Postgres. Use a -benchtime of
// a multiple of 400x: every round completes 400 tasks.
func BenchmarkCompleteClaimNext(b *testing.B) {
	e := newEnv(b, envOptions{})
	const workers, perRound = 8, 400
	clients := make([]*client.Client, workers)
	for i := range clients {
		clients[i], _ = e.worker()
	}
	ctx := context.Background()
	tail := strings.Repeat("agent output line\n", 16)
	rounds := (b.N + perRound - 1) / perRound
	for round := range rounds {
		e.importPlan(planDoc(fmt.Sprintf("bench%d", round), seq("T", perRound)...))
	}
	testkit.ReportCPU(b)
	b.ResetTimer()
	for round := range rounds {
		planID := fmt.Sprintf("bench%d", round)
		var wg sync.WaitGroup
		for _, c := range clients {
			wg.Go(func() {
				cl, err := c.Claim(ctx, client.ClaimRequest{PlanID: planID})
				if err == nil && cl != nil {
					_, err = c.Start(ctx, planID, cl.Task.ID, client.LeaseRequest{LeaseID: cl.Lease.ID})
				}
				for err == nil && cl != nil {
					var res client.CompleteResponse
					res, err = c.Complete(ctx, planID, cl.Task.ID, client.CompleteRequest{LeaseID: cl.Lease.ID, CostUSD: 0,
						Result: "done", DurationMS: 1200, Log: &client.LogTail{Text: tail},
						ClaimNext: &client.NextClaim{PlanID: planID, IdempotencyKey: client.NewKey(), Start: true}})
					cl = res.Next
				}
				if err != nil {
					b.Error(err)
				}
			})
		}
		wg.Wait()
	}
}
