package tui

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/lipgloss"
	"github.com/charmbracelet/x/ansi"
	"github.com/muesli/termenv"

	"github.com/whilly-go/whilly/control/client"
	"github.com/whilly-go/whilly/plan"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// fakeAPI answers from its fields and records the calls.
type fakeAPI struct {
	mu      sync.Mutex
	calls   []string
	plans   []client.Plan
	tasks   map[string][]client.Task
	workers []client.Worker
	missing map[string]bool // plans that answer 404
}

func (f *fakeAPI) record(call string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, call)
}

func (f *fakeAPI) takeCalls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := f.calls
	f.calls = nil
	slices.Sort(c)
	return c
}

func (f *fakeAPI) ListPlans(context.Context, client.PlanQuery) (client.PlanList, error) {
	f.record("ListPlans")
	return client.PlanList{Plans: f.plans}, nil
}

func (f *fakeAPI) GetPlan(_ context.Context, id string) (client.Plan, error) {
	f.record("GetPlan " + id)
	if f.missing[id] {
		return client.Plan{}, &client.Error{Status: http.StatusNotFound, Code: client.CodeNotFound}
	}
	for _, p := range f.plans {
		if p.ID == id {
			return p, nil
		}
	}
	return client.Plan{ID: id}, nil
}

func (f *fakeAPI) ListTasks(_ context.Context, id string) ([]client.Task, error) {
	f.record("ListTasks " + id)
	return f.tasks[id], nil
}

func (f *fakeAPI) ListWorkers(context.Context) ([]client.Worker, error) {
	f.record("ListWorkers")
	return f.workers, nil
}

func (f *fakeAPI) ListEvents(context.Context, client.EventQuery) (client.EventList, error) {
	f.record("ListEvents")
	return client.EventList{}, nil
}

func (f *fakeAPI) StreamEvents(ctx context.Context, _ string, _ int64, _ func(client.Event) error) error {
	<-ctx.Done()
	return ctx.Err()
}

func asciiRenderer() *lipgloss.Renderer {
	r := lipgloss.NewRenderer(io.Discard)
	r.SetColorProfile(termenv.Ascii)
	return r
}

func newModel(t *testing.T, api *fakeAPI, planID string) *Model {
	t.Helper()
	m := New(Config{API: api, PlanID: planID, Source: "test", Renderer: asciiRenderer(), Now: func() time.Time { return t0 }, Location: time.UTC})
	m.Update(tea.WindowSizeMsg{Width: 140, Height: 45})
	return m
}

// drain runs cmd like bubbletea would and returns the messages it produced, when all
// its commands have returned or after wait; timers longer than wait (the clock, the
// worker refresh) are left behind.
func drain(cmd tea.Cmd, wait time.Duration) []tea.Msg {
	if cmd == nil {
		return nil
	}
	out := make(chan tea.Msg, 100)
	var mu sync.Mutex
	pending := 0
	idle := make(chan struct{})
	var run func(tea.Cmd)
	run = func(c tea.Cmd) {
		mu.Lock()
		pending++
		mu.Unlock()
		go func() {
			msg := c()
			if b, ok := msg.(tea.BatchMsg); ok {
				for _, c := range b {
					if c != nil {
						run(c)
					}
				}
			} else if msg != nil {
				out <- msg
			}
			mu.Lock()
			pending--
			if pending == 0 {
				close(idle)
			}
			mu.Unlock()
		}()
	}
	run(cmd)
	deadline := time.After(wait)
	var msgs []tea.Msg
	for {
		select {
		case msg := <-out:
			msgs = append(msgs, msg)
		case <-idle:
			for {
				select {
				case msg := <-out:
					msgs = append(msgs, msg)
				default:
					return msgs
				}
			}
		case <-deadline:
			return msgs
		}
	}
}

