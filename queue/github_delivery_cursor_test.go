package queue_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/whilly-go/whilly/queue"
	"github.com/whilly-go/whilly/testkit"
)

// A replica that dies holding the delivery cursor blocks polling only until its lease
// runs out on the database clock; then another takes it, and the dead one's late
// release changes nothing. The cursor never moves backwards.
func TestTheDeliveryCursorLeaseOutlivesADeadReplicaOnly(t *testing.T) {
	t.Parallel()
	st := queue.NewStore(testkit.DB(t), nil, queue.Config{})
	ctx := context.Background()
	dead, ok, err := st.LeaseDeliveryCursor(ctx, 7, time.Second)
	if err != nil || !ok || !dead.Since.IsZero() {
		t.Fatalf("first lease: %+v %v %v", dead, ok, err)
	}
	if _, ok, err := st.LeaseDeliveryCursor(ctx, 7, time.Second); ok || err != nil {
		t.Fatalf("a second replica took a held cursor: %v %v", ok, err)
	}
	if _, ok, err := st.LeaseDeliveryCursor(ctx, 8, time.Second); !ok || err != nil {
		t.Fatalf("another App's cursor is independent: %v %v", ok, err)
	}
	var live queue.DeliveryCursor
	deadline := time.Now().Add(10 * time.Second)
	for {
		if live, ok, err = st.LeaseDeliveryCursor(ctx, 7, time.Minute); err != nil {
			t.Fatal(err)
		}
		if ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the dead replica's lease never ran out")
		}
		time.Sleep(50 * time.Millisecond)
	}
	at := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	if err := st.ReleaseDeliveryCursor(ctx, dead, at.Add(time.Hour)); !errors.Is(err, queue.ErrLeaseLost) {
		t.Errorf("the dead replica's release: %v, want ErrLeaseLost", err)
	}
	if err := st.ReleaseDeliveryCursor(ctx, live, at); err != nil {
		t.Fatal(err)
	}
	c, ok, err := st.LeaseDeliveryCursor(ctx, 7, time.Minute)
	if err != nil || !ok || !c.Since.Equal(at) {
		t.Fatalf("after the release: %+v %v %v, want the cursor at %s", c, ok, err, at)
	}
	if err := st.ReleaseDeliveryCursor(ctx, c, at.Add(-time.Hour)); err != nil {
		t.Fatal(err)
	}
	if c, _, _ = st.LeaseDeliveryCursor(ctx, 7, time.Minute); !c.Since.Equal(at) {
		t.Errorf("the cursor moved back to %s", c.Since)
	}
}
