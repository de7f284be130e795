package cli

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/lipgloss"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/muesli/termenv"

	"github.com/whilly-go/whilly/cli/tui"
	"github.com/whilly-go/whilly/control"
	"github.com/whilly-go/whilly/plan"
	"github.com/whilly-go/whilly/queue"
	"github.com/whilly-go/whilly/testkit"
)

func envOf(vars map[string]string) func(string) string {
	return func(k string) string { return vars[k] }
}

func TestDashboardWithoutATerminalSuggestsEventsTail(t *testing.T) {
	t.Parallel()
	var out, errOut bytes.Buffer
	// An unreachable database proves the terminal check comes before anything else.
	a := newApp(IO{In: strings.NewReader(""), Out: &out, Err: &errOut,
		Getenv: envOf(map[string]string{"WHILLY_DATABASE_URL": "postgres://nobody@127.0.0.1:1/none"})},
		slog.New(slog.DiscardHandler))
	cmd := a.dashboardCommand()
	cmd.SilenceUsage, cmd.SilenceErrors = true, true // as under the root command
	cmd.SetArgs([]string{"--plan", "demo"})
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	code := report(&errOut, cmd.ExecuteContext(context.Background()))
	if code != ExitFailed {
		t.Errorf("exit code = %d, want %d", code, ExitFailed)
	}
	msg := errOut.String()
	if !strings.Contains(msg, "whilly: dashboard needs a terminal") || !strings.Contains(msg, "'whilly events tail") || !strings.Contains(msg, "'whilly plan show ID'") ||
		strings.Count(strings.TrimSpace(msg), "\n") != 0 {
		t.Errorf("stderr = %q, want one sentence suggesting events tail and plan show", msg)
	}
	if out.Len() != 0 {
		t.Errorf("stdout = %q, want nothing", out.String())
	}
}

// probe wraps the dashboard's model and publishes each frame it would draw, so that a
// test can run it under a real bubbletea program without a terminal.
type probe struct {
	m      *tui.Model
	frames chan string
}

func (p probe) Init() tea.Cmd { return p.m.Init() }

func (p probe) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	_, cmd := p.m.Update(msg)
	select {
	case p.frames <- p.m.View():
	default: // the test reads frames as fast as it needs; older ones may go
	}
	return p, cmd
}

func (p probe) View() string { return p.m.View() }

// waitFrame waits for a frame that satisfies every want.
func waitFrame(t *testing.T, frames <-chan string, what string, want func(string) bool) string {
	t.Helper()
	deadline := time.After(20 * time.Second)
	last := ""
	for {
		select {
		case f := <-frames:
			last = f
			if want(f) {
				return f
			}
		case <-deadline:
			t.Fatalf("no frame with %s within 20 s; the last one:\n%s", what, last)
			return ""
		}
	}
}

// taskRow is the row of a task in a frame.
func taskRow(frame, id string) string {
	for _, l := range strings.Split(frame, "\n") {
		if strings.HasPrefix(l, "  "+id+" ") {
			return l
		}
	}
	return ""
}

const dashPlan = `{"plan_id": "dash", "project": "Dashboard test", "budget_usd": 2, "tasks": [
 {"id": "T1", "priority": "high", "description": "Write the first part", "acceptance_criteria": ["it works"], "test_steps": ["go test ./..."], "key_files": ["a.go"]},
 {"id": "T2", "priority": "low", "description": "Write the second part", "acceptance_criteria": ["it works"], "test_steps": ["go test ./..."], "key_files": ["b.go"]}]}`

