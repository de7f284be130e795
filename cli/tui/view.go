package tui

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/charmbracelet/lipgloss"
	"github.com/charmbracelet/x/ansi"

	"github.com/whilly-go/whilly/control/client"
	"github.com/whilly-go/whilly/internal/termsafe"
	"github.com/whilly-go/whilly/plan"
)

// styles are the dashboard's colours, made by one renderer (Ascii turns them off).
type styles struct {
	r                         *lipgloss.Renderer
	bold, dim, head, sel, key lipgloss.Style
	red, green, yellow, cyan  lipgloss.Style
	magenta, grey             lipgloss.Style
}

func newStyles(r *lipgloss.Renderer) styles {
	fg := func(c string) lipgloss.Style { return r.NewStyle().Foreground(lipgloss.Color(c)) }
	return styles{
		r:    r,
		bold: r.NewStyle().Bold(true),
		dim:  r.NewStyle().Faint(true),
		head: r.NewStyle().Bold(true).Underline(true),
		sel:  r.NewStyle().Bold(true).Reverse(true),
		key:  fg("6").Bold(true),
		red:  fg("1"), green: fg("2"), yellow: fg("3"), cyan: fg("6"), magenta: fg("5"), grey: fg("8"),
	}
}

func (s styles) task(st plan.Status) lipgloss.Style {
	switch st {
	case plan.StatusPending:
		return s.grey
	case plan.StatusClaimed:
		return s.cyan
	case plan.StatusInProgress:
		return s.yellow.Bold(true)
	case plan.StatusDone:
		return s.green
	case plan.StatusFailed:
		return s.red.Bold(true)
	case plan.StatusSkipped:
		return s.dim
	case plan.StatusCancelled:
		return s.magenta
	}
	return s.r.NewStyle()
}

func (s styles) plan(st plan.PlanStatus) lipgloss.Style {
	switch st {
	case plan.PlanActive:
		return s.cyan
	case plan.PlanPaused:
		return s.yellow.Bold(true)
	case plan.PlanDone:
		return s.green
	case plan.PlanFailed:
		return s.red.Bold(true)
	case plan.PlanCancelled:
		return s.magenta
	}
	return s.r.NewStyle()
}

func (s styles) event(typ string) lipgloss.Style {
	switch {
	case typ == "COMPLETE" || typ == "plan.done":
		return s.green
	case typ == "FAIL" || typ == "plan.failed" || typ == "plan.budget_exceeded" || strings.HasSuffix(typ, "blocked"):
		return s.red
	case typ == "RETRY" || typ == "RELEASE" || typ == "CANCEL" || typ == "plan.cancelled":
		return s.yellow
	case typ == "CLAIM" || typ == "START":
		return s.cyan
	case strings.HasPrefix(typ, "plan.") || strings.HasPrefix(typ, "task."):
		return s.magenta
	}
	return s.dim
}

// cell fits text into w columns: cut with an ellipsis, or padded with spaces.
func cell(text string, w int) string {
	if w <= 0 {
		return ""
	}
	text = strings.NewReplacer("\n", " ", "\t", " ").Replace(termsafe.Text(text))
	if ansi.StringWidth(text) > w {
		text = ansi.Truncate(text, w, "…")
	}
	return text + strings.Repeat(" ", w-ansi.StringWidth(text))
}

// widest returns the width of the longest text, within [lo, hi].
func widest(lo, hi int, texts ...string) int {
	w := lo
	for _, t := range texts {
		w = max(w, ansi.StringWidth(t))
	}
	return min(w, hi)
}

// rows is how many data rows each section shows.
type rows struct{ plans, tasks, workers, events int }

// chrome is the number of lines that are not data rows: header, blank, and per section
// a title, a column header (not for events) and a blank, then the footer.
const chrome = 14

// layout shares the terminal's height between the sections: plans and workers get a
// few rows, events some, tasks the rest; rows the tasks do not need go to the events.
func (m *Model) layout() rows {
	nP := max(len(m.plans), 1)
	nT := max(len(m.visibleTasks()), 1)
	nW := max(len(m.shownWorkers()), 1)
	nE := max(len(m.visibleEvents()), 1)
	if m.height <= 0 {
		return rows{plans: nP, tasks: nT, workers: nW, events: min(nE, 10)}
	}
	r := rows{plans: min(nP, planRowsMax), workers: min(nW, workerRowsMax), events: min(nE, eventRowsWanted)}
	avail := m.height - chrome
	r.tasks = avail - r.plans - r.workers - r.events
	// On a short terminal the tasks keep half the rows (at least 3), taken from the
	// events first, then the workers, then the plans.
	want := min(nT, max(3, avail/2))
	for _, n := range []*int{&r.events, &r.workers, &r.plans} {
		for r.tasks < want && *n > 1 {
			*n--
			r.tasks++
		}
	}
	if spare := r.tasks - nT; spare > 0 {
		r.tasks = nT
		grow := func(n *int, want int) {
			add := max(min(spare, want-*n), 0)
			*n += add
			spare -= add
		}
		grow(&r.events, nE)
		grow(&r.workers, nW)
		grow(&r.plans, nP)
	}
	r.tasks = max(r.tasks, 1)
	return r
}

