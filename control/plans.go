package control

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/whilly-go/whilly/control/client"
	"github.com/whilly-go/whilly/plan"
	"github.com/whilly-go/whilly/queue"
)

func (s *Server) listPlans(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	pg := queue.PlanPage{After: q.Get("after")}
	if len(pg.After) > maxIDBytes {
		s.writeError(w, r, errorf(http.StatusBadRequest, codeBadRequest, "Parameter after is too long."))
		return
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 500 {
			s.writeError(w, r, errorf(http.StatusBadRequest, codeBadRequest, "Parameter limit must be a whole number from 1 to 500."))
			return
		}
		pg.Limit = n
	}
	if v := q.Get("status"); v != "" {
		st, ok := parsePlanStatus(v)
		if !ok {
			s.writeError(w, r, errorf(http.StatusBadRequest, codeBadRequest, "Parameter status must be ACTIVE, PAUSED, DONE, FAILED or CANCELLED."))
			return
		}
		pg.Status = st
	}
	pg.Scopes = principalFrom(r.Context()).scopes()
	plans, next, err := s.store.ListPlans(r.Context(), pg)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	out := client.PlanList{Plans: make([]client.Plan, 0, len(plans)), NextCursor: next}
	for _, p := range plans {
		out.Plans = append(out.Plans, planWire(p))
	}
	writeJSON(w, http.StatusOK, out)
}

func parsePlanStatus(v string) (plan.PlanStatus, bool) {
	st := plan.PlanStatus(strings.ToUpper(v))
	switch st {
	case plan.PlanActive, plan.PlanPaused, plan.PlanDone, plan.PlanFailed, plan.PlanCancelled:
		return st, true
	}
	return "", false
}

// importPlan imports a plan file; ?strict=true also applies the decision gate
// strictly. Importing is idempotent: 201 when the plan is new, 200 otherwise.
func (s *Server) importPlan(w http.ResponseWriter, r *http.Request) {
	strict := false
	if v := r.URL.Query().Get("strict"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			s.writeError(w, r, errorf(http.StatusBadRequest, codeBadRequest, "Parameter strict must be true or false."))
			return
		}
		strict = b
	}
	data, err := readBody(w, r, s.cfg.MaxPlanBytes, "plan file")
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if len(data) == 0 || !json.Valid(data) {
		s.writeError(w, r, errorf(http.StatusBadRequest, codeBadRequest, "The body is not a JSON plan file."))
		return
	}
	p, err := plan.ParseWith(data, plan.ParseOptions{MaxAttempts: s.store.Config().MaxAttempts})
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	var res client.ImportResult
	if strict {
		ar, err := s.store.Apply(r.Context(), p, true, queue.ImportOptions{By: principalFrom(r.Context()).by()})
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		res = importWire(ar.Import)
		res.Skipped = ar.Skipped
	} else {
		ir, err := s.store.Import(r.Context(), p, queue.ImportOptions{By: principalFrom(r.Context()).by()})
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		res = importWire(ir)
	}
	pi, err := s.store.GetPlan(r.Context(), p.ID)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.log.InfoContext(r.Context(), "plan imported", "plan_id", p.ID, "tasks_created", res.TasksCreated, "strict", strict)
	status := http.StatusOK
	if res.PlanCreated {
		status = http.StatusCreated
	}
	writeJSON(w, status, client.ImportResponse{Import: res, Plan: planWire(pi), Notes: p.Notes})
}

func importWire(r queue.ImportResult) client.ImportResult {
	return client.ImportResult{PlanID: r.PlanID, PlanCreated: r.PlanCreated, TasksCreated: r.TasksCreated, TasksTotal: r.TasksTotal}
}

// scopedPlan reads plan id for the caller: a plan outside the caller's scopes is
// answered exactly like one that does not exist (404), so its existence is not revealed.
func (s *Server) scopedPlan(r *http.Request, id string) (queue.PlanInfo, error) {
	p, err := s.store.GetPlan(r.Context(), id)
	if err != nil {
		return p, err
	}
	if !principalFrom(r.Context()).scopes().Allow(p) {
		return queue.PlanInfo{}, fmt.Errorf("plan %s: %w", id, queue.ErrNotFound)
	}
	return p, nil
}

