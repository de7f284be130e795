package cli

import (
	"context"
	"errors"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

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
}

// readGitHubEnv reads WHILLY_GITHUB_*. app reports whether the App is configured
// (WHILLY_GITHUB_APP_ID set, else the file of `whilly app create` in WHILLY_DATA_DIR);
// when it is, its private key must be there too.
func (a *app) readGitHubEnv() (env githubEnv, hasApp bool, err error) {
	env = githubEnv{token: a.env("WHILLY_GITHUB_TOKEN"), apiURL: a.env("WHILLY_GITHUB_API_URL"), publicURL: a.env("WHILLY_PUBLIC_URL")}
	if env.mirror, err = a.envDuration("WHILLY_GITHUB_MIRROR_INTERVAL", 3*time.Second); err != nil {
		return env, false, err
	}
	if env.reconcile, err = a.envDuration("WHILLY_GITHUB_RECONCILE_INTERVAL", 5*time.Minute); err != nil {
		return env, false, err
	}
	if env.dispatch, err = a.envSwitch("WHILLY_DISPATCH_ACTIONS"); err != nil {
		return env, false, err
	}
	if env.dispatchIdle, err = a.envDuration("WHILLY_DISPATCH_INTERVAL", 10*time.Minute); err != nil {
		return env, false, err
	}
	switch mode := a.env("WHILLY_GITHUB_DELIVERIES"); mode {
	case "", "push":
	case "pull":
		env.pull = true
	default:
		return env, false, envf("WHILLY_GITHUB_DELIVERIES must be push or pull, got %q", mode)
	}
	if env.pullInterval, err = a.envDuration("WHILLY_GITHUB_PULL_INTERVAL", ghapp.PullDefaultInterval); err != nil {
		return env, false, err
	}
	if env.pullInterval < time.Second {
		return env, false, envf("WHILLY_GITHUB_PULL_INTERVAL must be at least 1s, got %s", env.pullInterval)
	}
	secret, err := a.secret("WHILLY_GITHUB_WEBHOOK_SECRET")
	if err != nil {
		return env, false, err
	}
	env.secret = []byte(secret)
	id := a.env("WHILLY_GITHUB_APP_ID")
	if id == "" {
		// The file of `whilly app create`, when there is one.
		c, ok, err := a.appCredentials()
		if err != nil || !ok {
			return env, false, err
		}
		env.appID, env.key = c.AppID, []byte(c.PrivateKey)
		if len(env.secret) == 0 {
			env.secret = []byte(c.WebhookSecret)
		}
		return env, true, nil
	}
	if env.appID, err = strconv.ParseInt(id, 10, 64); err != nil || env.appID <= 0 {
		return env, false, envf("WHILLY_GITHUB_APP_ID must be the App's numeric id, got %q", id)
	}
	key, err := a.secret("WHILLY_GITHUB_PRIVATE_KEY")
	if err != nil {
		return env, false, err
	}
	if key == "" {
		return env, false, envf("WHILLY_GITHUB_APP_ID is set but the App's private key is not: set WHILLY_GITHUB_PRIVATE_KEY (PEM) or WHILLY_GITHUB_PRIVATE_KEY_FILE")
	}
	if !strings.Contains(key, "\n") {
		key = strings.ReplaceAll(key, `\n`, "\n") // a PEM squeezed onto one line
	}
	env.key = []byte(key)
	return env, true, nil
}

// secret reads NAME, else the file named by NAME_FILE.
func (a *app) secret(name string) (string, error) {
	if v := a.env(name); v != "" {
		return v, nil
	}
	path := a.env(name + "_FILE")
	if path == "" {
		return "", nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", envf("read %s_FILE: %w", name, err)
	}
	return strings.TrimSpace(string(b)), nil
}

