package control_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/whilly-go/whilly/control/client"
	"github.com/whilly-go/whilly/queue"
	"github.com/whilly-go/whilly/testkit"
)

// runningTask claims and starts task of plan with a fresh worker.
func (e *env) runningTask(planID string) (*client.Client, *client.Claim) {
	e.t.Helper()
	ctx := context.Background()
	w, _ := e.worker()
	c, err := w.Claim(ctx, client.ClaimRequest{PlanID: planID})
	if err != nil || c == nil {
		e.t.Fatalf("claim: %v, %v", c, err)
	}
	if _, err := w.Start(ctx, planID, c.Task.ID, client.LeaseRequest{LeaseID: c.Lease.ID}); err != nil {
		e.t.Fatal(err)
	}
	return w, c
}

func logPath(planID, taskID, n string) string {
	return "/v1/plans/" + planID + "/tasks/" + taskID + "/attempts/" + n + "/log"
}

func (e *env) readLog(token, planID, taskID, n, query string) (int, client.AttemptLog) {
	e.t.Helper()
	status, body := e.do("GET", logPath(planID, taskID, n)+query, token, nil)
	var lg client.AttemptLog
	if status == 200 {
		if err := json.Unmarshal([]byte(body), &lg); err != nil {
			e.t.Fatalf("decode %s: %v", body, err)
		}
	}
	return status, lg
}

// TestAttemptLogAppendAndRead: the worker holding the lease appends chunks; a repeat of a
// chunk is stored once; an overlap, another worker, a wrong attempt or an ended attempt is
// refused and writes nothing; readers see the log from any offset, running or ended.
func TestAttemptLogAppendAndRead(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	ctx := context.Background()
	e.importPlan(planDoc("p", "T1"))
	w, c := e.runningTask("p")
	lease := c.Lease.ID

	for _, ch := range []client.LogChunkRequest{{LeaseID: lease, Offset: 0, Text: "hello\n"}, {LeaseID: lease, Offset: 6, Text: "world\n"}} {
		if _, err := w.AppendLog(ctx, "p", "T1", 1, ch); err != nil {
			t.Fatal(err)
		}
	}
	// A retried chunk whose answer was lost.
	res, err := w.AppendLog(ctx, "p", "T1", 1, client.LogChunkRequest{LeaseID: lease, Offset: 6, Text: "world\n"})
	if err != nil || !res.Duplicate || res.NextOffset != 12 {
		t.Fatalf("repeat = %+v, %v; want a duplicate, next 12", res, err)
	}
	other, _ := e.worker()
	before := e.logDigest()
	for _, tc := range []struct {
		name   string
		c      *client.Client
		n      int
		req    client.LogChunkRequest
		status int
	}{
		{"overlap", w, 1, client.LogChunkRequest{LeaseID: lease, Offset: 3, Text: "xxxxxxxxxx"}, 409},
		{"another worker with this lease", other, 1, client.LogChunkRequest{LeaseID: lease, Offset: 12, Text: "forged\n"}, 409},
		{"another attempt", w, 2, client.LogChunkRequest{LeaseID: lease, Offset: 12, Text: "forged\n"}, 409},
		{"no lease", w, 1, client.LogChunkRequest{Offset: 12, Text: "forged\n"}, 400},
		{"negative offset", w, 1, client.LogChunkRequest{LeaseID: lease, Offset: -1, Text: "forged\n"}, 400},
		{"too big", w, 1, client.LogChunkRequest{LeaseID: lease, Offset: 12, Text: strings.Repeat("x", client.MaxLogChunk+1)}, 413},
	} {
		_, err := tc.c.AppendLog(ctx, "p", "T1", tc.n, tc.req)
		if client.StatusOf(err) != tc.status {
			t.Errorf("%s: %v; want %d", tc.name, err, tc.status)
		}
	}
	// A read token may not write.
	if st, body := e.do("POST", logPath("p", "T1", "1"), e.read, client.LogChunkRequest{LeaseID: lease, Offset: 12, Text: "forged\n"}); st != 403 {
		t.Errorf("a read token appends: %d %s; want 403", st, body)
	}
	if after := e.logDigest(); after != before {
		t.Errorf("refused appends changed the stored log: %s → %s", before, after)
	}

	st, lg := e.readLog(e.read, "p", "T1", "1", "")
	if st != 200 || lg.Text != "hello\nworld\n" || lg.NextOffset != 12 || !lg.Running || lg.Offset != 0 {
		t.Fatalf("read = %d %+v", st, lg)
	}
	st, lg = e.readLog(e.read, "p", "T1", "latest", "?after=6")
	if st != 200 || lg.Text != "world\n" || lg.Offset != 6 || lg.Attempt != 1 {
		t.Fatalf("read after 6 = %d %+v", st, lg)
	}
	if _, err := w.Complete(ctx, "p", "T1", client.CompleteRequest{LeaseID: lease}); err != nil {
		t.Fatal(err)
	}
	if _, err := w.AppendLog(ctx, "p", "T1", 1, client.LogChunkRequest{LeaseID: lease, Offset: 12, Text: "late\n"}); client.StatusOf(err) != 409 {
		t.Errorf("append after COMPLETE: %v; want 409", err)
	}
	st, lg = e.readLog(e.read, "p", "T1", "1", "?wait=5")
	if st != 200 || lg.Running || lg.Text != "hello\nworld\n" || lg.TaskStatus != "DONE" {
		t.Fatalf("read of the ended attempt = %d %+v", st, lg)
	}
}

