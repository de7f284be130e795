package control

import (
	"container/list"
	"slices"
	"strings"
	"sync"

	"github.com/whilly-go/whilly/queue"
)

// waitRoom parks long-polling claims so that an event wakes as many of them as it can
// give work to, not all of them. Claims that ask alike — the same plan ("" any plan),
// worker labels and scopes — form a class: whatever one of them may claim, any of them
// may. A class holds one listener subscription however many claims wait in it. An event
// that can make tasks claimable wakes the class's longest-asleep claims, one per event
// of the notification (Count); a claim that then gets a task wakes one more, in case there
// is more to take (a COMPLETE may unblock several tasks). Plan-level events (the plan
// ended, resumed, its budget changed; the listener's resync) wake the whole class, since
// each claim must answer for itself.
//
// Without it, one task appearing in a plan that 10,000 workers wait on woke all 10,000
// handlers, which all queried the database for the one task (whilly bench idle: wake-up
// p99 2.8 s). A claim whose worker was revoked while it waited finds nothing when woken
// and passes nothing on; the others in its class then get that task on the next event or
// when their wait ends (at most the claim wait cap, 30 s).
type waitRoom struct {
	listener *queue.Listener
	mu       sync.Mutex
	classes  map[string]*waitClass
}

type waitClass struct {
	key     string
	members int       // claims in the class, asleep or not
	asleep  list.List // of *waiter, longest asleep first
	seq     uint64    // notifications the class has seen
	cancel  func()    // ends the class's subscription
	done    chan struct{}
}

// waiter is one long-polling claim in its class.
type waiter struct {
	room  *waitRoom
	class *waitClass
	wake  chan struct{} // a token when woken
	elem  *list.Element // its place in class.asleep while asleep, else nil
	seq   uint64        // class.seq when its latest attempt began
}

func newWaitRoom(l *queue.Listener) *waitRoom {
	return &waitRoom{listener: l, classes: map[string]*waitClass{}}
}

// classKey names the class of a claim request.
func classKey(req queue.ClaimRequest) string {
	labels := slices.Clone(req.Labels)
	slices.Sort(labels)
	return req.PlanID + "\x00" + strings.Join(labels, "\x01") + "\x00" + strings.Join(req.Scopes.Strings(), "\x01")
}

// join enters req's class, subscribing the class first when it is new: events from now
// on reach the waiter, so it may make its first attempt after join returns.
func (r *waitRoom) join(req queue.ClaimRequest) *waiter {
	key := classKey(req)
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.classes[key]
	if c == nil {
		c = &waitClass{key: key, done: make(chan struct{})}
		sub, cancel := r.listener.Subscribe(claimFilter(req.PlanID))
		c.cancel = cancel
		r.classes[key] = c
		go r.run(c, sub)
	}
	c.members++
	return &waiter{room: r, class: c, wake: make(chan struct{}, 1), seq: c.seq}
}

// run hands the class's notifications to notify until the class empties.
func (r *waitRoom) run(c *waitClass, sub <-chan queue.Notification) {
	for {
		select {
		case n := <-sub:
			r.notify(c, n)
		case <-c.done:
			return
		}
	}
}

// notify wakes the claims n can give work to.
func (r *waitRoom) notify(c *waitClass, n queue.Notification) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c.seq++
	k := c.asleep.Len()
	if taskLevel(n.Type) {
		k = min(k, max(n.Count, 1))
	}
	r.wakeLocked(c, k)
}

// wakeLocked wakes the k longest-asleep claims of c.
func (r *waitRoom) wakeLocked(c *waitClass, k int) {
	for ; k > 0 && c.asleep.Len() > 0; k-- {
		w := c.asleep.Remove(c.asleep.Front()).(*waiter)
		w.elem = nil
		select {
		case w.wake <- struct{}{}:
		default:
		}
	}
}

// taskLevel reports whether events of type typ make tasks claimable one by one (so that
// waking one claim per event serves them); the others concern every claim of the plan.
func taskLevel(typ string) bool {
	switch typ {
	case queue.EventTaskCreated, queue.EventComplete, queue.EventRelease, queue.EventRetry, queue.EventReset,
		queue.EventTaskSkipped, queue.EventTaskUpdated:
		return true
	}
	return false
}

// attempt notes that the waiter starts an attempt to claim.
func (w *waiter) attempt() {
	w.room.mu.Lock()
	defer w.room.mu.Unlock()
	w.seq = w.class.seq
}

// sleep parks the waiter: it returns false at once when the class saw a notification
// since its attempt began (the attempt may have missed what it announced); else true,
// once the waiter is asleep, to wait on w.wake.
func (w *waiter) sleep() bool {
	w.room.mu.Lock()
	defer w.room.mu.Unlock()
	if w.class.seq != w.seq {
		return false
	}
	select {
	case <-w.wake: // a stale token of an earlier wake-up
	default:
	}
	w.elem = w.class.asleep.PushBack(w)
	return true
}

// awake takes the waiter out of the queue after a wait that ended otherwise than by
// w.wake. When it was woken all the same (a race with the timer or its context) and
// passOn is set, the wake-up goes to the next claim, since this one will not use it.
func (w *waiter) awake(passOn bool) {
	w.room.mu.Lock()
	defer w.room.mu.Unlock()
	if w.elem != nil {
		w.class.asleep.Remove(w.elem)
		w.elem = nil
		return
	}
	select {
	case <-w.wake:
		if passOn {
			w.room.wakeLocked(w.class, 1)
		}
	default:
	}
}

// claimed passes the baton: the waiter got a task, so there may be more to take.
func (w *waiter) claimed() {
	w.room.mu.Lock()
	defer w.room.mu.Unlock()
	w.room.wakeLocked(w.class, 1)
}

// leave takes the waiter out of its class; the last one out ends the class.
func (w *waiter) leave() {
	r := w.room
	r.mu.Lock()
	defer r.mu.Unlock()
	if w.elem != nil {
		w.class.asleep.Remove(w.elem)
		w.elem = nil
	}
	c := w.class
	c.members--
	if c.members == 0 {
		delete(r.classes, c.key)
		c.cancel()
		close(c.done)
	}
}
