package bench

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptrace"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/whilly-go/whilly/control/client"
)

// IdleOptions are the knobs of the idle benchmark.
type IdleOptions struct {
	// Workers is how many workers long-poll the control plane at once.
	Workers int
	// Window is how long queries are counted while they all wait.
	Window time.Duration
	// Wakes is how many times a task is added while they wait.
	Wakes int
	// Exe is the whilly binary whose `serve` is measured; Env its environment.
	Exe string
	Env []string
	// DatabaseURL is the database that serve uses (the bench's own).
	DatabaseURL string
}

// IdleResult is what the idle benchmark measured.
type IdleResult struct {
	Workers int `json:"workers"`
	// The control plane's resident memory (/proc/PID/status VmRSS) and Go heap in use
	// (go_memstats_heap_inuse_bytes of /metrics) before the workers connect and while
	// they all wait, and the difference per waiting worker.
	RSSBeforeBytes    int64   `json:"rss_before_bytes"`
	RSSWaitingBytes   int64   `json:"rss_waiting_bytes"`
	RSSPerWorkerKiB   float64 `json:"rss_per_worker_kib"`
	HeapBeforeBytes   int64   `json:"heap_before_bytes"`
	HeapWaitingBytes  int64   `json:"heap_waiting_bytes"`
	HeapPerWorkerKiB  float64 `json:"heap_per_worker_kib"`
	GoroutinesWaiting int64   `json:"goroutines_waiting"`
	// IdleQueries is what the waiting workers cost the database over a window while they
	// all wait: their claims' attempts (whilly_claim_queries_total). Next to it, the
	// statements every other connection to the database started (pg_stat_activity,
	// sampled) over that window and over one of the same length before the workers
	// connect: River's maintenance, the listener's pings and the sweeps, with workers
	// or without.
	WindowSeconds     float64 `json:"window_seconds"`
	IdleQueries       int64   `json:"idle_queries"`
	StatementsBefore  int64   `json:"statements_before"`
	StatementsWaiting int64   `json:"statements_waiting"`
	Wakes             int     `json:"wakes"`
	WakeP50Ms         float64 `json:"wake_p50_ms"`
	WakeP99Ms         float64 `json:"wake_p99_ms"`
	WakeMaxMs         float64 `json:"wake_max_ms"`
	WakeFromCallP50Ms float64 `json:"wake_from_import_call_p50_ms"`
	WakeFromCallP99Ms float64 `json:"wake_from_import_call_p99_ms"`
	ConnectSeconds    float64 `json:"connect_seconds"`
	// ClaimErrors counts claims that failed and were asked again (a closed connection).
	ClaimErrors        int64   `json:"claim_errors"`
	ClaimWaitCapSecond float64 `json:"claim_wait_seconds"`
}

// claimWait is what each waiting worker asks for: the control plane's cap (MaxClaimWait).
const claimWait = 30

