package cli

import (
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/whilly-go/whilly/bench"
	"github.com/whilly-go/whilly/sandbox"
	"github.com/whilly-go/whilly/testkit"
)

func runBench(t *testing.T, env map[string]string, args ...string) (stdout, stderr string) {
	t.Helper()
	var out, errOut syncBuffer
	a := testApp(t, &out, &errOut, env)
	cmd := a.benchCommand()
	cmd.SilenceUsage = true
	cmd.SetArgs(args)
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	if err := cmd.ExecuteContext(context.Background()); err != nil {
		t.Fatalf("bench %v: %v\nstdout:\n%s\nstderr:\n%s", args, err, out.String(), errOut.String())
	}
	return out.String(), errOut.String()
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return lines[len(lines)-1]
}

// assertNoScratch checks that a benchmark left no scratch plan, table or live worker.
func assertNoScratch(t *testing.T, dsn string) {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	var plans, tables, workers int
	ctx := context.Background()
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM plans WHERE id LIKE 'bench-%'`).Scan(&plans); err != nil {
		t.Fatal(err)
	}
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_tables WHERE tablename LIKE 'whilly_bench_%'`).Scan(&tables); err != nil {
		t.Fatal(err)
	}
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM workers WHERE status <> 'revoked'`).Scan(&workers); err != nil {
		t.Fatal(err)
	}
	var jobs int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE queue = 'whilly_bench'`).Scan(&jobs); err != nil {
		t.Fatal(err)
	}
	if plans+tables+workers+jobs != 0 {
		t.Errorf("the benchmark left %d scratch plans, %d tables, %d live workers and %d River jobs behind", plans, tables, workers, jobs)
	}
}

// A small `whilly bench claims` runs every phase against a test database, prints the
// key=value line last, and removes its scratch plans, tables and workers.
func TestBenchClaimsSmall(t *testing.T) {
	t.Parallel()
	dsn := testkit.DSN(t)
	watchJobQueues(t, dsn)
	out, _ := runBench(t, map[string]string{"WHILLY_DATABASE_URL": dsn},
		"claims", "--workers", "3", "--tasks", "60", "--chain", "10", "--idle", "500ms")
	last := lastLine(out)
	// A latency may be negative on a loaded machine: the claimer can hold its answer before
	// the one whose commit made the task ready hears of that commit.
	re := regexp.MustCompile(`^claims_per_s=\d+ raw_per_s=\d+ ratio=\d+\.\d\d ready_to_claim_p50_ms=-?\d+\.\d\d p99_ms=-?\d+\.\d\d idle_queries_per_worker_s=\d+\.\d\d river_per_s=\d+ river_tuned_per_s=\d+ ratio_raw=\d+\.\d\d ratio_river=\d+\.\d\d ratio_river_tuned=\d+\.\d\d hooks=true$`)
	if !re.MatchString(last) {
		t.Fatalf("last line %q is not the key=value summary\n%s", last, out)
	}
	t.Log(last)
	assertNoScratch(t, dsn)
	assertOwnQueues(t, dsn)
}

// `whilly bench e2e` drives real whilly-worker processes; its last line is the summary.
func TestBenchE2ESmall(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds whilly-worker: skipped with -short")
	}
	bin := buildWorker(t)
	dsn := testkit.DSN(t)
	out, _ := runBench(t, map[string]string{"WHILLY_DATABASE_URL": dsn},
		"e2e", "--workers", "3", "--tasks", "60", "--worker-bin", bin)
	last := lastLine(out)
	if !regexp.MustCompile(`^tasks_per_s=\d+ workers=3 p99_task_overhead_ms=\d+\.\d\d$`).MatchString(last) {
		t.Fatalf("last line %q is not the key=value summary\n%s", last, out)
	}
	// CPU per task counts the three parts over the drain; a worker's start-up comes apart.
	cpu := regexp.MustCompile(`(?m)^CPU per task: (\d+\.\d\d) ms \(control plane \d+\.\d\d ms, Postgres \d+\.\d\d ms, workers \d+\.\d\d ms\); .*; a worker's start-up (\d+) ms$`).FindStringSubmatch(out)
	if cpu == nil || cpu[1] == "0.00" || cpu[2] == "0" {
		t.Errorf("no CPU per task with a worker's start-up apart (%q)\n%s", cpu, out)
	}
	t.Log(last)
	assertNoScratch(t, dsn)
}

// buildWorker builds whilly-worker into a temporary directory.
func buildWorker(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "whilly-worker")
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("no go command to build whilly-worker with: %v", err)
	}
	build := exec.Command(goBin, "build", "-o", bin, "./cmd/whilly-worker")
	build.Dir = ".."
	if b, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build whilly-worker: %v\n%s", err, b)
	}
	return bin
}

