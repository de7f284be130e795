package queue_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/whilly-go/whilly/internal/testkit"
	"github.com/whilly-go/whilly/queue"
)

type burstArgs struct{ N int }

func (burstArgs) Kind() string { return "whilly.test_burst" }

// The insert-only client notifies the workers of a queue of an insert that comes more
// than FetchCooldown after the last one it notified. With River's default (100 ms) it
// stayed silent for the second of two webhook deliveries 25 ms apart, and that delivery's
// job waited for the workers' next fetch: up to 100 ms before its intake began.
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
	for i := range 2 {
		if i > 0 {
			time.Sleep(queue.FetchCooldown + 5*time.Millisecond) // the next delivery
		}
		if _, err := jobs.Insert(ctx, burstArgs{N: i}, nil); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 2 {
		wctx, wcancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := conn.Conn().WaitForNotification(wctx)
		wcancel()
		if err != nil {
			t.Fatalf("insert notifications: got %d of 2 (%v)", i, err)
		}
	}
}