// settle applies cmd's messages (and those of the commands they return) until quiet.
func settle(m *Model, cmd tea.Cmd) {
	for range 10 {
		msgs := drain(cmd, 2*time.Second)
		if len(msgs) == 0 {
			return
		}
		var cmds []tea.Cmd
		for _, msg := range msgs {
			_, c := m.Update(msg)
			cmds = append(cmds, c)
		}
		cmd = tea.Batch(cmds...)
	}
}

func usd(s string) *plan.USD {
	u, err := plan.ParseUSD(s)
	if err != nil {
		panic(err)
	}
	return &u
}

func demoData() *fakeAPI {
	hb := t0.Add(-3 * time.Second)
	return &fakeAPI{
		plans: []client.Plan{
			{ID: "demo", Name: "Demo plan", Status: plan.PlanActive, BudgetUSD: usd("5"), SpentUSD: *usd("0.3"), Total: 10, CreatedAt: t0.Add(-time.Hour),
				Counts: map[plan.Status]int{plan.StatusDone: 5, plan.StatusInProgress: 1, plan.StatusFailed: 1, plan.StatusPending: 3}},
			{ID: "old", Name: "Old plan", Status: plan.PlanDone, SpentUSD: *usd("0.08"), Total: 2, CreatedAt: t0.Add(-2 * time.Hour),
				Counts: map[plan.Status]int{plan.StatusDone: 2}},
		},
		tasks: map[string][]client.Task{
			"demo": {
				{PlanID: "demo", ID: "T1", Status: plan.StatusDone, Attempts: 1, MaxAttempts: 3, CostUSD: *usd("0.02"), Description: "Write the parser", UpdatedAt: t0.Add(-time.Minute)},
				{PlanID: "demo", ID: "T2", Status: plan.StatusInProgress, Attempts: 1, MaxAttempts: 3, ClaimedBy: "w-1", Description: "Write the lexer", UpdatedAt: t0.Add(-5 * time.Second)},
				{PlanID: "demo", ID: "T3", Status: plan.StatusFailed, Attempts: 3, MaxAttempts: 3, CostUSD: *usd("0.06"), Description: "Fix the build", LastError: "agent_timeout", UpdatedAt: t0},
			},
			"old": {{PlanID: "old", ID: "O1", Status: plan.StatusDone, Attempts: 1, MaxAttempts: 3}},
		},
		workers: []client.Worker{
			{ID: "w-1", Hostname: "box/run-1", Status: "online", LastHeartbeat: &hb, Labels: []string{"gpu"}},
			{ID: "w-gone", Hostname: "box/run-0", Status: "revoked", RevokedAt: &hb},
		},
	}
}

// loaded is a model that has read demoData.
func loaded(t *testing.T, planID string) (*Model, *fakeAPI) {
	t.Helper()
	api := demoData()
	m := newModel(t, api, planID)
	settle(m, m.refreshAll())
	if planID == "" {
		settle(m, m.refreshAll()) // the tasks of the plan selected by the first read
	}
	api.takeCalls()
	return m, api
}

func key(s string) tea.KeyMsg {
	switch s {
	case "tab":
		return tea.KeyMsg{Type: tea.KeyTab}
	case "shift+tab":
		return tea.KeyMsg{Type: tea.KeyShiftTab}
	case "left":
		return tea.KeyMsg{Type: tea.KeyLeft}
	case "right":
		return tea.KeyMsg{Type: tea.KeyRight}
	case "enter":
		return tea.KeyMsg{Type: tea.KeyEnter}
	case "esc":
		return tea.KeyMsg{Type: tea.KeyEsc}
	case "backspace":
		return tea.KeyMsg{Type: tea.KeyBackspace}
	case "pgdown":
		return tea.KeyMsg{Type: tea.KeyPgDown}
	case "ctrl+c":
		return tea.KeyMsg{Type: tea.KeyCtrlC}
	}
	return tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune(s)}
}

func press(m *Model, keys ...string) tea.Cmd {
	var cmds []tea.Cmd
	for _, k := range keys {
		_, c := m.Update(key(k))
		cmds = append(cmds, c)
	}
	return tea.Batch(cmds...)
}

