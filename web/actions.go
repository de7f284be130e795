package web

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/whilly-go/whilly/plan"
	"github.com/whilly-go/whilly/queue"
)

// The buttons. Each calls the queue function the CLI, the API and the comment commands
// call, with the session's principal as the events' "by", then goes back to the page.

// writablePlan reads the plan of a button's post: 404 when the session may not read it,
// 403 when it may read but not change it. A GitHub user's write access, captured at
// sign-in, is asked of GitHub again (its answer of the last minute at most): access
// taken away since is refused, and so is the post when GitHub does not answer (503).
func (h *Handler) writablePlan(w http.ResponseWriter, r *http.Request) (queue.PlanInfo, queue.Session, bool) {
	p, s, ok := h.readablePlan(w, r)
	if !ok {
		return p, s, false
	}
	if !s.Principal.CanWrite(p) {
		h.fail(w, r, http.StatusForbidden, "Only an admin, or a user with write access to the plan's repository, may change this plan.")
		return p, s, false
	}
	if s.Principal.Kind == queue.PrincipalGitHub && !s.Principal.Admin {
		yes, err := h.stillWrites(r.Context(), p, s.Principal.Name)
		if err != nil {
			h.log.WarnContext(r.Context(), "the user's write access could not be checked with GitHub", "plan_id", p.ID, "name", s.Principal.Name, "error", err)
			h.fail(w, r, http.StatusServiceUnavailable, "GitHub could not confirm your write access to the plan's repository just now; try again in a moment.")
			return p, s, false
		}
		if !yes {
			h.log.InfoContext(r.Context(), "button refused: no write access on GitHub any more", "plan_id", p.ID, "name", s.Principal.Name)
			h.fail(w, r, http.StatusForbidden, "GitHub says you no longer have write access to the plan's repository; only a user with write access may change this plan.")
			return p, s, false
		}
	}
	return p, s, true
}

// actionError answers a refusal of the queue in one sentence (4xx), anything else 500.
func (h *Handler) actionError(w http.ResponseWriter, r *http.Request, err error) {
	switch {
	case errors.Is(err, queue.ErrForbidden):
		h.fail(w, r, http.StatusForbidden, sentence(err))
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
	msg := strings.TrimSuffix(queue.WithoutClass(err.Error()), ": "+queue.ErrNotFound.Error())
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
	http.Redirect(w, r, PlanPath(p.ID)+"#task-"+url.PathEscape(taskID), http.StatusSeeOther)
}

func short(s string, n int) string {
	if len([]rune(s)) <= n {
		return s
	}
	return string([]rune(s)[:n]) + "…"
}

// actor is the session's principal as the pause functions' actor.
func (h *Handler) actor(w http.ResponseWriter, r *http.Request, s queue.Session) (queue.Actor, bool) {
	a, ok := s.Principal.Actor()
	if !ok {
		h.fail(w, r, http.StatusForbidden, "Only an admin, or a user with write access to the plan's repository, may change this plan.")
	}
	return a, ok
}

// planPause runs one of the pause functions on the plan of the post.
func (h *Handler) planPause(w http.ResponseWriter, r *http.Request, what string,
	change func(ctx context.Context, planID string, a queue.Actor) (queue.PlanChange, error)) {
	p, s, ok := h.writablePlan(w, r)
	if !ok {
		return
	}
	a, ok := h.actor(w, r, s)
	if !ok {
		return
	}
	ch, err := change(r.Context(), p.ID, a)
	if err != nil {
		h.actionError(w, r, err)
		return
	}
	h.log.InfoContext(r.Context(), "plan pause state set", "plan_id", p.ID, "action", what, "changed", ch.Changed, "by", a.By)
	http.Redirect(w, r, PlanPath(p.ID), http.StatusSeeOther)
}

func (h *Handler) pausePlan(w http.ResponseWriter, r *http.Request) {
	h.planPause(w, r, "paused", h.store.PausePlan)
}

func (h *Handler) resumePlan(w http.ResponseWriter, r *http.Request) {
	h.planPause(w, r, "resumed", h.store.ResumePlan)
}

// approvePlan approves the digest the page showed: a plan changed since is refused (409).
func (h *Handler) approvePlan(w http.ResponseWriter, r *http.Request) {
	digest := strings.TrimSpace(r.PostForm.Get("digest"))
	if digest == "" {
		h.fail(w, r, http.StatusBadRequest, "The approval needs the digest the page showed; reload the page and approve again.")
		return
	}
	h.planPause(w, r, "approved", func(ctx context.Context, planID string, a queue.Actor) (queue.PlanChange, error) {
		return h.store.ApprovePlan(ctx, planID, digest, a)
	})
}

// fleet pauses or resumes every claim (admins without scopes only; the queue refuses
// others).
func (h *Handler) fleet(pause bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		s, _ := SessionFrom(r.Context())
		if !s.Principal.Admin {
			h.fail(w, r, http.StatusForbidden, "Only an admin may pause or resume every claim.")
			return
		}
		a, ok := h.actor(w, r, s)
		if !ok {
			return
		}
		change := h.store.ResumeFleet
		if pause {
			change = h.store.PauseFleet
		}
		f, err := change(r.Context(), a)
		if err != nil {
			h.actionError(w, r, err)
			return
		}
		h.log.InfoContext(r.Context(), "fleet pause set", "paused", f.Paused, "changed", f.Changed, "by", a.By)
		http.Redirect(w, r, "/", http.StatusSeeOther)
	}
}