func (m *Model) match(texts ...string) bool {
	if m.filter == "" {
		return true
	}
	f := strings.ToLower(m.filter)
	for _, t := range texts {
		if strings.Contains(strings.ToLower(t), f) {
			return true
		}
	}
	return false
}

// visibleTasks is the selected plan's tasks that match the filter.
func (m *Model) visibleTasks() []client.Task {
	var out []client.Task
	for _, t := range m.tasks {
		if m.match(t.ID, string(t.Status), t.ClaimedBy, t.Description, t.LastError) {
			out = append(out, t)
		}
	}
	return out
}

// visibleEvents is the recent events that match the filter, newest first.
func (m *Model) visibleEvents() []client.Event {
	var out []client.Event
	for i := len(m.events) - 1; i >= 0; i-- {
		e := m.events[i]
		if m.match(e.Type, e.PlanID, e.TaskID, string(e.Payload)) {
			out = append(out, e)
		}
	}
	return out
}

// shownWorkers is the workers that are not revoked, online first, freshest first.
func (m *Model) shownWorkers() []client.Worker {
	var out []client.Worker
	for _, w := range m.workers {
		if w.Status != "revoked" && w.RevokedAt == nil {
			out = append(out, w)
		}
	}
	slices.SortStableFunc(out, func(a, b client.Worker) int {
		if (a.Status == "online") != (b.Status == "online") {
			if a.Status == "online" {
				return -1
			}
			return 1
		}
		return beat(b).Compare(beat(a))
	})
	return out
}

func beat(w client.Worker) time.Time {
	if w.LastHeartbeat == nil {
		return w.RegisteredAt
	}
	return *w.LastHeartbeat
}

// View renders the dashboard, cut to the terminal's size.
func (m *Model) View() string {
	if m.quitting {
		return ""
	}
	width := m.width
	if width <= 0 {
		width = defaultWidth
	}
	r := m.layout()
	lines := []string{m.header(), ""}
	lines = append(lines, m.plansSection(width, r.plans)...)
	lines = append(lines, "")
	lines = append(lines, m.tasksSection(width, r.tasks)...)
	lines = append(lines, "")
	lines = append(lines, m.workersSection(width, r.workers)...)
	lines = append(lines, "")
	lines = append(lines, m.eventsSection(width, r.events)...)
	if m.height > 0 {
		// The key help stays on the last line whatever the sections need.
		for len(lines) < m.height-1 {
			lines = append(lines, "")
		}
		lines = lines[:max(m.height-1, 0)]
	}
	lines = append(lines, m.footer())
	for i, l := range lines {
		lines[i] = ansi.Truncate(l, width, "")
	}
	return strings.Join(lines, "\n")
}

func (m *Model) header() string {
	s := m.st
	parts := []string{s.bold.Render("whilly dashboard")}
	if m.source != "" {
		parts = append(parts, m.source)
	}
	switch {
	case m.paused:
		parts = append(parts, s.yellow.Bold(true).Render("⏸ PAUSED")+" (events are buffered; p resumes)")
		return strings.Join(parts, " · ")
	case m.stream.err != nil:
		parts = append(parts, s.red.Render(fmt.Sprintf("✗ stream down, retrying in %s: %s", m.stream.retry.Round(time.Second), termsafe.Line(m.stream.err.Error()))))
	case m.stream.live:
		parts = append(parts, s.green.Render("● live"))
	default:
		parts = append(parts, s.dim.Render("○ connecting"))
	}
	parts = append(parts, m.now.In(m.loc).Format("15:04:05"))
	return strings.Join(parts, " · ")
}

