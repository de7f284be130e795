// Package worker is whilly's worker loop: claim a task from the control plane (long-poll),
// START it, run the coding agent under heartbeats, then COMPLETE or FAIL with the cost, or
// RELEASE it on shutdown. A claim of a plan tied to a repository carries a workspace: the
// agent then runs in the plan's checkout (workspace.go), and what it changed is checked by
// the diff gate (diffgate.go), committed and pushed to the plan's branch before COMPLETE;
// `whilly-worker gc` bounds the checkouts kept on disk (gc.go). It talks to the control
// plane only through control/client and must never import pgx, River, chi or
// ghinstallation: the slim whilly-worker binary is built from it.
package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/whilly-go/whilly/agent"
	"github.com/whilly-go/whilly/control/client"
	"github.com/whilly-go/whilly/plan"
	"github.com/whilly-go/whilly/sandbox"
)

// Config configures a worker.
type Config struct {
	WorkerID string
	PlanID   string // "" claims from any plan
	Model    string
	// Once stops after one task; Drain stops when nothing this worker may claim is
	// pending, running or retrying; MaxTasks (>0) stops after that many tasks.
	Once     bool
	Drain    bool
	MaxTasks int
	// ClaimWait is how long one claim long-polls (default 30 s).
	ClaimWait time.Duration
	// AgentTimeout bounds each attempt (default agent.DefaultTimeout).
	AgentTimeout time.Duration
	// HeartbeatEvery defaults to a third of the lease's lifetime.
	HeartbeatEvery time.Duration
	// LogDir receives one log file per attempt; "" keeps no log files.
	LogDir string
	// WorkDir is where the agent runs when the claim has no workspace; "" is the current
	// directory. Home is the HOME of the agent's environment, read by the caller: a boxed
	// agent may not work in a directory that holds it, nor in / (CheckWorkDir).
	WorkDir string
	Home    string
	// WorkspaceDir holds the per-plan checkouts of claims that carry a workspace
	// (WHILLY_WORKSPACE_DIR); "" is DefaultWorkspaceDir. Git is the git executable, ""
	// finds it on PATH.
	WorkspaceDir string
	Git          string
	// Gate is the machine's diff gate policy (WHILLY_PROTECTED_PATHS,
	// WHILLY_DIFF_MAX_BYTES); zero values are the defaults.
	Gate GatePolicy
	// OnResult, when set, is told about each finished attempt (whilly run's progress).
	OnResult func(Outcome)
	// Sandbox is the box the plan's verification commands and the repository's setup
	// script run in, the one the agent's processes run in (agent.Config.Sandbox); nil
	// runs them unboxed.
	Sandbox *sandbox.Sandbox
	// Cache is where the box's dependency and build caches live and how much they may
	// hold (CacheFromConfig); without a directory, and for the sim agent, which runs no
	// process, the worker keeps none.
	Cache CachePolicy
}

// CachePolicy is the machine's side of the caches: WHILLY_CACHE_DIR and
// WHILLY_CACHE_MAX_BYTES (<= 0 is DefaultCacheMaxBytes).
type CachePolicy struct {
	Dir      string
	MaxBytes int64
}

// Outcome is what became of one attempt.
type Outcome struct {
	PlanID   string
	TaskID   string
	Attempt  int
	Status   string // done, failed, released, lease_lost
	Reason   string
	Cost     plan.USD
	Duration time.Duration
	// HeadSHA is the plan branch's head after the task's push; NoChanges says the agent
	// changed nothing in its workspace.
	HeadSHA   string
	NoChanges bool
	// Final says a failed attempt was the task's last: the task is FAILED.
	Final bool
	// Err, when set, stops the worker after this attempt: the machine cannot run the
	// agent (agent.ErrNotReady).
	Err error
}

// ReasonAgentMissing is the RELEASE reason of a task whose agent's executable vanished.
const ReasonAgentMissing = "agent_not_found"

// ReasonWorkDirExposesHome is the RELEASE reason of a task without a workspace taken by a
// worker whose agent may not work in its work directory (CheckWorkDir).
const ReasonWorkDirExposesHome = "workdir_exposes_home"

// CheckWorkDir says why agentName may not work in dir ("" the current directory) when a
// claim carries no workspace: the box would show it all of home, or of / (an error
// wrapping sandbox.ErrExposesHome). Checked before the first claim, it keeps a worker
// started in HOME from failing every attempt of a plan without a repository. The sim
// agent runs no process there, and a box that does not box refuses nothing: nil.
func CheckWorkDir(sb *sandbox.Sandbox, agentName, dir, home string) error {
	if agentName == agent.NameSim {
		return nil
	}
	_, err := sb.WorkDir(dir, home)
	return err
}

// Summary counts what a worker did before it stopped.
type Summary struct {
	Done int `json:"tasks_done"`
	// Failed counts failed attempts; TasksFailed names the tasks ("plan/task") whose
	// failed attempt was their last, so they ended FAILED.
	Failed      int      `json:"attempts_failed"`
	TasksFailed []string `json:"tasks_failed"`
	Released    int      `json:"tasks_released"`
	Lost        int      `json:"tasks_lost"`
	Cost        plan.USD `json:"cost_usd"`
	// Held lists the PENDING tasks a drained worker left because it can never claim them
	// (at most client.MaxHeldListed; HeldTotal counts all).
	Held      []client.HeldTask `json:"held,omitempty"`
	HeldTotal int               `json:"held_total,omitempty"`
	// Tasks lists the tasks it ran, in the order it first ran them (at most
	// MaxReportedTasks; TasksUnlisted counts the others).
	Tasks         []TaskRun `json:"tasks,omitempty"`
	TasksUnlisted int       `json:"tasks_unlisted,omitempty"`
	// listed finds a task's entry in Tasks: a worker that runs thousands of tasks finds
	// each in constant time, not by walking the list.
	listed map[taskKey]int
}

