package queue

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// group runs calls in batches, one batch of a key at a time: calls of a key that arrive
// while a batch of that key runs wait for it, then run together in one statement. Under
// load, N concurrent claims or completions of a plan cost one round trip, one commit and
// one NOTIFY instead of N; a call that finds nothing running runs at once, so nothing
// waits for a batch to fill. The caller that finds no batch running leads: it runs the
// batch (itself and whoever waits, up to max) and hands the lead to the first caller
// still waiting. (Two batches of a key at once were slower: smaller batches, and each
// skipping the other's locked rows.)
type group[K comparable, In, Out any] struct {
	max int
	// run answers every call of a batch: out[i] and errs[i] belong to in[i]. Its context
	// is not the leader's, whose request may end while the others still wait.
	run func(ctx context.Context, key K, in []In) (out []Out, errs []error)

	mu sync.Mutex
	// waiting holds, for each key with a batch running, the calls no batch has taken yet.
	waiting map[K][]*groupCall[In, Out]
}

type groupCall[In, Out any] struct {
	in   In
	out  Out
	err  error
	done chan struct{} // closed when out and err are set
	lead chan struct{} // closed when this call must run the next batch
}

// batchTimeout bounds one batch's statement.
const batchTimeout = 30 * time.Second

// do runs in with the other calls of key, and returns its answer.
func (g *group[K, In, Out]) do(ctx context.Context, key K, in In) (Out, error) {
	c := &groupCall[In, Out]{in: in, done: make(chan struct{}), lead: make(chan struct{})}
	g.mu.Lock()
	if g.waiting == nil {
		g.waiting = map[K][]*groupCall[In, Out]{}
	}
	q, running := g.waiting[key]
	if running {
		g.waiting[key] = append(q, c)
	} else {
		g.waiting[key] = nil // this call leads the next batch
	}
	g.mu.Unlock()
	if running {
		select {
		case <-c.done:
			return c.out, c.err
		case <-c.lead: // taken off the line by the batch that handed over
		}
	}
	g.mu.Lock()
	q = g.waiting[key]
	n := min(len(q), g.max-1)
	batch := append([]*groupCall[In, Out]{c}, q[:n]...)
	g.waiting[key] = append([]*groupCall[In, Out](nil), q[n:]...)
	g.mu.Unlock()

	finished := false
	defer func() {
		if !finished { // run panicked: answer the others before the panic goes on
			for _, b := range batch {
				b.err = fmt.Errorf("batch of %d calls failed", len(batch))
			}
		}
		for _, b := range batch[1:] {
			close(b.done)
		}
		g.mu.Lock()
		if q := g.waiting[key]; len(q) > 0 {
			g.waiting[key] = q[1:]
			close(q[0].lead)
		} else {
			delete(g.waiting, key)
		}
		g.mu.Unlock()
	}()
	ins := make([]In, len(batch))
	for i, b := range batch {
		ins[i] = b.in
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), batchTimeout)
	defer cancel()
	out, errs := g.run(rctx, key, ins)
	for i, b := range batch {
		b.out, b.err = out[i], errs[i]
	}
	finished = true
	return c.out, c.err
}

// fill returns n copies of err, the answer of a batch that failed as a whole.
func fill(n int, err error) []error {
	errs := make([]error, n)
	for i := range errs {
		errs[i] = err
	}
	return errs
}