func mustContain(t *testing.T, view string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(view, w) {
			t.Errorf("the view lacks %q:\n%s", w, view)
		}
	}
}

func mustNotContain(t *testing.T, view string, nots ...string) {
	t.Helper()
	for _, w := range nots {
		if strings.Contains(view, w) {
			t.Errorf("the view shows %q:\n%s", w, view)
		}
	}
}

// row returns the line that starts with prefix.
func row(view, prefix string) string {
	for _, l := range strings.Split(view, "\n") {
		if strings.HasPrefix(l, prefix) {
			return l
		}
	}
	return ""
}

func lineWith(view, substr string) string {
	for _, l := range strings.Split(view, "\n") {
		if strings.Contains(l, substr) {
			return l
		}
	}
	return ""
}

func ev(id int64, typ, planID, taskID string, payload map[string]any) client.Event {
	raw, _ := json.Marshal(payload)
	return client.Event{ID: id, Type: typ, PlanID: planID, TaskID: taskID, Payload: raw, CreatedAt: t0}
}

func TestViewShowsPlansTasksWorkersAndEvents(t *testing.T) {
	t.Parallel()
	m, _ := loaded(t, "")
	m.Update(EventMsg{Event: ev(7, "START", "demo", "T2", map[string]any{"worker_id": "w-1", "attempt": 1, "lease_expires_at": "x"})})
	v := m.View()
	if strings.Contains(v, "\x1b[") {
		t.Fatalf("the Ascii renderer left escape codes in the view: %q", v)
	}
	// Open plans come first, and the first is selected.
	if p := lineWith(v, "demo "); !strings.Contains(p, "▸ demo") || !strings.Contains(p, "ACTIVE") ||
		!strings.Contains(p, "██████████"+"██") || !strings.Contains(p, "50%") || !strings.Contains(p, "5/10") ||
		!strings.Contains(p, "$0.3 / $5") || !strings.Contains(p, "Demo plan") {
		t.Errorf("plan row = %q", p)
	}
	if p := lineWith(v, "old "); !strings.Contains(p, "DONE") || !strings.Contains(p, "$0.08 / unlimited") || strings.Contains(p, "▸") {
		t.Errorf("second plan row = %q", p)
	}
	mustContain(t, v, "PLANS (2)", "TASKS of demo · 3", "WORKERS · 1 online · 0 offline · 1 revoked (hidden)", "EVENTS · newest first")
	// Running tasks first, then failed, then the rest; the failed one shows its error.
	if i2, i3, i1 := strings.Index(v, "  T2 "), strings.Index(v, "  T3 "), strings.Index(v, "  T1 "); i2 > i3 || i3 > i1 {
		t.Errorf("tasks are not ordered running, failed, done:\n%s", v)
	}
	if l := row(v, "  T2 "); !strings.Contains(l, "IN_PROGRESS") || !strings.Contains(l, "1/3") || !strings.Contains(l, "w-1") || !strings.Contains(l, "5s ago") {
		t.Errorf("T2 row = %q", l)
	}
	if l := row(v, "  T3 "); !strings.Contains(l, "FAILED") || !strings.Contains(l, "3/3") || !strings.Contains(l, "$0.06") || !strings.Contains(l, "agent_timeout") {
		t.Errorf("T3 row = %q", l)
	}
	if l := lineWith(v, "box/run-1"); !strings.Contains(l, "online") || !strings.Contains(l, "3s ago") || !strings.Contains(l, "T2") || !strings.Contains(l, "gpu") {
		t.Errorf("worker row = %q", l)
	}
	mustNotContain(t, v, "w-gone")
	if l := lineWith(v, "12:00:00 demo"); !strings.Contains(l, "START") || !strings.Contains(l, "worker_id=w-1 attempt=1") || strings.Contains(l, "lease_expires_at") {
		t.Errorf("event row = %q", l)
	}
	mustContain(t, v, "q quit", "p pause", "/ filter", "○ connecting")
}

