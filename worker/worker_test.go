package worker_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/whilly-go/whilly/agent"
	"github.com/whilly-go/whilly/control"
	"github.com/whilly-go/whilly/control/client"
	"github.com/whilly-go/whilly/plan"
	"github.com/whilly-go/whilly/queue"
	"github.com/whilly-go/whilly/testkit"
	"github.com/whilly-go/whilly/worker"
)

type env struct {
	st  *queue.Store
	url string
}

// newEnv runs a real control plane over a test database on an httptest server.
func newEnv(t *testing.T) *env {
	t.Helper()
	return newEnvWith(t, queue.Config{})
}

// newEnvWith is newEnv with a store of configuration cfg.
func newEnvWith(t *testing.T, cfg queue.Config) *env {
	t.Helper()
	pool := testkit.DB(t)
	st := queue.NewStore(pool, nil, cfg)
	ctx, cancel := context.WithCancel(context.Background())
	ln := queue.NewListener(pool, nil)
	done := make(chan struct{})
	go func() { defer close(done); _ = ln.Run(ctx) }()
	srv := httptest.NewServer(control.New(st, ln, nil, control.Config{}).Handler())
	t.Cleanup(func() { srv.Close(); cancel(); <-done })
	return &env{st: st, url: srv.URL}
}

func (e *env) importTasks(t *testing.T, id string, n int) {
	t.Helper()
	p := &plan.Plan{ID: id, Name: id}
	for i := range n {
		p.Tasks = append(p.Tasks, plan.Task{ID: fmt.Sprintf("T%02d", i), Priority: plan.PriorityMedium,
			Description: "A task long enough for the gate", AcceptanceCriteria: []string{"ok"}, TestSteps: []string{"true"}})
	}
	if _, err := e.st.Import(context.Background(), p, queue.ImportOptions{}); err != nil {
		t.Fatal(err)
	}
}

