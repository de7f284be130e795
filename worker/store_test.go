package worker_test

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/whilly-go/whilly/sandbox"
	"github.com/whilly-go/whilly/worker"
)

// storeObjects counts the objects in a store, loose and packed.
func storeObjects(t *testing.T, store string) int {
	t.Helper()
	n := 0
	for line := range strings.Lines(gitIn(t, store, "count-objects", "-v")) {
		k, v, _ := strings.Cut(strings.TrimSpace(line), ": ")
		if k == "count" || k == "in-pack" {
			c, err := strconv.Atoi(v)
			if err != nil {
				t.Fatal(err)
			}
			n += c
		}
	}
	return n
}

// treeFiles lists the files of a work tree, relative, sorted.
func treeFiles(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			rel, _ := filepath.Rel(dir, p)
			out = append(out, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(out)
	return out
}

// One store per repository on a worker: a second plan of the same repository fetches
// nothing the first one fetched (the store's objects do not change), a third fetches
// only the commit pushed meanwhile (its commit, tree and blob), and each checkout holds
// the branch's files and the attempt's .git.
func TestSecondPlanFetchesOnlyWhatIsNew(t *testing.T) {
	t.Parallel()
	remote := newRemote(t)
	root := t.TempDir()
	ws := worker.NewWorkspaces(root, "", nil)
	spec := fileSpec(remote)
	first := openWorkspace(t, ws, "first", spec)
	_ = first.Close()
	store := storeOf(t, root)
	before := storeObjects(t, store)

	spec.Branch = "whilly/issue-2"
	second := openWorkspace(t, ws, "second", spec)
	_ = second.Close()
	if got := storeObjects(t, store); got != before {
		t.Fatalf("the store has %d objects after the second plan's checkout, %d before: it fetched again", got, before)
	}
	if got := treeFiles(t, second.Dir); !slices.Equal(got[len(got)-2:], []string{"README.md", "app.txt"}) || !strings.HasPrefix(got[0], ".git/") {
		t.Fatalf("the second checkout holds %v", got)
	}

	seed := filepath.Join(t.TempDir(), "seed")
	gitIn(t, filepath.Dir(seed), "clone", "-q", remote, seed)
	writeFile(t, filepath.Join(seed, "new.txt"), "new\n")
	gitIn(t, seed, "add", "-A")
	gitIn(t, seed, "commit", "-q", "-m", "new")
	gitIn(t, seed, "push", "-q", "origin", "main")
	spec.Branch = "whilly/issue-3"
	third := openWorkspace(t, ws, "third", spec)
	defer third.Close()
	if got := storeObjects(t, store); got != before+3 {
		t.Fatalf("the store has %d objects after a commit of one file, %d before: want 3 more", got, before)
	}
	if b, err := os.ReadFile(filepath.Join(third.Dir, "new.txt")); err != nil || string(b) != "new\n" {
		t.Fatalf("the third checkout's new.txt = %q %v", b, err)
	}
	if stores, _ := filepath.Glob(filepath.Join(root, ".repos", "*.git")); len(stores) != 1 {
		t.Fatalf("stores: %v, want one for the repository", stores)
	}
}

// A commit the diff gate refuses (a token in a file) never reaches the store that later
// boxes read: neither its blob nor its commit, and no quarantine is left. A pushed
// commit's objects do land in the store.
func TestRefusedCommitStaysOutOfTheStore(t *testing.T) {
	t.Parallel()
	remote := newRemote(t)
	root := t.TempDir()
	ws := worker.NewWorkspaces(root, "", nil)
	co := openWorkspace(t, ws, "refused", fileSpec(remote))
	store := storeOf(t, root)
	content := `token = "ghp_` + strings.Repeat("Z9x", 12) + "\"\n"
	writeFile(t, filepath.Join(co.Dir, "settings.ini"), content)
	cmd := exec.Command("git", "hash-object", "--stdin")
	cmd.Stdin, cmd.Env = strings.NewReader(content), gitEnv()
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	blob := strings.TrimSpace(string(out))
	_, err = co.Publish(context.Background(), worker.CommitMessage("refused", "T1", "Leak"))
	var rej *worker.DiffRejectedError
	if !errors.As(err, &rej) || rej.Reasons[0].Rule != worker.RuleSecret {
		t.Fatalf("Publish = %v, want the secret refused", err)
	}
	_ = co.Close()
	if exec.Command("git", "--git-dir="+store, "cat-file", "-e", blob).Run() == nil {
		t.Fatal("the refused blob is in the store")
	}
	if left, _ := filepath.Glob(filepath.Join(store, "quarantine-*")); len(left) > 0 {
		t.Fatalf("quarantines left: %v", left)
	}

	co = openWorkspace(t, ws, "refused", fileSpec(remote))
	defer co.Close()
	if _, err := os.Stat(filepath.Join(co.Dir, "settings.ini")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the refused file is still in the next checkout: %v", err)
	}
	writeFile(t, filepath.Join(co.Dir, "ok.txt"), "fine\n")
	pub, err := co.Publish(context.Background(), worker.CommitMessage("refused", "T2", "Fine"))
	if err != nil {
		t.Fatal(err)
	}
	gitIn(t, store, "cat-file", "-e", pub.HeadSHA)
}

// BaseFile reads the base branch as fetched: not the work tree, not the plan branch.
func TestBaseFileReadsTheBaseBranch(t *testing.T) {
	t.Parallel()
	remote := newRemote(t)
	ws := worker.NewWorkspaces(t.TempDir(), "", nil)
	co := openWorkspace(t, ws, "base", fileSpec(remote))
	writeFile(t, filepath.Join(co.Dir, "README.md"), "# changed by the agent\n")
	if _, err := co.Publish(context.Background(), worker.CommitMessage("base", "T1", "Change")); err != nil {
		t.Fatal(err)
	}
	_ = co.Close()
	co = openWorkspace(t, ws, "base", fileSpec(remote))
	defer co.Close()
	writeFile(t, filepath.Join(co.Dir, ".github/whilly/setup.sh"), "echo planted\n")
	if b, err := os.ReadFile(filepath.Join(co.Dir, "README.md")); err != nil || string(b) != "# changed by the agent\n" {
		t.Fatalf("the plan branch's README.md = %q %v", b, err)
	}
	got, err := co.BaseFile(context.Background(), "README.md")
	if err != nil || string(got) != "# shop\n" {
		t.Fatalf("BaseFile(README.md) = %q %v, want the base branch's", got, err)
	}
	for _, p := range []string{".github/whilly/setup.sh", "nope/x"} {
		if _, err := co.BaseFile(context.Background(), p); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("BaseFile(%s) = %v, want fs.ErrNotExist", p, err)
		}
	}
	for _, p := range []string{"../x", "/etc/passwd", ""} {
		if _, err := co.BaseFile(context.Background(), p); err == nil || errors.Is(err, fs.ErrNotExist) {
			t.Errorf("BaseFile(%q) = %v, want it refused", p, err)
		}
	}
}

