//go:build linux

package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/whilly-go/whilly/plan"
	"github.com/whilly-go/whilly/queue"
	"github.com/whilly-go/whilly/sandbox"
	"github.com/whilly-go/whilly/testkit"
)

// The real projects the box must build and test, pinned. walker's own tests depend on
// the box's identity: TestWalker expects a permission error from a directory it made
// unreadable, which uid 0 never gets. concat-map ships its tape tests in its tarball.
const (
	realGoModule   = "github.com/saracen/walker"
	realGoVersion  = "v0.1.3"
	realGoRepo     = "saracen/walker"
	realNpmPackage = "concat-map"
	realNpmVersion = "0.0.1"
	realNpmRepo    = "substack/node-concat-map"
	realInstall    = 77
)

// realAgent is the command agent of the real-project test. What it does depends on its
// plan and task; it prints the completion marker only when all of it passed, and says
// what failed otherwise (the FAIL event's excerpt). A marker file it writes into the
// caches of plan go-a and npm-a must be seen by their second task and by no other plan.
const realAgent = `#!/bin/sh
cat >/dev/null
say() { printf 'e2e-agent: %s\n' "$*" >&2; }
fail() { say "FAILED: $*"; echo '{"result":"the task failed","is_error":true}'; exit 1; }
marker=whilly-e2e-marker
say "plan $WHILLY_PLAN_ID task $WHILLY_TASK_ID attempt $WHILLY_ATTEMPT as uid $(id -u) in $PWD"
case "$WHILLY_PLAN_ID/$WHILLY_TASK_ID" in
go-a/T001)
	if curl -sS -m 30 -o /dev/null https://example.com/; then fail "example.com was reached"; fi
	probe=$(mktemp -d) && (cd "$probe" && go mod init example.com/probe >/dev/null 2>&1) || fail "go mod init in $probe"
	if (cd "$probe" && GOPROXY=direct GOFLAGS=-mod=mod timeout 120 go get github.com/pkg/errors@v0.9.1); then
		fail "go get from github.com directly succeeded"
	fi
	go build ./... || fail "go build ./... failed"
	go test ./... || fail "go test ./... failed as uid $(id -u)"
	for d in "$(go env GOMODCACHE)" "$(go env GOCACHE)"; do
		echo "$WHILLY_PLAN_ID" > "$d/$marker" || fail "cannot write a file into the cache $d"
	done
	;;
go-a/T002)
	for d in "$(go env GOMODCACHE)" "$(go env GOCACHE)"; do
		[ -f "$d/$marker" ] || fail "the plan's first task left $marker in $d, but this task does not see it"
	done
	GOPROXY=off go build ./... || fail "GOPROXY=off go build ./... failed: the plan's module cache is not kept"
	GOPROXY=off go test ./... || fail "GOPROXY=off go test ./... failed"
	;;
go-b/T001)
	for d in "$(go env GOMODCACHE)" "$(go env GOCACHE)"; do
		[ ! -e "$d/$marker" ] || fail "plan $(cat "$d/$marker")'s $marker is in this plan's cache $d"
	done
	;;
npm-a/T001)
	npm install || fail "npm install failed"
	npm test || fail "npm test failed"
	d=$(npm config get cache)
	echo "$WHILLY_PLAN_ID" > "$d/$marker" || fail "cannot write a file into the npm cache $d"
	;;
npm-a/T002)
	d=$(npm config get cache)
	[ -f "$d/$marker" ] || fail "the plan's first task left $marker in $d, but this task does not see it"
	rm -rf node_modules
	npm install --offline || fail "npm install --offline failed: the plan's npm cache is not kept"
	npm test || fail "npm test failed"
	;;
npm-b/T001)
	d=$(npm config get cache)
	[ ! -e "$d/$marker" ] || fail "plan $(cat "$d/$marker")'s $marker is in this plan's npm cache $d"
	;;
*)
	fail "no work for $WHILLY_PLAN_ID/$WHILLY_TASK_ID"
	;;
esac
say "passed"
echo '{"result":"built and tested <promise>COMPLETE</promise>","total_cost_usd":0,"is_error":false}'
`