func (m *Model) footer() string {
	s := m.st
	if m.editing {
		return s.key.Render("filter: ") + m.filter + "▏  " + s.dim.Render("(enter keeps it, esc clears)")
	}
	keys := [][2]string{{"q", "quit"}, {"p", "pause"}, {"/", "filter"}, {"tab ←→", "plan"}, {"PgUp/PgDn", "tasks"}, {"r", "refresh"}}
	if m.planID != "" {
		keys = slices.Delete(keys, 3, 4)
	}
	var help []string
	for _, k := range keys {
		help = append(help, s.key.Render(k[0])+" "+k[1])
	}
	out := strings.Join(help, " · ")
	if m.filter != "" {
		out = s.yellow.Render(fmt.Sprintf("filter %q (esc clears)", m.filter)) + " · " + out
	}
	if err := m.firstError(); err != "" {
		out = s.red.Render("✗ "+termsafe.Line(err)) + " · " + out
	}
	return out
}

// firstError is one of the errors of the last reads, the same one from frame to frame.
func (m *Model) firstError() string {
	var msgs []string
	for _, err := range m.errs {
		msgs = append(msgs, err.Error())
	}
	if len(msgs) == 0 {
		return ""
	}
	slices.Sort(msgs)
	return msgs[0]
}

func (m *Model) plansSection(width, n int) []string {
	s := m.st
	title := fmt.Sprintf("PLANS (%d)", len(m.plans))
	if m.planID != "" {
		title = "PLAN"
	}
	if m.morePlans {
		title = fmt.Sprintf("PLANS (the first %d)", len(m.plans))
	}
	ids := make([]string, len(m.plans))
	for i, p := range m.plans {
		ids[i] = p.ID
	}
	idW := widest(4, 24, ids...)
	const statusW, barW, countW, budgetW = 9, 20, 9, 22
	fixed := 2 + idW + 1 + statusW + 1 + barW + 6 + countW + 1 + 5 + 5 + budgetW + 1
	nameW := max(width-fixed, 4)
	out := []string{
		s.bold.Render(title),
		s.head.Render("  " + cell("PLAN", idW) + " " + cell("STATUS", statusW) + " " + cell("PROGRESS", barW+5) + " " +
			cell("DONE", countW) + " " + cell(" RUN", 5) + cell("FAIL", 5) + cell("BUDGET spent / cap", budgetW) + " " + cell("NAME", nameW)),
	}
	if len(m.plans) == 0 {
		return append(out, s.dim.Render("  no plans yet: import one with 'whilly plan import FILE'"))
	}
	sel := max(slices.IndexFunc(m.plans, func(p client.Plan) bool { return p.ID == m.selected }), 0)
	first := max(min(sel-n/2, len(m.plans)-n), 0)
	for i := first; i < min(first+n, len(m.plans)); i++ {
		p := m.plans[i]
		mark, id := "  ", cell(p.ID, idW)
		if p.ID == m.selected && m.planID == "" {
			mark, id = s.key.Render("▸ "), s.sel.Render(id)
		}
		done := p.Counts[plan.StatusDone] + p.Counts[plan.StatusSkipped]
		running := p.Counts[plan.StatusClaimed] + p.Counts[plan.StatusInProgress]
		failed := p.Counts[plan.StatusFailed]
		pct := 0
		if p.Total > 0 {
			pct = done * 100 / p.Total
		}
		status := string(p.Status)
		if p.Status == plan.PlanPaused && p.PauseReason != "" {
			status += "*"
		}
		out = append(out, mark+id+" "+s.plan(p.Status).Render(cell(status, statusW))+" "+
			m.bar(p, barW)+fmt.Sprintf(" %3d%%", pct)+" "+
			cell(fmt.Sprintf("%d/%d", done, p.Total), countW)+" "+
			cell(fmt.Sprintf("%4d", running), 5)+m.failCell(failed)+
			m.budget(p, budgetW)+" "+cell(p.Name, nameW))
	}
	return out
}

func (m *Model) failCell(n int) string {
	c := cell(fmt.Sprintf("%4d", n), 5)
	if n > 0 {
		return m.st.red.Render(c)
	}
	return c
}

// bar draws a plan's progress: done and skipped green, failed red, cancelled grey.
func (m *Model) bar(p client.Plan, w int) string {
	if p.Total <= 0 {
		return m.st.dim.Render(strings.Repeat("░", w))
	}
	cells := func(n int) int { return n * w / p.Total }
	done := cells(p.Counts[plan.StatusDone] + p.Counts[plan.StatusSkipped])
	failed := cells(p.Counts[plan.StatusFailed])
	cancelled := cells(p.Counts[plan.StatusCancelled])
	rest := max(w-done-failed-cancelled, 0)
	return m.st.green.Render(strings.Repeat("█", done)) + m.st.red.Render(strings.Repeat("█", failed)) +
		m.st.grey.Render(strings.Repeat("█", cancelled)) + m.st.dim.Render(strings.Repeat("░", rest))
}

