package web

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/whilly-go/whilly/plan"
	"github.com/whilly-go/whilly/queue"
)

// The buttons. Each calls the queue function the CLI, the API and the comment commands
// call, with the session's principal as the events' "by", then goes back to the page.

// writablePlan reads the plan of a button's post: 404 when the session may not read it,
// 403 when it may read but not change it.
func (h *Handler) writablePlan(w http.ResponseWriter, r *http.Request) (queue.PlanInfo, queue.Session, bool) {
	p, s, ok := h.readablePlan(w, r)
	if !ok {
		return p, s, false
	}
	if !s.Principal.CanWrite(p) {
		h.fail(w, r, http.StatusForbidden, "Only an admin, or a user with write access to the plan's repository, may change this plan.")
		return p, s, false
	}
	return p, s, true
}

// actionError answers a refusal of the queue in one sentence (4xx), anything else 500.
func (h *Handler) actionError(w http.ResponseWriter, r *http.Request, err error) {
	switch {
	case errors.Is(err, queue.ErrNotFound):
		h.fail(w, r, http.StatusNotFound, sentence(err))
	case errors.Is(err, queue.ErrConflict):
		h.fail(w, r, http.StatusConflict, sentence(err))
	case errors.Is(err, queue.ErrInvalid):
		h.fail(w, r, http.StatusBadRequest, sentence(err))
	default:
		h.serverError(w, r, err)
	}
}

// sentence makes a wrapped queue error a sentence without its sentinel's words.
func sentence(err error) string {
	msg := err.Error()
	for _, s := range []error{queue.ErrNotFound, queue.ErrConflict, queue.ErrInvalid} {
		msg = strings.TrimSuffix(msg, ": "+s.Error())
	}
	if msg == "" {
		return "That cannot be done."
	}
	return strings.ToUpper(msg[:1]) + msg[1:] + "."
}

func (h *Handler) cancelPlan(w http.ResponseWriter, r *http.Request) {
	p, s, ok := h.writablePlan(w, r)
	if !ok {
		return
	}
	by := s.Principal.By()
	n, err := h.store.CancelPlan(r.Context(), p.ID, "cancelled from the dashboard by "+by, by)
	if err != nil {
		h.actionError(w, r, err)
		return
	}
	h.log.InfoContext(r.Context(), "plan cancelled", "plan_id", p.ID, "tasks", n, "by", by)
	http.Redirect(w, r, PlanPath(p.ID), http.StatusSeeOther)
}

func (h *Handler) setBudget(w http.ResponseWriter, r *http.Request) {
	p, s, ok := h.writablePlan(w, r)
	if !ok {
		return
	}
	raw := strings.TrimPrefix(strings.TrimSpace(r.PostForm.Get("budget_usd")), "$")
	u, err := plan.ParseUSD(raw)
	if err != nil || u <= 0 {
		h.fail(w, r, http.StatusBadRequest, fmt.Sprintf("The budget must be an amount in USD above 0, such as 10 or 2.50; %q is not.", short(raw, 40)))
		return
	}
	by := s.Principal.By()
	if _, err := h.store.SetBudget(r.Context(), p.ID, &u, by); err != nil {
		h.actionError(w, r, err)
		return
	}
	h.log.InfoContext(r.Context(), "plan budget set", "plan_id", p.ID, "budget_usd", u.String(), "by", by)
	http.Redirect(w, r, PlanPath(p.ID), http.StatusSeeOther)
}

func (h *Handler) retryTask(w http.ResponseWriter, r *http.Request) {
	p, s, ok := h.writablePlan(w, r)
	if !ok {
		return
	}
	taskID := r.PathValue("task")
	by := s.Principal.By()
	res, err := h.store.RetryTasks(r.Context(), p.ID, []string{taskID}, "retry from the dashboard by "+by, by)
	if err != nil {
		h.actionError(w, r, err)
		return
	}
	h.log.InfoContext(r.Context(), "task retried", "plan_id", p.ID, "task_id", taskID, "tasks", res.Retried, "by", by)
	http.Redirect(w, r, PlanPath(p.ID)+"#task-"+taskID, http.StatusSeeOther)
}

func short(s string, n int) string {
	if len([]rune(s)) <= n {
		return s
	}
	return string([]rune(s)[:n]) + "…"
}
