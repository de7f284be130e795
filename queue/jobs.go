package queue

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"

	"github.com/whilly-go/whilly/internal/logging"
)

// River job kinds. They are persisted: never rename one.
const (
	KindReapLeases   = "whilly.reap_leases"
	KindSweepWorkers = "whilly.sweep_workers"
)

// ReapLeasesArgs is the periodic lease reaper.
type ReapLeasesArgs struct{}

// Kind implements river.JobArgs.
func (ReapLeasesArgs) Kind() string { return KindReapLeases }

// SweepWorkersArgs is the periodic offline-worker sweep.
type SweepWorkersArgs struct{}

// Kind implements river.JobArgs.
func (SweepWorkersArgs) Kind() string { return KindSweepWorkers }

type reapWorker struct {
	river.WorkerDefaults[ReapLeasesArgs]
	store *Store
	log   *slog.Logger
}

func (w *reapWorker) Work(ctx context.Context, _ *river.Job[ReapLeasesArgs]) error {
	n, err := w.store.ReapExpiredLeases(ctx)
	if err != nil {
		return err
	}
	if n > 0 {
		w.log.InfoContext(ctx, "expired leases returned to the queue", "tasks", n)
	}
	return nil
}

type sweepWorker struct {
	river.WorkerDefaults[SweepWorkersArgs]
	store   *Store
	log     *slog.Logger
	offline time.Duration
}

func (w *sweepWorker) Work(ctx context.Context, _ *river.Job[SweepWorkersArgs]) error {
	n, err := w.store.MarkOfflineWorkers(ctx, w.offline)
	if err != nil {
		return err
	}
	if n > 0 {
		w.log.InfoContext(ctx, "workers marked offline", "workers", n)
	}
	return nil
}

// JobsConfig tunes the background jobs.
type JobsConfig struct {
	// ReapInterval is how often expired leases are looked for; default a quarter of the
	// lease TTL, between 1 s and 15 s.
	ReapInterval time.Duration
	// OfflineAfter marks workers silent this long offline; default 3 lease TTLs.
	OfflineAfter time.Duration
	// Register adds more job workers and periodic jobs (GitHub mirroring, intake …).
	Register func(*river.Workers) []*river.PeriodicJob
	// Queues adds River queues beside the default one, so slow jobs (the failure
	// analyzer) cannot hold up the lease reaper.
	Queues map[string]river.QueueConfig
	// PollInterval is how often a queue without a poll interval of its own looks for
	// jobs besides the insert notifications; default River's (1 s). Tests shorten it.
	PollInterval time.Duration
}

// NewRiver builds the control plane's River client with whilly's job workers and
// periodic jobs. River elects one leader among all replicas to enqueue periodic jobs, so
// any number of control planes may run it.
func NewRiver(store *Store, log *slog.Logger, cfg JobsConfig) (*river.Client[pgx.Tx], error) {
	ttl := store.cfg.LeaseTTL
	if cfg.ReapInterval <= 0 {
		cfg.ReapInterval = min(max(ttl/4, time.Second), 15*time.Second)
	}
	if cfg.OfflineAfter <= 0 {
		cfg.OfflineAfter = 3 * ttl
	}
	workers := river.NewWorkers()
	if err := river.AddWorkerSafely(workers, &reapWorker{store: store, log: log}); err != nil {
		return nil, fmt.Errorf("add lease reaper: %w", err)
	}
	if err := river.AddWorkerSafely(workers, &sweepWorker{store: store, log: log, offline: cfg.OfflineAfter}); err != nil {
		return nil, fmt.Errorf("add worker sweep: %w", err)
	}
	periodic := []*river.PeriodicJob{
		river.NewPeriodicJob(river.PeriodicInterval(cfg.ReapInterval),
			func() (river.JobArgs, *river.InsertOpts) { return ReapLeasesArgs{}, uniqueFor(cfg.ReapInterval) },
			&river.PeriodicJobOpts{ID: KindReapLeases, RunOnStart: true}),
		river.NewPeriodicJob(river.PeriodicInterval(cfg.OfflineAfter/3),
			func() (river.JobArgs, *river.InsertOpts) { return SweepWorkersArgs{}, uniqueFor(cfg.OfflineAfter / 3) },
			&river.PeriodicJobOpts{ID: KindSweepWorkers, RunOnStart: true}),
	}
	if cfg.Register != nil {
		periodic = append(periodic, cfg.Register(workers)...)
	}
	queues := map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 10}}
	maps.Copy(queues, cfg.Queues)
	prefix := store.cfg.JobQueuePrefix
	own := make(map[string]river.QueueConfig, len(queues))
	for name, q := range queues {
		own[prefix+name] = q
	}
	client, err := river.NewClient(riverpgxv5.New(store.pool), &river.Config{
		Logger:               logging.Demote(log), // River's INFO lines are routine: DEBUG
		FetchCooldown:        FetchCooldown,
		FetchPollInterval:    cfg.PollInterval,
		RescueStuckJobsAfter: RescueAfter,
		Queues:               own,
		Workers:              workers,
		PeriodicJobs:         periodic,
		Hooks:                store.queueHooks(),
	})
	if err != nil {
		return nil, fmt.Errorf("create river client: %w", err)
	}
	return client, nil
}

