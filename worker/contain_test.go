package worker_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// An agent that runs as the worker's user (unboxed) writes ~/.gitconfig and
// ~/.config/git/config — a pushInsteadOf to its own remote, an ext:: rewrite that runs a
// command, a credential helper, core.hooksPath and an fsmonitor — and the same into
// .git/config. The worker's git reads none of it: both tasks are pushed to the real
// remote, the agent's remote stays empty, nothing it planted runs, and the token is
// nowhere. Before, the worker's git read the user's global configuration.
//
// Not parallel: the worker's HOME is the test process's, set here.
func TestHostileGitConfigDoesNotStealThePush(t *testing.T) {
	e := newRepoEnv(t)
	t.Setenv("HOME", filepath.Join(e.testDir, "home"))
	t.Setenv("XDG_CONFIG_HOME", "")
	if err := os.MkdirAll(os.Getenv("HOME"), 0o755); err != nil {
		t.Fatal(err)
	}
	e.sharedHome = true
	e.importPlan(t, "gitconfig", 2, 1)
	sum, logs := e.run(t, "gitconfig", "gitconfig")
	if sum.Done != 2 {
		t.Fatalf("summary %+v\n%s", sum, logs)
	}
	if _, err := os.Stat(filepath.Join(os.Getenv("HOME"), ".gitconfig")); err != nil {
		t.Fatalf("the agent wrote no ~/.gitconfig: %v", err)
	}
	if commits := remoteLog(t, e.remote, "whilly/issue-7"); len(commits) != 3 {
		t.Fatalf("the real remote's branch has %d commits, want the initial one and two:\n%s", len(commits), strings.Join(commits, "\n"))
	}
	if refs := gitIn(t, filepath.Join(e.testDir, "evil.git"), "for-each-ref"); refs != "" {
		t.Fatalf("the agent's remote received refs:\n%s", refs)
	}
	for _, pattern := range []string{"ext.env", "cred.env", "fsmonitor.env", "hook.*.env"} {
		if found, _ := filepath.Glob(filepath.Join(e.testDir, pattern)); len(found) > 0 {
			t.Errorf("%v exists: something the agent planted ran", found)
		}
	}
	e.assertTokenNowhere(t, logs)
}

// Each way around the diff gate fails the attempt diff_rejected, names the rule and the
// path, and pushes nothing: a replace ref that makes the start look like the agent's
// commit, .gitattributes marking a file holding a token binary, a .github symlink, a
// 30 MB file, .GitHub in another case, a rename into .github. Before, each of them
// passed.
func TestDiffGateBypassesAreRefused(t *testing.T) {
	t.Parallel()
	secret := "ghp_" + strings.Repeat("Q7w8", 9)
	for _, c := range []struct{ bypass, rule, path string }{
		{"replace", "workflow_file", ".github/workflows/evil.yml"},
		{"attributes", "secret", "settings.bin"},
		{"symlink", "protected_path", ".github"},
		{"large", "file_too_large", "blob.bin"},
		{"case", "workflow_file", ".GitHub/workflows/evil.yml"},
		{"rename", "protected_path", ".github/CODEOWNERS"},
	} {
		t.Run(c.bypass, func(t *testing.T) {
			t.Parallel()
			e := newRepoEnv(t)
			e.importPlan(t, "bypass", 1, 1)
			sum, logs := e.run(t, "bypass", "bypass", "BYPASS="+c.bypass, "FAKE_SECRET="+secret)
			if sum.Failed != 1 || sum.Done != 0 {
				t.Fatalf("summary %+v, want the attempt failed\n%s", sum, logs)
			}
			fails := e.events(t, "bypass", "FAIL")
			if len(fails) != 1 || payload(t, fails[0].Payload)["reason"] != "diff_rejected" {
				t.Fatalf("FAIL events %+v, want one diff_rejected", fails)
			}
			detail := string(fails[0].Detail)
			if !strings.Contains(detail, `"rule": "`+c.rule+`"`) && !strings.Contains(detail, `"rule":"`+c.rule+`"`) {
				t.Errorf("detail %s does not name rule %s", detail, c.rule)
			}
			if !strings.Contains(detail, c.path) {
				t.Errorf("detail %s does not name path %s", detail, c.path)
			}
			if strings.Contains(detail, secret) {
				t.Errorf("the detail holds the secret")
			}
			if remoteHasBranch(t, e.remote, "whilly/issue-7") {
				t.Errorf("the branch was pushed: %v", remoteLog(t, e.remote, "whilly/issue-7"))
			}
			if refs := gitIn(t, e.remote, "for-each-ref", "--format=%(refname)"); refs != "refs/heads/main" {
				t.Errorf("the remote holds refs %q, want refs/heads/main alone", refs)
			}
		})
	}
}

// What an agent leaves in ignored paths (.claude/settings.json, node_modules/), in
// .git/info/exclude and as refs (a tag, a note, a branch) is gone when the next task of
// the plan opens the checkout; only the plan branch reaches the remote. Before, ignored
// files and .git/info survived into the next task, out of the pull request's sight.
// (.git/info/exclude no longer hides anything from the commit: the worker reads the work
// tree with the repository's own ignore files only.)
func TestPlantedFilesAndRefsAreGoneInTheNextTask(t *testing.T) {
	t.Parallel()
	e := newRepoEnv(t)
	e.importPlan(t, "plant", 2, 1)
	sum, logs := e.run(t, "plant", "plant")
	if sum.Done != 2 {
		t.Fatalf("summary %+v\n%s", sum, logs)
	}
	seen, err := os.ReadFile(filepath.Join(e.testDir, "plant.T01.1.seen"))
	if err != nil {
		t.Fatal(err)
	}
	for _, planted := range []string{"settings.json", "evil.js", ".claude/", "planted-tag", "refs/notes/planted", "planted-branch"} {
		if strings.Contains(string(seen), planted) {
			t.Errorf("the next task sees %q:\n%s", planted, seen)
		}
	}
	if !strings.Contains(string(seen), "refs/heads/whilly/issue-7") {
		t.Errorf("the next task's listing is not what it should be:\n%s", seen)
	}
	refs := gitIn(t, e.remote, "for-each-ref", "--format=%(refname)")
	if refs != "refs/heads/main\nrefs/heads/whilly/issue-7" {
		t.Errorf("the remote holds refs:\n%s\nwant main and the plan branch", refs)
	}
}
