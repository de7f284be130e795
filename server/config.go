package server

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/netip"
	"path/filepath"
	"strconv"
	"time"

	"github.com/whilly-go/whilly/agent"
	ghapp "github.com/whilly-go/whilly/app"
	"github.com/whilly-go/whilly/intake"
	"github.com/whilly-go/whilly/internal/config"
	"github.com/whilly-go/whilly/internal/pglocal"
	"github.com/whilly-go/whilly/queue"
	"github.com/whilly-go/whilly/worker/workerenv"
)

// Config is everything a control plane is built from, as plain values: FromEnv reads it
// from the environment, tests and benchmarks set or override its fields. New reads no
// environment variable.
type Config struct {
	// Queue tunes the store (lease TTL, attempts, backoff); New sets its Hooks.
	Queue queue.Config
	// BootstrapToken registers workers (WHILLY_BOOTSTRAP_TOKEN); MetricsToken guards
	// /metrics (WHILLY_METRICS_TOKEN).
	BootstrapToken, MetricsToken string
	// PublicURL is the control plane's address as users and GitHub see it
	// (WHILLY_PUBLIC_URL).
	PublicURL string
	// DataDir holds the push token seal key generated on first use (WHILLY_DATA_DIR).
	DataDir string
	// PollInterval is how often River's queues look for jobs besides the insert
	// notifications, but for those with an interval of their own; 0: River's default
	// (1 s). Tests shorten it.
	PollInterval time.Duration
	GitHub       GitHub
	TRIZ         TRIZ
	SignIn       SignIn
	// QuestionAgent builds, by name, the agent that answers questions (the planner, the
	// TRIZ analyzer): read-only and sandboxed. FromEnv gives the one configured like a
	// worker's agent; nil refuses every name.
	QuestionAgent func(name string, log *slog.Logger) (agent.Agent, error)
}

// GitHub is the GitHub side's configuration. Secrets come from variables or files, never
// flags, and are never printed.
type GitHub struct {
	// AppID, PrivateKey and WebhookSecret are the GitHub App's (WHILLY_GITHUB_APP_ID,
	// else the file of `whilly app create` in the data directory). AppID 0: no App.
	AppID         int64
	PrivateKey    []byte
	WebhookSecret []byte
	// Token (WHILLY_GITHUB_TOKEN) acts on GitHub without the App (whilly forge).
	Token string
	// IntakeOnly says the control plane is built to take issues in from the command line
	// (whilly forge), not to serve: the intake is built over Token too when there is no
	// App (the store then gets the GitHub side's hooks), and the App's webhook needs no
	// secret.
	IntakeOnly bool
	APIURL     string
	// Mirror paces the mirror (WHILLY_GITHUB_MIRROR_INTERVAL); its PublicURL, when
	// empty, is the control plane's.
	Mirror    ghapp.MirrorConfig
	Reconcile time.Duration
	// Dispatch (WHILLY_DISPATCH_ACTIONS) sends repository_dispatch whilly-work when a
	// plan of a repository starts, and again every DispatchIdle while its ready tasks
	// wait for a worker (WHILLY_DISPATCH_INTERVAL).
	Dispatch     bool
	DispatchIdle time.Duration
	// Pull (WHILLY_GITHUB_DELIVERIES=pull) polls the App's delivery log every
	// PullInterval (WHILLY_GITHUB_PULL_INTERVAL) instead of waiting for POST /webhook.
	Pull         bool
	PullInterval time.Duration
	// TrustedProxies (WHILLY_TRUSTED_PROXIES) are the reverse proxies whose
	// X-Forwarded-For names the webhook's sender.
	TrustedProxies []netip.Prefix
	// SealKey and OldSealKey seal and open the push tokens of leases
	// (WHILLY_TOKEN_SEAL_KEY, WHILLY_TOKEN_SEAL_KEY_OLD); New generates the first in
	// DataDir when it is unset (sealKeyOf).
	SealKey, OldSealKey string
	// Planner names the planner agent of issues (WHILLY_PLANNER; none when empty), each of
	// its calls bounded by PlannerTimeout.
	Planner        string
	PlannerTimeout time.Duration
	// Intake is what plans from issues may ask for and whose issues are taken in; New
	// sets its Planner from the one named by Planner unless it is set.
	Intake intake.Config
}

