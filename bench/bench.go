// Package bench runs whilly's benchmarks against a real database and a real control plane
// on a loopback port, and returns what it measured as result structs; the CLI
// (`whilly bench …`) parses flags and renders. It owns the scratch plans, workers and
// tables a benchmark makes and removes them afterwards.
//
// It builds no control plane itself: Setup.Serve does (the composition root's), so a
// benchmark measures exactly what `whilly serve` runs. It must not import cli.
package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/whilly-go/whilly/control/client"
	"github.com/whilly-go/whilly/fakegithub"
	"github.com/whilly-go/whilly/migrations"
	"github.com/whilly-go/whilly/plan"
	"github.com/whilly-go/whilly/queue"
)

// Server is a running control plane: Shutdown stops it in order.
type Server interface {
	Shutdown(ctx context.Context) error
}

// Setup is what every benchmark needs from the composition root.
type Setup struct {
	// Pool is the database's pool configuration; its tracer is replaced by the bench's.
	Pool *pgxpool.Config
	// PoolSize, when above 0, overrides Pool.MaxConns.
	PoolSize int
	// Connect opens the pool and checks that the database answers.
	Connect func(ctx context.Context, cfg *pgxpool.Config) (*pgxpool.Pool, error)
	Queue   queue.Config
	Log     *slog.Logger
	// Progress receives one line per phase ("bench: …"); nil discards them.
	Progress io.Writer
	// Serve starts a control plane configured as o says on ln over the store, and
	// returns at once.
	Serve func(ctx context.Context, st *queue.Store, ln net.Listener, o ServeOptions) (Server, error)
}

// ServeOptions is the configuration of the control plane under measurement beyond the
// environment's: the extensions `whilly serve` installs hooks for.
type ServeOptions struct {
	// GitHub, when set, is the GitHub App the control plane runs with (the bench's fake
	// GitHub): webhook, mirror, reconciler and their PlanChanged hook.
	GitHub *GitHubApp
	// TRIZ turns the failure analyzer on (its TaskFailed hook), with the sim agent.
	TRIZ bool
}

// GitHubApp is what the control plane needs to run a GitHub App against an API.
type GitHubApp struct {
	APIURL        string
	AppID         int64
	PrivateKeyPEM string
	WebhookSecret string
}

// The fake GitHub's one installation and repository, which the scratch plans' issues
// belong to.
const (
	benchInstallation = 77
	benchRepo         = "whilly-bench/scratch"
)

// tracer counts the queries of a pool. Queries made while serving an HTTP request
// (their context carries http.ServerContextKey) are the API's; everything else is River,
// the LISTEN connection or the benchmark itself.
type tracer struct {
	httpQueries atomic.Int64
	httpNanos   atomic.Int64 // time spent in the API's queries, start to end
	otherQ      atomic.Int64
	lastHTTP    atomic.Int64 // unix nanoseconds of the end of the latest API query

	// With byStatement on, the API's queries are summed per statement (--queries).
	byStatement atomic.Bool
	mu          sync.Mutex
	statements  map[string]*Statement
}

// Statement is the API's time in the database for one SQL statement.
type Statement struct {
	SQL   string        `json:"sql"`
	N     int           `json:"n"`
	Total time.Duration `json:"total_ns"`
}

type traceStart struct {
	at  time.Time
	sql string
}

func (t *tracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	if ctx.Value(http.ServerContextKey) == nil {
		t.otherQ.Add(1)
		return ctx
	}
	t.httpQueries.Add(1)
	return context.WithValue(ctx, traceStart{}, traceStart{at: time.Now(), sql: data.SQL})
}

func (t *tracer) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryEndData) {
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
		t.statements = map[string]*Statement{}
	}
	st := t.statements[key]
	if st == nil {
		st = &Statement{SQL: key}
		t.statements[key] = st
	}
	st.N++
	st.Total += d
}

// TraceBatchStart, TraceBatchQuery and TraceBatchEnd count pipelined statements too: a
// batch is timed as a whole, under "batch of N", its statements only counted.
func (t *tracer) TraceBatchStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceBatchStartData) context.Context {
	if ctx.Value(http.ServerContextKey) == nil {
		return ctx
	}
	n := 0
	if data.Batch != nil {
		n = data.Batch.Len()
	}
	return context.WithValue(ctx, traceStart{}, traceStart{at: time.Now(), sql: fmt.Sprintf("batch of %d statements", n)})
}

func (t *tracer) TraceBatchQuery(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchQueryData) {
	if ctx.Value(http.ServerContextKey) != nil {
		t.httpQueries.Add(1)
	}
}

