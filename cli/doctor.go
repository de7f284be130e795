package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/whilly-go/whilly/agent"
	ghapp "github.com/whilly-go/whilly/app"
	"github.com/whilly-go/whilly/internal/config"
	"github.com/whilly-go/whilly/migrations"
	"github.com/whilly-go/whilly/queue"
	"github.com/whilly-go/whilly/sandbox"
	"github.com/whilly-go/whilly/server"
	"github.com/whilly-go/whilly/worker/workerenv"
)

// Statuses of a doctor check.
const (
	checkOK   = "ok"
	checkFail = "FAIL"
	checkSkip = "skip" // not configured, on purpose
	checkWarn = "warn" // works, but maybe not as the operator expects: not a failure
)

// doctorCheck is one line of `whilly doctor`. Details never hold a secret.
type doctorCheck struct {
	Name   string `json:"name"`
	Status string `json:"status"`
	Detail string `json:"detail"`
}

type doctorReport struct {
	OK     bool          `json:"ok"`
	Checks []doctorCheck `json:"checks"`
}

func (r *doctorReport) add(name, status, format string, args ...any) {
	r.Checks = append(r.Checks, doctorCheck{Name: name, Status: status, Detail: fmt.Sprintf(format, args...)})
}

// doctorTimeout bounds each check that waits on something (the database, GitHub, an
// agent CLI, the public URL).
const doctorTimeout = 10 * time.Second