// HasApp reports whether the GitHub App is configured.
func (g GitHub) HasApp() bool { return g.AppID != 0 }

// TRIZ is the failure analyzer's configuration (WHILLY_TRIZ_*).
type TRIZ struct {
	Enabled bool
	// Agent and Model are the analyzer's: WHILLY_TRIZ_AGENT, else WHILLY_AGENT (and
	// WHILLY_TRIZ_MODEL, else WHILLY_MODEL).
	Agent, Model string
	Timeout      time.Duration
}

// SignIn is the App's OAuth client, for the dashboard's "Sign in with GitHub"
// (WHILLY_GITHUB_CLIENT_ID and _SECRET, else the file of `whilly app create`); empty:
// not offered.
type SignIn struct {
	ClientID, ClientSecret string
	// FromFile says the client came from the file of `whilly app create`.
	FromFile bool
}

// ConfigError is a problem of the configuration, not of the machine: the CLI exits 2 on
// it.
type ConfigError struct{ Err error }

func (e *ConfigError) Error() string { return e.Err.Error() }
func (e *ConfigError) Unwrap() error { return e.Err }

// configErrorf is a ConfigError made like fmt.Errorf.
func configErrorf(format string, args ...any) error {
	return &ConfigError{Err: fmt.Errorf(format, args...)}
}

// asConfigError wraps err, when there is one, as a ConfigError.
func asConfigError(err error) error {
	if err == nil {
		return nil
	}
	return &ConfigError{Err: err}
}

// FromEnv reads the control plane's configuration from the environment (the variables
// of `whilly serve` in the table of internal/config), returning every problem of the
// variables at once as one ConfigError.
func FromEnv(getenv func(string) string) (Config, error) {
	return fromEnv(getenv, true)
}

// Defaults is the configuration of an empty environment: the defaults of the table of
// internal/config, without the file of `whilly app create` (no App, no sign-in). The
// benchmarks build theirs on it.
func Defaults() Config {
	cfg, err := fromEnv(func(string) string { return "" }, false)
	if err != nil { // the table's defaults are valid: its tests check every one
		panic(fmt.Sprintf("server: the defaults of the configuration table: %v", err))
	}
	return cfg
}

// fromEnv is FromEnv; appFile says whether the file of `whilly app create` is read.
func fromEnv(getenv func(string) string, appFile bool) (Config, error) {
	c := config.New(getenv)
	if err := c.Check(config.Serve); err != nil {
		return Config{}, &ConfigError{Err: err}
	}
	var cfg Config
	var errs []error
	read := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	ttl, err := c.Duration(config.LeaseTTL)
	read(err)
	attempts, err := c.Int(config.MaxAttempts)
	read(err)
	cfg.Queue = queue.Config{LeaseTTL: ttl, MaxAttempts: attempts}
	cfg.BootstrapToken, err = c.Secret(config.BootstrapToken)
	read(err)
	cfg.MetricsToken, err = c.Secret(config.MetricsToken)
	read(err)
	cfg.PublicURL = c.String(config.PublicURL)
	cfg.DataDir = pglocal.DefaultDataDir(c)
	cfg.GitHub, err = githubFromEnv(c, appFile)
	read(err)
	cfg.TRIZ, err = trizFromEnv(c)
	read(err)
	cfg.SignIn, err = signInFromEnv(c, appFile)
	read(err)
	cfg.QuestionAgent = func(name string, log *slog.Logger) (agent.Agent, error) {
		return QuestionAgent(getenv, name, log)
	}
	if err := errors.Join(errs...); err != nil {
		return Config{}, asConfigError(err)
	}
	return cfg, nil
}

