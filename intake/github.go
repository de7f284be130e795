package intake

import (
	"errors"
	"fmt"
	"log/slog"

	"github.com/riverqueue/river"

	"github.com/whilly-go/whilly/app"
	"github.com/whilly-go/whilly/queue"
)

// GitHub is the GitHub side of whilly wired over one store: the intake service, the
// mirror, the reconciler, push tokens, workspaces and (with dispatch) the dispatcher.
// NewGitHub is the one assembly `whilly serve`, `whilly forge intake` and the tests use,
// so that they cannot drift.
type GitHub struct {
	Factory    *app.Factory
	Intake     *Service
	Mirror     *app.Mirror
	Reconciler *app.Reconciler
	PushTokens *app.PushTokens
	Workspaces *app.Workspaces // nil without the App (a token)
	Dispatcher *app.Dispatcher // nil unless GitHubConfig.Dispatch
}

// GitHubConfig tunes the GitHub side.
type GitHubConfig struct {
	Intake    Config
	Mirror    app.MirrorConfig
	Reconcile app.ReconcileConfig // its Dispatcher is set by NewGitHub
	// Dispatch (WHILLY_DISPATCH_ACTIONS=1) turns the dispatcher on; the store's hooks
	// must then be app.Hooks with Dispatch too.
	Dispatch *app.DispatchConfig
}

// Hooks returns the store hooks the GitHub side needs, inserting through jobs: build the
// store with them (queue.Config.Hooks, with other capabilities' hooks beside) before
// calling NewGitHub.
func (c GitHubConfig) Hooks(jobs app.Jobs) queue.Hooks {
	return app.Hooks(jobs, app.HooksConfig{Dispatch: c.Dispatch != nil})
}

// NewGitHub wires the GitHub side over st, a store built with cfg.Hooks(jobs): every
// change any part makes runs the same hooks, in the change's transaction.
func NewGitHub(st *queue.Store, f *app.Factory, jobs app.Jobs, log *slog.Logger, cfg GitHubConfig) (*GitHub, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	g := &GitHub{Factory: f}
	if cfg.Dispatch != nil {
		g.Dispatcher = app.NewDispatcher(st, f, log, *cfg.Dispatch)
	}
	g.Mirror = app.NewMirror(st, f, log, cfg.Mirror)
	g.Intake = New(st, f, g.Mirror, jobs, log, cfg.Intake)
	cfg.Reconcile.Dispatcher = g.Dispatcher
	g.Reconciler = app.NewReconciler(st, f, log, cfg.Reconcile)
	g.PushTokens = app.NewPushTokens(st, f, log, 0)
	ws, err := app.NewWorkspaces(f, st, log, app.WorkspaceConfig{})
	switch {
	case errors.Is(err, app.ErrNoApp): // a token, not the App: no push tokens to mint
	case err != nil:
		return nil, fmt.Errorf("set up push tokens: %w", err)
	}
	g.Workspaces = ws
	return g, nil
}

// Register adds the River workers of the GitHub side's jobs.
func (g *GitHub) Register(w *river.Workers) {
	river.AddWorker(w, g.Intake.Worker())
	river.AddWorker(w, g.Mirror.Worker())
	river.AddWorker(w, g.Reconciler.Worker())
	river.AddWorker(w, g.PushTokens.Worker())
	if g.Dispatcher != nil {
		river.AddWorker(w, g.Dispatcher.Worker())
	}
}
