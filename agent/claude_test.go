//go:build unix

package agent

import (
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/whilly-go/whilly/plan"
	"github.com/whilly-go/whilly/sandbox"
)

func usd(t testing.TB, s string) plan.USD {
	t.Helper()
	u, err := plan.ParseUSD(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// The argv below was checked against the real CLI, @anthropic-ai/claude-code@2.1.328
// (`claude --version` → "2.1.328 (Claude Code)"), installed with npm into a temp dir, HOME
// pointing at an empty dir, no API key, no network:
//
//	echo "say hi" | claude -p --output-format json --permission-mode acceptEdits --model sonnet --max-budget-usd 1.5
//	  → exit 1 with the "Not logged in" result object on stdout: every flag and value accepted
//	echo … | claude -p … --bogus-flag              → "error: unknown option '--bogus-flag'", exit 1
//	echo … | claude -p … --permission-mode acceptEdit → "argument 'acceptEdit' is invalid. Allowed choices are
//	  acceptEdits, auto, bypassPermissions, manual, dontAsk, plan"
//	echo … | claude -p … --max-budget-usd 0       → "--max-budget-usd must be a number greater than 0"
//	  (so a cap of zero or less never reaches argv: the run is refused as budget_exceeded instead)
//	echo … | claude -p … --max-budget-usd 0.000001 → accepted (one micro-dollar, the smallest plan.USD)
//	echo … | claude -p --output-format stream-json → "requires --verbose" (so json is used, not stream-json)
//	echo "" | claude -p --output-format json      → "Input contained only whitespace" (the prompt is on stdin)
//
// The result subtypes (success, error_during_execution, error_max_turns,
// error_max_budget_usd, error_max_structured_output_retries) and the "errors" array of
// error results were read from the schema inside the same binary.
func TestClaudeArgv(t *testing.T) {
	t.Parallel()
	cap15 := usd(t, "1.5")
	tiny := plan.USD(1)
	cfg := Config{}.withDefaults()
	cases := []struct {
		req  Request
		want []string
	}{
		{Request{}, []string{"-p", "--output-format", "json", "--permission-mode", "acceptEdits"}},
		{Request{Model: "sonnet", BudgetCap: &cap15},
			[]string{"-p", "--output-format", "json", "--permission-mode", "acceptEdits", "--model", "sonnet", "--max-budget-usd", "1.5"}},
		{Request{BudgetCap: &tiny},
			[]string{"-p", "--output-format", "json", "--permission-mode", "acceptEdits", "--max-budget-usd", "0.000001"}},
	}
	for _, c := range cases {
		if got := claudeArgs(cfg, c.req); !reflect.DeepEqual(got, c.want) {
			t.Errorf("claudeArgs(%+v) = %q, want %q", c.req, got, c.want)
		}
	}
}

// The fake claude records its argv and stdin: what the real process gets.
func TestClaudeGetsArgvAndPromptOnStdin(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := testConfig()
	cfg.ClaudeBin = writeScript(t, dir, "claude", `printf '%s\n' "$@" > "$DIR/args"
cat > "$DIR/stdin"
printf '%s\n' `+shQuote(successLine)+"\n")
	a, _ := New(NameClaude, cfg)
	budgetCap := usd(t, "2.25")
	prompt := "do the task\nwith 'quotes' and $dollars\n"
	res, err := a.Run(testCtx(t), Request{Prompt: prompt, WorkDir: dir, Model: "opus", BudgetCap: &budgetCap, Env: []string{"DIR=" + dir}})
	if err != nil || !res.Succeeded() {
		t.Fatalf("run: %v %q %q", err, res.Reason, res.Detail)
	}
	args, _ := os.ReadFile(filepath.Join(dir, "args"))
	want := "-p\n--output-format\njson\n--permission-mode\nacceptEdits\n--model\nopus\n--max-budget-usd\n2.25\n"
	if string(args) != want {
		t.Errorf("argv = %q, want %q", args, want)
	}
	if in, _ := os.ReadFile(filepath.Join(dir, "stdin")); string(in) != prompt {
		t.Errorf("stdin = %q, want the prompt", in)
	}
}

type outcome struct {
	reason       string
	complete     bool
	isError      bool
	cost         string
	costReported bool
	session      string
	turns        int
	exit         int
	detailHas    string
}

func checkOutcome(t *testing.T, name string, res Result, w outcome) {
	t.Helper()
	if res.Reason != w.reason {
		t.Errorf("%s: reason = %q (detail %q), want %q", name, res.Reason, res.Detail, w.reason)
	}
	if res.Succeeded() != (w.reason == "") {
		t.Errorf("%s: Succeeded() = %v", name, res.Succeeded())
	}
	if res.Complete != w.complete || res.IsError != w.isError {
		t.Errorf("%s: complete=%v isError=%v, want %v %v", name, res.Complete, res.IsError, w.complete, w.isError)
	}
	wantCost := plan.USD(0)
	if w.cost != "" {
		wantCost = usd(t, w.cost)
	}
	if res.Cost != wantCost || res.CostReported != w.costReported {
		t.Errorf("%s: cost = %s reported=%v, want %s %v", name, res.Cost, res.CostReported, wantCost, w.costReported)
	}
	if res.SessionID != w.session || res.Turns != w.turns {
		t.Errorf("%s: session %q turns %d, want %q %d", name, res.SessionID, res.Turns, w.session, w.turns)
	}
	if res.ExitCode != w.exit {
		t.Errorf("%s: exit code %d, want %d", name, res.ExitCode, w.exit)
	}
	if !strings.Contains(res.Detail, w.detailHas) {
		t.Errorf("%s: detail %q lacks %q", name, res.Detail, w.detailHas)
	}
	if len(res.Excerpt) > MaxExcerptBytes || len(res.Detail) > maxDetailBytes {
		t.Errorf("%s: excerpt %d / detail %d bytes over their bounds", name, len(res.Excerpt), len(res.Detail))
	}
}

// fakeOutput writes a fake agent that prints stdoutFile (and stderr text) and exits.
func fakeOutput(t *testing.T, dir, name, stdoutFile, stderr string, exit int) string {
	body := "cat >/dev/null\n"
	if stdoutFile != "" {
		body += "cat " + shQuote(stdoutFile) + "\n"
	}
	if stderr != "" {
		body += "printf '%s\\n' " + shQuote(stderr) + " >&2\n"
	}
	body += "exit " + strconv.Itoa(exit) + "\n"
	return writeScript(t, dir, name, body)
}

func TestClaudeOutputs(t *testing.T) {
	t.Parallel()
	arrayForm := `[{"type":"system","subtype":"init","session_id":"s-2"},` +
		`{"type":"assistant","message":{"content":[{"type":"text","text":"working"}]},"session_id":"s-2"},` +
		`{"type":"result","subtype":"success","is_error":false,"result":"Done.\n<promise>COMPLETE</promise>","session_id":"s-2","num_turns":2,"total_cost_usd":1.5}]`
	prettyArray := "[\n  {\"type\": \"system\", \"subtype\": \"init\"},\n  {\n    \"type\": \"result\",\n    \"subtype\": \"success\",\n    \"is_error\": false,\n    \"result\": \"<promise>COMPLETE</promise>\",\n    \"session_id\": \"s-4\",\n    \"num_turns\": 1,\n    \"total_cost_usd\": 0.25\n  }\n]\n"
	streamForm := `{"type":"system","subtype":"init","session_id":"s-5"}` + "\n" +
		`{"type":"assistant","message":{"content":[{"type":"text","text":"<promise>COMPLETE</promise> in a message, not the result"}]}}` + "\n" +
		`{"type":"result","subtype":"success","is_error":false,"result":"Finished. <promise>COMPLETE</promise>","session_id":"s-5","num_turns":4,"total_cost_usd":0.0200004}` + "\n"
	budget := `{"type":"result","subtype":"error_max_budget_usd","duration_ms":5000,"duration_api_ms":4000,"is_error":true,"num_turns":7,"stop_reason":null,"total_cost_usd":0.5123,"usage":{"input_tokens":1},"modelUsage":{},"permission_denials":[],"errors":["Reached maximum budget ($0.5)"],"session_id":"s-3","uuid":"u"}`
	maxTurns := `{"type":"result","subtype":"error_max_turns","is_error":true,"num_turns":30,"total_cost_usd":0.9,"errors":["Reached maximum number of turns (30)"],"session_id":"s-6"}`
	during := `{"type":"result","subtype":"error_during_execution","is_error":true,"num_turns":2,"total_cost_usd":0.01,"errors":["tool crashed"],"session_id":"s-7"}`
	noMarker := `{"type":"result","subtype":"success","is_error":false,"result":"I could not make the tests pass.","session_id":"s-8","num_turns":5,"total_cost_usd":0.3}`

	cases := []struct {
		name   string
		stdout string // literal output; "@file" is a shared fixture
		stderr string
		exit   int
		want   outcome
	}{
		{"success object", successLine, "", 0, outcome{complete: true, cost: "0.0123", costReported: true, session: "s-1", turns: 3}},
		{"success array", arrayForm, "", 0, outcome{complete: true, cost: "1.5", costReported: true, session: "s-2", turns: 2}},
		{"success pretty array", prettyArray, "", 0, outcome{complete: true, cost: "0.25", costReported: true, session: "s-4", turns: 1}},
		{"success stream-json", streamForm, "", 0, outcome{complete: true, cost: "0.02", costReported: true, session: "s-5", turns: 4}},
		{"warning line before the object", "Warning: config ignored\n" + successLine, "", 0, outcome{complete: true, cost: "0.0123", costReported: true, session: "s-1", turns: 3}},
		{"no completion marker", noMarker, "", 0, outcome{reason: ReasonNoCompletionMarker, cost: "0.3", costReported: true, session: "s-8", turns: 5, detailHas: CompletionMarker}},
		{"budget exceeded", budget, "", 1, outcome{reason: ReasonBudgetExceeded, isError: true, cost: "0.5123", costReported: true, session: "s-3", turns: 7, exit: 1, detailHas: "Reached maximum budget ($0.5)"}},
		{"max turns", maxTurns, "", 1, outcome{reason: ReasonMaxTurns, isError: true, cost: "0.9", costReported: true, session: "s-6", turns: 30, exit: 1, detailHas: "maximum number of turns"}},
		{"error during execution", during, "", 1, outcome{reason: ReasonAgentError, isError: true, cost: "0.01", costReported: true, session: "s-7", turns: 2, exit: 1, detailHas: "error_during_execution: tool crashed"}},
		{"real: not logged in, json", "@claude-2.1.328-json-not-logged-in.json", "", 1,
			outcome{reason: ReasonAgentError, isError: true, cost: "0", costReported: true, session: "846963f1-331f-4027-93cb-bc7bfbead782", turns: 1, exit: 1, detailHas: "Not logged in"}},
		{"real: not logged in, stream-json", "@claude-2.1.328-stream-json-not-logged-in.jsonl", "", 1,
			outcome{reason: ReasonAgentError, isError: true, cost: "0", costReported: true, session: "6d969e57-447b-4ed3-bfd7-69180c13f705", turns: 1, exit: 1, detailHas: "Not logged in"}},
		{"success object but exit 2", successLine, "", 2, outcome{reason: ReasonExitCode, complete: true, cost: "0.0123", costReported: true, session: "s-1", turns: 3, exit: 2, detailHas: "exit status 2"}},
		{"garbage", "Segmentation fault (core dumped)\n{not json", "", 0, outcome{reason: ReasonMalformedOutput, detailHas: "no claude result message"}},
		{"garbage with exit 1", "", "error: unknown option '--bogus'", 1, outcome{reason: ReasonExitCode, exit: 1, detailHas: "unknown option '--bogus'"}},
		{"empty output", "", "", 0, outcome{reason: ReasonMalformedOutput, detailHas: "no claude result message in 0 bytes"}},
		{"result of the wrong shape", `{"type":"result","num_turns":"three"}`, "", 0, outcome{reason: ReasonMalformedOutput, detailHas: "decode claude result"}},
		{"negative cost", `{"type":"result","subtype":"success","result":"<promise>COMPLETE</promise>","total_cost_usd":-1}`, "", 0, outcome{reason: ReasonMalformedOutput, detailHas: "negative"}},
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
			cfg.ClaudeBin = fakeOutput(t, dir, "claude", out, c.stderr, c.exit)
			a, _ := New(NameClaude, cfg)
			res, err := a.Run(testCtx(t), Request{Prompt: "p", WorkDir: dir})
			if err != nil {
				t.Fatal(err)
			}
			checkOutcome(t, c.name, res, c.want)
			if c.want.reason != "" && res.Excerpt == "" && (c.stdout != "" || c.stderr != "") {
				t.Errorf("failed run without an excerpt")
			}
		})
	}
}

