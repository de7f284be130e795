package queue

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"
)

// ErrFollowStopped is returned by Follower.Next once FollowOptions.Stop is closed.
var ErrFollowStopped = errors.New("event follower stopped")

// FollowOptions says which events a Follower hands out.
type FollowOptions struct {
	PlanID string // only this plan's events ("" for every plan)
	Scopes Scopes // only events of plans these allow
	After  int64  // hand out events after this id only
	// Stop ends Next with ErrFollowStopped when it is closed (a draining server).
	Stop <-chan struct{}
}

// followPage is how many events one read of a follower takes.
const followPage = 1000

// followHeldRecheck is how soon a follower whose events were held back behind a
// transaction in flight reads again: that transaction may end by rolling back, which
// notifies nobody.
const followHeldRecheck = 250 * time.Millisecond

// followDegradedPoll is how often a follower reads while the LISTEN connection is down and
// no notification can wake it.
const followDegradedPoll = time.Second

// Follower follows the events log live: every event after FollowOptions.After, each
// exactly once, in id order as far as commits allow. It is the one implementation behind
// the SSE stream and `whilly events tail`.
//
// Event ids are drawn before commit, so a transaction may commit an id lower than one
// already committed. Reads stop below the first id a transaction in flight may still
// commit (SettledEvents, unsettledSQL), so a cursor never passes an event that commits late:
// such an event is waited for as long as its transaction is open, and read again every
// followHeldRecheck in case it rolled back. A writer that bypasses that floor (a raw
// nextval) may still commit below the cursor; its notification names its ids, and that
// range is read again and the events not handed out yet are handed out then.
//
// It wakes on the Listener's notifications, and polls only while the LISTEN connection is
// down or events are held back. A Follower is not safe for concurrent use.
type Follower struct {
	store  *Store
	ln     *Listener
	opts   FollowOptions
	wake   <-chan Notification
	cancel func()

	start  int64     // nothing at or below it is handed out
	cursor int64     // the highest id handed out, or start
	sent   *idWindow // which recent ids were handed out
	due    bool      // read before waiting: the last page was full, or a wake-up came
	held   bool      // the last read stopped before an id still in flight
	readAt time.Time // when the last read began: polls are counted from it
	late   []idRange // ranges at or below the cursor to read again
}

// idRange is a range of event ids of one plan ("" for any).
type idRange struct {
	planID string
	lo, hi int64
}

// Follow subscribes to ln (which must be running for wake-ups to come) and returns a
// follower of the events after opts.After. Events committed before the first Next are
// read by it; call Close when done.
func (s *Store) Follow(ln *Listener, opts FollowOptions) *Follower {
	wake, cancel := ln.Subscribe(func(n Notification) bool { return opts.PlanID == "" || n.PlanID == opts.PlanID })
	return &Follower{
		store: s, ln: ln, opts: opts, wake: wake, cancel: cancel,
		start: opts.After, cursor: opts.After, sent: &idWindow{hi: opts.After}, due: true,
	}
}

// Close unsubscribes the follower; it may be called more than once.
func (f *Follower) Close() { f.cancel() }

// Cursor returns the highest id handed out, or FollowOptions.After before any.
func (f *Follower) Cursor() int64 { return f.cursor }

// Next waits for events and returns them: those after the cursor in id order, preceded by
// any that committed late below it; at most a page at a time. With idle > 0 it returns no
// events and no error once idle has passed without any, so that the caller can send a
// keep-alive. It returns ctx's error when ctx ends and ErrFollowStopped once Stop is
// closed, whether or not events are waiting.
func (f *Follower) Next(ctx context.Context, idle time.Duration) ([]Event, error) {
	var deadline <-chan time.Time
	if idle > 0 {
		t := time.NewTimer(idle)
		defer t.Stop()
		deadline = t.C
	}
	for {
		select {
		case <-f.opts.Stop: // even while events keep coming
			return nil, ErrFollowStopped
		default:
		}
		if f.due {
			evs, err := f.read(ctx)
			if err != nil {
				return nil, err
			}
			if len(evs) > 0 {
				return evs, nil
			}
		}
		if err := f.wait(ctx, deadline); err != nil || !f.due {
			return nil, err
		}
	}
}

// wait blocks until a notification comes or it is time to read again (f.due), deadline
// fires (not due), or ctx ends or Stop closes (an error).
func (f *Follower) wait(ctx context.Context, deadline <-chan time.Time) error {
	var poll <-chan time.Time
	if in, ok := f.pollIn(); ok {
		t := time.NewTimer(in)
		defer t.Stop()
		poll = t.C
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-f.opts.Stop:
		return ErrFollowStopped
	case <-deadline:
	case <-poll:
		f.due = true
	case n := <-f.wake:
		f.noteLate(n)
		for more := true; more; {
			select {
			case n := <-f.wake:
				f.noteLate(n)
			default:
				more = false
			}
		}
		f.due = true
	}
	return nil
}