// Worker runs tasks from one control plane with one agent.
type Worker struct {
	api   *client.Client
	agent agent.Agent
	log   *slog.Logger
	cfg   Config
	ws    *Workspaces
	// plans whose workspace may be on disk, to remove when the plan ends; owned by Run's
	// goroutine. scanned says the workspace directory was read once for older ones.
	plansOnDisk map[string]bool
	scanned     bool
	// caches are the box's dependency and build caches (cache.go); nil keeps none.
	// evictPending says the last eviction left caches over the limit because they were
	// in use: it is tried again when the worker is idle.
	caches       *Caches
	evictPending bool
	// workDirErr says why the agent may not work in WorkDir (CheckWorkDir): a claim
	// without a workspace is then handed back and the worker stops.
	workDirErr error
	// fleet is the fleet's pause as last seen (sawFleet), owned by Run's goroutine.
	fleet client.Fleet
}

// New returns a worker. The client must carry the worker's token.
func New(api *client.Client, ag agent.Agent, log *slog.Logger, cfg Config) (*Worker, error) {
	if cfg.WorkerID == "" {
		return nil, errors.New("new worker: a worker id is required")
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if cfg.ClaimWait <= 0 {
		cfg.ClaimWait = 30 * time.Second
	}
	if cfg.AgentTimeout <= 0 {
		cfg.AgentTimeout = agent.DefaultTimeout
	}
	if cfg.WorkspaceDir == "" {
		// Without one, a claim that carries a workspace fails with the reason.
		cfg.WorkspaceDir, _ = DefaultWorkspaceDir()
	}
	log = log.With("worker_id", cfg.WorkerID)
	ws := NewWorkspaces(cfg.WorkspaceDir, cfg.Git, log)
	ws.gate = cfg.Gate
	w := &Worker{api: api, agent: ag, log: log, cfg: cfg, ws: ws, plansOnDisk: map[string]bool{},
		workDirErr: CheckWorkDir(cfg.Sandbox, ag.Name(), cfg.WorkDir, cfg.Home)}
	if cfg.Cache.Dir != "" && ag.Name() != agent.NameSim {
		w.caches = NewCaches(cfg.Cache.Dir, cfg.Cache.MaxBytes, log)
	}
	return w, nil
}

// ErrStopped is returned by Run when ctx ends it; what ran was released first.
var ErrStopped = errors.New("worker stopped")

// ErrFleetPaused is returned by the Run of a draining worker that found the whole fleet
// paused: nothing is claimed anywhere until an operator resumes it, and a drain (an
// Action job) must not wait for that until its timeout.
var ErrFleetPaused = errors.New("the fleet is paused")

// Run claims and runs tasks until ctx is cancelled (ErrStopped, after releasing the
// task in hand), until Once, Drain or MaxTasks says stop (nil), or until the control
// plane refuses the worker's token (an error). A control plane that restarts or cannot
// be reached for a while is waited out with backoff.
func (w *Worker) Run(ctx context.Context) (Summary, error) {
	var (
		sum  Summary
		next *client.Claim
	)
	backoff, idle := newBackoff(), newBackoff()
	if err := w.releasePredecessor(ctx); err != nil {
		return sum, err
	}
	// key is the claim's idempotency key, kept until the claim is answered: a claim whose
	// answer was lost, retried with it, gets the task it claimed (not a second one).
	key := client.NewKey()
	// planSeen: the control plane has known the plan (a claim was answered); until then a
	// plan that does not exist is waited for. waitLogged says the wait was logged.
	planSeen, waitLogged := false, false
	// checkFleet: the fleet's pause is read before the first claim and after each claim
	// answered "nothing", not before every claim.
	checkFleet := true
	for {
		if ctx.Err() != nil {
			if next != nil {
				w.release(w.log, next, Outcome{}, "shutdown")
			}
			return sum, ErrStopped
		}
		if w.cfg.MaxTasks > 0 && sum.Done+sum.Failed+sum.Lost >= w.cfg.MaxTasks {
			return sum, nil
		}
		claim := next // handed over with the last completion
		if claim == nil {
			if checkFleet {
				if w.noteFleet(ctx) && w.cfg.Drain {
					return sum, fleetPausedErr(w.fleet)
				}
			}
			asked := time.Now()
			var err error
			claim, err = w.api.Claim(ctx, client.ClaimRequest{PlanID: w.cfg.PlanID, WaitSeconds: w.cfg.ClaimWait.Seconds(), IdempotencyKey: key, Drain: w.cfg.Drain})
			if err == nil || !client.IsRetryable(err) {
				key = client.NewKey()
			}
			if err != nil {
				if ctx.Err() != nil {
					return sum, ErrStopped
				}
				if client.IsNotFound(err) && w.cfg.PlanID != "" && !planSeen {
					// Started before its plan was imported: wait for it (a plan that existed
					// and is gone ends the worker below, like any refusal).
					if !waitLogged {
						w.log.InfoContext(ctx, "the plan does not exist yet; waiting for it", "plan_id", w.cfg.PlanID)
						waitLogged = true
					}
					if !idle.wait(ctx) {
						return sum, ErrStopped
					}
					continue
				}
				if Fatal(err) {
					return sum, fmt.Errorf("claim: %w", err)
				}
				w.log.WarnContext(ctx, "control plane unavailable, retrying", "error", err)
				if !backoff.wait(ctx) {
					return sum, ErrStopped
				}
				continue
			}
			backoff.reset()
			planSeen = true
			checkFleet = claim == nil
			if claim == nil {
				w.removeEndedWorkspaces(ctx)
				if w.evictPending {
					w.evictCaches(ctx)
				}
				if w.cfg.Drain {
					drained, err := w.drained(ctx, &sum)
					if err != nil && Fatal(err) {
						return sum, err
					}
					if drained {
						return sum, nil
					}
				}
				// "Nothing" long before the wait was up means the control plane will not wait
				// for this plan (paused, finished, cancelled) or is shutting down: asking
				// again at once would spin, thousands of claims a second.
				if time.Since(asked) < w.cfg.ClaimWait/2 {
					if !idle.wait(ctx) {
						return sum, ErrStopped
					}
				} else {
					idle.reset()
				}
				continue
			}
			idle.reset()
			if w.fleet.Paused {
				w.sawFleet(ctx, client.Fleet{}) // a task came: the fleet runs again
			}
		}
		var stop bool
		var out Outcome
		if next, out, stop = w.ran(ctx, claim, &sum); stop {
			if out.Err != nil {
				return sum, out.Err
			}
			return sum, stopErr(ctx)
		}
	}
}

// noteFleet reads the fleet's pause, says it when it changed (sawFleet) and reports
// whether the fleet is paused. A pause that cannot be read (an older control plane, a
// passing error) counts as none: the claim says the rest.
func (w *Worker) noteFleet(ctx context.Context) bool {
	f, err := w.api.GetFleet(ctx)
	if err != nil {
		w.log.DebugContext(ctx, "could not read the fleet's pause", "error", err)
		return false
	}
	w.sawFleet(ctx, f)
	return f.Paused
}

// sawFleet records the fleet's pause and says so when it changed since last seen — who
// paused it and since when, or that it was resumed — once, not at every empty claim.
func (w *Worker) sawFleet(ctx context.Context, f client.Fleet) {
	was := w.fleet
	w.fleet = f
	switch {
	case f.Paused && (!was.Paused || was.PausedBy != f.PausedBy || !sameTime(was.PausedAt, f.PausedAt)):
		w.log.WarnContext(ctx, "the fleet is paused; no task is claimed until it is resumed ('whilly resume')",
			"paused_by", f.PausedBy, "paused_since", timeText(f.PausedAt))
	case !f.Paused && was.Paused:
		w.log.InfoContext(ctx, "the fleet was resumed")
	}
}

// fleetPausedErr is ErrFleetPaused with who paused the fleet and since when.
func fleetPausedErr(f client.Fleet) error {
	by := f.PausedBy
	if by == "" {
		by = "an operator"
	}
	return fmt.Errorf("%w by %s since %s: nothing is claimed until it is resumed ('whilly resume')", ErrFleetPaused, by, timeText(f.PausedAt))
}

func sameTime(a, b *time.Time) bool {
	return (a == nil) == (b == nil) && (a == nil || a.Equal(*b))
}

func timeText(t *time.Time) string {
	if t == nil {
		return "an unknown time"
	}
	return t.UTC().Format(time.RFC3339)
}

// stopErr is what Run returns when it stops after a task: ErrStopped when ctx ended it
// (the task was released), nil when Once did.
func stopErr(ctx context.Context) error {
	if ctx.Err() != nil {
		return ErrStopped
	}
	return nil
}

// ran runs a claimed task and counts its outcome in sum. It returns the next claim when
// the completion brought one, and whether Run must stop: the task was released (shutdown)
// or Once is set.
func (w *Worker) ran(ctx context.Context, claim *client.Claim, sum *Summary) (*client.Claim, Outcome, bool) {
	// Another task is wanted after this one unless this is the last one.
	wantNext := !w.cfg.Once && (w.cfg.MaxTasks == 0 || sum.Done+sum.Failed+sum.Lost+1 < w.cfg.MaxTasks)
	out, next := w.runTask(ctx, claim, wantNext)
	sum.Cost += out.Cost
	switch out.Status {
	case "done":
		sum.Done++
	case "failed":
		sum.Failed++
		if out.Final {
			sum.TasksFailed = append(sum.TasksFailed, out.PlanID+"/"+out.TaskID)
		}
	case "released":
		sum.Released++
	default:
		sum.Lost++
	}
	sum.note(out)
	if w.cfg.OnResult != nil {
		w.cfg.OnResult(out)
	}
	return next, out, out.Status == "released" || w.cfg.Once
}

// releasePredecessor hands back the tasks a previous process under this worker id still
// holds (it was killed, or lost its answers): they go back to the queue now rather than
// when their leases expire. It waits out an unreachable control plane like a claim.
func (w *Worker) releasePredecessor(ctx context.Context) error {
	b := newBackoff()
	for {
		res, err := w.api.ReleaseHeld(ctx, w.cfg.WorkerID, client.ReleaseHeldRequest{Reason: "worker_restarted"})
		switch {
		case err == nil:
			if res.Released > 0 {
				w.log.InfoContext(ctx, "released the tasks a previous run of this worker held", "tasks", res.Released)
			}
			return nil
		case ctx.Err() != nil:
			return ErrStopped
		case Fatal(err):
			return fmt.Errorf("release the tasks of a previous run: %w", err)
		}
		w.log.WarnContext(ctx, "control plane unavailable, retrying", "error", err)
		if !b.wait(ctx) {
			return ErrStopped
		}
	}
}

// Fatal reports errors that waiting will not cure: the token is refused, or the request
// is malformed.
func Fatal(err error) bool {
	s := client.StatusOf(err)
	return s == 401 || s == 403 || s == 400 || s == 404 || s == 422
}

// drained reports whether nothing is left that this worker may claim from the plan (or,
// without --plan, from any plan): nothing claimable now, waiting on a dependency, backing
// off before a retry, or running. PENDING tasks it can never get — rejected by the gate,
// downstream of a failure, needing labels it lacks, on a paused plan — do not keep it: it
// stops, and says why each one is held.
func (w *Worker) drained(ctx context.Context, sum *Summary) (bool, error) {
	o, err := w.api.Outlook(ctx, w.cfg.PlanID)
	if err != nil || !o.Drained() {
		return false, err
	}
	sum.Held, sum.HeldTotal = o.Held, o.HeldTotal
	for _, h := range o.Held {
		w.log.WarnContext(ctx, "task left pending: it cannot be claimed", "plan_id", h.PlanID, "task_id", h.TaskID,
			"reason", h.Reason, "detail", h.Detail)
	}
	return true, nil
}

// runTask runs one claimed task to its report. It never returns an error: every
// outcome, including a lost lease, is an Outcome.
func (w *Worker) runTask(ctx context.Context, c *client.Claim, wantNext bool) (out Outcome, next *client.Claim) {
	t := c.Task
	log := w.log.With("plan_id", t.PlanID, "task_id", t.ID, "attempt", t.Attempt)
	out = Outcome{PlanID: t.PlanID, TaskID: t.ID, Attempt: t.Attempt}
	started := time.Now()
	defer func() { out.Duration = time.Since(started) }()
	lease := client.LeaseRequest{LeaseID: c.Lease.ID}
	lc := newLeaseClock(c.Lease, started)
	if c.Workspace == nil && w.workDirErr != nil {
		// This machine's problem, not the task's: hand it back uncounted and stop (Run
		// returns the error).
		log.ErrorContext(ctx, "the agent may not work in this directory; task released, worker stopping", "error", w.workDirErr)
		out = w.release(log, c, out, ReasonWorkDirExposesHome)
		out.Err = w.workDirErr
		return out, nil
	}

	// A task handed over with the last completion may have been started with it.
	if t.Status != plan.StatusInProgress {
		if err := w.report(ctx, log, lc, "start", func(ctx context.Context) error {
			_, err := w.api.Start(ctx, t.PlanID, t.ID, lease)
			return err
		}); err != nil {
			return w.lostOrRelease(ctx, log, c, out, err), nil
		}
	}

	// The agent runs under runCtx: cancelled on shutdown (ctx) and when a heartbeat says
	// the lease is gone. Heartbeats keep the lease alive meanwhile, including while the
	// workspace is fetched and pushed.
	runCtx, cancelRun := context.WithCancelCause(ctx)
	defer cancelRun(nil)
	var hb sync.WaitGroup
	hb.Go(func() { w.heartbeat(runCtx, cancelRun, c, lc) })

	begin := time.Now()
	r := w.work(runCtx, log, c)
	ran := time.Since(begin).Milliseconds()
	cancelRun(nil)
	hb.Wait()
	out.Cost = r.res.Cost

	if ctx.Err() != nil {
		// Shutdown: the agent's process group is gone; hand the task back.
		r.log.finish(ctx)
		return w.release(log, c, out, "shutdown"), nil
	}
	if errors.Is(r.runErr, agent.ErrNotFound) {
		// The agent's CLI is gone from this machine: the task is not to blame. Hand it back
		// uncounted and stop this worker (Run returns the error).
		log.ErrorContext(ctx, "the agent's executable is missing; task released, worker stopping", "error", r.runErr)
		r.log.finish(ctx)
		out = w.release(log, c, out, ReasonAgentMissing)
		out.Err = fmt.Errorf("%w: %w", agent.ErrNotReady, r.runErr)
		return out, nil
	}
	if cause := context.Cause(runCtx); errors.Is(cause, errLeaseLost) {
		log.WarnContext(ctx, "lease lost while the agent ran; agent killed")
		out.Status, out.Reason = "lease_lost", "lease_lost"
		return out, nil
	}
	if r.fail == nil && r.runErr == nil && r.res.Succeeded() {
		result, repaired := agent.Storable(bounded(r.res.Text, 4096))
		req := client.CompleteRequest{LeaseID: c.Lease.ID, CostUSD: r.res.Cost, CostEstimated: r.res.CostEstimated,
			Result: result, ResultRepaired: repaired, HeadSHA: r.pub.HeadSHA, NoChanges: r.pub.NoChanges, DurationMS: ran,
			Log: r.log.tail(ctx)}
		if wantNext {
			// The next task comes back with the completion: one round trip fewer.
			req.ClaimNext = &client.NextClaim{PlanID: w.cfg.PlanID, IdempotencyKey: client.NewKey(), Start: true}
		}
		var done client.CompleteResponse
		if err := w.report(ctx, log, lc, "complete", func(ctx context.Context) error {
			var err error
			done, err = w.api.Complete(ctx, t.PlanID, t.ID, req)
			return err
		}); err != nil {
			return w.lostOrRelease(ctx, log, c, out, err), nil
		}
		out.Status, out.HeadSHA, out.NoChanges = "done", r.pub.HeadSHA, r.pub.NoChanges
		return out, done.Next
	}
	fail := r.fail
	if fail == nil {
		f := failureOf(r.res, r.runErr)
		fail = &f
	}
	out.Reason = fail.Reason
	fail.LeaseID, fail.CostUSD, fail.CostEstimated, fail.DurationMS = c.Lease.ID, r.res.Cost, r.res.CostEstimated, ran
	fail.Log = r.log.tail(ctx)
	var failed client.Task
	if err := w.report(ctx, log, lc, "fail", func(ctx context.Context) error {
		var err error
		failed, err = w.api.Fail(ctx, t.PlanID, t.ID, *fail)
		return err
	}); err != nil {
		return w.lostOrRelease(ctx, log, c, out, err), nil
	}
	log.InfoContext(ctx, "attempt failed", "reason", fail.Reason)
	out.Status, out.Final = "failed", failed.Status == plan.StatusFailed
	return out, nil
}

// workResult is what one attempt did: the agent's result, and in a workspace what was
// published, or the failure the workspace or the diff gate decided.
type workResult struct {
	res    agent.Result
	runErr error
	pub    Publication
	fail   *client.FailRequest
	// log is the attempt's log stream, its tail not yet sent (nil when the agent did not run).
	log *logStream
}

// work runs one attempt: in the claim's workspace when it carries one (locked, fetched
// fresh, then published when the agent succeeded), else in the configured WorkDir.
func (w *Worker) work(ctx context.Context, log *slog.Logger, c *client.Claim) workResult {
	workDir := w.cfg.WorkDir
	var (
		co    *Checkout
		binds []sandbox.Bind
	)
	if c.Workspace != nil {
		w.plansOnDisk[c.Task.PlanID] = true
		var err error
		if co, err = w.ws.Open(ctx, c.Task.PlanID, *c.Workspace); err != nil {
			if ctx.Err() == nil {
				log.WarnContext(ctx, "workspace not ready", "error", err)
			}
			return workResult{res: agent.Result{ExitCode: -1}, fail: workspaceFailure(err)}
		}
		defer func() {
			if err := co.Close(); err != nil {
				log.WarnContext(ctx, "unlock the workspace", "error", err)
			}
		}()
		workDir, binds = co.Dir, co.Binds()
	}
	res, stream, runErr := w.attempt(ctx, log, c, co, workDir, binds)
	if w.caches != nil {
		w.evictCaches(ctx)
	}
	r := workResult{res: res, runErr: runErr, log: stream}
	if co == nil || runErr != nil || !res.Succeeded() || ctx.Err() != nil {
		return r
	}
	pub, err := co.Publish(ctx, CommitMessage(c.Task.PlanID, c.Task.ID, c.Task.Description))
	r.pub = pub
	switch {
	case err != nil:
		if ctx.Err() == nil {
			log.WarnContext(ctx, "the task's changes were not pushed", "error", err)
		}
		r.fail = workspaceFailure(err)
	case pub.NoChanges:
		log.InfoContext(ctx, "the agent changed nothing; nothing pushed")
	default:
		log.InfoContext(ctx, "changes pushed", "branch", c.Workspace.Branch, "head_sha", pub.HeadSHA,
			"files", pub.Files, "lines", pub.Lines, "rebased", pub.Rebased)
	}
	return r
}

// workspaceFailure turns a workspace or diff-gate error into the FAIL report: a refused
// diff is not retryable (the same agent would likely do the same), git trouble is.
func workspaceFailure(err error) *client.FailRequest {
	var (
		rej *DiffRejectedError
		we  *WorkspaceError
	)
	retryable := true
	reason := ReasonWorkspace
	detail := map[string]any{"detail": agent.Redact(err.Error())}
	switch {
	case errors.As(err, &rej):
		reason, retryable = ReasonDiffRejected, false
		detail = map[string]any{"reasons": rej.Reasons, "files": rej.Files, "lines": rej.Lines}
	case errors.As(err, &we):
		reason = ReasonWorkspace + ": " + we.Stage
		detail["stage"] = we.Stage
	}
	return &client.FailRequest{Reason: reason, Retryable: &retryable, Detail: storableJSON(detail),
		Output: storable(bounded(agent.Redact(err.Error()), client.MaxFailOutput))}
}

// removeEndedWorkspaces removes the workspaces of plans that have ended (DONE, FAILED,
// CANCELLED): those this worker used, and, the first time, those it finds on disk.
func (w *Worker) removeEndedWorkspaces(ctx context.Context) {
	if !w.scanned {
		w.scanned = true
		list, err := w.ws.List()
		if err != nil {
			w.log.WarnContext(ctx, "list workspaces", "error", err)
		}
		for _, wi := range list {
			if wi.PlanID != "" {
				w.plansOnDisk[wi.PlanID] = true
			}
		}
		if w.caches != nil {
			for _, id := range w.caches.Plans() {
				w.plansOnDisk[id] = true
			}
		}
	}
	for id := range w.plansOnDisk {
		p, err := w.api.GetPlan(ctx, id)
		if client.IsNotFound(err) {
			delete(w.plansOnDisk, id) // not this control plane's plan: gc decides
			continue
		}
		if err != nil {
			continue // asked again when next idle
		}
		switch p.Status {
		case plan.PlanDone, plan.PlanFailed, plan.PlanCancelled:
		default:
			continue
		}
		rmCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err = w.ws.Remove(rmCtx, id)
		if err == nil && w.caches != nil {
			err = w.caches.RemovePlan(rmCtx, id)
		}
		cancel()
		if err != nil {
			w.log.WarnContext(ctx, "remove the workspace of an ended plan", "plan_id", id, "error", err)
			continue
		}
		w.log.InfoContext(ctx, "workspace of an ended plan removed", "plan_id", id, "plan_status", p.Status)
		delete(w.plansOnDisk, id)
	}
}

var errLeaseLost = errors.New("lease lost")

// attempt builds the prompt, opens the plan's cache (running the repository's setup
// script when it is due), runs the agent in workDir (co's, when the claim has a
// workspace) and the plan's verification commands, both with binds (what the checkout's
// box needs besides workDir) and the cache's.
func (w *Worker) attempt(ctx context.Context, log *slog.Logger, c *client.Claim, co *Checkout, workDir string, binds []sandbox.Bind) (agent.Result, *logStream, error) {
	t := c.Task
	in := agent.NewPromptInput(c.Plan.ID, c.Plan.Name, plan.Task{
		ID: t.ID, Priority: t.Priority, Description: t.Description, Dependencies: t.Dependencies,
		KeyFiles: t.KeyFiles, AcceptanceCriteria: t.AcceptanceCriteria, TestSteps: t.TestSteps,
		PRDRequirement: t.PRDRequirement, MaxAttempts: t.MaxAttempts,
	}, t.Attempt)
	in.PreviousError, in.TrizFinding = t.LastError, t.TrizFinding
	if r := t.Round; r != nil {
		in.Round = &agent.Round{Number: r.Number, Trigger: r.Trigger, Summary: r.Summary, Commits: r.Commits}
	}
	if t.LastOutput != "" {
		in.PreviousError += "\n" + t.LastOutput
	}
	prompt, err := agent.BuildPrompt(in)
	if err != nil {
		return agent.Result{}, nil, err
	}
	logFile, closeLog := w.openLog(t.PlanID, t.ID, t.Attempt)
	defer closeLog()
	// The log streams to the control plane while the agent runs (logstream.go).
	stream := newLogStream(w.api, log, c)
	streamCtx, stopStream := context.WithCancel(ctx)
	var uploader sync.WaitGroup
	uploader.Go(func() { stream.run(streamCtx) })
	logW := newFanOut(logFile, stream)
	req := agent.Request{
		Prompt:         prompt,
		WorkDir:        workDir,
		Binds:          binds,
		Env:            w.taskEnv(c),
		Model:          w.cfg.Model,
		BudgetCap:      c.Plan.RemainingUSD,
		Timeout:        w.cfg.AgentTimeout,
		Log:            logW,
		Secrets:        w.secrets(c),
		OnEgressDenied: func(d sandbox.Denial) { w.egressDenied(ctx, c, d) },
	}
	var res agent.Result
	pc, cacheEnv, cacheBinds, failed := w.openCache(ctx, log, c, co, workDir, logW)
	if pc != nil {
		defer func() {
			if err := pc.Close(); err != nil {
				log.WarnContext(ctx, "let the plan's cache go", "error", err)
			}
		}()
		req.Env, req.Binds = append(req.Env, cacheEnv...), append(req.Binds, cacheBinds...)
	}
	if failed != nil {
		res = *failed
	} else {
		res, err = w.agent.Run(ctx, req)
	}
	stopStream()
	uploader.Wait()
	if err == nil && res.Sandbox != "" {
		w.attemptEvent(ctx, c, res)
	}
	if err != nil || !res.Succeeded() || len(c.Plan.Verify) == 0 {
		return res, stream, err
	}
	cmds := make([]plan.Verify, len(c.Plan.Verify))
	for i, v := range c.Plan.Verify {
		cmds[i] = plan.Verify(v)
	}
	// With the attempt's caches: what the agent downloaded, the checks need not again.
	res.ApplyVerify(agent.RunVerifyIn(ctx, w.cfg.Sandbox, sandbox.Spec{Dir: workDir, Env: cacheEnv, Binds: req.Binds}, cmds, 0))
	return res, stream, nil
}

// taskEnv is whilly's context for the attempt's processes.
func (w *Worker) taskEnv(c *client.Claim) []string {
	t := c.Task
	return []string{"WHILLY_PLAN_ID=" + t.PlanID, "WHILLY_TASK_ID=" + t.ID,
		fmt.Sprintf("WHILLY_ATTEMPT=%d", t.Attempt), "WHILLY_WORKER_ID=" + w.cfg.WorkerID}
}

// secrets are the values the agent's log must never show, whatever their shape: the
// worker's token and the claim's push token.
func (w *Worker) secrets(c *client.Claim) []string {
	out := []string{w.api.Token()}
	if c.Workspace != nil && c.Workspace.Token != "" {
		out = append(out, c.Workspace.Token)
	}
	return out
}

// Task event types the worker records while it holds the lease.
const (
	EventEgressDenied = "agent.egress_denied" // the sandbox's proxy refused the agent a host
	EventAttempt      = "agent.attempt"       // how the agent's process ran: sandbox, permission denials
)

// egressDenied records a host the sandbox's proxy refused the agent. It is best effort:
// the attempt goes on whether or not the control plane hears of it.
func (w *Worker) egressDenied(ctx context.Context, c *client.Claim, d sandbox.Denial) {
	p := map[string]any{"host": d.Host, "port": d.Port,
		"plan_id": c.Task.PlanID, "task_id": c.Task.ID, "attempt": c.Task.Attempt}
	if d.Reason != sandbox.ReasonHost {
		p["reason"] = d.Reason
	}
	w.taskEvent(ctx, c, EventEgressDenied, p)
}

// attemptEvent records how the agent's process ran: in the box or not (sandbox: none is
// the operator's explicit opt-out), the tool calls its CLI refused itself, the tokens it
// reported and what the attempt cost (cost_estimated and priced_as when whilly priced
// the tokens itself: codex).
func (w *Worker) attemptEvent(ctx context.Context, c *client.Claim, res agent.Result) {
	p := map[string]any{"attempt": c.Task.Attempt, "agent": w.agent.Name(), "sandbox": res.Sandbox,
		"usage": res.Usage, "cost_usd": res.Cost.String()}
	if w.cfg.Model != "" {
		p["model"] = w.cfg.Model
	}
	if res.CostEstimated {
		p["cost_estimated"], p["priced_as"] = true, res.PricedAs
	}
	if n := w.cfg.Sandbox.Net(); n != "" && res.Sandbox == sandbox.ModeBwrap {
		p["net"] = n
	}
	if len(res.PermissionDenials) > 0 {
		p["permission_denials"] = res.PermissionDenials
	}
	w.taskEvent(ctx, c, EventAttempt, p)
}

func (w *Worker) taskEvent(ctx context.Context, c *client.Claim, typ string, payload map[string]any) {
	raw, err := json.Marshal(payload)
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_, err = w.api.TaskEvent(ctx, c.Task.PlanID, c.Task.ID, client.TaskEventRequest{LeaseID: c.Lease.ID, Type: typ, Payload: raw})
	if err != nil {
		w.log.WarnContext(ctx, "record a task event", "type", typ, "plan_id", c.Task.PlanID, "task_id", c.Task.ID, "error", err)
	}
}

// failureOf turns an unsuccessful attempt into the FAIL report.
func failureOf(res agent.Result, runErr error) client.FailRequest {
	retryable := true
	reason, detail := res.Reason, map[string]any{"exit_code": res.ExitCode, "excerpt": res.Excerpt, "detail": res.Detail}
	if res.Sandbox != "" {
		detail["sandbox"] = res.Sandbox
	}
	switch {
	case errors.Is(runErr, agent.ErrPromptInjection):
		reason, retryable = agent.ReasonPromptInjection, false
		detail = map[string]any{"detail": runErr.Error()}
	case runErr != nil:
		reason = "agent_error"
		detail = map[string]any{"detail": runErr.Error()}
	case reason == "":
		reason = agent.ReasonNoCompletionMarker
	}
	if reason == agent.ReasonBudgetExceeded {
		retryable = false
	}
	return client.FailRequest{Reason: storable(reason), Retryable: &retryable, Detail: storableJSON(detail),
		Output: failOutput(res, runErr)}
}

// maxFailLines is how many of the last lines the agent printed a failure keeps.
const maxFailLines = 20

// failOutput is what the next attempt is told of this one's failure: the error, the
// agent's own account of it, and the tail of its output, redacted and bounded.
func failOutput(res agent.Result, runErr error) string {
	var parts []string
	if runErr != nil {
		parts = append(parts, agent.Redact(runErr.Error()))
	}
	if res.Detail != "" {
		parts = append(parts, res.Detail)
	}
	if tail := lastPlainLines(res.Excerpt, maxFailLines); tail != "" && tail != res.Detail {
		parts = append(parts, "The end of its output:\n"+tail)
	}
	return storable(bounded(strings.Join(parts, "\n\n"), client.MaxFailOutput))
}

// lastPlainLines is the last n non-blank lines of out that are not JSON objects: an agent
// CLI's JSON (its result, usage counters, session and run ids) was read into the
// result's detail already; what else it printed, its stderr above all, is kept.
func lastPlainLines(out string, n int) string {
	var keep []string
	for l := range strings.SplitSeq(out, "\n") {
		t := strings.TrimSpace(l)
		if t == "" || strings.HasPrefix(t, "{") && json.Valid([]byte(t)) {
			continue
		}
		keep = append(keep, l)
	}
	return strings.Join(keep[max(len(keep)-n, 0):], "\n")
}

// storable is agent.Storable without the flag: a failure's text is evidence, kept as
// close to what the agent printed as can be stored.
func storable(s string) string {
	clean, _ := agent.Storable(s)
	return clean
}

// storableJSON encodes a failure's detail with every string in it storable.
func storableJSON(detail map[string]any) json.RawMessage {
	for k, v := range detail {
		if s, ok := v.(string); ok {
			detail[k] = storable(s)
		}
	}
	raw, _ := json.Marshal(detail) // strings, numbers and string lists always encode
	return raw
}

// heartbeat extends the lease every interval until ctx ends; a heartbeat that reports
// the task cancelled or its lease gone cancels the run.
func (w *Worker) heartbeat(ctx context.Context, cancel context.CancelCauseFunc, c *client.Claim, lc *leaseClock) {
	every := w.cfg.HeartbeatEvery
	if every <= 0 {
		every = max(time.Until(c.Lease.ExpiresAt)/3, 100*time.Millisecond)
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	held := client.HeartbeatRequest{Tasks: []client.HeldLease{{PlanID: c.Task.PlanID, TaskID: c.Task.ID, LeaseID: c.Lease.ID}}}
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		res, err := w.api.Heartbeat(ctx, w.cfg.WorkerID, held)
		if err != nil {
			if client.IsUnauthorized(err) || client.IsForbidden(err) {
				cancel(errLeaseLost)
				return
			}
			w.log.WarnContext(ctx, "heartbeat failed", "error", err)
			continue
		}
		if len(res.Cancel) > 0 {
			w.log.InfoContext(ctx, "control plane withdrew the task", "reason", res.Cancel[0].Reason)
			cancel(errLeaseLost)
			return
		}
		lc.extended(time.Now())
	}
}

// lostOrRelease handles a report that did not go through although it was retried: 409
// means the lease is gone (someone else may own the task now); after shutdown the task is
// released; otherwise the lease has expired while the control plane could not be reached.
// In both last cases the attempt's cost is still charged (chargeLost).
func (w *Worker) lostOrRelease(ctx context.Context, log *slog.Logger, c *client.Claim, out Outcome, err error) Outcome {
	lost := client.IsConflict(err) || client.IsNotFound(err)
	if !lost && ctx.Err() != nil {
		return w.release(log, c, out, "shutdown")
	}
	out.Status, out.Reason = "lease_lost", "lease_lost"
	if lost {
		log.WarnContext(ctx, "lease lost; moving on", "error", err)
	} else {
		log.WarnContext(ctx, "could not report the task before its lease expired", "error", err)
		out.Reason = "report_failed"
	}
	if out.Cost > 0 {
		w.chargeLost(ctx, log, c, out.Cost, out.Reason)
	}
	return out
}

// chargeLostFor bounds how long a worker keeps trying to charge a lost attempt's cost.
const chargeLostFor = 10 * time.Minute

// chargeLost charges the cost of an attempt whose report could not be made, retried
// while the control plane cannot be reached: the money was spent whatever became of the
// task. It is idempotent on the lease.
func (w *Worker) chargeLost(ctx context.Context, log *slog.Logger, c *client.Claim, cost plan.USD, reason string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), chargeLostFor)
	defer cancel()
	err := w.report(ctx, log, nil, "charge", func(ctx context.Context) error {
		_, err := w.api.Charge(ctx, c.Task.PlanID, c.Task.ID, client.ChargeRequest{LeaseID: c.Lease.ID, CostUSD: cost, Reason: reason})
		return err
	})
	if err != nil {
		log.ErrorContext(ctx, "the cost of an attempt could not be charged", "cost_usd", cost.String(), "error", err)
		return
	}
	log.InfoContext(ctx, "the cost of an attempt whose report was lost is charged", "cost_usd", cost.String())
}

