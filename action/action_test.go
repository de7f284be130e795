// Package action_test runs the steps of the whilly GitHub Action (action.yml, run.sh)
// on this machine, the way a runner would, against a real control plane.
package action_test

import (
	"bufio"
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
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
	name, id, uses, run, cond string
	with, env                 map[string]string
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
			case "if":
				cur.cond = value
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

var (
	inputExpr = regexp.MustCompile(`^\$\{\{ inputs\.([a-z0-9-]+) \}\}$`)
	otherExpr = regexp.MustCompile(`^\$\{\{ ((?:github|steps)\.[a-z0-9_.-]+) \}\}$`)
)

// runStep runs a `run:` step as the runner does: bash, GITHUB_ACTION_PATH set, the
// step's env with the inputs substituted, and the github and steps contexts from
// inputs too, by their full name ("github.action_ref", "steps.resolve.outputs.version";
// empty when not given). The machine's WHILLY_* variables are left out.
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
		if m := otherExpr.FindStringSubmatch(v); m != nil {
			env = append(env, k+"="+inputs[m[1]])
			continue
		}
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
			t.Errorf("input %s is missing", name)
		}
	}
	if !md.required["control-url"] {
		t.Error("control-url is not required")
	}
	var resolve, build, run *step
	for i, s := range md.steps {
		switch {
		case strings.HasPrefix(s.uses, "actions/setup-go@"):
			if s.with["go-version-file"] != "${{ github.action_path }}/../go.mod" {
				t.Errorf("setup-go takes Go from %q, want the action's own go.mod", s.with["go-version-file"])
			}
			if _, err := os.Stat(filepath.Join("..", "go.mod")); err != nil {
				t.Errorf("the action's go.mod: %v", err)
			}
			if resolve == nil || build != nil {
				t.Error("setup-go does not come between resolving the version and the build")
			}
			if s.cond != "steps.resolve.outputs.version == ''" {
				t.Errorf("setup-go runs if %q, want only when building from source", s.cond)
			}
		case strings.Contains(s.run, "run.sh\" resolve"):
			resolve = &md.steps[i]
		case strings.Contains(s.run, "run.sh\" build"):
			build = &md.steps[i]
		case strings.Contains(s.run, "run.sh\" run"):
			run = &md.steps[i]
		}
	}
	if resolve == nil || resolve.id != "resolve" || build == nil || run == nil || run.id != "run" {
		t.Fatalf("want a resolve step with id resolve, a build step and a run step with id run, got %+v", md.steps)
	}
	for _, name := range []string{"tasks-done", "tasks-failed", "cost-usd", "plan-status", "pull-request-url"} {
		if md.outputs[name] != "${{ steps.run.outputs."+name+" }}" {
			t.Errorf("output %s = %q, want the run step's", name, md.outputs[name])
		}
	}
	// resolveVersion runs the resolve step with inputs and returns its output version.
	resolveVersion := func(t *testing.T, inputs map[string]string) (string, string, error) {
		outputs := filepath.Join(t.TempDir(), "output")
		if err := os.WriteFile(outputs, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		log, err := runStep(t, md, *resolve, inputs, []string{"GITHUB_OUTPUT=" + outputs})
		return readOutputs(t, outputs)["version"], log, err
	}
	for _, c := range []struct{ version, ref, want string }{
		{"", "", ""},             // uses: ./action
		{"", "main", ""},         // a branch: build from source
		{"", "v0.3.0", "v0.3.0"}, // uses: …/action@v0.3.0
		{"0.4.1", "main", "v0.4.1"},
		{"source", "v0.3.0", ""},
	} {
		got, log, err := resolveVersion(t, map[string]string{"version": c.version, "github.action_ref": c.ref})
		if err != nil || got != c.want {
			t.Errorf("version %q at ref %q resolves to %q (%v), want %q\n%s", c.version, c.ref, got, err, c.want, log)
		}
	}
	if _, log, err := resolveVersion(t, map[string]string{"version": "latest"}); err == nil ||
		!strings.Contains(log, "::error title=whilly::input version must be a release tag such as v0.3.0, or source; got 'latest'") {
		t.Errorf("version latest: %v\n%s", err, log)
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
	// A self-hosted runner whose AppArmor keeps bubblewrap out: the step stops and says
	// what its admin should run, and changes nothing.
	knob := filepath.Join(tmp, "apparmor_restrict_unprivileged_userns")
	if err := os.WriteFile(knob, []byte("1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err = runStep(t, md, *build, map[string]string{"agent": "command"},
		[]string{"WHILLY_WORKER_BIN=" + filepath.Join(tmp, "unused"), "RUNNER_TEMP=" + tmp, "RUNNER_ENVIRONMENT=self-hosted", "WHILLY_ACTION_USERNS_KNOB=" + knob})
	if err == nil || !strings.Contains(out, "::error title=whilly::AppArmor on this self-hosted runner keeps bubblewrap from creating the agent's sandbox: have its admin run 'sudo sysctl -w kernel.apparmor_restrict_unprivileged_userns=0'") {
		t.Errorf("build step on a self-hosted runner with AppArmor's restriction: %v\n%s", err, out)
	}
	if _, err := os.Stat(filepath.Join(tmp, "unused")); err == nil {
		t.Error("the build step went on after the AppArmor check failed")
	}

	// The released whilly-worker: a real `make release` tarball of this machine's
	// architecture, served as a GitHub release is, downloaded and checked against SHA256SUMS.
	const release = "v0.0.0-action"
	releases := filepath.Join(tmp, "releases")
	mk := exec.Command("make", "-C", "..", "release", "VERSION="+release, "DIST="+filepath.Join(releases, release), "PLATFORMS=linux/"+runtime.GOARCH)
	if b, err := mk.CombinedOutput(); err != nil {
		t.Fatalf("make release: %v\n%s", err, b)
	}
	tarball := "whilly_" + release + "_linux_" + runtime.GOARCH + ".tar.gz"
	// v0.0.1-bad: the same tarball under a SHA256SUMS that does not match it.
	bad := filepath.Join(releases, "v0.0.1-bad")
	if err := os.MkdirAll(bad, 0o755); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(releases, release, tarball))
	if err != nil {
		t.Fatal(err)
	}
	badName := "whilly_v0.0.1-bad_linux_" + runtime.GOARCH + ".tar.gz"
	if err := os.WriteFile(filepath.Join(bad, badName), b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bad, "SHA256SUMS"), []byte(strings.Repeat("0", 64)+"  "+badName+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	files := httptest.NewServer(http.FileServer(http.Dir(releases)))
	t.Cleanup(files.Close)
	// npm is a stand-in that records what it was asked to install.
	npmDir := filepath.Join(tmp, "npm")
	if err := os.MkdirAll(npmDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(npmDir, "npm"), []byte("#!/bin/sh\necho \"$@\" >>\"$NPM_LOG\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	npmLog := filepath.Join(tmp, "npm.log")
	installRelease := func(version, bin string) (string, error) {
		return runStep(t, md, *build, map[string]string{"agent": "claude", "release-url": files.URL + "/", "steps.resolve.outputs.version": version},
			[]string{"WHILLY_WORKER_BIN=" + bin, "RUNNER_TEMP=" + tmp, "WHILLY_SANDBOX=none", "NPM_LOG=" + npmLog, "PATH=" + npmDir + ":" + os.Getenv("PATH")})
	}
	released := filepath.Join(tmp, "release", "whilly-worker")
	if out, err := installRelease(release, released); err != nil {
		t.Fatalf("build step with version %s: %v\n%s", release, err, out)
	}
	if b, err := exec.Command(released, "--version").Output(); err != nil || !strings.HasPrefix(string(b), "whilly-worker "+release) {
		t.Errorf("the installed whilly-worker says %q (%v), want version %s", b, err, release)
	}
	if b, err := os.ReadFile(npmLog); err != nil || strings.TrimSpace(string(b)) != "install --global --no-fund --no-audit @anthropic-ai/claude-code@"+md.inputs["claude-code-version"] {
		t.Errorf("npm was asked for %q (%v), want the pinned claude-code-version %s", b, err, md.inputs["claude-code-version"])
	}
	for version, want := range map[string]string{
		"v0.0.1-bad": badName + " from " + files.URL + "/v0.0.1-bad does not match its SHA256SUMS",
		"v9.9.9":     "could not download " + files.URL + "/v9.9.9/whilly_v9.9.9_linux_" + runtime.GOARCH + ".tar.gz: check that release v9.9.9 exists",
	} {
		nowhere := filepath.Join(tmp, version, "whilly-worker")
		out, err := installRelease(version, nowhere)
		if err == nil || !strings.Contains(out, "::error title=whilly::"+want) {
			t.Errorf("build step with version %s: %v, want the error %q\n%s", version, err, want, out)
		}
		if _, err := os.Stat(nowhere); err == nil {
			t.Errorf("version %s: a whilly-worker was installed", version)
		}
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
		// T02 fails both its attempts: one task FAILED, the plan FAILED, so the step fails,
		// and tasks-failed counts the task, not its two attempts.
		importPlan("act", plan.Task{ID: "T00"}, plan.Task{ID: "T01"}, plan.Task{ID: "T02", MaxAttempts: 2})
		// The repository's secret: a bootstrap token scoped like the plans of one repository.
		scoped, _, err := st.Mint(context.Background(), queue.TokenSpec{Owner: "act", Registrar: true, Scopes: queue.Scopes{"plan:act"}})
		if err != nil {
			t.Fatal(err)
		}
		// Unboxed (WHILLY_SANDBOX=none), the agent sees the worker's processes: even then
		// the bootstrap token is in none of their environments, nor in a file left behind.
		spy := t.TempDir()
		// The plan's pull request, recorded as the GitHub App does when it opens it.
		const prURL = "https://github.com/acme/act/pull/5"
		if err := st.RecordPull(context.Background(), queue.PullRequest{PlanID: "act", Repo: "acme/act", Number: 5, NodeID: "PR_5",
			URL: prURL, Branch: "whilly/act"}, false); err != nil {
			t.Fatal(err)
		}
		// The released whilly-worker runs it.
		outputs, summary, log, err := runActionIn(t, spy, map[string]string{"bootstrap-token": scoped, "plan": "act"}, "WHILLY_SANDBOX=none", "WHILLY_AGENT_ENV=SPY_DIR,RUNNER_TEMP", "WHILLY_WORKER_BIN="+released)
		if err == nil || !strings.Contains(log, "\n::error title=whilly::1 tasks this worker ran ended FAILED: act/T02\n") {
			t.Fatalf("run step on a plan that failed: %v; want it to fail with an error annotation naming T02\n%s", err, log)
		}
		want := map[string]string{"tasks-done": "2", "tasks-failed": "1", "cost-usd": "0.06", "plan-status": "FAILED", "pull-request-url": prURL}
		for k, v := range want {
			if outputs[k] != v {
				t.Errorf("output %s = %q, want %q (all: %v)\n%s", k, outputs[k], v, outputs, log)
			}
		}
		if !strings.Contains(summary, "### whilly worker") || !strings.Contains(summary, "| act | FAILED | 2 | 1 | 0 | 0.06 | exited with status 1 |") {
			t.Errorf("summary:\n%s", summary)
		}
		// A row per task it ran, with its pull request.
		tasks := "| task | status | cost (USD) | pull request |\n|---|---|---:|---|\n" +
			"| act/T00 | done | 0.01 | " + prURL + " |\n" +
			"| act/T01 | done | 0.01 | " + prURL + " |\n" +
			"| act/T02 | failed (2 attempts) | 0.04 | " + prURL + " |\n"
		if !strings.Contains(summary, tasks) {
			t.Errorf("summary without the table of tasks\n%s\nwant:\n%s", summary, tasks)
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
		// What the control plane answers is text for the summary, not markup: a | stays
		// in its cell.
		const prURL = "https://github.com/acme/slow/pull/9#a|b"
		if err := st.RecordPull(context.Background(), queue.PullRequest{PlanID: "slow", Repo: "acme/slow", Number: 9, NodeID: "PR_9",
			URL: prURL, Branch: "whilly/slow"}, false); err != nil {
			t.Fatal(err)
		}
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
		if outputs["tasks-done"] != "0" || outputs["tasks-failed"] != "0" || outputs["cost-usd"] != "0" ||
			outputs["plan-status"] != "ACTIVE" || outputs["pull-request-url"] != prURL {
			t.Errorf("outputs %v", outputs)
		}
		if !strings.Contains(summary, "stopped at timeout-minutes (0.05)") || !strings.Contains(log, "timeout-minutes (0.05) reached") ||
			!strings.Contains(summary, "| slow/SLOW | released | 0 | https://github.com/acme/slow/pull/9#a\\|b |\n") {
			t.Errorf("summary:\n%s\nlog:\n%s", summary, log)
		}
		// Old workflows still pass worker-id: it is accepted, ignored, and said so.
		if !strings.Contains(log, "::warning title=whilly::the worker-id input is ignored (the worker learns its id from its token): remove it from the workflow") {
			t.Errorf("no deprecation warning for worker-id:\n%s", log)
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
			{"token": "wt_x"}, // a token the control plane does not know
			{"bootstrap-token": "b", "max-tasks": "many"}, // not a number
		} {
			_, _, log, err := runAction(t, in)
			if err == nil || !strings.Contains(log, "::error title=whilly::") {
				t.Errorf("inputs %v: %v\n%s", in, err, log)
			}
		}
	})
}

// The example workflow pins the action to a release tag (never a branch), registers its
// worker with a bootstrap token scoped to the repository, and names only inputs the
// action declares.
func TestExampleWorkflowPinsAReleaseAndAScopedWorker(t *testing.T) {
	t.Parallel()
	md := parseAction(t, "action.yml")
	b, err := os.ReadFile(filepath.Join("..", "examples", "workflows", "whilly.yml"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	uses := regexp.MustCompile(`(?m)^\s+uses: whilly-go/whilly/action@(\S+)$`).FindAllStringSubmatch(text, -1)
	if len(uses) != 1 || !regexp.MustCompile(`^v[0-9]+\.[0-9]+\.[0-9]+$`).MatchString(uses[0][1]) {
		t.Errorf("the example uses the action at %v, want one use at a release tag vX.Y.Z", uses)
	}
	if !strings.Contains(text, "whilly admin token mint --bootstrap --scope repo:OWNER/NAME") {
		t.Error("the example does not make a bootstrap token scoped to the repository")
	}
	with := regexp.MustCompile(`(?s)uses: whilly-go/whilly/action@\S+\n\s+with:\n(.*?)\n\s+env:`).FindStringSubmatch(text)
	if with == nil {
		t.Fatal("the example's step has no with: block followed by env:")
	}
	for line := range strings.Lines(with[1]) {
		name, _, _ := strings.Cut(strings.TrimSpace(line), ":")
		if _, ok := md.inputs[name]; !ok {
			t.Errorf("the example passes %s, which the action does not declare", name)
		}
		if name == "worker-id" {
			t.Error("the example passes the deprecated worker-id")
		}
	}
}

// The agent CLI versions the action installs by default are the ones the worker image
// pins: one release, one tested pair.
func TestAgentVersionsMatchTheWorkerImage(t *testing.T) {
	t.Parallel()
	md := parseAction(t, "action.yml")
	b, err := os.ReadFile(filepath.Join("..", "deploy", "docker", "worker.Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	for input, arg := range map[string]string{"claude-code-version": "CLAUDE_CODE_VERSION", "codex-version": "CODEX_VERSION"} {
		m := regexp.MustCompile(`(?m)^ARG ` + arg + `=(\S+)$`).FindStringSubmatch(string(b))
		if m == nil || md.inputs[input] != m[1] {
			t.Errorf("input %s defaults to %q, the worker image's %s is %v", input, md.inputs[input], arg, m)
		}
	}
}
