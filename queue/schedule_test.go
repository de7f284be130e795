package queue_test

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"

	"github.com/whilly-go/whilly/queue"
)

// TestGitHubJobsWaitForAProcessWithTheApp: a control plane without the App (whilly run,
// dashboard, bench) runs River over the same database, but never takes a GitHub job,
// which it would fail as "job kind is not registered": the jobs are in their own queue.
func TestGitHubJobsWaitForAProcessWithTheApp(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, pool := newStore(t)
	inserter, err := river.NewClient(riverpgxv5.New(pool), &river.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := inserter.Insert(ctx, queue.GitHubDeliveryArgs{DeliveryID: "d-1"}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := inserter.Insert(ctx, queue.PullDeliveriesArgs{}, nil); err != nil {
		t.Fatal(err)
	}
	rc, err := queue.NewRiver(st, slog.New(slog.DiscardHandler), queue.JobsConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if err := rc.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = rc.Stop(context.WithoutCancel(ctx)) }()
	// The lease reaper runs at start: once it completed, this client has fetched jobs.
	deadline := time.Now().Add(30 * time.Second)
	for {
		var reaped int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE kind = $1 AND state = 'completed'`, queue.KindReapLeases).Scan(&reaped); err != nil {
			t.Fatal(err)
		}
		if reaped > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the lease reaper never ran")
		}
		time.Sleep(20 * time.Millisecond)
	}
	rows, err := pool.Query(ctx, `SELECT kind, queue, state::text, attempt FROM river_job WHERE kind IN ($1, $2)`,
		queue.KindGitHubDelivery, queue.KindPullDeliveries)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		var kind, q, state string
		var attempt int
		if err := rows.Scan(&kind, &q, &state, &attempt); err != nil {
			t.Fatal(err)
		}
		n++
		if _, ours := queue.GitHubQueues()[q]; !ours || state != "available" || attempt != 0 {
			t.Errorf("%s: queue %s, %s after %d attempts; want waiting in a GitHub queue, untouched", kind, q, state, attempt)
		}
	}
	if n != 2 {
		t.Fatalf("found %d GitHub jobs, want 2", n)
	}
}

// TestSchedulesOfManyReplicasMakeOneJob: every replica enqueues the periodic job itself
// (none depends on leading River), and the uniqueness by period makes one job of them.
func TestSchedulesOfManyReplicasMakeOneJob(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, pool := newStore(t)
	inserter, err := river.NewClient(riverpgxv5.New(pool), &river.Config{})
	if err != nil {
		t.Fatal(err)
	}
	sc := queue.Schedule{Name: "pull", Every: time.Hour, RunOnStart: true, Args: func() (river.JobArgs, *river.InsertOpts) {
		return queue.PullDeliveriesArgs{}, &river.InsertOpts{UniqueOpts: river.UniqueOpts{ByPeriod: time.Hour}}
	}}
	counted := &countingInserter{Inserter: inserter}
	for range 3 {
		queue.RunSchedules(ctx, counted, slog.New(slog.DiscardHandler), []queue.Schedule{sc})
	}
	deadline := time.Now().Add(10 * time.Second)
	for counted.n.Load() < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("%d of 3 schedules inserted their job", counted.n.Load())
		}
		time.Sleep(10 * time.Millisecond)
	}
	var jobs int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE kind = $1`, queue.KindPullDeliveries).Scan(&jobs); err != nil {
		t.Fatal(err)
	}
	if jobs != 1 {
		t.Fatalf("%d jobs from three replicas' schedules, want 1", jobs)
	}
}

// countingInserter counts the inserts that returned.
type countingInserter struct {
	queue.Inserter
	n atomic.Int32
}

func (c *countingInserter) Insert(ctx context.Context, args river.JobArgs, opts *river.InsertOpts) (*rivertype.JobInsertResult, error) {
	defer c.n.Add(1)
	return c.Inserter.Insert(ctx, args, opts)
}
