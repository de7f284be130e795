package config

import (
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/whilly-go/whilly/internal/prices"
	"github.com/whilly-go/whilly/plan"
)

// The variables. Keep the names exactly; add freely.
const (
	DatabaseURL    Name = "WHILLY_DATABASE_URL"
	DataDir        Name = "WHILLY_DATA_DIR"
	Listen         Name = "WHILLY_LISTEN"
	PublicURL      Name = "WHILLY_PUBLIC_URL"
	BootstrapToken Name = "WHILLY_BOOTSTRAP_TOKEN"
	MetricsToken   Name = "WHILLY_METRICS_TOKEN"
	APIToken       Name = "WHILLY_API_TOKEN"
	LogLevel       Name = "WHILLY_LOG_LEVEL"
	LogFormat      Name = "WHILLY_LOG_FORMAT"
	LeaseTTL       Name = "WHILLY_LEASE_TTL"
	MaxAttempts    Name = "WHILLY_MAX_ATTEMPTS"
	TrustedProxies Name = "WHILLY_TRUSTED_PROXIES"

	ControlURL   Name = "WHILLY_CONTROL_URL"
	WorkerToken  Name = "WHILLY_WORKER_TOKEN"
	WorkerID     Name = "WHILLY_WORKER_ID"
	Plan         Name = "WHILLY_PLAN"
	WorkspaceDir Name = "WHILLY_WORKSPACE_DIR"

	Agent        Name = "WHILLY_AGENT"
	AgentCmd     Name = "WHILLY_AGENT_CMD"
	AgentTimeout Name = "WHILLY_AGENT_TIMEOUT"
	Model        Name = "WHILLY_MODEL"
	ClaudeBin    Name = "CLAUDE_BIN"
	CodexBin     Name = "CODEX_BIN"
	PricesFile   Name = "WHILLY_PRICES_FILE"
	SimDelay     Name = "WHILLY_SIM_DELAY"
	SimCost      Name = "WHILLY_SIM_COST"
	SimFailRate  Name = "WHILLY_SIM_FAIL_RATE"

	Sandbox           Name = "WHILLY_SANDBOX"
	SandboxAllowHosts Name = "WHILLY_SANDBOX_ALLOW_HOSTS"
	SandboxNet        Name = "WHILLY_SANDBOX_NET"
	AgentEnv          Name = "WHILLY_AGENT_ENV"
	SandboxRegistries Name = "WHILLY_SANDBOX_REGISTRIES"
	SandboxTools      Name = "WHILLY_SANDBOX_TOOLS"
	SandboxMemory     Name = "WHILLY_SANDBOX_MEMORY"
	SandboxPids       Name = "WHILLY_SANDBOX_PIDS"
	SandboxDisk       Name = "WHILLY_SANDBOX_DISK"
	AgentHome         Name = "WHILLY_AGENT_HOME"
	CacheDir          Name = "WHILLY_CACHE_DIR"
	CacheMaxBytes     Name = "WHILLY_CACHE_MAX_BYTES"
	ProtectedPaths    Name = "WHILLY_PROTECTED_PATHS"
	DiffMaxBytes      Name = "WHILLY_DIFF_MAX_BYTES"

	Planner        Name = "WHILLY_PLANNER"
	PlannerTimeout Name = "WHILLY_PLANNER_TIMEOUT"
	TrizEnabled    Name = "WHILLY_TRIZ_ENABLED"
	TrizTimeout    Name = "WHILLY_TRIZ_TIMEOUT"
	TrizAgent      Name = "WHILLY_TRIZ_AGENT"
	TrizModel      Name = "WHILLY_TRIZ_MODEL"

	GitHubAppID             Name = "WHILLY_GITHUB_APP_ID"
	GitHubPrivateKey        Name = "WHILLY_GITHUB_PRIVATE_KEY"
	GitHubWebhookSecret     Name = "WHILLY_GITHUB_WEBHOOK_SECRET"
	GitHubAPIURL            Name = "WHILLY_GITHUB_API_URL"
	GitHubToken             Name = "WHILLY_GITHUB_TOKEN"
	GitHubDeliveries        Name = "WHILLY_GITHUB_DELIVERIES"
	GitHubPullInterval      Name = "WHILLY_GITHUB_PULL_INTERVAL"
	GitHubMirrorInterval    Name = "WHILLY_GITHUB_MIRROR_INTERVAL"
	GitHubReconcileInterval Name = "WHILLY_GITHUB_RECONCILE_INTERVAL"
	GitHubBudgetUSD         Name = "WHILLY_GITHUB_BUDGET_USD"
	GitHubAllowedOwners     Name = "WHILLY_GITHUB_ALLOWED_OWNERS"
	RequireApproval         Name = "WHILLY_REQUIRE_APPROVAL"
	PRMaxRounds             Name = "WHILLY_PR_MAX_ROUNDS"
	DispatchActions         Name = "WHILLY_DISPATCH_ACTIONS"
	DispatchInterval        Name = "WHILLY_DISPATCH_INTERVAL"
	GitHubClientID          Name = "WHILLY_GITHUB_CLIENT_ID"
	GitHubClientSecret      Name = "WHILLY_GITHUB_CLIENT_SECRET"
	TokenSealKey            Name = "WHILLY_TOKEN_SEAL_KEY"
	TokenSealKeyOld         Name = "WHILLY_TOKEN_SEAL_KEY_OLD"
)

