package control

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/whilly-go/whilly/control/client"
	"github.com/whilly-go/whilly/queue"
)

// eventPage is how many events one query reads.
const eventPage = 1000

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
	evs, err := s.store.Events(r.Context(), f)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
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
// Event ids are handed out before commit, so a transaction may commit ids lower than one
// already committed. The stream sends events only up to the first id a transaction in
// flight may still commit (queue.Store.EventPage), so ids arrive in order and a reconnect
// with Last-Event-ID misses nothing. Should a notification still name ids at or below the
// cursor (a stream that began before an upgrade), that range is read again and the events
// not sent yet are sent then.
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
	from, replay := r.Header.Get("Last-Event-ID"), true
	if from == "" {
		from = q.Get("after")
	}
	var cursor int64
	if from == "" {
		replay = false
	} else {
		n, err := strconv.ParseInt(strings.TrimSpace(from), 10, 64)
		if err != nil || n < 0 {
			s.writeError(w, r, errorf(http.StatusBadRequest, codeBadRequest, "Last-Event-ID and after must be an event id (a whole number, 0 or more)."))
			return
		}
		cursor = n
	}
	// Subscribe before reading anything, so that no event falls between replay and live.
	wake, cancel := s.listener.Subscribe(func(n queue.Notification) bool { return planID == "" || n.PlanID == planID })
	defer cancel()
	if !replay {
		id, err := s.store.LatestEventID(ctx, planID)
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		cursor = id
	}

	rc := http.NewResponseController(w)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	_ = rc.SetWriteDeadline(time.Time{}) // a stream outlives any write timeout; unsupported is fine
	st := &sseStream{s: s, w: w, rc: rc, planID: planID, scopes: scopes, named: named, start: cursor, cursor: cursor, sent: &idWindow{hi: cursor}}
	if err := st.flush(); err != nil {
		s.log.WarnContext(ctx, "event stream cannot flush", "error", err)
		return
	}
	if err := st.catchUp(ctx); err != nil {
		st.end(ctx, err)
		return
	}
	ping := time.NewTicker(s.cfg.SSEHeartbeat)
	defer ping.Stop()
	// While the LISTEN connection is down no notification comes: poll instead.
	degraded := time.NewTicker(degradedPoll)
	defer degraded.Stop()
	recheck := time.NewTicker(heldRecheck)
	defer recheck.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.draining:
			return
		case <-recheck.C:
			if !st.held {
				continue
			}
			if err := st.catchUp(ctx); err != nil {
				st.end(ctx, err)
				return
			}
		case <-degraded.C:
			if s.listener.Ready() {
				continue
			}
			if err := st.catchUp(ctx); err != nil {
				st.end(ctx, err)
				return
			}
		case <-ping.C:
			if _, err := io.WriteString(w, ": ping\n\n"); err != nil {
				return
			}
			if err := st.flush(); err != nil {
				return
			}
		case n := <-wake:
			late := st.late(nil, n)
			for more := true; more; {
				select {
				case n := <-wake:
					late = st.late(late, n)
				default:
					more = false
				}
			}
			if err := st.catchUp(ctx); err != nil {
				st.end(ctx, err)
				return
			}
			if err := st.sendLate(ctx, late); err != nil {
				st.end(ctx, err)
				return
			}
		}
	}
}

type sseStream struct {
	s      *Server
	w      http.ResponseWriter
	rc     *http.ResponseController
	planID string
	scopes queue.Scopes // only events of plans these allow
	named  bool         // frames carry an "event: <type>" line
	start  int64        // the stream begins after this id
	cursor int64        // the highest id sent, or start
	sent   *idWindow    // which recent ids were sent
	held   bool         // the last catch-up stopped before an id still in flight
}

// idRange is a range of event ids of one plan ("" for any).
type idRange struct {
	planID string
	lo, hi int64
}

func (st *sseStream) flush() error { return st.rc.Flush() }

// end closes a stream that failed; the client reconnects with its Last-Event-ID.
func (st *sseStream) end(ctx context.Context, err error) {
	if ctx.Err() == nil {
		st.s.log.WarnContext(ctx, "event stream ended", "plan_id", st.planID, "error", err)
	}
}

