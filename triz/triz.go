// Package triz is the TRIZ failure analyzer's background job: every failed
// attempt enqueues a River job in the FAIL transaction; the job asks the analyzer agent
// (agent.AnalyzeFailure) whether the task hides a contradiction, records the outcome on
// the task with its event (triz.contradiction, triz.none or triz.error), and charges what
// the analyzer cost to the plan's budget.
//
// It fails open: whatever goes wrong with the analysis — a timeout, a missing CLI, a
// failed run, an answer that is not the JSON asked for — is recorded as triz.error and
// the job still succeeds; enqueueing it can never roll back the failure it analyzes. The
// analyzer never runs inside an API request.
//
// It imports agent, plan, queue, pgx and River; it must not import the HTTP, GitHub or
// CLI layers.
package triz

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/whilly-go/whilly/agent"
	"github.com/whilly-go/whilly/plan"
	"github.com/whilly-go/whilly/queue"
)

// Kind is the job's River kind. It is persisted: never rename it.
const Kind = "whilly.triz"

// Event types the job writes. They are persisted: never rename one.
const (
	EventContradiction = "triz.contradiction"
	EventNone          = "triz.none"
	EventError         = "triz.error"
)

// QueueName is the River queue of analyses: their own, so a batch of slow analyses
// cannot delay the lease reaper and the other control-plane jobs.
const QueueName = "triz"

// ChargeSource names the analyzer in plan.charged events.
const ChargeSource = "analyzer"

// DefaultTimeout bounds one analysis (WHILLY_TRIZ_TIMEOUT).
const DefaultTimeout = 25 * time.Second

// Classes of triz.error, in the event's detail.reason: the agent.Reason… of the run
// (timeout, exit_code, agent_error, malformed_output, budget_exceeded …) or one of these.
const (
	ErrorAgentNotFound = "agent_not_found" // the analyzer's executable is missing
	ErrorOther         = "error"
)

// Args is one failed attempt to analyze. A job is unique per (plan, task, attempt), so a
// redelivered failure is analyzed (and paid for) once.
type Args struct {
	PlanID  string `json:"plan_id" river:"unique"`
	TaskID  string `json:"task_id" river:"unique"`
	Attempt int    `json:"attempt" river:"unique"`
	Version int    `json:"version" river:"unique"` // the task row's version: a reset task's attempt 1 is a new job
	Reason  string `json:"reason,omitempty"`
	Final   bool   `json:"final,omitempty"`
	// Excerpt is the end of the failed attempt's output, shown to the analyzer; may be "".
	Excerpt string `json:"excerpt,omitempty"`
}

// Kind implements river.JobArgs.
func (Args) Kind() string { return Kind }

// InsertOpts makes the job unique per attempt and run once: a second run would pay the
// analyzer again for a finding that fails open anyway.
func (Args) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: QueueName, MaxAttempts: 1, UniqueOpts: river.UniqueOpts{ByArgs: true}}
}

// Enqueue inserts the analysis of a failed attempt inside the failure's transaction
// (queue.Hooks.TaskFailed). It runs under a savepoint and fails open: when the insert
// fails it is rolled back to the savepoint and logged, and the failure commits as if
// TRIZ were off. It returns an error only when the savepoint itself cannot be handled,
// which means the transaction is lost anyway.
func Enqueue(ctx context.Context, tx pgx.Tx, jobs *river.Client[pgx.Tx], f queue.TaskFailure, log *slog.Logger) error {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if jobs == nil {
		log.WarnContext(ctx, "failure analysis not enqueued: no job client", "plan_id", f.PlanID, "task_id", f.TaskID)
		return nil
	}
	sp, err := tx.Begin(ctx)
	if err != nil {
		return fmt.Errorf("open savepoint for the analysis of task %s: %w", f.TaskID, err)
	}
	args := Args{PlanID: f.PlanID, TaskID: f.TaskID, Attempt: f.Attempt, Version: f.Version, Reason: f.Reason,
		Final: f.Final, Excerpt: excerptOf(f.Detail)}
	if _, err := jobs.InsertTx(ctx, sp, args, nil); err != nil {
		if rbErr := sp.Rollback(ctx); rbErr != nil {
			return fmt.Errorf("enqueue analysis of task %s: %w (rollback to savepoint: %w)", f.TaskID, err, rbErr)
		}
		log.WarnContext(ctx, "failure analysis not enqueued", "plan_id", f.PlanID, "task_id", f.TaskID,
			"attempt", f.Attempt, "error", err)
		return nil
	}
	if err := sp.Commit(ctx); err != nil {
		return fmt.Errorf("release savepoint for the analysis of task %s: %w", f.TaskID, err)
	}
	return nil
}

// excerptOf reads the output excerpt a worker put in its failure detail, if any.
func excerptOf(detail json.RawMessage) string {
	var d struct {
		Excerpt string `json:"excerpt"`
	}
	if len(detail) == 0 || json.Unmarshal(detail, &d) != nil {
		return ""
	}
	return d.Excerpt
}

// Config configures the job's worker.
type Config struct {
	Agent   agent.Agent   // the analyzer (WHILLY_TRIZ_AGENT)
	Timeout time.Duration // per analysis; default DefaultTimeout
	Model   string        // "" lets the agent pick
	Logger  *slog.Logger  // nil discards
}

// Worker runs the analysis jobs.
type Worker struct {
	river.WorkerDefaults[Args]
	store *queue.Store
	cfg   Config
}