// report sends one report — START, COMPLETE, FAIL, RELEASE, a charge — until the control
// plane answers it. Every report is idempotent on the lease, so one whose answer was lost
// may be sent again: it is retried with backoff while the control plane cannot be reached
// or answers 5xx, until ctx ends or, when lc is set, until the lease has certainly
// expired (then nothing the report says could be accepted). A 4xx ends it at once.
func (w *Worker) report(ctx context.Context, log *slog.Logger, lc *leaseClock, what string, send func(context.Context) error) error {
	b := newBackoff()
	for {
		err := send(ctx)
		if err == nil || !client.IsRetryable(err) || ctx.Err() != nil {
			return err
		}
		if lc != nil && lc.expired(time.Now()) {
			return fmt.Errorf("%s: the lease has expired meanwhile: %w", what, err)
		}
		log.WarnContext(ctx, "could not report the task; retrying", "report", what, "error", err)
		if !b.wait(ctx) {
			return err
		}
	}
}

// release hands the task back on shutdown, with a short deadline of its own.
func (w *Worker) release(log *slog.Logger, c *client.Claim, out Outcome, reason string) Outcome {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := w.report(ctx, log, nil, "release", func(ctx context.Context) error {
		_, err := w.api.Release(ctx, c.Task.PlanID, c.Task.ID, client.LeaseRequest{LeaseID: c.Lease.ID, Reason: reason})
		return err
	}); err != nil {
		log.WarnContext(ctx, "release failed; the lease will expire instead", "error", err)
	}
	out.Status, out.Reason = "released", reason
	return out
}