// logDigest summarises the stored logs.
func (e *env) logDigest() string {
	e.t.Helper()
	var d string
	err := e.pool.QueryRow(context.Background(), `SELECT
		coalesce((SELECT md5(string_agg(l::text, ',' ORDER BY plan_id, task_id, attempt)) FROM attempt_logs l), '') || '|' ||
		coalesce((SELECT md5(string_agg(c::text, ',' ORDER BY plan_id, task_id, attempt, pos)) FROM attempt_log_chunks c), '')`).Scan(&d)
	if err != nil {
		e.t.Fatal(err)
	}
	return d
}

// TestAttemptLogKeepsTheLastMiB: a log of 3 MiB keeps its last 1 MiB in the database,
// trimmed as it grows; a reader from 0 gets that MiB and where it begins.
func TestAttemptLogKeepsTheLastMiB(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	ctx := context.Background()
	e.importPlan(planDoc("big", "T1"))
	w, c := e.runningTask("big")
	chunk := strings.Repeat("0123456789abcdé\n", client.MaxLogChunk/17) // multi-byte runes, cut anywhere
	var off int64
	for off < 3<<20 {
		res, err := w.AppendLog(ctx, "big", "T1", 1, client.LogChunkRequest{LeaseID: c.Lease.ID, Offset: off, Text: chunk})
		if err != nil {
			t.Fatal(err)
		}
		off = res.NextOffset
		var stored int64
		if err := e.pool.QueryRow(ctx, `SELECT coalesce(sum(length(data)), 0) FROM attempt_log_chunks`).Scan(&stored); err != nil {
			t.Fatal(err)
		}
		if stored > queue.MaxAttemptLogBytes {
			t.Fatalf("%d bytes stored after %d appended; at most %d may be", stored, off, queue.MaxAttemptLogBytes)
		}
	}
	st, lg := e.readLog(e.read, "big", "T1", "1", "")
	if st != 200 || lg.NextOffset != off || lg.Offset < off-queue.MaxAttemptLogBytes || lg.Offset > off-queue.MaxAttemptLogBytes+3 {
		t.Fatalf("read = %d offset %d next %d; want offset %d (the last MiB)", st, lg.Offset, lg.NextOffset, off-queue.MaxAttemptLogBytes)
	}
	if int64(len(lg.Text)) != lg.NextOffset-lg.Offset || !strings.HasSuffix(lg.Text, chunk[len(chunk)-100:]) {
		t.Errorf("the text holds %d bytes from %d to %d and ends %q", len(lg.Text), lg.Offset, lg.NextOffset, lg.Text[len(lg.Text)-20:])
	}
	t.Logf("appended %d bytes; kept %d from offset %d", off, len(lg.Text), lg.Offset)
}

