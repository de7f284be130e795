package worker

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/whilly-go/whilly/agent"
	"github.com/whilly-go/whilly/control/client"
	"github.com/whilly-go/whilly/internal/version"
	"github.com/whilly-go/whilly/plan"
	"github.com/whilly-go/whilly/sandbox"
)

const usage = `Usage: whilly-worker --connect URL [--token T | --token-file F] [flags]
       whilly-worker gc [--max-age 72h] [--max-size 5GB]   (see whilly-worker gc --help)
       whilly-worker version                               (or --version)

The remote worker of whilly: it claims tasks from a control plane over HTTP(S), runs a
coding agent on each under heartbeats, and reports the outcome and the cost.

Without a worker token it registers itself with WHILLY_BOOTSTRAP_TOKEN and prints the new
worker id and token on stderr. SIGTERM or SIGINT stops the agent's whole process group
and releases the task before exiting.

Environment: WHILLY_CONTROL_URL, WHILLY_WORKER_TOKEN, WHILLY_WORKER_ID, WHILLY_PLAN,
WHILLY_AGENT, WHILLY_AGENT_CMD, WHILLY_AGENT_TIMEOUT, WHILLY_MODEL, CLAUDE_BIN, CODEX_BIN,
WHILLY_WORKSPACE_DIR (per-plan checkouts of repository plans),
WHILLY_BOOTSTRAP_TOKEN; the sandbox: WHILLY_SANDBOX (bwrap, the default where bubblewrap
works, or none), WHILLY_SANDBOX_NET (proxy, none, host), WHILLY_SANDBOX_ALLOW_HOSTS,
WHILLY_AGENT_ENV; for the sim agent WHILLY_SIM_DELAY (default 0), WHILLY_SIM_COST
(USD, default 0) and WHILLY_SIM_FAIL_RATE (0 to 1, default 0).

Exit codes: 0 done (--once, --drain, --max-tasks) or stopped by a signal, 1 an operation
error, 2 a configuration error or a control plane that refuses the token.

Flags:
`

