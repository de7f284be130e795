// Package tui is the live terminal dashboard of `whilly dashboard`: a bubbletea model
// that is a pure Update/View over its state (plans with progress and budget, the
// selected plan's tasks, workers, recent events), and the Feed that turns the control
// plane's SSE event stream into messages for it. Every byte of data comes through the
// control-plane API (package control/client), so a dashboard on the local database and
// one connected to a remote control plane run the same code.
//
// It imports control/client, plan, bubbletea and lipgloss; it must not import pgx,
// River, chi, queue or control: the store is the control plane's business.
package tui

import (
	"cmp"
	"context"
	"encoding/json"
	"slices"
	"strings"
	"time"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/lipgloss"

	"github.com/whilly-go/whilly/control/client"
	"github.com/whilly-go/whilly/plan"
)

// API is the part of the control-plane client the dashboard reads with;
// *client.Client implements it.
type API interface {
	ListPlans(ctx context.Context, q client.PlanQuery) (client.PlanList, error)
	GetPlan(ctx context.Context, planID string) (client.Plan, error)
	ListTasks(ctx context.Context, planID string) ([]client.Task, error)
	ListWorkers(ctx context.Context) ([]client.Worker, error)
	ListEvents(ctx context.Context, q client.EventQuery) (client.EventList, error)
	StreamEvents(ctx context.Context, planID string, lastEventID int64, fn func(client.Event) error) error
}

// Tuning of the model. Refreshes are driven by events; the only timers are the clock
// (a redraw, no I/O) and the worker refresh, because heartbeats write no events.
const (
	maxEvents       = 500                    // recent events kept
	maxPlans        = 500                    // plans listed (one page)
	clockEvery      = time.Second            // "3s ago" texts stay true
	workersEvery    = 10 * time.Second       // last heartbeats and online/offline
	refetchSpacing  = 250 * time.Millisecond // a resource changing under a burst of events is re-read at most 4×/s
	defaultWidth    = 100
	planRowsMax     = 5
	workerRowsMax   = 4
	eventRowsWanted = 6
)

// Config is what a Model needs.
type Config struct {
	// API reads the control plane. The model calls it only from tea.Cmds, never in Update.
	API API
	// Context bounds every call the model's commands make; cancel it to stop them.
	Context context.Context
	// PlanID shows this plan alone (--plan); empty shows every plan.
	PlanID string
	// Source says where the data comes from, for the header ("local database", a URL).
	Source string
	// Renderer styles the output; give it termenv.Ascii to turn colours off.
	Renderer *lipgloss.Renderer
	// Now is the clock; default time.Now.
	Now func() time.Time
	// Location formats event times; default time.Local.
	Location *time.Location
}

// Messages the Feed sends.
type (
	// EventMsg is one live event from the stream.
	EventMsg struct{ Event client.Event }
	// EventsMsg is a batch of past events (a backfill), oldest first.
	EventsMsg struct{ Events []client.Event }
	// StreamLiveMsg says the stream is open and its cursor is fixed: everything that
	// happens from now on will arrive as events, so the model re-reads its state once.
	StreamLiveMsg struct{}
	// StreamDownMsg says the stream broke and the feed retries after Retry.
	StreamDownMsg struct {
		Err   error
		Retry time.Duration
	}
)

// Messages of the model's own commands.
type (
	plansMsg struct {
		seq   uint64
		plans []client.Plan
		more  bool
		err   error
	}
	planMsg struct {
		seq  uint64
		id   string
		plan client.Plan
		err  error
	}
	tasksMsg struct {
		planID string
		tasks  []client.Task
		err    error
	}
	workersMsg struct {
		workers []client.Worker
		err     error
	}
	refetchMsg  struct{ key fetchKey }
	clockMsg    time.Time
	workersTick struct{}
)

type fetchKind int

const (
	fetchPlans   fetchKind = iota // the plan list
	fetchPlan                     // one plan
	fetchTasks                    // one plan's tasks
	fetchWorkers                  // the worker list
)

// fetchKey names a resource the model reads. At most one read of a key is in flight;
// changes announced meanwhile mark it dirty and cause one more read when it returns.
type fetchKey struct {
	kind fetchKind
	id   string
}

type streamState struct {
	live  bool
	err   error
	retry time.Duration
}