// Real open-source projects, fetched through the registries this machine reaches and
// served by the fake GitHub, build and test in the box of a worker at its defaults (no
// sandbox variable set; root, as here): a Go module with dependencies and permission
// tests, and an npm package with its tests. The second task of a plan passes offline
// from the plan's caches; another plan of the same repository does not see what the
// first wrote into its caches; hosts nobody allowed are refused and recorded. Every
// outcome is read from the control plane: tasks DONE at their first attempt, events.
func TestRealProjectsBuildAndTestInTheBoxOfAWorkerAtItsDefaults(t *testing.T) {
	t.Parallel()
	requireSandbox(t)
	if os.Geteuid() != 0 {
		t.Log("not root: the root worker's box is not exercised, only a non-root one")
	}
	goSrc := testkit.GoModule(t, realGoModule, realGoVersion)
	npmSrc := testkit.NpmPackage(t, realNpmPackage, realNpmVersion)

	gh := testkit.NewGitHub(t)
	gh.Install(realInstall, realGoRepo, realNpmRepo)
	gh.AddGitRepo(realGoRepo, "main", testkit.ProjectFiles(t, goSrc))
	npmFiles := testkit.ProjectFiles(t, npmSrc)
	// As the project's repository would have it: what npm install makes is not source.
	npmFiles[".gitignore"] = "node_modules/\npackage-lock.json\n"
	gh.AddGitRepo(realNpmRepo, "main", npmFiles)
	// Plan x-b runs while plan x-a is still under way on the same worker (its second task
	// waits): x-a's caches are on the worker's disk, and must stay out of x-b's box.
	plans := []struct {
		id, repo string
		issue    int
		tasks    int
	}{{"go-a", realGoRepo, 1, 2}, {"go-b", realGoRepo, 2, 1}, {"npm-a", realNpmRepo, 1, 2}, {"npm-b", realNpmRepo, 2, 1}}
	for _, p := range plans {
		gh.AddIssue(p.repo, p.issue, "Build and test "+p.id, "Build the project and run its tests.", "octocat")
	}

	c := newCluster(t, appEnv(gh, "WHILLY_GITHUB_WEBHOOK_SECRET=s")...)
	base := c.serveOne()
	for _, p := range plans {
		c.importRepoPlan(p.id, p.repo, p.issue, p.tasks)
	}
	dir := t.TempDir()
	script := filepath.Join(dir, "agent.sh")
	if err := os.WriteFile(script, []byte(realAgent), 0o755); err != nil {
		t.Fatal(err)
	}
	// Two machines, one per project, each a worker with a fresh user's HOME (its
	// workspaces and caches lie under it by default) started again for each step, as an
	// operator restarts whilly-worker: --plan and --once order the tasks of the plans.
	type machine struct{ name, id, token, home, data string }
	newMachine := func(name string) machine {
		m := machine{name: name, home: filepath.Join(dir, name, "home"), data: filepath.Join(dir, name, "data")}
		for _, d := range []string{m.home, m.data} {
			if err := os.MkdirAll(d, 0o700); err != nil {
				t.Fatal(err)
			}
		}
		m.id, m.token = c.register(base)
		return m
	}
	goBox, npmBox := newMachine("go-worker"), newMachine("npm-worker")
	step := func(n int, runs map[machine]string) {
		t.Helper()
		var ws []workerProc
		for m, planID := range runs {
			ws = append(ws, c.startWorker(fmt.Sprintf("%s step %d (%s)", m.name, n, planID), base, m.id, m.token,
				[]string{"HOME=" + m.home, "WHILLY_DATA_DIR=" + m.data, "WHILLY_AGENT=command", "WHILLY_AGENT_CMD=" + script},
				"--plan", planID, "--once", "--drain"))
		}
		for _, w := range ws {
			w.wait(t, 5*time.Minute)
		}
	}
	begin := time.Now()
	step(1, map[machine]string{goBox: "go-a", npmBox: "npm-a"})
	for _, m := range []machine{goBox, npmBox} {
		if found := markers(t, m.home); len(found) == 0 {
			t.Errorf("%s: no whilly-e2e-marker under the worker's HOME after the first task: the plan's caches were not kept on the worker", m.name)
		}
	}
	step(2, map[machine]string{goBox: "go-b", npmBox: "npm-b"})
	step(3, map[machine]string{goBox: "go-a", npmBox: "npm-a"})
	t.Logf("the three steps took %v", time.Since(begin).Round(time.Second))

	want := map[string]string{
		"go-a/T001":  "go build and go test of " + realGoModule + " (its permission tests need a non-root uid) in the box",
		"go-a/T002":  "GOPROXY=off go test of the same plan: its module cache was kept",
		"go-b/T001":  "another plan of the repository sees nothing the first wrote into its Go caches",
		"npm-a/T001": "npm install and npm test of " + realNpmPackage + " in the box",
		"npm-a/T002": "npm install --offline and npm test of the same plan: its npm cache was kept",
		"npm-b/T001": "another plan of the repository sees nothing the first wrote into its npm cache",
	}
	for _, key := range slices.Sorted(maps.Keys(want)) {
		planID, taskID, _ := strings.Cut(key, "/")
		tr := c.task(planID, taskID)
		if tr.status != "DONE" || tr.attempts != 1 {
			t.Errorf("%s: %s — task is %s after %d attempts, want DONE at the first; %s", key, want[key], tr.status, tr.attempts, c.failure(planID, taskID))
		}
		if sb := c.attemptSandbox(planID, taskID); tr.attempts > 0 && sb != sandbox.ModeBwrap {
			t.Errorf("%s ran with sandbox %q, want %s", key, sb, sandbox.ModeBwrap)
		}
	}
	for _, p := range plans {
		if st := c.planStatus(p.id); st != "DONE" {
			t.Errorf("plan %s is %s, want DONE", p.id, st)
		}
	}
	denied := c.deniedHosts("go-a", "T001")
	for _, host := range []string{"example.com:443", "github.com:443"} {
		if !slices.Contains(denied, host) {
			t.Errorf("no agent.egress_denied event for %s of go-a/T001 (events name %v): a host nobody allowed must be refused and recorded", host, denied)
		}
	}
}

