// Package action_test runs the steps of the whilly GitHub Action (action.yml, run.sh)
// on this machine, the way a runner would, against a real control plane.
package action_test

import (
	"bufio"
	"context"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/whilly-go/whilly/control"
	"github.com/whilly-go/whilly/plan"
	"github.com/whilly-go/whilly/queue"
	"github.com/whilly-go/whilly/testkit"
)

// step is one step of the composite action.
type step struct {
	name, id, uses, run string
	with, env           map[string]string
}

// metadata is what the test reads of action.yml.
type metadata struct {
	inputs   map[string]string // name → default
	required map[string]bool
	outputs  map[string]string // name → value expression
	using    string
	steps    []step
}

// parseAction reads action.yml. It is not a YAML parser: it reads the block-style
// subset this file is written in (two-space indents, one scalar per line), and fails on
// anything else, so the file stays in that subset.
func parseAction(t *testing.T, path string) metadata {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	md := metadata{inputs: map[string]string{}, required: map[string]bool{}, outputs: map[string]string{}}
	var (
		section, item, sub string
		cur                *step
	)
	line := regexp.MustCompile(`^( *)(- )?([A-Za-z0-9_-]+):(?: (.*))?$`)
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		text := sc.Text()
		if strings.TrimSpace(text) == "" || strings.HasPrefix(strings.TrimSpace(text), "#") {
			continue
		}
		m := line.FindStringSubmatch(text)
		if m == nil {
			t.Fatalf("action.yml:%d: not in the subset the test reads: %q", n, text)
		}
		indent, dash, key, value := len(m[1]), m[2] != "", m[3], unquote(m[4])
		switch {
		case indent == 0:
			section, item = key, ""
		case section == "inputs" && indent == 2:
			item = key
			md.inputs[key] = ""
		case section == "inputs" && indent == 4 && key == "default":
			md.inputs[item] = value
		case section == "inputs" && indent == 4 && key == "required":
			md.required[item] = value == "true"
		case section == "outputs" && indent == 2:
			item = key
		case section == "outputs" && indent == 4 && key == "value":
			md.outputs[item] = value
		case section == "runs" && indent == 2 && key == "using":
			md.using = value
		case section == "runs" && indent == 4 && dash:
			md.steps = append(md.steps, step{with: map[string]string{}, env: map[string]string{}})
			cur = &md.steps[len(md.steps)-1]
			fallthrough
		case section == "runs" && indent == 6 && cur != nil:
			sub = key
			switch key {
			case "name":
				cur.name = value
			case "id":
				cur.id = value
			case "uses":
				cur.uses = value
			case "run":
				cur.run = value
			}
		case section == "runs" && indent == 8 && cur != nil && sub == "with":
			cur.with[key] = value
		case section == "runs" && indent == 8 && cur != nil && sub == "env":
			cur.env[key] = value
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return md
}

func unquote(s string) string {
	s = strings.TrimSpace(s)
	if len(s) >= 2 && s[0] == '\'' && s[len(s)-1] == '\'' {
		return strings.ReplaceAll(s[1:len(s)-1], "''", "'")
	}
	if len(s) >= 2 && s[0] == '"' && s[len(s)-1] == '"' {
		return s[1 : len(s)-1]
	}
	return s
}

var inputExpr = regexp.MustCompile(`^\$\{\{ inputs\.([a-z0-9-]+) \}\}$`)

// runStep runs a `run:` step as the runner does: bash, GITHUB_ACTION_PATH set, the
// step's env with the inputs substituted. The machine's WHILLY_* variables are left out.
func runStep(t *testing.T, md metadata, s step, inputs map[string]string, extra []string) (string, error) {
	t.Helper()
	actionDir, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "WHILLY_") && !strings.HasPrefix(kv, "GITHUB_") {
			env = append(env, kv)
		}
	}
	env = append(env, "GITHUB_ACTION_PATH="+actionDir)
	for k, v := range s.env {
		m := inputExpr.FindStringSubmatch(v)
		if m == nil {
			t.Fatalf("step %q: env %s = %q is not an input", s.name, k, v)
		}
		def, ok := md.inputs[m[1]]
		if !ok {
			t.Fatalf("step %q: env %s uses the undeclared input %s", s.name, k, m[1])
		}
		if given, ok := inputs[m[1]]; ok {
			def = given
		}
		env = append(env, k+"="+def)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-e", "-c", s.run)
	cmd.Env = append(env, extra...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func readOutputs(t *testing.T, path string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for line := range strings.Lines(string(b)) {
		k, v, _ := strings.Cut(strings.TrimSpace(line), "=")
		out[k] = v
	}
	return out
}

const agentScript = `#!/bin/sh
cat >/dev/null
# What a hostile agent can read of its own environment and every ancestor's.
pid=$$
while [ "$pid" -gt 1 ]; do
  echo "--- process $pid" >>"$SPY_DIR/environ.$WHILLY_TASK_ID"
  tr '\0' '\n' </proc/$pid/environ >>"$SPY_DIR/environ.$WHILLY_TASK_ID" 2>/dev/null || true
  pid=$(awk '/^PPid:/ {print $2}' /proc/$pid/status)
done
ls -la "$RUNNER_TEMP" >>"$SPY_DIR/files.$WHILLY_TASK_ID" 2>&1 || true
case "$WHILLY_TASK_ID" in
T02) printf '{"result": "cannot", "total_cost_usd": 0.02, "is_error": true}\n'; exit 1 ;;
SLOW) sleep 600 ;;
esac
printf '{"result": "ok <promise>COMPLETE</promise>", "total_cost_usd": 0.01}\n'
`

// The action's steps, run here with GITHUB_OUTPUT and GITHUB_STEP_SUMMARY set: the build
// step builds whilly-worker from this repository, the run step drains a plan on a real
// control plane and writes tasks-done, tasks-failed and cost-usd and a summary; with
// timeout-minutes the worker hands its task back and still reports.
func TestActionStepsRunLocally(t *testing.T) {
	t.Parallel()
	md := parseAction(t, "action.yml")
	if md.using != "composite" {
		t.Fatalf("runs.using = %q, want composite", md.using)
	}
	for _, name := range []string{"control-url", "token", "bootstrap-token", "plan", "agent", "max-tasks", "timeout-minutes"} {
		if _, ok := md.inputs[name]; !ok {
			t.Errorf("input %s (SPEC §12) is missing", name)
		}
	}
	if !md.required["control-url"] {
		t.Error("control-url is not required")
	}
	var build, run *step
	for i, s := range md.steps {
		switch {
		case strings.HasPrefix(s.uses, "actions/setup-go@"):
			if s.with["go-version-file"] != "${{ github.action_path }}/../go.mod" {
				t.Errorf("setup-go takes Go from %q, want the action's own go.mod", s.with["go-version-file"])
			}
			if _, err := os.Stat(filepath.Join("..", "go.mod")); err != nil {
				t.Errorf("the action's go.mod: %v", err)
			}
			if build != nil {
				t.Error("setup-go comes after the build")
			}
		case strings.Contains(s.run, "run.sh\" build"):
			build = &md.steps[i]
		case strings.Contains(s.run, "run.sh\" run"):
			run = &md.steps[i]
		}
	}
	if build == nil || run == nil || run.id != "run" {
		t.Fatalf("want a build step and a run step with id run, got %+v", md.steps)
	}
	for _, name := range []string{"tasks-done", "tasks-failed", "cost-usd"} {
		if md.outputs[name] != "${{ steps.run.outputs."+name+" }}" {
			t.Errorf("output %s = %q, want the run step's", name, md.outputs[name])
		}
	}

	// A control plane on a test database.
	pool := testkit.DB(t)
	st := queue.NewStore(pool, nil, queue.Config{BackoffBase: 20 * time.Millisecond, BackoffMax: 40 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	ln := queue.NewListener(pool, nil)
	done := make(chan struct{})
	go func() { defer close(done); _ = ln.Run(ctx) }()
	const bootstrap = "boot-0123456789abcdef0123456789abcdef"
	srv := httptest.NewServer(control.New(st, ln, nil, control.Config{BootstrapToken: bootstrap}).Handler())
	t.Cleanup(func() { srv.Close(); cancel(); <-done })

	tmp := t.TempDir()
	bin := filepath.Join(tmp, "bin", "whilly-worker")
	agentCmd := filepath.Join(tmp, "agent.sh")
	if err := os.WriteFile(agentCmd, []byte(agentScript), 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := runStep(t, md, *build, map[string]string{"agent": "command"}, []string{"WHILLY_WORKER_BIN=" + bin, "RUNNER_TEMP=" + tmp})
	if err != nil {
		t.Fatalf("build step: %v\n%s", err, out)
	}

	importPlan := func(id string, tasks ...plan.Task) {
		p := &plan.Plan{ID: id, Name: id}
		for _, task := range tasks {
			task.Priority, task.AcceptanceCriteria, task.TestSteps = plan.PriorityMedium, []string{"ok"}, []string{"true"}
			task.Description = "A task long enough for the gate: " + task.ID
			p.Tasks = append(p.Tasks, task)
		}
		if _, err := st.Import(context.Background(), p, queue.ImportOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// runActionIn runs the run step with inputs, with dir as RUNNER_TEMP (where the agent
	// writes what it spied), and returns the outputs, the summary and the step's log.
	runActionIn := func(t *testing.T, dir string, inputs map[string]string, extra ...string) (map[string]string, string, string, error) {
		outputs, summary := filepath.Join(dir, "output"), filepath.Join(dir, "summary.md")
		for _, f := range []string{outputs, summary} {
			if err := os.WriteFile(f, nil, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		inputs["control-url"], inputs["agent"] = srv.URL, "command"
		log, err := runStep(t, md, *run, inputs, append([]string{"WHILLY_WORKER_BIN=" + bin, "RUNNER_TEMP=" + dir,
			"WHILLY_AGENT_CMD=" + agentCmd, "GITHUB_OUTPUT=" + outputs, "GITHUB_STEP_SUMMARY=" + summary, "SPY_DIR=" + dir}, extra...))
		sb, rerr := os.ReadFile(summary)
		if rerr != nil {
			t.Fatal(rerr)
		}
		return readOutputs(t, outputs), string(sb), log, err
	}
	// runAction runs the run step with inputs and returns the outputs, the summary and
	// the step's log.
	runAction := func(t *testing.T, inputs map[string]string) (map[string]string, string, string, error) {
		return runActionIn(t, t.TempDir(), inputs)
	}

	t.Run("drain", func(t *testing.T) {
		t.Parallel()
		// T02 fails both its attempts: one task FAILED, the plan FAILED, so the step fails
		// (SPEC §12), and tasks-failed counts the task, not its two attempts.
		importPlan("act", plan.Task{ID: "T00"}, plan.Task{ID: "T01"}, plan.Task{ID: "T02", MaxAttempts: 2})
		// The repository's secret: a bootstrap token scoped like the plans of one repository.
		scoped, _, err := st.Mint(context.Background(), queue.TokenSpec{Owner: "act", Registrar: true, Scopes: queue.Scopes{"plan:act"}})
		if err != nil {
			t.Fatal(err)
		}
		// Unboxed (WHILLY_SANDBOX=none), the agent sees the worker's processes: even then
		// the bootstrap token is in none of their environments, nor in a file left behind.
		spy := t.TempDir()
		outputs, summary, log, err := runActionIn(t, spy, map[string]string{"bootstrap-token": scoped, "plan": "act"}, "WHILLY_SANDBOX=none", "WHILLY_AGENT_ENV=SPY_DIR,RUNNER_TEMP")
		if err == nil || !strings.Contains(log, "1 tasks this worker ran ended FAILED: act/T02") {
			t.Fatalf("run step on a plan that failed: %v; want it to fail naming T02\n%s", err, log)
		}
		want := map[string]string{"tasks-done": "2", "tasks-failed": "1", "cost-usd": "0.06"}
		for k, v := range want {
			if outputs[k] != v {
				t.Errorf("output %s = %q, want %q (all: %v)\n%s", k, outputs[k], v, outputs, log)
			}
		}
		if !strings.Contains(summary, "### whilly worker") || !strings.Contains(summary, "| act | 2 | 1 | 0 | 0.06 | exited with status 1 |") {
			t.Errorf("summary:\n%s", summary)
		}
		if strings.Contains(log, scoped) {
			t.Error("the step's log shows the bootstrap token")
		}
		// The agent found the bootstrap token neither in its environment nor in its
		// parents' (/proc/PID/environ), nor a file holding it.
		spied, _ := filepath.Glob(filepath.Join(spy, "environ.*"))
		if len(spied) != 3 {
			t.Errorf("the agent recorded the environments of %d tasks, want 3", len(spied))
		}
		for _, f := range append(spied, filepath.Join(spy, "files.T00")) {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			if strings.Count(string(b), "--- process") < 3 && strings.HasPrefix(filepath.Base(f), "environ.") {
				t.Errorf("%s holds fewer than 3 processes: the agent did not walk up to the worker and its step\n%s", filepath.Base(f), b)
			}
			if strings.Contains(string(b), scoped) || strings.Contains(string(b), "WHILLY_BOOTSTRAP_TOKEN=") {
				t.Errorf("%s shows the bootstrap token:\n%s", filepath.Base(f), b)
			}
			if strings.HasPrefix(filepath.Base(f), "files.") && strings.Contains(string(b), "whilly-bootstrap.") {
				t.Errorf("the bootstrap token's file is still there while the agent runs:\n%s", b)
			}
		}
		// The worker it registered was confined to plan act, and revoked itself at exit.
		ws, err := st.ListWorkers(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range ws {
			if w.Hostname == "runner" {
				continue
			}
			if strings.Join(w.Scopes, ",") != "plan:act" || w.Status != "revoked" {
				t.Errorf("self-registered worker %s: scopes %v, status %s; want plan:act, revoked", w.ID, w.Scopes, w.Status)
			}
		}
		pi, err := st.GetPlan(context.Background(), "act")
		if err != nil || pi.Status != plan.PlanFailed || pi.Counts[plan.StatusDone] != 2 {
			t.Fatalf("plan after the action: %s %v, %v", pi.Status, pi.Counts, err)
		}
	})
	t.Run("timeout", func(t *testing.T) {
		t.Parallel()
		importPlan("slow", plan.Task{ID: "SLOW"})
		w, token, err := st.RegisterWorker(context.Background(), "runner", nil)
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		outputs, summary, log, err := runAction(t, map[string]string{"token": token, "worker-id": w.ID, "plan": "slow", "timeout-minutes": "0.05"})
		if err != nil {
			t.Fatalf("run step: %v\n%s", err, log)
		}
		if time.Since(start) > time.Minute {
			t.Errorf("the step took %v", time.Since(start))
		}
		if outputs["tasks-done"] != "0" || outputs["tasks-failed"] != "0" || outputs["cost-usd"] != "0" {
			t.Errorf("outputs %v", outputs)
		}
		if !strings.Contains(summary, "stopped at timeout-minutes (0.05)") || !strings.Contains(log, "timeout-minutes (0.05) reached") {
			t.Errorf("summary:\n%s\nlog:\n%s", summary, log)
		}
		task, err := st.GetTask(context.Background(), "slow", "SLOW")
		if err != nil || task.Status != plan.StatusPending {
			t.Fatalf("task after the timeout: %s, %v; want PENDING (released)", task.Status, err)
		}
	})
	t.Run("bad inputs", func(t *testing.T) {
		t.Parallel()
		for _, in := range []map[string]string{
			{},                // no token at all
			{"token": "wt_x"}, // a token without its worker id
			{"bootstrap-token": "b", "max-tasks": "many"}, // not a number
		} {
			_, _, log, err := runAction(t, in)
			if err == nil || !strings.Contains(log, "::error title=whilly::") {
				t.Errorf("inputs %v: %v\n%s", in, err, log)
			}
		}
	})
}