// Model is the dashboard's state. Update changes it only from messages and returns the
// reads to do as commands; View renders it. Neither does I/O.
type Model struct {
	api    API
	ctx    context.Context
	planID string
	source string
	st     styles
	clock  func() time.Time
	loc    *time.Location

	width, height int
	now           time.Time

	plans     []client.Plan // display order: open plans first, newest first
	morePlans bool
	plansSeq  map[string]uint64 // the read sequence each plan's data comes from
	seq       uint64
	selected  string // plan id
	tasks     []client.Task
	tasksOf   string // the plan tasks belong to; "" while loading
	workers   []client.Worker
	events    []client.Event // oldest first

	filter     string
	editing    bool
	paused     bool
	held       []tea.Msg      // reads that returned while paused, applied on resume
	buffered   []client.Event // events that arrived while paused
	taskScroll int
	quitting   bool

	inflight map[fetchKey]bool
	dirty    map[fetchKey]bool
	errs     map[fetchKey]error
	stream   streamState
}

// New returns a model; run it with tea.NewProgram and feed it with a Feed.
func New(cfg Config) *Model {
	if cfg.Context == nil {
		cfg.Context = context.Background()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Location == nil {
		cfg.Location = time.Local
	}
	if cfg.Renderer == nil {
		cfg.Renderer = lipgloss.DefaultRenderer()
	}
	return &Model{
		api: cfg.API, ctx: cfg.Context, planID: cfg.PlanID, source: cfg.Source,
		st: newStyles(cfg.Renderer), clock: cfg.Now, loc: cfg.Location, now: cfg.Now(),
		selected: cfg.PlanID,
		plansSeq: map[string]uint64{},
		inflight: map[fetchKey]bool{}, dirty: map[fetchKey]bool{}, errs: map[fetchKey]error{},
	}
}

// Init reads the plans and workers and starts the timers.
func (m *Model) Init() tea.Cmd {
	return tea.Batch(m.refreshAll(), m.tickClock(), m.tickWorkers())
}

func (m *Model) tickClock() tea.Cmd {
	return tea.Tick(clockEvery, func(t time.Time) tea.Msg { return clockMsg(t) })
}

func (m *Model) tickWorkers() tea.Cmd {
	return tea.Tick(workersEvery, func(time.Time) tea.Msg { return workersTick{} })
}

// Update applies one message.
func (m *Model) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	switch msg := msg.(type) {
	case tea.KeyMsg:
		return m, m.key(msg)
	case tea.WindowSizeMsg:
		m.width, m.height = msg.Width, msg.Height
		m.clampScroll()
		return m, nil
	case clockMsg:
		if !m.paused {
			m.now = time.Time(msg)
		}
		return m, m.tickClock()
	case workersTick:
		return m, tea.Batch(m.request(fetchKey{kind: fetchWorkers}), m.tickWorkers())
	case refetchMsg:
		if m.paused {
			m.inflight[msg.key] = false
			m.dirty[msg.key] = true
			return m, nil
		}
		return m, m.fetch(msg.key)
	case EventMsg:
		if m.paused {
			m.buffer(msg.Event)
			return m, nil
		}
		return m, m.event(msg.Event)
	case EventsMsg:
		if m.paused {
			for _, ev := range msg.Events {
				m.buffer(ev)
			}
			return m, nil
		}
		m.remember(msg.Events...)
		return m, nil
	case StreamLiveMsg:
		if m.paused {
			m.held = append(m.held, msg)
			return m, nil
		}
		m.stream = streamState{live: true}
		return m, m.refreshAll()
	case StreamDownMsg:
		if m.paused {
			m.held = append(m.held, msg)
			return m, nil
		}
		m.stream = streamState{err: msg.Err, retry: msg.Retry}
		return m, nil
	case plansMsg, planMsg, tasksMsg, workersMsg:
		if m.paused {
			m.held = append(m.held, msg)
			return m, nil
		}
		return m, m.result(msg)
	}
	return m, nil
}

