package control_test

import (
	"context"
	"strings"
	"testing"

	"github.com/whilly-go/whilly/control/client"
	"github.com/whilly-go/whilly/plan"
	"github.com/whilly-go/whilly/queue"
)

// TestLogTailIsStoredWithTheReport: the last chunk of an attempt's log rides with its
// COMPLETE or FAIL report and is stored in the report's transaction — on the batched
// path (no cost, with or without the next claim) and the careful one (a cost) — and only
// when the report ends the attempt: bytes already stored are not stored twice (a report
// sent again after a lost answer, a tail that repeats an uploaded chunk), a report that
// is refused stores nothing, and a hostile tail is refused before anything is written.
func TestLogTailIsStoredWithTheReport(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	ctx := context.Background()
	e.importPlan(planDoc("p", "T1", "T2", "T3", "T4", "T5", "T6"))
	read := func(task, n string) client.AttemptLog {
		t.Helper()
		st, lg := e.readLog(e.read, "p", task, n, "")
		if st != 200 {
			t.Fatalf("read the log of %s attempt %s: %d", task, n, st)
		}
		return lg
	}

	// T1, batched: an uploaded chunk whose answer was lost, then a tail that repeats it.
	w, c := e.runningTask("p")
	if c.Task.ID != "T1" {
		t.Fatalf("claimed %s, want T1", c.Task.ID)
	}
	if _, err := w.AppendLog(ctx, "p", "T1", 1, client.LogChunkRequest{LeaseID: c.Lease.ID, Offset: 0, Text: "hello\n"}); err != nil {
		t.Fatal(err)
	}
	before := e.logDigest()
	for _, tc := range []struct {
		name   string
		tail   client.LogTail
		status int
	}{
		{"negative offset", client.LogTail{Offset: -1, Text: "x"}, 400},
		{"an offset that would overflow", client.LogTail{Offset: 1<<63 - 2, Text: "x"}, 400},
		{"too big", client.LogTail{Offset: 6, Text: strings.Repeat("x", client.MaxLogChunk+1)}, 413},
	} {
		_, err := w.Complete(ctx, "p", "T1", client.CompleteRequest{LeaseID: c.Lease.ID, Log: &tc.tail})
		if client.StatusOf(err) != tc.status {
			t.Errorf("%s: %v; want %d", tc.name, err, tc.status)
		}
	}
	if after := e.logDigest(); after != before {
		t.Errorf("refused reports changed the stored log: %s → %s", before, after)
	}
	done := client.CompleteRequest{LeaseID: c.Lease.ID, Log: &client.LogTail{Offset: 0, Text: "hello\nworld\n"}}
	if res, err := w.Complete(ctx, "p", "T1", done); err != nil || res.Status != plan.StatusDone {
		t.Fatalf("complete with a tail: %+v, %v", res, err)
	}
	if lg := read("T1", "1"); lg.Text != "hello\nworld\n" || lg.Running || lg.NextOffset != 12 {
		t.Fatalf("T1's log = %+v; want hello, world once", lg)
	}
	before = e.logDigest()
	if res, err := w.Complete(ctx, "p", "T1", done); err != nil || res.Status != plan.StatusDone { // its answer was lost
		t.Fatalf("the same completion again: %+v, %v", res, err)
	}
	if after := e.logDigest(); after != before {
		t.Errorf("a completion sent again changed the stored log: %s → %s", before, after)
	}

	// T2, batched with the next claim, which gets T3.
	w, c = e.runningTask("p")
	res, err := w.Complete(ctx, "p", c.Task.ID, client.CompleteRequest{LeaseID: c.Lease.ID, ClaimNext: &client.NextClaim{PlanID: "p"},
		Log: &client.LogTail{Offset: 0, Text: "two\n"}})
	if err != nil || res.Next == nil {
		t.Fatalf("complete T2 and claim: %+v, %v", res, err)
	}
	if lg := read("T2", "1"); lg.Text != "two\n" {
		t.Errorf("T2's log = %+v", lg)
	}

	// T3 fails (retryable) with a tail; its next attempt's report with the old lease is
	// refused and stores nothing.
	next := res.Next
	if _, err := w.Start(ctx, "p", next.Task.ID, client.LeaseRequest{LeaseID: next.Lease.ID}); err != nil {
		t.Fatal(err)
	}
	failed, err := w.Fail(ctx, "p", next.Task.ID, client.FailRequest{LeaseID: next.Lease.ID, Reason: "agent_error",
		Log: &client.LogTail{Offset: 0, Text: "three failed\n"}})
	if err != nil || failed.Status != plan.StatusPending {
		t.Fatalf("fail T3: %+v, %v", failed, err)
	}
	if lg := read(next.Task.ID, "1"); lg.Text != "three failed\n" || lg.Running {
		t.Errorf("T3's log = %+v", lg)
	}
	before = e.logDigest()
	_, err = w.Complete(ctx, "p", next.Task.ID, client.CompleteRequest{LeaseID: next.Lease.ID, CostUSD: 1000,
		Log: &client.LogTail{Offset: 13, Text: "forged\n"}})
	if err != nil && client.StatusOf(err) != 409 { // answered as the FAIL it replays, or refused
		t.Fatalf("a completion with an ended lease: %v", err)
	}
	if after := e.logDigest(); after != before {
		t.Errorf("a report with an ended lease changed the stored log: %s → %s", before, after)
	}

	// T4, careful (it costs): the tail follows a gap (bytes the worker dropped).
	w, c = e.runningTask("p")
	if _, err := w.Complete(ctx, "p", c.Task.ID, client.CompleteRequest{LeaseID: c.Lease.ID, CostUSD: 1000,
		Log: &client.LogTail{Offset: 100, Text: "careful\n"}}); err != nil {
		t.Fatal(err)
	}
	if lg := read(c.Task.ID, "1"); lg.Text != "careful\n" || lg.Offset != 100 || lg.NextOffset != 108 {
		t.Errorf("%s's log = %+v; want careful at 100", c.Task.ID, lg)
	}

	// T5: released, claimed again under a new lease with the same attempt number: its log
	// starts afresh where the old one ended.
	w, c = e.runningTask("p")
	if _, err := w.AppendLog(ctx, "p", c.Task.ID, 1, client.LogChunkRequest{LeaseID: c.Lease.ID, Offset: 0, Text: "old\n"}); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Release(ctx, "p", c.Task.ID, client.LeaseRequest{LeaseID: c.Lease.ID, Reason: "test"}); err != nil {
		t.Fatal(err)
	}
	w, c2 := e.runningTask("p")
	if c2.Task.ID != c.Task.ID || c2.Task.Attempt != 1 {
		t.Fatalf("claimed %s attempt %d again, want %s attempt 1", c2.Task.ID, c2.Task.Attempt, c.Task.ID)
	}
	if _, err := w.Complete(ctx, "p", c.Task.ID, client.CompleteRequest{LeaseID: c2.Lease.ID, Log: &client.LogTail{Offset: 0, Text: "new\n"}}); err != nil {
		t.Fatal(err)
	}
	if lg := read(c.Task.ID, "1"); lg.Text != "new\n" || lg.Offset != 4 {
		t.Errorf("the log of the attempt claimed again = %+v; want new from 4", lg)
	}

	// T6: a tail past the kept MiB trims the log to its last MiB.
	w, c = e.runningTask("p")
	chunk := strings.Repeat("0123456789abcde\n", client.MaxLogChunk/16)
	var off int64
	for off < queue.MaxAttemptLogBytes {
		r, err := w.AppendLog(ctx, "p", c.Task.ID, 1, client.LogChunkRequest{LeaseID: c.Lease.ID, Offset: off, Text: chunk})
		if err != nil {
			t.Fatal(err)
		}
		off = r.NextOffset
	}
	if _, err := w.Complete(ctx, "p", c.Task.ID, client.CompleteRequest{LeaseID: c.Lease.ID, Log: &client.LogTail{Offset: off, Text: "the end\n"}}); err != nil {
		t.Fatal(err)
	}
	var stored int64
	if err := e.pool.QueryRow(ctx, `SELECT sum(length(data)) FROM attempt_log_chunks WHERE task_id = $1`, c.Task.ID).Scan(&stored); err != nil {
		t.Fatal(err)
	}
	lg := read(c.Task.ID, "1")
	if stored != queue.MaxAttemptLogBytes || !strings.HasSuffix(lg.Text, chunk+"the end\n") || lg.NextOffset != off+8 ||
		lg.Offset != off+8-queue.MaxAttemptLogBytes {
		t.Errorf("%d bytes stored, read %d from %d to %d; want the last MiB ending with the tail", stored, len(lg.Text), lg.Offset, lg.NextOffset)
	}
}
