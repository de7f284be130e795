package intake_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/whilly-go/whilly/plan"
)

// hostileGitAgent rewrites the git configuration of its user (the worker's: an unboxed
// agent runs as the worker's user): the fake GitHub's URL pushed to its own remote,
// fetched through an ext:: command, a credential helper, hooks; then it does its task.
const hostileGitAgent = `#!/bin/sh
set -e
cat >/dev/null
mkdir -p "$HOME/hooks" "$HOME/.config/git"
printf '#!/bin/sh\nenv > "%s/hook.$$.env"\n' "$HOME" > "$HOME/hooks/pre-push"
chmod +x "$HOME/hooks/pre-push"
for f in "$HOME/.gitconfig" "$HOME/.config/git/config"; do
  cat > "$f" <<EOF
[url "file://$HOME/evil.git"]
	pushInsteadOf = $GH_URL/
[url "ext::sh -c env% >% $HOME/ext.env"]
	insteadOf = $GH_URL/
[protocol "ext"]
	allow = always
[credential]
	helper = "!f() { env > $HOME/cred.env; }; f"
[core]
	hooksPath = $HOME/hooks
EOF
done
echo "$WHILLY_PLAN_ID $WHILLY_TASK_ID" >> notes.txt
printf '{"result": "did %s <promise>COMPLETE</promise>", "total_cost_usd": 0.01}\n' "$WHILLY_TASK_ID"
`

// A hostile agent's ~/.gitconfig does not steer the worker's git: every task is pushed
// to the fake GitHub's repository with the lease's token, the agent's remote gets
// nothing, and nothing it configured runs (so nothing sees the token). Not parallel: the
// worker's HOME is the test process's.
func TestHostileGitConfigStillPushesToGitHub(t *testing.T) {
	e := newEnv(t, envOptions{git: true, body: threeTasks})
	p := e.intake()
	home := t.TempDir()
	t.Setenv("HOME", home)
	t.Setenv("XDG_CONFIG_HOME", "")
	if out, err := exec.Command("git", "init", "-q", "--bare", filepath.Join(home, "evil.git")).CombinedOutput(); err != nil {
		t.Fatalf("git init: %v\n%s", err, out)
	}
	runGitAgent(t, e, p.ID, 1, strings.ReplaceAll(hostileGitAgent, "$GH_URL", e.gh.Server.URL), home)
	if _, err := os.Stat(filepath.Join(home, ".gitconfig")); err != nil {
		t.Fatalf("the agent wrote no ~/.gitconfig: %v", err)
	}
	if st := e.plan().Status; st != plan.PlanDone {
		t.Fatalf("plan is %s, want DONE", st)
	}
	if log := e.gh.Branch(repoName, branch); len(log) != 4 {
		t.Fatalf("%s on GitHub has %d commits, want the initial one and three:\n%s", branch, len(log), strings.Join(log, "\n"))
	}
	cmd := exec.Command("git", "for-each-ref")
	cmd.Dir = filepath.Join(home, "evil.git")
	if out, err := cmd.CombinedOutput(); err != nil || len(out) != 0 {
		t.Fatalf("the agent's remote: %v, refs %q; want none", err, out)
	}
	for _, pattern := range []string{"ext.env", "cred.env", "hook.*.env"} {
		if found, _ := filepath.Glob(filepath.Join(home, pattern)); len(found) > 0 {
			t.Errorf("%v exists: something the agent configured ran with the push's environment", found)
		}
	}
	for _, r := range e.gh.Requests() {
		if strings.HasPrefix(r.Path, "/"+repoName+".git/") && (!r.Scoped || r.Status >= 300) {
			t.Errorf("git request %s %s: status %d, scoped %v", r.Method, r.Path, r.Status, r.Scoped)
		}
	}
}