func (a *app) doctorCommand() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "doctor [--json]",
		Short: "Check that this machine and configuration can run whilly",
		Long: `Check, one line each, what whilly needs: Postgres reachable and its schema up to date;
each agent whilly is configured to use (WHILLY_AGENT, default claude, and WHILLY_PLANNER)
found with its version, and logged in or its API key set; the sandbox (bubblewrap)
usable, and which PATH entries agents in it do not see; the GitHub App's configuration complete and its JWT accepted by GitHub (GET
/app); the webhook secret set; WHILLY_PUBLIC_URL reachable from this machine
(its /healthz answers); and, with the App, the workflows of its repositories (the
first 100, 50 files each) that would run the agent's code with secrets: a push to
whilly/**, whilly's pull requests, or workflow_run after those (ci secrets, one warning
each). Checks of what is not configured on purpose (no App, a local setup) are
skipped; a warning is no failure. It exits 1 when a check fails; it changes nothing, except that with
WHILLY_DATABASE_URL unset it starts the embedded database, as every command does.`,
		Example: `  whilly doctor
  whilly doctor --json`,
		Args: noArgs,
		// Unlike other commands, doctor reports bad variables as one of its checks
		// rather than refusing to run.
		PersistentPreRunE: func(*cobra.Command, []string) error { return a.useLogger(slog.LevelWarn) },
		RunE: func(cmd *cobra.Command, _ []string) error {
			rep := a.doctor(cmd.Context())
			if asJSON {
				if err := a.writeJSON(rep); err != nil {
					return err
				}
			} else {
				for _, c := range rep.Checks {
					a.printf("%-4s  %-22s %s\n", c.Status, c.Name, c.Detail)
				}
			}
			if !rep.OK {
				failed := 0
				for _, c := range rep.Checks {
					if c.Status == checkFail {
						failed++
					}
				}
				return failf("%d of %d checks failed", failed, len(rep.Checks))
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the checks as JSON")
	return cmd
}

func (a *app) doctor(ctx context.Context) *doctorReport {
	rep := &doctorReport{}
	if err := a.cfg.Check(config.Doctor); err != nil {
		msg := strings.TrimPrefix(err.Error(), "configuration: ")
		rep.add("configuration", checkFail, "%s", strings.ReplaceAll(msg, "\n", "; "))
	} else {
		rep.add("configuration", checkOK, "the variables doctor reads are valid")
	}
	a.doctorPostgres(ctx, rep)
	a.doctorAgents(ctx, rep)
	a.doctorSandbox(ctx, rep)
	doctorSandboxPath(a.io.Getenv, rep)
	a.doctorGitHub(ctx, rep)
	rep.OK = !slices.ContainsFunc(rep.Checks, func(c doctorCheck) bool { return c.Status == checkFail })
	return rep
}

func (a *app) doctorPostgres(ctx context.Context, rep *doctorReport) {
	where := "WHILLY_DATABASE_URL"
	if a.cfg.Raw(config.DatabaseURL) == "" {
		where = "the embedded cluster in " + a.dataDir()
	}
	ctx, cancel := context.WithTimeout(ctx, doctorTimeout)
	defer cancel()
	pool, err := a.connect(ctx)
	if err != nil {
		rep.add("postgres", checkFail, "%s: %v", where, err)
		rep.add("migrations", checkSkip, "the database cannot be reached")
		return
	}
	defer pool.Close()
	version, err := queue.ServerVersion(ctx, pool)
	if err != nil {
		rep.add("postgres", checkFail, "%s answers but cannot be queried: %v", where, err)
		return
	}
	rep.add("postgres", checkOK, "%s reachable, PostgreSQL %s", where, version)
	states, err := migrations.Status(ctx, pool)
	if err != nil {
		rep.add("migrations", checkFail, "%v", err)
		return
	}
	var pending []string
	for _, s := range states {
		if !s.Applied {
			pending = append(pending, fmt.Sprintf("%s %04d_%s", s.Line, s.Version, s.Name))
		}
	}
	if len(pending) > 0 {
		shown := strings.Join(pending[:min(3, len(pending))], ", ")
		if len(pending) > 3 {
			shown += fmt.Sprintf(" and %d more", len(pending)-3)
		}
		rep.add("migrations", checkFail, "%d pending (%s): run whilly migrate up, or start whilly serve", len(pending), shown)
		return
	}
	rep.add("migrations", checkOK, "schema up to date (%d migrations)", len(states))
}

// doctorAgents checks the agents whilly is configured to run: WHILLY_AGENT (default
// claude) and WHILLY_PLANNER.
func (a *app) doctorAgents(ctx context.Context, rep *doctorReport) {
	names := []string{firstNonEmpty(a.cfg.Raw(config.Agent), agent.NameClaude)}
	if p := a.cfg.Raw(config.Planner); p != "" && p != names[0] {
		names = append(names, p)
	}
	cfg := workerenv.AgentConfig(a.cfg)
	for _, name := range names {
		check := "agent " + name
		switch name {
		case agent.NameClaude, agent.NameCodex: // CLIs to find and ask, below
		case agent.NameCommand:
			if cfg.Command == "" {
				rep.add(check, checkFail, "WHILLY_AGENT_CMD is empty: set the command the command agent runs")
			} else {
				rep.add(check, checkOK, "runs WHILLY_AGENT_CMD; no CLI to check")
			}
			continue
		case agent.NameSim:
			rep.add(check, checkOK, "the simulated agent needs nothing")
			continue
		default:
			rep.add(check, checkFail, "unknown agent %q: use one of %s", name, strings.Join(agent.Names(), ", "))
			continue
		}
		ag, err := agent.New(name, cfg)
		if err != nil {
			rep.add(check, checkFail, "%v", err)
			continue
		}
		bin := agent.CLI(ag)
		path, err := exec.LookPath(bin)
		if err != nil {
			// agent.Check says how to install it.
			rep.add(check, checkFail, "%v", agent.Check(ag, a.io.Getenv))
			rep.add(check+" login", checkSkip, "the CLI is missing")
			continue
		}
		version, err := agent.CLIVersion(ctx, path, doctorTimeout)
		if err != nil {
			rep.add(check, checkFail, "%s is there but '%s --version' fails: %v", path, bin, err)
		} else {
			rep.add(check, checkOK, "%s, version %s", path, version)
		}
		if err := agent.Check(ag, a.io.Getenv); err != nil {
			rep.add(check+" login", checkFail, "%v", err)
		} else {
			rep.add(check+" login", checkOK, "an API key is set or the CLI is logged in")
		}
	}
}

func (a *app) doctorSandbox(ctx context.Context, rep *doctorReport) {
	set, err := sandbox.SettingsFromEnv(a.io.Getenv)
	if err != nil {
		rep.add("sandbox", checkFail, "%v", err)
		return
	}
	if set.Mode == sandbox.ModeNone {
		rep.add("sandbox", checkSkip, "WHILLY_SANDBOX=none: agents run unboxed, as the worker's user")
		return
	}
	ctx, cancel := context.WithTimeout(ctx, doctorTimeout)
	defer cancel()
	if err := sandbox.Check(ctx); err != nil {
		rep.add("sandbox", checkFail, "%v", err)
		return
	}
	msg := "bubblewrap makes boxes here"
	if sb, err := sandbox.New(sandbox.Config{Settings: set}); err == nil {
		// Whether the limits are a cgroup's or only a best effort.
		msg += "; " + sb.LimitsNote()
	}
	rep.add("sandbox", checkOK, "%s", msg)
}

// doctorSandboxPath names the entries of the worker's PATH that an agent's box does not
// see (relative ones, those under HOME), and how to show it a toolchain among them.
func doctorSandboxPath(getenv func(string) string, rep *doctorReport) {
	const check = "sandbox path"
	set, err := sandbox.SettingsFromEnv(getenv)
	switch {
	case err != nil:
		return // the sandbox line says what is wrong
	case set.Mode == sandbox.ModeNone:
		return
	}
	hidden := sandbox.HiddenPath(getenv("PATH"), getenv("HOME"), set.Tools)
	var fixable []string
	for _, d := range hidden {
		if filepath.IsAbs(d) {
			fixable = append(fixable, d)
		}
	}
	switch {
	case len(hidden) == 0:
		rep.add(check, checkOK, "the box sees every PATH entry (outside HOME, or in WHILLY_SANDBOX_TOOLS)")
	case len(fixable) == 0:
		rep.add(check, checkWarn, "the box does not see the relative PATH entries %s", strings.Join(hidden, ", "))
	default:
		rep.add(check, checkWarn, "the box does not see these PATH entries (relative, or under HOME): %s; "+
			"to give agents a toolchain among them, add its directory to WHILLY_SANDBOX_TOOLS (read-only in the box), such as WHILLY_SANDBOX_TOOLS=%s",
			strings.Join(hidden, ", "), strings.Join(fixable, ","))
	}
}

func (a *app) doctorGitHub(ctx context.Context, rep *doctorReport) {
	env, hasApp, err := a.readGitHubEnv()
	var f *ghapp.Factory // the App's, when GitHub accepts its JWT
	switch {
	case err != nil:
		rep.add("github app", checkFail, "%v", err)
	case !hasApp:
		rep.add("github app", checkSkip, "not configured: set WHILLY_GITHUB_APP_ID and WHILLY_GITHUB_PRIVATE_KEY, or run whilly app create")
	default:
		f = a.doctorAppJWT(ctx, rep, env)
	}
	switch {
	case len(env.WebhookSecret) > 0:
		rep.add("webhook secret", checkOK, "set")
	case hasApp:
		rep.add("webhook secret", checkFail, "WHILLY_GITHUB_WEBHOOK_SECRET is not set: the webhook refuses every delivery")
	case err != nil:
		rep.add("webhook secret", checkSkip, "the GitHub configuration is not readable (see github app)")
	default:
		rep.add("webhook secret", checkSkip, "no GitHub App")
	}
	switch public := a.cfg.String(config.PublicURL); {
	case public != "":
		a.doctorPublicURL(ctx, rep, public)
	case hasApp && !env.Pull:
		rep.add("public url", checkFail, "WHILLY_PUBLIC_URL is not set, so GitHub cannot deliver webhooks: set it, or set WHILLY_GITHUB_DELIVERIES=pull")
	case hasApp:
		rep.add("public url", checkSkip, "pull mode: no public URL needed")
	default:
		rep.add("public url", checkSkip, "WHILLY_PUBLIC_URL is not set")
	}
	if f == nil {
		rep.add(ciSecretsCheck, checkSkip, "needs the GitHub App (see github app)")
		return
	}
	doctorWorkflows(ctx, rep, f, ghapp.DefaultWorkflowScanLimits)
}

// doctorAppJWT checks that GitHub accepts the App's JWT and returns the App's factory
// when it does.
func (a *app) doctorAppJWT(ctx context.Context, rep *doctorReport, env server.GitHub) *ghapp.Factory {
	f, err := env.Factory(nil)
	if err != nil {
		rep.add("github app", checkFail, "%v", err)
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, doctorTimeout)
	defer cancel()
	ac, err := f.App(ctx)
	if err != nil {
		rep.add("github app", checkFail, "%v", err)
		return nil
	}
	self, err := ac.Self(ctx)
	if err != nil {
		rep.add("github app", checkFail, "App %d: GitHub refused its JWT or could not be reached (%v): check WHILLY_GITHUB_APP_ID, the private key and WHILLY_GITHUB_API_URL", env.AppID, err)
		return nil
	}
	rep.add("github app", checkOK, "App %s (id %d): GitHub accepts its JWT", self.Slug, self.ID)
	return f
}

// doctorPublicURL asks the control plane for its /healthz through the public URL, as
// GitHub and workers reach it.
func (a *app) doctorPublicURL(ctx context.Context, rep *doctorReport, public string) {
	if err := a.cfg.Err(config.PublicURL); err != nil {
		rep.add("public url", checkFail, "%v", err)
		return
	}
	target := strings.TrimRight(public, "/") + "/healthz"
	ctx, cancel := context.WithTimeout(ctx, doctorTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		rep.add("public url", checkFail, "WHILLY_PUBLIC_URL %q is not a URL: %v", public, err)
		return
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		rep.add("public url", checkFail, "%s cannot be reached from here: %v", target, err)
		return
	}
	defer func() { _ = resp.Body.Close() }() // a read-only GET: nothing to lose
	var h struct {
		Status string `json:"status"`
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &h) != nil || h.Status != "ok" {
		rep.add("public url", checkFail, "%s answered HTTP %d, not whilly's health: is whilly serve behind it?", target, resp.StatusCode)
		return
	}
	rep.add("public url", checkOK, "%s answers", target)
}