func (env githubEnv) factory(hasApp bool) (*ghapp.Factory, error) {
	cfg := ghapp.Config{Token: env.token, APIURL: env.apiURL}
	if hasApp {
		cfg.AppID, cfg.PrivateKey = env.appID, env.key
	}
	f, err := ghapp.NewFactory(cfg)
	if err != nil {
		return nil, envf("configure GitHub: %w", err)
	}
	return f, nil
}

// githubPlanner is the planner agent of WHILLY_PLANNER, or nil when it is unset.
func (a *app) githubPlanner() (intake.Planner, error) {
	name := a.env("WHILLY_PLANNER")
	if name == "" {
		return nil, nil
	}
	ag, err := a.questionAgent(name)
	if err != nil {
		return nil, envf("WHILLY_PLANNER: %w", err)
	}
	timeout, err := a.envDuration("WHILLY_PLANNER_TIMEOUT", 10*time.Minute)
	if err != nil {
		return nil, err
	}
	attempts, err := a.maxAttempts()
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context, it intake.IssueText, planID string) (*plan.Plan, plan.USD, error) {
		res, err := agent.Plan(ctx, ag, agent.PlanRequest{
			IssueTitle: it.Title, IssueBody: it.Body, Slug: planID, Repo: it.Ref.Repo.String(), MaxAttempts: attempts,
		}, timeout)
		return res.Plan, res.Cost, err
	}, nil
}

// intakePolicy reads what plans from issues may ask for and whose issues are taken in
// (WHILLY_GITHUB_BUDGET_USD, WHILLY_GITHUB_ALLOWED_OWNERS).
func (a *app) intakePolicy() (intake.Config, error) {
	env := config.New(a.io.Getenv)
	budget, _, err := env.USD(config.GitHubBudgetUSD)
	if err != nil {
		return intake.Config{}, envf("%w", err)
	}
	if budget <= 0 {
		return intake.Config{}, envf("%s must be more than 0 USD, got %q", config.GitHubBudgetUSD, env.Raw(config.GitHubBudgetUSD))
	}
	return intake.Config{Budget: budget, AllowedOwners: env.List(config.GitHubAllowedOwners)}, nil
}

// githubParts is the GitHub App wired over one store: what serve and forge share.
type githubParts struct {
	factory    *ghapp.Factory
	jobs       *river.Client[pgx.Tx] // insert-only
	mirror     *ghapp.Mirror
	intake     *intake.Service
	dispatcher *ghapp.Dispatcher // nil unless WHILLY_DISPATCH_ACTIONS=1
}

func (a *app) githubParts(st *queue.Store, env githubEnv, hasApp bool) (*githubParts, error) {
	f, err := env.factory(hasApp)
	if err != nil {
		return nil, err
	}
	// An insert-only client: the webhook and intake insert jobs before (or without) the
	// control plane's River client existing; River workers run them.
	jobs, err := river.NewClient(riverpgxv5.New(st.Pool()), &river.Config{Logger: a.log})
	if err != nil {
		return nil, envf("create the job inserter: %w", err)
	}
	planner, err := a.githubPlanner()
	if err != nil {
		return nil, err
	}
	mcfg := ghapp.MirrorConfig{Coalesce: env.mirror, PublicURL: env.publicURL}
	var dispatcher *ghapp.Dispatcher
	if env.dispatch && hasApp {
		dispatcher = ghapp.NewDispatcher(st, f, a.log, ghapp.DispatchConfig{Idle: env.dispatchIdle})
		mcfg.Started = dispatcher.PlanStarted
	}
	mirror := ghapp.NewMirror(st, f, a.log, mcfg)
	icfg, err := a.intakePolicy()
	if err != nil {
		return nil, err
	}
	icfg.Planner = planner
	svc := intake.New(st, f, mirror, jobs, a.log, icfg)
	return &githubParts{factory: f, jobs: jobs, mirror: mirror, intake: svc, dispatcher: dispatcher}, nil
}