// key handles a key press.
func (m *Model) key(k tea.KeyMsg) tea.Cmd {
	if k.Type == tea.KeyRunes && len(k.Runes) > 1 && !m.editing {
		if k.Paste {
			return nil // pasted text is no command
		}
		// Keys typed faster than the terminal is read come as one message: each counts.
		var cmds []tea.Cmd
		for _, r := range k.Runes {
			cmds = append(cmds, m.key(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune{r}, Alt: k.Alt}))
		}
		return tea.Batch(cmds...)
	}
	s := k.String()
	if s == "ctrl+c" {
		m.quitting = true
		return tea.Quit
	}
	if m.editing {
		switch k.Type {
		case tea.KeyEnter:
			m.editing = false
		case tea.KeyEsc:
			m.editing, m.filter = false, ""
		case tea.KeyBackspace:
			if r := []rune(m.filter); len(r) > 0 {
				m.filter = string(r[:len(r)-1])
			}
		case tea.KeySpace:
			m.filter += " "
		case tea.KeyRunes:
			m.filter += string(k.Runes)
		default:
			// Other keys (arrows, tab, function keys …) leave the filter as it is.
		}
		m.taskScroll = 0
		return nil
	}
	switch s {
	case "q":
		m.quitting = true
		return tea.Quit
	case "p", " ":
		if m.paused {
			return m.resume()
		}
		m.paused = true
		return nil
	case "/":
		m.editing = true
		return nil
	case "esc":
		m.filter = ""
		return nil
	case "r":
		return m.refreshAll()
	case "tab", "right", "down", "j":
		return m.moveSelection(1)
	case "shift+tab", "left", "up", "k":
		return m.moveSelection(-1)
	case "pgdown", "ctrl+d":
		m.taskScroll += max(m.layout().tasks-1, 1)
		m.clampScroll()
	case "pgup", "ctrl+u":
		m.taskScroll -= max(m.layout().tasks-1, 1)
		m.clampScroll()
	case "home":
		m.taskScroll = 0
	case "end":
		m.taskScroll = len(m.tasks)
		m.clampScroll()
	}
	return nil
}

// resume applies what arrived while paused: the reads first (in order), then the
// buffered events, then one read of everything they marked changed.
func (m *Model) resume() tea.Cmd {
	m.paused = false
	m.now = m.clock()
	var cmds []tea.Cmd
	held, buffered := m.held, m.buffered
	m.held, m.buffered = nil, nil
	for _, msg := range held {
		_, cmd := m.Update(msg)
		cmds = append(cmds, cmd)
	}
	m.remember(buffered...)
	for k := range m.dirty {
		if !m.inflight[k] {
			delete(m.dirty, k)
			cmds = append(cmds, m.request(k))
		}
	}
	return tea.Batch(cmds...)
}

// buffer keeps an event that arrived while paused and marks what it changed.
func (m *Model) buffer(ev client.Event) {
	m.buffered = append(m.buffered, ev)
	if len(m.buffered) > maxEvents {
		m.buffered = slices.Delete(m.buffered, 0, len(m.buffered)-maxEvents)
	}
	for _, k := range m.changedBy(ev) {
		m.dirty[k] = true
	}
}

// remember adds events to the recent ones.
func (m *Model) remember(evs ...client.Event) {
	m.events = append(m.events, evs...)
	if len(m.events) > maxEvents {
		m.events = slices.Delete(m.events, 0, len(m.events)-maxEvents)
	}
}

// event applies one live event: it is remembered, and exactly what it changed is read
// again.
func (m *Model) event(ev client.Event) tea.Cmd {
	m.remember(ev)
	var cmds []tea.Cmd
	for _, k := range m.changedBy(ev) {
		cmds = append(cmds, m.request(k))
	}
	return tea.Batch(cmds...)
}

// changedBy returns the resources an event changed, among those on screen.
func (m *Model) changedBy(ev client.Event) []fetchKey {
	if ev.PlanID == "" || (m.planID != "" && ev.PlanID != m.planID) {
		return nil
	}
	// Progress and log lines of an agent change no state.
	for _, p := range []string{"agent.", "progress.", "log."} {
		if strings.HasPrefix(ev.Type, p) {
			return nil
		}
	}
	keys := []fetchKey{{kind: fetchPlan, id: ev.PlanID}}
	if ev.PlanID == m.selected {
		keys = append(keys, fetchKey{kind: fetchTasks, id: ev.PlanID})
	}
	if w := payloadString(ev.Payload, "worker_id"); w != "" && !slices.ContainsFunc(m.workers, func(x client.Worker) bool { return x.ID == w }) {
		keys = append(keys, fetchKey{kind: fetchWorkers})
	}
	return keys
}