// TestAttemptLogHostileText: NUL bytes, bytes that are not UTF-8 and control characters
// are stored as storable text, and come back as JSON strings.
func TestAttemptLogHostileText(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	ctx := context.Background()
	e.importPlan(planDoc("bin", "T1"))
	w, c := e.runningTask("bin")
	raw := "a\x00b\xff\xfe\x1b[31mred\x1b[0m<script>alert(1)</script>\r\n"
	if _, err := w.AppendLog(ctx, "bin", "T1", 1, client.LogChunkRequest{LeaseID: c.Lease.ID, Text: raw}); err != nil {
		t.Fatal(err)
	}
	_, lg := e.readLog(e.read, "bin", "T1", "1", "")
	// The client's JSON encoding replaced each invalid byte; the server would have too.
	want := "ab\uFFFD\uFFFD\x1b[31mred\x1b[0m<script>alert(1)</script>\r\n"
	if lg.Text != want {
		t.Errorf("text = %q; want %q", lg.Text, want)
	}
}

// TestAttemptLogReadRefusals: a plan outside the token's scope is 404 like an unknown
// one; bad attempts and offsets are 400; no token is 401.
func TestAttemptLogReadRefusals(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	ctx := context.Background()
	e.importPlan(planDoc("secret", "T1"))
	e.importPlan(planDoc("open", "T1"))
	w, c := e.runningTask("secret")
	if _, err := w.AppendLog(ctx, "secret", "T1", 1, client.LogChunkRequest{LeaseID: c.Lease.ID, Text: "private\n"}); err != nil {
		t.Fatal(err)
	}
	scoped, _, err := e.store.Mint(ctx, queue.TokenSpec{Owner: "other", Scopes: queue.Scopes{"plan:open"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		token, path string
		status      int
	}{
		{scoped, logPath("secret", "T1", "1"), 404},
		{scoped, logPath("secret", "T1", "latest") + "?wait=1", 404},
		{scoped, logPath("nosuch", "T1", "1"), 404},
		{scoped, logPath("open", "T1", "latest"), 404}, // it has not run
		{e.read, logPath("secret", "T1", "2"), 404},
		{e.read, logPath("secret", "T9", "1"), 404},
		{e.read, logPath("secret", "T1", "0"), 400},
		{e.read, logPath("secret", "T1", "x"), 400},
		{e.read, logPath("secret", "T1", "1") + "?after=-1", 400},
		{e.read, logPath("secret", "T1", "1") + "?wait=NaN", 400},
		{"", logPath("secret", "T1", "1"), 401},
	} {
		st, body := e.do("GET", tc.path, tc.token, nil)
		if st != tc.status || strings.Contains(body, "private") {
			t.Errorf("GET %s: %d %s; want %d", tc.path, st, body, tc.status)
		}
	}
}

// TestAttemptLogFollowerWakesAndIdlesFree: a follower waiting on a running attempt gets
// a new chunk at once (woken by NOTIFY, not a poll), makes no query while it waits — not
// even while 200 events of another plan and log lines of another task go by — and is
// answered running=false as soon as the attempt ends.
func TestAttemptLogFollowerWakesAndIdlesFree(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	ctx := context.Background()
	e.importPlan(planDoc("f", "T1", "T2"))
	w, c := e.runningTask("f")
	w2, c2 := e.runningTask("f")
	if _, err := w.AppendLog(ctx, "f", c.Task.ID, 1, client.LogChunkRequest{LeaseID: c.Lease.ID, Text: "one\n"}); err != nil {
		t.Fatal(err)
	}
	rd := e.client(e.read)
	type answer struct {
		lg  client.AttemptLog
		err error
		at  time.Time
	}
	follow := func(after int64) <-chan answer {
		ch := make(chan answer, 1)
		go func() {
			lg, err := rd.AttemptLog(ctx, "f", c.Task.ID, client.LogQuery{After: after, Wait: 10 * time.Second})
			ch <- answer{lg, err, time.Now()}
		}()
		return ch
	}
	subs := e.listener.Subscribers()
	first := len(e.queries.snapshot())
	ch := follow(4)
	testkit.Eventually(t, 20*time.Second, "the follower's first read", func() bool {
		for _, q := range e.queries.snapshot()[first:] {
			if strings.Contains(q.sql, "LEFT JOIN attempt_logs") && !q.end.IsZero() {
				return true
			}
		}
		return false
	})
	// What came before (the import, the claims) may still be notified to the follower,
	// late on a loaded machine, and wake it once more: wait until it has read nothing for
	// 300 ms before the window in which it must not read.
	reads := func() int {
		n := 0
		for _, q := range e.queries.snapshot()[first:] {
			if strings.Contains(q.sql, "LEFT JOIN attempt_logs") {
				n++
			}
		}
		return n
	}
	seen, quiet := reads(), time.Now()
	testkit.Eventually(t, 20*time.Second, "the follower to settle", func() bool {
		if n := reads(); n != seen {
			seen, quiet = n, time.Now()
		}
		return time.Since(quiet) >= 300*time.Millisecond
	})
	idleFrom := time.Now()
	// Noise the follower must sleep through.
	e.importPlan(planDoc("noise", seq("N", 200)...))
	for i := range 5 {
		if _, err := w2.AppendLog(ctx, "f", c2.Task.ID, 1, client.LogChunkRequest{LeaseID: c2.Lease.ID, Offset: int64(i), Text: "x"}); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(300 * time.Millisecond) // a window in which nothing may be read for the follower
	idleTo := time.Now()
	sent := time.Now()
	if _, err := w.AppendLog(ctx, "f", c.Task.ID, 1, client.LogChunkRequest{LeaseID: c.Lease.ID, Offset: 4, Text: "two\n"}); err != nil {
		t.Fatal(err)
	}
	a := <-ch
	if a.err != nil || a.lg.Text != "two\n" || a.lg.NextOffset != 8 || !a.lg.Running {
		t.Fatalf("follow = %+v, %v", a.lg, a.err)
	}
	if d := a.at.Sub(sent); d > 2*time.Second {
		t.Errorf("the follower got the chunk %v after it was appended", d)
	}
	idleReads := 0
	for _, q := range e.queries.snapshot()[first:] {
		if strings.Contains(q.sql, "attempt_log_chunks WHERE") || strings.Contains(q.sql, "LEFT JOIN attempt_logs") {
			if q.start.After(idleFrom) && q.start.Before(idleTo) {
				idleReads++
			}
		}
	}
	if idleReads != 0 {
		t.Errorf("%d log reads while the follower idled (other plans' events and another task's log went by)", idleReads)
	}

	// The attempt ends, its report carrying the log's tail, while a follower waits: it is
	// answered at once with the tail, not at its deadline.
	ch = follow(8)
	testkit.Eventually(t, 20*time.Second, "the follower to wait", func() bool { return e.listener.Subscribers() == subs+1 })
	ended := time.Now()
	if _, err := w.Fail(ctx, "f", c.Task.ID, client.FailRequest{LeaseID: c.Lease.ID, Reason: "agent_error",
		Log: &client.LogTail{Offset: 8, Text: "three\n"}}); err != nil {
		t.Fatal(err)
	}
	a = <-ch
	if a.err != nil || a.lg.Running || a.lg.Text != "three\n" {
		t.Fatalf("follow after FAIL = %+v, %v", a.lg, a.err)
	}
	if d := a.at.Sub(ended); d > 2*time.Second {
		t.Errorf("the follower learnt the attempt ended %v after it did", d)
	}
	t.Logf("the follower learnt of the FAIL %v after it", a.at.Sub(ended).Round(time.Millisecond))
}
