//go:build linux

package worker_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/whilly-go/whilly/agent"
	"github.com/whilly-go/whilly/control/client"
	"github.com/whilly-go/whilly/plan"
	"github.com/whilly-go/whilly/queue"
	"github.com/whilly-go/whilly/sandbox"
	"github.com/whilly-go/whilly/worker"
)

// cacheAgent runs in the box: it reports what its caches hold, writes into them, and
// tries to poison what the setup script left there and to reach the base cache by the
// worker's path.
const cacheAgent = `#!/bin/sh
cat >/dev/null
echo "AGENT RAN $WHILLY_PLAN_ID/$WHILLY_TASK_ID" >&2
seen=$(ls "$GOMODCACHE" "$npm_config_cache" 2>/dev/null | sort | tr '\n' ' ')
setup=$(cat "$GOMODCACHE/from-setup" 2>/dev/null | tr '\n' ' ')
echo "$WHILLY_TASK_ID" > "$GOMODCACHE/mod-$WHILLY_PLAN_ID-$WHILLY_TASK_ID"
echo "$WHILLY_TASK_ID" > "$npm_config_cache/npm-$WHILLY_PLAN_ID-$WHILLY_TASK_ID"
echo poisoned >> "$GOMODCACHE/from-setup" 2>/dev/null
base=none
for d in "$CACHE_ROOT"/base/*/go-mod; do
  if (echo evil > "$d/evil") 2>/dev/null; then base=written; fi
done
printf '{"result": "gomodcache=%s setup=[%s] base=%s seen=[%s] <promise>COMPLETE</promise>", "total_cost_usd": 0.01}\n' \
  "$GOMODCACHE" "$setup" "$base" "$seen"
`

// cacheEnv is a repository with a worker whose agent is cacheAgent, in a box.
type cacheEnv struct {
	*repoEnv
	cacheDir, logDir, agent string
}

func newCacheEnv(t *testing.T) *cacheEnv {
	t.Helper()
	boxedT(t)
	e := &cacheEnv{repoEnv: newRepoEnv(t), cacheDir: filepath.Join(t.TempDir(), "cache"), logDir: t.TempDir()}
	// The agent alone in its directory: the box binds the directory of the agent's command.
	e.agent = filepath.Join(t.TempDir(), "agent.sh")
	writeFile(t, e.agent, cacheAgent)
	if err := os.Chmod(e.agent, 0o755); err != nil {
		t.Fatal(err)
	}
	return e
}

// pushSetup commits the setup script to branch of the remote (made from main when new).
func (e *cacheEnv) pushSetup(t *testing.T, branch, script string) {
	t.Helper()
	seed := t.TempDir()
	gitIn(t, seed, "clone", "-q", e.remote, ".")
	if branch != "main" {
		gitIn(t, seed, "checkout", "-q", "-B", branch)
	}
	writeFile(t, filepath.Join(seed, worker.SetupScript), script)
	gitIn(t, seed, "add", "-A")
	gitIn(t, seed, "commit", "-q", "-m", "setup script")
	gitIn(t, seed, "push", "-q", "origin", "HEAD:refs/heads/"+branch)
}

// run runs a worker on planID in a box (mode) until it drained the plan, or for
// maxTasks tasks.
func (e *cacheEnv) run(t *testing.T, planID, mode string, maxTasks int) worker.Summary {
	t.Helper()
	base := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "CACHE_ROOT=" + e.cacheDir}
	sb, err := sandbox.New(sandbox.Config{Settings: sandbox.Settings{Mode: mode, Net: sandbox.NetNone, AgentEnv: []string{"CACHE_ROOT"}}})
	if err != nil {
		t.Fatal(err)
	}
	ag, err := agent.New(agent.NameCommand, agent.Config{Command: e.agent, BaseEnv: base, Sandbox: sb})
	if err != nil {
		t.Fatal(err)
	}
	w, api := (&env{st: e.st, url: e.url}).registered(t, e.url)
	var logs syncBuffer
	wk, err := worker.New(api, ag, slog.New(slog.NewTextHandler(&logs, nil)), worker.Config{WorkerID: w.ID, PlanID: planID,
		Drain: maxTasks == 0, MaxTasks: maxTasks, ClaimWait: time.Second, WorkspaceDir: e.wsDir, Git: e.git,
		LogDir: e.logDir, Sandbox: sb, Cache: worker.CachePolicy{Dir: e.cacheDir}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sum, err := wk.Run(ctx)
	if err != nil {
		t.Fatalf("Run: %v\n%s", err, logs.String())
	}
	return sum
}

func (e *cacheEnv) task(t *testing.T, planID, id string) queue.TaskInfo {
	t.Helper()
	task, err := e.st.GetTask(context.Background(), planID, id)
	if err != nil {
		t.Fatal(err)
	}
	return task
}

// attemptLog is the attempt's log file.
func (e *cacheEnv) attemptLog(t *testing.T, planID, taskID string, attempt int) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(e.logDir, planID, fmt.Sprintf("%s.%d.log", taskID, attempt)))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// baseCache is the one base cache directory under the cache root.
func (e *cacheEnv) baseCache(t *testing.T) string {
	t.Helper()
	dirs, err := filepath.Glob(filepath.Join(e.cacheDir, "base", "*", "go-mod"))
	if err != nil || len(dirs) != 1 {
		t.Fatalf("base caches: %v %v", dirs, err)
	}
	return filepath.Dir(dirs[0])
}