func (s *Server) getPlan(w http.ResponseWriter, r *http.Request) {
	id, err := param(r, "plan")
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	p, err := s.scopedPlan(r, id)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	out := planWire(p)
	switch pr, err := s.store.PullOfPlan(r.Context(), id); {
	case err == nil:
		out.PullRequest = &client.PullRequest{Number: pr.Number, URL: pr.URL, State: pr.State, Draft: pr.Draft}
	case !errors.Is(err, queue.ErrNotFound):
		s.writeError(w, r, err)
		return
	}
	if p.Status == plan.PlanPaused && p.PauseReason == queue.PauseApproval {
		// What the approver reviews: only plans awaiting approval pay for reading it.
		if out.Digest, err = s.store.PlanDigest(r.Context(), id); err != nil {
			s.writeError(w, r, err)
			return
		}
	}
	writeJSON(w, http.StatusOK, out)
}

// patchPlan sets the budget (a raise resumes a plan paused on budget) and/or cancels the
// plan. Everything is validated before anything changes.
func (s *Server) patchPlan(w http.ResponseWriter, r *http.Request) {
	id, err := param(r, "plan")
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	var req client.PatchPlanRequest
	if err := decode(w, r, s.cfg.MaxBodyBytes, &req); err != nil {
		s.writeError(w, r, err)
		return
	}
	if !req.BudgetUSD.Set && req.Status == "" {
		s.writeError(w, r, errorf(http.StatusBadRequest, codeBadRequest, "Set budget_usd or status."))
		return
	}
	if req.Status != "" && plan.PlanStatus(strings.ToUpper(string(req.Status))) != plan.PlanCancelled {
		s.writeError(w, r, errorf(http.StatusBadRequest, codeBadRequest, "Field status can only be set to CANCELLED."))
		return
	}
	if len(req.Reason) > maxReason {
		s.writeError(w, r, errorf(http.StatusBadRequest, codeBadRequest, "Field reason must be at most %d bytes.", maxReason))
		return
	}
	ctx := r.Context()
	if req.BudgetUSD.Set {
		if _, err := s.store.SetBudget(ctx, id, req.BudgetUSD.Limit, principalFrom(ctx).by()); err != nil {
			s.writeError(w, r, err)
			return
		}
		s.log.InfoContext(ctx, "plan budget set", "plan_id", id, "budget_usd", budgetText(req.BudgetUSD.Limit))
	}
	if req.Status != "" {
		n, err := s.store.CancelPlan(ctx, id, req.Reason, principalFrom(ctx).by())
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		s.log.InfoContext(ctx, "plan cancelled", "plan_id", id, "tasks", n)
	}
	p, err := s.store.GetPlan(ctx, id)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, planWire(p))
}

func (s *Server) listTasks(w http.ResponseWriter, r *http.Request) {
	id, err := param(r, "plan")
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	// Also tells an empty list from an unknown plan.
	if _, err := s.scopedPlan(r, id); err != nil {
		s.writeError(w, r, err)
		return
	}
	pg, err := taskPageOf(r.URL.Query())
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	tasks, next, err := s.store.TaskPageOf(r.Context(), id, pg)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	out := client.TaskList{Tasks: make([]client.Task, 0, len(tasks))}
	if next >= 0 {
		out.NextCursor = strconv.Itoa(next)
	}
	for _, t := range tasks {
		out.Tasks = append(out.Tasks, taskWire(t))
	}
	writeJSON(w, http.StatusOK, out)
}

// taskPageOf reads the page a task list asks for: status, limit and the after cursor.
func taskPageOf(q url.Values) (queue.TaskPage, error) {
	var pg queue.TaskPage
	if v := q.Get("after"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || len(v) > 10 {
			return pg, errorf(http.StatusBadRequest, codeBadRequest, "Parameter after must be the next_cursor of the previous page.")
		}
		pg.From = n
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > plan.MaxTaskPage {
			return pg, errorf(http.StatusBadRequest, codeBadRequest, "Parameter limit must be a whole number from 1 to %d.", plan.MaxTaskPage)
		}
		pg.Limit = n
	}
	if v := q.Get("status"); v != "" {
		st, err := plan.ParseStatus(v)
		if err != nil {
			return pg, errorf(http.StatusBadRequest, codeBadRequest, "Parameter status must be one of %s.", statusNames())
		}
		pg.Status = st
	}
	return pg, nil
}

// statusNames lists the task statuses for messages.
func statusNames() string {
	names := make([]string, 0, len(plan.Statuses()))
	for _, st := range plan.Statuses() {
		names = append(names, string(st))
	}
	return strings.Join(names, ", ")
}

func budgetText(u *plan.USD) string {
	if u == nil {
		return "unlimited"
	}
	return u.String()
}