// refreshAll reads everything on screen again.
func (m *Model) refreshAll() tea.Cmd {
	var cmds []tea.Cmd
	if m.planID != "" {
		cmds = append(cmds, m.request(fetchKey{kind: fetchPlan, id: m.planID}))
	} else {
		cmds = append(cmds, m.request(fetchKey{kind: fetchPlans}))
	}
	if m.selected != "" {
		cmds = append(cmds, m.request(fetchKey{kind: fetchTasks, id: m.selected}))
	}
	cmds = append(cmds, m.request(fetchKey{kind: fetchWorkers}))
	return tea.Batch(cmds...)
}

// request reads k now, or once more after the read in flight (or on resume).
func (m *Model) request(k fetchKey) tea.Cmd {
	if m.paused || m.inflight[k] {
		m.dirty[k] = true
		return nil
	}
	m.inflight[k] = true
	return m.fetch(k)
}

// done ends the read of k; when k changed meanwhile, it is read again a little later.
func (m *Model) done(k fetchKey) tea.Cmd {
	m.inflight[k] = false
	if !m.dirty[k] {
		return nil
	}
	delete(m.dirty, k)
	m.inflight[k] = true
	return tea.Tick(refetchSpacing, func(time.Time) tea.Msg { return refetchMsg{key: k} })
}

// fetch returns the command that reads k.
func (m *Model) fetch(k fetchKey) tea.Cmd {
	api, ctx := m.api, m.ctx
	if api == nil {
		return nil
	}
	m.seq++
	seq := m.seq
	switch k.kind {
	case fetchPlans:
		return func() tea.Msg {
			l, err := api.ListPlans(ctx, client.PlanQuery{Limit: maxPlans})
			return plansMsg{seq: seq, plans: l.Plans, more: l.NextCursor != "", err: err}
		}
	case fetchPlan:
		return func() tea.Msg {
			p, err := api.GetPlan(ctx, k.id)
			return planMsg{seq: seq, id: k.id, plan: p, err: err}
		}
	case fetchTasks:
		return func() tea.Msg {
			ts, err := api.ListTasks(ctx, k.id)
			return tasksMsg{planID: k.id, tasks: ts, err: err}
		}
	case fetchWorkers:
		return func() tea.Msg {
			ws, err := api.ListWorkers(ctx)
			return workersMsg{workers: ws, err: err}
		}
	}
	return nil
}

// result applies what a read returned.
func (m *Model) result(msg tea.Msg) tea.Cmd {
	var k fetchKey
	var cmds []tea.Cmd
	switch msg := msg.(type) {
	case plansMsg:
		k = fetchKey{kind: fetchPlans}
		if m.fail(k, msg.err) {
			break
		}
		m.morePlans = msg.more
		seen := map[string]bool{}
		for _, p := range msg.plans {
			seen[p.ID] = true
			m.putPlan(p, msg.seq)
		}
		// Plans missing from a complete list were deleted; a partial list says nothing.
		if !msg.more {
			for _, p := range slices.Clone(m.plans) {
				if !seen[p.ID] {
					m.removePlan(p.ID, msg.seq)
				}
			}
		}
		cmds = append(cmds, m.ensureSelection())
	case planMsg:
		k = fetchKey{kind: fetchPlan, id: msg.id}
		if client.IsNotFound(msg.err) && m.planID == "" {
			delete(m.errs, k)
			m.removePlan(msg.id, msg.seq)
			cmds = append(cmds, m.ensureSelection())
			break
		}
		if m.fail(k, msg.err) {
			break
		}
		m.putPlan(msg.plan, msg.seq)
		cmds = append(cmds, m.ensureSelection())
	case tasksMsg:
		k = fetchKey{kind: fetchTasks, id: msg.planID}
		if m.fail(k, msg.err) || msg.planID != m.selected {
			break
		}
		m.tasks, m.tasksOf = orderTasks(msg.tasks), msg.planID
		m.clampScroll()
	case workersMsg:
		k = fetchKey{kind: fetchWorkers}
		if m.fail(k, msg.err) {
			break
		}
		m.workers = msg.workers
	}
	return tea.Batch(append(cmds, m.done(k))...)
}

