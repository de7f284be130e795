package web

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/whilly-go/whilly/plan"
	"github.com/whilly-go/whilly/queue"
)

// maxPlanTasks is how many tasks a plan page shows (a 100,000-task plan shows its first
// ones and says so).
const maxPlanTasks = plan.MaxTaskPage

// maxLiveIDs bounds the ids one live request may name.
const maxLiveIDs = 500

// planRow is a plan as the lists and the plan page show it.
type planRow struct {
	queue.PlanInfo
	Done      int    // tasks DONE or SKIPPED
	Percent   int    // of tasks finished
	SpentPct  int    // of the budget spent (0 without a cap)
	IssueURL  string // the source issue on GitHub, when it has one
	CanWrite  bool   // the session may press its buttons
	CSRF      string
	Cancelled bool
	// Digest is the plan's content digest while it awaits approval: the approve button
	// approves what the page showed.
	Digest string
}

// AwaitsApproval: the approve button applies.
func (p planRow) AwaitsApproval() bool {
	return p.Status == plan.PlanPaused && p.PauseReason == queue.PauseApproval
}

// Resumable: the resume button applies (a plan paused by an operator).
func (p planRow) Resumable() bool {
	return p.Status == plan.PlanPaused && p.PauseReason == queue.PauseOperator
}

// withDigest adds the digest to a row of a plan that awaits approval.
func (h *Handler) withDigest(r *http.Request, row *planRow) error {
	if !row.AwaitsApproval() {
		return nil
	}
	d, err := h.store.PlanDigest(r.Context(), row.ID)
	if err != nil {
		return err
	}
	row.Digest = d
	return nil
}

func (h *Handler) planRow(p queue.PlanInfo, s queue.Session) planRow {
	row := planRow{PlanInfo: p, Done: p.Counts[plan.StatusDone] + p.Counts[plan.StatusSkipped], CSRF: s.CSRF}
	if p.Total > 0 {
		row.Percent = row.Done * 100 / p.Total
	}
	if p.Budget != nil && *p.Budget > 0 {
		row.SpentPct = min(int(int64(p.Spent)*100/int64(*p.Budget)), 100)
	}
	row.IssueURL = issueURL(h.cfg.GitHubURL, p.GitHubIssueRef)
	row.CanWrite = s.Principal.CanWrite(p)
	row.Cancelled = p.Status == plan.PlanCancelled || p.Status == plan.PlanDone
	return row
}

// issueURL turns "owner/repo#N" into the issue's web address ("" when it is not one).
func issueURL(base, ref string) string {
	repo, num, ok := strings.Cut(ref, "#")
	if !ok || strings.Count(repo, "/") != 1 {
		return ""
	}
	if n, err := strconv.Atoi(num); err != nil || n <= 0 {
		return ""
	}
	if _, err := queue.ParseScope("repo:" + repo); err != nil {
		return ""
	}
	return base + "/" + repo + "/issues/" + num
}

type plansView struct {
	Fleet      queue.Fleet
	FleetAdmin bool // the session may pause and resume the fleet
	CSRF       string
	Plans      []planRow
	Next       string // cursor of the next page
	None       bool   // the session may read no plan at all
}

// plansPage lists the plans the session may read; /?plan=ID (the links of older status
// comments) goes to the plan's page.
func (h *Handler) plansPage(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if id := q.Get("plan"); id != "" {
		http.Redirect(w, r, PlanPath(id), http.StatusSeeOther) //nolint:gosec // G710: a path of this site, the id escaped
		return
	}
	s, _ := SessionFrom(r.Context())
	view := plansView{CSRF: s.CSRF}
	fl, err := h.store.GetFleet(r.Context())
	if err != nil {
		h.serverError(w, r, err)
		return
	}
	view.Fleet = fl
	if a, ok := s.Principal.Actor(); ok && s.Principal.Admin && a.Scopes.Unlimited() {
		view.FleetAdmin = true
	}
	scopes, ok := s.Principal.ReadScopes()
	if !ok {
		view.None = true
	} else {
		after := q.Get("after")
		if len(after) > 512 {
			h.fail(w, r, http.StatusBadRequest, "The after parameter is too long.")
			return
		}
		plans, next, err := h.store.ListPlans(r.Context(), queue.PlanPage{After: after, Limit: 100, Scopes: scopes})
		if err != nil {
			h.serverError(w, r, err)
			return
		}
		view.Next = next
		for _, p := range plans {
			view.Plans = append(view.Plans, h.planRow(p, s))
		}
	}
	f := h.frameFor(r, "Plans", "plans", view)
	if h.cfg.Events != nil {
		f.Stream, f.Live = "/events/stream", "/live/plans"
	}
	h.render(w, r, http.StatusOK, "plans", f)
}