// requireSandbox skips a test that needs bubblewrap where it does not work, unless
// WHILLY_TEST_SANDBOX=require makes that a failure.
func requireSandbox(t *testing.T) {
	t.Helper()
	if err := sandbox.Check(context.Background()); err != nil {
		if os.Getenv("WHILLY_TEST_SANDBOX") == "require" {
			t.Fatalf("the sandbox must work here: %v", err)
		}
		t.Skipf("bubblewrap does not work here: %v", err)
	}
}

// importRepoPlan imports a plan of n tasks T001… (each after the one before, one attempt
// each) tied to issue #issue of repo on the App's installation: the control plane hands
// its claims a checkout of repo.
func (c *cluster) importRepoPlan(planID, repo string, issue, n int) {
	c.t.Helper()
	ts := tasks(n, 1)
	for i := 1; i < n; i++ {
		ts[i].Dependencies = []string{ts[i-1].ID}
	}
	doc, err := json.Marshal(map[string]any{"plan_id": planID, "project": "e2e " + planID, "repo": repo, "tasks": ts})
	if err != nil {
		c.t.Fatal(err)
	}
	p, err := plan.Parse(doc)
	if err != nil {
		c.t.Fatalf("plan %s: %v", planID, err)
	}
	_, err = queue.NewStore(c.pool, nil, queue.Config{}).Import(context.Background(), p,
		queue.ImportOptions{GitHubIssueRef: fmt.Sprintf("%s#%d", repo, issue), InstallationID: realInstall})
	if err != nil {
		c.t.Fatalf("import plan %s: %v", planID, err)
	}
}

// failure describes the task's last failure: its reason and what the next attempt
// would be told of it (the agent's account, the end of its output).
func (c *cluster) failure(planID, taskID string) string {
	c.t.Helper()
	var reason, output string
	err := c.pool.QueryRow(context.Background(), `SELECT coalesce(last_error, ''), coalesce(last_output, '')
		FROM tasks WHERE plan_id = $1 AND id = $2`, planID, taskID).Scan(&reason, &output)
	if err != nil || reason == "" {
		return "no failure recorded"
	}
	return fmt.Sprintf("failed with %s:\n%s", reason, output)
}

// attemptSandbox is the sandbox the task's latest agent.attempt event names.
func (c *cluster) attemptSandbox(planID, taskID string) string {
	c.t.Helper()
	var sb string
	if err := c.pool.QueryRow(context.Background(), `SELECT coalesce(payload->>'sandbox', '') FROM events
		WHERE plan_id = $1 AND task_id = $2 AND type = 'agent.attempt' ORDER BY id DESC LIMIT 1`, planID, taskID).Scan(&sb); err != nil {
		return ""
	}
	return sb
}

// deniedHosts lists the host:port of the task's agent.egress_denied events.
func (c *cluster) deniedHosts(planID, taskID string) []string {
	c.t.Helper()
	rows, err := c.pool.Query(context.Background(), `SELECT coalesce(payload->>'host', '') || ':' || coalesce(payload->>'port', '')
		FROM events WHERE plan_id = $1 AND task_id = $2 AND type = 'agent.egress_denied' ORDER BY id`, planID, taskID)
	if err != nil {
		c.t.Fatalf("read agent.egress_denied events: %v", err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var h string
		if err := rows.Scan(&h); err != nil {
			c.t.Fatal(err)
		}
		out = append(out, h)
	}
	if err := rows.Err(); err != nil {
		c.t.Fatal(err)
	}
	return out
}

// markers lists the files named whilly-e2e-marker under dir.
func markers(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil // an unreadable corner is not where the caches are
		}
		if !d.IsDir() && d.Name() == "whilly-e2e-marker" {
			out = append(out, p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
