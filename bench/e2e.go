package bench

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/whilly-go/whilly/agent"
	"github.com/whilly-go/whilly/sandbox"
)

// E2EOptions are the knobs of the e2e benchmark.
type E2EOptions struct {
	Workers, Tasks int
	// WorkerBin is the whilly-worker binary the workers run.
	WorkerBin string
	SimDelay  time.Duration
	// AgentEnv is the workers' agent settings; empty: the sim agent.
	AgentEnv []string
	// Queries sums the API's database time per SQL statement while the plan drains.
	Queries bool
}

// E2EResult is what the e2e benchmark measured.
type E2EResult struct {
	Workers        int     `json:"workers"`
	Tasks          int     `json:"tasks"`
	SimDelayMs     float64 `json:"sim_delay_ms"`
	Seconds        float64 `json:"seconds"`
	TasksPerS      float64 `json:"tasks_per_s"`
	FirstClaimMs   float64 `json:"first_claim_ms"`
	OverheadP50Ms  float64 `json:"p50_task_overhead_ms"`
	OverheadP99Ms  float64 `json:"p99_task_overhead_ms"`
	OverheadMaxMs  float64 `json:"max_task_overhead_ms"`
	QueriesPerTask float64 `json:"queries_per_task"`
	PerWorker      []int   `json:"tasks_per_worker"`
	CPUControlMs   float64 `json:"cpu_control_plane_ms_per_task,omitempty"`
	CPUDBMs        float64 `json:"cpu_postgres_ms_per_task,omitempty"`
	CPUWorkersMs   float64 `json:"cpu_workers_ms_per_task,omitempty"`
	// CPUWorkerStartMs is the CPU a worker used before the tasks came: its start-up (the
	// sandbox probe included) and its wait on the empty plan; the CPU per task counts
	// all three parts from the import to the drain's end.
	CPUWorkerStartMs float64 `json:"cpu_worker_startup_ms,omitempty"`
	// Statements is the API's database time per statement (Queries), most first.
	Statements []Statement `json:"statements,omitempty"`
}

// SandboxResult is the e2e benchmark with a command agent run unboxed and in the
// sandbox, and what the box adds to an attempt.
type SandboxResult struct {
	Unboxed     E2EResult `json:"unboxed"`
	Boxed       E2EResult `json:"boxed"`
	AddedP50Ms  float64   `json:"sandbox_added_p50_ms"`
	AddedP99Ms  float64   `json:"sandbox_added_p99_ms"`
	TargetP50Ms float64   `json:"target_ms"`
}

// Sandbox runs the e2e benchmark twice in one run, with the same tiny command agent:
// WHILLY_SANDBOX=none, then bwrap. The difference of the per-task overheads is what the
// box adds to an attempt's start (and end): bubblewrap, the box's init, the proxy.
func Sandbox(ctx context.Context, s Setup, o E2EOptions) (SandboxResult, error) {
	dir, err := os.MkdirTemp("", "whilly-bench-agent-")
	if err != nil {
		return SandboxResult{}, fmt.Errorf("make the bench agent's directory: %w", err)
	}
	defer func() { _ = os.RemoveAll(dir) }()
	script := filepath.Join(dir, "agent.sh")
	body := "#!/bin/sh\ncat >/dev/null\necho '{\"result\": \"" + agent.CompletionMarker + "\", \"total_cost_usd\": 0}'\n"
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		return SandboxResult{}, fmt.Errorf("write the bench agent: %w", err)
	}
	var res SandboxResult
	for _, mode := range []string{sandbox.ModeNone, sandbox.ModeBwrap} {
		o.AgentEnv = []string{"WHILLY_AGENT=command", "WHILLY_AGENT_CMD=" + script, "WHILLY_SANDBOX=" + mode}
		s.progressf("WHILLY_SANDBOX=%s", mode)
		r, err := E2E(ctx, s, o)
		if err != nil {
			return SandboxResult{}, err
		}
		if mode == sandbox.ModeNone {
			res.Unboxed = r
		} else {
			res.Boxed = r
		}
	}
	res.AddedP50Ms = res.Boxed.OverheadP50Ms - res.Unboxed.OverheadP50Ms
	res.AddedP99Ms = res.Boxed.OverheadP99Ms - res.Unboxed.OverheadP99Ms
	res.TargetP50Ms = 150
	return res, nil
}