// readablePlan reads plan id for the session: one it may not read is answered like one
// that does not exist.
func (h *Handler) readablePlan(w http.ResponseWriter, r *http.Request) (queue.PlanInfo, queue.Session, bool) {
	s, _ := SessionFrom(r.Context())
	id := r.PathValue("plan")
	if id == "" || len(id) > 512 {
		h.fail(w, r, http.StatusNotFound, "There is no such plan.")
		return queue.PlanInfo{}, s, false
	}
	p, err := h.store.GetPlan(r.Context(), id)
	if errors.Is(err, queue.ErrNotFound) || (err == nil && !s.Principal.CanRead(p)) {
		h.fail(w, r, http.StatusNotFound, fmt.Sprintf("There is no plan %q, or it is not yours to see.", id))
		return queue.PlanInfo{}, s, false
	}
	if err != nil {
		h.serverError(w, r, err)
		return queue.PlanInfo{}, s, false
	}
	return p, s, true
}

// taskRow is a task as the plan page shows it.
type taskRow struct {
	queue.TaskInfo
	Depth    int // its place in the dependency graph: the longest chain of dependencies above it
	CanWrite bool
	CSRF     string
}

// Retryable: the retry button applies (queue.RetryTasks takes FAILED and CANCELLED tasks).
func (t taskRow) Retryable() bool {
	return t.Status == plan.StatusFailed || t.Status == plan.StatusCancelled
}

type planView struct {
	Plan  planRow
	Tasks []taskRow
	More  int // tasks not shown
	Pull  *queue.PullRequest
}

func (h *Handler) planPage(w http.ResponseWriter, r *http.Request) {
	p, s, ok := h.readablePlan(w, r)
	if !ok {
		return
	}
	view, err := h.planView(r, p, s)
	if err != nil {
		h.serverError(w, r, err)
		return
	}
	f := h.frameFor(r, p.ID, "plans", view)
	if h.cfg.Events != nil {
		f.Stream = "/events/stream?plan_id=" + url.QueryEscape(p.ID)
		f.Live = PlanPath(p.ID) + "/live"
	}
	h.render(w, r, http.StatusOK, "plan", f)
}

func (h *Handler) planView(r *http.Request, p queue.PlanInfo, s queue.Session) (planView, error) {
	tasks, _, err := h.store.TaskPageOf(r.Context(), p.ID, queue.TaskPage{Limit: maxPlanTasks})
	if err != nil {
		return planView{}, err
	}
	view := planView{Plan: h.planRow(p, s), More: max(p.Total-len(tasks), 0)}
	if err := h.withDigest(r, &view.Plan); err != nil {
		return planView{}, err
	}
	depth := depths(tasks)
	for _, t := range tasks {
		view.Tasks = append(view.Tasks, taskRow{TaskInfo: t, Depth: depth[t.ID], CanWrite: view.Plan.CanWrite, CSRF: s.CSRF})
	}
	m, err := h.store.GetMirrorState(r.Context(), p.ID)
	switch {
	case err == nil:
		view.Pull = m.Pull
	case !errors.Is(err, queue.ErrNotFound):
		return planView{}, err
	}
	return view, nil
}

// depths gives each task the length of the longest chain of dependencies above it, so
// the page draws the graph as an indented outline. Plans are acyclic (plan.Validate);
// a dependency not among tasks counts as a root.
func depths(tasks []queue.TaskInfo) map[string]int {
	deps := make(map[string][]string, len(tasks))
	for _, t := range tasks {
		deps[t.ID] = t.Dependencies
	}
	out := make(map[string]int, len(tasks))
	const visiting = -1
	var walk func(id string) int
	walk = func(id string) int {
		if d, ok := out[id]; ok {
			return max(d, 0) // a cycle (never stored) ends the walk
		}
		out[id] = visiting
		d := 0
		for _, dep := range deps[id] {
			if _, known := deps[dep]; known {
				d = max(d, walk(dep)+1)
			}
		}
		out[id] = d
		return d
	}
	for _, t := range tasks {
		walk(t.ID)
	}
	return out
}

// liveAnswer is what a page's script fetches after events: fresh HTML of what changed.
type liveAnswer struct {
	Summary string            `json:"summary,omitempty"`
	Rows    map[string]string `json:"rows"`
}

// planLive renders the plan's summary and the rows of the tasks named (?task=ID…).
func (h *Handler) planLive(w http.ResponseWriter, r *http.Request) {
	p, s, ok := h.readablePlan(w, r)
	if !ok {
		return
	}
	ids := r.URL.Query()["task"]
	if len(ids) > maxLiveIDs {
		ids = ids[:maxLiveIDs]
	}
	out := liveAnswer{Rows: map[string]string{}}
	row := h.planRow(p, s)
	if err := h.withDigest(r, &row); err != nil {
		h.serverError(w, r, err)
		return
	}
	var err error
	if out.Summary, err = h.fragment("plansummary", row); err != nil {
		h.serverError(w, r, err)
		return
	}
	if len(ids) > 0 {
		tasks, err := h.store.TasksByID(r.Context(), p.ID, ids)
		if err != nil {
			h.serverError(w, r, err)
			return
		}
		for _, t := range tasks {
			html, err := h.fragment("taskrow", taskRow{TaskInfo: t, Depth: -1, CanWrite: row.CanWrite, CSRF: s.CSRF})
			if err != nil {
				h.serverError(w, r, err)
				return
			}
			out.Rows[t.ID] = html
		}
	}
	writeJSON(w, out)
}

