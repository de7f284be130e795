package control

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/whilly-go/whilly/control/client"
	"github.com/whilly-go/whilly/queue"
)

func (s *Server) listEvents(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	f := queue.EventFilter{PlanID: q.Get("plan_id"), Scopes: principalFrom(r.Context()).scopes()}
	if err := checkText("plan_id", f.PlanID, maxIDBytes); err != nil {
		s.writeError(w, r, err)
		return
	}
	if v := q.Get("after"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			s.writeError(w, r, errorf(http.StatusBadRequest, codeBadRequest, "Parameter after must be an event id (a whole number, 0 or more)."))
			return
		}
		f.After = n
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 1000 {
			s.writeError(w, r, errorf(http.StatusBadRequest, codeBadRequest, "Parameter limit must be a whole number from 1 to 1000."))
			return
		}
		f.Limit = n
	}
	page, err := s.store.SettledEvents(r.Context(), f) // a client pages on with NextAfter
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	evs := page.Events
	out := client.EventList{Events: make([]client.Event, 0, len(evs)), NextAfter: f.After}
	for _, e := range evs {
		out.Events = append(out.Events, eventWire(e))
		out.NextAfter = e.ID
	}
	writeJSON(w, http.StatusOK, out)
}

// streamEvents serves the audit log as server-sent events: first the events after
// Last-Event-ID (or ?after=), then live ones as the listener announces them; with neither,
// it starts from now. Each frame is "id: <event id>", "event: <type>", "data: <event JSON>".
//
// queue.Follower decides what to send and when: each event once, in id order as far as
// commits allow, never past an id a transaction in flight may still commit, so a
// reconnect with Last-Event-ID misses nothing.
func (s *Server) streamEvents(w http.ResponseWriter, r *http.Request) {
	s.serveStream(w, r, principalFrom(r.Context()).scopes(), true)
}

// StreamEvents serves the event stream as GET /v1/events/stream does, limited to scopes,
// to a caller authenticated elsewhere: the web dashboard's session. Its frames carry no
// "event:" line, so that a browser's EventSource.onmessage sees events of every type
// (the type is in the data).
func (s *Server) StreamEvents(w http.ResponseWriter, r *http.Request, scopes queue.Scopes) {
	s.serveStream(w, r, scopes, false)
}

// serveStream is the one implementation of the event stream; named says whether frames
// carry the event type in an "event:" line.
func (s *Server) serveStream(w http.ResponseWriter, r *http.Request, scopes queue.Scopes, named bool) {
	ctx := r.Context()
	q := r.URL.Query()
	planID := q.Get("plan_id")
	if err := checkText("plan_id", planID, maxIDBytes); err != nil {
		s.writeError(w, r, err)
		return
	}
	from := r.Header.Get("Last-Event-ID")
	if from == "" {
		from = q.Get("after")
	}
	var cursor int64
	if from != "" {
		n, err := strconv.ParseInt(strings.TrimSpace(from), 10, 64)
		if err != nil || n < 0 {
			s.writeError(w, r, errorf(http.StatusBadRequest, codeBadRequest, "Last-Event-ID and after must be an event id (a whole number, 0 or more)."))
			return
		}
		cursor = n
	} else {
		id, err := s.store.LatestEventID(ctx, planID)
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		cursor = id
	}
	f := s.store.Follow(s.listener, queue.FollowOptions{PlanID: planID, Scopes: scopes, After: cursor, Stop: s.draining})
	defer f.Close()

	rc := http.NewResponseController(w)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	_ = rc.SetWriteDeadline(time.Time{}) // a stream outlives any write timeout; unsupported is fine
	if err := rc.Flush(); err != nil {
		s.log.WarnContext(ctx, "event stream cannot flush", "error", err)
		return
	}
	for {
		evs, err := f.Next(ctx, s.cfg.SSEHeartbeat)
		if err == nil && len(evs) == 0 {
			_, err = io.WriteString(w, ": ping\n\n")
		}
		for i := 0; err == nil && i < len(evs); i++ {
			err = writeFrame(w, evs[i], named)
		}
		if err == nil {
			err = rc.Flush()
		}
		if err != nil {
			if ctx.Err() == nil && !errors.Is(err, queue.ErrFollowStopped) {
				// The client reconnects with its Last-Event-ID.
				s.log.WarnContext(ctx, "event stream ended", "plan_id", planID, "error", err)
			}
			return
		}
	}
}

// writeFrame writes one event as a server-sent event frame.
func writeFrame(w io.Writer, e queue.Event, named bool) error {
	data, err := json.Marshal(eventWire(e))
	if err != nil {
		return fmt.Errorf("encode event %d: %w", e.ID, err)
	}
	name := ""
	if named {
		name = "event: " + strings.NewReplacer("\r", " ", "\n", " ").Replace(e.Type) + "\n"
	}
	if _, err := fmt.Fprintf(w, "id: %d\n%sdata: %s\n\n", e.ID, name, data); err != nil {
		return fmt.Errorf("write event %d: %w", e.ID, err)
	}
	return nil
}
