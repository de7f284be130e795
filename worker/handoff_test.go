package worker_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/whilly-go/whilly/agent"
	"github.com/whilly-go/whilly/worker"
)

// TestHandedOverTasksNeedNoStart: a worker draining a plan asks each completion to claim
// and start its next task; only the first task, claimed on its own, takes a START
// request, and every task still has one CLAIM, one START and one COMPLETE event, in that
// order.
func TestHandedOverTasksNeedNoStart(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const n = 6
	e.importTasks(t, "relay", n)
	target, err := url.Parse(e.url)
	if err != nil {
		t.Fatal(err)
	}
	var starts atomic.Int32
	proxy := httputil.NewSingleHostReverseProxy(target)
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/start") {
			starts.Add(1)
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(front.Close)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	wk := e.worker(t, front.URL, agent.SimConfig{}, worker.Config{PlanID: "relay", Drain: true, ClaimWait: time.Second})
	if sum, err := wk.Run(ctx); err != nil || sum.Done != n {
		t.Fatalf("run: %+v, %v", sum, err)
	}
	if got := starts.Load(); got != 1 {
		t.Errorf("%d START requests for %d tasks; want 1 (the first claim's)", got, n)
	}
	var bad int
	err = e.st.Pool().QueryRow(ctx, `SELECT count(*) FROM tasks t WHERE plan_id = 'relay' AND
		(SELECT string_agg(type, ',' ORDER BY id) FROM events e WHERE e.plan_id = t.plan_id AND e.task_id = t.id
		 AND type IN ('CLAIM', 'START', 'COMPLETE')) IS DISTINCT FROM 'CLAIM,START,COMPLETE'`).Scan(&bad)
	if err != nil || bad != 0 {
		t.Fatalf("%d tasks whose events are not CLAIM, START, COMPLETE (%v)", bad, err)
	}
}
