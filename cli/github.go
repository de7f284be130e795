package cli

import (
	"context"
	"errors"
	"net/http"
	"net/netip"
	"path/filepath"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/riverqueue/river"

	"github.com/whilly-go/whilly/agent"
	ghapp "github.com/whilly-go/whilly/app"
	"github.com/whilly-go/whilly/intake"
	"github.com/whilly-go/whilly/internal/config"
	"github.com/whilly-go/whilly/plan"
	"github.com/whilly-go/whilly/queue"
	"github.com/whilly-go/whilly/webhook"
)

// githubEnv is the GitHub configuration read from the environment. Secrets come from
// variables or files, never flags, and are never printed.
type githubEnv struct {
	appID     int64
	key       []byte
	secret    []byte
	token     string
	apiURL    string
	publicURL string
	mirror    time.Duration
	reconcile time.Duration
	// dispatch (WHILLY_DISPATCH_ACTIONS) sends repository_dispatch whilly-work when a
	// plan of a repository starts, and again every dispatchIdle while its ready tasks
	// wait for a worker (WHILLY_DISPATCH_INTERVAL).
	dispatch     bool
	dispatchIdle time.Duration
	// pull (WHILLY_GITHUB_DELIVERIES=pull) polls the App's delivery log every
	// pullInterval (WHILLY_GITHUB_PULL_INTERVAL) instead of waiting for POST /webhook.
	pull         bool
	pullInterval time.Duration
	// metrics, when set, counts the factory's API requests (the control plane's /metrics).
	metrics *ghapp.Metrics
	// trustedProxies (WHILLY_TRUSTED_PROXIES) are the reverse proxies whose
	// X-Forwarded-For names the webhook's sender.
	trustedProxies []netip.Prefix
	// sealKey and oldSealKey seal and open the push tokens of leases
	// (WHILLY_TOKEN_SEAL_KEY, WHILLY_TOKEN_SEAL_KEY_OLD); the control plane generates the
	// first in the data directory when it is unset (sealKeyOf).
	sealKey, oldSealKey string
}

// readGitHubEnv reads WHILLY_GITHUB_*. app reports whether the App is configured
// (WHILLY_GITHUB_APP_ID set, else the file of `whilly app create` in WHILLY_DATA_DIR);
// when it is, its private key must be there too.
func (a *app) readGitHubEnv() (env githubEnv, hasApp bool, err error) {
	c := a.cfg
	env = githubEnv{apiURL: c.Raw(config.GitHubAPIURL), publicURL: c.String(config.PublicURL)}
	if err := errors.Join(c.Err(config.GitHubAPIURL), c.Err(config.PublicURL)); err != nil {
		return env, false, envErr(err)
	}
	var secret, key string
	for _, read := range []func() error{
		func() (err error) { env.token, err = c.Secret(config.GitHubToken); return err },
		func() (err error) { env.mirror, err = c.Duration(config.GitHubMirrorInterval); return err },
		func() (err error) { env.reconcile, err = c.Duration(config.GitHubReconcileInterval); return err },
		func() (err error) { env.dispatch, err = c.Bool(config.DispatchActions); return err },
		func() (err error) { env.dispatchIdle, err = c.Duration(config.DispatchInterval); return err },
		func() (err error) { env.pullInterval, err = c.Duration(config.GitHubPullInterval); return err },
		func() (err error) {
			if err = c.Err(config.TrustedProxies); err == nil {
				env.trustedProxies, err = config.ParsePrefixes(c.List(config.TrustedProxies))
			}
			return err
		},
		func() error { return c.Err(config.GitHubDeliveries) },
		func() (err error) { secret, err = c.Secret(config.GitHubWebhookSecret); return err },
		func() (err error) { key, err = c.Secret(config.GitHubPrivateKey); return err },
		func() (err error) { env.sealKey, err = c.Secret(config.TokenSealKey); return err },
		func() (err error) { env.oldSealKey, err = c.Secret(config.TokenSealKeyOld); return err },
		func() error { return c.Err(config.GitHubAppID) },
	} {
		if err := read(); err != nil {
			return env, false, envErr(err)
		}
	}
	env.pull = c.String(config.GitHubDeliveries) == "pull"
	env.secret = []byte(secret)
	id := c.Raw(config.GitHubAppID)
	if id == "" {
		// The file of `whilly app create`, when there is one.
		cred, ok, err := a.appCredentials()
		if err != nil || !ok {
			return env, false, err
		}
		env.appID, env.key = cred.AppID, []byte(cred.PrivateKey)
		if len(env.secret) == 0 {
			env.secret = []byte(cred.WebhookSecret)
		}
		return env, true, nil
	}
	env.appID, _ = strconv.ParseInt(id, 10, 64) // checked by c.Err above
	if key == "" {
		return env, false, envf("WHILLY_GITHUB_APP_ID is set but the App's private key is not: set WHILLY_GITHUB_PRIVATE_KEY (PEM) or WHILLY_GITHUB_PRIVATE_KEY_FILE")
	}
	env.key = []byte(config.PEM(key))
	return env, true, nil
}

