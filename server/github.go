package server

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"path/filepath"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/riverqueue/river"

	"github.com/whilly-go/whilly/agent"
	ghapp "github.com/whilly-go/whilly/app"
	"github.com/whilly-go/whilly/intake"
	"github.com/whilly-go/whilly/plan"
	"github.com/whilly-go/whilly/queue"
	"github.com/whilly-go/whilly/webhook"
)

// intake reports whether the GitHub side is built: with the App, or with the token when
// IntakeOnly asks for it.
func (g GitHub) intake() bool { return g.HasApp() || (g.IntakeOnly && g.Token != "") }

// Factory is the GitHub client factory of g: the App's when there is one, else the
// token's. metrics, when set, counts its API requests.
func (g GitHub) Factory(metrics *ghapp.Metrics) (*ghapp.Factory, error) {
	cfg := ghapp.Config{Token: g.Token, APIURL: g.APIURL, Metrics: metrics}
	if g.HasApp() {
		cfg.AppID, cfg.PrivateKey, cfg.SealKey = g.AppID, g.PrivateKey, []byte(g.SealKey)
		if g.OldSealKey != "" {
			cfg.OldSealKeys = [][]byte{[]byte(g.OldSealKey)}
		}
	}
	f, err := ghapp.NewFactory(cfg)
	if err != nil {
		return nil, configErrorf("configure GitHub: %w", err)
	}
	return f, nil
}

// githubPlanner is the planner agent of GitHub.Planner, or nil when it is unset, and the
// longest it may take for one issue: PlannerTimeout for each of its calls.
func githubPlanner(cfg Config, log *slog.Logger) (intake.Planner, time.Duration, error) {
	name := cfg.GitHub.Planner
	if name == "" {
		return nil, 0, nil
	}
	ag, err := newQuestionAgent(cfg, name, log)
	if err != nil {
		return nil, 0, configErrorf("WHILLY_PLANNER: %w", err)
	}
	timeout, attempts := cfg.GitHub.PlannerTimeout, cfg.Queue.MaxAttempts
	return func(ctx context.Context, it intake.IssueText, planID string) (*plan.Plan, plan.USD, error) {
		res, err := agent.Plan(ctx, ag, agent.PlanRequest{
			IssueTitle: it.Title, IssueBody: it.Body, Slug: planID, Repo: it.Ref.Repo.String(), MaxAttempts: attempts,
		}, timeout)
		return res.Plan, res.Cost, err
	}, agent.PlanCalls * timeout, nil
}

// githubConfig is the GitHub side's configuration in cfg, but for the intake's policy
// and planner (githubParts adds them).
func githubConfig(cfg Config) intake.GitHubConfig {
	g := cfg.GitHub
	c := intake.GitHubConfig{
		Mirror:    g.Mirror,
		Reconcile: ghapp.ReconcileConfig{Interval: g.Reconcile, NoRedeliver: g.Pull},
	}
	if c.Mirror.PublicURL == "" {
		c.Mirror.PublicURL = cfg.PublicURL
	}
	if g.Dispatch && g.HasApp() {
		c.Dispatch = &ghapp.DispatchConfig{Idle: g.DispatchIdle}
	}
	return c
}

// githubParts wires the GitHub side over st (built with githubConfig's hooks) through
// the one assembly, intake.NewGitHub.
func githubParts(st *queue.Store, jobs *river.Client[pgx.Tx], log *slog.Logger, cfg Config, metrics *ghapp.Metrics) (*intake.GitHub, error) {
	f, err := cfg.GitHub.Factory(metrics)
	if err != nil {
		return nil, err
	}
	gc := githubConfig(cfg)
	gc.Intake = cfg.GitHub.Intake
	if gc.Intake.Budget <= 0 {
		return nil, configErrorf("WHILLY_GITHUB_BUDGET_USD must be more than 0 USD, got %s", gc.Intake.Budget)
	}
	if gc.Intake.Planner == nil {
		if gc.Intake.Planner, gc.Intake.PlannerLimit, err = githubPlanner(cfg, log); err != nil {
			return nil, err
		}
	}
	g, err := intake.NewGitHub(st, f, jobs, log, gc)
	if err != nil {
		return nil, asConfigError(err)
	}
	return g, nil
}