// GitHubFromEnv reads WHILLY_GITHUB_* and the variables of the GitHub side. The App is
// configured when WHILLY_GITHUB_APP_ID is set, else by the file of `whilly app create` in
// the data directory; when it is, its private key must be there too. On an error the
// GitHub read so far is returned too (whilly doctor reports what it can).
func GitHubFromEnv(c *config.Env) (GitHub, error) {
	return githubFromEnv(c, true)
}

// githubFromEnv is GitHubFromEnv; appFile says whether the file of `whilly app create`
// is read.
func githubFromEnv(c *config.Env, appFile bool) (GitHub, error) {
	g := GitHub{APIURL: c.Raw(config.GitHubAPIURL)}
	if err := errors.Join(c.Err(config.GitHubAPIURL), c.Err(config.PublicURL)); err != nil {
		return g, asConfigError(err)
	}
	var secret, key string
	for _, read := range []func() error{
		func() (err error) { g.Token, err = c.Secret(config.GitHubToken); return err },
		func() (err error) { g.Mirror.Coalesce, err = c.Duration(config.GitHubMirrorInterval); return err },
		func() (err error) { g.Reconcile, err = c.Duration(config.GitHubReconcileInterval); return err },
		func() (err error) { g.Dispatch, err = c.Bool(config.DispatchActions); return err },
		func() (err error) { g.DispatchIdle, err = c.Duration(config.DispatchInterval); return err },
		func() (err error) { g.PullInterval, err = c.Duration(config.GitHubPullInterval); return err },
		func() (err error) {
			if err = c.Err(config.TrustedProxies); err == nil {
				g.TrustedProxies, err = config.ParsePrefixes(c.List(config.TrustedProxies))
			}
			return err
		},
		func() error { return c.Err(config.GitHubDeliveries) },
		func() (err error) { secret, err = c.Secret(config.GitHubWebhookSecret); return err },
		func() (err error) { key, err = c.Secret(config.GitHubPrivateKey); return err },
		func() (err error) { g.SealKey, err = c.Secret(config.TokenSealKey); return err },
		func() (err error) { g.OldSealKey, err = c.Secret(config.TokenSealKeyOld); return err },
		func() error { return c.Err(config.GitHubAppID) },
		func() (err error) { g.PlannerTimeout, err = c.Duration(config.PlannerTimeout); return err },
		func() (err error) { g.Intake, err = intakePolicy(c); return err },
	} {
		if err := read(); err != nil {
			return g, asConfigError(err)
		}
	}
	g.Pull = c.String(config.GitHubDeliveries) == "pull"
	g.Planner = c.Raw(config.Planner)
	g.WebhookSecret = []byte(secret)
	if key != "" {
		g.PrivateKey = []byte(config.PEM(key))
	}
	id := c.Raw(config.GitHubAppID)
	if id == "" && !appFile {
		return g, nil
	}
	if id == "" {
		// The file of `whilly app create`, when there is one.
		cred, ok, err := appCredentials(c)
		if err != nil || !ok {
			return g, err
		}
		g.AppID, g.PrivateKey = cred.AppID, []byte(cred.PrivateKey)
		if len(g.WebhookSecret) == 0 {
			g.WebhookSecret = []byte(cred.WebhookSecret)
		}
		return g, nil
	}
	if key == "" {
		return g, configErrorf("WHILLY_GITHUB_APP_ID is set but the App's private key is not: set WHILLY_GITHUB_PRIVATE_KEY (PEM) or WHILLY_GITHUB_PRIVATE_KEY_FILE")
	}
	g.AppID, _ = strconv.ParseInt(id, 10, 64) // checked by c.Err above
	return g, nil
}