// boxGitAgent uses git in its checkout, in the box: status, log, a commit of its own, a
// tag; and a symlink. It writes what git said into the work tree.
const boxGitAgent = `#!/bin/sh
set -e
cat >/dev/null
{
  git status --porcelain
  git log --format='log %H %s'
  git rev-parse --abbrev-ref HEAD
} > git-said.txt
echo change >> app.txt
git -c user.name=agent -c user.email=a@b commit -q -am "agent's own commit"
git tag agent-tag
ln -s README.md readme-link
git diff --stat HEAD~1 >> git-said.txt
printf '{"result": "did %s <promise>COMPLETE</promise>", "total_cost_usd": 0.01}\n' "$WHILLY_TASK_ID"
`

// In the box the agent's git works on the checkout (the store's objects read-only
// through the attempt's .git); the result is read from the work tree: the symlink is
// committed as a link, the agent's own commit is folded into the task's one commit, and
// its tag reaches neither the remote nor the store.
func TestAgentUsesGitInTheBox(t *testing.T) {
	t.Parallel()
	boxedT(t)
	e := newRepoEnv(t)
	e.box, e.script = sandbox.ModeBwrap, boxGitAgent
	e.importPlan(t, "boxgit", 1, 1)
	sum, logs := e.run(t, "boxgit", "")
	if sum.Done != 1 {
		t.Fatalf("summary %+v\n%s", sum, logs)
	}
	start := gitIn(t, e.remote, "rev-parse", "main")
	said := gitIn(t, e.remote, "show", "refs/heads/whilly/issue-7:git-said.txt")
	if !strings.Contains(said, "log "+start+" initial") || !strings.Contains(said, "whilly/issue-7") || !strings.Contains(said, "app.txt | 1 +") {
		t.Fatalf("git in the box said:\n%s", said)
	}
	if commits := remoteLog(t, e.remote, "whilly/issue-7"); len(commits) != 2 || !strings.HasSuffix(commits[0], "T00: Change number 0 of the shop") {
		t.Fatalf("branch:\n%s\nwant the task's one commit", strings.Join(commits, "\n"))
	}
	if mode := gitIn(t, e.remote, "ls-tree", "refs/heads/whilly/issue-7", "readme-link"); !strings.HasPrefix(mode, "120000 ") {
		t.Fatalf("readme-link = %q, want a symlink", mode)
	}
	if target := gitIn(t, e.remote, "cat-file", "-p", "refs/heads/whilly/issue-7:readme-link"); target != "README.md" {
		t.Fatalf("readme-link points at %q", target)
	}
	if refs := gitIn(t, e.remote, "for-each-ref", "--format=%(refname)"); refs != "refs/heads/main\nrefs/heads/whilly/issue-7" {
		t.Fatalf("the remote holds refs:\n%s", refs)
	}
	store := storeOf(t, e.wsDir)
	if refs := gitIn(t, store, "for-each-ref", "--format=%(refname)"); strings.Contains(refs, "agent-tag") || strings.Contains(refs, "refs/tags") {
		t.Fatalf("the store holds the agent's refs:\n%s", refs)
	}
}