// AgentNames are the built-in agents (a test in package agent keeps them equal to
// agent.Names).
func AgentNames() []string { return []string{"claude", "codex", "command", "sim"} }

// Section titles group the table in docs and help, in this order.
const (
	secServer  = "Server"
	secWorker  = "Worker"
	secAgent   = "Agent"
	secSandbox = "Sandbox and diff gate"
	secPlan    = "Planning and failure analysis"
	secGitHub  = "GitHub App"
)

// Sections returns the section titles in table order.
func Sections() []string {
	return []string{secServer, secWorker, secAgent, secSandbox, secPlan, secGitHub}
}

// Vars returns the table, grouped by Section. Every call builds a fresh slice.
func Vars() []Var {
	db := []Command{Any}
	srv := []Command{Serve, Run}
	wrk := []Command{Worker, Run}
	agt := []Command{Worker, Run, Serve, Init, Forge}
	gh := []Command{Serve, Run, Forge, Doctor}
	return []Var{
		// Server
		{Name: DatabaseURL, Section: secServer, Kind: KindURL, Schemes: []string{"postgres", "postgresql"}, Commands: db,
			DefaultText: "the embedded cluster", Doc: "Postgres URL (postgres://…); unset: a private cluster in WHILLY_DATA_DIR on a unix socket"},
		{Name: DataDir, Section: secServer, Kind: KindPath, Commands: db,
			DefaultText: "$XDG_DATA_HOME/whilly, else ~/.local/share/whilly", Doc: "data directory: the embedded cluster, attempt logs, the App file of `whilly app create`"},
		{Name: Listen, Section: secServer, Kind: KindAddr, Default: "127.0.0.1:8000", Commands: []Command{Serve},
			Doc: "address `whilly serve` listens on (`--listen` wins)"},
		{Name: PublicURL, Section: secServer, Kind: KindURL, Commands: []Command{Serve, Run, Forge, AppCmd, Doctor},
			Doc: "the control plane's external URL: links in GitHub comments, the App's webhook URL"},
		{Name: TrustedProxies, Section: secServer, Kind: KindList, Commands: srv, Check: prefixList,
			DefaultText: "none", Doc: "reverse proxies in front of `whilly serve` (comma list of IPs and CIDRs): behind one, `/webhook` counts a sender's bytes by the right-most X-Forwarded-For address that is not a trusted proxy; from any other peer the header is ignored"},
		{Name: BootstrapToken, Section: secServer, Kind: KindSecret, Commands: []Command{Serve, Run, Worker, Register},
			Doc: "lets workers register (`POST /v1/workers/register`) and do nothing else; whilly-worker deletes its _FILE once read"},
		{Name: MetricsToken, Section: secServer, Kind: KindSecret, Commands: srv,
			Doc: "bearer token `/metrics` requires; when set, metrics also carry plan labels"},
		{Name: APIToken, Section: secServer, Kind: KindSecret, Commands: []Command{Dashboard, Events, TaskCmd},
			Doc: "read token of `whilly dashboard --connect`, `whilly events tail --connect` and `whilly task log --connect`; admin token of `whilly pause`, `whilly resume` and `whilly plan pause|resume|approve` with `--connect`"},
		{Name: LogLevel, Section: secServer, Kind: KindEnum, Values: []string{"debug", "info", "warn", "error"},
			Commands: []Command{Any, Worker}, DefaultText: "info for serve and whilly-worker, warn for other commands",
			Doc: "least severe log level written to stderr"},
		{Name: LogFormat, Section: secServer, Kind: KindEnum, Values: []string{"text", "json"}, Default: "text",
			Commands: []Command{Any, Worker}, Doc: "log format: `text` (key=value) or `json` (one object a line)"},
		{Name: LeaseTTL, Section: secServer, Kind: KindDuration, Default: "60s", Commands: db,
			Doc: "lease lifetime of a claim; heartbeats extend it"},
		{Name: MaxAttempts, Section: secServer, Kind: KindInt, Default: "3", Min: 1, Max: float64(plan.MaxMaxAttempts), Commands: db,
			Doc: "attempt limit of tasks whose plan names none"},

		// Worker
		{Name: ControlURL, Section: secWorker, Kind: KindURL, Commands: []Command{Worker, Register},
			Doc: "control plane URL (`--connect` wins); plain http only to loopback unless `--insecure`"},
		{Name: WorkerToken, Section: secWorker, Kind: KindSecret, Commands: []Command{Worker},
			Doc: "worker token printed by `whilly worker register`"},
		{Name: WorkerID, Section: secWorker, Kind: KindString, Commands: []Command{Worker},
			Doc: "worker id printed by `whilly worker register`"},
		{Name: Plan, Section: secWorker, Kind: KindString, Commands: []Command{Worker},
			Doc: "claim only from this plan (`--plan` wins)"},
		{Name: WorkspaceDir, Section: secWorker, Kind: KindPath, Commands: wrk,
			DefaultText: "<user cache dir>/whilly/workspaces", Doc: "per-plan checkouts of repository plans"},

		// Agent
		{Name: Agent, Section: secAgent, Kind: KindEnum, Values: AgentNames(), Default: "claude", Commands: wrk,
			Doc: "agent that runs tasks (`--agent` wins)"},
		{Name: AgentCmd, Section: secAgent, Kind: KindString, Commands: agt,
			Doc: "executable of the `command` agent: prompt on stdin, one JSON result on stdout"},
		{Name: AgentTimeout, Section: secAgent, Kind: KindDuration, Default: "30m", Commands: wrk,
			Doc: "time limit of one attempt; the agent's whole process group is killed after it"},
		{Name: Model, Section: secAgent, Kind: KindString, Commands: agt,
			Doc: "model passed to the agent (`--model` wins)"},
		{Name: ClaudeBin, Section: secAgent, Kind: KindString, Default: "claude", Commands: agt,
			Doc: "Claude Code executable"},
		{Name: CodexBin, Section: secAgent, Kind: KindString, Default: "codex", Commands: agt,
			Doc: "OpenAI Codex CLI executable"},
		{Name: PricesFile, Section: secAgent, Kind: KindFile, Commands: agt, Check: pricesFile,
			DefaultText: "built-in OpenAI list prices",
			Doc:         "per-model token prices (JSON, USD per million tokens: `{\"models\": {\"gpt-5-codex\": {\"input\": 1.25, \"cached_input\": 0.125, \"output\": 10}}}`) that extend and override the built-in table; codex's tokens are charged at them, marked estimated"},
		{Name: SimDelay, Section: secAgent, Kind: KindDuration, Default: "0", ZeroOK: true, Commands: []Command{Worker},
			Doc: "`sim` agent of whilly-worker: how long each attempt takes"},
		{Name: SimCost, Section: secAgent, Kind: KindUSD, Default: "0.02", Commands: []Command{Worker, Run},
			Doc: "`sim` agent of whilly-worker and `whilly run` (`--sim-cost` wins): USD each attempt costs"},
		{Name: SimFailRate, Section: secAgent, Kind: KindNumber, Default: "0", Min: 0, Max: 1, Commands: []Command{Worker},
			Doc: "`sim` agent of whilly-worker: share of attempts that fail"},

		// Sandbox and diff gate
		{Name: Sandbox, Section: secSandbox, Kind: KindEnum, Values: []string{"bwrap", "none"}, Commands: agt,
			DefaultText: "bwrap where bubblewrap works", Doc: "`bwrap` runs each agent process (task agent, verification, planner, analyzer) under bubblewrap; `none` turns the sandbox off (warned about); unset and bubblewrap unusable, an agent that runs a process exits 2"},
		{Name: SandboxAllowHosts, Section: secSandbox, Kind: KindList, Commands: agt,
			DefaultText: "the agent's model API host", Doc: "hosts the agent may reach through the proxy besides its model API's (its base URL's host when overridden): `host` (ports 80, 443), `host:port`, `*.domain`"},
		{Name: SandboxNet, Section: secSandbox, Kind: KindEnum, Values: []string{"proxy", "none", "host"}, Default: "proxy", Commands: agt,
			Doc: "agent network: `proxy` (loopback only; the allowed hosts through the worker's proxy, others refused as `agent.egress_denied` events), `none`, or `host`"},
		{Name: AgentEnv, Section: secSandbox, Kind: KindList, Commands: agt,
			Doc: "names of more environment variables passed to the agent (comma list); the rest of the worker's environment never is"},
		{Name: SandboxRegistries, Section: secSandbox, Kind: KindEnum, Values: []string{"auto", "off"}, Default: "auto", Commands: agt,
			Doc: "`auto`: the agent may reach, through the proxy, each ecosystem's default package registry and those the worker's own configuration names (GOPROXY, npm registry, pip index …; logged at start); `off`: only the model API and WHILLY_SANDBOX_ALLOW_HOSTS"},
		{Name: SandboxTools, Section: secSandbox, Kind: KindList, Commands: agt,
			Doc: "more toolchain directories bound read-only into the box (comma list; they may lie under HOME, as rustup's or pyenv's do); what PATH finds outside HOME is bound anyway"},
		{Name: SandboxMemory, Section: secSandbox, Kind: KindSize, Default: "4GiB", Min: 16 << 20, Max: 1 << 50, Commands: agt,
			Doc: "memory one attempt's box may use (its own cgroup); past it the attempt ends with reason `resource_limit`"},
		{Name: SandboxPids, Section: secSandbox, Kind: KindInt, Default: "1024", Min: 16, Max: 1 << 22, Commands: agt,
			Doc: "processes and threads one attempt's box may run at once (its own cgroup)"},
		{Name: SandboxDisk, Section: secSandbox, Kind: KindSize, Default: "10GiB", Min: 1 << 20, Max: 1 << 50, Commands: agt,
			Doc: "bytes one attempt may hold on disk: its checkout and the box's /tmp together"},
		{Name: AgentHome, Section: secSandbox, Kind: KindPath, Commands: agt,
			DefaultText: "the agent's configuration in the worker's HOME",
			Doc:         "operator-owned directory the box's HOME is seeded from (read only; whilly never writes it): `.claude/`, `.claude.json`, `.codex/`; refresh tokens are never copied"},
		{Name: CacheDir, Section: secSandbox, Kind: KindPath, Commands: wrk,
			DefaultText: "<user cache dir>/whilly/cache",
			Doc:         "dependency and build caches of the box: a repository's base cache (written by its setup script) and each plan's own"},
		{Name: CacheMaxBytes, Section: secSandbox, Kind: KindSize, Default: "10GiB", Min: 1 << 20, Max: 1 << 50, Commands: wrk,
			Doc: "bytes the caches of WHILLY_CACHE_DIR may hold on this worker; the least recently used are removed past it"},
		{Name: ProtectedPaths, Section: secSandbox, Kind: KindList, Default: ".github/**,.gitmodules", Commands: wrk,
			Doc: "globs an attempt's diff may not touch (comma list)"},
		{Name: DiffMaxBytes, Section: secSandbox, Kind: KindInt, Default: "5242880", Min: 1, Max: 1 << 40, Commands: wrk,
			Doc: "bytes an attempt may add or change, all files together (5 MiB)"},

		// Planning and failure analysis
		{Name: Planner, Section: secPlan, Kind: KindEnum, Values: AgentNames(), Commands: []Command{Serve, Run, Init, Forge},
			DefaultText: "claude for `whilly init`; none for issues", Doc: "planner agent that turns an idea or an issue into a plan"},
		{Name: PlannerTimeout, Section: secPlan, Kind: KindDuration, Default: "10m", Commands: []Command{Serve, Run, Init, Forge},
			Doc: "time limit of one planner call (a plan may take two: the second with the first answer's problems)"},
		{Name: TrizEnabled, Section: secPlan, Kind: KindBool, Default: "0", Commands: srv,
			Doc: "`1`: analyse every failed attempt for a contradiction (TRIZ)"},
		{Name: TrizTimeout, Section: secPlan, Kind: KindDuration, Default: "25s", Commands: srv,
			Doc: "time limit of one analysis"},
		{Name: TrizAgent, Section: secPlan, Kind: KindEnum, Values: AgentNames(), Commands: srv,
			DefaultText: "WHILLY_AGENT, else claude", Doc: "analyzer agent"},
		{Name: TrizModel, Section: secPlan, Kind: KindString, Commands: srv,
			DefaultText: "WHILLY_MODEL", Doc: "analyzer model"},

		// GitHub App
		{Name: GitHubAppID, Section: secGitHub, Kind: KindString, Commands: gh, Check: positiveInt,
			Needs: []Name{GitHubPrivateKey, GitHubWebhookSecret}, Doc: "the App's numeric id; with it `whilly serve` runs the App"},
		{Name: GitHubPrivateKey, Section: secGitHub, Kind: KindSecret, Commands: gh, Check: privateKey,
			Doc: "the App's private key (PEM; `\\n` escapes allowed)"},
		{Name: GitHubWebhookSecret, Section: secGitHub, Kind: KindSecret, Commands: []Command{Serve, Run, Doctor},
			Doc: "the App's webhook secret; deliveries without its signature get 401"},
		{Name: GitHubAPIURL, Section: secGitHub, Kind: KindURL, Default: "https://api.github.com/", Commands: gh,
			Doc: "REST base URL (GitHub Enterprise Server: https://HOST/api/v3/)"},
		{Name: TokenSealKey, Section: secGitHub, Kind: KindSecret, Commands: srv, Check: sealKey,
			DefaultText: "generated once in WHILLY_DATA_DIR/token-seal.key",
			Doc:         "the secret (32 bytes or more) the push tokens of leases are sealed with in the database; every control plane of one database must have the same, so set it when there are several"},
		{Name: TokenSealKeyOld, Section: secGitHub, Kind: KindSecret, Commands: srv, Check: sealKey,
			Doc: "the former WHILLY_TOKEN_SEAL_KEY after a rotation: it seals nothing, but the tokens sealed under it still open for their revocation (an hour is enough)"},
		{Name: GitHubToken, Section: secGitHub, Kind: KindSecret, Commands: []Command{Forge},
			Doc: "a token for `whilly forge intake` without an App"},
		{Name: GitHubDeliveries, Section: secGitHub, Kind: KindEnum, Values: []string{"push", "pull"}, Default: "push", Commands: srv,
			Doc: "`push`: GitHub posts to `/webhook`; `pull`: poll the App's delivery log (no public URL needed)"},
		{Name: GitHubPullInterval, Section: secGitHub, Kind: KindDuration, Default: "10s", Commands: srv, Check: atLeastASecond,
			Doc: "pull mode: how often the App's delivery log is polled (the latency; one API call per poll, plus one per new delivery)"},
		{Name: GitHubMirrorInterval, Section: secGitHub, Kind: KindDuration, Default: "3s", Commands: srv,
			Doc: "status comment edits of a plan are coalesced to one per interval at most; an installation's live plans also share 6 syncs a minute (one every 10 s for a plan alone), under GitHub's 500 content writes an hour"},
		{Name: GitHubReconcileInterval, Section: secGitHub, Kind: KindDuration, Default: "5m", Commands: srv,
			Doc: "how often labels and comments are repaired and failed deliveries redelivered"},
		{Name: GitHubBudgetUSD, Section: secGitHub, Kind: KindUSD, Default: "10", Commands: []Command{Serve, Run, Forge},
			Doc: "budget of a plan from an issue that names none, and the cap of one that does"},
		{Name: GitHubAllowedOwners, Section: secGitHub, Kind: KindList, Commands: []Command{Serve, Run, Forge},
			DefaultText: "every owner", Doc: "owners whose issues may start plans (comma list)"},
		{Name: RequireApproval, Section: secGitHub, Kind: KindBool, Default: "0", Commands: []Command{Serve, Run, Forge},
			Doc: "`1`: plans from issues start paused until `/whilly approve DIGEST`"},
		{Name: PRMaxRounds, Section: secGitHub, Kind: KindInt, Default: "3", Min: 0, Max: 100, Commands: srv,
			Doc: "review/CI feedback rounds per pull request"},
		{Name: DispatchActions, Section: secGitHub, Kind: KindBool, Default: "0", Commands: srv,
			Doc: "`1`: send `repository_dispatch` `whilly-work` when a plan of a repository starts"},
		{Name: DispatchInterval, Section: secGitHub, Kind: KindDuration, Default: "10m", Commands: srv,
			Doc: "dispatch again at most this often while ready tasks wait with nothing claiming"},
		{Name: GitHubClientID, Section: secGitHub, Kind: KindString, Commands: srv, Needs: []Name{GitHubClientSecret},
			DefaultText: "the App file's client_id", Doc: "the App's OAuth client id: with its secret, the dashboard offers \"Sign in with GitHub\""},
		{Name: GitHubClientSecret, Section: secGitHub, Kind: KindSecret, Commands: srv, Needs: []Name{GitHubClientID},
			DefaultText: "the App file's client_secret", Doc: "the App's OAuth client secret (\"Sign in with GitHub\")"},
	}
}

