package cli

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"net/http/httptrace"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/whilly-go/whilly/agent"
	"github.com/whilly-go/whilly/control/client"
	"github.com/whilly-go/whilly/migrations"
	"github.com/whilly-go/whilly/plan"
	"github.com/whilly-go/whilly/queue"
	"github.com/whilly-go/whilly/sandbox"
)

func (a *app) benchCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure the control plane's throughput and latency on this machine",
		Long: `Benchmarks of the real code on the configured database (the embedded one by default).
Each creates scratch plans (ids bench-…) and deletes them afterwards; their events stay in
the audit log, which is append-only. Results are printed as a table, then one key=value
line, always the last.`,
	}
	cmd.AddCommand(a.benchClaims(), a.benchE2E())
	return cmd
}

// benchTracer counts the queries of a pool. Queries made while serving an HTTP request
// (their context carries http.ServerContextKey) are the API's; everything else is River,
// the LISTEN connection or the benchmark itself.
type benchTracer struct {
	httpQueries atomic.Int64
	httpNanos   atomic.Int64 // time spent in the API's queries, start to end
	otherQ      atomic.Int64
	lastHTTP    atomic.Int64 // unix nanoseconds of the end of the latest API query

	// With byStatement on, the API's queries are summed per statement (--queries).
	byStatement atomic.Bool
	mu          sync.Mutex
	statements  map[string]*statementStats
}

type statementStats struct {
	n     int
	total time.Duration
}

type traceStart struct {
	at  time.Time
	sql string
}

func (t *benchTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	if ctx.Value(http.ServerContextKey) == nil {
		t.otherQ.Add(1)
		return ctx
	}
	t.httpQueries.Add(1)
	return context.WithValue(ctx, traceStart{}, traceStart{at: time.Now(), sql: data.SQL})
}

func (t *benchTracer) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryEndData) {
	began, ok := ctx.Value(traceStart{}).(traceStart)
	if !ok {
		return
	}
	now := time.Now()
	d := now.Sub(began.at)
	t.httpNanos.Add(int64(d))
	t.lastHTTP.Store(now.UnixNano())
	if !t.byStatement.Load() {
		return
	}
	key := strings.Join(strings.Fields(began.sql), " ")
	if len(key) > 90 {
		key = key[:90] + "…"
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.statements == nil {
		t.statements = map[string]*statementStats{}
	}
	st := t.statements[key]
	if st == nil {
		st = &statementStats{}
		t.statements[key] = st
	}
	st.n++
	st.total += d
}

// TraceBatchStart, TraceBatchQuery and TraceBatchEnd count pipelined statements too: a
// batch is timed as a whole, under "batch of N", its statements only counted.
func (t *benchTracer) TraceBatchStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceBatchStartData) context.Context {
	if ctx.Value(http.ServerContextKey) == nil {
		return ctx
	}
	n := 0
	if data.Batch != nil {
		n = data.Batch.Len()
	}
	return context.WithValue(ctx, traceStart{}, traceStart{at: time.Now(), sql: fmt.Sprintf("batch of %d statements", n)})
}

func (t *benchTracer) TraceBatchQuery(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchQueryData) {
	if ctx.Value(http.ServerContextKey) != nil {
		t.httpQueries.Add(1)
	}
}

func (t *benchTracer) TraceBatchEnd(ctx context.Context, conn *pgx.Conn, _ pgx.TraceBatchEndData) {
	t.TraceQueryEnd(ctx, conn, pgx.TraceQueryEndData{})
}

// countingListener counts the connections it accepted.
type countingListener struct {
	net.Listener
	accepted atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.accepted.Add(1)
	}
	return c, err
}

// benchEnv is a control plane on loopback over a traced pool, and what must be removed
// when the benchmark ends.
type benchEnv struct {
	a       *app
	pool    *pgxpool.Pool
	store   *queue.Store
	tracer  *benchTracer
	ln      *countingListener
	cp      *controlPlane
	base    string
	suffix  string // makes scratch names unique
	plans   []string
	workers []string
	tables  []string
	rawCPU  []string // CPU per task of the raw loops, for the report
}

// benchSetup connects (poolSize 0 keeps the size `whilly serve` has), brings
// the schema up to date and starts a control plane on a loopback port.
func (a *app) benchSetup(ctx context.Context, poolSize int) (*benchEnv, error) {
	cfg, err := a.poolConfig(ctx)
	if err != nil {
		return nil, err
	}
	tr := &benchTracer{}
	cfg.ConnConfig.Tracer = tr
	if poolSize > 0 {
		cfg.MaxConns = int32(min(poolSize, 1000))
	}
	pool, err := a.openPool(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if _, err := migrations.Up(ctx, pool); err != nil {
		pool.Close()
		return nil, envf("migrate the database: %w", err)
	}
	qcfg, err := a.queueConfig()
	if err != nil {
		pool.Close()
		return nil, err
	}
	var b [4]byte
	_, _ = rand.Read(b[:]) // crypto/rand never fails on supported platforms
	e := &benchEnv{a: a, pool: pool, store: queue.NewStore(pool, a.log, qcfg), tracer: tr,
		suffix: fmt.Sprintf("%s-%s", time.Now().UTC().Format("20060102t150405"), hex.EncodeToString(b[:]))}
	var lc net.ListenConfig
	raw, err := lc.Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		pool.Close()
		return nil, envf("listen on a loopback port: %w", err)
	}
	e.ln = &countingListener{Listener: raw}
	if e.cp, err = a.startControlPlane(ctx, e.store, e.ln); err != nil {
		pool.Close()
		return nil, err
	}
	e.base = "http://" + raw.Addr().String()
	return e, nil
}