func TestColoursWhenTheRendererHasThem(t *testing.T) {
	t.Parallel()
	api := demoData()
	r := lipgloss.NewRenderer(io.Discard)
	r.SetColorProfile(termenv.ANSI)
	m := New(Config{API: api, Renderer: r, Now: func() time.Time { return t0 }, Location: time.UTC})
	settle(m, m.refreshAll())
	settle(m, m.refreshAll())
	v := m.View()
	if !strings.Contains(v, "\x1b[") {
		t.Fatal("no colour with an ANSI renderer")
	}
	if plain := ansi.Strip(v); !strings.Contains(plain, "IN_PROGRESS") {
		t.Errorf("stripped view lacks the task state:\n%s", plain)
	}
}

func TestArrowsAndTabSelectAPlanAndLoadItsTasks(t *testing.T) {
	t.Parallel()
	m, api := loaded(t, "")
	cmd := press(m, "tab")
	if m.selected != "old" {
		t.Fatalf("tab selected %q, want old", m.selected)
	}
	mustContain(t, m.View(), "▸ old", "TASKS of old", "loading…")
	settle(m, cmd)
	if got := api.takeCalls(); !slices.Equal(got, []string{"ListTasks old"}) {
		t.Errorf("selecting a plan read %v, want its tasks only", got)
	}
	v := m.View()
	mustContain(t, v, "TASKS of old · 1", "  O1 ")
	mustNotContain(t, v, "  T2 ")

	settle(m, press(m, "tab")) // wraps around
	if m.selected != "demo" {
		t.Errorf("second tab selected %q, want demo", m.selected)
	}
	settle(m, press(m, "left"))
	if m.selected != "old" {
		t.Errorf("left selected %q, want old", m.selected)
	}
	settle(m, press(m, "shift+tab"))
	settle(m, press(m, "right"))
	if m.selected != "old" {
		t.Errorf("shift+tab, right selected %q, want old", m.selected)
	}
}

func TestOnePlanModeShowsThatPlanOnly(t *testing.T) {
	t.Parallel()
	m, api := loaded(t, "old")
	v := m.View()
	mustContain(t, v, "PLAN\n", "TASKS of old · 1")
	mustNotContain(t, v, "Demo plan", "tab ←→")
	if cmd := press(m, "tab", "left"); cmd != nil && len(drain(cmd, 20*time.Millisecond)) > 0 {
		t.Error("plan keys did something with --plan")
	}
	// Events of other plans (which the stream filters anyway) change nothing.
	_, cmd := m.Update(EventMsg{Event: ev(1, "CLAIM", "demo", "T1", nil)})
	settle(m, cmd)
	if got := api.takeCalls(); len(got) != 0 {
		t.Errorf("another plan's event read %v", got)
	}
}

func TestAnEventReadsAgainOnlyWhatItChanged(t *testing.T) {
	t.Parallel()
	m, api := loaded(t, "")

	// A task event of the selected plan: that plan and its tasks.
	api.tasks["demo"][2].Status = plan.StatusPending
	_, cmd := m.Update(EventMsg{Event: ev(10, "RETRY", "demo", "T3", map[string]any{"worker_id": "w-1"})})
	settle(m, cmd)
	if got := api.takeCalls(); !slices.Equal(got, []string{"GetPlan demo", "ListTasks demo"}) {
		t.Errorf("a task event of the selected plan read %v", got)
	}
	if l := row(m.View(), "  T3 "); !strings.Contains(l, "PENDING") {
		t.Errorf("after the event T3 = %q, want PENDING", l)
	}

	// Another plan: only that plan.
	_, cmd = m.Update(EventMsg{Event: ev(11, "plan.budget_raised", "old", "", nil)})
	settle(m, cmd)
	if got := api.takeCalls(); !slices.Equal(got, []string{"GetPlan old"}) {
		t.Errorf("another plan's event read %v", got)
	}

	// An agent's log line changes no state.
	_, cmd = m.Update(EventMsg{Event: ev(12, "agent.output", "demo", "T2", nil)})
	settle(m, cmd)
	if got := api.takeCalls(); len(got) != 0 {
		t.Errorf("a log event read %v", got)
	}

	// A worker the dashboard has not seen: the workers too.
	_, cmd = m.Update(EventMsg{Event: ev(13, "CLAIM", "old", "O1", map[string]any{"worker_id": "w-new"})})
	settle(m, cmd)
	if got := api.takeCalls(); !slices.Equal(got, []string{"GetPlan old", "ListWorkers"}) {
		t.Errorf("an unknown worker's event read %v", got)
	}
}

