package control_test

import (
	"bufio"
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/whilly-go/whilly/control"
	"github.com/whilly-go/whilly/control/client"
	"github.com/whilly-go/whilly/testkit"
)

// stream follows the event stream of a plan in the background and hands over its events.
func stream(t *testing.T, e *env, planID string, lastEventID int64) <-chan client.Event {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	out := make(chan client.Event, 1000)
	done := make(chan error, 1)
	before := e.listener.Subscribers()
	go func() {
		done <- e.client(e.read).StreamEvents(ctx, planID, lastEventID, func(ev client.Event) error {
			out <- ev
			return nil
		})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("StreamEvents ended with %v", err)
		}
	})
	testkit.Eventually(t, 20*time.Second, "the stream to subscribe", func() bool { return e.listener.Subscribers() > before })
	return out
}

func nextEvent(t *testing.T, ch <-chan client.Event) client.Event {
	t.Helper()
	select {
	case ev := <-ch:
		return ev
	case <-time.After(10 * time.Second):
		t.Fatal("no event within 10 s")
		return client.Event{}
	}
}

func TestStreamReplaysFromLastEventIDThenGoesLive(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	ctx := context.Background()
	e.importPlan(planDoc("s", "T1", "T2", "T3", "T4", "T5"))
	list, err := e.client(e.read).ListEvents(ctx, client.EventQuery{PlanID: "s"})
	if err != nil || len(list.Events) != 6 || list.NextAfter != list.Events[5].ID {
		t.Fatalf("ListEvents = %+v, %v", list, err)
	}
	evs := list.Events

	ch := stream(t, e, "s", evs[2].ID)
	for _, want := range evs[3:] {
		if got := nextEvent(t, ch); got.ID != want.ID || got.Type != "task.created" || got.TaskID != want.TaskID {
			t.Errorf("replayed %+v, want event %d (%s)", got, want.ID, want.TaskID)
		}
	}

	// Live: another plan's events are filtered out, this plan's arrive.
	e.importPlan(planDoc("other", "X1"))
	w, _ := e.worker()
	c, err := w.Claim(ctx, client.ClaimRequest{PlanID: "s"})
	if err != nil || c == nil {
		t.Fatalf("claim: %v, %v", c, err)
	}
	if got := nextEvent(t, ch); got.Type != "CLAIM" || got.PlanID != "s" || got.TaskID != c.Task.ID || len(got.Payload) == 0 {
		t.Errorf("live event = %+v, want the CLAIM of %s", got, c.Task.ID)
	}

	// A client reconnecting with the last id it saw before the CLAIM gets the CLAIM first.
	ch2 := stream(t, e, "s", evs[5].ID)
	if got := nextEvent(t, ch2); got.Type != "CLAIM" {
		t.Errorf("replay after %d starts with %+v", evs[5].ID, got)
	}
}

// With neither Last-Event-ID nor after, the stream starts from now.
func TestStreamWithoutLastEventIDStartsLive(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	ctx := context.Background()
	e.importPlan(planDoc("s", "T1"))
	ch := stream(t, e, "", 0)
	w, _ := e.worker()
	if c, err := w.Claim(ctx, client.ClaimRequest{}); err != nil || c == nil {
		t.Fatalf("claim: %v, %v", c, err)
	}
	if got := nextEvent(t, ch); got.Type != "CLAIM" {
		t.Errorf("first event = %+v, want the CLAIM (nothing older)", got)
	}
}

