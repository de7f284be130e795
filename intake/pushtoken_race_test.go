package intake_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

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
	tokens := endLeases(t, ctx, e, "", workers)
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

// Leases of many small plans of one installation end from several workers at once (an
// issue is a plan of a few tasks): the revocation is one job for the installation, not
// one per plan. While nothing works the job, however many plans' leases end, one job
// waits; while jobs run (each as River would, one at a time), no more than one waits at
// any moment, and every token is revoked on GitHub exactly once.
func TestLeasesEndingInManyPlansOfAnInstallationShareOneRevocationJob(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{noRiver: true})
	ctx, cancel := context.WithTimeout(e.ctx, time.Minute)
	defer cancel()
	const workers, plans, each = 6, 16, 2
	var mu sync.Mutex
	var tokens []string
	// endAll imports the plans prefix0…, and the workers claim, mint and complete every
	// task of them.
	endAll := func(prefix string, issue int) {
		t.Helper()
		for n := range plans {
			p := &plan.Plan{ID: fmt.Sprint(prefix, n), Name: prefix, Repo: repoName}
			for i := range each {
				p.Tasks = append(p.Tasks, plan.Task{ID: fmt.Sprintf("T%02d", i), Priority: plan.PriorityMedium, Status: plan.StatusPending,
					Description: "Fix the spelling of commit in README.md", AcceptanceCriteria: []string{"no commmit"},
					TestSteps: []string{"grep commmit"}, MaxAttempts: 1})
			}
			e.gh.AddIssue(repoName, issue+n, "Small", "body", admin)
			if _, err := e.store.Import(ctx, p, queue.ImportOptions{GitHubIssueRef: fmt.Sprintf("%s#%d", repoName, issue+n), InstallationID: instID}); err != nil {
				t.Fatal(err)
			}
		}
		minted := endLeases(t, ctx, e, prefix, workers)
		mu.Lock()
		tokens = append(tokens, minted...)
		mu.Unlock()
	}
	waiting := func() []int64 {
		t.Helper()
		rows, err := e.pool.Query(ctx, `SELECT id FROM river_job WHERE kind = $1 AND state = 'available' ORDER BY id`, app.KindRevokePushTokens)
		if err != nil {
			t.Fatal(err)
		}
		ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		if err != nil {
			t.Fatal(err)
		}
		return ids
	}
	// work runs the revocation job id as River does: running, worked, completed.
	work := func(id int64) error {
		var args app.RevokePushTokensArgs
		if err := e.pool.QueryRow(ctx, `UPDATE river_job SET state = 'running', attempt = attempt + 1 WHERE id = $1 RETURNING args`, id).Scan(&args); err != nil {
			return err
		}
		if err := e.push.Worker().Work(ctx, &river.Job[app.RevokePushTokensArgs]{JobRow: &rivertype.JobRow{ID: id}, Args: args}); err != nil {
			return err
		}
		_, err := e.pool.Exec(ctx, `UPDATE river_job SET state = 'completed', finalized_at = now() WHERE id = $1`, id)
		return err
	}
	allRevokedOnce := func(when string) {
		t.Helper()
		revoked := map[string]bool{}
		for _, tr := range e.gh.TokenRequests() {
			revoked[tr.Token] = !tr.RevokedAt.IsZero()
		}
		for i, tok := range tokens {
			if !revoked[tok] {
				t.Fatalf("%s: token %d of %d not revoked", when, i, len(tokens))
			}
		}
		if n := e.gh.CountRequests("DELETE", "/installation/token"); n != len(tokens) {
			t.Fatalf("%s: %d revocations on GitHub for %d tokens; want each revoked once", when, n, len(tokens))
		}
	}

	// Nothing works the jobs: every plan's leases end, one job waits.
	endAll("small", 100)
	if len(tokens) != plans*each {
		t.Fatalf("%d tokens minted for %d tasks", len(tokens), plans*each)
	}
	ids := waiting()
	if len(ids) != 1 {
		t.Fatalf("%d leases of %d plans of one installation ended: %d revocation jobs wait; want 1", len(tokens), plans, len(ids))
	}
	if err := work(ids[0]); err != nil {
		t.Fatal(err)
	}
	allRevokedOnce("after the one job")

	// Jobs run while leases end: never more than one waits, and none is missed.
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		endAll("busy", 200)
	}()
	most, runs := 0, 0
	for done := false; !done; {
		select {
		case <-ended:
			done = true
		default:
		}
		ids := waiting() // after the workers are done: the last jobs
		most = max(most, len(ids))
		for _, id := range ids {
			if err := work(id); err != nil {
				t.Fatal(err)
			}
			runs++
		}
	}
	if most > 1 {
		t.Errorf("while leases of %d plans ended, %d revocation jobs of their installation waited at once; want at most 1", plans, most)
	}
	if ids := waiting(); len(ids) != 0 {
		t.Fatalf("%d revocation jobs left after the last ran", len(ids))
	}
	allRevokedOnce("after the jobs that ran while leases ended")
	t.Logf("%d leases ended while jobs ran: %d revocation jobs", plans*each, runs)
}

// endLeases runs workers that claim every PENDING task, mint its push token (a
// workspace) and complete it, named prefix+"w"+i, until none is left, and returns the
// tokens minted.
func endLeases(t *testing.T, ctx context.Context, e *env, prefix string, workers int) []string {
	t.Helper()
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		tokens []string
	)
	for i := range workers {
		w, _, err := e.store.RegisterWorker(ctx, fmt.Sprint(prefix, "w", i), nil)
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
	return tokens
}