// fail records the error of a read (or clears it) and reports whether there was one.
func (m *Model) fail(k fetchKey, err error) bool {
	if err == nil {
		delete(m.errs, k)
		return false
	}
	if m.ctx.Err() == nil {
		m.errs[k] = err
	}
	return true
}

// putPlan stores p unless newer data of that plan is already there.
func (m *Model) putPlan(p client.Plan, seq uint64) {
	if m.plansSeq[p.ID] > seq {
		return
	}
	m.plansSeq[p.ID] = seq
	if i := slices.IndexFunc(m.plans, func(x client.Plan) bool { return x.ID == p.ID }); i >= 0 {
		m.plans[i] = p
	} else {
		m.plans = append(m.plans, p)
	}
	slices.SortStableFunc(m.plans, comparePlans)
}

// removePlan drops a plan that is gone, unless data newer than seq shows it.
func (m *Model) removePlan(id string, seq uint64) {
	if m.plansSeq[id] > seq {
		return
	}
	m.plansSeq[id] = seq // a tombstone: older reads that still show the plan are ignored
	m.plans = slices.DeleteFunc(m.plans, func(p client.Plan) bool { return p.ID == id })
}

// comparePlans orders open plans (ACTIVE, PAUSED) first, then newest first.
func comparePlans(a, b client.Plan) int {
	open := func(p client.Plan) int {
		if p.Status == plan.PlanActive || p.Status == plan.PlanPaused {
			return 0
		}
		return 1
	}
	if c := cmp.Compare(open(a), open(b)); c != 0 {
		return c
	}
	if c := b.CreatedAt.Compare(a.CreatedAt); c != 0 {
		return c
	}
	return strings.Compare(a.ID, b.ID)
}

// orderTasks puts running tasks first, then failed, pending and finished ones, each
// group in plan-file order.
func orderTasks(ts []client.Task) []client.Task {
	rank := func(s plan.Status) int {
		switch s {
		case plan.StatusInProgress, plan.StatusClaimed:
			return 0
		case plan.StatusFailed:
			return 1
		case plan.StatusPending:
			return 2
		case plan.StatusDone, plan.StatusSkipped, plan.StatusCancelled:
			return 3
		}
		return 3 // a status this build does not know: with the finished ones
	}
	out := slices.Clone(ts)
	slices.SortStableFunc(out, func(a, b client.Task) int { return cmp.Compare(rank(a.Status), rank(b.Status)) })
	return out
}

// ensureSelection keeps the selection on a listed plan, and reads the tasks of a newly
// selected one.
func (m *Model) ensureSelection() tea.Cmd {
	if m.planID != "" || slices.ContainsFunc(m.plans, func(p client.Plan) bool { return p.ID == m.selected }) {
		return nil
	}
	if len(m.plans) == 0 {
		m.selected, m.tasks, m.tasksOf = "", nil, ""
		return nil
	}
	return m.selectPlan(m.plans[0].ID)
}

func (m *Model) moveSelection(d int) tea.Cmd {
	if m.planID != "" || len(m.plans) == 0 {
		return nil
	}
	i := slices.IndexFunc(m.plans, func(p client.Plan) bool { return p.ID == m.selected })
	i = (i + d + len(m.plans)) % len(m.plans)
	return m.selectPlan(m.plans[i].ID)
}

func (m *Model) selectPlan(id string) tea.Cmd {
	if id == m.selected {
		return nil
	}
	m.selected, m.tasks, m.tasksOf, m.taskScroll = id, nil, "", 0
	return m.request(fetchKey{kind: fetchTasks, id: id})
}

func (m *Model) clampScroll() {
	n := len(m.visibleTasks())
	m.taskScroll = max(min(m.taskScroll, n-m.layout().tasks), 0)
}

// payloadString returns the string field key of a JSON object payload, or "".
func payloadString(raw json.RawMessage, key string) string {
	if len(raw) == 0 {
		return ""
	}
	var obj map[string]any
	if json.Unmarshal(raw, &obj) != nil {
		return ""
	}
	s, _ := obj[key].(string)
	return s
}
