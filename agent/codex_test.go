//go:build unix

package agent

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/whilly-go/whilly/sandbox"
)

// The argv below was checked against the real CLI, @openai/codex (`codex --version` →
// "codex-cli 0.171.0"; the fixture was made with 0.169.0), installed with npm into a temp
// dir, HOME at an empty dir, no network. `codex exec --help` documents --json, -m/--model,
// -s/--sandbox {read-only, workspace-write, danger-full-access}, --skip-git-repo-check and
// "If not provided as an argument (or if `-` is used), instructions are read from stdin".
//
//	echo "say hi" | codex exec --json --skip-git-repo-check -s workspace-write -m gpt-5 -
//	  → prints {"type":"thread.started",…} and retries the network until killed: accepted
//	… -s workspace-writ -  → "error: invalid value 'workspace-writ' for '--sandbox <SANDBOX_MODE>'", exit 2
//	… --bogus …            → "error: unexpected argument '--bogus' found", exit 2
func TestCodexArgv(t *testing.T) {
	t.Parallel()
	if got, want := codexArgs(Config{}, Request{}), []string{"exec", "--json", "--skip-git-repo-check", "-s", "workspace-write", "-"}; !reflect.DeepEqual(got, want) {
		t.Errorf("codexArgs = %q, want %q", got, want)
	}
	budget := usd(t, "3")
	got := codexArgs(Config{}, Request{Model: "gpt-5-codex", BudgetCap: &budget})
	want := []string{"exec", "--json", "--skip-git-repo-check", "-s", "workspace-write", "-m", "gpt-5-codex", "-"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("codexArgs = %q, want %q (codex has no spending cap flag)", got, want)
	}

	dir := t.TempDir()
	cfg := testConfig()
	cfg.CodexBin = writeScript(t, dir, "codex", `printf '%s\n' "$@" > "$DIR/args"
cat > "$DIR/stdin"
echo '{"type":"item.completed","item":{"id":"item_1","type":"agent_message","text":"<promise>COMPLETE</promise>"}}'
echo '{"type":"turn.completed","usage":{"input_tokens":1,"cached_input_tokens":0,"output_tokens":1}}'
`)
	a, _ := New(NameCodex, cfg)
	res, err := a.Run(testCtx(t), Request{Prompt: "the prompt", WorkDir: dir, Model: "o3", Env: []string{"DIR=" + dir}})
	if err != nil || !res.Succeeded() {
		t.Fatalf("run: %v %q %q", err, res.Reason, res.Detail)
	}
	args, _ := os.ReadFile(filepath.Join(dir, "args"))
	if string(args) != "exec\n--json\n--skip-git-repo-check\n-s\nworkspace-write\n-m\no3\n-\n" {
		t.Errorf("argv = %q", args)
	}
	if in, _ := os.ReadFile(filepath.Join(dir, "stdin")); string(in) != "the prompt" {
		t.Errorf("stdin = %q", in)
	}
}

