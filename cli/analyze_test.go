//go:build unix

package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/whilly-go/whilly/agent"
	"github.com/whilly-go/whilly/control/client"
	"github.com/whilly-go/whilly/plan"
	"github.com/whilly-go/whilly/queue"
	"github.com/whilly-go/whilly/server"
	"github.com/whilly-go/whilly/testkit"
	"github.com/whilly-go/whilly/triz"
)

const trizContradiction = `{"contradiction": true, "contradiction_type": "technical",
 "reason": "The limit must be strict per IP, yet users behind one NAT share an IP and get locked out.",
 "principle": "#3 Local quality",
 "suggestion": "Count attempts per account and per IP separately, and block only when both are high."}`

const trizPlan = `{"plan_id": "shop-auth", "project": "Shop auth", "budget_usd": 5, "tasks": [
 {"id": "AUTH-1", "priority": "high",
  "description": "Add rate limiting to the /login handler (5 attempts per minute per IP)",
  "key_files": ["app/login.go"], "acceptance_criteria": ["the 6th attempt within 60 s returns 429"],
  "test_steps": ["go test ./app -run TestLoginRateLimit"]}]}`

// claudeResultLine is a Claude Code `--output-format json` result object carrying text.
func claudeResultLine(t *testing.T, text string, cost float64) string {
	t.Helper()
	b, err := json.Marshal(map[string]any{"type": "result", "subtype": "success", "is_error": false,
		"duration_ms": 5230, "duration_api_ms": 5100, "num_turns": 1, "result": text, "stop_reason": "end_turn",
		"session_id": "4a7e0c1d-2b3f-4e5a-8c9d-0e1f2a3b4c5d", "total_cost_usd": cost,
		"usage":              map[string]any{"input_tokens": 1500, "cache_read_input_tokens": 0, "output_tokens": 200},
		"permission_denials": []any{}, "uuid": "9c8b7a6d-5e4f-4a3b-2c1d-0e9f8a7b6c5d"})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// fakeCLI writes an executable sh script into a new directory and returns its path.
func fakeCLI(t *testing.T, name, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// fakeClaudePrinting is a fake claude that reads its prompt and prints out.
func fakeClaudePrinting(t *testing.T, out string) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "out")
	if err := os.WriteFile(f, []byte(out+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return fakeCLI(t, "claude", "cat >/dev/null\ncat '"+f+"'\n")
}

// testPlane is what `whilly serve` runs (startControlPlane) with the TRIZ analyzer
// from env, on a loopback port over a test database.
type testPlane struct {
	store *queue.Store // with the extensions' hooks
	url   string
}

func startTestPlane(t *testing.T, env map[string]string) *testPlane {
	t.Helper()
	pool := testkit.DB(t)
	log := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	env["WHILLY_BOOTSTRAP_TOKEN"] = "boot-token"
	a := newApp(IO{Getenv: unboxedEnv(env)}, log)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	cp, err := a.startControlPlane(ctx, pool, ln, func(c *server.Config) {
		c.Queue.BackoffBase, c.Queue.BackoffMax = 20*time.Millisecond, 20*time.Millisecond
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := cp.Shutdown(ctx); err != nil {
			t.Errorf("shut the control plane down: %v", err)
		}
	})
	st := cp.Store()
	p, err := plan.Parse([]byte(trizPlan))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Import(ctx, p, queue.ImportOptions{}); err != nil {
		t.Fatal(err)
	}
	return &testPlane{store: st, url: "http://" + ln.Addr().String()}
}

// failFirstAttempt claims the task through the store and fails it.
func (p *testPlane) failFirstAttempt(t *testing.T) (queue.TaskInfo, queue.Worker) {
	t.Helper()
	ctx := context.Background()
	w, _, err := p.store.RegisterWorker(ctx, "host", nil)
	if err != nil {
		t.Fatal(err)
	}
	c, err := p.store.Claim(ctx, queue.ClaimRequest{WorkerID: w.ID})
	if err != nil || c == nil {
		t.Fatalf("claim: %v, %v", c, err)
	}
	ti, err := p.store.Fail(ctx, queue.Lease{PlanID: "shop-auth", TaskID: "AUTH-1", LeaseID: c.Lease.ID, WorkerID: w.ID},
		queue.FailInput{Reason: agent.ReasonVerifyFailed, Cost: 100_000})
	if err != nil {
		t.Fatalf("fail: %v", err)
	}
	return ti, w
}

// waitEvent polls the plan's events until one of type typ appears.
func (p *testPlane) waitEvent(t *testing.T, typ string, within time.Duration) (queue.Event, []queue.Event) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		evs, err := p.store.Events(context.Background(), queue.EventFilter{PlanID: "shop-auth", Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range evs {
			if e.Type == typ {
				return e, evs
			}
		}
		if time.Now().After(deadline) {
			var types []string
			for _, e := range evs {
				types = append(types, e.Type)
			}
			t.Fatalf("no %s event within %s; events: %v", typ, within, types)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func detailOf(t *testing.T, e queue.Event) map[string]any {
	t.Helper()
	var d map[string]any
	if err := json.Unmarshal(e.Detail, &d); err != nil {
		t.Fatal(err)
	}
	return d
}

func TestTrizFindingReachesTheNextAttemptsPrompt(t *testing.T) {
	t.Parallel()
	p := startTestPlane(t, map[string]string{
		"WHILLY_TRIZ_ENABLED": "1",
		"CLAUDE_BIN":          fakeClaudePrinting(t, claudeResultLine(t, trizContradiction, 0.05)),
	})
	p.failFirstAttempt(t)
	ev, evs := p.waitEvent(t, triz.EventContradiction, 30*time.Second)
	var failID int64
	for _, e := range evs {
		if e.Type == "RETRY" {
			failID = e.ID
		}
	}
	if failID == 0 || ev.ID < failID {
		t.Errorf("triz.contradiction (%d) is not after the failure (%d)", ev.ID, failID)
	}
	d := detailOf(t, ev)
	if d["contradiction_type"] != "technical" || d["reason"] == "" || !strings.Contains(fmt.Sprint(d["suggestion"]), "per account and per IP") {
		t.Errorf("detail = %v", d)
	}
	charged, _ := p.waitEvent(t, queue.EventPlanCharged, time.Second)
	var payload map[string]any
	if err := json.Unmarshal(charged.Payload, &payload); err != nil || payload["source"] != triz.ChargeSource || payload["cost_usd"] != "0.05" {
		t.Errorf("plan.charged payload = %s", charged.Payload)
	}

	// The next attempt: claimed again once its backoff ends, its prompt built as a worker builds it.
	ctx := context.Background()
	w, _, _ := p.store.RegisterWorker(ctx, "host-2", nil)
	var c *queue.Claim
	deadline := time.Now().Add(10 * time.Second)
	for c == nil {
		var err error
		if c, err = p.store.Claim(ctx, queue.ClaimRequest{WorkerID: w.ID}); err != nil {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatal("the task never became claimable again")
		}
		time.Sleep(10 * time.Millisecond)
	}
	in := agent.NewPromptInput(c.Plan.ID, c.Plan.Name, c.Task.Task(), c.Task.Attempts)
	in.PreviousError, in.TrizFinding = c.Task.LastError, c.Task.TrizFinding
	prompt, err := agent.BuildPrompt(in)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"attempt 2", "technical contradiction", "Count attempts per account and per IP separately", "#3 Local quality"} {
		if !strings.Contains(prompt, want) {
			t.Errorf("the second attempt's prompt lacks %q:\n%s", want, prompt)
		}
	}
	pi, _ := p.store.GetPlan(ctx, "shop-auth")
	if pi.Spent != plan.USD(150_000) {
		t.Errorf("spent $%s, want 0.15: the attempt's 0.1 and the analyzer's 0.05", pi.Spent)
	}
}

// A hanging analyzer is killed with its whole process group at WHILLY_TRIZ_TIMEOUT and
// gives triz.error; meanwhile the API answers: the FAIL request does not wait for the
// analysis, and no /healthz answer waits for it either.
func TestHangingAnalyzerTimesOutWhileTheAPIAnswers(t *testing.T) {
	t.Parallel()
	pids := filepath.Join(t.TempDir(), "pids")
	hang := fakeCLI(t, "claude", `cat >/dev/null
echo $$ > '`+pids+`'
sleep 1000 &
echo $! >> '`+pids+`'
sh -c 'sleep 1000 & echo $! >> "$0"; wait' '`+pids+`' &
echo $! >> '`+pids+`'
wait
`)
	p := startTestPlane(t, map[string]string{"WHILLY_TRIZ_ENABLED": "1", "CLAUDE_BIN": hang, "WHILLY_TRIZ_TIMEOUT": "2s"})
	ctx := context.Background()

	reg, err := mustClient(t, p.url, "boot-token").Register(ctx, client.RegisterRequest{Hostname: "w"})
	if err != nil {
		t.Fatal(err)
	}
	wc := mustClient(t, p.url, reg.Token)
	claim, err := wc.Claim(ctx, client.ClaimRequest{WaitSeconds: 1})
	if err != nil || claim == nil {
		t.Fatalf("claim: %v, %v", claim, err)
	}

	stop := make(chan struct{})
	lat := make(chan []time.Duration, 1)
	go func() { lat <- pollHealthz(p.url+"/healthz", stop) }()

	start := time.Now()
	if _, err := wc.Fail(ctx, "shop-auth", "AUTH-1", client.FailRequest{LeaseID: claim.Lease.ID, Reason: "exit_code"}); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("FAIL took %s: it waited for the analyzer", d)
	}
	ev, _ := p.waitEvent(t, triz.EventError, 30*time.Second)
	took := time.Since(start)
	close(stop)
	if d := detailOf(t, ev); d["reason"] != agent.ReasonTimeout {
		t.Errorf("triz.error detail = %v, want reason timeout", d)
	}
	if took < 2*time.Second {
		t.Errorf("triz.error after %s, before the 2s timeout", took)
	}

	samples := <-lat
	if len(samples) < 10 {
		t.Fatalf("only %d /healthz answers while the analyzer hung", len(samples))
	}
	// An API held up by the analyzer would answer only when it is killed, 2 s on; a
	// loaded machine may be slow, but not by half the analyzer's timeout.
	var slow []time.Duration
	var worst time.Duration
	for _, d := range samples {
		worst = max(worst, d)
		if d >= time.Second {
			slow = append(slow, d)
		}
	}
	if len(slow) > 0 {
		t.Errorf("%d of %d /healthz answers took 1 s or more (held up by the analyzer): %v", len(slow), len(samples), slow)
	}
	t.Logf("%d /healthz answers while the analyzer hung, the slowest in %s", len(samples), worst)
	assertProcessesGone(t, pids, 4)

	ti, err := p.store.GetTask(ctx, "shop-auth", "AUTH-1")
	if err != nil || ti.Status != plan.StatusPending || ti.LastError != "exit_code" {
		t.Errorf("task after the analysis: %s %q %v", ti.Status, ti.LastError, err)
	}
}

func mustClient(t *testing.T, url, token string) *client.Client {
	t.Helper()
	c, err := client.New(url, token, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// pollHealthz asks url every 20 ms until stop closes and returns each answer's latency;
// an answer other than 200 counts as a minute.
func pollHealthz(url string, stop <-chan struct{}) []time.Duration {
	var out []time.Duration
	hc := &http.Client{Timeout: 5 * time.Second}
	for {
		select {
		case <-stop:
			return out
		case <-time.After(20 * time.Millisecond):
		}
		start := time.Now()
		req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, url, nil)
		resp, err := hc.Do(req)
		d := time.Since(start)
		if err != nil {
			out = append(out, time.Minute)
			continue
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			d = time.Minute
		}
		out = append(out, d)
	}
}

// assertProcessesGone waits until every pid in the file is gone: no such process, or a
// zombie (dead, waiting for a parent that is not this test to reap it).
func assertProcessesGone(t *testing.T, pidFile string, want int) {
	t.Helper()
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, f := range strings.Fields(string(b)) {
		n, err := strconv.Atoi(f)
		if err != nil {
			t.Fatalf("bad pid %q", f)
		}
		pids = append(pids, n)
	}
	if len(pids) != want {
		t.Fatalf("%d pids recorded, want %d: %v", len(pids), want, pids)
	}
	deadline := time.Now().Add(10 * time.Second)
	for _, pid := range pids {
		for !processGone(pid) {
			if time.Now().After(deadline) {
				st, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
				t.Fatalf("process %d of the analyzer survived: %s", pid, st)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

func processGone(pid int) bool {
	if errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) {
		return true
	}
	st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	// The state follows the command name, which is in parentheses.
	s := string(st)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2] == 'Z' || s[i+2] == 'X'
	}
	return false
}

// A missing analyzer CLI or garbage from it gives triz.error, and the failure itself is
// exactly what it is with TRIZ off.
func TestTrizErrorsLeaveTheFailurePathUnchanged(t *testing.T) {
	t.Parallel()
	cases := map[string]struct {
		bin, reason string
	}{
		"missing CLI":     {filepath.Join(t.TempDir(), "no-claude"), triz.ErrorAgentNotFound},
		"garbage":         {fakeClaudePrinting(t, claudeResultLine(t, "Sorry, I could not analyze this.", 0.01)), agent.ReasonMalformedOutput},
		"not JSON at all": {fakeClaudePrinting(t, "segmentation fault (core dumped)"), agent.ReasonMalformedOutput},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			p := startTestPlane(t, map[string]string{"WHILLY_TRIZ_ENABLED": "1", "CLAUDE_BIN": c.bin, "WHILLY_TRIZ_TIMEOUT": "10"})
			ti, _ := p.failFirstAttempt(t)
			if ti.Status != plan.StatusPending || ti.Attempts != 1 || ti.LastError != agent.ReasonVerifyFailed || ti.NotBefore == nil {
				t.Errorf("the failure changed: %s attempts %d %q not_before %v", ti.Status, ti.Attempts, ti.LastError, ti.NotBefore)
			}
			ev, evs := p.waitEvent(t, triz.EventError, 30*time.Second)
			if d := detailOf(t, ev); d["reason"] != c.reason {
				t.Errorf("triz.error detail = %v, want reason %s", d, c.reason)
			}
			wantTypes, wantTask := failureWithoutTriz(t)
			if got := failureTypes(evs); got != wantTypes {
				t.Errorf("events %q, want %q as with TRIZ off", got, wantTypes)
			}
			if ti.Status != wantTask.Status || ti.Attempts != wantTask.Attempts || ti.LastError != wantTask.LastError || ti.Cost != wantTask.Cost {
				t.Errorf("task %+v, want %+v as with TRIZ off", ti, wantTask)
			}
			after, err := p.store.GetTask(context.Background(), "shop-auth", "AUTH-1")
			if err != nil || after.Status != plan.StatusPending || after.TrizFinding != "" || after.LastError != agent.ReasonVerifyFailed {
				t.Errorf("task after the analysis: %+v %v", after, err)
			}
		})
	}
}

// failureTypes lists the event types of a plan but the analyzer's own (triz.*, and the
// plan.charged of its cost).
func failureTypes(evs []queue.Event) string {
	var types []string
	for _, e := range evs {
		if !strings.HasPrefix(e.Type, "triz.") && e.Type != queue.EventPlanCharged {
			types = append(types, e.Type)
		}
	}
	return strings.Join(types, " ")
}

// failureWithoutTriz fails the same attempt on a store without TRIZ and returns its
// events' types and the task.
func failureWithoutTriz(t *testing.T) (string, queue.TaskInfo) {
	t.Helper()
	ctx := context.Background()
	st := queue.NewStore(testkit.DB(t), nil, queue.Config{BackoffBase: 20 * time.Millisecond, BackoffMax: 20 * time.Millisecond})
	pl, _ := plan.Parse([]byte(trizPlan))
	if _, err := st.Import(ctx, pl, queue.ImportOptions{}); err != nil {
		t.Fatal(err)
	}
	p := &testPlane{store: st}
	ti, _ := p.failFirstAttempt(t)
	evs, err := st.Events(ctx, queue.EventFilter{PlanID: "shop-auth"})
	if err != nil {
		t.Fatal(err)
	}
	return failureTypes(evs), ti
}