func TestABurstOfEventsCoalescesIntoOneMoreRead(t *testing.T) {
	t.Parallel()
	m, api := loaded(t, "")
	_, first := m.Update(EventMsg{Event: ev(20, "START", "demo", "T2", nil)})
	for i := range 50 {
		if _, cmd := m.Update(EventMsg{Event: ev(int64(21+i), "progress.step", "demo", "T2", nil)}); cmd != nil {
			if msgs := drain(cmd, 10*time.Millisecond); len(msgs) > 0 {
				t.Fatalf("a log event started reads: %v", msgs)
			}
		}
		if _, cmd := m.Update(EventMsg{Event: ev(int64(100+i), "COMPLETE", "demo", "T2", nil)}); cmd != nil {
			if msgs := drain(cmd, 10*time.Millisecond); len(msgs) > 0 {
				t.Fatalf("event %d during a read started another: %v", i, msgs)
			}
		}
	}
	// The first reads return; the 50 events announced meanwhile cause one more each.
	msgs := drain(first, 100*time.Millisecond)
	if got := api.takeCalls(); !slices.Equal(got, []string{"GetPlan demo", "ListTasks demo"}) {
		t.Fatalf("first reads = %v", got)
	}
	var next []tea.Cmd
	for _, msg := range msgs {
		_, c := m.Update(msg)
		next = append(next, c)
	}
	start := time.Now()
	settle(m, tea.Batch(next...))
	if got := api.takeCalls(); !slices.Equal(got, []string{"GetPlan demo", "ListTasks demo"}) {
		t.Errorf("reads after the burst = %v, want one more of each", got)
	}
	if time.Since(start) < refetchSpacing {
		t.Errorf("the second read came %s after the first, sooner than %s", time.Since(start), refetchSpacing)
	}
}

func TestPauseFreezesTheViewAndBuffersEvents(t *testing.T) {
	t.Parallel()
	m, api := loaded(t, "")
	press(m, "p")
	frozen := m.View()
	mustContain(t, frozen, "⏸ PAUSED", "events are buffered")

	// While paused: events, reads, stream news and the clock change nothing on screen
	// and start no reads.
	api.tasks["demo"][1].Status = plan.StatusDone
	var cmds []tea.Cmd
	for _, msg := range []tea.Msg{
		EventMsg{Event: ev(30, "COMPLETE", "demo", "T2", map[string]any{"cost_usd": 0.02})},
		EventsMsg{Events: []client.Event{ev(31, "plan.done", "demo", "", nil)}},
		tasksMsg{planID: "demo", tasks: api.tasks["demo"]},
		StreamDownMsg{Err: errors.New("boom"), Retry: time.Second},
		clockMsg(t0.Add(time.Hour)),
	} {
		_, c := m.Update(msg)
		cmds = append(cmds, c)
	}
	for _, msg := range drain(tea.Batch(cmds...), 30*time.Millisecond) {
		t.Errorf("paused model produced %T", msg)
	}
	if v := m.View(); v != frozen {
		t.Fatalf("the paused view changed:\n%s\n---\n%s", frozen, v)
	}
	if got := api.takeCalls(); len(got) != 0 {
		t.Errorf("paused model read %v", got)
	}

	// Resume: buffered events appear, the held read applies, what changed is read once.
	settle(m, press(m, "p"))
	v := m.View()
	mustNotContain(t, v, "PAUSED")
	mustContain(t, v, "COMPLETE", "cost_usd=0.02", "plan.done", "stream down")
	if l := row(v, "  T2 "); !strings.Contains(l, "DONE") {
		t.Errorf("after resume T2 = %q", l)
	}
	if got := api.takeCalls(); !slices.Equal(got, []string{"GetPlan demo", "ListTasks demo"}) {
		t.Errorf("resume read %v, want the changed plan and its tasks", got)
	}
}

