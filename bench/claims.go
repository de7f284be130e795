package bench

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptrace"
	"os"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/whilly-go/whilly/control/client"
)

// ClaimsOptions are the knobs of the claims benchmark.
type ClaimsOptions struct {
	Workers, Tasks, Chain int
	Idle                  time.Duration
	// CPUProfile, when set, is the file a CPU profile of the http phase is written to.
	CPUProfile string
	// Queries sums the http phase's database time per SQL statement.
	Queries bool
	// NoHooks measures the bare control plane (no GitHub App, no TRIZ: no store hook),
	// instead of the serve configuration.
	NoHooks bool
}

// ClaimsResult is what the claims benchmark measured.
type ClaimsResult struct {
	Workers       int     `json:"workers"`
	Tasks         int     `json:"tasks"`
	PoolConns     int32   `json:"pool_conns"`
	RawClaimPerS  float64 `json:"raw_claim_per_s"`
	RawPerS       float64 `json:"raw_per_s"` // the mean of the loops before and after the http phase
	RawBeforePerS float64 `json:"raw_before_per_s"`
	RawAfterPerS  float64 `json:"raw_after_per_s"`
	ClaimsPerS    float64 `json:"claims_per_s"`
	Ratio         float64 `json:"ratio"`
	// Hooks: the control plane ran the serve configuration (GitHub App and TRIZ hooks).
	Hooks bool `json:"hooks"`
	// RiverPerS is River working the same number of no-op jobs on the same database with
	// its recommended settings (RiverRecommended); RiverTunedPerS with its benchmark's
	// (RiverTuned).
	RiverPerS       float64 `json:"river_per_s"`
	RiverTunedPerS  float64 `json:"river_tuned_per_s"`
	RatioRaw        float64 `json:"ratio_raw"`         // ClaimsPerS / RawPerS (Ratio, under the name)
	RatioRiver      float64 `json:"ratio_river"`       // ClaimsPerS / RiverPerS
	RatioRiverTuned float64 `json:"ratio_river_tuned"` // ClaimsPerS / RiverTunedPerS
	// GitHubRequests and GitHubWrites are what the control plane sent the fake GitHub
	// over the whole run (the mirror's labels and status comments); GitHubProblems are
	// requests it would fail a test on.
	GitHubRequests   int     `json:"github_requests"`
	GitHubWrites     int     `json:"github_writes"`
	GitHubProblems   int64   `json:"github_problems"`
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
	// RawCPU is the CPU per task of each raw loop, when /proc can be read.
	RawCPU []PhaseCPU `json:"raw_cpu,omitempty"`
	// Statements is the http phase's database time per statement (Queries), most first.
	Statements []Statement `json:"statements,omitempty"`
}

// PhaseCPU is the CPU time per task of one phase: this process and its Postgres backends.
type PhaseCPU struct {
	Phase         string  `json:"phase"`
	SelfMsPerTask float64 `json:"self_ms_per_task"`
	DBMsPerTask   float64 `json:"postgres_ms_per_task"`
}

// Claims runs the raw SKIP LOCKED baseline, the River baseline, the http
// claim+complete phase, the ready→claimed latency over a chain and the idle long-poll
// count in one run.
func Claims(ctx context.Context, s Setup, o ClaimsOptions) (ClaimsResult, error) {
	e, err := open(ctx, s, !o.NoHooks)
	if err != nil {
		return ClaimsResult{}, err
	}
	defer e.close(ctx)
	res := ClaimsResult{Workers: o.Workers, Tasks: o.Tasks, PoolConns: e.pool.Config().MaxConns, ChainLength: o.Chain, Hooks: !o.NoHooks}
	if err := e.vacuum(ctx); err != nil {
		return res, err
	}

	base, err := e.baselinePool(ctx, o.Workers)
	if err != nil {
		return res, err
	}
	defer base.Close()
	s.progressf("raw SKIP LOCKED loops over %d rows with %d connections", o.Tasks, o.Workers)
	if res.RawClaimPerS, err = e.rawLoop(ctx, base, "claim", o.Workers, o.Tasks, false, &res); err != nil {
		return res, err
	}
	if res.RawBeforePerS, err = e.rawLoop(ctx, base, "claim_complete", o.Workers, o.Tasks, true, &res); err != nil {
		return res, err
	}

	s.progressf("river: %d no-op jobs inserted, then worked by River (recommended settings, then tuned)", o.Tasks)
	if res.RiverPerS, err = e.riverLoop(ctx, base, o.Tasks, RiverRecommended); err != nil {
		return res, err
	}
	if res.RiverTunedPerS, err = e.riverLoop(ctx, base, o.Tasks, RiverTuned); err != nil {
		return res, err
	}

	workers, err := e.registerWorkers(ctx, o.Workers, nil)
	if err != nil {
		return res, err
	}
	s.progressf("http: %d workers claim and complete %d tasks", o.Workers, o.Tasks)
	if err := e.httpPhase(ctx, o, workers, &res); err != nil {
		return res, err
	}
	// The baseline is run again after the http phase, and their mean taken: load that
	// comes or goes on the machine meanwhile then weighs on both sides of the ratio.
	s.progressf("raw claim+complete loop again, after the http phase")
	if res.RawAfterPerS, err = e.rawLoop(ctx, base, "claim_complete_after", o.Workers, o.Tasks, true, &res); err != nil {
		return res, err
	}
	res.RawPerS = (res.RawBeforePerS + res.RawAfterPerS) / 2
	s.progressf("latency: a chain of %d tasks", o.Chain)
	if err := e.latencyPhase(ctx, o, workers, &res); err != nil {
		return res, err
	}
	s.progressf("idle: %d workers long-poll for %s", o.Workers, o.Idle)
	if err := e.idlePhase(ctx, o, workers, &res); err != nil {
		return res, err
	}
	if res.RawPerS > 0 {
		res.Ratio = res.ClaimsPerS / res.RawPerS
		res.RatioRaw = res.Ratio
	}
	if res.RiverPerS > 0 {
		res.RatioRiver = res.ClaimsPerS / res.RiverPerS
	}
	if res.RiverTunedPerS > 0 {
		res.RatioRiverTuned = res.ClaimsPerS / res.RiverTunedPerS
	}
	if e.github != nil {
		for _, r := range e.github.Requests() {
			res.GitHubRequests++
			if r.Write() {
				res.GitHubWrites++
			}
		}
		res.GitHubProblems = e.problems.Load()
	}
	if o.Queries {
		res.Statements = e.statements()
	}
	return res, nil
}