func readFile(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// A task of a plan finds in its caches what the setup script and the plan's earlier
// tasks put there; a task of another plan of the same repository finds what the setup
// script put there, and nothing the first plan wrote, not even its change to a file the
// setup script made. The base cache is out of every agent's reach; a plan's cache goes
// when the plan ends.
func TestPlanCacheIsThePlans(t *testing.T) {
	t.Parallel()
	e := newCacheEnv(t)
	e.pushSetup(t, "main", "#!/bin/sh\nset -e\necho \"setup ran\"\necho base > \"$GOMODCACHE/from-setup\"\necho run >> \"$XDG_CACHE_HOME/runs\"\n")

	e.importPlan(t, "first", 2, 1)
	if sum := e.run(t, "first", sandbox.ModeBwrap, 0); sum.Done != 2 {
		t.Fatalf("first plan: %+v %+v", sum, e.task(t, "first", "T01"))
	}
	r0, r1 := e.task(t, "first", "T00").Result, e.task(t, "first", "T01").Result
	if !strings.Contains(r0, "gomodcache="+worker.CacheBoxDir+"/go-mod ") || !strings.Contains(r0, "setup=[base ]") {
		t.Errorf("T00 of the first plan: %s", r0)
	}
	for _, want := range []string{"mod-first-T00", "npm-first-T00", "setup=[base poisoned ]"} {
		if !strings.Contains(r1, want) {
			t.Errorf("T01 of the first plan does not see %q of T00: %s", want, r1)
		}
	}
	if strings.Contains(r0+r1, "base=written") {
		t.Errorf("an agent wrote into the base cache: %s | %s", r0, r1)
	}
	if log := e.attemptLog(t, "first", "T00", 1); !strings.Contains(log, "setup ran") {
		t.Errorf("the setup script's output is not in the first attempt's log:\n%s", log)
	}
	if log := e.attemptLog(t, "first", "T01", 1); strings.Contains(log, "setup ran") {
		t.Errorf("the setup script ran again for the plan's second task:\n%s", log)
	}
	if plans, _ := filepath.Glob(filepath.Join(e.cacheDir, "plan", "*")); len(plans) != 0 {
		t.Errorf("the cache of the ended plan is still there: %v", plans)
	}

	e.setSpec(func(s *client.Workspace) { s.Branch = "whilly/issue-8" })
	e.importPlan(t, "second", 1, 1)
	if sum := e.run(t, "second", sandbox.ModeBwrap, 0); sum.Done != 1 {
		t.Fatalf("second plan: %+v", sum)
	}
	r := e.task(t, "second", "T00").Result
	if strings.Contains(r, "first-") || !strings.Contains(r, "setup=[base ]") {
		t.Errorf("the second plan sees what the first wrote: %s", r)
	}
	base := e.baseCache(t)
	if got := readFile(t, filepath.Join(base, "go-mod", "from-setup")); got != "base\n" {
		t.Errorf("the base cache's file is %q after the agents ran", got)
	}
	entries, err := os.ReadDir(filepath.Join(base, "go-mod"))
	if err != nil || len(entries) != 1 {
		t.Errorf("the base cache holds %v (%v), want from-setup alone", entries, err)
	}
	if runs := readFile(t, filepath.Join(base, "xdg", "runs")); runs != "run\nrun\n" {
		t.Errorf("the setup script ran %d times, want once per plan", strings.Count(runs, "run"))
	}
}

// Unboxed (WHILLY_SANDBOX=none) the variables point at the plan's cache on the worker,
// and the agent can write the base cache: the attack the box stops.
func TestPlanCacheUnboxed(t *testing.T) {
	t.Parallel()
	e := newCacheEnv(t)
	e.pushSetup(t, "main", "#!/bin/sh\necho base > \"$GOMODCACHE/from-setup\"\n")
	e.importPlan(t, "unboxed", 2, 1)
	if sum := e.run(t, "unboxed", sandbox.ModeNone, 0); sum.Done != 2 {
		t.Fatalf("%+v", sum)
	}
	r0, r1 := e.task(t, "unboxed", "T00").Result, e.task(t, "unboxed", "T01").Result
	if !strings.Contains(r0, "gomodcache="+filepath.Join(e.cacheDir, "plan")) {
		t.Errorf("unboxed GOMODCACHE is not in the plan's cache: %s", r0)
	}
	if !strings.Contains(r1, "mod-unboxed-T00") || !strings.Contains(r1, "setup=[base poisoned ]") {
		t.Errorf("T01 does not see what T00 wrote: %s", r1)
	}
	if !strings.Contains(r0, "base=written") {
		t.Errorf("unboxed, the agent should reach the base cache (what the box stops): %s", r0)
	}
}

// The setup script that runs is the base branch's, never the plan branch's; it runs
// again when it changes on the base, and only then.
func TestSetupScriptComesFromTheBase(t *testing.T) {
	t.Parallel()
	e := newCacheEnv(t)
	e.pushSetup(t, "main", "#!/bin/sh\necho \"setup v1 from the base\"\n")
	e.pushSetup(t, "whilly/issue-7", "#!/bin/sh\necho \"setup from the plan branch\"\n")
	e.importPlan(t, "setup", 3, 1)

	e.run(t, "setup", sandbox.ModeBwrap, 1)
	if log := e.attemptLog(t, "setup", "T00", 1); !strings.Contains(log, "setup v1 from the base") || strings.Contains(log, "plan branch") {
		t.Errorf("first attempt's log:\n%s", log)
	}
	e.pushSetup(t, "main", "#!/bin/bash\necho \"setup v2 from the base in ${BASH_VERSION:+bash}\"\n")
	e.run(t, "setup", sandbox.ModeBwrap, 1)
	if log := e.attemptLog(t, "setup", "T01", 1); !strings.Contains(log, "setup v2 from the base in bash") {
		t.Errorf("the changed script did not run (with bash) before the second task:\n%s", log)
	}
	e.run(t, "setup", sandbox.ModeBwrap, 1)
	if log := e.attemptLog(t, "setup", "T02", 1); strings.Contains(log, "setup v") {
		t.Errorf("the unchanged script ran again:\n%s", log)
	}
	for _, id := range []string{"T00", "T01", "T02"} {
		if s := e.task(t, "setup", id).Status; s != plan.StatusDone {
			t.Errorf("%s is %s: %+v", id, s, e.task(t, "setup", id))
		}
	}
}

// A failing setup script fails the attempt with setup_failed and its last lines; the
// agent does not run.
func TestSetupFailureFailsTheAttempt(t *testing.T) {
	t.Parallel()
	e := newCacheEnv(t)
	e.pushSetup(t, "main", "#!/bin/sh\nfor i in $(seq -w 1 30); do echo \"early-line-$i\"; done\necho \"the last words\" >&2\nexit 3\n")
	e.importPlan(t, "broken", 1, 1)
	if sum := e.run(t, "broken", sandbox.ModeBwrap, 0); sum.Failed != 1 {
		t.Fatalf("%+v", sum)
	}
	task := e.task(t, "broken", "T00")
	if task.Status != plan.StatusFailed || !strings.Contains(task.LastError, worker.ReasonSetupFailed) {
		t.Errorf("task %s, last error %q; want FAILED with %s", task.Status, task.LastError, worker.ReasonSetupFailed)
	}
	for _, want := range []string{"exit status 3", "the last words", "early-line-30"} {
		if !strings.Contains(task.LastOutput, want) {
			t.Errorf("the failure's output lacks %q:\n%s", want, task.LastOutput)
		}
	}
	if strings.Contains(task.LastOutput, "early-line-01") {
		t.Errorf("the failure's output is not the script's last lines:\n%s", task.LastOutput)
	}
	if log := e.attemptLog(t, "broken", "T00", 1); strings.Contains(log, "AGENT RAN") || !strings.Contains(log, "the last words") {
		t.Errorf("attempt log:\n%s", log)
	}
}

// Past WHILLY_CACHE_MAX_BYTES the least recently used caches go, oldest first, but
// never one in use; a module cache's read-only tree goes too.
func TestCacheEviction(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	cs := worker.NewCaches(root, 5<<19, nil) // 2.5 MiB
	ctx := context.Background()
	open := func(planID string, age time.Duration) *worker.PlanCache {
		pc, err := cs.Open(ctx, "repo", planID, worker.Setup{})
		if err != nil {
			t.Fatal(err)
		}
		dir := filepath.Join(pc.Dir, "go-mod", "example.com", "mod@v1.0.0")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "big"), make([]byte, 1<<20), 0o444); err != nil {
			t.Fatal(err)
		}
		for _, d := range []string{dir, filepath.Dir(dir)} {
			if err := os.Chmod(d, 0o555); err != nil {
				t.Fatal(err)
			}
		}
		when := time.Now().Add(-age)
		if err := os.Chtimes(pc.Dir+".lock", when, when); err != nil {
			t.Fatal(err)
		}
		return pc
	}
	old := open("old", 3*time.Hour)
	if err := old.Close(); err != nil {
		t.Fatal(err)
	}
	busy := open("busy", 4*time.Hour) // the least recently used, but in use
	recent := open("recent", time.Hour)
	if err := recent.Close(); err != nil {
		t.Fatal(err)
	}
	res, err := cs.Evict(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var removed []string
	for _, ci := range res.Removed {
		removed = append(removed, ci.Name)
	}
	if !slices.Equal(removed, []string{"old"}) || res.Busy != 1 || res.Bytes != 2<<20 {
		t.Errorf("evicted %v, busy %d, %d bytes left; want [old], 1, 2 MiB", removed, res.Busy, res.Bytes)
	}
	if _, err := os.Stat(old.Dir); !os.IsNotExist(err) {
		t.Errorf("the evicted cache is still there: %v", err)
	}
	for _, pc := range []*worker.PlanCache{busy, recent} {
		if _, err := os.Stat(pc.Dir); err != nil {
			t.Errorf("a cache that had to stay is gone: %v", err)
		}
	}
	// Let go, the busy one goes next; removing a plan's cache removes it all.
	if err := busy.Close(); err != nil {
		t.Fatal(err)
	}
	for id, pc := range map[string]*worker.PlanCache{"busy": busy, "recent": recent} {
		if err := cs.RemovePlan(ctx, id); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(pc.Dir); !os.IsNotExist(err) {
			t.Errorf("RemovePlan left the cache of %s: %v", id, err)
		}
	}
}

