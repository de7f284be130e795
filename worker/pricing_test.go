//go:build unix

package worker_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/whilly-go/whilly/agent"
	"github.com/whilly-go/whilly/plan"
	"github.com/whilly-go/whilly/queue"
	"github.com/whilly-go/whilly/worker"
)

// fakeCodex prints what `codex exec --json` prints: T00 finishes its turn with the
// completion marker, T01 without it; both report tokens.
const fakeCodex = `#!/bin/sh
cat > /dev/null
echo '{"type":"thread.started","thread_id":"th-'"$WHILLY_TASK_ID"'"}'
if [ "$WHILLY_TASK_ID" = T00 ]; then
  echo '{"type":"item.completed","item":{"id":"i","type":"agent_message","text":"done <promise>COMPLETE</promise>"}}'
  echo '{"type":"turn.completed","usage":{"input_tokens":1200000,"cached_input_tokens":200000,"output_tokens":100000}}'
else
  echo '{"type":"item.completed","item":{"id":"i","type":"agent_message","text":"I could not."}}'
  echo '{"type":"turn.completed","usage":{"input_tokens":1000000,"cached_input_tokens":0,"output_tokens":500000}}'
fi
`

// Codex reports tokens, not dollars: the worker charges their price (the prices file's
// for its model) to the plan's budget, and the COMPLETE and FAIL events, stored by the
// control plane, mark that cost estimated; the agent.attempt event records the tokens.
func TestCodexTokensArePricedAndMarkedEstimated(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	dir := t.TempDir()
	bin := filepath.Join(dir, "codex")
	if err := os.WriteFile(bin, []byte(fakeCodex), 0o700); err != nil { // #nosec G306 -- an executable for the test
		t.Fatal(err)
	}
	pricesFile := filepath.Join(dir, "prices.json")
	if err := os.WriteFile(pricesFile, []byte(`{"models": {"team-model": {"input": 2, "cached_input": 1, "output": 4}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	p := &plan.Plan{ID: "codex", Name: "codex"}
	for _, id := range []string{"T00", "T01"} {
		p.Tasks = append(p.Tasks, plan.Task{ID: id, Priority: plan.PriorityMedium, MaxAttempts: 1,
			Description: "A task long enough for the gate", AcceptanceCriteria: []string{"ok"}, TestSteps: []string{"true"}})
	}
	if _, err := e.st.Import(context.Background(), p, queue.ImportOptions{}); err != nil {
		t.Fatal(err)
	}
	w, api := e.registered(t, e.url)
	ag, err := agent.New(agent.NameCodex, agent.Config{CodexBin: bin, PricesFile: pricesFile})
	if err != nil {
		t.Fatal(err)
	}
	wk, err := worker.New(api, ag, nil, worker.Config{WorkerID: w.ID, PlanID: "codex", Drain: true, ClaimWait: time.Second,
		WorkDir: t.TempDir(), Model: "team-model"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if sum, err := wk.Run(ctx); err != nil || sum.Done != 1 || sum.Failed != 1 {
		t.Fatalf("run: %+v %v, want one done and one failed", sum, err)
	}

	// T00: 1M uncached × $2 + 0.2M cached × $1 + 0.1M output × $4 = $2.6.
	// T01: 1M × $2 + 0.5M × $4 = $4.
	evs, err := e.st.Events(context.Background(), queue.EventFilter{PlanID: "codex"})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]struct {
		ended, cost string
		usage       agent.Usage
	}{
		"T00": {"COMPLETE", "2.6", agent.Usage{InputTokens: 1_200_000, CacheReadInputTokens: 200_000, OutputTokens: 100_000}},
		"T01": {"FAIL", "4", agent.Usage{InputTokens: 1_000_000, OutputTokens: 500_000}},
	}
	seen := map[string]int{}
	for _, ev := range evs {
		w, ok := want[ev.TaskID]
		if !ok {
			continue
		}
		var pl struct {
			Cost      string      `json:"cost_usd"`
			Estimated bool        `json:"cost_estimated"`
			PricedAs  string      `json:"priced_as"`
			Model     string      `json:"model"`
			Usage     agent.Usage `json:"usage"`
		}
		if err := json.Unmarshal(ev.Payload, &pl); err != nil {
			t.Fatal(err)
		}
		switch ev.Type {
		case w.ended:
			seen[ev.TaskID+" "+ev.Type]++
			if pl.Cost != w.cost || !pl.Estimated {
				t.Errorf("%s %s: payload %s, want cost_usd %s marked cost_estimated", ev.TaskID, ev.Type, ev.Payload, w.cost)
			}
		case worker.EventAttempt:
			seen[ev.TaskID+" "+ev.Type]++
			if pl.Usage != w.usage || pl.Cost != w.cost || !pl.Estimated || pl.PricedAs != "team-model" || pl.Model != "team-model" {
				t.Errorf("%s agent.attempt: payload %s, want usage %+v, cost %s estimated at team-model's price", ev.TaskID, ev.Payload, w.usage, w.cost)
			}
		}
	}
	if len(seen) != 4 {
		t.Errorf("events seen %v, want a COMPLETE, a FAIL and two agent.attempt", seen)
	}
	pi, err := e.st.GetPlan(context.Background(), "codex")
	if err != nil || pi.Spent.String() != "6.6" {
		t.Errorf("plan spent %s (%v), want the estimates charged: 6.6", pi.Spent, err)
	}
}

// Claude Code reports USD itself: the agent.attempt event records its tokens and cost,
// and nothing is marked estimated.
func TestClaudeTokensAreRecorded(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	dir := t.TempDir()
	bin := filepath.Join(dir, "claude")
	script := "#!/bin/sh\ncat > /dev/null\necho '" + `{"type":"result","subtype":"success","is_error":false,"result":"Done <promise>COMPLETE</promise>","session_id":"s","num_turns":2,"total_cost_usd":0.125,"usage":{"input_tokens":3000,"output_tokens":700,"cache_read_input_tokens":50000,"cache_creation_input_tokens":4000}}` + "'\n"
	if err := os.WriteFile(bin, []byte(script), 0o700); err != nil { // #nosec G306 -- an executable for the test
		t.Fatal(err)
	}
	e.importTasks(t, "claude", 1)
	w, api := e.registered(t, e.url)
	ag, err := agent.New(agent.NameClaude, agent.Config{ClaudeBin: bin})
	if err != nil {
		t.Fatal(err)
	}
	wk, err := worker.New(api, ag, nil, worker.Config{WorkerID: w.ID, PlanID: "claude", Drain: true, ClaimWait: time.Second, WorkDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if sum, err := wk.Run(ctx); err != nil || sum.Done != 1 {
		t.Fatalf("run: %+v %v", sum, err)
	}
	evs, err := e.st.Events(context.Background(), queue.EventFilter{PlanID: "claude"})
	if err != nil {
		t.Fatal(err)
	}
	want := agent.Usage{InputTokens: 3000, OutputTokens: 700, CacheReadInputTokens: 50000, CacheCreationInputTokens: 4000}
	var found int
	for _, ev := range evs {
		var pl map[string]json.RawMessage
		if err := json.Unmarshal(ev.Payload, &pl); err != nil {
			t.Fatal(err)
		}
		if _, ok := pl["cost_estimated"]; ok {
			t.Errorf("%s: a cost claude reported is marked estimated: %s", ev.Type, ev.Payload)
		}
		if ev.Type != worker.EventAttempt {
			continue
		}
		found++
		var u agent.Usage
		if err := json.Unmarshal(pl["usage"], &u); err != nil || u != want || string(pl["cost_usd"]) != `"0.125"` {
			t.Errorf("agent.attempt %s: want usage %+v and cost_usd 0.125", ev.Payload, want)
		}
	}
	if found != 1 {
		t.Errorf("%d agent.attempt events, want 1", found)
	}
}

// A bad WHILLY_PRICES_FILE stops whilly-worker at start-up: exit 2, one sentence naming
// the variable, the file and what is wrong in it, before it registers.
func TestWorkerBadPricesFileExits2(t *testing.T) {
	t.Parallel()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(t.TempDir(), "prices.json")
	if err := os.WriteFile(bad, []byte(`{"models": {"gpt-5-codex": {"input": 1.25, "output": "ten"}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, exe, workerMainArg, "--connect", "http://127.0.0.1:1", "--once")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "WHILLY_BOOTSTRAP_TOKEN=boot",
		"WHILLY_AGENT=codex", "WHILLY_SANDBOX=none", "WHILLY_PRICES_FILE=" + bad}
	out, _ := cmd.CombinedOutput()
	if code := cmd.ProcessState.ExitCode(); code != 2 || !strings.Contains(string(out), "WHILLY_PRICES_FILE") ||
		!strings.Contains(string(out), bad) || !strings.Contains(string(out), `"ten"`) {
		t.Errorf("exit %d, output %q: want exit 2 naming WHILLY_PRICES_FILE, the file and the bad value", code, out)
	}
}
