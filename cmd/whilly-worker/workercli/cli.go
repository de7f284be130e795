// Package workercli is the command line of whilly-worker: its flags, --help, exit codes
// and environment. It reads the environment and hands the worker library values; it is
// a package of its own (not main) so that tests elsewhere can drive the command.
package workercli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/whilly-go/whilly/agent"
	"github.com/whilly-go/whilly/control/client"
	"github.com/whilly-go/whilly/internal/config"
	"github.com/whilly-go/whilly/internal/logging"
	"github.com/whilly-go/whilly/internal/version"
	"github.com/whilly-go/whilly/plan"
	"github.com/whilly-go/whilly/sandbox"
	"github.com/whilly-go/whilly/worker"
	"github.com/whilly-go/whilly/worker/workerenv"
)

const usage = `Usage: whilly-worker --connect URL [--token T | --token-file F] [flags]
       whilly-worker gc [--max-age 72h] [--max-size 5GB]   (see whilly-worker gc --help)
       whilly-worker version                               (or --version)

The remote worker of whilly: it claims tasks from a control plane over HTTP(S), runs a
coding agent on each under heartbeats, and reports the outcome and the cost.

Without a worker token it registers itself with the bootstrap token
(WHILLY_BOOTSTRAP_TOKEN_FILE, which it deletes once read, or WHILLY_BOOTSTRAP_TOKEN, which
it removes from its environment), prints the new worker id on stderr, and revokes its own
token when it exits. SIGTERM or SIGINT stops the agent's whole process group and releases
the task before exiting.

Exit codes: 0 done (--once, --drain, --max-tasks) or stopped by a signal, 1 an operation
error, 2 a configuration error (all problems reported at once) or a control plane that
refuses the token, 3 --drain found the whole fleet paused ('whilly pause'): it says who
paused it and since when and stops at once instead of waiting for the resume (run it
again after 'whilly resume'). Without --drain a worker waits out a pause, saying so once.

Examples:
  WHILLY_WORKER_TOKEN=whilly_w_… whilly-worker --connect https://whilly.example.com --agent claude
  WHILLY_BOOTSTRAP_TOKEN_FILE=/run/secrets/boot whilly-worker --connect https://whilly.example.com \
    --labels linux,gpu --drain
  whilly-worker --connect http://127.0.0.1:8000 --token-file ~/.whilly/token --plan demo --once

Environment (a flag wins over its variable):
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
		fmt.Fprint(stderr, usage, config.Help(config.Worker), "\nFlags:\n")
		fs.PrintDefaults()
	}
	c := config.New(getenv)
	var (
		connect   = fs.String("connect", c.Raw(config.ControlURL), "control plane URL (WHILLY_CONTROL_URL)")
		tokenFile = fs.String("token-file", "", "read the worker token from this file")
		workerID  = fs.String("worker-id", c.Raw(config.WorkerID), "worker id (WHILLY_WORKER_ID; learned from the token when empty)")
		planID    = fs.String("plan", c.Raw(config.Plan), "claim only from this plan (WHILLY_PLAN)")
		labels    = fs.String("labels", "", "comma-separated labels this worker offers (when it registers itself)")
		agentName = fs.String("agent", c.String(config.Agent), "agent: "+strings.Join(agent.Names(), ", ")+" (WHILLY_AGENT)")
		model     = fs.String("model", c.Raw(config.Model), "model passed to the agent (WHILLY_MODEL)")
		once      = fs.Bool("once", false, "run one task, then exit")
		drain     = fs.Bool("drain", false, "exit 0 when nothing this worker may claim is pending, running or retrying; exit 3 at once when the fleet is paused")
		maxTasks  = fs.Int("max-tasks", 0, "exit after this many tasks (0: no limit)")
		insecure  = fs.Bool("insecure", false, "allow plain http:// to a non-loopback control plane")
		logDir    = fs.String("log-dir", "", "write each attempt's agent output to a file under this directory")
		workDir   = fs.String("workdir", "", "directory the agent works in (default: the current one)")
		wsDir     = fs.String("workspace-dir", c.Raw(config.WorkspaceDir), "per-plan checkouts of repository plans (WHILLY_WORKSPACE_DIR; default <user cache dir>/whilly/workspaces)")
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
	if err := c.Check(config.Worker); err != nil {
		return fail(2, "%v", err)
	}
	log, err := logging.New(stderr, c, slog.LevelInfo)
	if err != nil {
		return fail(2, "%v", err) // unreachable: Check covers the log variables
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
		tok, _ = c.Secret(config.WorkerToken) // its error was reported by Check
	}
	if *tokenFile != "" {
		b, err := os.ReadFile(*tokenFile)
		if err != nil {
			return fail(2, "read the token file: %v", err)
		}
		tok = strings.TrimSpace(string(b))
	}
	timeout, err := c.Duration(config.AgentTimeout)
	if err != nil {
		return fail(2, "%v", err)
	}
	// Before registering: a worker that cannot box its agent must not join the fleet.
	sb, err := workerenv.OpenSandbox(ctx, getenv, *agentName, log)
	if err != nil {
		return fail(2, "%v", err)
	}
	cfg := workerenv.AgentConfig(c)
	cfg.Logger = log
	if cfg.Sim, err = simFromEnv(c); err != nil {
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
	boot, err := bootstrapToken(c, getenv)
	if err != nil {
		return fail(2, "%v", err)
	}
	if tok == "" {
		if boot == "" {
			return fail(2, "no worker token: set WHILLY_WORKER_TOKEN (or --token-file), or WHILLY_BOOTSTRAP_TOKEN_FILE (or WHILLY_BOOTSTRAP_TOKEN) to register")
		}
		host, _ := os.Hostname()
		reg, err := api.WithToken(boot).Register(ctx, client.RegisterRequest{Hostname: host, Labels: config.SplitList(*labels)})
		if err != nil {
			return fail(2, "register with %s: %v", *connect, err)
		}
		fmt.Fprintf(stderr, "registered worker_id: %s\n", reg.WorkerID)
		api, *workerID = api.WithToken(reg.Token), reg.WorkerID
		defer revokeSelf(ctx, api, reg.WorkerID, log)
	}
	if *workerID == "" {
		me, err := api.Me(ctx)
		if err != nil {
			return fail(2, "learn the worker id from the token at %s: %v", *connect, err)
		}
		*workerID = me.ID
	}
	// Before claiming: a plan without a repository runs in the work directory, and one
	// that would expose HOME to the agent would fail every attempt of it.
	if err := worker.CheckWorkDir(sb, *agentName, *workDir, getenv("HOME")); err != nil && *planID != "" {
		if p, perr := api.GetPlan(ctx, *planID); perr == nil && p.Repo == "" {
			return fail(2, "%s", workDirAdvice(err))
		}
	}
	gate, err := workerenv.GateFromConfig(c)
	if err != nil {
		return fail(2, "%v", err)
	}
	cache, err := workerenv.CacheFromConfig(c)
	if err != nil {
		return fail(2, "%v", err)
	}
	w, err := worker.New(api, ag, log, worker.Config{
		WorkerID: *workerID, PlanID: *planID, Model: *model, Once: *once, Drain: *drain,
		MaxTasks: *maxTasks, AgentTimeout: timeout, LogDir: *logDir, WorkDir: *workDir, Home: getenv("HOME"), WorkspaceDir: *wsDir,
		Sandbox: cfg.Sandbox, Gate: gate, Cache: cache,
	})
	if err != nil {
		return fail(2, "%v", err)
	}
	sum, err := w.Run(ctx)
	// Read before a self-registered worker revokes its token (deferred above).
	plans := worker.ReadPlans(ctx, api, *planID, sum, log)
	worker.WriteReport(stdout, sum, plans)
	for _, h := range sum.Held {
		fmt.Fprintf(stderr, "whilly-worker: left %s of plan %s pending: %s\n", h.TaskID, h.PlanID, h.Detail)
	}
	if more := sum.HeldTotal - len(sum.Held); more > 0 {
		fmt.Fprintf(stderr, "whilly-worker: and %d more tasks it cannot claim\n", more)
	}
	switch {
	case err == nil && *drain:
		if why := drainVerdict(*planID, sum, plans); why != "" {
			return fail(1, "%s", why)
		}
		return 0
	case err == nil, errors.Is(err, worker.ErrStopped):
		return 0
	case errors.Is(err, worker.ErrFleetPaused):
		return fail(3, "%v; run this worker again then", err)
	case errors.Is(err, sandbox.ErrExposesHome):
		return fail(2, "%s", workDirAdvice(err))
	case worker.Fatal(err), errors.Is(err, agent.ErrNotReady):
		return fail(2, "%v", err)
	default:
		return fail(1, "%v", err)
	}
}

// workDirAdvice is CheckWorkDir's refusal with what to do about it.
func workDirAdvice(err error) string {
	return fmt.Sprintf("%v; start whilly-worker in a project directory, or pass --workdir DIR", err)
}

// bootstrapToken reads the bootstrap token (WHILLY_BOOTSTRAP_TOKEN, or the file named by
// WHILLY_BOOTSTRAP_TOKEN_FILE, which it deletes once read so that nothing started later
// finds it) and takes WHILLY_BOOTSTRAP_TOKEN out of the process environment, so that no
// child process inherits it. The initial environment stays readable in
// /proc/self/environ: that is why the Action passes the token in a file.
func bootstrapToken(c *config.Env, getenv func(string) string) (string, error) {
	boot, _ := c.Secret(config.BootstrapToken) // its error was reported by Check
	if err := os.Unsetenv(string(config.BootstrapToken)); err != nil {
		return "", fmt.Errorf("remove %s from the environment: %w", config.BootstrapToken, err)
	}
	if file := strings.TrimSpace(getenv(string(config.BootstrapToken) + "_FILE")); file != "" && boot != "" {
		if err := os.Remove(file); err != nil && !errors.Is(err, os.ErrNotExist) {
			return "", fmt.Errorf("delete the bootstrap token file once read: %w", err)
		}
	}
	return boot, nil
}

// revokeSelf ends the token of a worker that registered itself, as it exits: nobody
// else holds that token, and it must not outlive the worker.
func revokeSelf(ctx context.Context, api *client.Client, workerID string, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 15*time.Second)
	defer cancel()
	if err := api.RevokeSelf(ctx, workerID); err != nil {
		log.WarnContext(ctx, "could not revoke this worker's own token; revoke it with 'whilly worker revoke'", "worker_id", workerID, "error", err)
		return
	}
	log.InfoContext(ctx, "worker token revoked", "worker_id", workerID)
}

// drainVerdict says why a drained run failed (the GitHub Action's step): a task it
// ran ended FAILED, or its plan ended FAILED or CANCELLED or is paused on its budget. ""
// means it did not.
func drainVerdict(planID string, sum worker.Summary, plans []worker.PlanState) string {
	if n := len(sum.TasksFailed); n > 0 {
		return fmt.Sprintf("%d tasks this worker ran ended FAILED: %s", n, strings.Join(sum.TasksFailed, ", "))
	}
	if planID == "" {
		return ""
	}
	st := plans[0] // ReadPlans puts planID first
	if st.Err != nil {
		return fmt.Sprintf("read the state of plan %s: %v", planID, st.Err)
	}
	p := st.Plan
	switch {
	case p.Status == plan.PlanFailed, p.Status == plan.PlanCancelled:
		return fmt.Sprintf("plan %s ended %s", planID, p.Status)
	case p.Status == plan.PlanPaused && p.PauseReason == "budget":
		return fmt.Sprintf("plan %s is paused: it reached its budget ($%s spent)", planID, p.SpentUSD)
	}
	return ""
}

// simFromEnv reads the sim agent's settings. Unset, the sim finishes at once, free and
// always successful: the setting of benchmarks.
func simFromEnv(c *config.Env) (agent.SimConfig, error) {
	sc := agent.SimConfig{Seed: uint64(time.Now().UnixNano())}
	var err error
	if sc.Delay, err = c.Duration(config.SimDelay); err != nil {
		return sc, err
	}
	if sc.Cost, _, err = c.USD(config.SimCost); err != nil {
		return sc, err
	}
	sc.FailRate, err = c.Number(config.SimFailRate)
	return sc, err
}
