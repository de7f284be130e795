package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/whilly-go/whilly/control"
	"github.com/whilly-go/whilly/plan"
	"github.com/whilly-go/whilly/queue"
	"github.com/whilly-go/whilly/testkit"
)

// syncBuffer is a command's output, read while the command runs.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func (b *syncBuffer) lines() []string {
	s := strings.TrimRight(b.String(), "\n")
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

// testApp is an app whose environment is env and whose output goes to out and errOut.
func testApp(t *testing.T, out, errOut *syncBuffer, env map[string]string) *app {
	t.Helper()
	if env["WHILLY_DATA_DIR"] == "" {
		env["WHILLY_DATA_DIR"] = t.TempDir()
	}
	return newApp(IO{In: strings.NewReader(""), Out: out, Err: errOut, Getenv: func(k string) string { return env[k] }},
		slog.New(slog.NewTextHandler(errOut, &slog.HandlerOptions{Level: slog.LevelWarn})))
}

func eventsPlan(id string, n int) *plan.Plan {
	p := &plan.Plan{ID: id, Name: "events " + id}
	for i := range n {
		p.Tasks = append(p.Tasks, plan.Task{
			ID: "T" + string(rune('1'+i)), Priority: plan.PriorityMedium,
			Description:        "A task whose events the tail command prints",
			AcceptanceCriteria: []string{"printed"}, TestSteps: []string{"true"},
		})
	}
	return p
}

// runTail runs `events tail args…` until the returned stop is called; stop returns the
// command's error.
func runTail(t *testing.T, a *app, args ...string) func() error {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cmd := a.eventsCommand()
	cmd.SetArgs(append([]string{"tail"}, args...))
	cmd.SetOut(a.io.Out)
	cmd.SetErr(a.io.Err)
	done := make(chan error, 1)
	go func() { done <- cmd.ExecuteContext(ctx) }()
	stopped := false
	stop := func() error {
		if stopped {
			return nil
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			return err
		case <-time.After(30 * time.Second):
			t.Fatal("events tail did not stop when cancelled")
			return nil
		}
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}

func newEventsStore(t *testing.T) (*queue.Store, string) {
	t.Helper()
	dsn := testkit.DSN(t)
	pool, err := pgxpool.New(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return queue.NewStore(pool, nil, queue.Config{}), dsn
}

// The local tail prints the plan's latest events, then each new one as it is written,
// and nothing of other plans.
func TestEventsTailLocalPrintsRecentThenFollows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, dsn := newEventsStore(t)
	if _, err := st.Import(ctx, eventsPlan("mine", 3), queue.ImportOptions{}); err != nil {
		t.Fatal(err)
	}
	var out, errOut syncBuffer
	a := testApp(t, &out, &errOut, map[string]string{"WHILLY_DATABASE_URL": dsn})
	stop := runTail(t, a, "--plan", "mine", "--recent", "2")

	testkit.Eventually(t, 30*time.Second, "the two recent events", func() bool { return len(out.lines()) >= 2 })
	lines := out.lines()
	if len(lines) != 2 || !strings.Contains(lines[0], "task.created") || !strings.Contains(lines[0], " T2 ") ||
		!strings.Contains(lines[1], " T3 ") {
		t.Fatalf("recent events:\n%s", out.String())
	}

	if _, err := st.Import(ctx, eventsPlan("other", 1), queue.ImportOptions{}); err != nil {
		t.Fatal(err)
	}
	w, _, err := st.RegisterWorker(ctx, "host", nil)
	if err != nil {
		t.Fatal(err)
	}
	c, err := st.Claim(ctx, queue.ClaimRequest{WorkerID: w.ID, PlanID: "mine"})
	if err != nil || c == nil {
		t.Fatalf("claim: %v, %v", c, err)
	}
	testkit.Eventually(t, 30*time.Second, "the CLAIM event", func() bool { return strings.Contains(out.String(), "CLAIM") })
	if err := stop(); err != nil {
		t.Fatalf("events tail ended with %v, want nil on cancel", err)
	}
	got := out.String()
	if strings.Contains(got, "other") {
		t.Errorf("events of another plan were printed:\n%s", got)
	}
	last := out.lines()[len(out.lines())-1]
	if !strings.Contains(last, "CLAIM") || !strings.Contains(last, "mine") || !strings.Contains(last, " T1 ") ||
		!strings.Contains(last, w.ID) {
		t.Errorf("CLAIM line %q lacks the plan, task or worker", last)
	}
}

// --since 0 --json replays the whole log of the plan as JSON objects, one per line, in
// id order.
func TestEventsTailSinceJSON(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, dsn := newEventsStore(t)
	if _, err := st.Import(ctx, eventsPlan("p", 3), queue.ImportOptions{}); err != nil {
		t.Fatal(err)
	}
	var out, errOut syncBuffer
	a := testApp(t, &out, &errOut, map[string]string{"WHILLY_DATABASE_URL": dsn})
	stop := runTail(t, a, "--plan", "p", "--since", "0", "--json")
	testkit.Eventually(t, 30*time.Second, "the whole log", func() bool { return len(out.lines()) >= 4 }) // plan.created + 3 task.created
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	var prev int64
	for i, line := range out.lines() {
		var e eventLine
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("line %d is not an event object: %q: %v", i, line, err)
		}
		if e.PlanID != "p" || e.ID <= prev || e.CreatedAt.IsZero() {
			t.Errorf("line %d: %+v (previous id %d)", i, e, prev)
		}
		prev = e.ID
	}
	if first := out.lines()[0]; !strings.Contains(first, `"type":"plan.created"`) {
		t.Errorf("the replay starts with %s, want plan.created", first)
	}
}

