package cli

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/whilly-go/whilly/agent"
	"github.com/whilly-go/whilly/bench"
	"github.com/whilly-go/whilly/queue"
	"github.com/whilly-go/whilly/sandbox"
	"github.com/whilly-go/whilly/server"
)

func (a *app) benchCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure the control plane's throughput and latency on this machine",
		Long: `Benchmarks of the real code on the configured database (the embedded one by default;
workspace needs none). Each creates scratch plans (ids bench-…) and deletes them
afterwards; their events stay in the audit log, which is append-only. Results are printed
as a table, then one key=value line, always the last.`,
	}
	cmd.AddCommand(a.benchClaims(), a.benchE2E())
	cmd.AddCommand(a.benchIntake(), a.benchScale())
	cmd.AddCommand(a.benchIdle(), a.benchWorkspace())
	return cmd
}

// poolFlagHelp is the help of the benchmarks' --pool flag (defaultPoolSize).
const poolFlagHelp = "database connections of the control plane (default: whilly serve's: 16, or 4 per core with the embedded cluster on fewer than 4 cores)"

// benchSetup is what bench needs from this composition root: the database, the
// queue settings and the control plane `whilly serve` runs. poolSize 0 keeps serve's size.
func (a *app) benchSetup(ctx context.Context, poolSize int) (bench.Setup, error) {
	cfg, err := a.poolConfig(ctx)
	if err != nil {
		return bench.Setup{}, err
	}
	qcfg, err := a.queueConfig()
	if err != nil {
		return bench.Setup{}, err
	}
	return bench.Setup{
		Pool: cfg, PoolSize: poolSize, Queue: qcfg, Log: a.log, Progress: a.io.Err,
		Connect: func(ctx context.Context, cfg *pgxpool.Config) (*pgxpool.Pool, error) { return a.openPool(ctx, cfg) },
		Serve: func(ctx context.Context, st *queue.Store, ln net.Listener, o bench.ServeOptions) (bench.Server, error) {
			return a.startControlPlane(ctx, st.Pool(), ln, func(c *server.Config) {
				c.Queue = st.Config()
				benchServeConfig(c, o)
			})
		},
	}, nil
}

// benchServeConfig is the configuration of `whilly serve` in the environment with what
// o asks for on top: the GitHub App of the bench's fake GitHub (with the table's
// defaults for the rest of the GitHub side, whatever the environment says) and TRIZ with
// the sim agent. The control plane is then built by the very code `whilly serve` runs.
func benchServeConfig(c *server.Config, o bench.ServeOptions) {
	if o.GitHub == nil && !o.TRIZ {
		return
	}
	defaults := server.Defaults()
	if g := o.GitHub; g != nil {
		c.GitHub = defaults.GitHub
		c.GitHub.AppID, c.GitHub.PrivateKey = g.AppID, []byte(g.PrivateKeyPEM)
		c.GitHub.WebhookSecret, c.GitHub.APIURL = []byte(g.WebhookSecret), g.APIURL
		c.SignIn = server.SignIn{}
	}
	if o.TRIZ {
		c.TRIZ = defaults.TRIZ
		c.TRIZ.Enabled, c.TRIZ.Agent = true, agent.NameSim
	}
}

// benchClaimsFlags are the claims benchmark's options and how to print them.
type benchClaimsFlags struct {
	bench.ClaimsOptions
	pool   int
	asJSON bool
}