// registered registers a worker and returns it with a client, carrying its token, of the
// control plane at url.
func (e *env) registered(t *testing.T, url string) (queue.Worker, *client.Client) {
	t.Helper()
	w, token, err := e.st.RegisterWorker(context.Background(), "test", nil)
	if err != nil {
		t.Fatal(err)
	}
	api, err := client.New(url, token, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return w, api
}

func (e *env) worker(t *testing.T, url string, sim agent.SimConfig, cfg worker.Config) *worker.Worker {
	t.Helper()
	w, api := e.registered(t, url)
	ag, err := agent.New(agent.NameSim, agent.Config{Sim: sim})
	if err != nil {
		t.Fatal(err)
	}
	cfg.WorkerID = w.ID
	wk, err := worker.New(api, ag, nil, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return wk
}

func taskStatus(t *testing.T, st *queue.Store, planID, id string) plan.Status {
	t.Helper()
	task, err := st.GetTask(context.Background(), planID, id)
	if err != nil {
		t.Fatal(err)
	}
	return task.Status
}

func TestTwoWorkersDrainAPlan(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.importTasks(t, "drain", 12)
	var wg sync.WaitGroup
	sums := make([]worker.Summary, 2)
	for i := range sums {
		w := e.worker(t, e.url, agent.SimConfig{Cost: 10_000}, worker.Config{PlanID: "drain", Drain: true, ClaimWait: 2 * time.Second})
		wg.Go(func() {
			var err error
			if sums[i], err = w.Run(context.Background()); err != nil {
				t.Errorf("worker %d: %v", i, err)
			}
		})
	}
	wg.Wait()
	if done := sums[0].Done + sums[1].Done; done != 12 {
		t.Fatalf("workers completed %d tasks, want 12 (%+v)", done, sums)
	}
	pi, err := e.st.GetPlan(context.Background(), "drain")
	if err != nil || pi.Status != plan.PlanDone || pi.Spent != 120_000 {
		t.Fatalf("plan = %s, spent %s, %v; want DONE having spent $0.12", pi.Status, pi.Spent, err)
	}
}

func TestShutdownReleasesTheTask(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.importTasks(t, "stop", 1)
	w := e.worker(t, e.url, agent.SimConfig{Delay: time.Hour}, worker.Config{PlanID: "stop"})
	ctx, cancel := context.WithCancel(context.Background())
	result := make(chan error, 1)
	go func() { _, err := w.Run(ctx); result <- err }()
	testkit.Eventually(t, 10*time.Second, "the task to start", func() bool { return taskStatus(t, e.st, "stop", "T00") == plan.StatusInProgress })
	cancel()
	select {
	case err := <-result:
		if !errors.Is(err, worker.ErrStopped) {
			t.Fatalf("Run = %v, want ErrStopped", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("worker did not stop")
	}
	if st := taskStatus(t, e.st, "stop", "T00"); st != plan.StatusPending {
		t.Fatalf("task after shutdown = %s, want PENDING (released)", st)
	}
	evs, err := e.st.Events(context.Background(), queue.EventFilter{PlanID: "stop"})
	if err != nil {
		t.Fatal(err)
	}
	last := evs[len(evs)-1]
	if last.Type != queue.EventRelease || !strings.Contains(string(last.Payload), "shutdown") {
		t.Fatalf("last event = %s %s, want RELEASE for shutdown", last.Type, last.Payload)
	}
}

func TestCancelledPlanStopsTheAgent(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.importTasks(t, "cancel", 1)
	w := e.worker(t, e.url, agent.SimConfig{Delay: time.Hour}, worker.Config{PlanID: "cancel", Once: true, HeartbeatEvery: 50 * time.Millisecond})
	result := make(chan worker.Summary, 1)
	go func() { s, _ := w.Run(context.Background()); result <- s }()
	testkit.Eventually(t, 10*time.Second, "the task to start", func() bool { return taskStatus(t, e.st, "cancel", "T00") == plan.StatusInProgress })
	if _, err := e.st.CancelPlan(context.Background(), "cancel", "test", ""); err != nil {
		t.Fatal(err)
	}
	select {
	case s := <-result:
		if s.Lost != 1 || s.Done != 0 {
			t.Fatalf("summary = %+v, want the task lost to the cancellation", s)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the heartbeat did not stop the agent of a cancelled plan")
	}
}

// TestHeartbeatsKeepALongAttemptsLease: an attempt that runs past its lease's lifetime
// completes, because the worker's heartbeats extend the lease while the agent runs.
func TestHeartbeatsKeepALongAttemptsLease(t *testing.T) {
	t.Parallel()
	e := newEnvWith(t, queue.Config{LeaseTTL: time.Second})
	e.importTasks(t, "long", 1)
	w := e.worker(t, e.url, agent.SimConfig{Delay: 2500 * time.Millisecond}, worker.Config{PlanID: "long", Once: true})
	s, err := w.Run(context.Background())
	if err != nil || s.Done != 1 {
		t.Fatalf("Run = %+v, %v; want the task done", s, err)
	}
	if st := taskStatus(t, e.st, "long", "T00"); st != plan.StatusDone {
		t.Fatalf("task = %s, want DONE", st)
	}
}

func TestWorkerWaitsOutAnUnreachableControlPlane(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.importTasks(t, "late", 1)
	// Reserve an address, then serve the control plane on it only later.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	w := e.worker(t, "http://"+addr, agent.SimConfig{}, worker.Config{PlanID: "late", Once: true, ClaimWait: time.Second})
	result := make(chan error, 1)
	go func() { _, err := w.Run(context.Background()); result <- err }()

	target, err := http.NewRequest(http.MethodGet, e.url, nil)
	if err != nil {
		t.Fatal(err)
	}
	proxyTo := target.URL.Host
	var ln net.Listener
	testkit.Eventually(t, 10*time.Second, "the address to be free again", func() bool {
		ln, err = net.Listen("tcp", addr)
		return err == nil
	})
	proxy := &http.Server{Handler: http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		r.URL.Scheme, r.URL.Host, r.RequestURI = "http", proxyTo, ""
		resp, err := http.DefaultTransport.RoundTrip(r)
		if err != nil {
			rw.WriteHeader(http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		for k, v := range resp.Header {
			rw.Header()[k] = v
		}
		rw.WriteHeader(resp.StatusCode)
		_, _ = io.Copy(rw, resp.Body)
	})}
	go func() { _ = proxy.Serve(ln) }()
	t.Cleanup(func() { _ = proxy.Close() })
	select {
	case err := <-result:
		if err != nil {
			t.Fatalf("Run = %v, want nil after the control plane came up", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("worker gave up or never reached the control plane")
	}
	if st := taskStatus(t, e.st, "late", "T00"); st != plan.StatusDone {
		t.Fatalf("task = %s, want DONE", st)
	}
}

// TestWorkerTakesItsNextTaskFromTheCompletion: after its first claim, a worker gets each
// next task in the answer to its COMPLETE (claim_next); it asks for none after its last
// task (MaxTasks), and one it holds when stopped goes back to the queue.
func TestWorkerTakesItsNextTaskFromTheCompletion(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var claims atomic.Int32
	target, err := url.Parse(e.url)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(target)
	counting := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/tasks/claim" {
			claims.Add(1)
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(counting.Close)
	ctx := context.Background()
	held := func(planID string) int {
		n := 0
		for i := range 6 {
			if st := taskStatus(t, e.st, planID, fmt.Sprintf("T%02d", i)); st == plan.StatusClaimed || st == plan.StatusInProgress {
				n++
			}
		}
		return n
	}

	e.importTasks(t, "next", 6)
	sum, err := e.worker(t, counting.URL, agent.SimConfig{}, worker.Config{PlanID: "next", MaxTasks: 4}).Run(ctx)
	if err != nil || sum.Done != 4 {
		t.Fatalf("run = %+v, %v; want 4 done", sum, err)
	}
	if n := claims.Load(); n != 1 {
		t.Errorf("%d claim requests for 4 tasks, want 1: the others come with the completions", n)
	}
	if n := held("next"); n != 0 {
		t.Errorf("%d tasks left claimed after the worker's last task, want 0", n)
	}

	e.importTasks(t, "stop", 6)
	stopCtx, stop := context.WithCancel(ctx)
	w := e.worker(t, counting.URL, agent.SimConfig{}, worker.Config{PlanID: "stop", OnResult: func(worker.Outcome) { stop() }})
	if sum, err := w.Run(stopCtx); !errors.Is(err, worker.ErrStopped) || sum.Done != 1 {
		t.Fatalf("run = %+v, %v; want 1 done, then stopped", sum, err)
	}
	if n := held("stop"); n != 0 {
		t.Errorf("%d tasks left claimed by a stopped worker, want 0 (its next task released)", n)
	}
}
