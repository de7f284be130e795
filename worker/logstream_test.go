package worker_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/whilly-go/whilly/agent"
	"github.com/whilly-go/whilly/control/client"
	"github.com/whilly-go/whilly/plan"
	"github.com/whilly-go/whilly/queue"
	"github.com/whilly-go/whilly/sandbox"
	"github.com/whilly-go/whilly/testkit"
	"github.com/whilly-go/whilly/worker"
)

// TestAttemptLogStreamsWhileTheSimAgentRuns: the sim agent's log reaches the control
// plane while the attempt runs — a reader gets chunks before it ends — and whole once it
// has ended.
func TestAttemptLogStreamsWhileTheSimAgentRuns(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.importTasks(t, "live", 1)
	wk := e.worker(t, e.url, agent.SimConfig{Delay: 3 * time.Second}, worker.Config{PlanID: "live", Once: true})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	done := make(chan error, 1)
	go func() { _, err := wk.Run(ctx); done <- err }()

	_, reader := e.registered(t, e.url) // any worker token reads
	var live client.AttemptLog
	testkit.Eventually(t, 20*time.Second, "a chunk of the log while the attempt runs", func() bool {
		lg, err := reader.AttemptLog(ctx, "live", "T00", client.LogQuery{})
		if err != nil || lg.Text == "" {
			return false
		}
		live = lg
		return true
	})
	if !live.Running || !strings.Contains(live.Text, "whilly sim agent: a simulation") || strings.Contains(live.Text, agent.CompletionMarker) {
		t.Fatalf("the log read while the attempt ran: %+v", live)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	end, err := reader.AttemptLog(ctx, "live", "T00", client.LogQuery{Attempt: 1})
	if err != nil {
		t.Fatal(err)
	}
	if end.Running || end.TaskStatus != plan.StatusDone || !strings.HasPrefix(end.Text, live.Text) ||
		!strings.Contains(end.Text, "working, ") || !strings.HasSuffix(end.Text, agent.CompletionMarker+"\n") {
		t.Fatalf("the log once the attempt ended: %+v", end)
	}
	t.Logf("read %d bytes while the agent ran, %d once it had ended", len(live.Text), len(end.Text))
}

// TestAttemptLogKeepsSecretsOutAndIsCapped: a hostile agent prints the worker's token,
// the claim's push token glued to other text (no pattern sees it), a GitHub token, 3 MB of
// random bytes and 2 MB of lines, then the secrets again (within the kept window). None of the secrets reaches the database or the API;
// at most 1 MiB is stored, ending with what the agent printed last.
func TestAttemptLogKeepsSecretsOutAndIsCapped(t *testing.T) {
	t.Parallel()
	e := newRepoEnv(t)
	e.importPlan(t, "leak", 1, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	w, token, err := e.st.RegisterWorker(ctx, "test", nil)
	if err != nil {
		t.Fatal(err)
	}
	const ghp = "ghp_" + "0123456789abcdefghijABCDEFGHIJ0123456789"
	secrets := []string{token, testToken, ghp}
	script := filepath.Join(e.testDir, "leak.sh")
	writeFile(t, script, fmt.Sprintf(`#!/bin/sh
cat >/dev/null
echo "my worker token is %s"
echo "glued X%sY and %s"
echo "%s" >&2
head -c 3000000 /dev/urandom
echo
i=0; while [ $i -lt 40000 ]; do echo "line $i of a long log, padded to fifty bytes."; i=$((i+1)); done
echo "again: %s, X%sY, %s"
echo "the very end"
echo '{"result":"done <promise>COMPLETE</promise>","total_cost_usd":0,"is_error":false}'
`, token, testToken, ghp, testToken, token, testToken, ghp))
	if err := os.Chmod(script, 0o755); err != nil {
		t.Fatal(err)
	}
	sb, err := sandbox.New(sandbox.Config{Settings: sandbox.Settings{Mode: sandbox.ModeNone}})
	if err != nil {
		t.Fatal(err)
	}
	ag, err := agent.New(agent.NameCommand, agent.Config{Command: script, BaseEnv: []string{"PATH=" + os.Getenv("PATH"), "HOME=" + e.testDir}, Sandbox: sb})
	if err != nil {
		t.Fatal(err)
	}
	api, err := client.New(e.url, token, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	wk, err := worker.New(api, ag, nil, worker.Config{WorkerID: w.ID, PlanID: "leak", Drain: true, ClaimWait: time.Second,
		WorkspaceDir: e.wsDir, Git: e.git})
	if err != nil {
		t.Fatal(err)
	}
	sum, err := wk.Run(ctx)
	if err != nil || sum.Done != 1 {
		t.Fatalf("run: %+v, %v", sum, err)
	}

	var stored []byte
	var size int64
	err = e.st.Pool().QueryRow(ctx, `SELECT coalesce(string_agg(data, ''::bytea ORDER BY pos), ''::bytea),
		(SELECT size FROM attempt_logs WHERE plan_id = 'leak') FROM attempt_log_chunks WHERE plan_id = 'leak'`).Scan(&stored, &size)
	if err != nil {
		t.Fatal(err)
	}
	if len(stored) > queue.MaxAttemptLogBytes || len(stored) < 100<<10 {
		t.Errorf("%d bytes stored; want the last MiB at most, and something", len(stored))
	}
	if !bytes.Contains(stored, []byte("the very end\n")) {
		t.Errorf("the stored log lacks what the agent printed last: …%q", stored[max(len(stored)-200, 0):])
	}
	var everything string // every text column whilly wrote for the plan
	err = e.st.Pool().QueryRow(ctx, `SELECT coalesce((SELECT string_agg(payload::text || detail::text, ' ') FROM events WHERE plan_id = 'leak'), '') ||
		coalesce((SELECT string_agg(coalesce(result, '') || coalesce(last_error, ''), ' ') FROM tasks WHERE plan_id = 'leak'), '')`).Scan(&everything)
	if err != nil {
		t.Fatal(err)
	}
	reader, err := client.New(e.url, token, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	lg, err := reader.AttemptLog(ctx, "leak", "T00", client.LogQuery{})
	if err != nil {
		t.Fatal(err)
	}
	first, err := reader.AttemptLog(ctx, "leak", "T00", client.LogQuery{After: 0})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range secrets {
		for where, text := range map[string]string{"the database's log": string(stored), "events and tasks": everything, "the API": lg.Text + first.Text} {
			if strings.Contains(text, s) {
				t.Errorf("%s holds the secret %.12s…", where, s)
			}
		}
	}
	t.Logf("the agent printed %d bytes of log (%d uploaded after drops); %d kept from offset %d", size, len(stored), len(lg.Text), lg.Offset)
}

// TestAttemptLogSurvivesALostAnswer: the control plane stores a chunk but its answer is
// lost (a proxy answers 503 after forwarding it). The worker, unsure, sends that same
// chunk again — a duplicate — and goes on; it does not send a longer chunk at the same
// offset, which the control plane refuses as an overlap (and the rest of the log with it).
func TestAttemptLogSurvivesALostAnswer(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.importTasks(t, "lost", 1)
	target, err := url.Parse(e.url)
	if err != nil {
		t.Fatal(err)
	}
	var lost atomic.Int32
	proxy := httputil.NewSingleHostReverseProxy(target)
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasSuffix(r.URL.Path, "/log") || r.Method != http.MethodPost || !lost.CompareAndSwap(0, 1) {
			proxy.ServeHTTP(w, r)
			return
		}
		rec := httptest.NewRecorder()
		proxy.ServeHTTP(rec, r) // stored ...
		if rec.Code != http.StatusOK {
			t.Errorf("the first chunk was answered %d: %s", rec.Code, rec.Body)
		}
		http.Error(w, `{"error":"unavailable","message":"the answer was lost"}`, http.StatusServiceUnavailable) // ... but the worker does not hear of it
	}))
	t.Cleanup(front.Close)

	wk := e.worker(t, front.URL, agent.SimConfig{Delay: 1500 * time.Millisecond}, worker.Config{PlanID: "lost", Once: true})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := wk.Run(ctx); err != nil {
		t.Fatal(err)
	}
	if lost.Load() != 1 {
		t.Fatal("no log chunk went through the proxy")
	}
	_, reader := e.registered(t, e.url)
	end, err := reader.AttemptLog(ctx, "lost", "T00", client.LogQuery{Attempt: 1})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(end.Text, "whilly sim agent: a simulation") || !strings.HasSuffix(end.Text, agent.CompletionMarker+"\n") ||
		strings.Count(end.Text, "agent: a simulation") != 1 {
		t.Fatalf("the log after a lost answer: %q", end.Text)
	}
}

// TestLogTailRidesWithTheReport: the log of a quick attempt (the sim agent without delay
// writes its one line at the end) goes with the report that ends the attempt, COMPLETE or
// FAIL, and needs no log request of its own. The first COMPLETE's answer is lost (a proxy
// answers 503 after forwarding it): the worker sends it again, tail and all, and the log
// holds the line once.
func TestLogTailRidesWithTheReport(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.importTasks(t, "tail", 2)
	target, err := url.Parse(e.url)
	if err != nil {
		t.Fatal(err)
	}
	var logPosts, completes atomic.Int32
	proxy := httputil.NewSingleHostReverseProxy(target)
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/log") {
			logPosts.Add(1)
		}
		if r.Method != http.MethodPost || !strings.HasSuffix(r.URL.Path, "/complete") || completes.Add(1) != 1 {
			proxy.ServeHTTP(w, r)
			return
		}
		rec := httptest.NewRecorder()
		proxy.ServeHTTP(rec, r) // stored ...
		if rec.Code != http.StatusOK {
			t.Errorf("the first COMPLETE was answered %d: %s", rec.Code, rec.Body)
		}
		http.Error(w, `{"error":"unavailable","message":"the answer was lost"}`, http.StatusServiceUnavailable) // ... unheard
	}))
	t.Cleanup(front.Close)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ok := e.worker(t, front.URL, agent.SimConfig{}, worker.Config{PlanID: "tail", Once: true})
	if sum, err := ok.Run(ctx); err != nil || sum.Done != 1 {
		t.Fatalf("run: %+v, %v", sum, err)
	}
	failing := e.worker(t, front.URL, agent.SimConfig{FailRate: 1}, worker.Config{PlanID: "tail", Once: true})
	if sum, err := failing.Run(ctx); err != nil || sum.Failed != 1 {
		t.Fatalf("run: %+v, %v", sum, err)
	}
	if completes.Load() != 2 || logPosts.Load() != 0 {
		t.Fatalf("%d COMPLETE and %d log requests; want 2 (one answer lost) and none", completes.Load(), logPosts.Load())
	}
	_, reader := e.registered(t, e.url)
	for task, want := range map[string]string{"T00": agent.CompletionMarker + "\n", "T01": "simulated failure"} {
		lg, err := reader.AttemptLog(ctx, "tail", task, client.LogQuery{Attempt: 1})
		if err != nil {
			t.Fatal(err)
		}
		if lg.Running || !strings.Contains(lg.Text, want) || strings.Count(lg.Text, "whilly sim agent") != 1 {
			t.Errorf("the log of %s: %+v", task, lg)
		}
	}
}
