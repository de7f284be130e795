package cli_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/whilly-go/whilly/queue"
	"github.com/whilly-go/whilly/testkit"
)

// whilly task log prints the log of a task run by whilly run (the sim agent), the latest
// attempt by default; bad input is exit 2 (usage) or 1 (no such task or attempt), in one
// sentence.
func TestTaskLogPrintsTheSimAgentsLog(t *testing.T) {
	t.Parallel()
	dsn := testkit.DSN(t)
	file := writeFile(t, "plan.json", validPlan)
	if code, _, stderr := run(t, dsn, "", "plan", "import", file); code != 0 {
		t.Fatalf("import: %d %s", code, stderr)
	}
	if code, _, stderr := run(t, dsn, "", "task", "log", "cli", "A"); code != 1 || stderr != "whilly: task A of plan cli has not run yet: not found.\n" {
		t.Fatalf("before it ran: exit %d, %q", code, stderr)
	}
	if code, _, stderr := run(t, dsn, "", "run", "--plan", "cli", "--agent", "sim", "--sim-delay", "600ms"); code != 0 {
		t.Fatalf("run: %d %s", code, stderr)
	}
	code, out, stderr := run(t, dsn, "", "task", "log", "cli", "A")
	if code != 0 || !strings.HasPrefix(out, "whilly sim agent: a simulation, no model runs; working for 600ms\nwhilly sim agent: working, ") ||
		!strings.HasSuffix(out, "<promise>COMPLETE</promise>\n") || stderr != "attempt 1 of task A of plan cli (DONE)\n" {
		t.Fatalf("task log: exit %d\n%s\nstderr %q", code, out, stderr)
	}
	code, js, _ := run(t, dsn, "", "task", "log", "cli", "A", "--json")
	var lg struct {
		Attempt    int    `json:"attempt"`
		Text       string `json:"text"`
		NextOffset int64  `json:"next_offset"`
		Running    bool   `json:"running"`
	}
	if err := json.Unmarshal([]byte(js), &lg); code != 0 || err != nil || lg.Text != out || lg.NextOffset != int64(len(out)) || lg.Running || lg.Attempt != 1 {
		t.Errorf("--json: exit %d, %q (%v)", code, js, err)
	}
	if code, again, _ := run(t, dsn, "", "task", "log", "cli", "A", "--attempt", "1", "--follow"); code != 0 || again != out {
		t.Errorf("--attempt 1 --follow of an ended attempt: exit %d\n%s", code, again)
	}
	for _, tc := range []struct {
		args []string
		code int
		err  string
	}{
		{[]string{"task", "log", "cli"}, 2, "whilly: whilly task log takes a plan id and a task id (see 'whilly task log --help').\n"},
		{[]string{"task", "log", "cli", "A", "--attempt", "0"}, 2, "whilly: --attempt must be an attempt number, 1 or more, got 0.\n"},
		{[]string{"task", "log", "cli", "A", "--attempt", "x"}, 2, ""},
		{[]string{"task", "log", "cli", "A", "--attempt", "2"}, 1, "whilly: task A of plan cli has no attempt 2, it has had 1: not found.\n"},
		{[]string{"task", "log", "nosuch", "A"}, 1, "whilly: task A of plan nosuch: not found.\n"},
		{[]string{"task", "log", "cli", "A", "--connect", "http://127.0.0.1:1"}, 2, ""},
	} {
		code, out, stderr := run(t, dsn, "", tc.args...)
		if code != tc.code || out != "" || (tc.err != "" && stderr != tc.err) || strings.Count(stderr, "\n") != 1 {
			t.Errorf("%v: exit %d, out %q, err %q; want %d %q", tc.args, code, out, stderr, tc.code, tc.err)
		}
	}
}

// whilly task log --follow on the local database prints a running attempt's log as it
// grows, without terminal escape sequences (a hostile agent's OSC 52 clipboard write, a
// screen clear), and exits 0 when the attempt ends.
func TestTaskLogFollowsLocallyAndStripsEscapes(t *testing.T) {
	t.Parallel()
	dsn := testkit.DSN(t)
	file := writeFile(t, "plan.json", validPlan)
	if code, _, stderr := run(t, dsn, "", "plan", "import", file); code != 0 {
		t.Fatalf("import: %d %s", code, stderr)
	}
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	st := queue.NewStore(pool, nil, queue.Config{})
	w, _, err := st.RegisterWorker(ctx, "test", nil)
	if err != nil {
		t.Fatal(err)
	}
	c, err := st.Claim(ctx, queue.ClaimRequest{WorkerID: w.ID, PlanID: "cli"})
	if err != nil || c == nil {
		t.Fatalf("claim: %v %v", c, err)
	}
	l := queue.Lease{PlanID: "cli", TaskID: c.Task.ID, LeaseID: c.Lease.ID, WorkerID: w.ID}
	first := []byte("first \x1b]52;c;ZXZpbA==\x07line\x1b[2J\n")
	if _, err := st.AppendAttemptLog(ctx, l, queue.LogAppend{Attempt: 1, Data: first}); err != nil {
		t.Fatal(err)
	}
	type result struct {
		code        int
		out, stderr string
	}
	done := make(chan result, 1)
	go func() {
		code, out, stderr := run(t, dsn, "", "task", "log", "cli", "A", "--follow")
		done <- result{code, out, stderr}
	}()
	waitListeners := func(n int) {
		deadline := time.Now().Add(20 * time.Second)
		for {
			var k int
			if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND query LIKE 'LISTEN%'`).Scan(&k); err != nil {
				t.Fatal(err)
			}
			if k >= n || time.Now().After(deadline) {
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitListeners(1) // the follower listens
	if _, err := st.AppendAttemptLog(ctx, l, queue.LogAppend{Attempt: 1, Offset: int64(len(first)), Data: []byte("second line\n")}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Complete(ctx, l, queue.CompleteInput{}); err != nil {
		t.Fatal(err)
	}
	var r result
	select {
	case r = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("whilly task log --follow did not exit when the attempt ended")
	}
	if r.code != 0 || r.out != "first line\nsecond line\n" || !strings.HasSuffix(r.stderr, "attempt 1 has ended; the task is DONE\n") {
		t.Fatalf("follow: exit %d\n%q\n%s", r.code, r.out, r.stderr)
	}
}
