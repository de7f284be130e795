package intake_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/whilly-go/whilly/app"
	"github.com/whilly-go/whilly/fakegithub"
	"github.com/whilly-go/whilly/testkit"
)

// A maintainer labels 40 issues of one repository at once (GitHub's issue list does it
// in one click): 40 👀, 40 state labels, 40 pending labels taken off and 40 status
// comments, twice GitHub's secondary limit for an installation (about 80 content writes a
// minute; here in 10 s, so that the test waits seconds, not minutes). Every issue is still
// taken in once — one plan, one 👀, one status comment, whilly-in-progress alone, the
// delivery planned. Then the 40 plans end together: their final syncs, which skip the
// plans' paced turns, write 120 times, and every issue says whilly-done. A job refused is
// snoozed until the Retry-After. How many requests are refused depends on how many are
// under way when the window fills, so the test logs it (1–23 per burst in its runs;
// 41–65 in the first with a client made anew for every call, which forgets the
// Retry-After) and asserts only that the first burst reached the limit.
func TestABulkLabellingWaitsOutGitHubsWriteLimit(t *testing.T) {
	t.Parallel()
	const issues = 40
	e := newEnv(t, envOptions{})
	limits := fakegithub.GitHubLimits()
	limits.SecondaryWindow = 10 * time.Second
	e.gh.SetLimits(limits)
	for n := 2; n <= issues; n++ {
		e.gh.AddIssue(repoName, n, "Spelling error", e.body, admin, "bug", app.LabelPending)
	}
	for n := 1; n <= issues; n++ {
		e.deliver("issues", e.payload("issues", "labeled", map[string]any{
			"label.name": app.LabelPending, "issue.body": e.body, "issue.number": n,
		}))
	}
	count := func(sql string) int {
		var n int
		if err := e.pool.QueryRow(e.ctx, sql).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	testkit.Eventually(t, time.Minute, "every issue taken in, with its label, comment and 👀, its delivery planned", func() bool {
		for n := 1; n <= issues; n++ {
			if !slices.Equal(e.stateLabelsOf(n), []string{app.LabelInProgress}) || len(e.statusCommentsOf(n)) != 1 ||
				!slices.Equal(e.gh.IssueReactions(repoName, n), []string{app.ReactionEyes}) {
				return false
			}
		}
		return count(`SELECT count(*) FROM webhook_deliveries WHERE outcome LIKE 'planned %'`) == issues
	})
	if plans, given := count(`SELECT count(*) FROM plans`), count(`SELECT count(*) FROM river_job WHERE state IN ('discarded', 'cancelled')`); plans != issues || given != 0 {
		t.Errorf("%d plans and %d jobs given up; want %d and 0", plans, given, issues)
	}
	reqs := e.gh.Requests()
	refused := limited(reqs)
	t.Logf("%d requests refused by the write limit while the issues were taken in", refused)
	if refused == 0 {
		t.Errorf("no request was refused: the burst did not reach the limit, so this proves nothing")
	}

	w := e.worker("w1")
	for e.runTask(w, "", "0.01", false) {
	}
	testkit.Eventually(t, time.Minute, "every issue whilly-done, its comment saying so", func() bool {
		for n := 1; n <= issues; n++ {
			cs := e.statusCommentsOf(n)
			if !slices.Equal(e.stateLabelsOf(n), []string{app.LabelDone}) || len(cs) != 1 || !strings.Contains(cs[0].Body, "**2/2** tasks finished") {
				return false
			}
		}
		return true
	})
	t.Logf("%d requests refused by the write limit while the plans' ends were told", limited(e.gh.Requests()[len(reqs):]))
	if given := count(`SELECT count(*) FROM river_job WHERE state IN ('discarded', 'cancelled')`); given != 0 {
		t.Errorf("%d jobs given up", given)
	}
}

// limited counts the requests the fake's limits refused.
func limited(reqs []testkit.GitHubRequest) int {
	n := 0
	for _, r := range reqs {
		if r.Limited {
			n++
		}
	}
	return n
}