// `whilly bench e2e --sandbox` runs the same command agent unboxed and in the sandbox in
// one run and reports both, and what the box adds.
func TestBenchE2ESandbox(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds whilly-worker: skipped with -short")
	}
	if err := sandbox.Check(context.Background()); err != nil {
		t.Skipf("bubblewrap does not work here: %v", err)
	}
	bin := buildWorker(t)
	dsn := testkit.DSN(t)
	out, _ := runBench(t, map[string]string{"WHILLY_DATABASE_URL": dsn},
		"e2e", "--sandbox", "--workers", "2", "--tasks", "20", "--worker-bin", bin, "--json")
	var res bench.SandboxResult
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if res.Unboxed.Tasks != 20 || res.Boxed.Tasks != 20 || res.Boxed.OverheadP50Ms <= 0 || res.Unboxed.OverheadP50Ms <= 0 {
		t.Fatalf("result %+v", res)
	}
	if res.AddedP50Ms != res.Boxed.OverheadP50Ms-res.Unboxed.OverheadP50Ms {
		t.Errorf("added p50 %.2f is not boxed - unboxed", res.AddedP50Ms)
	}
	t.Logf("the sandbox adds %.1f ms (p50) per attempt", res.AddedP50Ms)
	assertNoScratch(t, dsn)
}

// `whilly bench idle` runs whilly serve in a process of its own, parks workers on it and
// wakes them; its last line is the summary, and nothing of it stays behind.
func TestBenchIdleSmall(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds whilly: skipped with -short")
	}
	bin := buildWhilly(t)
	dsn := testkit.DSN(t)
	out, _ := runBench(t, map[string]string{"WHILLY_DATABASE_URL": dsn},
		"idle", "--workers", "20", "--wakes", "3", "--window", "1s", "--serve-bin", bin)
	last := lastLine(out)
	// A wake latency may be negative on a loaded machine (see the claims test).
	re := regexp.MustCompile(`^workers=20 rss_per_worker_kib=-?\d+\.\d heap_per_worker_kib=-?\d+\.\d idle_queries=\d+ wake_p50_ms=-?\d+\.\d\d wake_p99_ms=-?\d+\.\d\d$`)
	if !re.MatchString(last) {
		t.Fatalf("last line %q is not the key=value summary\n%s", last, out)
	}
	t.Log(last)
	assertNoScratch(t, dsn)
}

// buildWhilly builds whilly into a temporary directory.
func buildWhilly(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "whilly")
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("no go command to build whilly with: %v", err)
	}
	build := exec.Command(goBin, "build", "-o", bin, "./cmd/whilly")
	build.Dir = ".."
	if b, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build whilly: %v\n%s", err, b)
	}
	return bin
}

// `whilly bench workspace` needs no database: at a tiny scale it prints its table, then
// the key=value line last; a second run reuses the repository the first generated.
func TestBenchWorkspaceSmall(t *testing.T) {
	t.Parallel()
	cache := t.TempDir()
	args := []string{"workspace", "--history-mb", "2", "--tree-mb", "1", "--runs", "2", "--cache-dir", cache}
	out, progress := runBench(t, map[string]string{}, args...)
	for _, row := range []string{"repository", "first checkout", "second checkout"} {
		if !regexp.MustCompile(`(?m)^` + row + `  `).MatchString(out) {
			t.Errorf("no %q row in\n%s", row, out)
		}
	}
	if !strings.Contains(out, "\nbox start  ") && !strings.Contains(out, "\nbox start skipped: ") {
		t.Errorf("neither the box start's row nor why it was skipped in\n%s", out)
	}
	re := regexp.MustCompile(`^history_mb=2 tree_mb=1 first_checkout_s=\d+\.\d\d second_checkout_s=\d+\.\d\d second_ratio=\d+\.\d{3} second_pass=(true|false) ` +
		`(box_added_p50_ms=-?\d+\.\d box_added_p90_ms=-?\d+\.\d box_pass=(true|false)|box_added_p50_ms=skipped box_added_p90_ms=skipped box_pass=skipped)$`)
	if last := lastLine(out); !re.MatchString(last) {
		t.Fatalf("last line %q is not the key=value summary\n%s", last, out)
	}
	if !strings.Contains(progress, "bench: generated in ") {
		t.Errorf("the first run does not say it generated the repository:\n%s", progress)
	}

	out, _ = runBench(t, map[string]string{}, append(args, "--json")...)
	var res bench.WorkspaceResult
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if res.Repo.Generated || !strings.HasPrefix(res.Repo.Dir, cache) {
		t.Errorf("the second run did not reuse the repository in %s: %+v", cache, res.Repo)
	}
	if res.First.Files != res.Repo.Files || res.Second.Files != res.Repo.Files || res.First.Head != res.Repo.Head {
		t.Errorf("checkouts %+v and %+v of repository %+v", res.First, res.Second, res.Repo)
	}
}