// pollIn is how long the follower may still wait for a notification before reading
// anyway; ok is false when it may wait as long as it takes. It is counted from the last
// read, not from this wait: a caller whose idle deadline comes sooner (a stream's
// keep-alive) calls Next again and again, and each call must not put the read off anew.
func (f *Follower) pollIn() (in time.Duration, ok bool) {
	switch {
	case f.held:
		return time.Until(f.readAt.Add(followHeldRecheck)), true
	case !f.ln.Ready():
		return time.Until(f.readAt.Add(followDegradedPoll)), true
	}
	return 0, false
}

// noteLate records the part of n's id range that lies at or below the cursor — ids a read
// after the cursor would never see. Ids at or below start, and ids too old for the sent
// window to tell apart, are left out.
func (f *Follower) noteLate(n Notification) {
	if n.ID <= 0 {
		return // a resync: the read after the cursor covers it
	}
	hi := min(n.ID, f.cursor)
	lo := max(n.Lowest(), f.start+1, f.sent.floor()+1)
	if lo > hi {
		return
	}
	planID := f.opts.PlanID
	if planID == "" {
		planID = n.PlanID
	}
	f.late = append(f.late, idRange{planID: planID, lo: lo, hi: hi})
}

// read returns the late events not handed out yet, then a page after the cursor, and marks
// them handed out. On an error nothing is marked: the next read tries again.
func (f *Follower) read(ctx context.Context) (out []Event, err error) {
	f.readAt = time.Now()
	late := slices.Clone(f.late)
	defer func() {
		if err != nil {
			for _, e := range out {
				f.sent.unmark(e.ID)
			}
			out, f.late = nil, late
		}
	}()
	for len(f.late) > 0 {
		r := f.late[0]
		evs, err := f.store.Events(ctx, EventFilter{PlanID: r.planID, After: r.lo - 1, Limit: followPage, Scopes: f.opts.Scopes})
		if err != nil {
			return out, fmt.Errorf("read events %d to %d again: %w", r.lo, r.hi, err)
		}
		for _, e := range evs {
			if e.ID > r.hi {
				break
			}
			if !f.sent.has(e.ID) {
				out = append(out, e)
				f.sent.mark(e.ID) // before the next range, which may overlap this one
			}
		}
		if len(evs) == followPage && evs[len(evs)-1].ID < r.hi {
			f.late[0].lo = evs[len(evs)-1].ID + 1
			continue
		}
		f.late = f.late[1:]
	}
	page, err := f.store.SettledEvents(ctx, EventFilter{PlanID: f.opts.PlanID, After: f.cursor, Limit: followPage, Scopes: f.opts.Scopes})
	if err != nil {
		return out, fmt.Errorf("read events after %d: %w", f.cursor, err)
	}
	f.held = page.Held
	f.due = len(page.Events) == followPage
	for _, e := range page.Events {
		out = append(out, e)
		f.sent.mark(e.ID)
		f.cursor = max(f.cursor, e.ID)
	}
	return out, nil
}

// SettledEvents is EventPage for a reader that moves a cursor (a follower, a client paging
// with ?after=): should an event below the page's last id have committed while the page
// was read, it reads the page again, so that the cursor never passes it.
//
// EventPage stops below the floors of the transactions in flight, read from pg_locks after
// its snapshot is taken. A transaction that commits between the two is in neither: its
// events are missing from the page while later ones are in it. Counting the page's range
// again in a later statement, whose snapshot follows that pg_locks read, finds them: such
// a transaction committed before it. (A transaction whose floor came after the pg_locks
// read drew its ids after every id of the page.)
func (s *Store) SettledEvents(ctx context.Context, f EventFilter) (EventPage, error) {
	for try := 1; ; try++ {
		page, err := s.EventPage(ctx, f)
		if err != nil || len(page.Events) == 0 || try == settleTries {
			return page, err // after settleTries, a follower hands a late event out late (noteLate)
		}
		var n int
		if err := s.pool.QueryRow(ctx, `
			SELECT count(*) FROM events e
			WHERE e.id > $1 AND e.id <= $2 AND ($3 = '' OR e.plan_id = $3)
			  AND ($4::text[] = '{}' OR e.plan_id IN (SELECT p.id FROM plans p WHERE `+scopeMatchSQL("$4")+`))`,
			f.After, page.Events[len(page.Events)-1].ID, f.PlanID, f.Scopes.Strings()).Scan(&n); err != nil {
			return EventPage{}, fmt.Errorf("count events after %d: %w", f.After, err)
		}
		if n == len(page.Events) {
			return page, nil
		}
	}
}

// settleTries is how many times SettledEvents reads a page whose range was still filling.
const settleTries = 5

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

func (w *idWindow) unmark(id int64) {
	if id <= w.hi && id > w.floor() {
		word, bit := w.slot(id)
		w.bits[word] &^= bit
	}
}

func (w *idWindow) has(id int64) bool {
	if id > w.hi || id <= w.floor() {
		return false
	}
	word, bit := w.slot(id)
	return w.bits[word]&bit != 0
}
