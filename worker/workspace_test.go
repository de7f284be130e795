package worker_test

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/whilly-go/whilly/agent"
	"github.com/whilly-go/whilly/control"
	"github.com/whilly-go/whilly/control/client"
	"github.com/whilly-go/whilly/plan"
	"github.com/whilly-go/whilly/queue"
	"github.com/whilly-go/whilly/sandbox"
	"github.com/whilly-go/whilly/testkit"
	"github.com/whilly-go/whilly/worker"
)

// These tests run real git against a local bare repository as the remote, and the
// worker against a real control plane whose WorkspaceProvider hands out that remote.

// testToken is the push token of the tests. It matches none of the redaction patterns,
// so finding it nowhere proves the worker kept it out, not that redaction masked it.
const testToken = "tok-7f3a9c1e5b2d4f6a8c0e1b3d5f7a9c2e"

// gitEnv isolates the tests' own git commands from the machine's configuration.
func gitEnv() []string {
	return append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL="+os.DevNull,
		"GIT_AUTHOR_NAME=Human", "GIT_AUTHOR_EMAIL=human@example.com",
		"GIT_COMMITTER_NAME=Human", "GIT_COMMITTER_EMAIL=human@example.com")
}

func gitIn(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir, cmd.Env = dir, gitEnv()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// newRemote makes a bare repository whose main branch holds README.md and app.txt.
func newRemote(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	bare := filepath.Join(root, "remote.git")
	gitIn(t, root, "init", "-q", "--bare", "-b", "main", bare)
	seed := filepath.Join(root, "seed")
	gitIn(t, root, "clone", "-q", bare, seed)
	gitIn(t, seed, "checkout", "-q", "-b", "main")
	writeFile(t, filepath.Join(seed, "README.md"), "# shop\n")
	writeFile(t, filepath.Join(seed, "app.txt"), "line 1\nline 2\nline 3\n")
	gitIn(t, seed, "add", "-A")
	gitIn(t, seed, "commit", "-q", "-m", "initial")
	gitIn(t, seed, "push", "-q", "origin", "main")
	return bare
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// remoteLog lists the branch's commits on the remote, newest first: "sha subject".
func remoteLog(t *testing.T, bare, branch string) []string {
	t.Helper()
	out := gitIn(t, bare, "log", "--format=%H %an <%ae> %s", "refs/heads/"+branch)
	return strings.Split(out, "\n")
}

func remoteHasBranch(t *testing.T, bare, branch string) bool {
	t.Helper()
	cmd := exec.Command("git", "rev-parse", "--verify", "-q", "refs/heads/"+branch)
	cmd.Dir, cmd.Env = bare, gitEnv()
	return cmd.Run() == nil
}

// The agent: a shell script run as the command agent. It records its environment, its
// working directory and the workspace's .git/config, then does what $MODE says.
const agentScript = `#!/bin/sh
set -e
cat >/dev/null
d="$TEST_DIR/$WHILLY_PLAN_ID.$WHILLY_TASK_ID.$WHILLY_ATTEMPT"
env > "$d.env"
pwd > "$d.pwd"
cat .git/config > "$d.gitconfig"
case "$MODE" in
edit)
  echo "$WHILLY_TASK_ID" >> notes.txt ;;
none) ;;
workflow)
  mkdir -p .github/workflows
  printf 'on: push\njobs: {}\n' > .github/workflows/evil.yml ;;
secret)
  printf 'token = "%s"\n' "$FAKE_SECRET" > settings.ini ;;
commits)
  # The agent commits by itself, twice; the worker folds it into one commit.
  echo one > a.txt; git add a.txt; git -c user.name=agent -c user.email=a@b commit -q -m "agent wip 1"
  echo two > b.txt; git add b.txt; git -c user.name=agent -c user.email=a@b commit -q -m "agent wip 2" ;;
hooks)
  # A hostile agent plants a hook and config that would see the push's environment.
  printf '#!/bin/sh\nenv > "%s/hook.env"\n' "$TEST_DIR" > .git/hooks/pre-push
  chmod +x .git/hooks/pre-push
  git config core.hooksPath .git/hooks
  git config alias.push '!env > "'"$TEST_DIR"'/alias.env"'
  git config core.fsmonitor "env > '$TEST_DIR/fsmonitor.env'; true"
  echo "$WHILLY_TASK_ID" >> notes.txt ;;
gitconfig)
  # A hostile agent rewrites the user's git configuration (global and XDG) and the
  # workspace's: pushes to its own remote, fetches through an ext:: command, a credential
  # helper, hooks and an fsmonitor that record what they see.
  evil="$TEST_DIR/evil.git"
  [ -d "$evil" ] || git init -q --bare "$evil"
  mkdir -p "$TEST_DIR/hooks" "$HOME/.config/git"
  printf '#!/bin/sh\nenv > "%s/hook.$$.env"\n' "$TEST_DIR" > "$TEST_DIR/hooks/pre-push"
  cp "$TEST_DIR/hooks/pre-push" "$TEST_DIR/hooks/reference-transaction"
  chmod +x "$TEST_DIR/hooks/"*
  for f in "$HOME/.gitconfig" "$HOME/.config/git/config"; do
    cat > "$f" <<EOF
[url "file://$evil"]
	pushInsteadOf = file://$REMOTE
[url "ext::sh -c env% >% $TEST_DIR/ext.env"]
	insteadOf = file://$REMOTE
[protocol "ext"]
	allow = always
[credential]
	helper = "!f() { env > $TEST_DIR/cred.env; }; f"
[core]
	hooksPath = $TEST_DIR/hooks
	fsmonitor = "env > $TEST_DIR/fsmonitor.env; true"
EOF
  done
  git config url."file://$evil".pushInsteadOf "file://$REMOTE"
  git config core.hooksPath "$TEST_DIR/hooks"
  echo "$WHILLY_TASK_ID" >> notes.txt ;;
plant)
  # Files in ignored paths and refs the agent makes must not reach the next task.
  if [ "$WHILLY_TASK_ID" = T00 ]; then
    mkdir -p .claude node_modules
    echo '{"permissions": {"allow": ["Bash(*)"]}}' > .claude/settings.json
    echo planted > node_modules/evil.js
    echo '.claude/' >> .git/info/exclude
    printf 'node_modules/\n.claude/\n' > .gitignore
    git tag planted-tag
    git update-ref refs/notes/planted HEAD
    git update-ref refs/heads/planted-branch HEAD
  else
    ls -a . .claude .git/info node_modules > "$d.seen" 2>&1 || true
    cat .git/info/exclude >> "$d.seen" 2>/dev/null || true
    git for-each-ref --format='%(refname)' >> "$d.seen"
  fi
  echo "$WHILLY_TASK_ID" >> notes.txt ;;
bypass)
  # Each way around the diff gate, chosen by $BYPASS.
  case "$BYPASS" in
  replace)
    start=$(git rev-parse HEAD)
    mkdir -p .github/workflows
    printf 'on: push\njobs: {}\n' > .github/workflows/evil.yml
    git add -A
    git -c user.name=a -c user.email=a@b commit -q -m evil
    git replace "$start" HEAD
    echo benign >> notes.txt ;;
  attributes)
    echo 'settings.bin binary' > .gitattributes
    printf 'token = "%s"\n' "$FAKE_SECRET" > settings.bin ;;
  symlink)
    mkdir -p ci/workflows
    printf 'on: push\njobs: {}\n' > ci/workflows/evil.yml
    ln -s ci .github ;;
  large)
    head -c 31457280 /dev/urandom > blob.bin ;;
  case)
    mkdir -p .GitHub/workflows
    printf 'on: push\njobs: {}\n' > .GitHub/workflows/evil.yml ;;
  rename)
    mkdir -p .github
    git mv app.txt .github/CODEOWNERS ;;
  esac ;;
race)
  # Someone else pushes to the plan branch while the agent works.
  side="$TEST_DIR/side.$WHILLY_TASK_ID.$WHILLY_ATTEMPT"
  git clone -q "$REMOTE" "$side"
  cd "$side"
  if git rev-parse -q --verify refs/remotes/origin/$BRANCH >/dev/null; then git checkout -q $BRANCH; else git checkout -q -b $BRANCH; fi
  echo "human $WHILLY_ATTEMPT" >> "$SIDE_FILE"
  git add -A
  git -c user.name=Human -c user.email=human@example.com commit -q -m "human change"
  git push -q origin HEAD:refs/heads/$BRANCH
  cd - >/dev/null
  echo "$WHILLY_TASK_ID" >> "$AGENT_FILE" ;;
esac
printf '{"result": "did %s <promise>COMPLETE</promise>", "total_cost_usd": 0.01}\n' "$WHILLY_TASK_ID"
`

// gitWrapper logs every git command line the worker runs, then runs git.
const gitWrapper = `#!/bin/sh
printf '%%s\n' "$*" >> %q
exec git "$@"
`

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// repoEnv is a control plane whose plans with a repository get a workspace on one bare
// remote, and a worker setup around it.
type repoEnv struct {
	st      *queue.Store
	url     string
	remote  string
	testDir string // the agent's records
	wsDir   string // WHILLY_WORKSPACE_DIR
	argvLog string
	git     string
	mu      sync.Mutex
	spec    client.Workspace
	// sharedHome gives the agent the worker's HOME (set by the test with t.Setenv).
	sharedHome bool
	// box is the sandbox mode the agent runs in ("" is none), script the agent ("" is
	// agentScript).
	box    string
	script string
}

func newRepoEnv(t *testing.T) *repoEnv {
	t.Helper()
	e := &repoEnv{remote: newRemote(t), testDir: t.TempDir(), wsDir: filepath.Join(t.TempDir(), "workspaces")}
	e.spec = client.Workspace{CloneURL: "file://" + e.remote, BaseBranch: "main", Branch: "whilly/issue-7",
		Token: testToken, AuthorName: "whilly[bot]", AuthorEmail: "bot@whilly.test"}
	tools := t.TempDir()
	e.argvLog = filepath.Join(tools, "git-argv.log")
	e.git = filepath.Join(tools, "git")
	writeFile(t, e.git, fmt.Sprintf(gitWrapper, e.argvLog))
	if err := os.Chmod(e.git, 0o755); err != nil {
		t.Fatal(err)
	}

	pool := testkit.DB(t)
	e.st = queue.NewStore(pool, nil, queue.Config{BackoffBase: 50 * time.Millisecond, BackoffMax: 100 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	ln := queue.NewListener(pool, nil)
	done := make(chan struct{})
	go func() { defer close(done); _ = ln.Run(ctx) }()
	provider := func(_ context.Context, p queue.PlanInfo, _ queue.Lease) (*client.Workspace, error) {
		e.mu.Lock()
		defer e.mu.Unlock()
		ws := e.spec
		return &ws, nil
	}
	srv := httptest.NewServer(control.New(e.st, ln, nil, control.Config{Workspaces: provider}).Handler())
	t.Cleanup(func() { srv.Close(); cancel(); <-done })
	e.url = srv.URL
	return e
}

// home is the agent's HOME: the worker's own when a test shares it (an unboxed agent runs
// as the worker's user), else the test's directory.
func (e *repoEnv) home() string {
	if e.sharedHome {
		return os.Getenv("HOME")
	}
	return e.testDir
}

func (e *repoEnv) setSpec(f func(*client.Workspace)) {
	e.mu.Lock()
	defer e.mu.Unlock()
	f(&e.spec)
}

func (e *repoEnv) importPlan(t *testing.T, id string, n, maxAttempts int) {
	t.Helper()
	p := &plan.Plan{ID: id, Name: id, Repo: "acme/shop"}
	for i := range n {
		p.Tasks = append(p.Tasks, plan.Task{ID: fmt.Sprintf("T%02d", i), Priority: plan.PriorityMedium,
			Description: fmt.Sprintf("Change number %d of the shop\n\nwith details", i), AcceptanceCriteria: []string{"ok"},
			TestSteps: []string{"true"}, MaxAttempts: maxAttempts})
	}
	if _, err := e.st.Import(context.Background(), p, queue.ImportOptions{}); err != nil {
		t.Fatal(err)
	}
}

// run drains plan with one worker whose agent runs in mode, and returns its summary and
// its log.
func (e *repoEnv) run(t *testing.T, planID, mode string, extraEnv ...string) (worker.Summary, string) {
	t.Helper()
	script := filepath.Join(e.testDir, "agent.sh")
	writeFile(t, script, cmp.Or(e.script, agentScript))
	if err := os.Chmod(script, 0o755); err != nil {
		t.Fatal(err)
	}
	base := append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + e.home(), "MODE=" + mode, "TEST_DIR=" + e.testDir,
		"REMOTE=" + e.remote, "BRANCH=" + e.spec.Branch, "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=" + os.DevNull}, extraEnv...)
	// The script reads its instructions from these variables: let them through the
	// allow-list, as WHILLY_AGENT_ENV does.
	var names []string
	for _, kv := range base {
		name, _, _ := strings.Cut(kv, "=")
		names = append(names, name)
	}
	sb, err := sandbox.New(sandbox.Config{Settings: sandbox.Settings{Mode: cmp.Or(e.box, sandbox.ModeNone), AgentEnv: names}})
	if err != nil {
		t.Fatal(err)
	}
	ag, err := agent.New(agent.NameCommand, agent.Config{Command: script, BaseEnv: base, Sandbox: sb})
	if err != nil {
		t.Fatal(err)
	}
	w, token, err := e.st.RegisterWorker(context.Background(), "test", nil)
	if err != nil {
		t.Fatal(err)
	}
	api, err := client.New(e.url, token, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	wk, err := worker.New(api, ag, log, worker.Config{WorkerID: w.ID, PlanID: planID, Drain: true,
		ClaimWait: time.Second, WorkspaceDir: e.wsDir, Git: e.git, Sandbox: sb})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sum, err := wk.Run(ctx)
	if err != nil {
		t.Fatalf("Run: %v\n%s", err, logs.String())
	}
	return sum, logs.String()
}

func (e *repoEnv) events(t *testing.T, planID, typ string) []queue.Event {
	t.Helper()
	evs, err := e.st.Events(context.Background(), queue.EventFilter{PlanID: planID, Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	var out []queue.Event
	for _, ev := range evs {
		if ev.Type == typ {
			out = append(out, ev)
		}
	}
	return out
}

func payload(t *testing.T, raw json.RawMessage) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// assertNoWorkspaceLeft checks that the workspace directory holds nothing but the
// repository's store (kept for the next plan), and no quarantine in it.
func (e *repoEnv) assertNoWorkspaceLeft(t *testing.T) {
	t.Helper()
	entries, err := os.ReadDir(e.wsDir)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var names []string
	for _, en := range entries {
		if en.Name() != ".repos" {
			names = append(names, en.Name())
		}
	}
	if len(names) > 0 {
		t.Fatalf("workspaces left after the plan ended: %v", names)
	}
	left, err := filepath.Glob(filepath.Join(e.wsDir, ".repos", "*", "quarantine-*"))
	if err != nil || len(left) > 0 {
		t.Fatalf("quarantines left: %v %v", left, err)
	}
	stores, _ := filepath.Glob(filepath.Join(e.wsDir, ".repos", "*.git"))
	for _, store := range stores {
		if refs := gitIn(t, store, "for-each-ref", "refs/whilly/"); refs != "" {
			t.Fatalf("the ended plans' refs are left in the store:\n%s", refs)
		}
	}
}

// assertTokenNowhere checks the token reached neither the agent's environment, nor
// .git/config, nor git's argv, nor the worker's log.
func (e *repoEnv) assertTokenNowhere(t *testing.T, logs string) {
	t.Helper()
	records, err := filepath.Glob(filepath.Join(e.testDir, "*.env"))
	if err != nil {
		t.Fatal(err)
	}
	configs, err := filepath.Glob(filepath.Join(e.testDir, "*.gitconfig"))
	if err != nil {
		t.Fatal(err)
	}
	if len(records) == 0 || len(configs) == 0 {
		t.Fatal("the agent recorded no environment or .git/config")
	}
	argv, err := os.ReadFile(e.argvLog)
	if err != nil || len(argv) == 0 {
		t.Fatalf("the git wrapper logged nothing: %v", err)
	}
	for _, f := range append(records, configs...) {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(b), testToken) {
			t.Fatalf("%s holds the token", filepath.Base(f))
		}
		if strings.Contains(string(b), "GIT_CONFIG_VALUE") || strings.Contains(string(b), "extraHeader") {
			t.Fatalf("%s holds git's config entries", filepath.Base(f))
		}
	}
	if strings.Contains(string(argv), testToken) {
		t.Fatal("git's argv held the token")
	}
	if strings.Contains(logs, testToken) {
		t.Fatal("the worker's log holds the token")
	}
}

// A 3-task plan ends as three commits on whilly/issue-7, one per task, by the bot, with
// the head reported in each COMPLETE; the workspace is gone once the plan is DONE, and the
// token never showed. A second plan for the same issue continues the same branch.
func TestThreeTasksBecomeThreeCommitsOnThePlanBranch(t *testing.T) {
	t.Parallel()
	e := newRepoEnv(t)
	e.importPlan(t, "issue-7", 3, 0)
	sum, logs := e.run(t, "issue-7", "edit")
	if sum.Done != 3 || sum.Failed != 0 {
		t.Fatalf("summary %+v, want 3 done\n%s", sum, logs)
	}
	commits := remoteLog(t, e.remote, "whilly/issue-7")
	if len(commits) != 4 {
		t.Fatalf("branch has %d commits, want initial + 3:\n%s", len(commits), strings.Join(commits, "\n"))
	}
	for i, want := range []string{"T02: Change number 2 of the shop", "T01: Change number 1 of the shop", "T00: Change number 0 of the shop"} {
		if !strings.HasSuffix(commits[i], "whilly[bot] <bot@whilly.test> "+want) {
			t.Errorf("commit %d = %q, want the bot's %q", i, commits[i], want)
		}
	}
	if main := remoteLog(t, e.remote, "main"); len(main) != 1 {
		t.Errorf("main moved: %v", main)
	}
	notes := gitIn(t, e.remote, "show", "refs/heads/whilly/issue-7:notes.txt")
	if notes != "T00\nT01\nT02" {
		t.Errorf("notes.txt = %q", notes)
	}
	completes := e.events(t, "issue-7", queue.EventComplete)
	if len(completes) != 3 {
		t.Fatalf("%d COMPLETE events", len(completes))
	}
	for i, ev := range completes {
		p := payload(t, ev.Payload)
		want := strings.Fields(commits[2-i])[0]
		if p["head_sha"] != want || p["no_changes"] != nil {
			t.Errorf("COMPLETE of %s: payload %v, want head_sha %s", ev.TaskID, p, want)
		}
	}
	// The agent ran in the plan's checkout.
	pwd, err := os.ReadFile(filepath.Join(e.testDir, "issue-7.T00.1.pwd"))
	if err != nil || !strings.HasPrefix(strings.TrimSpace(string(pwd)), e.wsDir) {
		t.Errorf("the agent ran in %q (%v), want a directory under %s", pwd, err, e.wsDir)
	}
	e.assertNoWorkspaceLeft(t)
	e.assertTokenNowhere(t, logs)

	// A second intake of the same issue (a new plan) reuses the branch.
	e.importPlan(t, "issue-7-again", 1, 0)
	if sum, logs := e.run(t, "issue-7-again", "edit"); sum.Done != 1 {
		t.Fatalf("second run: %+v\n%s", sum, logs)
	}
	again := remoteLog(t, e.remote, "whilly/issue-7")
	if len(again) != 5 || again[1] != commits[0] {
		t.Fatalf("second run's branch:\n%s\nwant one commit on top of\n%s", strings.Join(again, "\n"), commits[0])
	}
	if notes := gitIn(t, e.remote, "show", "refs/heads/whilly/issue-7:notes.txt"); notes != "T00\nT01\nT02\nT00" {
		t.Errorf("notes.txt after the second run = %q", notes)
	}
	e.assertNoWorkspaceLeft(t)
}

// A push rejected because someone pushed to the branch meanwhile is rebased once and
// pushed again; a rebase that conflicts fails the attempt (retryable), and the next
// attempt starts from the branch's new head.
func TestRejectedPushIsRebasedOnce(t *testing.T) {
	t.Parallel()
	t.Run("rebased", func(t *testing.T) {
		t.Parallel()
		e := newRepoEnv(t)
		e.importPlan(t, "race", 1, 1)
		sum, logs := e.run(t, "race", "race", "SIDE_FILE=human.txt", "AGENT_FILE=agent.txt")
		if sum.Done != 1 {
			t.Fatalf("summary %+v\n%s", sum, logs)
		}
		commits := remoteLog(t, e.remote, "whilly/issue-7")
		if len(commits) != 3 || !strings.HasSuffix(commits[0], "T00: Change number 0 of the shop") || !strings.HasSuffix(commits[1], "human change") {
			t.Fatalf("branch:\n%s\nwant the task's commit on top of the human one", strings.Join(commits, "\n"))
		}
		if !strings.Contains(logs, "push rejected; rebasing once") || !strings.Contains(logs, "rebased=true") {
			t.Errorf("the log does not show the rebase:\n%s", logs)
		}
		p := payload(t, e.events(t, "race", queue.EventComplete)[0].Payload)
		if p["head_sha"] != strings.Fields(commits[0])[0] {
			t.Errorf("COMPLETE head_sha = %v, want %s", p["head_sha"], commits[0])
		}
	})
	t.Run("conflict", func(t *testing.T) {
		t.Parallel()
		e := newRepoEnv(t)
		e.importPlan(t, "clash", 1, 3)
		// Each attempt: while the agent appends to app.txt, a human pushes an append to
		// app.txt too, so the rebase conflicts; the next attempt starts from the human's
		// commit, and the same happens again.
		sum, logs := e.run(t, "clash", "race", "SIDE_FILE=app.txt", "AGENT_FILE=app.txt")
		if sum.Failed != 3 || sum.Done != 0 {
			t.Fatalf("summary %+v\n%s", sum, logs)
		}
		retries := e.events(t, "clash", queue.EventRetry)
		fails := e.events(t, "clash", queue.EventFail)
		if len(retries) != 2 || len(fails) != 1 {
			t.Fatalf("%d RETRY and %d FAIL events, want 2 and 1", len(retries), len(fails))
		}
		p := payload(t, fails[0].Payload)
		if p["reason"] != "workspace: rebase" || p["retryable"] != true {
			t.Errorf("FAIL payload %v, want a retryable workspace: rebase", p)
		}
		// Nothing of the agent's reached the branch: only the humans' three commits.
		commits := remoteLog(t, e.remote, "whilly/issue-7")
		if len(commits) != 4 {
			t.Errorf("branch:\n%s", strings.Join(commits, "\n"))
		}
		for _, c := range commits[:3] {
			if !strings.HasSuffix(c, "human change") {
				t.Errorf("unexpected commit %q", c)
			}
		}
		e.assertNoWorkspaceLeft(t)
	})
}

// The diff gate: a change under .github/workflows/ or a secret fails the task with
// diff_rejected, not retryable, the reasons in the event and nothing pushed; a plan that
// allows workflows pushes the same change.
func TestDiffGateRefusesWorkflowsAndSecrets(t *testing.T) {
	t.Parallel()
	fakeSecret := "ghp_" + strings.Repeat("Q7w", 12)
	cases := []struct {
		name, mode string
		allow      bool
		env        []string
		wantRule   string
		wantKind   string
	}{
		{name: "workflow", mode: "workflow", wantRule: worker.RuleWorkflow},
		{name: "secret", mode: "secret", env: []string{"FAKE_SECRET=" + fakeSecret}, wantRule: worker.RuleSecret, wantKind: "github_token"},
		{name: "workflow allowed", mode: "workflow", allow: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e := newRepoEnv(t)
			e.setSpec(func(w *client.Workspace) { w.AllowWorkflows = c.allow })
			e.importPlan(t, "gate", 1, 3)
			sum, logs := e.run(t, "gate", c.mode, c.env...)
			if c.wantRule == "" {
				if sum.Done != 1 || !remoteHasBranch(t, e.remote, "whilly/issue-7") {
					t.Fatalf("summary %+v; the allowed change was not pushed\n%s", sum, logs)
				}
				gitIn(t, e.remote, "cat-file", "-e", "refs/heads/whilly/issue-7:.github/workflows/evil.yml")
				return
			}
			if sum.Failed != 1 {
				t.Fatalf("summary %+v, want the task failed\n%s", sum, logs)
			}
			if remoteHasBranch(t, e.remote, "whilly/issue-7") {
				t.Fatal("a refused diff reached the remote")
			}
			fails := e.events(t, "gate", queue.EventFail)
			if len(fails) != 1 || len(e.events(t, "gate", queue.EventRetry)) != 0 {
				t.Fatalf("want one FAIL and no RETRY (not retryable), got %d FAIL", len(fails))
			}
			p := payload(t, fails[0].Payload)
			if p["reason"] != worker.ReasonDiffRejected || p["retryable"] != false {
				t.Fatalf("FAIL payload %v", p)
			}
			var detail struct {
				Reasons []worker.DiffReason `json:"reasons"`
				Files   int                 `json:"files"`
			}
			if err := json.Unmarshal(fails[0].Detail, &detail); err != nil {
				t.Fatal(err)
			}
			if len(detail.Reasons) != 1 || detail.Reasons[0].Rule != c.wantRule || detail.Reasons[0].Kind != c.wantKind || detail.Files != 1 {
				t.Fatalf("FAIL detail %s, want rule %s", fails[0].Detail, c.wantRule)
			}
			if strings.Contains(string(fails[0].Detail), fakeSecret) || strings.Contains(logs, fakeSecret) {
				t.Fatal("the secret leaked into the event or the log")
			}
			e.assertNoWorkspaceLeft(t)
		})
	}
}

// An agent that changes nothing completes its task with no_changes recorded, and
// nothing is pushed; commits an agent makes itself are folded into the task's one
// commit.
func TestNoChangesAndAgentCommits(t *testing.T) {
	t.Parallel()
	t.Run("no changes", func(t *testing.T) {
		t.Parallel()
		e := newRepoEnv(t)
		e.importPlan(t, "idle", 1, 0)
		if sum, logs := e.run(t, "idle", "none"); sum.Done != 1 {
			t.Fatalf("summary %+v\n%s", sum, logs)
		}
		p := payload(t, e.events(t, "idle", queue.EventComplete)[0].Payload)
		if p["no_changes"] != true || p["head_sha"] != nil {
			t.Fatalf("COMPLETE payload %v, want no_changes", p)
		}
		if remoteHasBranch(t, e.remote, "whilly/issue-7") {
			t.Fatal("a branch was pushed without changes")
		}
	})
	t.Run("agent commits", func(t *testing.T) {
		t.Parallel()
		e := newRepoEnv(t)
		e.importPlan(t, "self", 1, 0)
		if sum, logs := e.run(t, "self", "commits"); sum.Done != 1 {
			t.Fatalf("summary %+v\n%s", sum, logs)
		}
		commits := remoteLog(t, e.remote, "whilly/issue-7")
		if len(commits) != 2 || !strings.HasSuffix(commits[0], "whilly[bot] <bot@whilly.test> T00: Change number 0 of the shop") {
			t.Fatalf("branch:\n%s\nwant the agent's two commits folded into one", strings.Join(commits, "\n"))
		}
		gitIn(t, e.remote, "cat-file", "-e", "refs/heads/whilly/issue-7:a.txt")
		gitIn(t, e.remote, "cat-file", "-e", "refs/heads/whilly/issue-7:b.txt")
	})
}

// Hooks, aliases and fsmonitor commands the agent plants in .git never run with the
// push's environment: the worker rewrites .git/config and disables hooks.
func TestPlantedHooksDoNotSeeThePush(t *testing.T) {
	t.Parallel()
	e := newRepoEnv(t)
	e.importPlan(t, "hostile", 1, 0)
	sum, logs := e.run(t, "hostile", "hooks")
	if sum.Done != 1 || !remoteHasBranch(t, e.remote, "whilly/issue-7") {
		t.Fatalf("summary %+v\n%s", sum, logs)
	}
	for _, f := range []string{"hook.env", "alias.env", "fsmonitor.env"} {
		if _, err := os.Stat(filepath.Join(e.testDir, f)); err == nil {
			t.Errorf("%s exists: a planted command ran", f)
		}
	}
	e.assertTokenNowhere(t, logs)
}