// close stops the control plane and removes the scratch plans, workers and tables.
func (e *benchEnv) close(ctx context.Context) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if err := e.cp.Shutdown(ctx); err != nil {
		e.a.log.WarnContext(ctx, "bench: control plane shutdown", "error", err)
	}
	for _, id := range e.workers {
		if _, err := e.store.RevokeWorker(ctx, id); err != nil {
			e.a.log.WarnContext(ctx, "bench: revoke scratch worker", "worker_id", id, "error", err)
		}
	}
	for _, id := range e.plans {
		if _, err := e.store.ResetPlan(ctx, id, queue.ResetOptions{Hard: true}); err != nil && !errors.Is(err, queue.ErrNotFound) {
			e.a.log.WarnContext(ctx, "bench: delete scratch plan", "plan_id", id, "error", err)
		}
	}
	for _, t := range e.tables {
		if _, err := e.pool.Exec(ctx, "DROP TABLE IF EXISTS "+pgx.Identifier{t}.Sanitize()); err != nil {
			e.a.log.WarnContext(ctx, "bench: drop scratch table", "table", t, "error", err)
		}
	}
	e.pool.Close()
}

// scratchPlan creates an empty ACTIVE plan that close deletes.
func (e *benchEnv) scratchPlan(ctx context.Context, kind string) (string, error) {
	id := "bench-" + kind + "-" + e.suffix
	if _, err := e.store.CreatePlan(ctx, id, "whilly bench "+kind+" (scratch, deleted afterwards)", nil); err != nil {
		return "", fmt.Errorf("create scratch plan: %w", err)
	}
	e.plans = append(e.plans, id)
	return id, nil
}

// benchTasks are n zero-work tasks; chained, each depends on the one before it.
func benchTasks(n int, chained bool, labels []string) []plan.Task {
	ts := make([]plan.Task, n)
	for i := range ts {
		ts[i] = plan.Task{
			ID: fmt.Sprintf("B%06d", i+1), Priority: plan.PriorityMedium,
			Description:        fmt.Sprintf("whilly bench task %d: no work at all", i+1),
			AcceptanceCriteria: []string{"none"}, TestSteps: []string{"none"}, MaxAttempts: 1, Labels: labels,
		}
		if chained && i > 0 {
			ts[i].Dependencies = []string{ts[i-1].ID}
		}
	}
	return ts
}

// addTasks imports tasks into the scratch plan id; they are claimable when it returns.
func (e *benchEnv) addTasks(ctx context.Context, id string, ts []plan.Task) error {
	p := &plan.Plan{ID: id, Name: "whilly bench (scratch, deleted afterwards)", Tasks: ts}
	if _, err := e.store.Import(ctx, p, queue.ImportOptions{}); err != nil {
		return fmt.Errorf("import scratch tasks: %w", err)
	}
	return nil
}

// benchWorker is a registered scratch worker.
type benchWorker struct {
	id, token string
	api       *client.Client
}

func (e *benchEnv) registerWorkers(ctx context.Context, n int, labels []string) ([]benchWorker, error) {
	out := make([]benchWorker, 0, n)
	for i := range n {
		w, token, err := e.store.RegisterWorker(ctx, fmt.Sprintf("bench-%s-%d", e.suffix, i+1), labels)
		if err != nil {
			return nil, fmt.Errorf("register scratch worker: %w", err)
		}
		e.workers = append(e.workers, w.ID)
		api, err := client.New(e.base, token, client.Options{UserAgent: "whilly-bench"})
		if err != nil {
			return nil, err
		}
		out = append(out, benchWorker{id: w.ID, token: token, api: api})
	}
	return out, nil
}

// waitQuiet waits until no API query has run for quiet, at most limit: the workers'
// claims have all reached their long-poll wait.
func (e *benchEnv) waitQuiet(ctx context.Context, quiet, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for time.Since(time.Unix(0, e.tracer.lastHTTP.Load())) < quiet && time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
	return nil
}

// waitWaiting waits until n claims have been written to the control plane and no API
// query has run for half a second since: every claim has reached its long-poll wait.
func (e *benchEnv) waitWaiting(ctx context.Context, sent *atomic.Int64, n int) error {
	deadline := time.Now().Add(30 * time.Second)
	for sent.Load() < int64(n) {
		if time.Now().After(deadline) {
			return fmt.Errorf("only %d of %d claims reached the control plane in 30 s", sent.Load(), n)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
	return e.waitQuiet(ctx, 500*time.Millisecond, 10*time.Second)
}

// percentile returns the nearest-rank percentile p (0 < p ≤ 1) of sorted durations.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(p*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// cpuMeter adds up the CPU time of this process and of the database's backends serving
// it, from /proc (Linux; elsewhere it reads nothing and says so).
type cpuMeter struct {
	pool     *pgxpool.Pool
	backends []int
	self0    time.Duration
	pg0      time.Duration
	ok       bool
}

// procCPU returns the user+system CPU time of a process, read from /proc/PID/stat.
func procCPU(pid int) (time.Duration, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')') // the command name may hold spaces
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0, false
	}
	var user, sys int64
	if _, err := fmt.Sscan(f[11], &user); err != nil {
		return 0, false
	}
	if _, err := fmt.Sscan(f[12], &sys); err != nil {
		return 0, false
	}
	const tick = 10 * time.Millisecond // USER_HZ is 100 on every Linux architecture whilly runs on
	return time.Duration(user+sys) * tick, true
}

// startCPU notes the CPU time used so far by this process and by the database backends
// connected to this database now (the pool's, the listener's, River's).
func (e *benchEnv) startCPU(ctx context.Context) *cpuMeter {
	m := &cpuMeter{pool: e.pool}
	rows, err := e.pool.Query(ctx, `SELECT pid FROM pg_stat_activity WHERE datname = current_database()`)
	if err == nil {
		m.backends, err = pgx.CollectRows(rows, pgx.RowTo[int])
	}
	if err != nil {
		return m
	}
	var ok bool
	if m.self0, ok = procCPU(os.Getpid()); !ok {
		return m
	}
	m.pg0 = m.pgCPU()
	m.ok = true
	return m
}

func (m *cpuMeter) pgCPU() time.Duration {
	var sum time.Duration
	for _, pid := range m.backends {
		if d, ok := procCPU(pid); ok {
			sum += d
		}
	}
	return sum
}

// stop returns the CPU time used since start by this process and by the backends.
func (m *cpuMeter) stop() (self, pg time.Duration, ok bool) {
	if !m.ok {
		return 0, 0, false
	}
	now, ok := procCPU(os.Getpid())
	if !ok {
		return 0, 0, false
	}
	return now - m.self0, m.pgCPU() - m.pg0, true
}

// ---- whilly bench claims ----