// A plan's cache is a copy of the base: modes kept, links copied as links and never
// followed, FIFOs left out; what the plan writes stays in the plan. The setup script
// runs for a new plan and again when it changes, and the plan's cache is then topped up
// from the base without losing what the plan wrote.
func TestPlanCacheIsSeededFromTheBase(t *testing.T) {
	t.Parallel()
	cs := worker.NewCaches(t.TempDir(), 0, nil)
	ctx := context.Background()
	runs := 0
	setup := func(script string, fill func(base string) error) worker.Setup {
		return worker.Setup{Script: []byte(script), Run: func(_ context.Context, base string) error {
			runs++
			return fill(base)
		}}
	}
	v1 := setup("v1", func(base string) error {
		mod := filepath.Join(base, "go-mod")
		ro := filepath.Join(mod, "example.com", "m@v1")
		return errors.Join(
			os.WriteFile(filepath.Join(mod, "f"), []byte("base\n"), 0o640),
			os.MkdirAll(ro, 0o755),
			os.WriteFile(filepath.Join(ro, "go.mod"), []byte("module m\n"), 0o444),
			os.Chmod(ro, 0o555),
			os.Symlink("/etc/hostname", filepath.Join(mod, "abs-link")),
			os.Symlink("f", filepath.Join(mod, "rel-link")),
			syscall.Mkfifo(filepath.Join(base, "xdg", "fifo"), 0o600),
		)
	})
	pc, err := cs.Open(ctx, "repo", "p", v1)
	if err != nil {
		t.Fatal(err)
	}
	mod := filepath.Join(pc.Dir, "go-mod")
	mode := func(p string) os.FileMode {
		fi, err := os.Lstat(p)
		if err != nil {
			t.Fatal(err)
		}
		return fi.Mode()
	}
	if m := mode(filepath.Join(mod, "f")); m != 0o640 {
		t.Errorf("f has mode %v, want 0640", m)
	}
	if m := mode(filepath.Join(mod, "example.com", "m@v1")); m != os.ModeDir|0o555 {
		t.Errorf("the module's directory has mode %v, want dr-xr-xr-x", m)
	}
	if m := mode(filepath.Join(mod, "example.com", "m@v1", "go.mod")); m != 0o444 {
		t.Errorf("go.mod has mode %v, want 0444", m)
	}
	for link, want := range map[string]string{"abs-link": "/etc/hostname", "rel-link": "f"} {
		if got, err := os.Readlink(filepath.Join(mod, link)); err != nil || got != want {
			t.Errorf("%s: %q %v, want a link to %q", link, got, err, want)
		}
	}
	if _, err := os.Lstat(filepath.Join(pc.Dir, "xdg", "fifo")); !os.IsNotExist(err) {
		t.Errorf("the FIFO was copied: %v", err)
	}
	// The plan poisons its copy.
	if err := os.WriteFile(filepath.Join(mod, "f"), []byte("poisoned\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	if err := pc.Close(); err != nil {
		t.Fatal(err)
	}
	base := filepath.Join(filepath.Dir(filepath.Dir(pc.Dir)), "base")
	if b, err := filepath.Glob(filepath.Join(base, "*", "go-mod", "f")); err != nil || len(b) != 1 || readFile(t, b[0]) != "base\n" {
		t.Errorf("the base's f after the plan wrote its own: %v %v", b, err)
	}

	reopen := func(planID string, s worker.Setup) *worker.PlanCache {
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		pc, err := cs.Open(ctx, "repo", planID, s)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = pc.Close() })
		return pc
	}
	// Two tasks of the plan use its cache at once; a changed script waits for them.
	a, b := reopen("p", v1), reopen("p", v1)
	if runs != 1 {
		t.Errorf("the unchanged script ran again for the same plan: %d runs", runs)
	}
	for _, h := range []*worker.PlanCache{a, b} {
		if err := h.Close(); err != nil {
			t.Fatal(err)
		}
	}
	v2 := setup("v2", func(base string) error {
		return os.WriteFile(filepath.Join(base, "go-mod", "g"), []byte("new\n"), 0o644)
	})
	reopen("p", v2)
	if runs != 2 || readFile(t, filepath.Join(mod, "g")) != "new\n" || readFile(t, filepath.Join(mod, "f")) != "poisoned\n" {
		t.Errorf("after a changed script: %d runs, g %q, f %q", runs, readFile(t, filepath.Join(mod, "g")), readFile(t, filepath.Join(mod, "f")))
	}
	other := reopen("q", v2)
	if runs != 3 || readFile(t, filepath.Join(other.Dir, "go-mod", "f")) != "base\n" {
		t.Errorf("another plan: %d runs, f %q", runs, readFile(t, filepath.Join(other.Dir, "go-mod", "f")))
	}
	// A failing script leaves no cache behind for a new plan, and runs again next time.
	failed := 0
	failing := worker.Setup{Script: []byte("v3"), Run: func(context.Context, string) error {
		failed++
		return &worker.SetupError{Detail: "exit status 1"}
	}}
	var se *worker.SetupError
	if _, err := cs.Open(ctx, "repo", "r", failing); !errors.As(err, &se) {
		t.Fatalf("Open with a failing script = %v", err)
	}
	if left, _ := filepath.Glob(filepath.Join(filepath.Dir(pc.Dir), "r-*")); len(left) != 1 || !strings.HasSuffix(left[0], ".lock") {
		t.Errorf("a failed setup left %v, want the lock file alone", left)
	}
	if _, err := cs.Open(ctx, "repo", "r", failing); !errors.As(err, &se) || failed != 2 {
		t.Errorf("Open again after a failed setup = %v, the script ran %d times; want it run again", err, failed)
	}
}

// The plan's verification commands run with the attempt's caches: they find what the
// agent put there.
func TestVerifyRunsWithThePlansCache(t *testing.T) {
	t.Parallel()
	e := newCacheEnv(t)
	p := &plan.Plan{ID: "verify", Name: "verify", Repo: "acme/shop", Verify: []plan.Verify{{Name: "cache",
		Command: `test "$GOMODCACHE" = /whilly/cache/go-mod && test -f "$GOMODCACHE/mod-verify-T00"`, Required: true}}}
	p.Tasks = []plan.Task{{ID: "T00", Priority: plan.PriorityMedium, Description: "A change of the shop, long enough",
		AcceptanceCriteria: []string{"ok"}, TestSteps: []string{"true"}, MaxAttempts: 1}}
	if _, err := e.st.Import(context.Background(), p, queue.ImportOptions{}); err != nil {
		t.Fatal(err)
	}
	if sum := e.run(t, "verify", sandbox.ModeBwrap, 0); sum.Done != 1 {
		t.Fatalf("%+v %+v", sum, e.task(t, "verify", "T00"))
	}
}
