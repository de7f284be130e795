//go:build unix

package agent

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestCommandArgv(t *testing.T) {
	t.Parallel()
	cases := []struct {
		cmd   string
		bin   string
		args  []string
		shell bool
	}{
		{"my-agent", "my-agent", []string{}, false},
		{"  /opt/agent/run  --model fast -v ", "/opt/agent/run", []string{"--model", "fast", "-v"}, false},
		{"agent --flag=value", "agent", []string{"--flag=value"}, false},
		{`agent --name "two words"`, "sh", []string{"-c", `agent --name "two words"`}, true},
		{"agent | tee log", "sh", []string{"-c", "agent | tee log"}, true},
		{"agent $HOME/x", "sh", []string{"-c", "agent $HOME/x"}, true},
		{"~/bin/agent", "sh", []string{"-c", "~/bin/agent"}, true},
		{"FOO=1 agent", "sh", []string{"-c", "FOO=1 agent"}, true},
		{"agent *.go", "sh", []string{"-c", "agent *.go"}, true},
	}
	for _, c := range cases {
		bin, args, shell := commandArgv(c.cmd)
		if bin != c.bin || !reflect.DeepEqual(args, c.args) || shell != c.shell {
			t.Errorf("commandArgv(%q) = %q %q %v, want %q %q %v", c.cmd, bin, args, shell, c.bin, c.args, c.shell)
		}
	}
}

// The command agent gets the prompt on stdin and the task in its environment, may log
// before its result line, and the shell form keeps the operator's quoting.
func TestCommandProtocol(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	script := writeScript(t, dir, "agent", `cat > "$DIR/stdin"
echo "starting task $WHILLY_TASK_ID of $WHILLY_PLAN_ID, attempt $WHILLY_ATTEMPT"
echo '{"note": "an earlier object line does not count"}'
printf '{"result": "%s: %s <promise>COMPLETE</promise>", "total_cost_usd": 0.0105, "is_error": false, "session_id": "c-1", "num_turns": 2}\n' "$WHILLY_TASK_ID" "$1"
`)
	for _, cmdline := range []string{script + " arg", script + ` "arg"`} {
		cfg := testConfig()
		cfg.Command = cmdline
		a, err := New(NameCommand, cfg)
		if err != nil {
			t.Fatal(err)
		}
		res, err := a.Run(testCtx(t), Request{Prompt: "prompt text\n", WorkDir: dir,
			Env: []string{"DIR=" + dir, "WHILLY_TASK_ID=T-9", "WHILLY_PLAN_ID=p-1", "WHILLY_ATTEMPT=1"}})
		if err != nil {
			t.Fatal(err)
		}
		checkOutcome(t, cmdline, res, outcome{complete: true, cost: "0.0105", costReported: true, session: "c-1", turns: 2})
		if res.Text != "T-9: arg <promise>COMPLETE</promise>" {
			t.Errorf("%s: text = %q", cmdline, res.Text)
		}
		if in, _ := os.ReadFile(filepath.Join(dir, "stdin")); string(in) != "prompt text\n" {
			t.Errorf("stdin = %q", in)
		}
	}
}

func TestCommandOutputs(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		stdout string
		exit   int
		want   outcome
	}{
		{"success", `{"result": "<promise>COMPLETE</promise>", "total_cost_usd": 0.01, "is_error": false}`, 0,
			outcome{complete: true, cost: "0.01", costReported: true}},
		{"pretty-printed object", "{\n  \"result\": \"<promise>COMPLETE</promise>\",\n  \"total_cost_usd\": 0.02,\n  \"is_error\": false\n}\n", 0,
			outcome{complete: true, cost: "0.02", costReported: true}},
		{"last object line wins", `{"result": "<promise>COMPLETE</promise>", "total_cost_usd": 0.01, "is_error": false}` + "\nlog line\n" +
			`{"result": "gave up", "total_cost_usd": 0.03, "is_error": true}`, 0,
			outcome{reason: ReasonAgentError, isError: true, cost: "0.03", costReported: true, detailHas: "gave up"}},
		{"failed run still reports its cost", `{"result": "tests fail", "total_cost_usd": 0.02, "is_error": true}`, 1,
			outcome{reason: ReasonAgentError, isError: true, cost: "0.02", costReported: true, exit: 1, detailHas: "tests fail"}},
		{"no cost field", `{"result": "<promise>COMPLETE</promise>", "is_error": false}`, 0, outcome{complete: true}},
		{"claude result passed through", successLine, 0, outcome{complete: true, cost: "0.0123", costReported: true, session: "s-1", turns: 3}},
		{"no result field", `{"total_cost_usd": 0.01, "is_error": false}`, 0, outcome{reason: ReasonMalformedOutput, detailHas: `no "result" field`}},
		{"negative cost", `{"result": "x", "total_cost_usd": -0.5, "is_error": false}`, 0, outcome{reason: ReasonMalformedOutput, detailHas: "negative"}},
		{"cost as a string", `{"result": "x", "total_cost_usd": "0.5", "is_error": false}`, 0, outcome{reason: ReasonMalformedOutput, detailHas: "decode result object"}},
		{"garbage", "all done!\n", 0, outcome{reason: ReasonMalformedOutput, detailHas: "no JSON object"}},
		{"empty", "", 0, outcome{reason: ReasonMalformedOutput}},
		{"garbage and exit 3", "boom\n", 3, outcome{reason: ReasonExitCode, exit: 3, detailHas: "exit status 3"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			out := ""
			if c.stdout != "" {
				out = writeFile(t, dir, "stdout", c.stdout)
			}
			cfg := testConfig()
			cfg.Command = fakeOutput(t, dir, "agent", out, "", c.exit)
			a, _ := New(NameCommand, cfg)
			res, err := a.Run(testCtx(t), Request{Prompt: "p", WorkDir: dir})
			if err != nil {
				t.Fatal(err)
			}
			checkOutcome(t, c.name, res, c.want)
		})
	}
}

func TestNew(t *testing.T) {
	t.Parallel()
	for _, name := range []string{NameClaude, NameCodex, NameSim} {
		a, err := New(name, Config{})
		if err != nil || a.Name() != name {
			t.Errorf("New(%q) = %v, %v", name, a, err)
		}
	}
	if a, err := New(NameCommand, Config{Command: "x"}); err != nil || a.Name() != NameCommand {
		t.Errorf("New(command) = %v, %v", a, err)
	}
	_, err := New("gpt", Config{})
	if err == nil || !strings.Contains(err.Error(), `unknown agent "gpt" (valid: claude, codex, command, sim)`) {
		t.Errorf("unknown name: %v", err)
	}
	if _, err := New(NameCommand, Config{Command: "  "}); err == nil || !strings.Contains(err.Error(), "WHILLY_AGENT_CMD") {
		t.Errorf("empty command: %v", err)
	}
	if _, err := New(NameSim, Config{Sim: SimConfig{FailRate: 1.5}}); err == nil {
		t.Error("sim with fail rate 1.5 accepted")
	}
}