// Main runs the whilly-worker command line and returns its exit code.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	if len(args) > 0 && args[0] == "gc" {
		return gcMain(ctx, args[1:], stdout, stderr, getenv)
	}
	if len(args) == 1 && (args[0] == "version" || args[0] == "--version" || args[0] == "-version") {
		fmt.Fprint(stdout, version.Get().Text("whilly-worker"))
		return 0
	}
	fs := flag.NewFlagSet("whilly-worker", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, usage)
		fs.PrintDefaults()
	}
	env := func(k, def string) string {
		if v := strings.TrimSpace(getenv(k)); v != "" {
			return v
		}
		return def
	}
	var (
		connect   = fs.String("connect", env("WHILLY_CONTROL_URL", ""), "control plane URL (WHILLY_CONTROL_URL)")
		tokenFile = fs.String("token-file", "", "read the worker token from this file")
		workerID  = fs.String("worker-id", env("WHILLY_WORKER_ID", ""), "worker id (WHILLY_WORKER_ID; learned from the token when empty)")
		planID    = fs.String("plan", env("WHILLY_PLAN", ""), "claim only from this plan (WHILLY_PLAN)")
		labels    = fs.String("labels", "", "comma-separated labels this worker offers (when it registers itself)")
		agentName = fs.String("agent", env("WHILLY_AGENT", agent.NameClaude), "agent: "+strings.Join(agent.Names(), ", ")+" (WHILLY_AGENT)")
		model     = fs.String("model", env("WHILLY_MODEL", ""), "model passed to the agent (WHILLY_MODEL)")
		once      = fs.Bool("once", false, "run one task, then exit")
		drain     = fs.Bool("drain", false, "exit 0 when nothing this worker may claim is pending, running or retrying")
		maxTasks  = fs.Int("max-tasks", 0, "exit after this many tasks (0: no limit)")
		insecure  = fs.Bool("insecure", false, "allow plain http:// to a non-loopback control plane")
		logDir    = fs.String("log-dir", "", "write each attempt's agent output to a file under this directory")
		workDir   = fs.String("workdir", "", "directory the agent works in (default: the current one)")
		wsDir     = fs.String("workspace-dir", env(WorkspaceDirEnv, ""), "per-plan checkouts of repository plans ("+WorkspaceDirEnv+"; default <user cache dir>/whilly/workspaces)")
		token     = fs.String("token", "", "worker token (prefer WHILLY_WORKER_TOKEN or --token-file: flags show in ps)")
	)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	fail := func(code int, format string, a ...any) int {
		fmt.Fprintf(stderr, "whilly-worker: "+format+"\n", a...)
		return code
	}
	if fs.NArg() > 0 {
		return fail(2, "unexpected argument %q (see --help)", fs.Arg(0))
	}
	if *connect == "" {
		return fail(2, "no control plane: pass --connect URL or set WHILLY_CONTROL_URL")
	}
	tok := *token
	if tok != "" {
		// Other users of the machine read a process's arguments (ps, /proc/PID/cmdline).
		fmt.Fprintln(stderr, "warning: --token is visible to every user of this machine (ps) and kept in shell history; set WHILLY_WORKER_TOKEN or use --token-file instead")
	}
	if tok == "" {
		tok = env("WHILLY_WORKER_TOKEN", "")
	}
	if *tokenFile != "" {
		b, err := os.ReadFile(*tokenFile)
		if err != nil {
			return fail(2, "read the token file: %v", err)
		}
		tok = strings.TrimSpace(string(b))
	}
	timeout := agent.DefaultTimeout
	if v := env("WHILLY_AGENT_TIMEOUT", ""); v != "" {
		d, err := ParseDuration(v)
		if err != nil {
			return fail(2, "WHILLY_AGENT_TIMEOUT: %v", err)
		}
		timeout = d
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	// Before registering: a worker that cannot box its agent must not join the fleet.
	sb, err := OpenSandbox(ctx, getenv, *agentName, log)
	if err != nil {
		return fail(2, "%v", err)
	}
	cfg := agent.ConfigFromEnv(getenv)
	cfg.Logger = log
	if cfg.Sim, err = simFromEnv(env); err != nil {
		return fail(2, "%v", err)
	}
	cfg.Sandbox = sb
	ag, err := agent.New(*agentName, cfg)
	if err != nil {
		return fail(2, "%v", err)
	}
	// Before claiming (and registering): a missing or logged-out agent CLI is this
	// machine's problem, and would otherwise fail every attempt of every task.
	if err := agent.Check(ag, getenv); err != nil {
		return fail(2, "%v", err)
	}
	api, err := client.New(*connect, tok, client.Options{Insecure: *insecure})
	if err != nil {
		return fail(2, "%v", err)
	}
	if tok == "" {
		boot := env("WHILLY_BOOTSTRAP_TOKEN", "")
		if boot == "" {
			return fail(2, "no worker token: set WHILLY_WORKER_TOKEN (or --token-file), or WHILLY_BOOTSTRAP_TOKEN to register")
		}
		host, _ := os.Hostname()
		reg, err := api.WithToken(boot).Register(ctx, client.RegisterRequest{Hostname: host, Labels: splitList(*labels)})
		if err != nil {
			return fail(2, "register with %s: %v", *connect, err)
		}
		fmt.Fprintf(stderr, "registered worker_id: %s\n", reg.WorkerID)
		api, *workerID = api.WithToken(reg.Token), reg.WorkerID
	}
	if *workerID == "" {
		return fail(2, "no worker id: set WHILLY_WORKER_ID (printed by 'whilly worker register')")
	}
	w, err := New(api, ag, log, Config{
		WorkerID: *workerID, PlanID: *planID, Model: *model, Once: *once, Drain: *drain,
		MaxTasks: *maxTasks, AgentTimeout: timeout, LogDir: *logDir, WorkDir: *workDir, WorkspaceDir: *wsDir,
		Sandbox: cfg.Sandbox,
	})
	if err != nil {
		return fail(2, "%v", err)
	}
	sum, err := w.Run(ctx)
	fmt.Fprintf(stdout, "tasks_done=%d tasks_failed=%d tasks_released=%d cost_usd=%s\n", sum.Done, sum.Failed, sum.Released, sum.Cost)
	for _, h := range sum.Held {
		fmt.Fprintf(stderr, "whilly-worker: left %s of plan %s pending: %s\n", h.TaskID, h.PlanID, h.Detail)
	}
	if more := sum.HeldTotal - len(sum.Held); more > 0 {
		fmt.Fprintf(stderr, "whilly-worker: and %d more tasks it cannot claim\n", more)
	}
	switch {
	case err == nil, errors.Is(err, ErrStopped):
		return 0
	case fatal(err), errors.Is(err, agent.ErrNotReady):
		return fail(2, "%v", err)
	default:
		return fail(1, "%v", err)
	}
}