// Event ids are taken before commit: while a transaction holds an event open, later ids
// are held back (a reconnect with Last-Event-ID would skip the open one for good); once it
// commits, both arrive, in id order. GET /v1/events?after= does the same.
func TestStreamDeliversLateCommits(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	ctx := context.Background()
	ch := stream(t, e, "late", 0)
	tx, err := e.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	var early, later int64
	if err := tx.QueryRow(ctx, `INSERT INTO events (plan_id, type) VALUES ('late', 'log.early') RETURNING id`).Scan(&early); err != nil {
		t.Fatal(err)
	}
	if err := e.pool.QueryRow(ctx, `INSERT INTO events (plan_id, type) VALUES ('late', 'log.later') RETURNING id`).Scan(&later); err != nil {
		t.Fatal(err)
	}
	list, err := e.client(e.read).ListEvents(ctx, client.EventQuery{PlanID: "late"})
	if err != nil || len(list.Events) != 0 || list.NextAfter != 0 {
		t.Fatalf("GET /v1/events while %d is open = %+v, %v; want nothing yet", early, list, err)
	}
	select {
	case ev := <-ch:
		t.Fatalf("streamed %+v while event %d was still open", ev, early)
	case <-time.After(2 * heldRecheckForTests):
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	for _, want := range []int64{early, later} {
		if got := nextEvent(t, ch); got.ID != want {
			t.Errorf("after the commit: got %+v, want event %d", got, want)
		}
	}
	list, err = e.client(e.read).ListEvents(ctx, client.EventQuery{PlanID: "late"})
	if err != nil || len(list.Events) != 2 || list.Events[0].ID != early || list.NextAfter != later {
		t.Errorf("GET /v1/events after the commit = %+v, %v; want %d and %d", list, err, early, later)
	}
}

// heldRecheckForTests is how long a stream takes at most to look again at held events.
const heldRecheckForTests = 250 * time.Millisecond

// The frames on the wire: id, event and data lines, keep-alive comments, ?after= replay.
func TestStreamWireFormat(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{control: control.Config{SSEHeartbeat: 20 * time.Millisecond}})
	e.importPlan(planDoc("w/1", "T:1"))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", e.url+"/v1/events/stream?plan_id=w%2F1&after=1", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+e.read)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" || resp.Header.Get("Cache-Control") != "no-cache" {
		t.Fatalf("status %d, headers %v", resp.StatusCode, resp.Header)
	}
	sc := bufio.NewScanner(resp.Body)
	var lines []string
	sawPing := false
	for sc.Scan() && !sawPing {
		lines = append(lines, sc.Text())
		sawPing = sc.Text() == ": ping"
	}
	text := strings.Join(lines, "\n")
	want := "id: 2\nevent: task.created\ndata: {\"id\":2,\"type\":\"task.created\",\"plan_id\":\"w/1\",\"task_id\":\"T:1\","
	if !strings.HasPrefix(text, want) || !sawPing {
		t.Errorf("stream starts with:\n%s\nwant the prefix:\n%s\nand a ping", text, want)
	}
}

// A statement whose ids straddle the cursor (one id below an event already streamed, one
// above) still has all its events delivered. This needs the trigger's min_id.
func TestStreamDeliversAGroupStraddlingTheCursor(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	ctx := context.Background()
	var src string
	if err := e.pool.QueryRow(ctx, `SELECT prosrc FROM pg_proc WHERE proname = 'whilly_events_notify'`).Scan(&src); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(src, "min_id") {
		t.Skip("the events trigger does not send min_id yet")
	}
	ch := stream(t, e, "g", 0)
	tx, err := e.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	var reserved, between int64
	if err := tx.QueryRow(ctx, `SELECT nextval(pg_get_serial_sequence('events', 'id'))`).Scan(&reserved); err != nil {
		t.Fatal(err)
	}
	if err := e.pool.QueryRow(ctx, `INSERT INTO events (plan_id, type) VALUES ('g', 'log.between') RETURNING id`).Scan(&between); err != nil {
		t.Fatal(err)
	}
	if got := nextEvent(t, ch); got.ID != between {
		t.Fatalf("first event = %+v, want %d", got, between)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO events (id, plan_id, type) VALUES ($1, 'g', 'log.group'), (DEFAULT, 'g', 'log.group')`, reserved); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	got := map[int64]bool{}
	for range 2 {
		ev := nextEvent(t, ch)
		if ev.Type != "log.group" || got[ev.ID] {
			t.Errorf("unexpected %+v", ev)
		}
		got[ev.ID] = true
	}
	if !got[reserved] {
		t.Errorf("event %d, committed below the cursor, was lost: got %v", reserved, got)
	}
}
