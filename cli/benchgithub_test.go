package cli

import (
	"context"
	"errors"
	"regexp"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/whilly-go/whilly/migrations"
	"github.com/whilly-go/whilly/testkit"
)

// watchJobQueues migrates the database at dsn and records from then on the River queue
// of every job inserted, for assertOwnQueues.
func watchJobQueues(t *testing.T, dsn string) {
	t.Helper()
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if _, err := migrations.Up(ctx, pool); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE test_job_queues (queue text NOT NULL);
		CREATE FUNCTION test_job_queue() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN INSERT INTO test_job_queues VALUES (NEW.queue); RETURN NEW; END $$;
		CREATE TRIGGER test_job_queue AFTER INSERT ON river_job FOR EACH ROW EXECUTE FUNCTION test_job_queue();`); err != nil {
		t.Fatal(err)
	}
}

// assertOwnQueues checks that a benchmark put its River jobs in queues of its own
// (whilly_bench…), never in the queues a control plane on the same database works,
// and left none behind (watchJobQueues).
func assertOwnQueues(t *testing.T, dsn string) {
	t.Helper()
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	var shared []string
	if err := pool.QueryRow(ctx, `SELECT coalesce(array_agg(DISTINCT queue), '{}') FROM test_job_queues WHERE queue NOT LIKE 'whilly\_bench%'`).Scan(&shared); err != nil {
		t.Fatal(err)
	}
	if len(shared) > 0 {
		t.Errorf("the benchmark inserted jobs in the queues %v, which a control plane on the same database works", shared)
	}
	var left int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM river_job`).Scan(&left); err != nil {
		t.Fatal(err)
	}
	if left != 0 {
		t.Errorf("the benchmark left %d River jobs behind", left)
	}
}

// assertNoIssuePlans checks that a GitHub benchmark deleted the plans its issues made.
func assertNoIssuePlans(t *testing.T, dsn string) {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	var n int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM plans WHERE github_issue_ref LIKE 'whilly-bench-%'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("the benchmark left %d plans of its issues behind", n)
	}
}

// A small `whilly bench intake` takes labelled issues through the webhook to a claim,
// prints the key=value line last, and removes what it made.
func TestBenchIntakeSmall(t *testing.T) {
	t.Parallel()
	dsn := testkit.DSN(t)
	watchJobQueues(t, dsn)
	out, _ := runBench(t, map[string]string{"WHILLY_DATABASE_URL": dsn}, "intake", "--issues", "4", "--workers", "2", "--rate", "50")
	last := lastLine(out)
	re := regexp.MustCompile(`^issues=4 eyes_p50_ms=\d+\.\d eyes_p99_ms=\d+\.\d claim_p50_ms=\d+\.\d claim_p99_ms=\d+\.\d$`)
	if !re.MatchString(last) {
		t.Fatalf("last line %q is not the key=value summary\n%s", last, out)
	}
	t.Log(last)
	assertNoScratch(t, dsn)
	assertNoIssuePlans(t, dsn)
	assertOwnQueues(t, dsn)
}

// A small `whilly bench scale` runs every issue's plan to done under GitHub's limits,
// with no rate-limit answer, and removes what it made.
func TestBenchScaleSmall(t *testing.T) {
	t.Parallel()
	dsn := testkit.DSN(t)
	watchJobQueues(t, dsn)
	out, _ := runBench(t, map[string]string{"WHILLY_DATABASE_URL": dsn}, "scale", "--installations", "2", "--issues", "2",
		"--tasks", "3", "--workers", "4", "--task-time", "20ms", "--timeout", "2m", "--github-latency", "30ms")
	last := lastLine(out)
	re := regexp.MustCompile(`^issues_done=4 writes_per_transition=\d+\.\d{3} max_writes_per_min=\d+ rate_limited=0 fairness_spread=\d+\.\d\d chance_spread=\d+\.\d\d done_p99_ms=[1-9]\d*$`)
	if !re.MatchString(last) {
		t.Fatalf("last line %q is not the key=value summary with 4 issues done and no rate limit\n%s", last, out)
	}
	if !strings.Contains(out, "2 installations × 2 issues, 12 tasks done in ") {
		t.Fatalf("the table does not count the 12 tasks done:\n%s", out)
	}
	if !strings.Contains(out, "the fake GitHub answered each request after 30 ms") {
		t.Fatalf("the output does not give the fake GitHub's latency:\n%s", out)
	}
	t.Log(last)
	assertNoScratch(t, dsn)
	assertNoIssuePlans(t, dsn)
	assertOwnQueues(t, dsn)
}

// Bad flags are usage errors that say what is wrong, before anything runs.
func TestBenchGitHubFlags(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"intake", "--issues", "0"},
		{"intake", "--rate", "0"},
		{"scale", "--installations", "0"},
		{"scale", "--task-time", "-1s"},
		{"scale", "--github-latency", "-1ms"},
	} {
		var out, errOut syncBuffer
		a := testApp(t, &out, &errOut, map[string]string{})
		cmd := a.benchCommand()
		cmd.SilenceUsage, cmd.SilenceErrors = true, true
		cmd.SetArgs(args)
		cmd.SetOut(&out)
		cmd.SetErr(&errOut)
		err := cmd.ExecuteContext(context.Background())
		var ee *exitError
		if !errors.As(err, &ee) || ee.code != ExitUsage || !strings.Contains(err.Error(), args[1]) {
			t.Errorf("bench %v = %v, want a usage error naming %s", args, err, args[1])
		}
	}
}
