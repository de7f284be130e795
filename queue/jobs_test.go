package queue_test

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/whilly-go/whilly/queue"
	"github.com/whilly-go/whilly/testkit"
)

type burstArgs struct {
	Round, N int
}

func (burstArgs) Kind() string { return "whilly.test_burst" }

func (burstArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: queue.QueueGitHubIntake}
}

// The insert-only client notifies the workers of each of a burst of webhook deliveries
// a few milliseconds apart. With River's default (100 ms) it stayed silent for the second
// of two deliveries 25 ms apart, and with 20 ms for the second to fourth of four 3 ms
// apart: their jobs waited for the workers' next fetch, up to their poll.
func TestTheInserterNotifiesEachInsertOfABurst(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	pool := testkit.DB(t)
	jobs, err := queue.NewInserter(queue.NewStore(pool, nil, queue.Config{}))
	if err != nil {
		t.Fatal(err)
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	var schema string
	if err := conn.QueryRow(ctx, `SELECT current_schema()`).Scan(&schema); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `LISTEN `+pgx.Identifier{schema + ".river_insert"}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	const burst = 4
	for n := range burst {
		if n > 0 {
			time.Sleep(3 * time.Millisecond) // the next delivery
		}
		if _, err := jobs.Insert(ctx, burstArgs{N: n}, nil); err != nil {
			t.Fatal(err)
		}
	}
	for i := range burst {
		wctx, wcancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := conn.Conn().WaitForNotification(wctx)
		wcancel()
		if err != nil {
			t.Fatalf("insert notifications: got %d of %d (%v)", i, burst, err)
		}
	}
}

// burstWorker notes when each job of a round started.
type burstWorker struct {
	river.WorkerDefaults[burstArgs]
	started chan burstStart
}

type burstStart struct {
	round, n int
	at       time.Time
}

func (w *burstWorker) Work(_ context.Context, j *river.Job[burstArgs]) error {
	w.started <- burstStart{j.Args.Round, j.Args.N, time.Now()}
	return nil
}

// Webhook deliveries come in bursts (a maintainer labels several issues at once), and
// each job of a burst starts soon after it is committed, not at the workers' next poll,
// once a second: with the inserter silent for 20 ms after a notification, the second to
// fourth of deliveries 3 ms apart waited 0.5–0.8 s, in every round. Deliveries that
// commit together are covered by the deliveries' queue's poll (IntakePollInterval). The
// control plane is the one serve runs: NewInserter, NewRiver with GitHubQueues.
func TestABurstOfDeliveriesStartsAtOnce(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st, _ := newStore(t)
	jobs, err := queue.NewInserter(st)
	if err != nil {
		t.Fatal(err)
	}
	w := &burstWorker{started: make(chan burstStart, 16)}
	rc, err := queue.NewRiver(st, slog.New(slog.DiscardHandler), queue.JobsConfig{Queues: queue.GitHubQueues(),
		Register: func(ws *river.Workers) []*river.PeriodicJob { river.AddWorker(ws, w); return nil }})
	if err != nil {
		t.Fatal(err)
	}
	if err := rc.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = rc.Stop(context.WithoutCancel(ctx)) }()
	const (
		rounds = 8
		burst  = 4
		late   = 400 * time.Millisecond // well under River's poll of 1 s, far over a fetch
	)
	for round := range rounds {
		time.Sleep(250 * time.Millisecond) // apart from the last burst, at another point of the poll
		inserted := make([]time.Time, burst)
		insert := func(n int) {
			if _, err := jobs.Insert(ctx, burstArgs{Round: round, N: n}, nil); err != nil {
				t.Error(err)
			}
			inserted[n] = time.Now()
		}
		if round%2 == 0 { // a few milliseconds apart, as separate webhook requests
			for n := range burst {
				insert(n)
				time.Sleep(3 * time.Millisecond)
			}
		} else { // at the same moment
			var wg sync.WaitGroup
			for n := range burst {
				wg.Go(func() { insert(n) })
			}
			wg.Wait()
		}
		for range burst {
			select {
			case s := <-w.started:
				if s.round != round {
					t.Fatalf("round %d: a job of round %d started", round, s.round)
				}
				if wait := s.at.Sub(inserted[s.n]); wait > late {
					t.Errorf("round %d: delivery %d of %d started %v after its insert, want within %v", round, s.n+1, burst, wait, late)
				}
			case <-ctx.Done():
				t.Fatalf("round %d: the jobs never started", round)
			}
		}
	}
}
