package worker_test

import (
	"fmt"
	"strings"
	"testing"
)

// branchRaceGit wraps git: the first push to the plan branch loses a race to create it.
// Another task's push creates whilly/issue-7 from main first, and this push gets what
// GitHub answers the loser of two concurrent creations: "[remote rejected] … cannot lock
// ref …: reference already exists". (A real concurrent race cannot be made to happen on
// demand, and a local remote's hooks are off for the worker's git.)
const branchRaceGit = `#!/bin/sh
case "$*" in
*push*refs/heads/whilly/issue-7*)
  if [ ! -e "%[1]s/raced" ]; then
    touch "%[1]s/raced"
    # The other task's git is not the worker's: none of the push's own variables.
    unset GIT_INDEX_FILE GIT_OBJECT_DIRECTORY GIT_ALTERNATE_OBJECT_DIRECTORIES
    export GIT_AUTHOR_NAME=Other GIT_AUTHOR_EMAIL=o@x GIT_COMMITTER_NAME=Other GIT_COMMITTER_EMAIL=o@x
    base=$(git --git-dir=%[2]q rev-parse refs/heads/main)
    other=$(echo "the other task" | git --git-dir=%[2]q commit-tree "$base^{tree}" -p "$base")
    git --git-dir=%[2]q update-ref refs/heads/whilly/issue-7 "$other"
    printf 'To %[2]s\n!\tHEAD:refs/heads/whilly/issue-7\t[remote rejected] (cannot lock ref '"'"'refs/heads/whilly/issue-7'"'"': reference already exists)\nDone\n'
    echo "error: failed to push some refs to '%[2]s'" >&2
    exit 1
  fi ;;
esac
exec git "$@"
`

// TestBranchCreationRaceIsRebasedNotFailed: two tasks start from main and race to create
// the plan branch; the loser fetches, rebases and pushes instead of failing its attempt
// (and paying for its agent again).
func TestBranchCreationRaceIsRebasedNotFailed(t *testing.T) {
	t.Parallel()
	e := newRepoEnv(t)
	writeFile(t, e.git, fmt.Sprintf(branchRaceGit, t.TempDir(), e.remote))
	e.importPlan(t, "create", 1, 1)
	sum, logs := e.run(t, "create", "edit")
	if sum.Done != 1 || sum.Failed != 0 {
		t.Fatalf("summary %+v; want the task done on its one attempt\n%s", sum, logs)
	}
	commits := remoteLog(t, e.remote, "whilly/issue-7")
	if len(commits) != 3 || !strings.HasSuffix(commits[0], "T00: Change number 0 of the shop") || !strings.HasSuffix(commits[1], "the other task") {
		t.Fatalf("branch:\n%s\nwant the task's commit on top of the other task's", strings.Join(commits, "\n"))
	}
	if !strings.Contains(logs, "push rejected; rebasing once") {
		t.Errorf("the log does not show the rebase:\n%s", logs)
	}
}
