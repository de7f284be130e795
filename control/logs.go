package control

import (
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/whilly-go/whilly/agent"
	"github.com/whilly-go/whilly/control/client"
	"github.com/whilly-go/whilly/queue"
)

// maxLogWait caps the wait of a log read: a follower asks again after it.
const maxLogWait = 30 * time.Second

// parseAttempt reads an attempt number: a whole number from 1, or "latest" (0) when
// latest is allowed.
func parseAttempt(raw string, latest bool) (int, error) {
	if latest && raw == "latest" {
		return 0, nil
	}
	n, err := strconv.Atoi(raw)
	if err != nil || n < 1 || n > 1_000_000 {
		if latest {
			return 0, errorf(http.StatusBadRequest, codeBadRequest, "The attempt in the path must be a number from 1, or latest.")
		}
		return 0, errorf(http.StatusBadRequest, codeBadRequest, "The attempt in the path must be a number from 1.")
	}
	return n, nil
}

// appendLog stores a chunk of an attempt's agent log from the worker holding the task's
// lease. The worker redacted it (agent.Redact, line by line); it is made storable here.
func (s *Server) appendLog(w http.ResponseWriter, r *http.Request) {
	req, l, ok := decodeLeased(s, w, r, func(req client.LogChunkRequest) string { return req.LeaseID })
	if !ok {
		return
	}
	raw, err := param(r, "n")
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	n, err := parseAttempt(raw, false)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if len(req.Text) > client.MaxLogChunk {
		s.writeError(w, r, errorf(http.StatusRequestEntityTooLarge, codeTooLarge, "A log chunk may hold at most %d bytes; this one has %d.", client.MaxLogChunk, len(req.Text)))
		return
	}
	text, _ := agent.Storable(req.Text)
	res, err := s.store.AppendAttemptLog(r.Context(), l, queue.LogAppend{Attempt: n, Offset: req.Offset, Data: []byte(text)})
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, client.LogChunkResponse{NextOffset: res.Next, Duplicate: res.Duplicate})
}

// logTail checks the log tail a COMPLETE or FAIL report carries and makes it storable;
// nil stays nil.
func logTail(t *client.LogTail) (*queue.LogTail, error) {
	switch {
	case t == nil:
		return nil, nil
	case t.Offset < 0 || t.Offset > 1<<52:
		return nil, errorf(http.StatusBadRequest, codeBadRequest, "Field log.offset must be a byte offset from 0 to 2^52.")
	case len(t.Text) > client.MaxLogChunk:
		return nil, errorf(http.StatusRequestEntityTooLarge, codeTooLarge, "A log chunk may hold at most %d bytes; this one has %d.", client.MaxLogChunk, len(t.Text))
	}
	text, _ := agent.Storable(t.Text)
	return &queue.LogTail{Offset: t.Offset, Data: []byte(text)}, nil
}

// readLog answers GET /v1/plans/{plan}/tasks/{task}/attempts/{n}/log (AttemptLog).
func (s *Server) readLog(w http.ResponseWriter, r *http.Request) {
	planID, err := param(r, "plan")
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	taskID, err := param(r, "task")
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	n, err := param(r, "n")
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.AttemptLog(w, r, principalFrom(r.Context()).scopes(), planID, taskID, n)
}

// AttemptLog answers what is kept of attempt n ("latest" or a number) of a task's log
// from ?after= on, for a caller allowed scopes: the API's route, and the dashboard for a
// session it authenticated. A plan outside scopes is 404. With ?wait=S and nothing new
// while the attempt runs, it waits up to S seconds for more (queue.Store.WaitAttemptLog):
// a waiting follower costs no query.
func (s *Server) AttemptLog(w http.ResponseWriter, r *http.Request, scopes queue.Scopes, planID, taskID, attempt string) {
	if err := cmpErr(checkText("the plan id", planID, maxIDBytes), checkText("the task id", taskID, maxIDBytes)); err != nil {
		s.writeError(w, r, err)
		return
	}
	n, err := parseAttempt(attempt, true)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	q := r.URL.Query()
	var after int64
	if v := q.Get("after"); v != "" {
		after, err = strconv.ParseInt(v, 10, 64)
		if err != nil || after < 0 {
			s.writeError(w, r, errorf(http.StatusBadRequest, codeBadRequest, "Parameter after must be an offset (a whole number, 0 or more)."))
			return
		}
	}
	var wait time.Duration
	if v := q.Get("wait"); v != "" {
		secs, err := strconv.ParseFloat(v, 64)
		if err != nil || math.IsNaN(secs) || secs < 0 {
			s.writeError(w, r, errorf(http.StatusBadRequest, codeBadRequest, "Parameter wait must be a number of seconds, 0 or more."))
			return
		}
		wait = time.Duration(min(secs, maxLogWait.Seconds()) * float64(time.Second))
	}
	p, err := s.store.GetPlan(r.Context(), planID)
	if err == nil && !scopes.Allow(p) {
		err = fmt.Errorf("plan %s: %w", planID, queue.ErrNotFound)
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	deadline := time.Now().Add(wait)
	if wait > 0 {
		_ = http.NewResponseController(w).SetWriteDeadline(deadline.Add(10 * time.Second))
	}
	lg, err := s.store.WaitAttemptLog(r.Context(), s.listener, planID, taskID, n, after, deadline, s.draining)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, logWire(lg))
}

func logWire(lg queue.AttemptLog) client.AttemptLog {
	return client.AttemptLog{PlanID: lg.PlanID, TaskID: lg.TaskID, Attempt: lg.Attempt, Offset: lg.Offset, NextOffset: lg.Size,
		Text: strings.ToValidUTF8(string(lg.Data), "\uFFFD"), Running: lg.Running, TaskStatus: lg.Status, UpdatedAt: lg.UpdatedAt}
}
