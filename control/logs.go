package control

import (
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

// attemptParam reads the attempt number of the path: a whole number from 1, or "latest"
// (0) when latest is allowed.
func attemptParam(r *http.Request, latest bool) (int, error) {
	raw, err := param(r, "n")
	if err != nil {
		return 0, err
	}
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
	n, err := attemptParam(r, false)
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

// readLog answers what is kept of an attempt's log from ?after= on. With ?wait=S and
// nothing new while the attempt runs, it waits up to S seconds for more, woken by the
// listener (a log append, or an event of the plan that may end the attempt): a waiting
// follower costs no query.
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
	n, err := attemptParam(r, true)
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
	if _, err := s.scopedPlan(r, planID); err != nil {
		s.writeError(w, r, err)
		return
	}
	deadline := time.Now().Add(wait)
	var wake <-chan queue.Notification
	if wait > 0 {
		// Subscribed before the first read, so nothing appended in between is missed.
		ch, cancel := s.listener.SubscribeLogs(func(nt queue.Notification) bool {
			return nt.PlanID == planID && (nt.TaskID == taskID || nt.TaskID == "")
		})
		defer cancel()
		wake = ch
		_ = http.NewResponseController(w).SetWriteDeadline(deadline.Add(10 * time.Second))
	}
	for {
		lg, err := s.store.ReadAttemptLog(r.Context(), planID, taskID, n, after)
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		if len(lg.Data) > 0 || !lg.Running || !s.waitLog(r, wake, deadline) {
			writeJSON(w, http.StatusOK, logWire(lg))
			return
		}
		n = lg.Attempt // keep following this attempt, whatever starts meanwhile
	}
}

// waitLog waits for a notification that may concern the followed log, until deadline; it
// reports whether to read again.
func (s *Server) waitLog(r *http.Request, wake <-chan queue.Notification, deadline time.Time) bool {
	left := time.Until(deadline)
	if wake == nil || left <= 0 {
		return false
	}
	if !s.listener.Ready() {
		left = min(left, degradedPoll) // no notification comes while LISTEN is down
	}
	t := time.NewTimer(left)
	defer t.Stop()
	select {
	case <-wake:
		return true
	case <-t.C:
		return time.Until(deadline) > 0
	case <-r.Context().Done():
		return false
	case <-s.draining:
		return false
	}
}

func logWire(lg queue.AttemptLog) client.AttemptLog {
	// Bytes cut at the window's start may begin inside a character: skip to the next one.
	data := lg.Data
	if lg.Offset > 0 {
		i := 0
		for i < len(data) && i < 3 && data[i]&0xC0 == 0x80 {
			i++
		}
		data = data[i:]
	}
	return client.AttemptLog{PlanID: lg.PlanID, TaskID: lg.TaskID, Attempt: lg.Attempt, Offset: lg.Offset + int64(len(lg.Data)-len(data)),
		NextOffset: lg.Size, Text: strings.ToValidUTF8(string(data), "\uFFFD"), Running: lg.Running, TaskStatus: lg.Status, UpdatedAt: lg.UpdatedAt}
}
