package intake_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/whilly-go/whilly/app"
	"github.com/whilly-go/whilly/plan"
	"github.com/whilly-go/whilly/queue"
	"github.com/whilly-go/whilly/testkit"
)

// Leases of busy plans end from several workers at once while River works the plan's
// revocation jobs: every token is revoked on GitHub by those jobs alone (this env runs
// no periodic sweep), although each plan has one revocation job waiting at a time — a
// lease that ends while the job runs is either in its list or enqueues the next job.
func TestPushTokensOfABusyPlanAllRevokedWithoutTheSweep(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	ctx, cancel := context.WithTimeout(e.ctx, time.Minute)
	defer cancel()
	// Several plans, each busy: every plan's last leases are a chance for one to be missed.
	// More plans than the test pool's 4 connections, each with its mirror job.
	const workers, plans, each = 6, 6, 20
	const tasks = plans * each
	for n := range plans {
		p := &plan.Plan{ID: fmt.Sprint("busy", n), Name: "busy", Repo: repoName}
		for i := range each {
			p.Tasks = append(p.Tasks, plan.Task{ID: fmt.Sprintf("T%02d", i), Priority: plan.PriorityMedium, Status: plan.StatusPending,
				Description: "Fix the spelling of commit in README.md", AcceptanceCriteria: []string{"no commmit"},
				TestSteps: []string{"grep commmit"}, MaxAttempts: 1})
		}
		e.gh.AddIssue(repoName, 100+n, "Busy", "body", admin)
		if _, err := e.store.Import(ctx, p, queue.ImportOptions{GitHubIssueRef: fmt.Sprintf("%s#%d", repoName, 100+n), InstallationID: instID}); err != nil {
			t.Fatal(err)
		}
	}
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		tokens []string
	)
	for i := range workers {
		w, _, err := e.store.RegisterWorker(ctx, fmt.Sprint("w", i), nil)
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			for ctx.Err() == nil {
				c, err := e.store.Claim(ctx, queue.ClaimRequest{WorkerID: w.ID})
				if err != nil {
					t.Error(err)
					return
				}
				if c == nil {
					var left int
					if err := e.pool.QueryRow(ctx, `SELECT count(*) FROM tasks WHERE status = 'PENDING'`).Scan(&left); err != nil {
						t.Error(err)
						return
					}
					if left == 0 {
						return
					}
					continue // a claim may skip the tasks other transactions lock
				}
				l := queue.Lease{PlanID: c.Task.PlanID, TaskID: c.Task.ID, LeaseID: c.Lease.ID, WorkerID: w.ID}
				ws, err := e.ws.Workspace(ctx, c.Plan, l)
				if err != nil || ws == nil || ws.Token == "" {
					t.Errorf("workspace of %s = %v, %v; want one with a token", c.Task.ID, ws, err)
					return
				}
				mu.Lock()
				tokens = append(tokens, ws.Token)
				mu.Unlock()
				if _, err := e.store.Complete(ctx, l, queue.CompleteInput{}); err != nil {
					t.Errorf("complete %s: %v", c.Task.ID, err)
					return
				}
			}
		})
	}
	wg.Wait()
	if len(tokens) != tasks {
		t.Fatalf("%d tokens minted for %d tasks", len(tokens), tasks)
	}
	live := func() int {
		revoked := map[string]bool{}
		for _, tr := range e.gh.TokenRequests() {
			revoked[tr.Token] = !tr.RevokedAt.IsZero()
		}
		n := 0
		for _, tok := range tokens {
			if !revoked[tok] {
				n++
			}
		}
		return n
	}
	testkit.Eventually(t, 20*time.Second, "every push token revoked by the plan's jobs", func() bool { return live() == 0 })
	var jobs int
	if err := e.pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE kind = $1`, app.KindRevokePushTokens).Scan(&jobs); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d leases ended, %d revocation jobs", tasks, jobs)
}