// TestDashboardFollowsTheLocalDatabase runs the local mode end to end without a
// terminal: an in-process control plane over a test database, the dashboard's own
// token, the SSE feed and the model under a bubbletea program. Work done on the
// database shows up in the model's frames, and the token is revoked at the end.
func TestDashboardFollowsTheLocalDatabase(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dsn := testkit.DSN(t)
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	st := queue.NewStore(pool, nil, queue.Config{})
	p, err := plan.Parse([]byte(dashPlan))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Import(ctx, p, queue.ImportOptions{}); err != nil {
		t.Fatal(err)
	}

	a := newApp(IO{Out: io.Discard, Err: io.Discard, Getenv: envOf(map[string]string{"WHILLY_DATABASE_URL": dsn})},
		slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn})))
	src, err := a.localDashboard(ctx)
	if err != nil {
		t.Fatal(err)
	}
	closed := sync.OnceFunc(src.close)
	t.Cleanup(closed)
	if err := dashboardPreflight(ctx, src, "dash"); err != nil {
		t.Fatalf("preflight: %v", err)
	}
	var ee *exitError
	if err := dashboardPreflight(ctx, src, "nope"); !errors.As(err, &ee) || ee.code != ExitFailed || !strings.Contains(err.Error(), "plan nope does not exist") {
		t.Errorf("preflight of a missing plan = %v, want exit 1", err)
	}

	// A wrong token on --connect is a configuration error (exit 2), said before the TUI starts.
	bad, err := newApp(IO{Getenv: envOf(map[string]string{"WHILLY_API_TOKEN": "wrt_nope"})}, slog.New(slog.DiscardHandler)).remoteDashboard(dashboardOptions{connect: src.api.BaseURL()})
	if err != nil {
		t.Fatal(err)
	}
	if err := dashboardPreflight(ctx, bad, ""); !errors.As(err, &ee) || ee.code != ExitEnv || !strings.Contains(err.Error(), "refused the token") {
		t.Errorf("preflight with a bad token = %v, want exit 2", err)
	}

	r := lipgloss.NewRenderer(io.Discard)
	r.SetColorProfile(termenv.Ascii)
	m := tui.New(tui.Config{API: src.api, Context: ctx, Source: src.where, Renderer: r})
	frames := make(chan string, 1)
	prog := tea.NewProgram(probe{m: m, frames: frames}, tea.WithContext(ctx), tea.WithInput(nil), tea.WithOutput(io.Discard),
		tea.WithoutRenderer(), tea.WithoutSignalHandler())
	ran := make(chan error, 1)
	go func() {
		_, err := prog.Run()
		ran <- err
	}()
	fed := make(chan struct{})
	go func() {
		defer close(fed)
		tui.Feed{API: src.api}.Run(ctx, prog.Send)
	}()
	prog.Send(tea.WindowSizeMsg{Width: 150, Height: 50})

	f := waitFrame(t, frames, "the plan's tasks, live", func(f string) bool {
		return strings.Contains(f, "● live") && strings.Contains(taskRow(f, "T1"), "PENDING") && strings.Contains(f, "$0 / $2")
	})
	if !strings.Contains(f, "▸ dash") || !strings.Contains(f, "local database") {
		t.Errorf("first frame:\n%s", f)
	}

	// A worker claims T1: the CLAIM event makes the model read the plan, its tasks and
	// the workers (the worker is new to it) again.
	w, _, err := st.RegisterWorker(ctx, "test-box", nil)
	if err != nil {
		t.Fatal(err)
	}
	c, err := st.Claim(ctx, queue.ClaimRequest{WorkerID: w.ID, PlanID: "dash"})
	if err != nil || c == nil || c.Task.ID != "T1" {
		t.Fatalf("claim = %+v, %v", c, err)
	}
	// The start-up re-read may still be in flight when the claim commits and show T1
	// CLAIMED before the CLAIM event arrives: wait for the frame that has both.
	waitFrame(t, frames, "T1 CLAIMED by the worker, and its CLAIM event", func(f string) bool {
		row := taskRow(f, "T1")
		return strings.Contains(row, "CLAIMED") && strings.Contains(row, w.ID) && strings.Contains(f, "test-box") &&
			strings.Contains(f, "CLAIM ") && strings.Contains(f, "worker_id="+w.ID)
	})

	l := queue.Lease{PlanID: "dash", TaskID: "T1", LeaseID: c.Lease.ID, WorkerID: w.ID}
	if _, err := st.Start(ctx, l); err != nil {
		t.Fatal(err)
	}
	cost, _ := plan.ParseUSD("0.25")
	if _, err := st.Complete(ctx, l, queue.CompleteInput{Cost: cost}); err != nil {
		t.Fatal(err)
	}
	// As above, a re-read started by START may show DONE before COMPLETE arrives.
	waitFrame(t, frames, "T1 DONE, its cost charged and its COMPLETE event", func(f string) bool {
		return strings.Contains(taskRow(f, "T1"), "DONE") && strings.Contains(taskRow(f, "T1"), "$0.25") &&
			strings.Contains(f, "$0.25 / $2") && strings.Contains(f, "1/2") && strings.Contains(f, "COMPLETE")
	})

	prog.Send(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune("q")})
	select {
	case err := <-ran:
		if err != nil {
			t.Errorf("the program ended with %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("q did not end the program")
	}
	cancel()
	<-fed

	// The dashboard's token expires within the hour and is revoked on exit.
	closed()
	toks, err := st.ListTokens(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(toks) != 1 {
		t.Fatalf("tokens = %+v, want the dashboard's one", toks)
	}
	tok := toks[0]
	if tok.Admin || !strings.Contains(tok.Owner, "whilly dashboard") || tok.ExpiresAt == nil ||
		tok.ExpiresAt.Sub(tok.CreatedAt) > control.LocalTokenTTL+time.Minute || tok.RevokedAt == nil {
		t.Errorf("the dashboard's token = %+v, want a read token expiring within the hour, revoked", tok)
	}
}
