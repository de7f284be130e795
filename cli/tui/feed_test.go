package tui

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	tea "github.com/charmbracelet/bubbletea"

	"github.com/whilly-go/whilly/control/client"
)

// sseServer serves /v1/events/stream: each connection runs the next script, which writes
// frames and returns (the server ends the stream) or waits for the client to go.
type sseServer struct {
	mu      sync.Mutex
	scripts []func(w http.ResponseWriter, r *http.Request)
	lastIDs []string // Last-Event-ID of each connection
	events  []client.Event
}

func (s *sseServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/v1/events":
		after, _ := strconv.ParseInt(r.URL.Query().Get("after"), 10, 64)
		limit, _ := strconv.Atoi(r.URL.Query().Get("limit"))
		out := client.EventList{Events: []client.Event{}, NextAfter: after}
		for _, e := range s.events {
			if e.ID > after && len(out.Events) < limit {
				out.Events = append(out.Events, e)
				out.NextAfter = e.ID
			}
		}
		_ = json.NewEncoder(w).Encode(out)
	case "/v1/events/stream":
		s.mu.Lock()
		s.lastIDs = append(s.lastIDs, r.Header.Get("Last-Event-ID"))
		var script func(http.ResponseWriter, *http.Request)
		if len(s.scripts) > 0 {
			script, s.scripts = s.scripts[0], s.scripts[1:]
		}
		s.mu.Unlock()
		if script == nil {
			<-r.Context().Done()
			return
		}
		script(w, r)
	default:
		http.NotFound(w, r)
	}
}

func (s *sseServer) connections() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.lastIDs...)
}

func openStream(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	w.(http.Flusher).Flush()
}

func frame(w http.ResponseWriter, e client.Event) {
	data, _ := json.Marshal(e)
	fmt.Fprintf(w, "id: %d\nevent: %s\ndata: %s\n\n", e.ID, e.Type, data)
	w.(http.Flusher).Flush()
}

// follow runs a feed against srv and returns its messages as they come.
func follow(t *testing.T, srv *httptest.Server, planID string) <-chan tea.Msg {
	t.Helper()
	api, err := client.New(srv.URL, "tok", client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	msgs := make(chan tea.Msg, 100)
	done := make(chan struct{})
	go func() {
		defer close(done)
		Feed{API: api, PlanID: planID, MinBackoff: 10 * time.Millisecond, MaxBackoff: 20 * time.Millisecond}.Run(ctx, func(m tea.Msg) { msgs <- m })
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Error("the feed did not stop with its context")
		}
	})
	return msgs
}

func next(t *testing.T, msgs <-chan tea.Msg) tea.Msg {
	t.Helper()
	select {
	case m := <-msgs:
		return m
	case <-time.After(10 * time.Second):
		t.Fatal("no message from the feed within 10 s")
		return nil
	}
}