// budget shows spent / cap: red when the cap is reached, yellow from 80 %.
func (m *Model) budget(p client.Plan, w int) string {
	if p.BudgetUSD == nil {
		return cell("$"+p.SpentUSD.String()+" / unlimited", w)
	}
	c := cell("$"+p.SpentUSD.String()+" / $"+p.BudgetUSD.String(), w)
	switch {
	case plan.Exhausted(p.BudgetUSD, p.SpentUSD):
		return m.st.red.Bold(true).Render(c)
	case *p.BudgetUSD > 0 && p.SpentUSD*5 >= *p.BudgetUSD*4:
		return m.st.yellow.Render(c)
	}
	return c
}

func (m *Model) tasksSection(width, n int) []string {
	s := m.st
	vis := m.visibleTasks()
	title := "TASKS"
	if m.selected != "" {
		title += " of " + termsafe.Line(m.selected)
	}
	switch {
	case m.selected == "":
	case m.tasksOf != m.selected:
	case m.filter != "":
		title += fmt.Sprintf(" · %d of %d match %q", len(vis), len(m.tasks), m.filter)
	default:
		title += fmt.Sprintf(" · %d", len(m.tasks))
	}
	if len(vis) > n {
		title += fmt.Sprintf(" · rows %d–%d (PgUp/PgDn)", m.taskScroll+1, min(m.taskScroll+n, len(vis)))
	}
	ids := make([]string, len(vis))
	workers := make([]string, len(vis))
	for i, t := range vis {
		ids[i], workers[i] = t.ID, t.ClaimedBy
	}
	idW := widest(4, 28, ids...)
	const statusW, attW, costW, updW = 11, 8, 10, 9
	workerW := widest(6, 20, workers...)
	noteW := max(width-(2+idW+1+statusW+1+attW+1+costW+1+workerW+1+updW+1), 4)
	out := []string{
		s.bold.Render(title),
		s.head.Render("  " + cell("TASK", idW) + " " + cell("STATUS", statusW) + " " + cell("ATTEMPTS", attW) + " " +
			cell("COST", costW) + " " + cell("WORKER", workerW) + " " + cell("UPDATED", updW) + " " + cell("DESCRIPTION / LAST ERROR", noteW)),
	}
	switch {
	case m.selected == "":
		return append(out, s.dim.Render("  no plan selected"))
	case m.tasksOf != m.selected && m.paused:
		return append(out, s.dim.Render("  the tasks load when the view resumes (p)"))
	case m.tasksOf != m.selected:
		return append(out, s.dim.Render("  loading…"))
	case len(vis) == 0 && m.filter != "":
		return append(out, s.dim.Render(fmt.Sprintf("  no task matches %q", m.filter)))
	case len(vis) == 0:
		return append(out, s.dim.Render("  the plan has no tasks"))
	}
	start := max(min(m.taskScroll, len(vis)-n), 0)
	for _, t := range vis[start:min(start+n, len(vis))] {
		note := firstLine(t.Description)
		noteStyle := s.r.NewStyle()
		if t.LastError != "" && t.Status != plan.StatusDone {
			note, noteStyle = firstLine(t.LastError), s.red
		}
		out = append(out, "  "+cell(t.ID, idW)+" "+s.task(t.Status).Render(cell(string(t.Status), statusW))+" "+
			cell(fmt.Sprintf("%d/%d", t.Attempts, t.MaxAttempts), attW)+" "+cell("$"+t.CostUSD.String(), costW)+" "+
			cell(dash(t.ClaimedBy), workerW)+" "+cell(m.ago(t.UpdatedAt), updW)+" "+noteStyle.Render(cell(note, noteW)))
	}
	return out
}