// openLog opens the attempt's log file, or discards when there is no log dir.
func (w *Worker) openLog(planID, taskID string, attempt int) (io.Writer, func()) {
	if w.cfg.LogDir == "" {
		return nil, func() {}
	}
	dir := filepath.Join(w.cfg.LogDir, unsafeKey().ReplaceAllString(planID, "_"))
	if err := os.MkdirAll(dir, 0o750); err != nil {
		w.log.Warn("cannot create the log directory", "dir", dir, "error", err)
		return nil, func() {}
	}
	name := filepath.Join(dir, fmt.Sprintf("%s.%d.log", unsafeKey().ReplaceAllString(taskID, "_"), attempt))
	f, err := os.OpenFile(name, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o640)
	if err != nil {
		w.log.Warn("cannot open the attempt log", "file", name, "error", err)
		return nil, func() {}
	}
	return f, func() { _ = f.Close() }
}

func bounded(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[len(s)-n:]
}

// leaseClock tells when a lease has certainly expired, by the worker's own monotonic
// clock: the control plane extends a lease by its TTL when it answers a claim or a
// heartbeat, so the lease ends at the latest TTL after that answer arrived.
type leaseClock struct {
	ttl  time.Duration
	last atomic.Int64 // when the last extending answer arrived, unix nanoseconds
	base time.Time    // carries the monotonic reading that last is relative to
}

// leaseSlack covers the time between the answer and this worker reading its clock.
const leaseSlack = 2 * time.Second

func newLeaseClock(l client.Lease, received time.Time) *leaseClock {
	ttl := time.Duration(l.TTLSeconds * float64(time.Second))
	if ttl <= 0 {
		ttl = time.Until(l.ExpiresAt) // an older control plane: trust the clocks
	}
	return &leaseClock{ttl: ttl, base: received}
}

func (lc *leaseClock) extended(at time.Time) { lc.last.Store(int64(at.Sub(lc.base))) }

func (lc *leaseClock) expired(now time.Time) bool {
	return now.Sub(lc.base) > time.Duration(lc.last.Load())+lc.ttl+leaseSlack
}

// backoff waits between attempts to reach the control plane: 200 ms doubling to 10 s,
// with jitter so many workers do not return at once.
type backoffState struct{ next time.Duration }

func newBackoff() *backoffState { return &backoffState{next: 200 * time.Millisecond} }

func (b *backoffState) reset() { b.next = 200 * time.Millisecond }

func (b *backoffState) wait(ctx context.Context) bool {
	d := b.next/2 + rand.N(b.next/2+1)
	b.next = min(b.next*2, 10*time.Second)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