// With --connect the tail reads the control plane's API and follows its SSE stream.
func TestEventsTailRemote(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, _ := newEventsStore(t)
	ln, url, token := serveAPI(t, st)
	if _, err := st.Import(ctx, eventsPlan("remote", 3), queue.ImportOptions{}); err != nil {
		t.Fatal(err)
	}

	var out, errOut syncBuffer
	a := testApp(t, &out, &errOut, map[string]string{"WHILLY_API_TOKEN": token})
	stop := runTail(t, a, "--connect", url, "--plan", "remote", "--recent", "2")
	testkit.Eventually(t, 30*time.Second, "the two recent events", func() bool { return len(out.lines()) >= 2 })
	if l := out.lines(); !strings.Contains(l[0], " T2 ") || !strings.Contains(l[1], " T3 ") {
		t.Fatalf("recent events:\n%s", out.String())
	}
	testkit.Eventually(t, 30*time.Second, "the stream to be open", func() bool { return ln.Subscribers() > 0 })
	w, _, err := st.RegisterWorker(ctx, "host", nil)
	if err != nil {
		t.Fatal(err)
	}
	if c, err := st.Claim(ctx, queue.ClaimRequest{WorkerID: w.ID, PlanID: "remote"}); err != nil || c == nil {
		t.Fatalf("claim: %v, %v", c, err)
	}
	testkit.Eventually(t, 30*time.Second, "the CLAIM event from the stream", func() bool { return strings.Contains(out.String(), "CLAIM") })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if n := len(out.lines()); n != 3 {
		t.Errorf("%d lines, want the 2 recent events and the CLAIM:\n%s", n, out.String())
	}

	// A token the control plane does not know ends the command with exit 2.
	var out2, err2 syncBuffer
	bad := testApp(t, &out2, &err2, map[string]string{"WHILLY_API_TOKEN": "nope"})
	cmd := bad.eventsCommand()
	cmd.SetArgs([]string{"tail", "--connect", url})
	cmd.SetOut(&out2)
	cmd.SetErr(&err2)
	if code := report(&err2, cmd.ExecuteContext(ctx)); code != ExitEnv {
		t.Errorf("unknown token: exit %d, want %d (%s)", code, ExitEnv, err2.String())
	}
}