// Idle runs `whilly serve` in a process of its own (so that its memory is its own),
// connects o.Workers long-polling workers to it over HTTP/1.1 keep-alive connections from
// this process, and measures the server's memory per waiting worker, the queries their
// claims make while they wait, and how fast one of them gets a task added meanwhile.
func Idle(ctx context.Context, s Setup, o IdleOptions) (IdleResult, error) {
	res := IdleResult{Workers: o.Workers, Wakes: o.Wakes, ClaimWaitCapSecond: claimWait}
	if err := raiseFileLimit(o.Workers + 1000); err != nil {
		return res, err
	}
	e, err := connect(ctx, s)
	if err != nil {
		return res, err
	}
	defer e.close(ctx)
	srv, err := e.startServeProcess(ctx, o)
	if err != nil {
		return res, err
	}
	defer srv.stop()
	e.base = srv.base

	id, err := e.scratchPlan(ctx, "idle")
	if err != nil {
		return res, err
	}
	// One task no bench worker may take keeps the plan ACTIVE, so claims wait.
	if err := e.addTasks(ctx, id, tasks(1, false, []string{"whilly-bench-nobody"})); err != nil {
		return res, err
	}
	s.progressf("registering %d workers", o.Workers)
	tr := &http.Transport{MaxIdleConns: o.Workers + 100, MaxIdleConnsPerHost: o.Workers + 100, IdleConnTimeout: 5 * time.Minute,
		DialContext: (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext}
	defer tr.CloseIdleConnections()
	workers, err := e.registerWorkers(ctx, o.Workers, nil, client.Options{UserAgent: "whilly-bench", HTTPClient: &http.Client{Transport: tr}})
	if err != nil {
		return res, err
	}
	if err := srv.warm(ctx, workers[0], id); err != nil {
		return res, err
	}

	s.progressf("quiet window of %s before the workers connect", o.Window)
	before, err := srv.memory(ctx)
	if err != nil {
		return res, err
	}
	res.RSSBeforeBytes, res.HeapBeforeBytes = before.rss, before.heap
	if res.StatementsBefore, err = e.statementsOver(ctx, o.Window); err != nil {
		return res, err
	}

	s.progressf("%d workers connect and long-poll", o.Workers)
	pollCtx, stopPolls := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		stopPolls()
		wg.Wait()
	}()
	var (
		claimErrs atomic.Int64
		sent      atomic.Int64
		failed    firstErr
		mu        sync.Mutex
		got       = map[string]time.Time{} // task → when a worker held its claim
		gotCh     = make(chan string, o.Wakes+1)
	)
	traced := httptrace.WithClientTrace(pollCtx, &httptrace.ClientTrace{WroteRequest: func(httptrace.WroteRequestInfo) { sent.Add(1) }})
	connectBegin := time.Now()
	for i, w := range workers {
		if i > 0 && i%250 == 0 {
			// In steps, so that the listen backlog is never the limit.
			select {
			case <-ctx.Done():
				return res, ctx.Err()
			case <-time.After(10 * time.Millisecond):
			}
		}
		wg.Go(func() {
			for errs := 0; pollCtx.Err() == nil; {
				c, err := w.api.Claim(traced, client.ClaimRequest{PlanID: id, WaitSeconds: claimWait})
				if err != nil {
					// A keep-alive connection the server closed as the claim went out (EOF)
					// is asked again, as whilly-worker would; three in a row end the run.
					if errs++; errs < 3 && pollCtx.Err() == nil {
						claimErrs.Add(1)
						continue
					}
					if pollCtx.Err() == nil {
						failed.set(fmt.Errorf("a waiting worker's claim: %w", err))
					}
					return
				}
				errs = 0
				if c == nil {
					continue
				}
				at := time.Now()
				mu.Lock()
				got[c.Task.ID] = at
				mu.Unlock()
				gotCh <- c.Task.ID
				if _, err := w.api.Complete(pollCtx, id, c.Task.ID, client.CompleteRequest{LeaseID: c.Lease.ID}); err != nil && pollCtx.Err() == nil {
					failed.set(fmt.Errorf("complete a woken worker's task: %w", err))
					return
				}
			}
		})
	}
	deadline := time.Now().Add(2 * time.Minute)
	for sent.Load() < int64(o.Workers) {
		if err := failed.get(); err != nil {
			return res, err
		}
		if time.Now().After(deadline) {
			return res, fmt.Errorf("only %d of %d workers' claims reached the control plane in 2 minutes", sent.Load(), o.Workers)
		}
		select {
		case <-ctx.Done():
			return res, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	// Every claim is written; wait until the server has them all asleep.
	if err := srv.waitAsleep(ctx, o.Workers, &failed); err != nil {
		return res, err
	}
	waiting, err := srv.memory(ctx)
	if err != nil {
		return res, err
	}
	res.RSSWaitingBytes, res.HeapWaitingBytes, res.GoroutinesWaiting = waiting.rss, waiting.heap, waiting.goroutines
	res.ConnectSeconds = time.Since(connectBegin).Seconds()
	firstSent := connectBegin
	res.RSSPerWorkerKiB = float64(res.RSSWaitingBytes-res.RSSBeforeBytes) / 1024 / float64(o.Workers)
	res.HeapPerWorkerKiB = float64(res.HeapWaitingBytes-res.HeapBeforeBytes) / 1024 / float64(o.Workers)

	s.progressf("quiet window of %s while they wait", o.Window)
	// The window must end, with a margin, before the first claims' waits run out and they
	// ask again.
	if time.Since(firstSent)+o.Window+5*time.Second > claimWait*time.Second {
		return res, fmt.Errorf("the workers took %.1f s to connect and fall asleep: the %s window would reach the end of the first claims' %d s wait; use fewer --workers or a shorter --window",
			res.ConnectSeconds, o.Window, claimWait)
	}
	if res.StatementsWaiting, err = e.statementsOver(ctx, o.Window); err != nil {
		return res, err
	}
	after, err := srv.memory(ctx)
	if err != nil {
		return res, err
	}
	res.WindowSeconds = o.Window.Seconds()
	res.IdleQueries = after.claimQueries - waiting.claimQueries

	s.progressf("%d tasks appear one at a time while they wait", o.Wakes)
	fromCommit := make([]time.Duration, 0, o.Wakes)
	fromCall := make([]time.Duration, 0, o.Wakes)
	for i := range o.Wakes {
		task := fmt.Sprintf("W%04d", i+1)
		ts := tasks(1, false, nil)
		ts[0].ID = task
		called := time.Now()
		if err := e.addTasks(ctx, id, ts); err != nil {
			return res, err
		}
		committed := time.Now()
		select {
		case t := <-gotCh:
			if t != task {
				return res, fmt.Errorf("wake %d: a worker got task %s, not %s", i+1, t, task)
			}
		case <-time.After(30 * time.Second):
			return res, fmt.Errorf("wake %d: no worker got task %s within 30 s", i+1, task)
		case <-ctx.Done():
			return res, ctx.Err()
		}
		mu.Lock()
		at := got[task]
		mu.Unlock()
		fromCommit = append(fromCommit, at.Sub(committed))
		fromCall = append(fromCall, at.Sub(called))
		// The next task appears when every worker is asleep again.
		if err := srv.waitAsleep(ctx, o.Workers, &failed); err != nil {
			return res, fmt.Errorf("after wake %d: %w", i+1, err)
		}
	}
	if err := failed.get(); err != nil {
		return res, err
	}
	res.ClaimErrors = claimErrs.Load()
	slices.Sort(fromCommit)
	slices.Sort(fromCall)
	if len(fromCommit) > 0 {
		res.WakeP50Ms, res.WakeP99Ms = ms(percentile(fromCommit, 0.5)), ms(percentile(fromCommit, 0.99))
		res.WakeMaxMs = ms(fromCommit[len(fromCommit)-1])
		res.WakeFromCallP50Ms, res.WakeFromCallP99Ms = ms(percentile(fromCall, 0.5)), ms(percentile(fromCall, 0.99))
	}
	return res, nil
}

// raiseFileLimit raises this process's open-file limit to at least n (up to the hard
// limit): each waiting worker holds a connection.
func raiseFileLimit(n int) error {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return fmt.Errorf("read the open-file limit: %w", err)
	}
	if lim.Cur >= uint64(n) {
		return nil
	}
	if lim.Max < uint64(n) {
		return fmt.Errorf("%d connections need %d open files, and this process may open %d at most (ulimit -Hn): use fewer --workers", n-1000, n, lim.Max)
	}
	lim.Cur = lim.Max
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return fmt.Errorf("raise the open-file limit: %w", err)
	}
	return nil
}

