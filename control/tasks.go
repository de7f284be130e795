package control

import (
	"errors"
	"io"
	"net/http"
	"strconv"

	"github.com/whilly-go/whilly/control/client"
	"github.com/whilly-go/whilly/plan"
	"github.com/whilly-go/whilly/queue"
)

// Operator changes to one task of a plan (admin tokens): the queue functions that
// `whilly plan task add|edit|rm|reset` call, with the token's owner as the events' "by".

// addTask adds the task in the body (one task in the plan-file format) to a plan: 201.
func (s *Server) addTask(w http.ResponseWriter, r *http.Request) {
	s.putTask(w, r, false)
}

// editTask replaces the definition of a task that has not run: 200.
func (s *Server) editTask(w http.ResponseWriter, r *http.Request) {
	s.putTask(w, r, true)
}

func (s *Server) putTask(w http.ResponseWriter, r *http.Request, edit bool) {
	planID, err := param(r, "plan")
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	var taskID string
	if edit {
		if taskID, err = param(r, "task"); err != nil {
			s.writeError(w, r, err)
			return
		}
	}
	raw, err := readBody(w, r, s.cfg.MaxBodyBytes, "task")
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	ctx, by := r.Context(), principalFrom(r.Context()).by()
	var ch queue.TaskChange
	if edit {
		ch, err = s.store.EditTask(ctx, planID, taskID, raw, by)
	} else {
		ch, err = s.store.AddTask(ctx, planID, raw, by)
	}
	if err != nil {
		s.writeError(w, r, taskRefusal(err))
		return
	}
	p, err := s.store.GetPlan(ctx, planID)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	status := http.StatusOK
	if !edit {
		status = http.StatusCreated
	}
	s.log.InfoContext(ctx, "task changed", "plan_id", planID, "task_id", ch.Task.ID, "added", !edit, "changed", ch.Changed, "by", by)
	writeJSON(w, status, client.TaskChangeResponse{Task: taskWire(ch.Task), Changed: ch.Changed, Plan: planWire(p)})
}

// taskRefusal answers a task that the plan codec refuses 400 (an import answers 422:
// there the whole file is the request).
func taskRefusal(err error) error {
	var ve *plan.ValidationError
	if errors.As(err, &ve) {
		return errorf(http.StatusBadRequest, codeBadRequest, "The task is invalid: %s", ve.Error())
	}
	return err
}

// removeTask removes a task nothing depends on and that is not running: 204.
func (s *Server) removeTask(w http.ResponseWriter, r *http.Request) {
	planID, taskID, ok := s.planTask(w, r)
	if !ok {
		return
	}
	by := principalFrom(r.Context()).by()
	if err := s.store.RemoveTask(r.Context(), planID, taskID, by); err != nil {
		s.writeError(w, r, err)
		return
	}
	s.log.InfoContext(r.Context(), "task removed", "plan_id", planID, "task_id", taskID, "by", by)
	w.WriteHeader(http.StatusNoContent)
}

// resetTask returns a finished task to PENDING; ?cascade=true also the finished tasks
// that depend on it.
func (s *Server) resetTask(w http.ResponseWriter, r *http.Request) {
	planID, taskID, ok := s.planTask(w, r)
	if !ok {
		return
	}
	cascade := false
	if v := r.URL.Query().Get("cascade"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			s.writeError(w, r, errorf(http.StatusBadRequest, codeBadRequest, "Parameter cascade must be true or false."))
			return
		}
		cascade = b
	}
	ctx, by := r.Context(), principalFrom(r.Context()).by()
	ids, err := s.store.ResetTask(ctx, planID, taskID, cascade, by)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	p, err := s.store.GetPlan(ctx, planID)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.log.InfoContext(ctx, "task reset", "plan_id", planID, "task_id", taskID, "cascade", cascade, "tasks", len(ids), "by", by)
	writeJSON(w, http.StatusOK, client.TaskResetResponse{Reset: nonNil(ids), Plan: planWire(p)})
}

// planTask reads the plan and task ids of the path, answering the request when one is
// invalid.
func (s *Server) planTask(w http.ResponseWriter, r *http.Request) (planID, taskID string, ok bool) {
	planID, err := param(r, "plan")
	if err == nil {
		taskID, err = param(r, "task")
	}
	if err != nil {
		s.writeError(w, r, err)
		return "", "", false
	}
	return planID, taskID, true
}

// readBody reads the whole body, at most limit bytes, naming what it holds in errors.
func readBody(w http.ResponseWriter, r *http.Request, limit int64, what string) ([]byte, error) {
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe):
		return nil, errorf(http.StatusRequestEntityTooLarge, codeTooLarge, "The %s is larger than %d bytes.", what, limit)
	case IsBodyTimeout(err):
		return nil, errBodyTimeout()
	case err != nil:
		return nil, err
	}
	return data, nil
}