// intakePolicy reads what plans from issues may ask for and whose issues are taken in
// (WHILLY_GITHUB_BUDGET_USD, WHILLY_GITHUB_ALLOWED_OWNERS, WHILLY_REQUIRE_APPROVAL,
// WHILLY_PR_MAX_ROUNDS, and WHILLY_MAX_ATTEMPTS for the planner's tasks).
func intakePolicy(env *config.Env) (intake.Config, error) {
	budget, _, err := env.USD(config.GitHubBudgetUSD)
	if err != nil {
		return intake.Config{}, err
	}
	approval, err := env.Bool(config.RequireApproval)
	if err != nil {
		return intake.Config{}, err
	}
	rounds, err := env.Int(config.PRMaxRounds)
	if err != nil {
		return intake.Config{}, err
	}
	if rounds == 0 {
		rounds = -1 // WHILLY_PR_MAX_ROUNDS=0: no rounds at all
	}
	return intake.Config{Budget: budget, AllowedOwners: env.List(config.GitHubAllowedOwners), RequireApproval: approval,
		MaxRounds: rounds, Redact: agent.Redact}, nil
}

// CredentialsPath is where `whilly app create` keeps the App's credentials.
func CredentialsPath(c *config.Env) string {
	return filepath.Join(pglocal.DefaultDataDir(c), ghapp.CredentialsFile)
}

// appCredentials reads the file of `whilly app create`; ok is false when there is none.
func appCredentials(c *config.Env) (cred ghapp.Credentials, ok bool, err error) {
	cred, err = ghapp.ReadCredentials(CredentialsPath(c))
	if errors.Is(err, fs.ErrNotExist) {
		return cred, false, nil
	}
	if err != nil {
		return cred, false, asConfigError(err)
	}
	return cred, true, nil
}

// trizFromEnv reads WHILLY_TRIZ_*.
func trizFromEnv(c *config.Env) (TRIZ, error) {
	on, err := c.Bool(config.TrizEnabled)
	if err != nil {
		return TRIZ{}, err
	}
	timeout, err := c.Duration(config.TrizTimeout)
	if err != nil {
		return TRIZ{}, err
	}
	return TRIZ{
		Enabled: on,
		Agent:   firstNonEmpty(c.Raw(config.TrizAgent), c.String(config.Agent)),
		Model:   firstNonEmpty(c.Raw(config.TrizModel), c.Raw(config.Model)),
		Timeout: timeout,
	}, nil
}

// signInFromEnv reads the App's OAuth client: WHILLY_GITHUB_CLIENT_ID and
// WHILLY_GITHUB_CLIENT_SECRET, else the client id and secret in the file of
// `whilly app create`.
func signInFromEnv(c *config.Env, appFile bool) (SignIn, error) {
	id := c.String(config.GitHubClientID)
	secret, err := c.Secret(config.GitHubClientSecret)
	if err != nil {
		return SignIn{}, err
	}
	if id != "" || !appFile {
		return SignIn{ClientID: id, ClientSecret: secret}, nil
	}
	cred, ok, err := appCredentials(c)
	if err != nil || !ok {
		return SignIn{}, err
	}
	return SignIn{ClientID: cred.ClientID, ClientSecret: cred.ClientSecret, FromFile: true}, nil
}

// QuestionAgent builds an agent that answers questions (planner, analyzer), configured
// from the environment like a worker's agent, but read-only where the agent allows it
// (agent.QuestionPermissionMode).
//
// It runs in the sandbox like a worker's agent: on the control plane the box keeps the
// App key, the database URL and the host's files away from it.
func QuestionAgent(getenv func(string) string, name string, log *slog.Logger) (agent.Agent, error) {
	cfg := workerenv.AgentConfig(config.New(getenv))
	cfg.Logger = log
	cfg.PermissionMode = agent.QuestionPermissionMode
	sb, err := workerenv.OpenSandbox(context.Background(), getenv, name, log)
	if err != nil {
		return nil, err
	}
	cfg.Sandbox = sb
	return agent.New(name, cfg)
}

func firstNonEmpty(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}

// newQuestionAgent is cfg's agent named name that answers questions.
func newQuestionAgent(cfg Config, name string, log *slog.Logger) (agent.Agent, error) {
	if cfg.QuestionAgent == nil {
		return nil, fmt.Errorf("no agent answers questions in this configuration, asked for %q", name)
	}
	return cfg.QuestionAgent(name, log)
}
