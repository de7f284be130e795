package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/whilly-go/whilly/agent"
	"github.com/whilly-go/whilly/control/client"
	"github.com/whilly-go/whilly/internal/config"
	"github.com/whilly-go/whilly/plan"
	"github.com/whilly-go/whilly/queue"
	"github.com/whilly-go/whilly/sandbox"
	"github.com/whilly-go/whilly/worker"
	"github.com/whilly-go/whilly/worker/workerenv"
)

type runOptions struct {
	planID   string
	workers  int
	agent    string
	model    string
	logDir   string
	simDelay time.Duration
	simCost  string
	simFail  float64
}

func (a *app) runCommand() *cobra.Command {
	var o runOptions
	cmd := &cobra.Command{
		Use: "run --plan ID [--workers N] [--agent NAME]",
		Example: `  whilly run --plan demo --workers 4 --agent claude
  whilly run --plan demo --agent sim --sim-fail-rate 0.2`,
		Short: "Run a plan on this machine: an in-process control plane and N workers",
		Long: `Run a plan to the end on this machine. whilly starts a control plane on a loopback port
over the configured database (the embedded one by default) and N workers that claim
through the same HTTP protocol as remote workers, shows live progress, and prints a
summary table when the plan is DONE (exit 0) or cannot go on: FAILED, PAUSED on its
budget, or CANCELLED (exit 1).

The default agent is claude (Claude Code, which must be installed and logged in). The sim
agent runs no model: it finishes after --sim-delay with --sim-cost, failing a share
--sim-fail-rate of attempts; it is for demos and tests.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.planID == "" {
				return failf("run needs --plan ID (see 'whilly plan list')")
			}
			if o.workers < 1 || o.workers > 64 {
				return failf("--workers must be between 1 and 64, got %d", o.workers)
			}
			if o.agent == "" {
				o.agent = a.cfg.String(config.Agent)
			}
			if o.agent == "" {
				o.agent = agent.NameClaude
			}
			if o.model == "" {
				o.model = a.cfg.Raw(config.Model)
			}
			return a.runPlan(cmd.Context(), o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.planID, "plan", "", "the plan to run")
	f.IntVar(&o.workers, "workers", 2, "how many workers run tasks in parallel")
	f.StringVar(&o.agent, "agent", "", "agent: "+strings.Join(agent.Names(), ", ")+" (default $WHILLY_AGENT or claude)")
	f.StringVar(&o.model, "model", "", "model passed to the agent (default $WHILLY_MODEL)")
	f.StringVar(&o.logDir, "log-dir", "", "keep each attempt's agent output here (default <data dir>/logs)")
	f.DurationVar(&o.simDelay, "sim-delay", 300*time.Millisecond, "sim agent: how long each attempt takes")
	f.StringVar(&o.simCost, "sim-cost", "", "sim agent: what each attempt costs, in USD (default $WHILLY_SIM_COST, 0.02)")
	f.Float64Var(&o.simFail, "sim-fail-rate", 0, "sim agent: share of attempts that fail, 0 to 1")
	return cmd
}

// taskStat is what the summary table shows for one task: its attempts in this run.
type taskStat struct {
	attempts int
	cost     plan.USD
	duration time.Duration
}

func (a *app) runPlan(ctx context.Context, o runOptions) error {
	cost, _, err := a.cfg.USD(config.SimCost)
	if err != nil {
		return envErr(err)
	}
	if o.simCost != "" {
		if cost, err = plan.ParseUSD(o.simCost); err != nil {
			return failf("--sim-cost %q is not an amount of USD", o.simCost)
		}
	}
	timeout, err := a.cfg.Duration(config.AgentTimeout)
	if err != nil {
		return envErr(err)
	}
	acfg := workerenv.AgentConfig(a.cfg)
	acfg.Logger = a.log
	acfg.Sim = agent.SimConfig{Delay: o.simDelay, Cost: cost, FailRate: o.simFail, Seed: uint64(time.Now().UnixNano())}
	if acfg.Sandbox, err = a.openSandbox(o.agent); err != nil {
		return envf("%w", err)
	}
	ag, err := agent.New(o.agent, acfg)
	if err != nil {
		return failf("%v", err)
	}
	if err := agent.Check(ag, a.io.Getenv); err != nil {
		return envf("%v", err)
	}

	// The control plane `whilly serve` runs, in this process: the workers claim from it
	// over HTTP, and this command reads and writes through its store.
	cp, base, stopCP, err := a.localControlPlane(ctx)
	if err != nil {
		return err
	}
	defer stopCP()
	st := cp.Store()
	pi, err := st.GetPlan(ctx, o.planID)
	if err != nil {
		return storeErr(err)
	}
	if pi.Status == plan.PlanDone {
		a.printf("plan %s is already DONE: every task is done or skipped, nothing to run ('whilly plan reset %s' starts it over)\n", pi.ID, pi.ID)
		return nil
	}
	if pi.Total == 0 {
		return failf("plan %s has no tasks yet: add some with 'whilly plan import FILE'", pi.ID)
	}
	if pi.Status == plan.PlanPaused {
		return pausedErr(pi)
	}
	if pi.Status != plan.PlanActive {
		return failf("plan %s is %s, so nothing can run; 'whilly plan reset %s' starts it over", pi.ID, pi.Status, pi.ID)
	}
	// Before claiming: the agent works in the current directory (a plan with a repository
	// gets a checkout of its own), and one that would expose HOME to it fails every attempt.
	if pi.Repo == "" {
		if err := worker.CheckWorkDir(acfg.Sandbox, o.agent, "", a.io.Getenv("HOME")); err != nil {
			return workDirErr(err)
		}
	}
	tasks, err := st.Tasks(ctx, o.planID)
	if err != nil {
		return err
	}

	logDir := o.logDir
	if logDir == "" {
		logDir = a.dataDir() + "/logs"
	}
	labels := planLabels(tasks)
	var (
		mu    sync.Mutex
		stats = map[string]*taskStat{}
		wg    sync.WaitGroup
		errs  = make([]error, o.workers)
	)
	progress := a.newProgress(pi)
	onResult := func(out worker.Outcome) {
		mu.Lock()
		s := stats[out.TaskID]
		if s == nil {
			s = &taskStat{}
			stats[out.TaskID] = s
		}
		s.attempts++
		s.cost += out.Cost
		s.duration += out.Duration
		mu.Unlock()
		progress.outcome(out)
	}
	gate, err := workerenv.GateFromConfig(a.cfg)
	if err != nil {
		return envf("%v", err)
	}
	cache, err := workerenv.CacheFromConfig(a.cfg)
	if err != nil {
		return envf("%v", err)
	}
	started := time.Now()
	runCtx, stopWorkers := context.WithCancel(ctx)
	defer stopWorkers()
	for i := range o.workers {
		host, _ := os.Hostname()
		w, token, err := st.RegisterWorker(ctx, fmt.Sprintf("%s/run-%d", host, i+1), labels)
		if err != nil {
			return err
		}
		api, err := client.New(base, token, client.Options{})
		if err != nil {
			return err
		}
		wk, err := worker.New(api, ag, a.log, worker.Config{
			WorkerID: w.ID, PlanID: o.planID, Model: o.model, Drain: true, ClaimWait: 5 * time.Second,
			AgentTimeout: timeout, LogDir: logDir, OnResult: onResult, Sandbox: acfg.Sandbox, Gate: gate, Cache: cache,
			Home: a.io.Getenv("HOME"),
		})
		if err != nil {
			return err
		}
		wg.Go(func() {
			_, errs[i] = wk.Run(runCtx)
			if _, err := st.RevokeWorker(context.WithoutCancel(ctx), w.ID); err != nil {
				a.log.WarnContext(ctx, "revoke local worker", "worker_id", w.ID, "error", err)
			}
		})
	}
	stopTicker := progress.tick(ctx, st, o.planID)
	wg.Wait()
	stopTicker()
	if ctx.Err() != nil {
		return fmt.Errorf("run of plan %s interrupted; its tasks were released: %w", o.planID, ctx.Err())
	}
	for _, err := range errs {
		if errors.Is(err, agent.ErrNotReady) {
			return envf("%v", err)
		}
		if errors.Is(err, sandbox.ErrExposesHome) {
			return workDirErr(err)
		}
		if errors.Is(err, worker.ErrFleetPaused) {
			return failf("%v; run the plan again then", err)
		}
		if err != nil && !errors.Is(err, worker.ErrStopped) {
			return fmt.Errorf("a worker stopped: %w", err)
		}
	}
	return a.runSummary(ctx, st, o.planID, stats, time.Since(started))
}

// workDirErr is CheckWorkDir's refusal with what to do about it: exit 2.
func workDirErr(err error) error {
	return envf("%v; run whilly from a project directory (the agent works in the current one)", err)
}

// planLabels is every label a task of the plan needs, so local workers can take any task.
func planLabels(tasks []queue.TaskInfo) []string {
	seen := map[string]bool{}
	var out []string
	for _, t := range tasks {
		for _, l := range t.Labels {
			if !seen[l] {
				seen[l] = true
				out = append(out, l)
			}
		}
	}
	return out
}

func (a *app) runSummary(ctx context.Context, st *queue.Store, planID string, stats map[string]*taskStat, took time.Duration) error {
	pi, err := st.GetPlan(ctx, planID)
	if err != nil {
		return err
	}
	tasks, err := st.Tasks(ctx, planID)
	if err != nil {
		return err
	}
	// The table is this run's: its attempts, their cost and time; the plan's whole spend
	// (earlier runs too) is named as such below it.
	tw := newTable(a.io.Out)
	tw.row("TASK", "STATUS", "ATTEMPTS", "COST", "DURATION", "LAST ERROR")
	var run taskStat
	for _, t := range tasks {
		s, d := taskStat{}, "-"
		if got := stats[t.ID]; got != nil {
			s, d = *got, got.duration.Round(time.Millisecond).String()
		}
		run.attempts += s.attempts
		run.cost += s.cost
		tw.row(t.ID, string(t.Status), fmt.Sprint(s.attempts), "$"+s.cost.String(), d, truncate(t.LastError, 40))
	}
	tw.row("total", string(pi.Status), fmt.Sprint(run.attempts), "$"+run.cost.String(), took.Round(time.Millisecond).String(), "")
	if err := tw.flush(); err != nil {
		return err
	}
	switch pi.Status {
	case plan.PlanDone:
		a.printf("plan %s is DONE: %d %s; this run: %d %s, $%s, in %s; spent $%s of %s\n", pi.ID, pi.Total, pluralize(pi.Total, "task", "tasks"),
			run.attempts, pluralize(run.attempts, "attempt", "attempts"), run.cost, took.Round(time.Millisecond), pi.Spent, budgetText(pi.Budget))
		return nil
	case plan.PlanPaused:
		return pausedErr(pi)
	case plan.PlanActive:
		return a.explainStuck(ctx, st, pi)
	default:
		return failf("plan %s ended %s; see 'whilly plan show %s' and reset it with 'whilly plan reset %s'", pi.ID, pi.Status, pi.ID, pi.ID)
	}
}

// pausedErr says what lets a PAUSED plan run again, by the reason it is paused: approve
// it, resume it, or raise its budget. (A reset would run and pay for its finished tasks
// again.)
func pausedErr(pi queue.PlanInfo) error {
	switch pi.PauseReason {
	case queue.PauseApproval:
		return failf("plan %s awaits approval; review it ('whilly plan show %s') and approve it with 'whilly plan approve %s --digest D'", pi.ID, pi.ID, pi.ID)
	case queue.PauseOperator:
		return failf("plan %s was paused; resume it with 'whilly plan resume %s'", pi.ID, pi.ID)
	}
	return failf("plan %s is PAUSED (%s) after spending $%s of %s; raise it with 'whilly plan budget %s USD'", pi.ID, pi.PauseReason, pi.Spent, budgetText(pi.Budget), pi.ID)
}

// explainStuck says, task by task, why a plan that is still ACTIVE has nothing left to
// run: its workers drained because no PENDING task can be claimed without someone acting.
func (a *app) explainStuck(ctx context.Context, st *queue.Store, pi queue.PlanInfo) error {
	tasks, err := st.Tasks(ctx, pi.ID)
	if err != nil {
		return err
	}
	o, err := st.OutlookOf(ctx, pi.ID, planLabels(tasks), nil)
	if err != nil {
		return err
	}
	const shown = 20
	for i, h := range o.Held {
		if i == shown {
			a.printf("  … and %d more tasks held\n", len(o.Held)-shown)
			break
		}
		a.printf("  %s: %s\n", h.TaskID, termLine(h.Sentence()))
	}
	return failf("plan %s cannot go on: nothing runs and none of its %d pending tasks can be claimed (listed above)", pi.ID, len(o.Held))
}

// runProgress shows live progress: a redrawn line on a terminal, one line per finished
// attempt elsewhere.
type runProgress struct {
	a    *app
	tty  bool
	mu   sync.Mutex
	last string
}

func (a *app) newProgress(pi queue.PlanInfo) *runProgress {
	a.printf("running plan %s (%s): %d tasks, budget %s\n", pi.ID, termLine(pi.Name), pi.Total, budgetText(pi.Budget))
	return &runProgress{a: a, tty: isTerminal(a.io.Out)}
}

func (p *runProgress) outcome(out worker.Outcome) {
	p.mu.Lock()
	defer p.mu.Unlock()
	line := fmt.Sprintf("  %-10s %s (attempt %d, $%s, %s)", out.Status, out.TaskID, out.Attempt, out.Cost, out.Duration.Round(time.Millisecond))
	if out.Reason != "" && out.Status != "done" {
		line += ": " + termLine(out.Reason)
	}
	if p.tty {
		p.a.printf("\r\033[K%s\n%s", line, p.last)
		return
	}
	p.a.printf("%s\n", line)
}

// tick redraws the progress bar from the database until stopped (terminals only).
func (p *runProgress) tick(ctx context.Context, st *queue.Store, planID string) func() {
	if !p.tty {
		return func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(200 * time.Millisecond)
		defer t.Stop()
		for {
			if pi, err := st.GetPlan(ctx, planID); err == nil {
				p.draw(pi)
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return func() {
		cancel()
		<-done
		p.a.printf("\r\033[K")
	}
}

func (p *runProgress) draw(pi queue.PlanInfo) {
	p.mu.Lock()
	defer p.mu.Unlock()
	finished := pi.Counts[plan.StatusDone] + pi.Counts[plan.StatusSkipped]
	running := pi.Counts[plan.StatusClaimed] + pi.Counts[plan.StatusInProgress]
	const width = 30
	filled := 0
	if pi.Total > 0 {
		filled = finished * width / pi.Total
	}
	p.last = fmt.Sprintf("[%s%s] %d/%d done · %d running · %d failed · $%s of %s",
		strings.Repeat("█", filled), strings.Repeat("░", width-filled), finished, pi.Total, running,
		pi.Counts[plan.StatusFailed], pi.Spent, budgetText(pi.Budget))
	p.a.printf("\r\033[K%s", p.last)
}