// late adds the part of n's id range that lies at or below the cursor — ids a scan after
// the cursor would never see — to ranges. Ids from before the stream began, and ids too
// old for the sent window to tell apart, are left out.
func (st *sseStream) late(ranges []idRange, n queue.Notification) []idRange {
	if n.ID <= 0 {
		return ranges // a resync: the scan after the cursor covers it
	}
	hi := min(n.ID, st.cursor)
	lo := max(n.Lowest(), st.start+1, st.sent.floor()+1)
	if lo > hi {
		return ranges
	}
	planID := st.planID
	if planID == "" {
		planID = n.PlanID
	}
	return append(ranges, idRange{planID: planID, lo: lo, hi: hi})
}

// catchUp sends every event after the cursor, page by page, up to the first id a
// transaction in flight may still commit; st.held says events were held back there.
func (st *sseStream) catchUp(ctx context.Context) error {
	for {
		page, err := st.s.store.EventPage(ctx, queue.EventFilter{PlanID: st.planID, After: st.cursor, Limit: eventPage, Scopes: st.scopes})
		if err != nil {
			return err
		}
		st.held = page.Held
		for _, e := range page.Events {
			if err := st.send(e); err != nil {
				return err
			}
		}
		if err := st.flush(); err != nil {
			return err
		}
		if len(page.Events) < eventPage {
			return nil
		}
	}
}

// heldRecheck is how soon a stream whose events were held back behind a transaction in
// flight looks again: that transaction may end by rolling back, which notifies nobody.
const heldRecheck = 250 * time.Millisecond

// sendLate reads the late ranges again and sends the events not sent yet.
func (st *sseStream) sendLate(ctx context.Context, ranges []idRange) error {
	for _, r := range ranges {
		for after := r.lo - 1; after < r.hi; {
			evs, err := st.s.store.Events(ctx, queue.EventFilter{PlanID: r.planID, After: after, Limit: eventPage, Scopes: st.scopes})
			if err != nil {
				return err
			}
			for _, e := range evs {
				if e.ID > r.hi {
					break
				}
				if !st.sent.has(e.ID) {
					if err := st.send(e); err != nil {
						return err
					}
				}
			}
			if len(evs) < eventPage {
				break
			}
			after = evs[len(evs)-1].ID
		}
	}
	if len(ranges) == 0 {
		return nil
	}
	return st.flush()
}

func (st *sseStream) send(e queue.Event) error {
	data, err := json.Marshal(eventWire(e))
	if err != nil {
		return fmt.Errorf("encode event %d: %w", e.ID, err)
	}
	name := ""
	if st.named {
		name = "event: " + strings.NewReplacer("\r", " ", "\n", " ").Replace(e.Type) + "\n"
	}
	if _, err := fmt.Fprintf(st.w, "id: %d\n%sdata: %s\n\n", e.ID, name, data); err != nil {
		return fmt.Errorf("write event %d: %w", e.ID, err)
	}
	st.cursor = max(st.cursor, e.ID)
	st.sent.mark(e.ID)
	return nil
}

// windowIDs is how many of the most recent ids an idWindow remembers.
const windowIDs = 1 << 16

// idWindow remembers which ids in (hi-windowIDs, hi] were marked, in 8 KiB.
type idWindow struct {
	hi   int64
	bits [windowIDs / 64]uint64
}

// floor is the highest id the window has forgotten.
func (w *idWindow) floor() int64 { return w.hi - windowIDs }

func (w *idWindow) slot(id int64) (int, uint64) {
	i := uint64(id) % windowIDs
	return int(i / 64), 1 << (i % 64)
}

func (w *idWindow) mark(id int64) {
	if id > w.hi {
		if id-w.hi >= windowIDs {
			clear(w.bits[:])
		} else {
			for x := w.hi + 1; x <= id; x++ {
				word, bit := w.slot(x)
				w.bits[word] &^= bit
			}
		}
		w.hi = id
	}
	if id > w.floor() {
		word, bit := w.slot(id)
		w.bits[word] |= bit
	}
}

func (w *idWindow) has(id int64) bool {
	if id > w.hi || id <= w.floor() {
		return false
	}
	word, bit := w.slot(id)
	return w.bits[word]&bit != 0
}
