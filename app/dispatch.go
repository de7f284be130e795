package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/whilly-go/whilly/plan"
	"github.com/whilly-go/whilly/queue"
)

// KindDispatch is the River job that sends one repository_dispatch. It is persisted:
// never rename it.
const KindDispatch = "whilly.github_dispatch"

// DispatchEventType is the repository_dispatch event type whilly sends; the example
// workflow (examples/workflows/whilly.yml) runs on it. Public contract: never rename it.
const DispatchEventType = "whilly-work"

// DispatchArgs names the dispatch (a github_dispatches row) a job sends.
type DispatchArgs struct {
	DispatchID int64  `json:"dispatch_id"`
	PlanID     string `json:"plan_id"`
}

// Kind implements river.JobArgs.
func (DispatchArgs) Kind() string { return KindDispatch }

// InsertOpts bounds the retries: a dispatch hours late starts workers nobody waits for.
func (DispatchArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: queue.QueueGitHub, MaxAttempts: 8}
}

// DispatchConfig tunes the dispatcher.
type DispatchConfig struct {
	// Idle is how long a live plan's ready tasks may wait with no task running and no
	// claim before the reconciler dispatches again, and the least time between two
	// dispatches of one plan; default 10 min.
	Idle time.Duration
}

// Dispatcher starts GitHub Actions workers on the repository's own minutes
// (WHILLY_DISPATCH_ACTIONS=1): a repository_dispatch of type whilly-work whose
// client_payload names the plan, sent once when a plan of a repository starts, and again
// by the reconciler when the plan's ready tasks wait with nobody running them. Each
// dispatch is a row written with its job in one transaction, so a plan start sends one
// dispatch however many tasks it has and however often its transaction's hooks run.
type Dispatcher struct {
	store   *queue.Store
	clients Clients
	log     *slog.Logger
	cfg     DispatchConfig
}

// NewDispatcher returns the dispatcher.
func NewDispatcher(store *queue.Store, clients Clients, log *slog.Logger, cfg DispatchConfig) *Dispatcher {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if cfg.Idle <= 0 {
		cfg.Idle = 10 * time.Minute
	}
	return &Dispatcher{store: store, clients: clients, log: log, cfg: cfg}
}

// DispatchIdle records and enqueues a dispatch for each live plan whose ready tasks
// have waited for the Idle interval with nothing running (the reconciler calls it).
func (d *Dispatcher) DispatchIdle(ctx context.Context, jobs Jobs) (int, error) {
	ds, err := d.store.IdleDispatches(ctx, d.cfg.Idle, 100, func(ctx context.Context, tx pgx.Tx, x queue.Dispatch) error {
		_, err := jobs.InsertTx(ctx, tx, DispatchArgs{DispatchID: x.ID, PlanID: x.PlanID}, nil)
		return err
	})
	return len(ds), err
}

// Worker returns the River worker of dispatch jobs.
func (d *Dispatcher) Worker() river.Worker[DispatchArgs] { return &dispatchWorker{d: d} }

type dispatchWorker struct {
	river.WorkerDefaults[DispatchArgs]
	d *Dispatcher
}

func (w *dispatchWorker) Timeout(*river.Job[DispatchArgs]) time.Duration { return time.Minute }

func (w *dispatchWorker) Work(ctx context.Context, job *river.Job[DispatchArgs]) error {
	d := w.d
	x, err := d.store.GetDispatch(ctx, job.Args.DispatchID)
	if errors.Is(err, queue.ErrNotFound) {
		return nil // the plan was deleted
	}
	if err != nil {
		return err
	}
	if x.SentAt != nil {
		return nil
	}
	if x.PlanStatus != plan.PlanActive {
		return d.store.FinishDispatch(ctx, x, false, DispatchEventType, "skipped: the plan is "+string(x.PlanStatus))
	}
	repo, err := ParseRepo(x.Repo)
	if err != nil {
		if ferr := d.store.FinishDispatch(ctx, x, false, DispatchEventType, "refused: "+err.Error()); ferr != nil {
			return ferr
		}
		return river.JobCancel(fmt.Errorf("dispatch for plan %s: %w", x.PlanID, err))
	}
	err = d.send(ctx, x, repo)
	switch {
	case Permanent(err):
		// The App lost the repository, or GitHub refuses the event: retrying cannot help.
		d.log.WarnContext(ctx, "repository_dispatch refused", "plan_id", x.PlanID, "error", err)
		if ferr := d.store.FinishDispatch(ctx, x, false, DispatchEventType, "refused: "+err.Error()); ferr != nil {
			return ferr
		}
		return river.JobCancel(err)
	case err != nil:
		d.log.WarnContext(ctx, "repository_dispatch failed", "plan_id", x.PlanID, "error", err)
		return JobError(err)
	}
	// A crash right here sends the dispatch again on retry: an extra worker that finds
	// nothing to claim exits at once (--drain), which is cheaper than a missed one.
	if err := d.store.FinishDispatch(ctx, x, true, DispatchEventType, "sent"); err != nil {
		return err
	}
	d.log.InfoContext(ctx, "actions workers dispatched", "plan_id", x.PlanID, "repo", x.Repo, "reason", x.Reason)
	return nil
}

func (d *Dispatcher) send(ctx context.Context, x queue.Dispatch, repo Repo) error {
	inst := x.InstallationID
	if inst == 0 {
		ac, err := d.clients.App(ctx)
		if err != nil {
			return err
		}
		if inst, err = ac.RepoInstallation(ctx, repo); err != nil {
			return err
		}
	}
	c, err := d.clients.Installation(ctx, inst)
	if err != nil {
		return err
	}
	return c.Dispatch(ctx, repo, DispatchEventType, map[string]any{"plan": x.PlanID})
}
