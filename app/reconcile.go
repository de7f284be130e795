package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/whilly-go/whilly/queue"
)

// KindReconcile is the periodic reconciler job. It is persisted: never rename it.
const KindReconcile = "whilly.github_reconcile"

// ReconcileArgs is the reconciler's (argument-less) job.
type ReconcileArgs struct{}

// Kind implements river.JobArgs.
func (ReconcileArgs) Kind() string { return KindReconcile }

// InsertOpts puts the reconciler in the GitHub queue, with one attempt: the next
// interval's run is its retry. Retried on a backoff of its own, each failed run would
// wait beside the next interval's while GitHub is unreachable, and they would pile up.
func (ReconcileArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: queue.QueueGitHub, MaxAttempts: 1}
}

// ReconcileConfig tunes the reconciler.
type ReconcileConfig struct {
	// Interval between runs; default 5 min.
	Interval time.Duration
	// RedeliverWindow is how far back failed deliveries are redelivered; default 3 days
	// (GitHub keeps deliveries that long).
	RedeliverWindow time.Duration
	// MaxAttempts: a delivery GitHub already tried this often is given up; default 4.
	MaxAttempts int
	// MaxRedeliveries per run; default 50.
	MaxRedeliveries int
	// KeepDeliveries is how long processed deliveries are kept; default 30 days.
	KeepDeliveries time.Duration
	// Dispatcher, when set (WHILLY_DISPATCH_ACTIONS=1), dispatches Actions workers
	// again to plans whose ready tasks nobody runs.
	Dispatcher *Dispatcher
	// NoRedeliver skips asking GitHub to redeliver failed deliveries: in pull mode every
	// delivery is read from the log, failed or not, and redelivering would only post to
	// a URL that cannot answer.
	NoRedeliver bool
}

// Reconciler repairs what events alone miss (policy-bot #960, bulldozer #187): it
// re-checks every live GitHub plan's label, comment and pull request against the
// database (verify mirror jobs), dispatches Actions workers to plans whose ready tasks
// nobody runs (with a Dispatcher), asks GitHub to redeliver webhooks that failed in the
// last three days, and prunes old deliveries.
type Reconciler struct {
	store   *queue.Store
	clients Clients
	log     *slog.Logger
	cfg     ReconcileConfig
}

// NewReconciler returns the reconciler.
func NewReconciler(store *queue.Store, clients Clients, log *slog.Logger, cfg ReconcileConfig) *Reconciler {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if cfg.Interval <= 0 {
		cfg.Interval = 5 * time.Minute
	}
	if cfg.RedeliverWindow <= 0 {
		cfg.RedeliverWindow = 72 * time.Hour
	}
	if cfg.MaxAttempts <= 0 {
		cfg.MaxAttempts = 4
	}
	if cfg.MaxRedeliveries <= 0 {
		cfg.MaxRedeliveries = 50
	}
	if cfg.KeepDeliveries <= 0 {
		cfg.KeepDeliveries = 30 * 24 * time.Hour
	}
	return &Reconciler{store: store, clients: clients, log: log, cfg: cfg}
}

// Schedule is the reconciler's periodic job, enqueued by every control plane with the
// App, once per interval whatever the number of replicas.
func (r *Reconciler) Schedule() queue.Schedule {
	return queue.Schedule{Name: KindReconcile, Every: r.cfg.Interval, Args: func() (river.JobArgs, *river.InsertOpts) {
		return ReconcileArgs{}, &river.InsertOpts{UniqueOpts: river.UniqueOpts{ByPeriod: r.cfg.Interval}}
	}}
}

// Worker returns the River worker of the reconciler's job.
func (r *Reconciler) Worker() river.Worker[ReconcileArgs] { return &reconcileWorker{r: r} }

type reconcileWorker struct {
	river.WorkerDefaults[ReconcileArgs]
	r *Reconciler
}

func (w *reconcileWorker) Timeout(*river.Job[ReconcileArgs]) time.Duration { return 5 * time.Minute }

func (w *reconcileWorker) Work(ctx context.Context, _ *river.Job[ReconcileArgs]) error {
	jobs, err := river.ClientFromContextSafely[pgx.Tx](ctx)
	if err != nil {
		return fmt.Errorf("reconcile: %w", err)
	}
	_, err = w.r.Run(ctx, jobs)
	return JobError(err)
}

// ReconcileResult says what a run did.
type ReconcileResult struct {
	Plans       int // verify jobs enqueued
	Redelivered int
	Pruned      int64
	Dispatched  int // idle plans given a repository_dispatch
}

// Run reconciles once, enqueuing verify mirror jobs through jobs.
func (r *Reconciler) Run(ctx context.Context, jobs Jobs) (ReconcileResult, error) {
	var res ReconcileResult
	ids, err := r.store.MirroredPlans(ctx)
	if err != nil {
		return res, err
	}
	for _, id := range ids {
		if _, err := jobs.Insert(ctx, MirrorArgs{PlanID: id, Verify: true}, nil); err != nil {
			return res, fmt.Errorf("enqueue verification of plan %s: %w", id, err)
		}
		res.Plans++
	}
	if r.cfg.Dispatcher != nil {
		if res.Dispatched, err = r.cfg.Dispatcher.DispatchIdle(ctx, jobs); err != nil {
			return res, err
		}
	}
	if !r.cfg.NoRedeliver {
		n, err := r.redeliver(ctx)
		res.Redelivered = n
		if err != nil && !errors.Is(err, ErrNoApp) {
			return res, err
		}
	}
	if res.Pruned, err = r.store.PruneDeliveries(ctx, time.Now().Add(-r.cfg.KeepDeliveries)); err != nil {
		return res, err
	}
	if res.Redelivered > 0 || res.Pruned > 0 || res.Dispatched > 0 {
		r.log.InfoContext(ctx, "github reconciled", "plans", res.Plans, "redelivered", res.Redelivered, "pruned", res.Pruned,
			"dispatched", res.Dispatched)
	}
	return res, nil
}

// redeliver asks GitHub to deliver again each delivery of the window that never got a
// 2xx and that whilly has not stored, unless GitHub has tried it MaxAttempts times.
func (r *Reconciler) redeliver(ctx context.Context) (int, error) {
	ac, err := r.clients.App(ctx)
	if err != nil {
		return 0, err
	}
	ds, err := ac.HookDeliveries(ctx, time.Now().Add(-r.cfg.RedeliverWindow))
	if err != nil {
		return 0, err
	}
	type attempts struct {
		ok     bool
		n      int
		latest HookDelivery
	}
	byGUID := map[string]*attempts{}
	var order []string
	for _, d := range ds {
		a := byGUID[d.GUID]
		if a == nil {
			a = &attempts{latest: d}
			byGUID[d.GUID] = a
			order = append(order, d.GUID)
		}
		a.n++
		a.ok = a.ok || (d.StatusCode >= 200 && d.StatusCode < 300)
		if d.DeliveredAt.After(a.latest.DeliveredAt) {
			a.latest = d
		}
	}
	var failed []string
	for _, g := range order {
		if a := byGUID[g]; !a.ok && a.n < r.cfg.MaxAttempts && g != "" {
			failed = append(failed, g)
		}
	}
	if len(failed) == 0 {
		return 0, nil
	}
	known, err := r.store.KnownDeliveries(ctx, failed)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, g := range failed {
		if known[g] || n == r.cfg.MaxRedeliveries {
			continue
		}
		if err := ac.Redeliver(ctx, byGUID[g].latest.ID); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}