func TestCodexOutputs(t *testing.T) {
	t.Parallel()
	success := strings.Join([]string{
		`{"type":"thread.started","thread_id":"th-1"}`,
		`{"type":"turn.started"}`,
		`{"type":"item.completed","item":{"id":"item_0","type":"reasoning","text":"**Planning**"}}`,
		`{"type":"item.started","item":{"id":"item_1","type":"command_execution","command":"go test ./...","status":"in_progress"}}`,
		`{"type":"item.completed","item":{"id":"item_1","type":"command_execution","command":"go test ./...","aggregated_output":"ok","exit_code":0,"status":"completed"}}`,
		`{"type":"item.completed","item":{"id":"item_2","type":"agent_message","text":"Implemented it.\n<promise>COMPLETE</promise>"}}`,
		`{"type":"turn.completed","usage":{"input_tokens":1200,"cached_input_tokens":200,"output_tokens":345}}`,
	}, "\n") + "\n"
	failed := `{"type":"thread.started","thread_id":"th-2"}` + "\n" + `{"type":"turn.started"}` + "\n" +
		`{"type":"turn.failed","error":{"message":"stream error: 401 Unauthorized"}}` + "\n"
	noMarker := `{"type":"thread.started","thread_id":"th-3"}` + "\n" +
		`{"type":"item.completed","item":{"id":"item_0","type":"agent_message","text":"I need more information."}}` + "\n" +
		`{"type":"turn.completed","usage":{"input_tokens":10,"cached_input_tokens":0,"output_tokens":5}}` + "\n"

	cases := []struct {
		name   string
		stdout string
		exit   int
		want   outcome
	}{
		// Codex reports tokens; they are priced at the default model's (gpt-5-codex,
		// $1.25 / $0.125 cached / $10 per million): 1000×1.25 + 200×0.125 + 345×10 µ$.
		{"success", success, 0, outcome{complete: true, session: "th-1", turns: 1, cost: "0.004725", costReported: true}},
		{"turn failed", failed, 1, outcome{reason: ReasonAgentError, isError: true, session: "th-2", exit: 1, detailHas: "turn failed: stream error: 401 Unauthorized"}},
		// 10×1.25 + 5×10 = 62.5 µ$, rounded up.
		{"no marker", noMarker, 0, outcome{reason: ReasonNoCompletionMarker, session: "th-3", turns: 1, cost: "0.000063", costReported: true}},
		// The real CLI with no network, as captured (it was killed by timeout(1): exit 124).
		{"real: offline", "@codex-0.169.0-exec-json-offline.jsonl", 124,
			outcome{reason: ReasonAgentError, isError: true, session: "01a228cd-283a-7f12-98ff-d3bdf786399e", exit: 124, detailHas: "waiting for network"}},
		{"garbage", "panic: runtime error\n", 0, outcome{reason: ReasonMalformedOutput, detailHas: "no codex events"}},
		{"garbage with exit 2", "error: unexpected argument '--bogus' found\n", 2, outcome{reason: ReasonExitCode, exit: 2, detailHas: "exit status 2"}},
		{"empty", "", 0, outcome{reason: ReasonMalformedOutput}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			out := ""
			if strings.HasPrefix(c.stdout, "@") {
				out = fixture(t, c.stdout[1:])
			} else if c.stdout != "" {
				out = writeFile(t, dir, "stdout", c.stdout)
			}
			cfg := testConfig()
			cfg.CodexBin = fakeOutput(t, dir, "codex", out, "", c.exit)
			a, _ := New(NameCodex, cfg)
			res, err := a.Run(testCtx(t), Request{Prompt: "p", WorkDir: dir})
			if err != nil {
				t.Fatal(err)
			}
			checkOutcome(t, c.name, res, c.want)
			if c.name == "success" {
				want := Usage{InputTokens: 1200, CacheReadInputTokens: 200, OutputTokens: 345}
				if res.Usage != want {
					t.Errorf("usage = %+v, want %+v", res.Usage, want)
				}
				if !res.CostEstimated || res.PricedAs != "gpt-5-codex" {
					t.Errorf("estimated = %v, priced as %q: want an estimate at gpt-5-codex's price", res.CostEstimated, res.PricedAs)
				}
			}
			if c.want.cost == "" && (res.CostEstimated || res.PricedAs != "") {
				t.Errorf("no tokens reported, yet estimated = %v priced as %q", res.CostEstimated, res.PricedAs)
			}
		})
	}
}