func TestClaudeHangIsKilledAtTimeout(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := testConfig()
	// Like the real CLI with a key and no network: it starts, prints its init line and
	// retries forever.
	cfg.ClaudeBin = writeScript(t, dir, "claude", `head -n 1 `+shQuote(fixture(t, "claude-2.1.328-stream-json-not-logged-in.jsonl"))+`
exec sleep 1000
`)
	a, _ := New(NameClaude, cfg)
	res, err := a.Run(testCtx(t), Request{Prompt: "p", WorkDir: dir, Timeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if res.Reason != ReasonTimeout || res.ExitCode != -1 || res.Succeeded() {
		t.Fatalf("reason %q exit %d, want timeout and -1", res.Reason, res.ExitCode)
	}
	if !strings.Contains(res.Detail, "300ms timeout") || !strings.Contains(res.Excerpt, `"type":"system"`) {
		t.Errorf("detail %q / excerpt %q", res.Detail, res.Excerpt)
	}
}

// A cap of zero or less means the plan has nothing left: the agent is not started (the
// executable does not even exist here) and the run fails with budget_exceeded.
func TestNoBudgetLeftDoesNotStart(t *testing.T) {
	t.Parallel()
	zero := plan.USD(0)
	cfg := testConfig()
	cfg.ClaudeBin, cfg.CodexBin, cfg.Command = "/nonexistent/claude", "/nonexistent/codex", "/nonexistent/cmd"
	for _, name := range Names() {
		a, err := New(name, cfg)
		if err != nil {
			t.Fatal(err)
		}
		res, err := a.Run(testCtx(t), Request{Prompt: "p", BudgetCap: &zero})
		if err != nil || res.Reason != ReasonBudgetExceeded || res.Cost != 0 {
			t.Errorf("%s: err %v reason %q cost %s", name, err, res.Reason, res.Cost)
		}
	}
}

// Inside the sandbox Claude Code gets a full shell (bypassPermissions); with the opt-out
// or no box it keeps acceptEdits; an explicit mode (the planner's dontAsk) wins in both.
func TestClaudePermissionModeFollowsTheSandbox(t *testing.T) {
	t.Parallel()
	sb, err := sandbox.New(sandbox.Config{Settings: sandbox.Settings{Mode: sandbox.ModeBwrap}})
	if err != nil {
		t.Skipf("bubblewrap is not installed: %v", err)
	}
	none, _ := sandbox.New(sandbox.Config{Settings: sandbox.Settings{Mode: sandbox.ModeNone}})
	cases := []struct {
		cfg  Config
		want string
	}{
		{Config{Sandbox: sb}, "bypassPermissions"},
		{Config{Sandbox: none}, "acceptEdits"},
		{Config{}, "acceptEdits"},
		{Config{Sandbox: sb, PermissionMode: QuestionPermissionMode}, QuestionPermissionMode},
	}
	for _, c := range cases {
		if got := claudeArgs(c.cfg, Request{})[4]; got != c.want {
			t.Errorf("sandbox %s, mode %q: --permission-mode %s, want %s", c.cfg.Sandbox.Mode(), c.cfg.PermissionMode, got, c.want)
		}
	}
}

// Claude Code's permission_denials reach the Result, bounded and redacted.
func TestClaudePermissionDenials(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	line := `{"type":"result","subtype":"success","is_error":false,"result":"<promise>COMPLETE</promise>","total_cost_usd":0.01,` +
		`"permission_denials":[{"tool_name":"Bash","tool_use_id":"t1","tool_input":{"command":"curl -H 'Authorization: Bearer ghp_abcdefghijklmnopqrstuvwxyz0123456789' x"}}]}`
	cfg := testConfig()
	cfg.ClaudeBin = fakeOutput(t, dir, "claude", writeFile(t, dir, "out", line), "", 0)
	a, _ := New(NameClaude, cfg)
	res, err := a.Run(testCtx(t), Request{Prompt: "p", WorkDir: dir})
	if err != nil || !res.Succeeded() {
		t.Fatalf("run: %v %q", err, res.Reason)
	}
	if len(res.PermissionDenials) != 1 || !strings.Contains(string(res.PermissionDenials[0]), `"tool_name":"Bash"`) ||
		strings.Contains(string(res.PermissionDenials[0]), "ghp_abcdefghij") {
		t.Errorf("permission denials = %s", res.PermissionDenials)
	}
}