type benchClaimsOptions struct {
	workers, tasks, chain, pool int
	idle                        time.Duration
	cpuProfile                  string
	asJSON, queries             bool
}

// ClaimsResult is what `whilly bench claims` measured.
type ClaimsResult struct {
	Workers          int     `json:"workers"`
	Tasks            int     `json:"tasks"`
	PoolConns        int32   `json:"pool_conns"`
	RawClaimPerS     float64 `json:"raw_claim_per_s"`
	RawPerS          float64 `json:"raw_per_s"` // the mean of the loops before and after the http phase
	RawBeforePerS    float64 `json:"raw_before_per_s"`
	RawAfterPerS     float64 `json:"raw_after_per_s"`
	ClaimsPerS       float64 `json:"claims_per_s"`
	Ratio            float64 `json:"ratio"`
	QueriesPerTask   float64 `json:"queries_per_task"`
	DBMsPerTask      float64 `json:"db_ms_per_task"`
	CPUSelfMsPerTask float64 `json:"cpu_control_plane_and_clients_ms_per_task,omitempty"`
	CPUDBMsPerTask   float64 `json:"cpu_postgres_ms_per_task,omitempty"`
	ChainLength      int     `json:"chain_length"`
	ReadyP50Ms       float64 `json:"ready_to_claim_p50_ms"`
	ReadyP90Ms       float64 `json:"ready_to_claim_p90_ms"`
	ReadyP99Ms       float64 `json:"ready_to_claim_p99_ms"`
	ReadyMaxMs       float64 `json:"ready_to_claim_max_ms"`
	ReadyFromSentP50 float64 `json:"ready_to_claim_from_request_p50_ms"`
	ReadyFromSentP99 float64 `json:"ready_to_claim_from_request_p99_ms"`
	IdleSeconds      float64 `json:"idle_seconds"`
	IdleQueries      int64   `json:"idle_queries"`
	IdlePerWorkerS   float64 `json:"idle_queries_per_worker_s"`
	IdleOtherQueries int64   `json:"idle_other_queries"`
}