func (env githubEnv) factory(hasApp bool) (*ghapp.Factory, error) {
	cfg := ghapp.Config{Token: env.token, APIURL: env.apiURL, Metrics: env.metrics}
	if hasApp {
		cfg.AppID, cfg.PrivateKey, cfg.SealKey = env.appID, env.key, []byte(env.sealKey)
		if env.oldSealKey != "" {
			cfg.OldSealKeys = [][]byte{[]byte(env.oldSealKey)}
		}
	}
	f, err := ghapp.NewFactory(cfg)
	if err != nil {
		return nil, envf("configure GitHub: %w", err)
	}
	return f, nil
}

// githubPlanner is the planner agent of WHILLY_PLANNER, or nil when it is unset, and the
// longest it may take for one issue: WHILLY_PLANNER_TIMEOUT for each of its calls.
func (a *app) githubPlanner() (intake.Planner, time.Duration, error) {
	name := a.cfg.Raw(config.Planner)
	if name == "" {
		return nil, 0, nil
	}
	ag, err := a.questionAgent(name)
	if err != nil {
		return nil, 0, envf("WHILLY_PLANNER: %w", err)
	}
	timeout, err := a.cfg.Duration(config.PlannerTimeout)
	if err != nil {
		return nil, 0, envErr(err)
	}
	attempts, err := a.maxAttempts()
	if err != nil {
		return nil, 0, err
	}
	return func(ctx context.Context, it intake.IssueText, planID string) (*plan.Plan, plan.USD, error) {
		res, err := agent.Plan(ctx, ag, agent.PlanRequest{
			IssueTitle: it.Title, IssueBody: it.Body, Slug: planID, Repo: it.Ref.Repo.String(), MaxAttempts: attempts,
		}, timeout)
		return res.Plan, res.Cost, err
	}, agent.PlanCalls * timeout, nil
}

// intakePolicy reads what plans from issues may ask for and whose issues are taken in
// (WHILLY_GITHUB_BUDGET_USD, WHILLY_GITHUB_ALLOWED_OWNERS, WHILLY_REQUIRE_APPROVAL).
func (a *app) intakePolicy() (intake.Config, error) {
	env := a.cfg
	budget, _, err := env.USD(config.GitHubBudgetUSD)
	if err != nil {
		return intake.Config{}, envf("%w", err)
	}
	if budget <= 0 {
		return intake.Config{}, envf("%s must be more than 0 USD, got %q", config.GitHubBudgetUSD, env.Raw(config.GitHubBudgetUSD))
	}
	approval, err := env.Bool(config.RequireApproval)
	if err != nil {
		return intake.Config{}, envf("%w", err)
	}
	rounds, err := env.Int(config.PRMaxRounds)
	if err != nil {
		return intake.Config{}, envf("%w", err)
	}
	if rounds == 0 {
		rounds = -1 // WHILLY_PR_MAX_ROUNDS=0: no rounds at all
	}
	return intake.Config{Budget: budget, AllowedOwners: env.List(config.GitHubAllowedOwners), RequireApproval: approval,
		MaxRounds: rounds, Redact: agent.Redact}, nil
}