func TestFeedStreamsReconnectsFromTheLastEventAndSaysWhenLive(t *testing.T) {
	t.Parallel()
	s := &sseServer{scripts: []func(http.ResponseWriter, *http.Request){
		func(w http.ResponseWriter, _ *http.Request) { // events, then the server goes away
			openStream(w)
			frame(w, client.Event{ID: 5, Type: "CLAIM", PlanID: "p", TaskID: "T1"})
			frame(w, client.Event{ID: 6, Type: "START", PlanID: "p", TaskID: "T1"})
		},
		func(w http.ResponseWriter, _ *http.Request) { // refused
			http.Error(w, `{"error":"unauthorized","message":"no"}`, http.StatusUnauthorized)
		},
		func(w http.ResponseWriter, r *http.Request) { // live again
			openStream(w)
			frame(w, client.Event{ID: 7, Type: "COMPLETE", PlanID: "p", TaskID: "T1"})
			<-r.Context().Done()
		},
	}}
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	msgs := follow(t, srv, "")

	want := []string{"live", "event 5", "event 6", "down: closed", "down: 401", "live", "event 7"}
	for i, w := range want {
		var got string
		switch m := next(t, msgs).(type) {
		case StreamLiveMsg:
			got = "live"
		case EventMsg:
			got = fmt.Sprintf("event %d", m.Event.ID)
		case StreamDownMsg:
			switch {
			case errors.Is(m.Err, client.ErrStreamClosed):
				got = "down: closed"
			case client.IsUnauthorized(m.Err):
				got = "down: 401"
			default:
				got = fmt.Sprintf("down: %v", m.Err)
			}
			if m.Retry <= 0 {
				t.Errorf("message %d: retry in %s", i, m.Retry)
			}
		default:
			got = fmt.Sprintf("%T", m)
		}
		if got != w {
			t.Fatalf("message %d = %s, want %s", i, got, w)
		}
	}
	if got := s.connections(); len(got) != 3 || got[0] != "" || got[1] != "6" || got[2] != "6" {
		t.Errorf("Last-Event-ID of the connections = %q, want \"\", 6, 6", got)
	}
}

func TestFeedBackfillsThePlanThenStreamsAfterIt(t *testing.T) {
	t.Parallel()
	s := &sseServer{}
	for i := range 1200 {
		s.events = append(s.events, client.Event{ID: int64(i + 1), Type: "progress.step", PlanID: "p"})
	}
	s.scripts = []func(http.ResponseWriter, *http.Request){func(w http.ResponseWriter, r *http.Request) {
		openStream(w)
		frame(w, client.Event{ID: 1201, Type: "COMPLETE", PlanID: "p"})
		<-r.Context().Done()
	}}
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	msgs := follow(t, srv, "p")

	back, ok := next(t, msgs).(EventsMsg)
	if !ok || len(back.Events) != maxEvents || back.Events[0].ID != 1200-maxEvents+1 || back.Events[maxEvents-1].ID != 1200 {
		t.Fatalf("backfill = %d events, want the last %d (ok %v)", len(back.Events), maxEvents, ok)
	}
	if _, ok := next(t, msgs).(StreamLiveMsg); !ok {
		t.Fatal("no StreamLiveMsg after the backfill")
	}
	if m, ok := next(t, msgs).(EventMsg); !ok || m.Event.ID != 1201 {
		t.Fatalf("live event = %+v", m)
	}
	if got := s.connections(); len(got) != 1 || got[0] != "1200" {
		t.Errorf("the stream started after %q, want 1200", got)
	}
}

// Without a plan the dashboard shows every plan's recent events from the start, as with
// one: the backfill reads the whole log (bounded as for a plan), then streams after it.
func TestFeedBackfillsEveryPlanWithoutAPlan(t *testing.T) {
	t.Parallel()
	s := &sseServer{}
	for i := range 30 {
		s.events = append(s.events, client.Event{ID: int64(i + 1), Type: "progress.step", PlanID: []string{"p", "q"}[i%2]})
	}
	s.scripts = []func(http.ResponseWriter, *http.Request){func(w http.ResponseWriter, r *http.Request) {
		openStream(w)
		frame(w, client.Event{ID: 31, Type: "COMPLETE", PlanID: "q"})
		<-r.Context().Done()
	}}
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	msgs := follow(t, srv, "")

	back, ok := next(t, msgs).(EventsMsg)
	if !ok || len(back.Events) != 30 || back.Events[0].PlanID != "p" || back.Events[29].PlanID != "q" {
		t.Fatalf("backfill = %+v (ok %v), want the 30 events of both plans", back, ok)
	}
	if _, ok := next(t, msgs).(StreamLiveMsg); !ok {
		t.Fatal("no StreamLiveMsg after the backfill")
	}
	if got := s.connections(); len(got) != 1 || got[0] != "30" {
		t.Errorf("the stream started after %q, want 30", got)
	}
}