// OpenSandbox opens the box of SPEC §16 for agentName's processes from WHILLY_SANDBOX,
// WHILLY_SANDBOX_NET, WHILLY_SANDBOX_ALLOW_HOSTS and WHILLY_AGENT_ENV, and logs whether it
// works. An error (a configuration error: exit 2) says how to fix it. The sim agent runs
// no process: without a working box it gets none (nil), and no error.
func OpenSandbox(ctx context.Context, getenv func(string) string, agentName string, log *slog.Logger) (*sandbox.Sandbox, error) {
	set, err := sandbox.SettingsFromEnv(getenv)
	if err != nil {
		return nil, err
	}
	sb, err := sandbox.Open(ctx, set, agentName != agent.NameSim)
	switch {
	case err != nil:
		return nil, err
	case sb == nil:
		log.InfoContext(ctx, "sandbox does not work here; the sim agent runs no process and needs none", "agent", agentName)
	case !sb.Boxed():
		log.WarnContext(ctx, "WHILLY_SANDBOX=none: agents run unboxed, as this user, with this machine's files and network", "agent", agentName)
	default:
		log.InfoContext(ctx, "sandbox works: agents run under bubblewrap", "agent", agentName, "net", sb.Net())
	}
	return sb, nil
}

// simFromEnv reads the sim agent's settings. Unset, the sim finishes at once, free and
// always successful: the setting of benchmarks.
func simFromEnv(env func(k, def string) string) (agent.SimConfig, error) {
	var sc agent.SimConfig
	if v := env("WHILLY_SIM_DELAY", ""); v != "" {
		d, err := time.ParseDuration(v) // 0 and 0s are fine here
		if err != nil {
			d, err = ParseDuration(v)
		}
		if err != nil || d < 0 {
			return sc, fmt.Errorf("WHILLY_SIM_DELAY %q is not a duration such as 200ms, or a number of seconds", v)
		}
		sc.Delay = d
	}
	if v := env("WHILLY_SIM_COST", ""); v != "" {
		c, err := plan.ParseUSD(v)
		if err != nil || c < 0 {
			return sc, fmt.Errorf("WHILLY_SIM_COST %q is not an amount of USD", v)
		}
		sc.Cost = c
	}
	if v := env("WHILLY_SIM_FAIL_RATE", ""); v != "" {
		r, err := strconv.ParseFloat(v, 64)
		if err != nil || r < 0 || r > 1 {
			return sc, fmt.Errorf("WHILLY_SIM_FAIL_RATE %q is not a number from 0 to 1", v)
		}
		sc.FailRate = r
	}
	sc.Seed = uint64(time.Now().UnixNano())
	return sc, nil
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// ParseDuration reads Go syntax (45s, 30m) or a plain number of seconds.
func ParseDuration(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if n, err := strconv.ParseFloat(s, 64); err == nil && n > 0 {
		return time.Duration(n * float64(time.Second)), nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("%q is not a duration such as 45s or 30m, or a number of seconds", s)
	}
	return d, nil
}