// activitySample is how often statementsOver reads pg_stat_activity.
const activitySample = 10 * time.Millisecond

// statementsOver counts the statements the other connections to the database start over
// d: it reads pg_stat_activity every activitySample, on a connection of its own, and
// counts each new query_start of a backend (a connection that appears having run one
// counts too). Two statements of one connection within a sample count once: a lower
// bound, exact for the question whether any ran. pg_stat_database's transaction counts
// cannot answer it: a backend reports them at most once a second, and one that goes idle
// before its next report may keep them until its next statement or its disconnect (50
// commits of an idle session stayed unreported for 20 s), so the workers' own claims as
// they connected were counted in later windows (43, 265 and 575 "idle" transactions in 3
// of 19 runs).
func (e *env) statementsOver(ctx context.Context, d time.Duration) (int64, error) {
	conn, err := e.pool.Acquire(ctx)
	if err != nil {
		return 0, fmt.Errorf("acquire a connection to read pg_stat_activity: %w", err)
	}
	defer conn.Release()
	seen := map[int32]time.Time{}
	begin := time.Now()
	read := func(count bool) (int64, error) {
		rows, err := conn.Query(ctx, `SELECT pid, query_start FROM pg_stat_activity
			WHERE datname = current_database() AND backend_type = 'client backend' AND pid <> pg_backend_pid() AND query_start IS NOT NULL`)
		if err != nil {
			return 0, fmt.Errorf("read pg_stat_activity: %w", err)
		}
		var n int64
		var pid int32
		var at time.Time
		_, err = pgx.ForEachRow(rows, []any{&pid, &at}, func() error {
			prev, known := seen[pid]
			if count && ((known && !at.Equal(prev)) || (!known && !at.Before(begin))) {
				n++
			}
			seen[pid] = at
			return nil
		})
		if err != nil {
			return 0, fmt.Errorf("read pg_stat_activity: %w", err)
		}
		return n, nil
	}
	if _, err := read(false); err != nil {
		return 0, err
	}
	t := time.NewTicker(activitySample)
	defer t.Stop()
	var total int64
	for end := begin.Add(d); time.Now().Before(end); {
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-t.C:
		}
		n, err := read(true)
		if err != nil {
			return 0, err
		}
		total += n
	}
	return total, nil
}

// serveProcess is `whilly serve` running in a child process.
type serveProcess struct {
	cmd     *exec.Cmd
	base    string
	metrics string // the token of its /metrics
	out     bytes.Buffer
	done    chan struct{}
}

