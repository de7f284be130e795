package queue

import (
	"context"
	"log/slog"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
)

// QueueGitHub is the River queue of every GitHub job (deliveries, mirroring, dispatch,
// reconciling, delivery polling). Only control planes configured with the App work it,
// so a `whilly run`, `dashboard` or `bench` process — whose River client knows no GitHub
// job kinds — never takes one and fails it as "not registered". Persisted: never rename.
const QueueGitHub = "github"

// GitHubWorkers is how many jobs of QueueGitHub a control plane works at once. Its jobs
// mostly wait on GitHub; with 10, bench scale's deliveries queued behind mirror runs
// (label→👀 p50 0.7–0.8 s, p99 1.9–2.6 s, over two runs); with 24, p50 0.21 s and p99
// 0.43 s in one run. Mirror runs hold at most (pool size − 1)/2 connections
// (WithMirrorLock), so the claims keep theirs.
const GitHubWorkers = 24

// Schedule is a periodic job that each control plane configured for it enqueues by
// itself, instead of leaving it to River's leader, which may be a process that does not
// know the job (whilly run leads as well as serve). Args must make the job unique for
// its period (river.UniqueOpts.ByPeriod), so that the replicas' inserts make one job.
type Schedule struct {
	Name       string
	Every      time.Duration
	RunOnStart bool
	Args       func() (river.JobArgs, *river.InsertOpts)
}

// Inserter inserts River jobs; *river.Client[pgx.Tx] is one.
type Inserter interface {
	Insert(ctx context.Context, args river.JobArgs, opts *river.InsertOpts) (*rivertype.JobInsertResult, error)
}

// RunSchedules enqueues each schedule's job once per period (and at start when asked)
// until ctx ends. A failed insert is logged and tried again at the next tick.
func RunSchedules(ctx context.Context, jobs Inserter, log *slog.Logger, scheds []Schedule) {
	for _, sc := range scheds {
		go func() {
			insert := func() {
				args, opts := sc.Args()
				if _, err := jobs.Insert(ctx, args, opts); err != nil && ctx.Err() == nil {
					log.WarnContext(ctx, "enqueue a periodic job", "job", sc.Name, "error", err)
				}
			}
			if sc.RunOnStart {
				insert()
			}
			t := time.NewTicker(sc.Every)
			defer t.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-t.C:
					insert()
				}
			}
		}()
	}
}