func TestFilterNarrowsTasksAndEvents(t *testing.T) {
	t.Parallel()
	m, _ := loaded(t, "")
	m.Update(EventsMsg{Events: []client.Event{ev(1, "CLAIM", "demo", "T1", nil), ev(2, "CLAIM", "demo", "T3", nil)}})
	press(m, "/", "T", "3", "q") // q is text while editing, not quit
	if m.quitting {
		t.Fatal("q quit while typing a filter")
	}
	mustContain(t, m.View(), "filter: T3q▏")
	press(m, "backspace", "enter")
	v := m.View()
	mustContain(t, v, `TASKS of demo · 1 of 3 match "T3"`, "  T3 ", `EVENTS · newest first · matching "T3"`, `filter "T3"`)
	if row(v, "  T1 ") != "" || row(v, "  T2 ") != "" || lineWith(v, "demo T1") != "" {
		t.Errorf("the filter lets other tasks or events through:\n%s", v)
	}
	if l := lineWith(v, "demo T3"); !strings.Contains(l, "CLAIM") {
		t.Errorf("the matching event is missing:\n%s", v)
	}

	// Keys read together arrive as one message; each still counts.
	press(m, "esc")
	m.Update(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune("/T3")})
	press(m, "enter")
	mustContain(t, m.View(), `TASKS of demo · 1 of 3 match "T3"`)
	// Pasted text is no command.
	press(m, "esc")
	if _, cmd := m.Update(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune("pq"), Paste: true}); cmd != nil || m.paused {
		t.Error("pasted text paused or quit the dashboard")
	}
	press(m, "/", "T", "3", "enter")

	// Case-insensitive, and on state and error too.
	press(m, "/", "backspace", "backspace", "t", "i", "m", "e", "o", "u", "t", "enter")
	mustContain(t, m.View(), "  T3 ")
	press(m, "/", "x", "y", "z", "enter")
	mustContain(t, m.View(), `no task matches "timeoutxyz"`, `no event matches "timeoutxyz"`)
	press(m, "esc")
	v = m.View()
	mustContain(t, v, "TASKS of demo · 3", "  T1 ", "  T2 ")
	mustNotContain(t, v, `filter "`, "matching")
}

func TestQuitKeys(t *testing.T) {
	t.Parallel()
	for _, k := range []string{"q", "ctrl+c"} {
		m, _ := loaded(t, "")
		cmd := press(m, k)
		msgs := drain(cmd, 20*time.Millisecond)
		if len(msgs) != 1 || msgs[0] != (tea.QuitMsg{}) {
			t.Errorf("%s produced %v, want QuitMsg", k, msgs)
		}
	}
}