func (m *Model) workersSection(width, n int) []string {
	s := m.st
	shown := m.shownWorkers()
	var online, offline int
	for _, w := range shown {
		if w.Status == "online" {
			online++
		} else {
			offline++
		}
	}
	title := fmt.Sprintf("WORKERS · %d online · %d offline", online, offline)
	if hidden := len(m.workers) - len(shown); hidden > 0 {
		title += fmt.Sprintf(" · %d revoked (hidden)", hidden)
	}
	// What each worker holds, as far as the selected plan's tasks tell.
	holds := map[string]string{}
	for _, t := range m.tasks {
		if t.ClaimedBy != "" && (t.Status == plan.StatusClaimed || t.Status == plan.StatusInProgress) {
			holds[t.ClaimedBy] = t.ID
		}
	}
	ids := make([]string, len(shown))
	for i, w := range shown {
		ids[i] = w.ID
	}
	idW := widest(6, 24, ids...)
	const hostW, statusW, beatW, taskW = 20, 8, 15, 16
	labelW := max(width-(2+idW+1+hostW+1+statusW+1+beatW+1+taskW+1), 4)
	out := []string{
		s.bold.Render(title),
		s.head.Render("  " + cell("WORKER", idW) + " " + cell("HOST", hostW) + " " + cell("STATUS", statusW) + " " +
			cell("LAST HEARTBEAT", beatW) + " " + cell("TASK", taskW) + " " + cell("LABELS", labelW)),
	}
	if len(shown) == 0 {
		return append(out, s.dim.Render("  no workers: start one with 'whilly-worker' or run a plan with 'whilly run'"))
	}
	for _, w := range shown[:min(n, len(shown))] {
		st := s.green
		if w.Status != "online" {
			st = s.grey
		}
		hb := "never"
		if w.LastHeartbeat != nil {
			hb = m.ago(*w.LastHeartbeat)
		}
		out = append(out, "  "+cell(w.ID, idW)+" "+cell(w.Hostname, hostW)+" "+st.Render(cell(w.Status, statusW))+" "+
			cell(hb, beatW)+" "+cell(dash(holds[w.ID]), taskW)+" "+cell(strings.Join(w.Labels, ","), labelW))
	}
	if len(shown) > n {
		out[len(out)-1] = "  " + s.dim.Render(fmt.Sprintf("… and %d more", len(shown)-n+1))
	}
	return out
}

func (m *Model) eventsSection(width, n int) []string {
	s := m.st
	vis := m.visibleEvents()
	title := "EVENTS · newest first"
	if m.filter != "" {
		title += fmt.Sprintf(" · matching %q", m.filter)
	}
	out := []string{s.bold.Render(title)}
	if len(vis) == 0 {
		if m.filter != "" {
			return append(out, s.dim.Render(fmt.Sprintf("  no event matches %q", m.filter)))
		}
		return append(out, s.dim.Render("  waiting for events…"))
	}
	plans := make([]string, 0, n)
	tasks := make([]string, 0, n)
	for _, e := range vis[:min(n, len(vis))] {
		plans, tasks = append(plans, e.PlanID), append(tasks, e.TaskID)
	}
	planW, taskW := widest(4, 20, plans...), widest(4, 24, tasks...)
	const timeW, typeW = 8, 14
	sumW := max(width-(2+timeW+1+planW+1+taskW+1+typeW+1), 4)
	for _, e := range vis[:min(n, len(vis))] {
		out = append(out, "  "+s.dim.Render(cell(e.CreatedAt.In(m.loc).Format("15:04:05"), timeW))+" "+cell(e.PlanID, planW)+" "+
			cell(dash(e.TaskID), taskW)+" "+s.event(e.Type).Render(cell(e.Type, typeW))+" "+cell(summary(e.Payload), sumW))
	}
	return out
}

// summary renders an event's payload as "key=value" pairs, the telling keys first.
func summary(raw json.RawMessage) string {
	if len(raw) == 0 || string(raw) == "null" {
		return ""
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var obj map[string]any
	if dec.Decode(&obj) != nil {
		return string(raw)
	}
	first := []string{"worker_id", "attempt", "cost_usd", "reason", "to", "from", "status"}
	keys := make([]string, 0, len(obj))
	for k := range obj {
		if k != "lease_expires_at" && k != "lease_id" {
			keys = append(keys, k)
		}
	}
	rank := func(k string) int {
		if i := slices.Index(first, k); i >= 0 {
			return i
		}
		return len(first)
	}
	slices.SortFunc(keys, func(a, b string) int {
		if c := rank(a) - rank(b); c != 0 {
			return c
		}
		return strings.Compare(a, b)
	})
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		var v string
		switch x := obj[k].(type) {
		case string:
			v = x
		case json.Number:
			v = x.String()
		case nil:
			continue
		default:
			b, _ := json.Marshal(x)
			v = string(b)
		}
		parts = append(parts, k+"="+v)
	}
	return strings.Join(parts, " ")
}

// ago says how long ago t was, for the model's clock.
func (m *Model) ago(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	d := m.now.Sub(t)
	switch {
	case d < time.Second:
		return "just now"
	case d < time.Minute:
		return fmt.Sprintf("%ds ago", int(d/time.Second))
	case d < time.Hour:
		return fmt.Sprintf("%dm ago", int(d/time.Minute))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh ago", int(d/time.Hour))
	}
	return t.In(m.loc).Format("2006-01-02")
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	return s
}