// The real CLI never ends on its own without network: the timeout ends it.
func TestCodexHangIsKilledAtTimeout(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := testConfig()
	cfg.CodexBin = writeScript(t, dir, "codex", "cat "+shQuote(fixture(t, "codex-0.169.0-exec-json-offline.jsonl"))+"\nexec sleep 1000\n")
	a, _ := New(NameCodex, cfg)
	res, err := a.Run(testCtx(t), Request{Prompt: "p", WorkDir: dir, Timeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if res.Reason != ReasonTimeout || res.ExitCode != -1 {
		t.Fatalf("reason %q exit %d, want timeout", res.Reason, res.ExitCode)
	}
	if res.SessionID != "01a228cd-283a-7f12-98ff-d3bdf786399e" || !strings.Contains(res.Excerpt, "Reconnecting") {
		t.Errorf("session %q, excerpt %q: what was printed before the kill is kept", res.SessionID, res.Excerpt)
	}
}

// Inside whilly's sandbox codex is told to bypass its own (a nested sandbox that breaks
// apply_patch once bubblewrap is installed); outside it keeps workspace-write. The flag was
// checked against the real CLI: `codex exec --help` of @openai/codex lists
// --dangerously-bypass-approvals-and-sandbox ("intended solely for running in environments
// that are externally sandboxed").
func TestCodexArgvInTheSandbox(t *testing.T) {
	t.Parallel()
	sb, err := sandbox.New(sandbox.Config{Settings: sandbox.Settings{Mode: sandbox.ModeBwrap}})
	if err != nil {
		t.Skipf("bubblewrap is not installed: %v", err)
	}
	got := codexArgs(Config{Sandbox: sb}, Request{Model: "o3"})
	want := []string{"exec", "--json", "--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox", "-m", "o3", "-"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("codexArgs in the sandbox = %q, want %q", got, want)
	}
	none, _ := sandbox.New(sandbox.Config{Settings: sandbox.Settings{Mode: sandbox.ModeNone}})
	if got := codexArgs(Config{Sandbox: none}, Request{}); !reflect.DeepEqual(got[3:5], []string{"-s", "workspace-write"}) {
		t.Errorf("codexArgs with WHILLY_SANDBOX=none = %q, want -s workspace-write", got)
	}
}

// WHILLY_PRICES_FILE (Config.PricesFile) extends and overrides the built-in table; a bad
// one stops New with a sentence naming the file.
func TestCodexPricesFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	out := writeFile(t, dir, "stdout", `{"type":"item.completed","item":{"id":"i","type":"agent_message","text":"<promise>COMPLETE</promise>"}}`+"\n"+
		`{"type":"turn.completed","usage":{"input_tokens":2000000,"cached_input_tokens":1000000,"output_tokens":500000}}`+"\n"+
		`{"type":"turn.completed","usage":{"input_tokens":1000000,"cached_input_tokens":0,"output_tokens":500000}}`+"\n")
	cfg := testConfig()
	cfg.CodexBin = fakeOutput(t, dir, "codex", out, "", 0)
	cfg.PricesFile = writeFile(t, dir, "prices.json", `{"models": {"team-model": {"input": 2, "cached_input": 1, "output": 4}, "o3": {"input": 0.5, "output": 1}}}`)
	a, err := New(NameCodex, cfg)
	if err != nil {
		t.Fatal(err)
	}
	// Two turns: 3M input of which 1M cached, 1M output.
	for _, c := range []struct{ model, cost, pricedAs string }{
		{"team-model", "9", "team-model"},          // 2M×2 + 1M×1 + 1M×4
		{"o3", "2.5", "o3"},                        // overridden: cached input at the input price, 3M×0.5 + 1M×1
		{"gpt-5-mini", "2.525", "gpt-5-mini"},      // built-in kept: 2M×0.25 + 1M×0.025 + 1M×2
		{"no-such-model", "12.625", "gpt-5-codex"}, // the default's: 2M×1.25 + 1M×0.125 + 1M×10
	} {
		res, err := a.Run(testCtx(t), Request{Prompt: "p", WorkDir: dir, Model: c.model})
		if err != nil || !res.Succeeded() {
			t.Fatalf("%s: %v %q", c.model, err, res.Detail)
		}
		if res.Cost.String() != c.cost || !res.CostReported || !res.CostEstimated || res.PricedAs != c.pricedAs {
			t.Errorf("%s: cost %s reported %v estimated %v priced as %q, want %s estimated at %q's price",
				c.model, res.Cost, res.CostReported, res.CostEstimated, res.PricedAs, c.cost, c.pricedAs)
		}
	}

	cfg.PricesFile = writeFile(t, dir, "bad.json", `{"models": {"o3": {"input": 1, "outptu": 2}}}`)
	if _, err := New(NameCodex, cfg); err == nil || !strings.Contains(err.Error(), "bad.json") || !strings.Contains(err.Error(), `unknown field "outptu"`) {
		t.Errorf("New with a bad prices file = %v, want the file and the bad key named", err)
	}
}