// statements returns the http phase's queries by total time, most first.
func (e *env) statements() []Statement {
	e.tracer.mu.Lock()
	defer e.tracer.mu.Unlock()
	var out []Statement
	for _, v := range e.tracer.statements {
		out = append(out, *v)
	}
	slices.SortFunc(out, func(x, y Statement) int { return int(y.Total - x.Total) })
	return out
}

// baselinePool opens the pool the baselines run on: workers connections, whatever the
// size of the control plane's pool, all connected before it returns (so that startCPU
// counts their backends).
func (e *env) baselinePool(ctx context.Context, workers int) (*pgxpool.Pool, error) {
	cfg := e.pool.Config()
	cfg.MaxConns, cfg.MinConns = int32(workers), 0
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open the baselines' pool: %w", err)
	}
	conns := make([]*pgxpool.Conn, 0, workers)
	defer func() {
		for _, c := range conns {
			c.Release()
		}
	}()
	for range workers {
		c, err := pool.Acquire(ctx)
		if err != nil {
			pool.Close()
			return nil, fmt.Errorf("open the baselines' pool: %w", err)
		}
		conns = append(conns, c)
	}
	return pool, nil
}

// rawLoop runs the baseline on a scratch table of n rows, on pool: workers connections
// claim with one statement (and complete with one more when complete is set) until none
// is left. It returns tasks per second.
func (e *env) rawLoop(ctx context.Context, pool *pgxpool.Pool, kind string, workers, n int, complete bool, res *ClaimsResult) (float64, error) {
	table := "whilly_bench_raw_" + kind + "_" + strings.ReplaceAll(e.suffix, "-", "_")
	e.tables = append(e.tables, table)
	t := pgx.Identifier{table}.Sanitize()
	_, err := pool.Exec(ctx, `CREATE TABLE `+t+` (
		id bigint PRIMARY KEY, status text NOT NULL DEFAULT 'PENDING', claimed_by text, attempts integer NOT NULL DEFAULT 0,
		lease_id uuid, lease_expires_at timestamptz, updated_at timestamptz NOT NULL DEFAULT now())`)
	if err != nil {
		return 0, fmt.Errorf("create scratch table: %w", err)
	}
	if _, err := pool.Exec(ctx, `CREATE INDEX ON `+t+` (id) WHERE status = 'PENDING'`); err != nil {
		return 0, fmt.Errorf("index scratch table: %w", err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO `+t+` (id) SELECT generate_series(1, $1::bigint)`, n); err != nil {
		return 0, fmt.Errorf("fill scratch table: %w", err)
	}
	if _, err := pool.Exec(ctx, `ANALYZE `+t); err != nil {
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
		first firstErr
	)
	cpu := e.startCPU(ctx)
	begin := time.Now()
	for i := range workers {
		wid := fmt.Sprintf("raw-%d", i+1)
		wg.Go(func() {
			for {
				var id int64
				err := pool.QueryRow(ctx, claimSQL, wid).Scan(&id)
				if errors.Is(err, pgx.ErrNoRows) {
					return
				}
				if err == nil && complete {
					_, err = pool.Exec(ctx, completeSQL, id, wid)
				}
				if err != nil {
					first.set(fmt.Errorf("raw loop: %w", err))
					return
				}
				done.Add(1)
			}
		})
	}
	wg.Wait()
	took := time.Since(begin)
	if err := first.get(); err != nil {
		return 0, err
	}
	if int(done.Load()) != n {
		return 0, fmt.Errorf("raw loop handled %d rows of %d", done.Load(), n)
	}
	if self, pg, ok := cpu.stop(ctx); ok {
		res.RawCPU = append(res.RawCPU, PhaseCPU{Phase: kind, SelfMsPerTask: ms(self) / float64(n), DBMsPerTask: ms(pg) / float64(n)})
	}
	return float64(n) / took.Seconds(), nil
}

// profile starts a CPU profile into path and returns its stop.
func profile(path string) (func() error, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("create the CPU profile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("start the CPU profile: %w", err)
	}
	return func() error {
		pprof.StopCPUProfile()
		return f.Close()
	}, nil
}

// httpPhase drains a scratch plan of independent tasks through the API.
func (e *env) httpPhase(ctx context.Context, o ClaimsOptions, workers []worker, res *ClaimsResult) error {
	id, err := e.scratchPlan(ctx, "claims")
	if err != nil {
		return err
	}
	if err := e.addTasks(ctx, id, tasks(o.Tasks, false, nil)); err != nil {
		return err
	}
	if o.CPUProfile != "" {
		stop, err := profile(o.CPUProfile)
		if err != nil {
			return err
		}
		defer func() {
			if err := stop(); err != nil {
				e.log.WarnContext(ctx, "bench: write the CPU profile", "error", err)
			}
		}()
	}
	e.tracer.byStatement.Store(o.Queries)
	defer e.tracer.byStatement.Store(false)
	q0, n0 := e.tracer.httpQueries.Load(), e.tracer.httpNanos.Load()
	cpu := e.startCPU(ctx)
	var (
		wg     sync.WaitGroup
		done   atomic.Int64
		lastMu sync.Mutex
		last   time.Time
		first  firstErr
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
					first.set(err)
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
	if err := first.get(); err != nil {
		return fmt.Errorf("http phase: %w", err)
	}
	if int(done.Load()) != o.Tasks {
		return fmt.Errorf("http phase: %d tasks completed of %d", done.Load(), o.Tasks)
	}
	if self, pg, ok := cpu.stop(ctx); ok {
		res.CPUSelfMsPerTask, res.CPUDBMsPerTask = ms(self)/float64(o.Tasks), ms(pg)/float64(o.Tasks)
	}
	res.ClaimsPerS = float64(o.Tasks) / last.Sub(begin).Seconds()
	res.QueriesPerTask = float64(e.tracer.httpQueries.Load()-q0) / float64(o.Tasks)
	res.DBMsPerTask = ms(time.Duration(e.tracer.httpNanos.Load()-n0)) / float64(o.Tasks)
	return nil
}

// latencyPhase measures ready→claimed over a dependency chain while every worker waits
// in long-poll for the next link.
func (e *env) latencyPhase(ctx context.Context, o ClaimsOptions, workers []worker, res *ClaimsResult) error {
	id, err := e.scratchPlan(ctx, "chain")
	if err != nil {
		return err
	}
	type stamps struct{ claimed, sent, acked time.Time }
	var (
		mu    sync.Mutex
		at    = map[string]*stamps{}
		wg    sync.WaitGroup
		first firstErr
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
					first.set(err)
					return
				}
				s := get(c.Task.ID)
				s.claimed = time.Now()
				s.sent = time.Now()
				_, err = w.api.Complete(ctx, id, c.Task.ID, client.CompleteRequest{LeaseID: c.Lease.ID})
				s.acked = time.Now()
				if err != nil {
					first.set(err)
					return
				}
			}
		})
	}
	// Every worker is waiting for the chain's first link before it is imported.
	if err := e.waitWaiting(ctx, &sent, len(workers)); err != nil {
		return err
	}
	ts := tasks(o.Chain, true, nil)
	if err := e.addTasks(ctx, id, ts); err != nil {
		return err
	}
	imported := time.Now()
	wg.Wait()
	if err := first.get(); err != nil {
		return fmt.Errorf("latency phase: %w", err)
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
func (e *env) idlePhase(ctx context.Context, o ClaimsOptions, workers []worker, res *ClaimsResult) error {
	id, err := e.scratchPlan(ctx, "idle")
	if err != nil {
		return err
	}
	// One task no bench worker may take keeps the plan ACTIVE, so claims wait.
	if err := e.addTasks(ctx, id, tasks(1, false, []string{"whilly-bench-nobody"})); err != nil {
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
					e.log.WarnContext(ctx, "bench: idle claim", "error", err)
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
	case <-time.After(o.Idle):
	}
	res.IdleQueries = e.tracer.httpQueries.Load() - q0
	res.IdleOtherQueries = e.tracer.otherQ.Load() - other0
	res.IdleSeconds = time.Since(begin).Seconds()
	res.IdlePerWorkerS = float64(res.IdleQueries) / float64(o.Workers) / res.IdleSeconds
	return nil
}
