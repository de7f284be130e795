package cli

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"sync"
	"time"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/lipgloss"
	"github.com/spf13/cobra"

	"github.com/whilly-go/whilly/cli/tui"
	"github.com/whilly-go/whilly/control"
	"github.com/whilly-go/whilly/control/client"
	"github.com/whilly-go/whilly/queue"
)

type dashboardOptions struct {
	planID    string
	connect   string
	tokenFile string
	insecure  bool
}

func (a *app) dashboardCommand() *cobra.Command {
	var o dashboardOptions
	cmd := &cobra.Command{
		Use: "dashboard [--plan ID] [--connect URL]",
		Example: `  whilly dashboard --plan demo
  WHILLY_API_TOKEN=whilly_a_… whilly dashboard --connect https://whilly.example.com`,
		Short: "Live terminal dashboard: plans, tasks, workers and events as they happen",
		Long: `Show plans, tasks, workers and events live, in the terminal.

Each plan shows its progress (done and skipped tasks green, failed red, cancelled grey)
and its budget, spent / cap; the selected plan's tasks show their state, attempts, cost,
the worker holding them and their last error; workers show their status and last
heartbeat; the most recent events come last. The view follows the control plane's event
stream: each event re-reads only what it changed (its plan, and the plan's tasks when it
is the selected one). Workers are also re-read every 10 s, as heartbeats write no events.

Keys: q quit · p pause the view (events are buffered and shown on resume) · / filter
tasks and events by a substring (enter keeps it, esc clears it) · tab or arrows select a
plan · PgUp/PgDn scroll the tasks · r read everything again.

Without --connect it reads the local database (WHILLY_DATABASE_URL, or the embedded one)
through an in-process control plane on a loopback port, with a read-only API token it
mints for itself: valid for an hour, renewed while the dashboard runs, revoked when it
ends. With --connect URL it reads that control plane with the token in --token-file, else
in WHILLY_API_TOKEN: a read token from 'whilly admin token mint --owner EMAIL' (a worker
or admin token works too).

It needs a terminal; in scripts use 'whilly events tail' or 'whilly plan show ID'.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !isTerminal(a.io.Out) {
				return failf("dashboard needs a terminal, and stdout is not one; to follow events from a script or a pipe use 'whilly events tail [--plan ID]', and for a plan's state 'whilly plan show ID'")
			}
			return a.dashboard(cmd.Context(), o, a.styles(cmd).r)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.planID, "plan", "", "show this plan only (default: every plan)")
	f.StringVar(&o.connect, "connect", "", "control plane URL (default: the local database through an in-process control plane)")
	f.StringVar(&o.tokenFile, "token-file", "", "with --connect: file holding the API token (default $WHILLY_API_TOKEN)")
	f.BoolVar(&o.insecure, "insecure", false, "with --connect: allow plain http:// to a non-loopback host")
	a.colorFlag(cmd)
	return cmd
}

// dashSource is where a dashboard reads: a control-plane client and how to let go of it.
type dashSource struct {
	api   *client.Client
	where string // for the header
	close func()
}

func (a *app) dashboard(ctx context.Context, o dashboardOptions, r *lipgloss.Renderer) error {
	var (
		src *dashSource
		err error
	)
	if o.connect != "" {
		src, err = a.remoteDashboard(o)
	} else {
		src, err = a.localDashboard(ctx)
	}
	if err != nil {
		return err
	}
	defer src.close()
	if err := dashboardPreflight(ctx, src, o.planID); err != nil {
		return err
	}
	return a.runDashboard(ctx, src, o.planID, r)
}

// runDashboard runs the TUI until q, ctrl+c or ctx ends; the feed stops with it.
func (a *app) runDashboard(ctx context.Context, src *dashSource, planID string, r *lipgloss.Renderer) error {
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	m := tui.New(tui.Config{API: src.api, Context: runCtx, PlanID: planID, Source: src.where, Renderer: r})
	opts := []tea.ProgramOption{
		tea.WithContext(runCtx), tea.WithOutput(a.io.Out), tea.WithAltScreen(),
		// main's signal.NotifyContext already turns SIGINT and SIGTERM into ctx's end;
		// in raw mode ctrl+c is a key.
		tea.WithoutSignalHandler(),
	}
	if isTerminal(a.io.In) {
		opts = append(opts, tea.WithInput(a.io.In))
	} else {
		opts = append(opts, tea.WithInputTTY())
	}
	p := tea.NewProgram(m, opts...)
	var wg sync.WaitGroup
	wg.Go(func() { tui.Feed{API: src.api, PlanID: planID}.Run(runCtx, p.Send) })
	_, err := p.Run()
	cancel()
	wg.Wait()
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("run the dashboard: %w", err)
	}
	return nil
}

// dashboardPreflight checks, before the screen is taken over, that the control plane
// answers, takes the token and has the plan, so that these end in one clear sentence.
func dashboardPreflight(ctx context.Context, src *dashSource, planID string) error {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	var err error
	if planID != "" {
		_, err = src.api.GetPlan(ctx, planID)
	} else {
		_, err = src.api.ListPlans(ctx, client.PlanQuery{Limit: 1})
	}
	switch {
	case err == nil:
		return nil
	case client.IsNotFound(err) && planID != "":
		return failf("plan %s does not exist (see 'whilly plan list')", planID)
	case client.IsUnauthorized(err), client.IsForbidden(err):
		return envf("the control plane at %s refused the token (%v); give a valid one in --token-file or WHILLY_API_TOKEN", src.where, err)
	case client.StatusOf(err) == 0, client.IsServerError(err):
		return envf("cannot reach the control plane at %s: %v", src.where, err)
	}
	return failf("%v", err)
}

// remoteDashboard reads the control plane at --connect with the token of --token-file or
// WHILLY_API_TOKEN (secrets never come from flags).
func (a *app) remoteDashboard(o dashboardOptions) (*dashSource, error) {
	api, err := a.connectAPI(o.connect, o.tokenFile, o.insecure, "whilly-dashboard", "dashboard --connect needs an API token in --token-file or WHILLY_API_TOKEN (mint a read token with 'whilly admin token mint --owner EMAIL')")
	if err != nil {
		return nil, err
	}
	return &dashSource{api: api, where: api.BaseURL(), close: func() {}}, nil
}

// localDashboard starts an in-process control plane on a loopback port over the
// configured database, and a client of it with a token of the dashboard's own.
func (a *app) localDashboard(ctx context.Context) (*dashSource, error) {
	cp, url, stopCP, err := a.localControlPlane(ctx)
	if err != nil {
		return nil, err
	}
	tok, err := a.newLocalToken(ctx, cp.Store())
	if err != nil {
		stopCP()
		return nil, err
	}
	api, err := client.New(url, "", client.Options{
		UserAgent:  "whilly-dashboard",
		HTTPClient: &http.Client{Transport: tok},
	})
	if err != nil {
		tok.Stop(ctx)
		stopCP()
		return nil, err
	}
	return &dashSource{api: api, where: "local database", close: func() {
		tok.Stop(ctx)
		stopCP()
	}}, nil
}

// newLocalToken is the dashboard's own read token (control.LocalToken), named after
// this host and process.
func (a *app) newLocalToken(ctx context.Context, st *queue.Store) (*control.LocalToken, error) {
	host, _ := os.Hostname()
	t, err := control.NewLocalToken(ctx, st, control.LocalTokenConfig{
		Owner: fmt.Sprintf("whilly dashboard on %s (pid %d)", host, os.Getpid()), Log: a.log,
	})
	if err != nil {
		return nil, fmt.Errorf("mint the dashboard's read token: %w", err)
	}
	return t, nil
}