func (a *app) benchClaims() *cobra.Command {
	o := benchClaimsOptions{}
	cmd := &cobra.Command{
		Use: "claims [--workers N] [--tasks M]",
		Example: `  whilly bench claims --workers 16 --tasks 4000
  whilly bench claims --json --queries`,
		Short: "HTTP claim+complete throughput against a raw SKIP LOCKED loop, ready→claimed latency, idle cost",
		Long: `Runs a control plane on a loopback port and, against the same database, in one run:

  raw       N connections run the baseline loop on a scratch table: one statement claims
            (UPDATE … WHERE id = (SELECT … FOR UPDATE SKIP LOCKED LIMIT 1)), one completes
            (UPDATE … SET status = 'DONE'); raw_per_s counts tasks claimed and completed.
            It runs before the http phase and again after it, and raw_per_s is the mean
            of the two, so that load coming or going on the machine meanwhile weighs on
            both sides of the ratio. The claim statement alone is measured too, on a
            table of its own.
  http      N workers (control/client, a connection each) claim and complete M zero-work
            tasks of a scratch plan through the API: claims_per_s. Like whilly-worker,
            each COMPLETE asks for the worker's next task (claim_next), so a task costs
            one request once a worker is under way. ratio = claims_per_s / raw_per_s,
            the same unit of work (a task handed out, then finished).
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
left behind does not weigh on this one. The pool has the size 'whilly serve' uses (16)
unless --pool is given; the raw loop shares it. Claims and completions of one plan are
answered in batches (one statement for all the workers waiting), so the http figure grows
with the number of workers while the raw loop's hardly moves: compare runs of one
--workers. On Linux the CPU time per task of this process and of its Postgres backends is
shown for the raw and http phases; --queries breaks the http phase's database time down by
statement, --cpuprofile writes a CPU profile of it (go tool pprof FILE). Other load on the
machine moves every figure: compare figures of one run.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch {
			case o.workers < 1 || o.workers > 256:
				return failf("--workers must be between 1 and 256, got %d", o.workers)
			case o.tasks < 1 || o.tasks > 1_000_000:
				return failf("--tasks must be between 1 and 1000000, got %d", o.tasks)
			case o.chain < 2 || o.chain > 100_000:
				return failf("--chain must be between 2 and 100000, got %d", o.chain)
			case o.idle < 500*time.Millisecond || o.idle > 25*time.Second:
				return failf("--idle must be between 500ms and 25s, got %s", o.idle)
			}
			return a.runBenchClaims(cmd.Context(), o)
		},
	}
	f := cmd.Flags()
	f.IntVar(&o.workers, "workers", 16, "HTTP workers (and raw-loop connections)")
	f.IntVar(&o.tasks, "tasks", 4000, "zero-work tasks for the throughput phases")
	f.IntVar(&o.chain, "chain", 300, "length of the dependency chain of the latency phase")
	f.DurationVar(&o.idle, "idle", 3*time.Second, "how long the idle phase counts queries")
	f.IntVar(&o.pool, "pool", 0, "database connections of the control plane and the raw loop (default: whilly serve's, 16)")
	f.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of the http phase to this file")
	f.BoolVar(&o.queries, "queries", false, "also print the http phase's time in the database per SQL statement")
	f.BoolVar(&o.asJSON, "json", false, "print the result as JSON")
	return cmd
}

func (a *app) progressf(format string, args ...any) {
	_, _ = fmt.Fprintf(a.io.Err, "bench: "+format+"\n", args...)
}

func (a *app) runBenchClaims(ctx context.Context, o benchClaimsOptions) error {
	e, err := a.benchSetup(ctx, o.pool)
	if err != nil {
		return err
	}
	defer e.close(ctx)
	res := ClaimsResult{Workers: o.workers, Tasks: o.tasks, PoolConns: e.pool.Config().MaxConns, ChainLength: o.chain}
	if _, err := e.pool.Exec(ctx, `VACUUM (ANALYZE) tasks`); err != nil {
		return fmt.Errorf("vacuum the tasks table: %w", err)
	}

	a.progressf("raw SKIP LOCKED loops over %d rows with %d connections", o.tasks, o.workers)
	if res.RawClaimPerS, err = e.rawLoop(ctx, "claim", o.workers, o.tasks, false); err != nil {
		return err
	}
	if res.RawBeforePerS, err = e.rawLoop(ctx, "claim_complete", o.workers, o.tasks, true); err != nil {
		return err
	}

	workers, err := e.registerWorkers(ctx, o.workers, nil)
	if err != nil {
		return err
	}
	a.progressf("http: %d workers claim and complete %d tasks", o.workers, o.tasks)
	if err := e.httpPhase(ctx, o, workers, &res); err != nil {
		return err
	}
	// The baseline is run again after the http phase, and their mean taken: load that
	// comes or goes on the machine meanwhile then weighs on both sides of the ratio.
	a.progressf("raw claim+complete loop again, after the http phase")
	if res.RawAfterPerS, err = e.rawLoop(ctx, "claim_complete_after", o.workers, o.tasks, true); err != nil {
		return err
	}
	res.RawPerS = (res.RawBeforePerS + res.RawAfterPerS) / 2
	a.progressf("latency: a chain of %d tasks", o.chain)
	if err := e.latencyPhase(ctx, o, workers, &res); err != nil {
		return err
	}
	a.progressf("idle: %d workers long-poll for %s", o.workers, o.idle)
	if err := e.idlePhase(ctx, o, workers, &res); err != nil {
		return err
	}
	if res.RawPerS > 0 {
		res.Ratio = res.ClaimsPerS / res.RawPerS
	}
	last := fmt.Sprintf("claims_per_s=%.0f raw_per_s=%.0f ratio=%.2f ready_to_claim_p50_ms=%.2f p99_ms=%.2f idle_queries_per_worker_s=%.2f",
		res.ClaimsPerS, res.RawPerS, res.Ratio, res.ReadyP50Ms, res.ReadyP99Ms, res.IdlePerWorkerS)
	if o.asJSON {
		return a.writeJSON(res)
	}
	tw := newTable(a.io.Out)
	tw.row("PHASE", "TASKS", "RESULT", "DETAIL")
	tw.row("raw claim", fmt.Sprint(o.tasks), fmt.Sprintf("%.0f/s", res.RawClaimPerS), "one UPDATE … (SELECT … FOR UPDATE SKIP LOCKED LIMIT 1) per task")
	tw.row("raw claim+complete", fmt.Sprint(o.tasks), fmt.Sprintf("%.0f/s", res.RawPerS),
		fmt.Sprintf("the claim statement, then one UPDATE … SET status = 'DONE'; %.0f/s before the http phase, %.0f/s after", res.RawBeforePerS, res.RawAfterPerS))
	tw.row("http claim+complete", fmt.Sprint(o.tasks), fmt.Sprintf("%.0f/s", res.ClaimsPerS),
		fmt.Sprintf("ratio %.2f; %.1f queries and %.2f ms in the database per task", res.Ratio, res.QueriesPerTask, res.DBMsPerTask))
	tw.row("ready→claimed", fmt.Sprint(o.chain), fmt.Sprintf("p50 %.2f ms", res.ReadyP50Ms),
		fmt.Sprintf("p90 %.2f ms, p99 %.2f ms, max %.2f ms; from the COMPLETE request: p50 %.2f ms, p99 %.2f ms",
			res.ReadyP90Ms, res.ReadyP99Ms, res.ReadyMaxMs, res.ReadyFromSentP50, res.ReadyFromSentP99))
	tw.row("idle long-poll", "-", fmt.Sprintf("%d queries", res.IdleQueries),
		fmt.Sprintf("%d workers waiting %.1f s; meanwhile River and the LISTEN connection ran %d queries (not the workers')",
			o.workers, res.IdleSeconds, res.IdleOtherQueries))
	if err := tw.flush(); err != nil {
		return err
	}
	if len(e.rawCPU) > 0 {
		a.printf("raw loop CPU per task: %s\n", strings.Join(e.rawCPU, "; "))
	}
	if res.CPUSelfMsPerTask+res.CPUDBMsPerTask > 0 {
		a.printf("http phase CPU per task: %.2f ms in this process (control plane and its HTTP clients), %.2f ms in Postgres; %.2f cores busy at %.0f tasks/s\n",
			res.CPUSelfMsPerTask, res.CPUDBMsPerTask, (res.CPUSelfMsPerTask+res.CPUDBMsPerTask)*res.ClaimsPerS/1000, res.ClaimsPerS)
	}
	if o.queries {
		e.printStatements(o.tasks)
	}
	a.printf("%d workers, pool of %d connections\n", o.workers, res.PoolConns)
	a.printf("%s\n", last)
	return nil
}

// printStatements prints the http phase's queries by total time, per task.
func (e *benchEnv) printStatements(tasks int) {
	e.tracer.mu.Lock()
	defer e.tracer.mu.Unlock()
	type row struct {
		sql string
		st  statementStats
	}
	var rows []row
	for k, v := range e.tracer.statements {
		rows = append(rows, row{k, *v})
	}
	slices.SortFunc(rows, func(x, y row) int { return int(y.st.total - x.st.total) })
	tw := newTable(e.a.io.Out)
	tw.row("STATEMENT (http phase)", "PER TASK", "MS PER TASK", "MEAN MS")
	for _, r := range rows {
		tw.row(r.sql, fmt.Sprintf("%.2f", float64(r.st.n)/float64(tasks)), fmt.Sprintf("%.3f", ms(r.st.total)/float64(tasks)),
			fmt.Sprintf("%.3f", ms(r.st.total)/float64(r.st.n)))
	}
	_ = tw.flush() // a broken stdout shows in the lines that follow
}

// rawLoop runs the baseline on a scratch table of n rows: workers connections claim
// with one statement (and complete with one more when complete is set) until none is
// left. It returns tasks per second.
func (e *benchEnv) rawLoop(ctx context.Context, kind string, workers, n int, complete bool) (float64, error) {
	table := "whilly_bench_raw_" + kind + "_" + strings.ReplaceAll(e.suffix, "-", "_")
	e.tables = append(e.tables, table)
	t := pgx.Identifier{table}.Sanitize()
	_, err := e.pool.Exec(ctx, `CREATE TABLE `+t+` (
		id bigint PRIMARY KEY, status text NOT NULL DEFAULT 'PENDING', claimed_by text, attempts integer NOT NULL DEFAULT 0,
		lease_id uuid, lease_expires_at timestamptz, updated_at timestamptz NOT NULL DEFAULT now())`)
	if err != nil {
		return 0, fmt.Errorf("create scratch table: %w", err)
	}
	if _, err := e.pool.Exec(ctx, `CREATE INDEX ON `+t+` (id) WHERE status = 'PENDING'`); err != nil {
		return 0, fmt.Errorf("index scratch table: %w", err)
	}
	if _, err := e.pool.Exec(ctx, `INSERT INTO `+t+` (id) SELECT generate_series(1, $1::bigint)`, n); err != nil {
		return 0, fmt.Errorf("fill scratch table: %w", err)
	}
	if _, err := e.pool.Exec(ctx, `ANALYZE `+t); err != nil {
		return 0, fmt.Errorf("analyze scratch table: %w", err)
	}
	claimSQL := `UPDATE ` + t + ` SET status = 'CLAIMED', claimed_by = $1, attempts = attempts + 1,
		lease_id = gen_random_uuid(), lease_expires_at = now() + interval '60 seconds', updated_at = now()
		WHERE id = (SELECT id FROM ` + t + ` WHERE status = 'PENDING' ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED)
		RETURNING id`
	completeSQL := `UPDATE ` + t + ` SET status = 'DONE', lease_id = NULL, lease_expires_at = NULL, updated_at = now()
		WHERE id = $1 AND claimed_by = $2`
	var (
		wg    sync.WaitGroup
		done  atomic.Int64
		errMu sync.Mutex
		first error
	)
	cpu := e.startCPU(ctx)
	begin := time.Now()
	for i := range workers {
		wid := fmt.Sprintf("raw-%d", i+1)
		wg.Go(func() {
			for {
				var id int64
				err := e.pool.QueryRow(ctx, claimSQL, wid).Scan(&id)
				if errors.Is(err, pgx.ErrNoRows) {
					return
				}
				if err == nil && complete {
					_, err = e.pool.Exec(ctx, completeSQL, id, wid)
				}
				if err != nil {
					errMu.Lock()
					first = cmp(first, fmt.Errorf("raw loop: %w", err))
					errMu.Unlock()
					return
				}
				done.Add(1)
			}
		})
	}
	wg.Wait()
	took := time.Since(begin)
	if first != nil {
		return 0, first
	}
	if int(done.Load()) != n {
		return 0, fmt.Errorf("raw loop handled %d rows of %d", done.Load(), n)
	}
	if self, pg, ok := cpu.stop(); ok {
		e.rawCPU = append(e.rawCPU, fmt.Sprintf("%s: %.2f ms in this process, %.2f ms in Postgres", kind, ms(self)/float64(n), ms(pg)/float64(n)))
	}
	return float64(n) / took.Seconds(), nil
}

// cmp keeps the first error.
func cmp(first, err error) error {
	if first != nil {
		return first
	}
	return err
}

// httpPhase drains a scratch plan of independent tasks through the API.
func (e *benchEnv) httpPhase(ctx context.Context, o benchClaimsOptions, workers []benchWorker, res *ClaimsResult) error {
	id, err := e.scratchPlan(ctx, "claims")
	if err != nil {
		return err
	}
	if err := e.addTasks(ctx, id, benchTasks(o.tasks, false, nil)); err != nil {
		return err
	}
	if o.cpuProfile != "" {
		f, err := os.Create(o.cpuProfile)
		if err != nil {
			return failf("--cpuprofile: %v", err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			_ = f.Close()
			return failf("--cpuprofile: %v", err)
		}
		defer func() {
			pprof.StopCPUProfile()
			if err := f.Close(); err != nil {
				e.a.log.WarnContext(ctx, "bench: write the CPU profile", "error", err)
			}
		}()
	}
	e.tracer.byStatement.Store(o.queries)
	defer e.tracer.byStatement.Store(false)
	q0, n0 := e.tracer.httpQueries.Load(), e.tracer.httpNanos.Load()
	cpu := e.startCPU(ctx)
	var (
		wg     sync.WaitGroup
		done   atomic.Int64
		lastMu sync.Mutex
		last   time.Time
		errMu  sync.Mutex
		first  error
	)
	begin := time.Now()
	for _, w := range workers {
		wg.Go(func() {
			var c *client.Claim // the next task, when the last COMPLETE brought one
			for {
				var err error
				if c == nil {
					c, err = w.api.Claim(ctx, client.ClaimRequest{PlanID: id, WaitSeconds: 5})
					if err == nil && c == nil {
						return
					}
				}
				if err == nil {
					var done client.CompleteResponse
					done, err = w.api.Complete(ctx, id, c.Task.ID, client.CompleteRequest{LeaseID: c.Lease.ID, ClaimNext: &client.NextClaim{PlanID: id}})
					c = done.Next
				}
				if err != nil {
					errMu.Lock()
					first = cmp(first, err)
					errMu.Unlock()
					return
				}
				now := time.Now()
				done.Add(1)
				lastMu.Lock()
				if now.After(last) {
					last = now
				}
				lastMu.Unlock()
			}
		})
	}
	wg.Wait()
	if first != nil {
		return fmt.Errorf("http phase: %w", first)
	}
	if int(done.Load()) != o.tasks {
		return fmt.Errorf("http phase: %d tasks completed of %d", done.Load(), o.tasks)
	}
	if self, pg, ok := cpu.stop(); ok {
		res.CPUSelfMsPerTask, res.CPUDBMsPerTask = ms(self)/float64(o.tasks), ms(pg)/float64(o.tasks)
	}
	res.ClaimsPerS = float64(o.tasks) / last.Sub(begin).Seconds()
	res.QueriesPerTask = float64(e.tracer.httpQueries.Load()-q0) / float64(o.tasks)
	res.DBMsPerTask = ms(time.Duration(e.tracer.httpNanos.Load()-n0)) / float64(o.tasks)
	return nil
}

// latencyPhase measures ready→claimed over a dependency chain while every worker waits
// in long-poll for the next link.
func (e *benchEnv) latencyPhase(ctx context.Context, o benchClaimsOptions, workers []benchWorker, res *ClaimsResult) error {
	id, err := e.scratchPlan(ctx, "chain")
	if err != nil {
		return err
	}
	type stamps struct{ claimed, sent, acked time.Time }
	var (
		mu    sync.Mutex
		at    = map[string]*stamps{}
		wg    sync.WaitGroup
		errMu sync.Mutex
		first error
	)
	get := func(task string) *stamps {
		mu.Lock()
		defer mu.Unlock()
		s := at[task]
		if s == nil {
			s = &stamps{}
			at[task] = s
		}
		return s
	}
	var sent atomic.Int64
	traced := httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{WroteRequest: func(httptrace.WroteRequestInfo) { sent.Add(1) }})
	for _, w := range workers {
		wg.Go(func() {
			for {
				c, err := w.api.Claim(traced, client.ClaimRequest{PlanID: id, WaitSeconds: 30})
				if err == nil && c == nil {
					return
				}
				if err != nil {
					errMu.Lock()
					first = cmp(first, err)
					errMu.Unlock()
					return
				}
				s := get(c.Task.ID)
				s.claimed = time.Now()
				s.sent = time.Now()
				_, err = w.api.Complete(ctx, id, c.Task.ID, client.CompleteRequest{LeaseID: c.Lease.ID})
				s.acked = time.Now()
				if err != nil {
					errMu.Lock()
					first = cmp(first, err)
					errMu.Unlock()
					return
				}
			}
		})
	}
	// Every worker is waiting for the chain's first link before it is imported.
	if err := e.waitWaiting(ctx, &sent, len(workers)); err != nil {
		return err
	}
	ts := benchTasks(o.chain, true, nil)
	if err := e.addTasks(ctx, id, ts); err != nil {
		return err
	}
	imported := time.Now()
	wg.Wait()
	if first != nil {
		return fmt.Errorf("latency phase: %w", first)
	}
	var fromAck, fromSent []time.Duration
	for i, t := range ts {
		s := at[t.ID]
		if s == nil {
			return fmt.Errorf("latency phase: task %s was never claimed", t.ID)
		}
		if i == 0 {
			fromAck = append(fromAck, s.claimed.Sub(imported))
			fromSent = append(fromSent, s.claimed.Sub(imported))
			continue
		}
		prev := at[ts[i-1].ID]
		fromAck = append(fromAck, s.claimed.Sub(prev.acked))
		fromSent = append(fromSent, s.claimed.Sub(prev.sent))
	}
	slices.Sort(fromAck)
	slices.Sort(fromSent)
	res.ReadyP50Ms, res.ReadyP90Ms = ms(percentile(fromAck, 0.5)), ms(percentile(fromAck, 0.9))
	res.ReadyP99Ms, res.ReadyMaxMs = ms(percentile(fromAck, 0.99)), ms(fromAck[len(fromAck)-1])
	res.ReadyFromSentP50, res.ReadyFromSentP99 = ms(percentile(fromSent, 0.5)), ms(percentile(fromSent, 0.99))
	return nil
}

// idlePhase counts the API's queries while every worker long-polls a plan that has
// nothing it may claim.
func (e *benchEnv) idlePhase(ctx context.Context, o benchClaimsOptions, workers []benchWorker, res *ClaimsResult) error {
	id, err := e.scratchPlan(ctx, "idle")
	if err != nil {
		return err
	}
	// One task no bench worker may take keeps the plan ACTIVE, so claims wait.
	if err := e.addTasks(ctx, id, benchTasks(1, false, []string{"whilly-bench-nobody"})); err != nil {
		return err
	}
	pollCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		stop()
		wg.Wait()
	}()
	var sent atomic.Int64
	traced := httptrace.WithClientTrace(pollCtx, &httptrace.ClientTrace{WroteRequest: func(httptrace.WroteRequestInfo) { sent.Add(1) }})
	for _, w := range workers {
		wg.Go(func() {
			for pollCtx.Err() == nil {
				if _, err := w.api.Claim(traced, client.ClaimRequest{PlanID: id, WaitSeconds: 30}); err != nil && pollCtx.Err() == nil {
					e.a.log.WarnContext(ctx, "bench: idle claim", "error", err)
					return
				}
			}
		})
	}
	if err := e.waitWaiting(ctx, &sent, len(workers)); err != nil {
		return err
	}
	q0, other0 := e.tracer.httpQueries.Load(), e.tracer.otherQ.Load()
	begin := time.Now()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(o.idle):
	}
	res.IdleQueries = e.tracer.httpQueries.Load() - q0
	res.IdleOtherQueries = e.tracer.otherQ.Load() - other0
	res.IdleSeconds = time.Since(begin).Seconds()
	res.IdlePerWorkerS = float64(res.IdleQueries) / float64(o.workers) / res.IdleSeconds
	return nil
}

// ---- whilly bench e2e ----

type benchE2EOptions struct {
	workers, tasks, pool int
	workerBin            string
	simDelay             time.Duration
	asJSON               bool
	sandbox              bool     // compare a command agent unboxed and in the sandbox
	agentEnv             []string // the workers' agent settings; empty: the sim agent
}

// E2EResult is what `whilly bench e2e` measured.
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
}

func (a *app) benchE2E() *cobra.Command {
	o := benchE2EOptions{}
	cmd := &cobra.Command{
		Use:   "e2e [--workers 8] [--tasks M]",
		Short: "Real whilly-worker processes with the sim agent drain a scratch plan",
		Long: `Runs a control plane on a loopback port and N whilly-worker processes (the binary next to
this one, or --worker-bin) with the sim agent at --sim-delay (default 0: the agent returns
at once), which claim, start and complete M tasks of a scratch plan through the API.

The workers first wait in long-poll on the empty plan; then the M tasks are imported.
tasks_per_s is M over the span from the first CLAIM to the last COMPLETE (the events'
database timestamps, so worker start-up does not count). A task's overhead is the time from
its CLAIM to its COMPLETE minus the agent's own run time (the sim delay): the claim's
answer, START, the prompt and the report.

With --sandbox a tiny command agent (a shell script) drains the plan twice in the same
run, first with WHILLY_SANDBOX=none, then in the sandbox (bubblewrap, its init and the
egress proxy), and the difference of the per-task overheads is what the sandbox adds to
an attempt (target: at most 150 ms).`,
		Example: `  whilly bench e2e --workers 2 --sandbox`,
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch {
			case o.workers < 1 || o.workers > 256:
				return failf("--workers must be between 1 and 256, got %d", o.workers)
			case o.tasks < 1 || o.tasks > 1_000_000:
				return failf("--tasks must be between 1 and 1000000, got %d", o.tasks)
			case o.simDelay < 0:
				return failf("--sim-delay must not be negative")
			}
			if o.sandbox && !cmd.Flags().Changed("tasks") {
				o.tasks = 200
			}
			if o.workerBin == "" {
				exe, err := os.Executable()
				if err != nil {
					return envf("find whilly-worker: %v; pass --worker-bin", err)
				}
				o.workerBin = filepath.Join(filepath.Dir(exe), "whilly-worker")
			}
			if _, err := exec.LookPath(o.workerBin); err != nil {
				return envf("no whilly-worker at %s (build it with 'make build', or pass --worker-bin PATH)", o.workerBin)
			}
			return a.runBenchE2E(cmd.Context(), o)
		},
	}
	f := cmd.Flags()
	f.IntVar(&o.workers, "workers", 8, "whilly-worker processes")
	f.IntVar(&o.tasks, "tasks", 4000, "tasks of the scratch plan")
	f.StringVar(&o.workerBin, "worker-bin", "", "the whilly-worker binary (default: next to this one)")
	f.DurationVar(&o.simDelay, "sim-delay", 0, "how long each sim agent run takes")
	f.IntVar(&o.pool, "pool", 0, "database connections of the control plane (default: pgx's)")
	f.BoolVar(&o.asJSON, "json", false, "print the result as JSON")
	f.BoolVar(&o.sandbox, "sandbox", false, "measure the sandbox: a command agent drains the plan unboxed, then in the sandbox (default --tasks 200)")
	return cmd
}

// SandboxResult is what `whilly bench e2e --sandbox` measured: the same bench with a
// command agent run unboxed and in the sandbox, and what the box adds to an attempt.
type SandboxResult struct {
	Unboxed     E2EResult `json:"unboxed"`
	Boxed       E2EResult `json:"boxed"`
	AddedP50Ms  float64   `json:"sandbox_added_p50_ms"`
	AddedP99Ms  float64   `json:"sandbox_added_p99_ms"`
	TargetP50Ms float64   `json:"target_ms"`
}

// runBenchSandbox runs the e2e bench twice in one run, with the same tiny command agent:
// WHILLY_SANDBOX=none, then bwrap. The difference of the per-task overheads is what the
// box adds to an attempt's start (and end): bubblewrap, the box's init, the proxy.
func (a *app) runBenchSandbox(ctx context.Context, o benchE2EOptions) error {
	if err := sandbox.Check(ctx); err != nil {
		return envf("%w", err)
	}
	dir, err := os.MkdirTemp("", "whilly-bench-agent-")
	if err != nil {
		return fmt.Errorf("make the bench agent's directory: %w", err)
	}
	defer func() { _ = os.RemoveAll(dir) }()
	script := filepath.Join(dir, "agent.sh")
	body := "#!/bin/sh\ncat >/dev/null\necho '{\"result\": \"" + agent.CompletionMarker + "\", \"total_cost_usd\": 0}'\n"
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		return fmt.Errorf("write the bench agent: %w", err)
	}
	var res SandboxResult
	for _, mode := range []string{sandbox.ModeNone, sandbox.ModeBwrap} {
		o.agentEnv = []string{"WHILLY_AGENT=command", "WHILLY_AGENT_CMD=" + script, "WHILLY_SANDBOX=" + mode}
		a.progressf("WHILLY_SANDBOX=%s", mode)
		r, err := a.measureE2E(ctx, o)
		if err != nil {
			return err
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
	if o.asJSON {
		return a.writeJSON(res)
	}
	tw := newTable(a.io.Out)
	tw.row("SANDBOX", "WORKERS", "TASKS", "TASKS/S", "OVERHEAD P50", "P99", "MAX")
	for _, r := range []struct {
		mode string
		e    E2EResult
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

func (a *app) runBenchE2E(ctx context.Context, o benchE2EOptions) error {
	if o.sandbox {
		return a.runBenchSandbox(ctx, o)
	}
	res, err := a.measureE2E(ctx, o)
	if err != nil {
		return err
	}
	last := fmt.Sprintf("tasks_per_s=%.0f workers=%d p99_task_overhead_ms=%.2f", res.TasksPerS, res.Workers, res.OverheadP99Ms)
	if o.asJSON {
		return a.writeJSON(res)
	}
	tw := newTable(a.io.Out)
	tw.row("WORKERS", "TASKS", "SIM DELAY", "SECONDS", "TASKS/S", "FIRST CLAIM", "OVERHEAD P50", "P99", "MAX", "QUERIES/TASK")
	tw.row(fmt.Sprint(o.workers), fmt.Sprint(o.tasks), o.simDelay.String(), fmt.Sprintf("%.2f", res.Seconds),
		fmt.Sprintf("%.0f", res.TasksPerS), fmt.Sprintf("%.1f ms", res.FirstClaimMs), fmt.Sprintf("%.2f ms", res.OverheadP50Ms),
		fmt.Sprintf("%.2f ms", res.OverheadP99Ms), fmt.Sprintf("%.2f ms", res.OverheadMaxMs), fmt.Sprintf("%.1f", res.QueriesPerTask))
	if err := tw.flush(); err != nil {
		return err
	}
	a.printf("tasks per worker: %v\n", res.PerWorker)
	if res.CPUControlMs+res.CPUDBMs > 0 {
		a.printf("CPU per task: control plane %.2f ms, Postgres %.2f ms, workers %.2f ms; %.2f cores busy at %.0f tasks/s\n",
			res.CPUControlMs, res.CPUDBMs, res.CPUWorkersMs, (res.CPUControlMs+res.CPUDBMs+res.CPUWorkersMs)*res.TasksPerS/1000, res.TasksPerS)
	}
	a.printf("%s\n", last)
	return nil
}

// measureE2E runs one e2e bench: o.workers whilly-worker processes with o.agentEnv's
// agent (the sim agent when it is empty) drain o.tasks tasks of a scratch plan.
func (a *app) measureE2E(ctx context.Context, o benchE2EOptions) (E2EResult, error) {
	e, err := a.benchSetup(ctx, o.pool)
	if err != nil {
		return E2EResult{}, err
	}
	defer e.close(ctx)
	id, err := e.scratchPlan(ctx, "e2e")
	if err != nil {
		return E2EResult{}, err
	}
	workers, err := e.registerWorkers(ctx, o.workers, nil)
	if err != nil {
		return E2EResult{}, err
	}
	a.progressf("starting %d whilly-worker processes (%s)", o.workers, o.workerBin)
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	type proc struct {
		cmd      *exec.Cmd
		out, err bytes.Buffer
		done     chan struct{} // closed when it exited, with exit set
		exit     error
	}
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
		p.cmd = exec.CommandContext(runCtx, o.workerBin, "--plan", id, "--drain")
		p.cmd.Env = workerEnv(append([]string{"WHILLY_AGENT=sim", "WHILLY_CONTROL_URL=" + e.base, "WHILLY_WORKER_TOKEN=" + w.token,
			"WHILLY_WORKER_ID=" + w.id, "WHILLY_SIM_DELAY=" + o.simDelay.String()}, o.agentEnv...)...)
		p.cmd.Stdout, p.cmd.Stderr = &p.out, &p.err
		p.cmd.WaitDelay = 5 * time.Second
		if err := p.cmd.Start(); err != nil {
			return E2EResult{}, envf("start %s: %v", o.workerBin, err)
		}
		go func() {
			p.exit = p.cmd.Wait()
			close(p.done)
		}()
		procs[i] = p
	}
	// Each worker's first claim opens a connection and waits on the empty plan.
	deadline := time.Now().Add(30 * time.Second)
	for e.ln.accepted.Load() < int64(o.workers) {
		if p := exited(); p != nil {
			return E2EResult{}, failf("a whilly-worker exited before any work (%v): %s", p.exit, strings.TrimSpace(p.err.String()))
		}
		if time.Now().After(deadline) {
			return E2EResult{}, envf("only %d of %d workers reached the control plane in 30 s", e.ln.accepted.Load(), o.workers)
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
	q0 := e.tracer.httpQueries.Load()
	cpu := e.startCPU(ctx)
	a.progressf("importing %d tasks", o.tasks)
	if err := e.addTasks(ctx, id, benchTasks(o.tasks, false, nil)); err != nil {
		return E2EResult{}, err
	}
	limit := time.Duration(max(120, o.tasks/20)) * time.Second
	timeout := time.After(limit)
	res := E2EResult{Workers: o.workers, Tasks: o.tasks, SimDelayMs: ms(o.simDelay)}
	for i, p := range procs {
		select {
		case <-p.done:
			if p.exit != nil {
				return E2EResult{}, failf("worker %d: %v\n%s", i+1, p.exit, strings.TrimSpace(p.err.String()))
			}
		case <-timeout:
			return E2EResult{}, failf("the workers did not drain the plan within %s", limit)
		case <-ctx.Done():
			return E2EResult{}, ctx.Err()
		}
		var n int
		if _, err := fmt.Sscanf(p.out.String(), "tasks_done=%d", &n); err == nil {
			res.PerWorker = append(res.PerWorker, n)
		}
	}
	res.QueriesPerTask = float64(e.tracer.httpQueries.Load()-q0) / float64(o.tasks)
	if self, pg, ok := cpu.stop(); ok {
		var workersCPU time.Duration
		for _, p := range procs {
			workersCPU += p.cmd.ProcessState.UserTime() + p.cmd.ProcessState.SystemTime()
		}
		n := float64(o.tasks)
		res.CPUControlMs, res.CPUDBMs, res.CPUWorkersMs = ms(self)/n, ms(pg)/n, ms(workersCPU)/n
	}
	if err := e.e2eTimings(ctx, id, o, &res); err != nil {
		return E2EResult{}, err
	}
	return res, nil
}

// e2eTimings reads the throughput and the per-task overhead from the plan's events.
func (e *benchEnv) e2eTimings(ctx context.Context, planID string, o benchE2EOptions, res *E2EResult) error {
	rows, err := e.pool.Query(ctx, `
		SELECT c.task_id, c.created_at, d.created_at, t.created_at
		FROM events c
		JOIN events d ON d.plan_id = c.plan_id AND d.task_id = c.task_id AND d.type = 'COMPLETE'
		JOIN events t ON t.plan_id = c.plan_id AND t.task_id = c.task_id AND t.type = 'task.created'
		WHERE c.plan_id = $1 AND c.type = 'CLAIM'`, planID)
	if err != nil {
		return fmt.Errorf("read the plan's events: %w", err)
	}
	type span struct{ claimed, completed, created time.Time }
	spans, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (span, error) {
		var s span
		var task string
		err := r.Scan(&task, &s.claimed, &s.completed, &s.created)
		return s, err
	})
	if err != nil {
		return fmt.Errorf("read the plan's events: %w", err)
	}
	if len(spans) != o.tasks {
		return failf("%d tasks were claimed and completed once, of %d: a task ran twice or never", len(spans), o.tasks)
	}
	first, last, created := spans[0].claimed, spans[0].completed, spans[0].created
	over := make([]time.Duration, 0, len(spans))
	for _, s := range spans {
		if s.claimed.Before(first) {
			first = s.claimed
		}
		if s.completed.After(last) {
			last = s.completed
		}
		over = append(over, max(s.completed.Sub(s.claimed)-o.simDelay, 0))
	}
	slices.Sort(over)
	res.Seconds = last.Sub(first).Seconds()
	if res.Seconds > 0 {
		res.TasksPerS = float64(o.tasks) / res.Seconds
	}
	res.FirstClaimMs = ms(first.Sub(created))
	res.OverheadP50Ms, res.OverheadP99Ms = ms(percentile(over, 0.5)), ms(percentile(over, 0.99))
	res.OverheadMaxMs = ms(over[len(over)-1])
	return nil
}