// githubPart plugs the GitHub App into the control plane: POST /webhook (or, with
// GitHub.Pull, the poll of the App's delivery log as well), the delivery, mirror,
// reconciler (and with GitHub.Dispatch dispatch) jobs, and the workspaces of claims of
// repository plans (push tokens minted per repository); the mirror's hook on every plan
// change is StoreHooks'. Without an App it only answers /webhook with 503 naming what is
// missing (and, with IntakeOnly and a token, has the intake for whilly forge); with
// one, the webhook secret is required.
func githubPart(ctx context.Context, st *queue.Store, jobs *river.Client[pgx.Tx], log *slog.Logger, cfg Config) (*part, error) {
	g := cfg.GitHub
	if !g.HasApp() {
		if g.Pull {
			log.WarnContext(ctx, "WHILLY_GITHUB_DELIVERIES=pull, but there is no GitHub App to pull deliveries with: run whilly app create, or set WHILLY_GITHUB_APP_ID and WHILLY_GITHUB_PRIVATE_KEY")
		}
		p := &part{routes: map[string]http.Handler{"/webhook": webhook.NotConfigured(g.missingAppVariables())}}
		if g.intake() {
			parts, err := githubParts(st, jobs, log, cfg, nil)
			if err != nil {
				return nil, err
			}
			p.github = parts
		}
		return p, nil
	}
	if len(g.WebhookSecret) == 0 && !g.IntakeOnly {
		return nil, configErrorf("WHILLY_GITHUB_APP_ID is set but WHILLY_GITHUB_WEBHOOK_SECRET is not: the webhook refuses unsigned deliveries")
	}
	metrics := ghapp.NewMetrics()
	var err error
	if cfg.GitHub.SealKey, err = sealKeyOf(ctx, cfg, log); err != nil {
		return nil, err
	}
	parts, err := githubParts(st, jobs, log, cfg, metrics)
	if err != nil {
		return nil, err
	}
	if len(g.WebhookSecret) == 0 { // IntakeOnly: nothing is served
		return &part{github: parts}, nil
	}
	hook, err := webhook.New(st, func(ctx context.Context, tx pgx.Tx, id string) error {
		_, err := jobs.InsertTx(ctx, tx, queue.GitHubDeliveryArgs{DeliveryID: id}, nil)
		return err
	}, log, webhook.Config{Secret: g.WebhookSecret, Events: intake.Events(), TrustedProxies: g.TrustedProxies})
	if err != nil {
		return nil, configErrorf("start the webhook receiver: %w", err)
	}
	var puller *ghapp.DeliveryPuller
	if g.Pull {
		log.InfoContext(ctx, "pull mode: webhook deliveries are read from the App's delivery log", "interval", g.PullInterval)
		puller = ghapp.NewDeliveryPuller(st, parts.Factory, log, ghapp.PullConfig{
			AppID: g.AppID, Interval: g.PullInterval, Events: intake.Events(),
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
	return &part{
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
		collectors: []prometheus.Collector{metrics},
		writeAccess: func(ctx context.Context, p queue.PlanInfo, login string) (bool, error) {
			repo, err := ghapp.ParseRepo(p.Repo)
			if err != nil {
				return false, err
			}
			return parts.Factory.UserCanWrite(ctx, repo, p.InstallationID, login)
		},
		github: parts,
	}, nil
}

// sealKeyOf is the push token seal secret: GitHub.SealKey, else the one in the data
// directory, generated there the first time. A secret of its own, not the App's key nor
// anything in the database, so that a reader of the database gets no token that pushes;
// several control planes of one database need WHILLY_TOKEN_SEAL_KEY, the same in each,
// since none reads another's data directory.
func sealKeyOf(ctx context.Context, cfg Config, log *slog.Logger) (string, error) {
	if cfg.GitHub.SealKey != "" {
		return cfg.GitHub.SealKey, nil
	}
	path := filepath.Join(cfg.DataDir, ghapp.SealKeyFile)
	key, created, err := ghapp.LoadOrCreateSealKey(path)
	if err != nil {
		return "", configErrorf("WHILLY_TOKEN_SEAL_KEY is unset and %w", err)
	}
	if created {
		log.InfoContext(ctx, "push token seal key generated; with several control planes, set WHILLY_TOKEN_SEAL_KEY to the same secret in each", "path", path)
	}
	return string(key), nil
}

// missingAppVariables names what the App needs that is not set, WHILLY_GITHUB_APP_ID
// first.
func (g GitHub) missingAppVariables() []string {
	missing := []string{"WHILLY_GITHUB_APP_ID"}
	if len(g.PrivateKey) == 0 {
		missing = append(missing, "WHILLY_GITHUB_PRIVATE_KEY (or _FILE)")
	}
	if len(g.WebhookSecret) == 0 {
		missing = append(missing, "WHILLY_GITHUB_WEBHOOK_SECRET")
	}
	return missing
}