// workerEnv is the environment of a scratch worker: ours without whilly's settings,
// plus its own.
func workerEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "WHILLY_") {
			env = append(env, kv)
		}
	}
	return append(env, extra...)
}

// proc is one whilly-worker process.
type proc struct {
	cmd      *exec.Cmd
	out, err bytes.Buffer
	done     chan struct{} // closed when it exited, with exit set
	exit     error
}

// E2E runs o.Workers whilly-worker processes with o.AgentEnv's agent (the sim agent when
// it is empty), which drain o.Tasks tasks of a scratch plan through the API.
func E2E(ctx context.Context, s Setup, o E2EOptions) (E2EResult, error) {
	e, err := open(ctx, s, false)
	if err != nil {
		return E2EResult{}, err
	}
	defer e.close(ctx)
	if err := e.vacuum(ctx); err != nil {
		return E2EResult{}, err
	}
	id, err := e.scratchPlan(ctx, "e2e")
	if err != nil {
		return E2EResult{}, err
	}
	workers, err := e.registerWorkers(ctx, o.Workers, nil)
	if err != nil {
		return E2EResult{}, err
	}
	s.progressf("starting %d whilly-worker processes (%s)", o.Workers, o.WorkerBin)
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	procs := make([]*proc, len(workers))
	exited := func() *proc {
		for _, p := range procs {
			select {
			case <-p.done:
				return p
			default:
			}
		}
		return nil
	}
	for i, w := range workers {
		p := &proc{done: make(chan struct{})}
		p.cmd = exec.CommandContext(runCtx, o.WorkerBin, "--plan", id, "--drain")
		p.cmd.Env = workerEnv(append([]string{"WHILLY_AGENT=sim", "WHILLY_CONTROL_URL=" + e.base, "WHILLY_WORKER_TOKEN=" + w.token,
			"WHILLY_WORKER_ID=" + w.id, "WHILLY_SIM_DELAY=" + o.SimDelay.String(), "WHILLY_SIM_COST=0"}, o.AgentEnv...)...)
		p.cmd.Stdout, p.cmd.Stderr = &p.out, &p.err
		p.cmd.WaitDelay = 5 * time.Second
		if err := p.cmd.Start(); err != nil {
			return E2EResult{}, fmt.Errorf("start %s: %w", o.WorkerBin, err)
		}
		go func() {
			p.exit = p.cmd.Wait()
			close(p.done)
		}()
		procs[i] = p
	}
	// Each worker's first claim opens a connection and waits on the empty plan.
	deadline := time.Now().Add(30 * time.Second)
	for e.ln.accepted.Load() < int64(o.Workers) {
		if p := exited(); p != nil {
			return E2EResult{}, fmt.Errorf("a whilly-worker exited before any work (%w): %s", p.exit, strings.TrimSpace(p.err.String()))
		}
		if time.Now().After(deadline) {
			return E2EResult{}, fmt.Errorf("only %d of %d workers reached the control plane in 30 s", e.ln.accepted.Load(), o.Workers)
		}
		select {
		case <-ctx.Done():
			return E2EResult{}, ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
	if err := e.waitQuiet(ctx, 500*time.Millisecond, 10*time.Second); err != nil {
		return E2EResult{}, err
	}
	e.tracer.byStatement.Store(o.Queries)
	defer e.tracer.byStatement.Store(false)
	q0 := e.tracer.httpQueries.Load()
	cpu := e.startCPU(ctx)
	// The workers' CPU is counted over the same span as the control plane's and Postgres's:
	// from here on. What they used before (start-up, the sandbox probe, waiting) is their
	// start-up, per worker.
	started, startedOK := workersCPU(procs)
	s.progressf("importing %d tasks", o.Tasks)
	if err := e.addTasks(ctx, id, tasks(o.Tasks, false, nil)); err != nil {
		return E2EResult{}, err
	}
	limit := time.Duration(max(120, o.Tasks/20)) * time.Second
	timeout := time.After(limit)
	res := E2EResult{Workers: o.Workers, Tasks: o.Tasks, SimDelayMs: ms(o.SimDelay)}
	for i, p := range procs {
		select {
		case <-p.done:
			if p.exit != nil {
				return E2EResult{}, fmt.Errorf("worker %d: %w\n%s", i+1, p.exit, strings.TrimSpace(p.err.String()))
			}
		case <-timeout:
			return E2EResult{}, fmt.Errorf("the workers did not drain the plan within %s", limit)
		case <-ctx.Done():
			return E2EResult{}, ctx.Err()
		}
		var n int
		if _, err := fmt.Sscanf(p.out.String(), "tasks_done=%d", &n); err == nil {
			res.PerWorker = append(res.PerWorker, n)
		}
	}
	res.QueriesPerTask = float64(e.tracer.httpQueries.Load()-q0) / float64(o.Tasks)
	if o.Queries {
		res.Statements = e.statements()
	}
	if self, pg, ok := cpu.stop(ctx); ok && startedOK {
		var total time.Duration // ProcessState counts the children each worker waited for
		for _, p := range procs {
			total += p.cmd.ProcessState.UserTime() + p.cmd.ProcessState.SystemTime()
		}
		n := float64(o.Tasks)
		res.CPUControlMs, res.CPUDBMs, res.CPUWorkersMs = ms(self)/n, ms(pg)/n, ms(total-started)/n
		res.CPUWorkerStartMs = ms(started) / float64(len(procs))
	}
	if err := e.e2eTimings(ctx, id, o, &res); err != nil {
		return E2EResult{}, err
	}
	return res, nil
}

// workersCPU returns the CPU time the worker processes and the children they waited for
// have used so far, read from /proc.
func workersCPU(procs []*proc) (time.Duration, bool) {
	var sum time.Duration
	for _, p := range procs {
		self, children, ok := procTimes(p.cmd.Process.Pid)
		if !ok {
			return 0, false
		}
		sum += self + children
	}
	return sum, true
}

// e2eTimings reads the throughput and the per-task overhead from the plan's events: one
// pass over them (a self-join took 28 s at 4,000 tasks on a young cluster).
func (e *env) e2eTimings(ctx context.Context, planID string, o E2EOptions, res *E2EResult) error {
	rows, err := e.pool.Query(ctx, `
		SELECT task_id, count(*) FILTER (WHERE type = 'CLAIM'), count(*) FILTER (WHERE type = 'COMPLETE'),
			min(created_at) FILTER (WHERE type = 'CLAIM'), max(created_at) FILTER (WHERE type = 'COMPLETE'),
			min(created_at) FILTER (WHERE type = 'task.created')
		FROM events WHERE plan_id = $1 AND task_id IS NOT NULL GROUP BY task_id`, planID)
	if err != nil {
		return fmt.Errorf("read the plan's events: %w", err)
	}
	type span struct {
		claims, completes           int
		claimed, completed, created *time.Time
	}
	all, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (span, error) {
		var (
			s    span
			task string
		)
		err := r.Scan(&task, &s.claims, &s.completes, &s.claimed, &s.completed, &s.created)
		return s, err
	})
	if err != nil {
		return fmt.Errorf("read the plan's events: %w", err)
	}
	var spans []span
	for _, s := range all {
		if s.claims == 1 && s.completes == 1 && s.created != nil {
			spans = append(spans, s)
		}
	}
	if len(spans) != o.Tasks {
		return fmt.Errorf("%d tasks were claimed and completed once, of %d: a task ran twice or never", len(spans), o.Tasks)
	}
	first, last, created := *spans[0].claimed, *spans[0].completed, *spans[0].created
	over := make([]time.Duration, 0, len(spans))
	for _, s := range spans {
		if s.claimed.Before(first) {
			first = *s.claimed
		}
		if s.completed.After(last) {
			last = *s.completed
		}
		over = append(over, max(s.completed.Sub(*s.claimed)-o.SimDelay, 0))
	}
	slices.Sort(over)
	res.Seconds = last.Sub(first).Seconds()
	if res.Seconds > 0 {
		res.TasksPerS = float64(o.Tasks) / res.Seconds
	}
	res.FirstClaimMs = ms(first.Sub(created))
	res.OverheadP50Ms, res.OverheadP99Ms = ms(percentile(over, 0.5)), ms(percentile(over, 0.99))
	res.OverheadMaxMs = ms(over[len(over)-1])
	return nil
}