// serveAPI serves st's API with a running listener; it returns the listener, the
// server's URL and a read token.
func serveAPI(t *testing.T, st *queue.Store) (*queue.Listener, string, string) {
	t.Helper()
	ln := queue.NewListener(st.Pool(), nil)
	runCtx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = ln.Run(runCtx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	srv := httptest.NewServer(control.New(st, ln, nil, control.Config{}).Handler())
	t.Cleanup(srv.Close)
	token, _, err := st.MintToken(context.Background(), "viewer@example.com", false, nil)
	if err != nil {
		t.Fatal(err)
	}
	return ln, srv.URL, token
}

// Event ids are drawn before commit. While a transaction holds an event open, the tail
// prints nothing past it; once it commits, both events are printed, in id order, once.
// A transaction that rolls back (which notifies nobody) does not stall the tail.
func TestEventsTailPrintsALateCommitOnce(t *testing.T) {
	t.Parallel()
	for _, remote := range []bool{false, true} {
		t.Run(map[bool]string{false: "local", true: "remote"}[remote], func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			st, dsn := newEventsStore(t)
			// The plan's events of this test come after those of its creation.
			if _, err := st.CreatePlan(ctx, "late", "late", nil); err != nil {
				t.Fatal(err)
			}
			since, err := st.LatestEventID(ctx, "")
			if err != nil {
				t.Fatal(err)
			}
			var out, errOut syncBuffer
			args := []string{"--plan", "late", "--since", strconv.FormatInt(since, 10), "--json"}
			env := map[string]string{"WHILLY_DATABASE_URL": dsn}
			var ln *queue.Listener
			if remote {
				var url, token string
				ln, url, token = serveAPI(t, st)
				env = map[string]string{"WHILLY_API_TOKEN": token}
				args = append(args, "--connect", url)
			}
			stop := runTail(t, testApp(t, &out, &errOut, env), args...)
			if remote {
				testkit.Eventually(t, 30*time.Second, "the stream to be open", func() bool { return ln.Subscribers() > 0 })
			}

			insert := func(q interface {
				QueryRow(context.Context, string, ...any) pgx.Row
			}, typ string) int64 {
				t.Helper()
				var id int64
				if err := q.QueryRow(ctx, `INSERT INTO events (plan_id, type) VALUES ('late', $1) RETURNING id`, typ).Scan(&id); err != nil {
					t.Fatal(err)
				}
				return id
			}
			tx, err := st.Pool().Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = tx.Rollback(ctx) }()
			open := insert(tx, "log.open")
			later := insert(st.Pool(), "log.later")
			time.Sleep(600 * time.Millisecond) // proving an absence: nothing may be printed while open is open
			if got := out.String(); got != "" {
				t.Fatalf("printed while event %d was open:\n%s", open, got)
			}
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			testkit.Eventually(t, 30*time.Second, "both events", func() bool { return len(out.lines()) >= 2 })

			tx2, err := st.Pool().Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			gone := insert(tx2, "log.gone")
			last := insert(st.Pool(), "log.last")
			time.Sleep(600 * time.Millisecond) // proving an absence: last is held back behind gone
			if n := len(out.lines()); n != 2 {
				t.Fatalf("%d lines while event %d was open, want 2:\n%s", n, gone, out.String())
			}
			if err := tx2.Rollback(ctx); err != nil {
				t.Fatal(err)
			}
			testkit.Eventually(t, 30*time.Second, "the event after a rolled-back one", func() bool { return len(out.lines()) >= 3 })
			time.Sleep(600 * time.Millisecond) // proving an absence: nothing is printed twice
			if err := stop(); err != nil {
				t.Fatal(err)
			}
			var ids []int64
			for _, line := range out.lines() {
				var e eventLine
				if err := json.Unmarshal([]byte(line), &e); err != nil {
					t.Fatalf("not an event object: %q: %v", line, err)
				}
				ids = append(ids, e.ID)
			}
			if want := []int64{open, later, last}; !slices.Equal(ids, want) {
				t.Errorf("printed ids %v, want %v once each, in order", ids, want)
			}
		})
	}
}

// A plan that does not exist ends the tail at once with exit 1 and one sentence, on the
// local database and on a control plane alike, instead of waiting forever for its events.
func TestEventsTailUnknownPlan(t *testing.T) {
	t.Parallel()
	st, dsn := newEventsStore(t)
	_, url, token := serveAPI(t, st)
	for name, args := range map[string][]string{
		"local":  {"tail", "--plan", "nosuch"},
		"remote": {"tail", "--plan", "nosuch", "--connect", url},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var out, errOut syncBuffer
			a := testApp(t, &out, &errOut, map[string]string{"WHILLY_DATABASE_URL": dsn, "WHILLY_API_TOKEN": token})
			cmd := a.eventsCommand()
			cmd.SetArgs(args)
			cmd.SetOut(&out)
			cmd.SetErr(&errOut)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			code := report(&errOut, cmd.ExecuteContext(ctx))
			if ctx.Err() != nil {
				t.Fatal("events tail --plan nosuch was still waiting after 30 s")
			}
			const want = "no plan nosuch: 'whilly plan list' lists the plans"
			if code != ExitFailed || !strings.Contains(errOut.String(), want) {
				t.Errorf("exit %d, stderr %q; want exit %d and %q", code, errOut.String(), ExitFailed, want)
			}
		})
	}
}
