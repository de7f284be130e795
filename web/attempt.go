package web

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/whilly-go/whilly/plan"
	"github.com/whilly-go/whilly/queue"
)

// AttemptLogFunc answers a read of an attempt's log (JSON, long-polling with ?after= and
// ?wait=) limited to scopes, the control plane's one implementation of it
// (control.Server.AttemptLog): the dashboard authenticates the session, it does the rest.
type AttemptLogFunc func(w http.ResponseWriter, r *http.Request, scopes queue.Scopes, planID, taskID, attempt string)

// attemptView is an attempt's page: the task, the attempt and what is kept of its log.
type attemptView struct {
	PlanID   string
	TaskID   string
	Attempt  int
	Attempts []int // every attempt of the task, for links
	Status   plan.Status
	Running  bool
	Text     string
	Offset   int64 // bytes before Text no longer kept
	Next     int64 // where the page follows from
	Follow   string
}

// attemptPage shows attempt n of a task: its agent log, followed live by attempt.js while
// the attempt runs. The text goes through html/template: whatever the agent printed is
// shown, never run.
func (h *Handler) attemptPage(w http.ResponseWriter, r *http.Request) {
	p, _, ok := h.readablePlan(w, r)
	if !ok {
		return
	}
	taskID := r.PathValue("task")
	n, err := strconv.Atoi(r.PathValue("n"))
	if err != nil || n < 1 || len(taskID) > 512 {
		h.fail(w, r, http.StatusNotFound, "There is no such attempt: attempts are numbered from 1.")
		return
	}
	lg, err := h.store.ReadAttemptLog(r.Context(), p.ID, taskID, n, 0)
	if errors.Is(err, queue.ErrNotFound) {
		h.fail(w, r, http.StatusNotFound, fmt.Sprintf("Task %q of plan %q has no attempt %d.", taskID, p.ID, n))
		return
	}
	if err != nil {
		h.serverError(w, r, err)
		return
	}
	tasks, err := h.store.TasksByID(r.Context(), p.ID, []string{taskID})
	if err != nil {
		h.serverError(w, r, err)
		return
	}
	view := attemptView{PlanID: p.ID, TaskID: taskID, Attempt: n, Status: lg.Status, Running: lg.Running,
		Text: strings.ToValidUTF8(string(lg.Data), "\uFFFD"), Offset: lg.Offset, Next: lg.Size}
	if len(tasks) == 1 {
		for i := range max(tasks[0].Attempts, n) {
			view.Attempts = append(view.Attempts, i+1)
		}
	}
	if h.cfg.AttemptLog != nil {
		view.Follow = AttemptPath(p.ID, taskID, n) + "/log"
	}
	h.render(w, r, http.StatusOK, "attempt", h.frameFor(r, fmt.Sprintf("%s attempt %d", taskID, n), "plans", view))
}

// attemptLog is the page's feed: the log from ?after= on, waiting for more while the
// attempt runs, as the API answers it, for the plans the session may read.
func (h *Handler) attemptLog(w http.ResponseWriter, r *http.Request) {
	p, s, ok := h.readablePlan(w, r)
	if !ok {
		return
	}
	scopes, ok := s.Principal.ReadScopes()
	if h.cfg.AttemptLog == nil || !ok {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	h.cfg.AttemptLog(w, r, scopes, p.ID, r.PathValue("task"), r.PathValue("n"))
}