func TestResizeFitsTheViewAndTasksScroll(t *testing.T) {
	t.Parallel()
	api := demoData()
	var many []client.Task
	for i := range 40 {
		many = append(many, client.Task{PlanID: "demo", ID: fmt.Sprintf("task-%02d", i), Status: plan.StatusPending, MaxAttempts: 3,
			Description: strings.Repeat("a long description ", 10)})
	}
	api.tasks["demo"] = many
	m := newModel(t, api, "")
	settle(m, m.refreshAll())
	settle(m, m.refreshAll())

	for _, size := range []tea.WindowSizeMsg{{Width: 140, Height: 45}, {Width: 60, Height: 20}, {Width: 30, Height: 8}} {
		m.Update(size)
		v := m.View()
		lines := strings.Split(v, "\n")
		if len(lines) > size.Height {
			t.Errorf("%dx%d: %d lines", size.Width, size.Height, len(lines))
		}
		for _, l := range lines {
			if w := ansi.StringWidth(l); w > size.Width {
				t.Errorf("%dx%d: a line is %d wide: %q", size.Width, size.Height, w, l)
			}
		}
		if !strings.Contains(lines[len(lines)-1], "q quit") {
			t.Errorf("%dx%d: the last line is not the key help: %q", size.Width, size.Height, lines[len(lines)-1])
		}
	}

	m.Update(tea.WindowSizeMsg{Width: 140, Height: 30})
	v := m.View()
	mustContain(t, v, "task-00", "· rows 1–")
	mustNotContain(t, v, "task-39")
	press(m, "pgdown", "pgdown", "pgdown", "pgdown", "pgdown")
	v = m.View()
	mustContain(t, v, "task-39", "–40 (PgUp/PgDn)")
	mustNotContain(t, v, "task-00")
}

func TestPlansComeAndGo(t *testing.T) {
	t.Parallel()
	m, api := loaded(t, "")

	// A new plan appears through its plan.created event.
	api.plans = append(api.plans, client.Plan{ID: "new", Name: "New plan", Status: plan.PlanActive, Total: 1, CreatedAt: t0})
	_, cmd := m.Update(EventMsg{Event: ev(40, "plan.created", "new", "", nil)})
	settle(m, cmd)
	mustContain(t, m.View(), "PLANS (3)", "New plan")
	if m.plans[0].ID != "new" {
		t.Errorf("the newest open plan is not first: %v", m.plans[0].ID)
	}

	// The selected plan is deleted: it goes, and the selection moves on.
	api.missing = map[string]bool{"demo": true}
	_, cmd = m.Update(EventMsg{Event: ev(41, "plan.deleted", "demo", "", nil)})
	settle(m, cmd)
	v := m.View()
	mustContain(t, v, "PLANS (2)")
	mustNotContain(t, v, "Demo plan", "✗")
	if m.selected == "demo" || m.selected == "" {
		t.Errorf("selection = %q after its plan was deleted", m.selected)
	}

	// A list read issued before a plan read must not undo it, nor bring back a plan
	// deleted after it was issued.
	tomb := m.plansSeq["demo"]
	m.Update(planMsg{seq: m.seq + 1, id: "old", plan: client.Plan{ID: "old", Name: "Old plan v2", Status: plan.PlanActive}})
	m.Update(plansMsg{seq: tomb - 1, plans: []client.Plan{{ID: "old", Name: "Old plan v1"}, {ID: "demo", Name: "Demo plan"}, api.plans[2]}})
	v = m.View()
	mustContain(t, v, "Old plan v2", "New plan")
	mustNotContain(t, v, "Old plan v1", "Demo plan")
}

func TestStreamStateAndErrorsShow(t *testing.T) {
	t.Parallel()
	m, api := loaded(t, "")
	mustContain(t, m.View(), "○ connecting")

	_, cmd := m.Update(StreamLiveMsg{})
	settle(m, cmd)
	mustContain(t, m.View(), "● live", "12:00:00")
	if got := api.takeCalls(); !slices.Equal(got, []string{"ListPlans", "ListTasks demo", "ListWorkers"}) {
		t.Errorf("a live stream read %v, want everything once", got)
	}

	m.Update(StreamDownMsg{Err: errors.New("connection refused"), Retry: 4 * time.Second})
	mustContain(t, m.View(), "✗ stream down, retrying in 4s: connection refused")

	m.Update(workersMsg{err: errors.New("list workers: control plane answered 401")})
	mustContain(t, lineWith(m.View(), "q quit"), "✗ list workers: control plane answered 401")
	m.Update(workersMsg{workers: api.workers})
	mustNotContain(t, lineWith(m.View(), "q quit"), "✗")

	m.Update(clockMsg(t0.Add(90 * time.Second)))
	mustContain(t, m.View(), "12:01:30", "1m ago")
}