// NewWorker returns the job's worker; it records findings and charges costs through store.
func NewWorker(store *queue.Store, cfg Config) (*Worker, error) {
	if cfg.Agent == nil {
		return nil, errors.New("new triz worker: no analyzer agent")
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Worker{store: store, cfg: cfg}, nil
}

// recordTimeout bounds the writes after an analysis, which must happen even when the
// job's context ended (shutdown) while the analyzer ran.
const recordTimeout = 10 * time.Second

// Timeout leaves the analyzer its whole timeout, the kill of its process group and the
// writes after it, whatever River's default job timeout is.
func (w *Worker) Timeout(*river.Job[Args]) time.Duration {
	return w.cfg.Timeout + agent.DefaultKillGrace + recordTimeout + 5*time.Second
}

// Work analyzes one failed attempt. It returns nil whatever the analyzer did (the
// outcome is an event); only a failure to record it is an error, and then a permanent
// one (river.JobCancel): a retry would pay the analyzer again.
func (w *Worker) Work(ctx context.Context, job *river.Job[Args]) error {
	a := job.Args
	log := w.cfg.Logger.With("plan_id", a.PlanID, "task_id", a.TaskID, "attempt", a.Attempt)
	t, err := w.store.GetTask(ctx, a.PlanID, a.TaskID)
	if errors.Is(err, queue.ErrNotFound) {
		log.InfoContext(ctx, "failure analysis skipped: the task is gone")
		return nil
	}
	if err != nil {
		return river.JobCancel(fmt.Errorf("analyze failure: %w", err))
	}
	pi, err := w.store.GetPlan(ctx, a.PlanID)
	if err != nil {
		return river.JobCancel(fmt.Errorf("analyze failure: %w", err))
	}
	if pi.Status == plan.PlanCancelled || t.Status == plan.StatusCancelled {
		log.InfoContext(ctx, "failure analysis skipped: cancelled")
		return nil
	}

	res, aerr := w.analyze(ctx, a, t, pi)

	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordTimeout)
	defer cancel()
	// The charge first: whoever sees the finding's event sees its cost in the plan too.
	if res.Cost > 0 {
		detail := map[string]any{"task_id": a.TaskID, "attempt": a.Attempt, "agent": w.cfg.Agent.Name()}
		if err := w.store.Charge(rctx, a.PlanID, res.Cost, ChargeSource, detail); err != nil {
			log.ErrorContext(ctx, "analyzer cost not charged", "cost_usd", res.Cost.String(), "error", err)
		}
	}
	var (
		finding = t.TrizFinding // kept unless a new contradiction replaces it
		typ     string
		detail  map[string]any
	)
	switch {
	case aerr != nil:
		typ = EventError
		detail = map[string]any{"reason": errorClass(aerr), "error": clip(aerr.Error(), maxErrorText), "attempt": a.Attempt}
		log.WarnContext(ctx, "failure analysis failed", "reason", detail["reason"], "error", aerr)
	case res.Kind == agent.TrizContradiction:
		typ, finding = EventContradiction, res.Finding()
		detail = map[string]any{"contradiction_type": res.ContradictionType, "reason": res.Reason,
			"suggestion": res.Suggestion, "principle": res.Principle, "attempt": a.Attempt}
	default:
		typ = EventNone
		detail = map[string]any{"reason": res.Reason, "attempt": a.Attempt}
	}
	if res.Cost > 0 {
		detail["cost_usd"] = res.Cost.String()
	}
	if err := w.store.SetTrizFinding(rctx, a.PlanID, a.TaskID, finding, typ, detail); err != nil {
		if errors.Is(err, queue.ErrNotFound) {
			return nil
		}
		return river.JobCancel(fmt.Errorf("record %s on task %s of plan %s: %w", typ, a.TaskID, a.PlanID, err))
	}
	log.InfoContext(ctx, "failure analyzed", "outcome", typ, "cost_usd", res.Cost.String())
	return nil
}

// analyze asks the analyzer about the failed attempt. It runs in an empty scratch
// directory (agent.TrizInput.WorkDir unset): it has nothing to read there and nothing
// to break.
func (w *Worker) analyze(ctx context.Context, a Args, t queue.TaskInfo, pi queue.PlanInfo) (agent.TrizResult, error) {
	reason := a.Reason
	if reason == "" {
		reason = t.LastError
	}
	in := agent.TrizInput{
		PlanID: a.PlanID, PlanName: pi.Name, TaskID: a.TaskID,
		Description: t.Description, AcceptanceCriteria: t.AcceptanceCriteria, TestSteps: t.TestSteps, KeyFiles: t.KeyFiles,
		Attempt: a.Attempt, MaxAttempts: t.MaxAttempts, Reason: reason, Excerpt: a.Excerpt,
		Model: w.cfg.Model, BudgetCap: plan.Remaining(pi.Budget, pi.Spent),
	}
	return agent.AnalyzeFailure(ctx, w.cfg.Agent, in, w.cfg.Timeout)
}

// errorClass names why an analysis gave nothing, for triz.error's detail.reason.
func errorClass(err error) string {
	var ae *agent.AnswerError
	switch {
	case errors.Is(err, agent.ErrNotFound):
		return ErrorAgentNotFound
	case errors.Is(err, agent.ErrPromptInjection):
		return agent.ReasonPromptInjection
	case errors.As(err, &ae):
		return ae.Reason
	}
	return ErrorOther
}

// maxErrorText bounds the error text in a triz.error event.
const maxErrorText = 1 << 10

// clip cuts s to at most n bytes, on a rune boundary.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}