// startServeProcess starts `whilly serve` on a free loopback port over the bench's
// database and waits until it is ready.
func (e *env) startServeProcess(ctx context.Context, o IdleOptions) (*serveProcess, error) {
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("find a free loopback port: %w", err)
	}
	addr := ln.Addr().String()
	if err := ln.Close(); err != nil {
		return nil, fmt.Errorf("find a free loopback port: %w", err)
	}
	p := &serveProcess{base: "http://" + addr, metrics: "whilly-bench-" + e.suffix, done: make(chan struct{})}
	p.cmd = exec.CommandContext(ctx, o.Exe, "serve", "--listen", addr)
	p.cmd.Env = append(slices.Clone(o.Env), "WHILLY_DATABASE_URL="+o.DatabaseURL, "WHILLY_METRICS_TOKEN="+p.metrics, "WHILLY_LOG_LEVEL=warn")
	p.cmd.Stdout, p.cmd.Stderr = &p.out, &p.out
	p.cmd.Cancel = func() error { return p.cmd.Process.Signal(syscall.SIGTERM) }
	p.cmd.WaitDelay = 10 * time.Second
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s serve: %w", o.Exe, err)
	}
	go func() {
		_ = p.cmd.Wait()
		close(p.done)
	}()
	deadline := time.Now().Add(60 * time.Second)
	for {
		select {
		case <-p.done:
			return nil, fmt.Errorf("whilly serve exited at start: %s", strings.TrimSpace(p.out.String()))
		case <-ctx.Done():
			p.stop()
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if p.ready(ctx) {
			return p, nil
		}
		if time.Now().After(deadline) {
			p.stop()
			return nil, fmt.Errorf("whilly serve was not ready within 60 s: %s", strings.TrimSpace(p.out.String()))
		}
	}
}

func (p *serveProcess) ready(ctx context.Context) bool {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.base+"/readyz", nil)
	if err != nil {
		return false
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	_ = resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// warm makes one claim that finds nothing at once, so the handlers' first-use costs
// are paid before the memory is read.
func (p *serveProcess) warm(ctx context.Context, w worker, planID string) error {
	if _, err := w.api.Claim(ctx, client.ClaimRequest{PlanID: planID}); err != nil {
		return fmt.Errorf("warm-up claim: %w", err)
	}
	return nil
}

// waitAsleep waits until n claims are asleep on the server (whilly_claims_waiting).
func (p *serveProcess) waitAsleep(ctx context.Context, n int, failed *firstErr) error {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		m, err := p.memory(ctx)
		if err != nil {
			return err
		}
		if m.waiting >= int64(n) {
			return nil
		}
		if err := failed.get(); err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("only %d of %d workers' claims were asleep on the server after 2 minutes", m.waiting, n)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// stop ends the process (SIGTERM: it shuts down in order) and waits for it.
func (p *serveProcess) stop() {
	if p.cmd.Process != nil {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
	}
	select {
	case <-p.done:
	case <-time.After(15 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// serveMemory is what memory read of the server: its resident memory, Go heap in use,
// goroutines and claims asleep in long-poll (whilly_claims_waiting).
type serveMemory struct {
	rss, heap, goroutines, waiting int64
	claimQueries                   int64 // whilly_claim_queries_total
}

// memory reads the server's /proc/PID/status and /metrics.
func (p *serveProcess) memory(ctx context.Context) (serveMemory, error) {
	var m serveMemory
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		return m, fmt.Errorf("read whilly serve's memory (Linux only): %w", err)
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				return m, fmt.Errorf("read whilly serve's VmRSS %q: %w", v, err)
			}
			m.rss = kb * 1024
		}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.base+"/metrics", nil)
	if err != nil {
		return m, fmt.Errorf("read whilly serve's metrics: %w", err)
	}
	req.Header.Set("Authorization", "Bearer "+p.metrics)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return m, fmt.Errorf("read whilly serve's metrics: %w", err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return m, fmt.Errorf("read whilly serve's metrics: %s", resp.Status)
	}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		switch name {
		case "go_memstats_heap_inuse_bytes":
			f, _ := strconv.ParseFloat(value, 64)
			m.heap = int64(f)
		case "go_goroutines":
			f, _ := strconv.ParseFloat(value, 64)
			m.goroutines = int64(f)
		case "whilly_claims_waiting":
			f, _ := strconv.ParseFloat(value, 64)
			m.waiting = int64(f)
		case "whilly_claim_queries_total":
			f, _ := strconv.ParseFloat(value, 64)
			m.claimQueries = int64(f)
		}
	}
	if err := sc.Err(); err != nil {
		return m, fmt.Errorf("read whilly serve's metrics: %w", err)
	}
	if m.rss == 0 || m.heap == 0 {
		return m, errors.New("whilly serve's VmRSS or go_memstats_heap_inuse_bytes is missing")
	}
	return m, nil
}
