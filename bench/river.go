package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/whilly-go/whilly/internal/logging"
)

// riverQueue is the queue of the River baseline's jobs: no control plane works it.
const riverQueue = "whilly_bench"

// noopArgs is the River baseline's job: it does nothing.
type noopArgs struct {
	N int `json:"n"`
}

func (noopArgs) Kind() string { return "whilly_bench_noop" }

type noopWorker struct {
	river.WorkerDefaults[noopArgs]
}

func (noopWorker) Work(context.Context, *river.Job[noopArgs]) error { return nil }

// RiverSettings are the fetch settings and workers a River baseline runs with.
type RiverSettings struct {
	FetchCooldown, FetchPollInterval time.Duration
	MaxWorkers                       int
}

// The River baselines. RiverRecommended is River as its documentation sets it up:
// the client's default fetch settings (FetchCooldown 100 ms, FetchPollInterval 1 s,
// the values River documents and recommends) and the 100 workers of the default queue in
// River's getting-started example. RiverTuned is River as its own benchmark (riverbench)
// runs it for the most jobs per second.
var (
	RiverRecommended = RiverSettings{FetchCooldown: 100 * time.Millisecond, FetchPollInterval: time.Second, MaxWorkers: 100}
	RiverTuned       = RiverSettings{FetchCooldown: 2 * time.Millisecond, FetchPollInterval: 20 * time.Millisecond, MaxWorkers: 2000}
)

func (r RiverSettings) String() string {
	return fmt.Sprintf("FetchCooldown %s, FetchPollInterval %s, %d workers", r.FetchCooldown, r.FetchPollInterval, r.MaxWorkers)
}

// riverLoop is a River baseline: n no-op jobs are inserted into a queue of their own,
// then a River client with settings rs works them all on the same database, through
// pool. It returns jobs per second, from the client's start to the last completion its
// subscription reported; the insert is not timed (the tasks of the other phases are
// imported before their clock starts too).
func (e *env) riverLoop(ctx context.Context, pool *pgxpool.Pool, n int, rs RiverSettings) (float64, error) {
	defer func() {
		// Completed jobs would stay until River's cleaner runs: remove them now.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if _, err := pool.Exec(ctx, `DELETE FROM river_job WHERE queue = $1`, riverQueue); err != nil {
			e.log.WarnContext(ctx, "bench: delete the River baseline's jobs", "error", err)
		}
	}()
	workers := river.NewWorkers()
	river.AddWorker(workers, &noopWorker{})
	rc, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		FetchCooldown:     rs.FetchCooldown,
		FetchPollInterval: rs.FetchPollInterval,
		Logger:            logging.Demote(e.log),
		Queues:            map[string]river.QueueConfig{riverQueue: {MaxWorkers: rs.MaxWorkers}},
		Workers:           workers,
	})
	if err != nil {
		return 0, fmt.Errorf("river baseline: create the client: %w", err)
	}
	const batch = 5000
	params := make([]river.InsertManyParams, 0, batch)
	for i := range n {
		params = append(params, river.InsertManyParams{Args: noopArgs{N: i + 1}, InsertOpts: &river.InsertOpts{Queue: riverQueue}})
		if len(params) == batch || i == n-1 {
			if _, err := rc.InsertMany(ctx, params); err != nil {
				return 0, fmt.Errorf("river baseline: insert jobs: %w", err)
			}
			params = params[:0]
		}
	}
	events, cancel := rc.SubscribeConfig(&river.SubscribeConfig{
		ChanSize: n + 1,
		Kinds:    []river.EventKind{river.EventKindJobCompleted, river.EventKindJobFailed, river.EventKindJobCancelled},
	})
	defer cancel()
	begin := time.Now()
	if err := rc.Start(ctx); err != nil {
		return 0, fmt.Errorf("river baseline: start the client: %w", err)
	}
	defer func() {
		stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if err := rc.Stop(stopCtx); err != nil {
			e.log.WarnContext(ctx, "bench: stop the River baseline's client", "error", err)
		}
	}()
	limit := time.Duration(max(60, n/100)) * time.Second
	timeout := time.After(limit)
	var last time.Time
	for done := 0; done < n; {
		select {
		case ev := <-events:
			if ev == nil {
				return 0, fmt.Errorf("river baseline: the subscription closed after %d of %d jobs", done, n)
			}
			if ev.Kind != river.EventKindJobCompleted {
				return 0, fmt.Errorf("river baseline: job %d ended %s", ev.Job.ID, ev.Kind)
			}
			done++
			last = time.Now()
		case <-timeout:
			return 0, fmt.Errorf("river baseline: %d of %d jobs worked within %s", done, n, limit)
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	return float64(n) / last.Sub(begin).Seconds(), nil
}