// githubExtension plugs the GitHub App into the control plane: POST /webhook (or, with
// WHILLY_GITHUB_DELIVERIES=pull, the poll of the App's delivery log as well), the
// delivery, mirror, reconciler (and with WHILLY_DISPATCH_ACTIONS=1 dispatch) jobs, the
// mirror hook on every plan change, and the workspaces of claims of repository plans
// (push tokens minted per repository). Without an App it only answers /webhook with 503
// naming what is missing; with one, the webhook secret and the private key are required
// (exit 2).
func (a *app) githubExtension(_ context.Context, st *queue.Store) (*extension, error) {
	env, hasApp, err := a.readGitHubEnv()
	if err != nil {
		return nil, err
	}
	if !hasApp {
		return &extension{routes: map[string]http.Handler{"/webhook": webhook.NotConfigured(a.missingAppVariables(env))}}, nil
	}
	if len(env.secret) == 0 {
		return nil, envf("WHILLY_GITHUB_APP_ID is set but WHILLY_GITHUB_WEBHOOK_SECRET is not: the webhook refuses unsigned deliveries")
	}
	parts, err := a.githubParts(st, env, hasApp)
	if err != nil {
		return nil, err
	}
	hook, err := webhook.New(st, func(ctx context.Context, tx pgx.Tx, id string) error {
		_, err := parts.jobs.InsertTx(ctx, tx, queue.GitHubDeliveryArgs{DeliveryID: id}, nil)
		return err
	}, a.log, webhook.Config{Secret: env.secret, Events: intake.Events()})
	if err != nil {
		return nil, envf("start the webhook receiver: %w", err)
	}
	var puller *ghapp.DeliveryPuller
	if env.pull {
		puller = ghapp.NewDeliveryPuller(st, parts.factory, a.log, ghapp.PullConfig{
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
	rec := ghapp.NewReconciler(st, parts.factory, a.log, ghapp.ReconcileConfig{
		Interval: env.reconcile, Dispatcher: parts.dispatcher, NoRedeliver: env.pull})
	ws := ghapp.NewWorkspaces(parts.factory, a.log, ghapp.WorkspaceConfig{})
	return &extension{
		planChanged: func(ctx context.Context, tx pgx.Tx, rc *river.Client[pgx.Tx], planID string) error {
			if rc == nil {
				return parts.mirror.PlanChanged(ctx, tx, parts.jobs, planID)
			}
			return parts.mirror.PlanChanged(ctx, tx, rc, planID)
		},
		register: func(w *river.Workers) []*river.PeriodicJob {
			river.AddWorker(w, parts.intake.Worker())
			river.AddWorker(w, parts.mirror.Worker())
			river.AddWorker(w, rec.Worker())
			if parts.dispatcher != nil {
				river.AddWorker(w, parts.dispatcher.Worker())
			}
			periodic := []*river.PeriodicJob{rec.Periodic()}
			if puller != nil {
				river.AddWorker(w, puller.Worker())
				periodic = append(periodic, puller.Periodic())
			}
			return periodic
		},
		routes:     map[string]http.Handler{"/webhook": hook},
		workspaces: ws.Workspace,
	}, nil
}

// missingAppVariables names what the App needs that is not set, WHILLY_GITHUB_APP_ID
// first.
func (a *app) missingAppVariables(env githubEnv) []string {
	missing := []string{"WHILLY_GITHUB_APP_ID"}
	if a.env("WHILLY_GITHUB_PRIVATE_KEY") == "" && a.env("WHILLY_GITHUB_PRIVATE_KEY_FILE") == "" {
		missing = append(missing, "WHILLY_GITHUB_PRIVATE_KEY (or _FILE)")
	}
	if len(env.secret) == 0 {
		missing = append(missing, "WHILLY_GITHUB_WEBHOOK_SECRET")
	}
	return missing
}

// errNoGitHub is returned by commands that need GitHub when nothing is configured.
var errNoGitHub = errors.New("GitHub is not configured: set WHILLY_GITHUB_APP_ID and WHILLY_GITHUB_PRIVATE_KEY (or _FILE) for the App, or WHILLY_GITHUB_TOKEN")