func (t *tracer) TraceBatchEnd(ctx context.Context, conn *pgx.Conn, _ pgx.TraceBatchEndData) {
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

// env is a control plane on loopback over a traced pool, and what must be removed
// when the benchmark ends.
type env struct {
	s      Setup
	log    *slog.Logger
	pool   *pgxpool.Pool
	store  *queue.Store
	tracer *tracer
	ln     *countingListener
	cp     Server
	base   string
	suffix string // makes scratch names unique
	// github is the fake GitHub of the serve configuration; nil without hooks. The
	// scratch plans are then taken in from its issues, so the mirror has work.
	github   *fakegithub.GitHub
	secret   []byte       // the App's webhook secret, with github
	problems atomic.Int64 // what the fake would fail a test on (an unknown route …)
	issues   int
	plans    []string
	workers  []string
	tables   []string
}

// progressf writes one progress line.
func (s Setup) progressf(format string, args ...any) {
	if s.Progress != nil {
		_, _ = fmt.Fprintf(s.Progress, "bench: "+format+"\n", args...)
	}
}

// connect connects and brings the schema up to date; open then starts the control plane.
func connect(ctx context.Context, s Setup) (*env, error) {
	cfg := s.Pool.Copy()
	tr := &tracer{}
	cfg.ConnConfig.Tracer = tr
	if s.PoolSize > 0 {
		cfg.MaxConns = int32(min(s.PoolSize, 1000))
	}
	pool, err := s.Connect(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if _, err := migrations.Up(ctx, pool); err != nil {
		pool.Close()
		return nil, fmt.Errorf("migrate the database: %w", err)
	}
	log := s.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	var b [4]byte
	_, _ = rand.Read(b[:]) // crypto/rand never fails on supported platforms
	qcfg := s.Queue
	qcfg.JobQueuePrefix = jobQueuePrefix + hex.EncodeToString(b[:]) + "_"
	return &env{s: s, log: log, pool: pool, store: queue.NewStore(pool, log, qcfg), tracer: tr,
		suffix: fmt.Sprintf("%s-%s", time.Now().UTC().Format("20060102t150405"), hex.EncodeToString(b[:]))}, nil
}

// open is connect, then a control plane in this process on a loopback port: with
// hooks, the serve configuration (the GitHub App against a fake GitHub in this
// process, and TRIZ), else the bare one.
func open(ctx context.Context, s Setup, hooks bool) (*env, error) {
	e, err := connect(ctx, s)
	if err != nil {
		return nil, err
	}
	var lc net.ListenConfig
	raw, err := lc.Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		e.close(ctx)
		return nil, fmt.Errorf("listen on a loopback port: %w", err)
	}
	e.ln = &countingListener{Listener: raw}
	var so ServeOptions
	if hooks {
		if so, err = e.startGitHub(ctx); err != nil {
			_ = raw.Close()
			e.close(ctx)
			return nil, err
		}
	}
	if e.cp, err = s.Serve(ctx, e.store, e.ln, so); err != nil {
		e.close(ctx)
		return nil, err
	}
	e.base = "http://" + raw.Addr().String()
	return e, nil
}

// close stops the control plane and removes the scratch plans, workers and tables.
func (e *env) close(ctx context.Context) {
	// Revoking 10,000 scratch workers takes a while on a busy machine.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second+time.Duration(len(e.workers))*20*time.Millisecond)
	defer cancel()
	if e.cp != nil {
		if err := e.cp.Shutdown(ctx); err != nil {
			e.log.WarnContext(ctx, "bench: control plane shutdown", "error", err)
		}
	}
	e.revokeWorkers(ctx)
	e.deleteJobs(ctx)
	for _, id := range e.plans {
		if _, err := e.store.ResetPlan(ctx, id, queue.ResetOptions{Hard: true}); err != nil && !errors.Is(err, queue.ErrNotFound) {
			e.log.WarnContext(ctx, "bench: delete scratch plan", "plan_id", id, "error", err)
		}
	}
	for _, t := range e.tables {
		if _, err := e.pool.Exec(ctx, "DROP TABLE IF EXISTS "+pgx.Identifier{t}.Sanitize()); err != nil {
			e.log.WarnContext(ctx, "bench: drop scratch table", "table", t, "error", err)
		}
	}
	e.closeGitHub()
	e.pool.Close()
}

// jobQueuePrefix begins the names of the River queues of a benchmark's control plane
// (queue.Config.JobQueuePrefix), one set per run: no other control plane on the database
// works them, and close deletes their jobs.
const jobQueuePrefix = "whilly_bench_"

// deleteJobs deletes the jobs of the benchmark's own River queues and the queues, once
// its control plane has stopped.
func (e *env) deleteJobs(ctx context.Context) {
	like := strings.ReplaceAll(e.store.Config().JobQueuePrefix, "_", `\_`) + "%"
	if _, err := e.pool.Exec(ctx, `DELETE FROM river_job WHERE queue LIKE $1`, like); err != nil {
		e.log.WarnContext(ctx, "bench: delete the benchmark's jobs", "error", err)
	}
	if _, err := e.pool.Exec(ctx, `DELETE FROM river_queue WHERE name LIKE $1`, like); err != nil {
		e.log.WarnContext(ctx, "bench: delete the benchmark's queues", "error", err)
	}
}

// startGitHub starts the fake GitHub with the bench's installation and returns the
// serve configuration that uses it.
func (e *env) startGitHub(ctx context.Context) (ServeOptions, error) {
	g, err := fakegithub.New(func(format string, args ...any) {
		e.problems.Add(1)
		e.log.WarnContext(ctx, "bench: the fake GitHub saw a request it does not serve", "problem", fmt.Sprintf(format, args...))
	})
	if err != nil {
		return ServeOptions{}, fmt.Errorf("start the fake GitHub: %w", err)
	}
	g.Install(benchInstallation, benchRepo)
	e.github, e.secret = g, []byte("whilly-bench-"+e.suffix)
	return ServeOptions{
		GitHub: &GitHubApp{APIURL: g.URL(), AppID: g.AppID, PrivateKeyPEM: string(g.KeyPEM), WebhookSecret: string(e.secret)},
		TRIZ:   true,
	}, nil
}

func (e *env) closeGitHub() {
	if e.github != nil {
		e.github.Close()
	}
}

// scratchPlan creates an empty ACTIVE plan that close deletes. With the fake GitHub it
// is the plan of a new issue there, as the intake would have made it.
func (e *env) scratchPlan(ctx context.Context, kind string) (string, error) {
	id := "bench-" + kind + "-" + e.suffix
	name := "whilly bench " + kind + " (scratch, deleted afterwards)"
	var opts queue.ImportOptions
	if e.github != nil {
		e.issues++
		e.github.AddIssue(benchRepo, e.issues, name, "A scratch issue of whilly bench.", "octocat", "whilly-ready")
		opts = queue.ImportOptions{GitHubIssueRef: fmt.Sprintf("%s#%d", benchRepo, e.issues), InstallationID: benchInstallation}
	}
	if _, err := e.store.CreatePlanWith(ctx, id, name, nil, opts); err != nil {
		return "", fmt.Errorf("create scratch plan: %w", err)
	}
	e.plans = append(e.plans, id)
	return id, nil
}

// tasks are n zero-work tasks; chained, each depends on the one before it.
func tasks(n int, chained bool, labels []string) []plan.Task {
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
func (e *env) addTasks(ctx context.Context, id string, ts []plan.Task) error {
	p := &plan.Plan{ID: id, Name: "whilly bench (scratch, deleted afterwards)", Tasks: ts}
	if _, err := e.store.Import(ctx, p, queue.ImportOptions{}); err != nil {
		return fmt.Errorf("import scratch tasks: %w", err)
	}
	return nil
}

// worker is a registered scratch worker.
type worker struct {
	id, token string
	api       *client.Client
}

// registerWorkers registers n scratch workers (eight at a time) with API clients of
// e.base; opts.HTTPClient, when set, is shared by them all.
func (e *env) registerWorkers(ctx context.Context, n int, labels []string, opts ...client.Options) ([]worker, error) {
	o := client.Options{UserAgent: "whilly-bench"}
	if len(opts) > 0 {
		o = opts[0]
	}
	out := make([]worker, n)
	var (
		mu    sync.Mutex
		first firstErr
		next  atomic.Int64
		wg    sync.WaitGroup
	)
	for range min(n, 8) {
		wg.Go(func() {
			for i := int(next.Add(1)) - 1; i < n && first.get() == nil; i = int(next.Add(1)) - 1 {
				w, token, err := e.store.RegisterWorker(ctx, fmt.Sprintf("bench-%s-%d", e.suffix, i+1), labels)
				if err != nil {
					first.set(fmt.Errorf("register scratch worker: %w", err))
					return
				}
				mu.Lock()
				e.workers = append(e.workers, w.ID)
				mu.Unlock()
				api, err := client.New(e.base, token, o)
				if err != nil {
					first.set(err)
					return
				}
				out[i] = worker{id: w.ID, token: token, api: api}
			}
		})
	}
	wg.Wait()
	if err := first.get(); err != nil {
		return nil, err
	}
	return out, nil
}

// revokeWorkers revokes the scratch workers, eight at a time.
func (e *env) revokeWorkers(ctx context.Context) {
	var (
		next atomic.Int64
		wg   sync.WaitGroup
	)
	for range min(len(e.workers), 8) {
		wg.Go(func() {
			for i := int(next.Add(1)) - 1; i < len(e.workers); i = int(next.Add(1)) - 1 {
				if _, err := e.store.RevokeWorker(ctx, e.workers[i]); err != nil {
					e.log.WarnContext(ctx, "bench: revoke scratch worker", "worker_id", e.workers[i], "error", err)
				}
			}
		})
	}
	wg.Wait()
}

// waitQuiet waits until no API query has run for quiet, at most limit: the workers'
// claims have all reached their long-poll wait.
func (e *env) waitQuiet(ctx context.Context, quiet, limit time.Duration) error {
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
func (e *env) waitWaiting(ctx context.Context, sent *atomic.Int64, n int) error {
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

// firstErr keeps the first error of concurrent goroutines.
type firstErr struct {
	mu  sync.Mutex
	err error
}

func (f *firstErr) set(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err == nil {
		f.err = err
	}
}

func (f *firstErr) get() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.err
}

// cpuMeter adds up the CPU time of this process and of the database's client backends
// serving it, from /proc (Linux; elsewhere it reads nothing and says so). A backend that
// connects while it measures (a pool that grows) counts from its start; one that exits is
// lost. Autovacuum's workers are not counted: when they run depends on what earlier runs
// left, not on this one.
type cpuMeter struct {
	pool     *pgxpool.Pool
	backends map[int]time.Duration // at the start
	self0    time.Duration
	ok       bool
}

// procCPU returns the user+system CPU time of a process, read from /proc/PID/stat.
func procCPU(pid int) (time.Duration, bool) {
	self, _, ok := procTimes(pid)
	return self, ok
}

// procTimes returns the user+system CPU time of a process and that of its children it
// has waited for, read from /proc/PID/stat.
func procTimes(pid int) (self, children time.Duration, ok bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0, false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')') // the command name may hold spaces
	if i < 0 {
		return 0, 0, false
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 15 {
		return 0, 0, false
	}
	var ticks [4]int64 // utime, stime, cutime, cstime
	for k := range ticks {
		if _, err := fmt.Sscan(f[11+k], &ticks[k]); err != nil {
			return 0, 0, false
		}
	}
	const tick = 10 * time.Millisecond // USER_HZ is 100 on every Linux architecture whilly runs on
	return time.Duration(ticks[0]+ticks[1]) * tick, time.Duration(ticks[2]+ticks[3]) * tick, true
}

// startCPU notes the CPU time used so far by this process and by the database backends
// connected to this database now (the pool's, the listener's, River's).
func (e *env) startCPU(ctx context.Context) *cpuMeter {
	m := &cpuMeter{pool: e.pool}
	pids, err := m.pids(ctx)
	if err != nil {
		return m
	}
	var ok bool
	if m.self0, ok = procCPU(os.Getpid()); !ok {
		return m
	}
	m.backends = map[int]time.Duration{}
	for _, pid := range pids {
		if d, ok := procCPU(pid); ok {
			m.backends[pid] = d
		}
	}
	m.ok = true
	return m
}

// pids are the backends connected to this database.
func (m *cpuMeter) pids(ctx context.Context) ([]int, error) {
	rows, err := m.pool.Query(ctx, `SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND backend_type = 'client backend'`)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[int])
}

// stop returns the CPU time used since start by this process and by the backends.
func (m *cpuMeter) stop(ctx context.Context) (self, pg time.Duration, ok bool) {
	if !m.ok {
		return 0, 0, false
	}
	now, ok := procCPU(os.Getpid())
	if !ok {
		return 0, 0, false
	}
	pids, err := m.pids(ctx)
	if err != nil {
		return 0, 0, false
	}
	for _, pid := range pids {
		if d, ok := procCPU(pid); ok {
			pg += d - m.backends[pid]
		}
	}
	return now - m.self0, pg, true
}

// vacuum vacuums and analyzes the tasks table first, like pgbench: what earlier runs left
// behind (the rows of their scratch plans) does not weigh on this one, nor does an
// autovacuum of them that would start in the middle of the measure.
func (e *env) vacuum(ctx context.Context) error {
	if _, err := e.pool.Exec(ctx, `VACUUM (ANALYZE) tasks`); err != nil {
		return fmt.Errorf("vacuum the tasks table: %w", err)
	}
	return nil
}