func (a *app) benchClaims() *cobra.Command {
	var o benchClaimsFlags
	cmd := &cobra.Command{
		Use: "claims [--workers N] [--tasks M]",
		Example: `  whilly bench claims --workers 16 --tasks 4000
  whilly bench claims --json --queries`,
		Short: "HTTP claim+complete throughput against a raw SKIP LOCKED loop, ready→claimed latency, idle cost",
		Long: `Runs a control plane on a loopback port and, against the same database, in one run:

  serve     by default the control plane is the one 'whilly serve' runs with the GitHub
            App and TRIZ on, built by the same code: the App talks to a fake GitHub in
            this process (one installation), each scratch plan is the plan of an issue
            there, so every claim and completion runs the store's hooks (the mirror's
            PlanChanged, TRIZ's TaskFailed) and the mirror writes labels and the status
            comment to the fake. --no-hooks measures the bare control plane instead.
  raw       N connections run the baseline loop on a scratch table: one statement claims
            (UPDATE … WHERE id = (SELECT … FOR UPDATE SKIP LOCKED LIMIT 1)), one completes
            (UPDATE … SET status = 'DONE'); raw_per_s counts tasks claimed and completed.
            It runs before the http phase and again after it, and raw_per_s is the mean
            of the two, so that load coming or going on the machine meanwhile weighs on
            both sides of the ratio. The claim statement alone is measured too, on a
            table of its own.
  river     M no-op jobs are inserted into a queue of their own, then a River client
            works them, from the client's start to the last completion: river_per_s with
            River's recommended settings (its default FetchCooldown 100 ms and
            FetchPollInterval 1 s, and the 100 workers of its getting-started queue), then
            river_tuned_per_s with the settings of River's own benchmark (FetchCooldown
            2 ms, FetchPollInterval 20 ms, 2,000 workers).
  http      N workers (control/client, a connection each) claim and complete M zero-work
            tasks of a scratch plan through the API: claims_per_s. Like whilly-worker,
            each COMPLETE asks for the worker's next task (claim_next), so a task costs
            one request once a worker is under way. ratio_raw (also printed as ratio) =
            claims_per_s / raw_per_s, the same unit of work (a task handed out, then
            finished); ratio_river = claims_per_s / river_per_s, and ratio_river_tuned
            the same against river_tuned_per_s.
  latency   a scratch plan whose tasks form a chain (each depends on the one before) while
            the N workers wait in long-poll: a task becomes claimable when the COMPLETE of
            its predecessor commits. ready→claimed runs from the moment the completing
            worker holds the 200 of that COMPLETE (the commit is already visible then, so
            this errs short by one response write) to the moment a worker holds the 200
            of the claim that got the task. The same measured from the moment the COMPLETE
            request was sent is shown too (it errs long by the COMPLETE's own work).
  idle      the N workers long-poll a plan with nothing they may claim; every query made
            while serving an HTTP request is counted over the window. River and the LISTEN
            connection are not the workers' cost: their queries are shown apart.

Like pgbench, it first vacuums and analyzes the tasks table, so that what earlier runs
left behind does not weigh on this one. The control plane's pool has the size 'whilly
serve' uses (16, or 4 per core with the embedded cluster on fewer than 4 cores) unless
--pool is given; the baselines run on a pool of their own, one connection per worker.
Claims and completions of one plan are answered in batches (one statement for all the
workers waiting), so the http figure grows
with the number of workers while the raw loop's hardly moves: compare runs of one
--workers. On Linux the CPU time per task of this process and of its Postgres backends is
shown for the raw and http phases; --queries breaks the http phase's database time down by
statement, --cpuprofile writes a CPU profile of it (go tool pprof FILE). Other load on the
machine moves every figure: compare figures of one run.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch {
			case o.Workers < 1 || o.Workers > 256:
				return failf("--workers must be between 1 and 256, got %d", o.Workers)
			case o.Tasks < 1 || o.Tasks > 1_000_000:
				return failf("--tasks must be between 1 and 1000000, got %d", o.Tasks)
			case o.Chain < 2 || o.Chain > 100_000:
				return failf("--chain must be between 2 and 100000, got %d", o.Chain)
			case o.Idle < 500*time.Millisecond || o.Idle > 25*time.Second:
				return failf("--idle must be between 500ms and 25s, got %s", o.Idle)
			}
			return a.runBenchClaims(cmd.Context(), o)
		},
	}
	f := cmd.Flags()
	f.IntVar(&o.Workers, "workers", 16, "HTTP workers (and raw-loop connections)")
	f.IntVar(&o.Tasks, "tasks", 4000, "zero-work tasks for the throughput phases")
	f.IntVar(&o.Chain, "chain", 300, "length of the dependency chain of the latency phase")
	f.DurationVar(&o.Idle, "idle", 3*time.Second, "how long the idle phase counts queries")
	f.IntVar(&o.pool, "pool", 0, poolFlagHelp)
	f.StringVar(&o.CPUProfile, "cpuprofile", "", "write a CPU profile of the http phase to this file")
	f.BoolVar(&o.Queries, "queries", false, "also print the http phase's time in the database per SQL statement")
	f.BoolVar(&o.asJSON, "json", false, "print the result as JSON")
	f.BoolVar(&o.NoHooks, "no-hooks", false, "measure the bare control plane (no GitHub App, no TRIZ, no store hook) instead of the serve configuration")
	return cmd
}

func (a *app) runBenchClaims(ctx context.Context, o benchClaimsFlags) error {
	s, err := a.benchSetup(ctx, o.pool)
	if err != nil {
		return err
	}
	res, err := bench.Claims(ctx, s, o.ClaimsOptions)
	if err != nil {
		return err
	}
	if o.asJSON {
		return a.writeJSON(res)
	}
	tw := newTable(a.io.Out)
	tw.row("PHASE", "TASKS", "RESULT", "DETAIL")
	tw.row("raw claim", fmt.Sprint(o.Tasks), fmt.Sprintf("%.0f/s", res.RawClaimPerS), "one UPDATE … (SELECT … FOR UPDATE SKIP LOCKED LIMIT 1) per task")
	tw.row("raw claim+complete", fmt.Sprint(o.Tasks), fmt.Sprintf("%.0f/s", res.RawPerS),
		fmt.Sprintf("the claim statement, then one UPDATE … SET status = 'DONE'; %.0f/s before the http phase, %.0f/s after", res.RawBeforePerS, res.RawAfterPerS))
	tw.row("river no-op jobs", fmt.Sprint(o.Tasks), fmt.Sprintf("%.0f/s", res.RiverPerS), "River v0.51 works jobs inserted beforehand, recommended settings: "+bench.RiverRecommended.String())
	tw.row("river, tuned", fmt.Sprint(o.Tasks), fmt.Sprintf("%.0f/s", res.RiverTunedPerS), "the same with the settings of River's benchmark: "+bench.RiverTuned.String())
	tw.row("http claim+complete", fmt.Sprint(o.Tasks), fmt.Sprintf("%.0f/s", res.ClaimsPerS),
		fmt.Sprintf("%s; ratio_raw %.2f, ratio_river %.2f (tuned %.2f); %.1f queries and %.2f ms in the database per task",
			benchConfigName(res.Hooks), res.RatioRaw, res.RatioRiver, res.RatioRiverTuned, res.QueriesPerTask, res.DBMsPerTask))
	tw.row("ready→claimed", fmt.Sprint(o.Chain), fmt.Sprintf("p50 %.2f ms", res.ReadyP50Ms),
		fmt.Sprintf("p90 %.2f ms, p99 %.2f ms, max %.2f ms; from the COMPLETE request: p50 %.2f ms, p99 %.2f ms",
			res.ReadyP90Ms, res.ReadyP99Ms, res.ReadyMaxMs, res.ReadyFromSentP50, res.ReadyFromSentP99))
	tw.row("idle long-poll", "-", fmt.Sprintf("%d queries", res.IdleQueries),
		fmt.Sprintf("%d workers waiting %.1f s; meanwhile River and the LISTEN connection ran %d queries (not the workers')",
			o.Workers, res.IdleSeconds, res.IdleOtherQueries))
	if err := tw.flush(); err != nil {
		return err
	}
	if len(res.RawCPU) > 0 {
		parts := make([]string, len(res.RawCPU))
		for i, c := range res.RawCPU {
			parts[i] = fmt.Sprintf("%s: %.2f ms in this process, %.2f ms in Postgres", c.Phase, c.SelfMsPerTask, c.DBMsPerTask)
		}
		a.printf("raw loop CPU per task: %s\n", strings.Join(parts, "; "))
	}
	if res.CPUSelfMsPerTask+res.CPUDBMsPerTask > 0 {
		a.printf("http phase CPU per task: %.2f ms in this process (control plane and its HTTP clients), %.2f ms in Postgres; %.2f cores busy at %.0f tasks/s\n",
			res.CPUSelfMsPerTask, res.CPUDBMsPerTask, (res.CPUSelfMsPerTask+res.CPUDBMsPerTask)*res.ClaimsPerS/1000, res.ClaimsPerS)
	}
	if o.Queries {
		a.printStatements(res.Statements, o.Tasks)
	}
	if res.Hooks {
		a.printf("fake GitHub: %d requests, %d writes, %d it does not serve\n", res.GitHubRequests, res.GitHubWrites, res.GitHubProblems)
	}
	a.printf("%d workers; the control plane's pool: %d connections, the baselines': %d\n", o.Workers, res.PoolConns, o.Workers)
	a.printf("claims_per_s=%.0f raw_per_s=%.0f ratio=%.2f ready_to_claim_p50_ms=%.2f p99_ms=%.2f idle_queries_per_worker_s=%.2f river_per_s=%.0f river_tuned_per_s=%.0f ratio_raw=%.2f ratio_river=%.2f ratio_river_tuned=%.2f hooks=%t\n",
		res.ClaimsPerS, res.RawPerS, res.Ratio, res.ReadyP50Ms, res.ReadyP99Ms, res.IdlePerWorkerS, res.RiverPerS, res.RiverTunedPerS, res.RatioRaw, res.RatioRiver, res.RatioRiverTuned, res.Hooks)
	return nil
}

// benchConfigName says which control plane the http phase measured.
func benchConfigName(hooks bool) string {
	if hooks {
		return "serve configuration (GitHub App and TRIZ hooks)"
	}
	return "bare control plane (--no-hooks)"
}

// printStatements prints the http phase's queries by total time, per task.
func (a *app) printStatements(sts []bench.Statement, tasks int) {
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	tw := newTable(a.io.Out)
	tw.row("STATEMENT (http phase)", "PER TASK", "MS PER TASK", "MEAN MS")
	for _, s := range sts {
		tw.row(s.SQL, fmt.Sprintf("%.2f", float64(s.N)/float64(tasks)), fmt.Sprintf("%.3f", ms(s.Total)/float64(tasks)),
			fmt.Sprintf("%.3f", ms(s.Total)/float64(s.N)))
	}
	_ = tw.flush() // a broken stdout shows in the lines that follow
}

// benchE2EFlags are the e2e benchmark's options and how to print them.
type benchE2EFlags struct {
	bench.E2EOptions
	pool    int
	asJSON  bool
	sandbox bool // compare a command agent unboxed and in the sandbox
}

func (a *app) benchE2E() *cobra.Command {
	var o benchE2EFlags
	cmd := &cobra.Command{
		Use:   "e2e [--workers 8] [--tasks M]",
		Short: "Real whilly-worker processes with the sim agent drain a scratch plan",
		Long: `Runs a control plane on a loopback port and N whilly-worker processes (the binary next to
this one, or --worker-bin) with the sim agent at --sim-delay (default 0: the agent returns
at once), which claim, start and complete M tasks of a scratch plan through the API.

Like claims, it first vacuums and analyzes the tasks table. The workers first wait in
long-poll on the empty plan; then the M tasks are imported.
tasks_per_s is M over the span from the first CLAIM to the last COMPLETE (the events'
database timestamps, so worker start-up does not count). A task's overhead is the time from
its CLAIM to its COMPLETE minus the agent's own run time (the sim delay): the claim's
answer, START, the prompt and the report. CPU per task is the CPU time of the control
plane, of its Postgres backends and of the workers (with the processes they ran) from the
import to the last worker's exit, over M; what a worker used before the import (its
start-up, with the sandbox probe, and its wait) is reported apart, per worker.

With --sandbox a tiny command agent (a shell script) drains the plan twice in the same
run, first with WHILLY_SANDBOX=none, then in the sandbox (bubblewrap, its init and the
egress proxy), and the difference of the per-task overheads is what the sandbox adds to
an attempt (target: at most 150 ms).`,
		Example: `  whilly bench e2e --workers 2 --sandbox`,
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch {
			case o.Workers < 1 || o.Workers > 256:
				return failf("--workers must be between 1 and 256, got %d", o.Workers)
			case o.Tasks < 1 || o.Tasks > 1_000_000:
				return failf("--tasks must be between 1 and 1000000, got %d", o.Tasks)
			case o.SimDelay < 0:
				return failf("--sim-delay must not be negative")
			}
			if o.sandbox && !cmd.Flags().Changed("tasks") {
				o.Tasks = 200
			}
			if o.WorkerBin == "" {
				exe, err := os.Executable()
				if err != nil {
					return envf("find whilly-worker: %v; pass --worker-bin", err)
				}
				o.WorkerBin = filepath.Join(filepath.Dir(exe), "whilly-worker")
			}
			if _, err := exec.LookPath(o.WorkerBin); err != nil {
				return envf("no whilly-worker at %s (build it with 'make build', or pass --worker-bin PATH)", o.WorkerBin)
			}
			return a.runBenchE2E(cmd.Context(), o)
		},
	}
	f := cmd.Flags()
	f.IntVar(&o.Workers, "workers", 8, "whilly-worker processes")
	f.IntVar(&o.Tasks, "tasks", 4000, "tasks of the scratch plan")
	f.StringVar(&o.WorkerBin, "worker-bin", "", "the whilly-worker binary (default: next to this one)")
	f.DurationVar(&o.SimDelay, "sim-delay", 0, "how long each sim agent run takes")
	f.IntVar(&o.pool, "pool", 0, poolFlagHelp)
	f.BoolVar(&o.asJSON, "json", false, "print the result as JSON")
	f.BoolVar(&o.Queries, "queries", false, "also print the API's time in the database per SQL statement while the plan drains")
	f.BoolVar(&o.sandbox, "sandbox", false, "measure the sandbox: a command agent drains the plan unboxed, then in the sandbox (default --tasks 200)")
	return cmd
}

func (a *app) runBenchE2E(ctx context.Context, o benchE2EFlags) error {
	s, err := a.benchSetup(ctx, o.pool)
	if err != nil {
		return err
	}
	if o.sandbox {
		return a.runBenchSandbox(ctx, s, o)
	}
	res, err := bench.E2E(ctx, s, o.E2EOptions)
	if err != nil {
		return err
	}
	if o.asJSON {
		return a.writeJSON(res)
	}
	tw := newTable(a.io.Out)
	tw.row("WORKERS", "TASKS", "SIM DELAY", "SECONDS", "TASKS/S", "FIRST CLAIM", "OVERHEAD P50", "P99", "MAX", "QUERIES/TASK")
	tw.row(fmt.Sprint(o.Workers), fmt.Sprint(o.Tasks), o.SimDelay.String(), fmt.Sprintf("%.2f", res.Seconds),
		fmt.Sprintf("%.0f", res.TasksPerS), fmt.Sprintf("%.1f ms", res.FirstClaimMs), fmt.Sprintf("%.2f ms", res.OverheadP50Ms),
		fmt.Sprintf("%.2f ms", res.OverheadP99Ms), fmt.Sprintf("%.2f ms", res.OverheadMaxMs), fmt.Sprintf("%.1f", res.QueriesPerTask))
	if err := tw.flush(); err != nil {
		return err
	}
	if o.Queries {
		a.printStatements(res.Statements, o.Tasks)
	}
	a.printf("tasks per worker: %v\n", res.PerWorker)
	if res.CPUControlMs+res.CPUDBMs > 0 {
		total := res.CPUControlMs + res.CPUDBMs + res.CPUWorkersMs
		a.printf("CPU per task: %.2f ms (control plane %.2f ms, Postgres %.2f ms, workers %.2f ms); %.2f cores busy at %.0f tasks/s; a worker's start-up %.0f ms\n",
			total, res.CPUControlMs, res.CPUDBMs, res.CPUWorkersMs, total*res.TasksPerS/1000, res.TasksPerS, res.CPUWorkerStartMs)
	}
	a.printf("tasks_per_s=%.0f workers=%d p99_task_overhead_ms=%.2f\n", res.TasksPerS, res.Workers, res.OverheadP99Ms)
	return nil
}

// runBenchSandbox runs the e2e bench unboxed, then in the sandbox, and prints both.
func (a *app) runBenchSandbox(ctx context.Context, s bench.Setup, o benchE2EFlags) error {
	if err := sandbox.Check(ctx); err != nil {
		return envf("%w", err)
	}
	res, err := bench.Sandbox(ctx, s, o.E2EOptions)
	if err != nil {
		return err
	}
	if o.asJSON {
		return a.writeJSON(res)
	}
	tw := newTable(a.io.Out)
	tw.row("SANDBOX", "WORKERS", "TASKS", "TASKS/S", "OVERHEAD P50", "P99", "MAX")
	for _, r := range []struct {
		mode string
		e    bench.E2EResult
	}{{sandbox.ModeNone, res.Unboxed}, {sandbox.ModeBwrap, res.Boxed}} {
		tw.row(r.mode, fmt.Sprint(r.e.Workers), fmt.Sprint(r.e.Tasks), fmt.Sprintf("%.0f", r.e.TasksPerS),
			fmt.Sprintf("%.2f ms", r.e.OverheadP50Ms), fmt.Sprintf("%.2f ms", r.e.OverheadP99Ms), fmt.Sprintf("%.2f ms", r.e.OverheadMaxMs))
	}
	if err := tw.flush(); err != nil {
		return err
	}
	a.printf("sandbox_added_p50_ms=%.1f sandbox_added_p99_ms=%.1f target_ms=%.0f\n", res.AddedP50Ms, res.AddedP99Ms, res.TargetP50Ms)
	return nil
}

// benchIdleFlags are the idle benchmark's options and how to print them.
type benchIdleFlags struct {
	bench.IdleOptions
	asJSON bool
}

func (a *app) benchIdle() *cobra.Command {
	var o benchIdleFlags
	cmd := &cobra.Command{
		Use:   "idle [--workers 10000]",
		Short: "What long-polling workers cost one whilly serve while they wait, and how fast one of them wakes",
		Long: `Starts 'whilly serve' (this binary, configured by this environment) in a process of its
own on a loopback port over the bench's database, registers N scratch workers, and has
them all long-poll a scratch plan from this process, each over an HTTP/1.1 keep-alive
connection of its own (the open-file limit is raised as far as the hard limit allows).
Then, while they wait:

  memory    the server's resident memory (VmRSS of /proc/PID/status) and Go heap in use
            (go_memstats_heap_inuse_bytes of its /metrics) before the workers connect and
            while they all wait; the difference over N is the cost of one waiting worker
            (rss_per_worker_kib is the figure; heap_per_worker_kib leaves out goroutine
            stacks and connection buffers outside the heap). Target: at most 64 KiB.
  queries   the waiting workers' claims' attempts on the database over --window while
            they all wait (whilly_claim_queries_total of its /metrics): idle_queries.
            Each waiting claim asks for 30 s (the server's cap) and the window ends
            before the first of them runs out. Target: 0. Next to it, every statement the
            database's other connections start over that window and over one before the
            workers connect (pg_stat_activity read every 10 ms: each new query_start):
            River's maintenance, the listener's pings and the sweeps, which run with
            workers or without.
  wake      --wakes times, one task is added to the plan they all wait on: the time from
            the import's commit to a worker holding the claim of that task (p50, p99).
            Target: p99 at most 50 ms.`,
		Example: `  whilly bench idle
  whilly bench idle --workers 2000 --wakes 100 --json`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch {
			case o.Workers < 1 || o.Workers > 50_000:
				return failf("--workers must be between 1 and 50000, got %d", o.Workers)
			case o.Window < time.Second || o.Window > 20*time.Second:
				return failf("--window must be between 1s and 20s, got %s", o.Window)
			case o.Wakes < 1 || o.Wakes > 10_000:
				return failf("--wakes must be between 1 and 10000, got %d", o.Wakes)
			}
			if o.Exe == "" {
				exe, err := os.Executable()
				if err != nil {
					return envf("find the whilly binary to run serve with: %v; pass --serve-bin", err)
				}
				o.Exe = exe
			}
			if _, err := exec.LookPath(o.Exe); err != nil {
				return envf("no whilly binary at %s (build it with 'make build', or pass --serve-bin PATH)", o.Exe)
			}
			return a.runBenchIdle(cmd.Context(), o)
		},
	}
	f := cmd.Flags()
	f.IntVar(&o.Workers, "workers", 10_000, "long-polling workers, each on a connection of its own")
	f.DurationVar(&o.Window, "window", 5*time.Second, "how long queries are counted, before and while the workers wait")
	f.IntVar(&o.Wakes, "wakes", 50, "tasks added one at a time while the workers wait (the wake-up latency's samples)")
	f.StringVar(&o.Exe, "serve-bin", "", "the whilly binary whose serve is measured (default: this one)")
	f.BoolVar(&o.asJSON, "json", false, "print the result as JSON")
	return cmd
}

func (a *app) runBenchIdle(ctx context.Context, o benchIdleFlags) error {
	s, err := a.benchSetup(ctx, 0)
	if err != nil {
		return err
	}
	if o.DatabaseURL, err = a.databaseURL(ctx); err != nil {
		return err
	}
	o.Env = os.Environ()
	res, err := bench.Idle(ctx, s, o.IdleOptions)
	if err != nil {
		return err
	}
	if o.asJSON {
		return a.writeJSON(res)
	}
	mib := func(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }
	tw := newTable(a.io.Out)
	tw.row("MEASURE", "BEFORE", "WAITING", "PER WORKER", "DETAIL")
	tw.row("resident memory", mib(res.RSSBeforeBytes), mib(res.RSSWaitingBytes), fmt.Sprintf("%.1f KiB", res.RSSPerWorkerKiB),
		fmt.Sprintf("whilly serve's VmRSS; %d workers connected in %.1f s, %d goroutines while they wait", res.Workers, res.ConnectSeconds, res.GoroutinesWaiting))
	tw.row("Go heap in use", mib(res.HeapBeforeBytes), mib(res.HeapWaitingBytes), fmt.Sprintf("%.1f KiB", res.HeapPerWorkerKiB), "go_memstats_heap_inuse_bytes of its /metrics")
	tw.row("claim queries", "-", fmt.Sprint(res.IdleQueries), "-",
		fmt.Sprintf("the waiting claims' attempts on the database over %.0f s (whilly_claim_queries_total)", res.WindowSeconds))
	tw.row("statements", fmt.Sprint(res.StatementsBefore), fmt.Sprint(res.StatementsWaiting), "-",
		fmt.Sprintf("every connection's over %.0f s (pg_stat_activity every 10 ms): River's maintenance, the listener's pings, the sweeps", res.WindowSeconds))
	tw.row("wake-up", "-", fmt.Sprintf("p50 %.2f ms", res.WakeP50Ms), "-",
		fmt.Sprintf("p99 %.2f ms, max %.2f ms over %d tasks, from the import's commit to the claim's answer; from the import call: p50 %.2f ms, p99 %.2f ms; %d claims asked again after an error",
			res.WakeP99Ms, res.WakeMaxMs, res.Wakes, res.WakeFromCallP50Ms, res.WakeFromCallP99Ms, res.ClaimErrors))
	if err := tw.flush(); err != nil {
		return err
	}
	a.printf("workers=%d rss_per_worker_kib=%.1f heap_per_worker_kib=%.1f idle_queries=%d wake_p50_ms=%.2f wake_p99_ms=%.2f\n",
		res.Workers, res.RSSPerWorkerKiB, res.HeapPerWorkerKiB, res.IdleQueries, res.WakeP50Ms, res.WakeP99Ms)
	return nil
}

// benchWorkspaceFlags are the workspace benchmark's options and how to print them.
type benchWorkspaceFlags struct {
	bench.WorkspaceOptions
	asJSON bool
}

func (a *app) benchWorkspace() *cobra.Command {
	var o benchWorkspaceFlags
	cmd := &cobra.Command{
		Use:   "workspace [--history-mb 1024] [--tree-mb 200]",
		Short: "A plan's checkout of a big repository on a fresh worker, a second plan's on the same worker, and the box's start",
		Long: `Needs no database. Generates a repository once and keeps it in --cache-dir: a main
branch of about --history-mb MiB of packed history whose head holds a --tree-mb MiB tree
of 1–39 KiB files, incompressible content from a seeded generator written with git
fast-import (the same sizes give the same repository on every machine). It is served
over git's smart HTTP (git http-backend) on a loopback port. Then:

  checkouts  the worker's own workspaces, on an empty workspace directory: plan 1's
             checkout (branch whilly/issue-1, new, so started from main) is opened and
             closed, timed; then plan 2's (whilly/issue-2) on the same directory. Both
             are checked to hold main's head and every file of its tree. Target: the
             second takes at most 10% of the first and at most 3 s, as it should when
             the worker keeps one object store per repository and fetches only what is
             new.
  box start  true runs --runs times in the sandbox (its defaults, as a worker with no
             sandbox variable set gets them: bubblewrap, its init, the egress proxy),
             and as many times unboxed, interleaved; each run is the sandbox's Prepare,
             the process and Close. The box's init is the whilly-worker binary next to
             this one (--worker-bin), as on a worker, else this binary, which starts
             slower. Target: the box adds at most 150 ms at p50. Skipped, with a line
             saying why, where bubblewrap does not work.

Other load on the machine, and whether the repository's pack is in the page cache,
move every figure.`,
		Example: `  whilly bench workspace
  whilly bench workspace --history-mb 64 --tree-mb 16 --runs 10 --json`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch {
			case o.TreeMB < 1 || o.TreeMB > 16_384:
				return failf("--tree-mb must be between 1 and 16384, got %d", o.TreeMB)
			case o.HistoryMB < o.TreeMB || o.HistoryMB > 65_536:
				return failf("--history-mb must be between --tree-mb (%d) and 65536, got %d", o.TreeMB, o.HistoryMB)
			case o.Runs < 1 || o.Runs > 10_000:
				return failf("--runs must be between 1 and 10000, got %d", o.Runs)
			}
			if o.BoxInit != "" {
				if _, err := exec.LookPath(o.BoxInit); err != nil {
					return envf("no whilly-worker at %s (build it with 'make build', or leave --worker-bin out)", o.BoxInit)
				}
			} else if exe, err := os.Executable(); err == nil {
				// The box's init is the worker's binary on a worker; this one starts slower.
				bin := filepath.Join(filepath.Dir(exe), "whilly-worker")
				if _, err := exec.LookPath(bin); err == nil {
					o.BoxInit = bin
				}
			}
			if o.CacheDir == "" {
				dir, err := os.UserCacheDir()
				if err != nil {
					return envf("find the user cache directory: %v; pass --cache-dir", err)
				}
				o.CacheDir = filepath.Join(dir, "whilly", "bench")
			}
			return a.runBenchWorkspace(cmd.Context(), o)
		},
	}
	f := cmd.Flags()
	f.IntVar(&o.HistoryMB, "history-mb", 1024, "the generated repository's packed history, in MiB (about)")
	f.IntVar(&o.TreeMB, "tree-mb", 200, "its working tree, in MiB")
	f.StringVar(&o.CacheDir, "cache-dir", "", "where generated repositories are kept (default: <user cache directory>/whilly/bench)")
	f.IntVar(&o.Runs, "runs", 30, "runs of true in the box, and as many unboxed")
	f.StringVar(&o.BoxInit, "worker-bin", "", "the whilly-worker binary the box runs as its init, as on a worker (default: next to this one, else this one)")
	f.BoolVar(&o.asJSON, "json", false, "print the result as JSON")
	return cmd
}

func (a *app) runBenchWorkspace(ctx context.Context, o benchWorkspaceFlags) error {
	o.Progress, o.Live, o.Log = a.io.Err, isTerminal(a.io.Err), a.log
	res, err := bench.Workspace(ctx, o.WorkspaceOptions)
	if err != nil {
		return err
	}
	if o.asJSON {
		return a.writeJSON(res)
	}
	passFail := func(ok bool) string {
		if ok {
			return "pass"
		}
		return "fail"
	}
	r := res.Repo
	made := fmt.Sprintf("reused from %s", r.Dir)
	if r.Generated {
		made = fmt.Sprintf("generated in %.1f s into %s", r.GenSeconds, r.Dir)
	}
	mib := func(b int64) string { return fmt.Sprintf("%.0f MiB", float64(b)/(1<<20)) }
	tw := newTable(a.io.Out)
	tw.row("MEASURE", "RESULT", "TARGET", "DETAIL")
	tw.row("repository", mib(r.PackBytes)+" packed", "-",
		fmt.Sprintf("%d commits, %s of file versions; main: %d files, %s; %s", r.Commits, mib(r.BlobBytes), r.Files, mib(r.TreeBytes), made))
	tw.row("first checkout", fmt.Sprintf("%.2f s", res.First.Seconds), "-",
		fmt.Sprintf("plan 1 (%s) on an empty workspace directory: open and close", res.First.Branch))
	tw.row("second checkout", fmt.Sprintf("%.2f s", res.Second.Seconds),
		fmt.Sprintf("≤ %.0f%%, ≤ %.0f s: %s", res.MaxRatio*100, res.MaxSecondSeconds, passFail(res.SecondPass)),
		fmt.Sprintf("plan 2 (%s) on the same directory: %.1f%% of the first", res.Second.Branch, res.Ratio*100))
	b := res.Box
	if b.Skipped == "" {
		tw.row("box start", fmt.Sprintf("+%.1f ms p50", b.AddedP50Ms), fmt.Sprintf("≤ %.0f ms: %s", b.MaxAddedP50Ms, passFail(b.Pass)),
			fmt.Sprintf("true over %d runs each, interleaved, the box's init %s: boxed p50 %.1f ms (Prepare %.1f, bwrap and true %.1f, Close %.1f), p90 %.1f ms; unboxed p50 %.1f ms, p90 %.1f ms (+%.1f ms at p90)",
				b.Runs, b.Init, b.BoxedP50Ms, b.PrepareP50Ms, b.ProcessP50Ms, b.CloseP50Ms, b.BoxedP90Ms, b.UnboxedP50Ms, b.UnboxedP90Ms, b.AddedP90Ms))
	}
	if err := tw.flush(); err != nil {
		return err
	}
	box := fmt.Sprintf("box_added_p50_ms=%.1f box_added_p90_ms=%.1f box_pass=%t", b.AddedP50Ms, b.AddedP90Ms, b.Pass)
	if b.Skipped != "" {
		a.printf("box start skipped: %s\n", termLine(b.Skipped))
		box = "box_added_p50_ms=skipped box_added_p90_ms=skipped box_pass=skipped"
	}
	a.printf("history_mb=%d tree_mb=%d first_checkout_s=%.2f second_checkout_s=%.2f second_ratio=%.3f second_pass=%t %s\n",
		r.HistoryMB, r.TreeMB, res.First.Seconds, res.Second.Seconds, res.Ratio, res.SecondPass, box)
	return nil
}