// githubConfig is the GitHub side's configuration in env, but for the intake's policy
// and planner (githubParts adds them).
func githubConfig(env githubEnv, hasApp bool) intake.GitHubConfig {
	c := intake.GitHubConfig{
		Mirror:    ghapp.MirrorConfig{Coalesce: env.mirror, PublicURL: env.publicURL},
		Reconcile: ghapp.ReconcileConfig{Interval: env.reconcile, NoRedeliver: env.pull},
	}
	if env.dispatch && hasApp {
		c.Dispatch = &ghapp.DispatchConfig{Idle: env.dispatchIdle}
	}
	return c
}

// jobInserter is the insert-only River client (queue.NewInserter). It is made first,
// before the store whose hooks use it.
func (a *app) jobInserter(st *queue.Store) (*river.Client[pgx.Tx], error) {
	jobs, err := queue.NewInserter(st)
	if err != nil {
		return nil, envf("%w", err)
	}
	return jobs, nil
}

// githubParts wires the GitHub side over st (built with githubConfig's hooks) through
// the one assembly, intake.NewGitHub: what serve and forge share with the tests.
func (a *app) githubParts(st *queue.Store, jobs *river.Client[pgx.Tx], env githubEnv, hasApp bool) (*intake.GitHub, error) {
	f, err := env.factory(hasApp)
	if err != nil {
		return nil, err
	}
	planner, limit, err := a.githubPlanner()
	if err != nil {
		return nil, err
	}
	cfg := githubConfig(env, hasApp)
	if cfg.Intake, err = a.intakePolicy(); err != nil {
		return nil, err
	}
	cfg.Intake.Planner, cfg.Intake.PlannerLimit = planner, limit
	g, err := intake.NewGitHub(st, f, jobs, a.log, cfg)
	if err != nil {
		return nil, envf("%w", err)
	}
	return g, nil
}

