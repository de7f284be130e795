package queue

import (
	"context"
	"log/slog"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
)

// QueueGitHub is the River queue of the GitHub jobs other than deliveries (mirroring,
// push-token revocation, dispatch, reconciling, delivery polling). Only control planes
// configured with the App work it (GitHubQueues), so a `whilly run`, `dashboard` or
// `bench` process — whose River client knows no GitHub job kinds — never takes one and
// fails it as "not registered". Persisted: never rename. It held the deliveries too,
// before QueueGitHubIntake: a control plane still works those it finds there.
const QueueGitHub = "github"

// QueueGitHubIntake is the River queue of webhook deliveries (labelled issues, commands),
// worked like QueueGitHub only by control planes with the App. It is a queue of its own
// so that a labelled issue never waits for a slot behind the mirror and the revocations,
// whose jobs wait on GitHub as long as GitHub takes: with a fake GitHub answering in
// 100 ms, bench scale's deliveries waited 267 ms at the median (p90 548 ms) for one of
// QueueGitHub's slots. Persisted: never rename.
const QueueGitHubIntake = "github_intake"

// GitHubWorkers and GitHubIntakeWorkers are how many jobs of QueueGitHub and of
// QueueGitHubIntake a control plane works at once. Their jobs mostly wait on GitHub, and
// hold a connection only while they read or write the store, not during their GitHub
// calls (WithMirrorLock). With 10 for both kinds, bench scale's deliveries queued behind
// mirror runs (label→👀 p50 0.7–0.8 s, p99 1.9–2.6 s, over two runs); with 24, p50
// 0.21 s and p99 0.43 s in one run. 48 deliveries at once cut label→👀 p99 from 786 to
// 485 ms with a GitHub answering in 100 ms, but with one answering at once they shared
// the few connections the workers leave (queue.Store's worker slots) 48 ways:
// label→first claim p50 231 ms against 63.
const (
	GitHubWorkers       = 24
	GitHubIntakeWorkers = 24
)

// IntakePollInterval is how often a control plane with the App looks for deliveries
// without being notified of them: the longest a delivery waits when it committed in the
// same millisecond as another and the fetch that one's notification started had already
// read the queue (InsertNotifyCooldown). River's default poll, 1 s, let 3 of 4
// deliveries inserted at once wait 615 ms in one of 12 tries. Idle, that is ten cheap
// queries a second per control plane.
const IntakePollInterval = 100 * time.Millisecond

// GitHubQueues are the River queues a control plane with the App works: the deliveries'
// queue fetches as soon as it is notified (InsertNotifyCooldown), as deliveries are few
// and a labelled issue waits on each.
func GitHubQueues() map[string]river.QueueConfig {
	return map[string]river.QueueConfig{
		QueueGitHub:       {MaxWorkers: GitHubWorkers},
		QueueGitHubIntake: {MaxWorkers: GitHubIntakeWorkers, FetchCooldown: InsertNotifyCooldown, FetchPollInterval: IntakePollInterval},
	}
}

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