// pricesFile loads the price table the way the codex agent will, so a bad file stops
// the command at start-up.
func pricesFile(s string) error {
	_, err := prices.Load(s)
	return err
}

func positiveInt(s string) error {
	if n, err := strconv.ParseInt(s, 10, 64); err != nil || n <= 0 {
		return fmt.Errorf("%q is not the App's numeric id (a positive whole number)", s)
	}
	return nil
}

// sealKey checks a push token seal secret's length.
func sealKey(s string) error {
	if len(s) < 32 {
		return fmt.Errorf("it is %d bytes; it must be 32 or more (openssl rand -base64 32)", len(s))
	}
	return nil
}

// PEM returns a private key squeezed onto one line (`\n` escapes) as PEM text.
func PEM(s string) string {
	if !strings.Contains(s, "\n") {
		return strings.ReplaceAll(s, `\n`, "\n")
	}
	return s
}

func privateKey(s string) error {
	block, _ := pem.Decode([]byte(PEM(s)))
	if block == nil {
		return errors.New("not a PEM private key (-----BEGIN RSA PRIVATE KEY----- …)")
	}
	if _, err := x509.ParsePKCS1PrivateKey(block.Bytes); err == nil {
		return nil
	}
	if _, err := x509.ParsePKCS8PrivateKey(block.Bytes); err == nil {
		return nil
	}
	return errors.New("the PEM block is not an RSA private key")
}

// atLeastASecond refuses a poll interval under one second (River's periodic jobs are
// unique per period of at least a second).
// ParsePrefixes reads IP addresses and CIDR prefixes (a lone address is a prefix of its
// full length).
func ParsePrefixes(items []string) ([]netip.Prefix, error) {
	out := make([]netip.Prefix, 0, len(items))
	for _, it := range items {
		if p, err := netip.ParsePrefix(it); err == nil {
			out = append(out, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(it)
		if err != nil {
			return nil, fmt.Errorf("%q is neither an IP address nor a CIDR prefix (10.0.0.0/8)", it)
		}
		a = a.Unmap()
		out = append(out, netip.PrefixFrom(a, a.BitLen()))
	}
	return out, nil
}

func prefixList(s string) error {
	_, err := ParsePrefixes(SplitList(s))
	return err
}

func atLeastASecond(s string) error {
	d, err := ParseDuration(s)
	if err == nil && d < time.Second {
		return fmt.Errorf("%q is shorter than 1s", s)
	}
	return nil
}
