package tui

import (
	"context"
	"net/http/httptrace"
	"sync"
	"time"

	tea "github.com/charmbracelet/bubbletea"

	"github.com/whilly-go/whilly/control/client"
)

// Feed follows the control plane's event stream and sends the model what it needs:
// past events of the plan, or of every plan without one (a backfill), StreamLiveMsg each time the
// stream opens, EventMsg per event, StreamDownMsg when it breaks. It reconnects with
// backoff and the id of the last event it saw, so a control plane that restarts costs a
// few seconds and no events.
type Feed struct {
	API    API
	PlanID string
	// MinBackoff and MaxBackoff bound the wait before reconnecting; defaults 1 s and 30 s.
	MinBackoff, MaxBackoff time.Duration
}

// backfillPages bounds the backfill: a log (the plan's, or the whole one) with more
// events than this many pages of 1000 starts from the live stream instead.
const backfillPages = 20

// Run follows the stream until ctx ends; send must not block for long (tea.Program.Send).
func (f Feed) Run(ctx context.Context, send func(tea.Msg)) {
	minB, maxB := f.MinBackoff, f.MaxBackoff
	if minB <= 0 {
		minB = time.Second
	}
	if maxB < minB {
		maxB = max(30*time.Second, minB)
	}
	last := f.backfill(ctx, send)
	backoff := minB
	for ctx.Err() == nil {
		started, got := time.Now(), false
		err := f.stream(ctx, last, send, func(ev client.Event) {
			got = true
			last = max(last, ev.ID)
		})
		if ctx.Err() != nil {
			return
		}
		if got || time.Since(started) > maxB {
			backoff = minB
		}
		send(StreamDownMsg{Err: err, Retry: backoff})
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		backoff = min(backoff*2, maxB)
	}
}

// liveGrace is how long an opened stream must stay open (or deliver an event) to count
// as live: an error answer (401, 503) also has a first byte, and ends within it.
const liveGrace = 100 * time.Millisecond

// stream follows one connection of the stream. The answer's first byte means the server
// has subscribed and fixed its cursor; once the answer proves to be the stream (an event
// comes, or it stays open for liveGrace) StreamLiveMsg is sent, before any of its events:
// reads the model makes from that moment cannot miss a change no event will announce.
func (f Feed) stream(ctx context.Context, last int64, send func(tea.Msg), saw func(client.Event)) error {
	ctx, cancel := context.WithCancel(ctx)
	var (
		mu        sync.Mutex
		live, end bool
		once      sync.Once
	)
	goLive := func() { // with mu held
		if !live && !end {
			live = true
			send(StreamLiveMsg{})
		}
	}
	opened := make(chan struct{})
	trace := &httptrace.ClientTrace{GotFirstResponseByte: func() { once.Do(func() { close(opened) }) }}
	// The transport calls the trace on its own goroutine: never block it.
	handed := make(chan struct{})
	go func() {
		defer close(handed)
		select {
		case <-opened:
		case <-ctx.Done():
			return
		}
		t := time.NewTimer(liveGrace)
		defer t.Stop()
		select {
		case <-t.C:
			mu.Lock()
			goLive()
			mu.Unlock()
		case <-ctx.Done():
		}
	}()
	defer func() {
		mu.Lock()
		end = true
		mu.Unlock()
		cancel()
		<-handed
	}()
	return f.API.StreamEvents(httptrace.WithClientTrace(ctx, trace), f.PlanID, last, func(ev client.Event) error {
		mu.Lock()
		goLive()
		mu.Unlock()
		saw(ev)
		send(EventMsg{Event: ev})
		return nil
	})
}

// backfill sends the most recent events of the plan (of every plan without one) and
// returns the id to stream after; 0 (live from now) on error, or when the log is too long
// to page.
func (f Feed) backfill(ctx context.Context, send func(tea.Msg)) int64 {
	var evs []client.Event
	var after int64
	for range backfillPages {
		page, err := f.API.ListEvents(ctx, client.EventQuery{PlanID: f.PlanID, After: after, Limit: 1000})
		if err != nil {
			return 0
		}
		evs = append(evs, page.Events...)
		if len(evs) > maxEvents {
			evs = evs[len(evs)-maxEvents:]
		}
		if page.NextAfter > after {
			after = page.NextAfter
		}
		if len(page.Events) < 1000 {
			if len(evs) > 0 {
				send(EventsMsg{Events: evs})
			}
			return after
		}
	}
	return 0
}