// githubExtension plugs the GitHub App into the control plane: POST /webhook (or, with
// WHILLY_GITHUB_DELIVERIES=pull, the poll of the App's delivery log as well), the
// delivery, mirror, reconciler (and with WHILLY_DISPATCH_ACTIONS=1 dispatch) jobs, the
// mirror hook on every plan change, and the workspaces of claims of repository plans
// (push tokens minted per repository). Without an App it only answers /webhook with 503
// naming what is missing; with one, the webhook secret and the private key are required
// (exit 2).
func (a *app) githubExtension(ctx context.Context, st *queue.Store, jobs *river.Client[pgx.Tx]) (*extension, error) {
	env, hasApp, err := a.readGitHubEnv()
	if err != nil {
		return nil, err
	}
	if !hasApp {
		if env.pull {
			a.log.WarnContext(ctx, "WHILLY_GITHUB_DELIVERIES=pull, but there is no GitHub App to pull deliveries with: run whilly app create, or set WHILLY_GITHUB_APP_ID and WHILLY_GITHUB_PRIVATE_KEY")
		}
		return &extension{routes: map[string]http.Handler{"/webhook": webhook.NotConfigured(a.missingAppVariables(env))}}, nil
	}
	if len(env.secret) == 0 {
		return nil, envf("WHILLY_GITHUB_APP_ID is set but WHILLY_GITHUB_WEBHOOK_SECRET is not: the webhook refuses unsigned deliveries")
	}
	env.metrics = ghapp.NewMetrics()
	if env.sealKey, err = a.sealKeyOf(ctx, env); err != nil {
		return nil, err
	}
	parts, err := a.githubParts(st, jobs, env, hasApp)
	if err != nil {
		return nil, err
	}
	hook, err := webhook.New(st, func(ctx context.Context, tx pgx.Tx, id string) error {
		_, err := jobs.InsertTx(ctx, tx, queue.GitHubDeliveryArgs{DeliveryID: id}, nil)
		return err
	}, a.log, webhook.Config{Secret: env.secret, Events: intake.Events(), TrustedProxies: env.trustedProxies})
	if err != nil {
		return nil, envf("start the webhook receiver: %w", err)
	}
	var puller *ghapp.DeliveryPuller
	if env.pull {
		a.log.InfoContext(ctx, "pull mode: webhook deliveries are read from the App's delivery log", "interval", env.pullInterval)
		puller = ghapp.NewDeliveryPuller(st, parts.Factory, a.log, ghapp.PullConfig{
			AppID: env.appID, Interval: env.pullInterval, Events: intake.Events(),
			Receive: func(ctx context.Context, guid, event string, payload []byte) (string, error) {
				status, out := hook.Receive(ctx, webhook.SourcePull, guid, event, payload)
				if status >= http.StatusInternalServerError {
					return out.Status, errors.New(out.Message)
				}
				return out.Status, nil
			},
		})
	}
	schedules := []queue.Schedule{parts.Reconciler.Schedule(), parts.PushTokens.Schedule()}
	if puller != nil {
		schedules = append(schedules, puller.Schedule())
	}
	return &extension{
		register: func(w *river.Workers) []*river.PeriodicJob {
			parts.Register(w)
			if puller != nil {
				river.AddWorker(w, puller.Worker())
			}
			return nil
		},
		queues:     queue.GitHubQueues(),
		schedules:  schedules,
		routes:     map[string]http.Handler{"/webhook": hook},
		workspaces: parts.Workspaces.Workspace,
		collectors: []prometheus.Collector{env.metrics},
		writeAccess: func(ctx context.Context, p queue.PlanInfo, login string) (bool, error) {
			repo, err := ghapp.ParseRepo(p.Repo)
			if err != nil {
				return false, err
			}
			return parts.Factory.UserCanWrite(ctx, repo, p.InstallationID, login)
		},
	}, nil
}

// sealKeyOf is the push token seal secret: WHILLY_TOKEN_SEAL_KEY, else the one in the
// data directory, generated there the first time. A secret of its own, not the App's key
// nor anything in the database, so that a reader of the database gets no token that
// pushes; several control planes of one database need WHILLY_TOKEN_SEAL_KEY, the same in
// each, since none reads another's data directory.
func (a *app) sealKeyOf(ctx context.Context, env githubEnv) (string, error) {
	if env.sealKey != "" {
		return env.sealKey, nil
	}
	path := filepath.Join(a.dataDir(), ghapp.SealKeyFile)
	key, created, err := ghapp.LoadOrCreateSealKey(path)
	if err != nil {
		return "", envf("WHILLY_TOKEN_SEAL_KEY is unset and %w", err)
	}
	if created {
		a.log.InfoContext(ctx, "push token seal key generated; with several control planes, set WHILLY_TOKEN_SEAL_KEY to the same secret in each", "path", path)
	}
	return string(key), nil
}

// missingAppVariables names what the App needs that is not set, WHILLY_GITHUB_APP_ID
// first.
func (a *app) missingAppVariables(env githubEnv) []string {
	missing := []string{"WHILLY_GITHUB_APP_ID"}
	if !a.cfg.IsSet(config.GitHubPrivateKey) {
		missing = append(missing, "WHILLY_GITHUB_PRIVATE_KEY (or _FILE)")
	}
	if len(env.secret) == 0 {
		missing = append(missing, "WHILLY_GITHUB_WEBHOOK_SECRET")
	}
	return missing
}

// errNoGitHub is returned by commands that need GitHub when nothing is configured.
var errNoGitHub = errors.New("GitHub is not configured: set WHILLY_GITHUB_APP_ID and WHILLY_GITHUB_PRIVATE_KEY (or _FILE) for the App, or WHILLY_GITHUB_TOKEN")