// plansLive renders the list rows of the plans named (?plan=ID…) that the session may read.
func (h *Handler) plansLive(w http.ResponseWriter, r *http.Request) {
	s, _ := SessionFrom(r.Context())
	out := liveAnswer{Rows: map[string]string{}}
	ids := r.URL.Query()["plan"]
	if len(ids) > maxLiveIDs {
		ids = ids[:maxLiveIDs]
	}
	scopes, ok := s.Principal.ReadScopes()
	if ok && len(ids) > 0 {
		plans, err := h.store.PlansByID(r.Context(), ids, scopes)
		if err != nil {
			h.serverError(w, r, err)
			return
		}
		for _, p := range plans {
			if !s.Principal.CanRead(p) {
				continue
			}
			html, err := h.fragment("planrow", h.planRow(p, s))
			if err != nil {
				h.serverError(w, r, err)
				return
			}
			out.Rows[p.ID] = html
		}
	}
	writeJSON(w, out)
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v) // the client went away: nothing to do
}

type workerRow struct {
	queue.Worker
	Tasks []queue.WorkerTask
}

type workersView struct{ Workers []workerRow }

// workersPage lists the workers the session may see: all for an unscoped session, those
// confined to its own scopes for a scoped one (as GET /v1/workers).
func (h *Handler) workersPage(w http.ResponseWriter, r *http.Request) {
	s, _ := SessionFrom(r.Context())
	view := workersView{}
	if scopes, ok := s.Principal.ReadScopes(); ok {
		ws, err := h.store.ListWorkers(r.Context())
		if err != nil {
			h.serverError(w, r, err)
			return
		}
		held, err := h.store.WorkerTasks(r.Context())
		if err != nil {
			h.serverError(w, r, err)
			return
		}
		for _, wk := range ws {
			if scopes.Within(wk.Scopes) {
				view.Workers = append(view.Workers, workerRow{Worker: wk, Tasks: held[wk.ID]})
			}
		}
	}
	h.render(w, r, http.StatusOK, "workers", h.frameFor(r, "Workers", "workers", view))
}

type eventRow struct {
	queue.Event
	Payload string
}

type eventsView struct {
	Filter queue.RecentFilter
	Events []eventRow
	Older  string // the link to older events ("" at the end)
}

// eventsPage shows the event log newest first, filtered by plan, task and type.
func (h *Handler) eventsPage(w http.ResponseWriter, r *http.Request) {
	s, _ := SessionFrom(r.Context())
	q := r.URL.Query()
	f := queue.RecentFilter{PlanID: q.Get("plan"), TaskID: q.Get("task"), Type: q.Get("type"), Limit: 100}
	if len(f.PlanID) > 512 || len(f.TaskID) > 512 || len(f.Type) > 100 {
		h.fail(w, r, http.StatusBadRequest, "A filter is too long.")
		return
	}
	if v := q.Get("before"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			h.fail(w, r, http.StatusBadRequest, "The before parameter must be an event id.")
			return
		}
		f.Before = n
	}
	view := eventsView{Filter: f}
	if scopes, ok := s.Principal.ReadScopes(); ok {
		f.Scopes = scopes
		evs, err := h.store.RecentEvents(r.Context(), f)
		if err != nil {
			h.serverError(w, r, err)
			return
		}
		for _, e := range evs {
			view.Events = append(view.Events, eventRow{Event: e, Payload: string(e.Payload)})
		}
		if len(evs) == f.Limit {
			q.Set("before", strconv.FormatInt(evs[len(evs)-1].ID, 10))
			view.Older = "/events?" + q.Encode()
		}
	}
	fr := h.frameFor(r, "Events", "events", view)
	if h.cfg.Events != nil && f.Before == 0 {
		fr.Stream = "/events/stream"
		if f.PlanID != "" {
			fr.Stream += "?plan_id=" + url.QueryEscape(f.PlanID)
		}
	}
	h.render(w, r, http.StatusOK, "events", fr)
}

// stream serves the event stream limited to what the session may read.
func (h *Handler) stream(w http.ResponseWriter, r *http.Request) {
	s, _ := SessionFrom(r.Context())
	scopes, ok := s.Principal.ReadScopes()
	if h.cfg.Events == nil || !ok {
		w.WriteHeader(http.StatusNoContent) // EventSource stops reconnecting on 204
		return
	}
	h.cfg.Events(w, r, scopes)
}