// NewInserter returns an insert-only River client over the store's pool: the webhook, the
// intake and the store's hooks insert jobs through it, whether or not this process works
// them. It notifies a queue of every insert that comes InsertNotifyCooldown or more after
// the last one it notified. It logs to the store's logger.
func NewInserter(store *Store) (*river.Client[pgx.Tx], error) {
	client, err := river.NewClient(riverpgxv5.New(store.pool), &river.Config{Logger: logging.Demote(store.log), FetchCooldown: InsertNotifyCooldown,
		Hooks: store.queueHooks()})
	if err != nil {
		return nil, fmt.Errorf("create the job inserter: %w", err)
	}
	return client, nil
}

// queueHooks are the River hooks that put every job inserted in the store's own queues
// (Config.JobQueuePrefix); none without a prefix.
func (s *Store) queueHooks() []rivertype.Hook {
	prefix := s.cfg.JobQueuePrefix
	if prefix == "" {
		return nil
	}
	return []rivertype.Hook{river.HookInsertBeginFunc(func(_ context.Context, p *rivertype.JobInsertParams) error {
		if !strings.HasPrefix(p.Queue, prefix) {
			p.Queue = prefix + p.Queue
		}
		return nil
	})}
}

// RescueAfter is how long a job may run before River takes it for stuck and retries it:
// its process was killed (SIGKILL, OOM, a lost node) and left it running in the table.
// River's default is an hour, and unique jobs wait behind the stuck one: an issue
// labelled while its intake died was not taken in for an hour, and a plan whose mirror
// sync died had its issue frozen as long (TestAnIntakeCutShortBySIGKILLIsFinishedAgain).
// A job whose worker has a longer Timeout is left running that long: the jobs that run
// long on purpose (a planner agent, a TRIZ analysis) say so. River's leader looks for
// stuck jobs every 30 s.
const RescueAfter = 2 * time.Minute

// FetchCooldown is the least time between two fetches of a queue's jobs (NewRiver; the
// deliveries' queue has its own, GitHubQueues). River's default, 100 ms, put up to
// 100 ms between a webhook delivery's commit and the start of its job — the intake, which
// reacts 👀 and imports the plan. In bench scale (200 installations × 5 issues),
// label→👀 p50 was 203–239 ms over three runs with 100 ms and 158–178 ms over three with
// 20 ms. A fetch is one query, and only runs while jobs arrive (insert notifications);
// idle, River polls as before (FetchPollInterval).
const FetchCooldown = 20 * time.Millisecond

// InsertNotifyCooldown is how long the inserter (NewInserter) stays silent about a
// queue's inserts after it notified the queue of one: River's client sends no
// notification for an insert within its FetchCooldown of the last, and the workers then
// fetch that job only when something else makes them (another notification, or their
// poll, once a second). With 20 ms, a burst of webhook deliveries a few milliseconds apart
// — a maintainer labelling several issues at once — started its first job in 3 ms and the
// others 0.5–0.8 s later, at the poll (TestABurstOfDeliveriesStartsAtOnce). River's
// least, 1 ms, notifies each of them; only inserts that commit within the same
// millisecond can still miss the fetch, and the deliveries' queue polls often enough to
// bound that (GitHubQueues). A notification is a NOTIFY in the inserting transaction.
const InsertNotifyCooldown = time.Millisecond

// uniqueFor keeps at most one pending periodic job per period, however many leaders
// came and went.
func uniqueFor(period time.Duration) *river.InsertOpts {
	return &river.InsertOpts{UniqueOpts: river.UniqueOpts{ByPeriod: max(period, time.Second)}}
}
