package intake_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/whilly-go/whilly/app"
	"github.com/whilly-go/whilly/internal/fakegithub"
	"github.com/whilly-go/whilly/internal/testkit"
)

// A maintainer labels 40 issues of one repository at once (GitHub's issue list does it
// in one click): 40 👀, 40 state labels, 40 pending labels taken off and 40 status
// comments, twice GitHub's secondary limit for an installation (about 80 content writes a
// minute; here in 10 s, so that the test waits seconds, not minutes). Every issue is still
// taken in once — one plan, one 👀, one status comment, whilly-in-progress alone. Then
// the 40 plans end together, and every issue says whilly-done. Both bursts wait the limit
// out instead of hammering it: a job refused is snoozed until the Retry-After, and
// go-github holds the installation's other requests back until then, so only requests
// already on their way are refused.
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
	taken := func(n int) bool {
		return slices.Equal(e.stateLabelsOf(n), []string{app.LabelInProgress}) && len(e.statusCommentsOf(n)) == 1 &&
			slices.Equal(e.gh.IssueReactions(repoName, n), []string{app.ReactionEyes})
	}
	testkit.Eventually(t, time.Minute, "every issue taken in, with its label, comment and 👀", func() bool {
		for n := 1; n <= issues; n++ {
			if !taken(n) {
				return false
			}
		}
		return true
	})

	var plans, planned, given int
	if err := e.pool.QueryRow(e.ctx, `SELECT count(*) FROM plans`).Scan(&plans); err != nil {
		t.Fatal(err)
	}
	if err := e.pool.QueryRow(e.ctx, `SELECT count(*) FROM webhook_deliveries WHERE outcome LIKE 'planned %'`).Scan(&planned); err != nil {
		t.Fatal(err)
	}
	if err := e.pool.QueryRow(e.ctx, `SELECT count(*) FROM river_job WHERE state IN ('discarded', 'cancelled')`).Scan(&given); err != nil {
		t.Fatal(err)
	}
	if plans != issues || planned != issues || given != 0 {
		t.Errorf("%d plans, %d deliveries planned and %d jobs given up; want %d, %d and 0", plans, planned, given, issues, issues)
	}
	reqs := e.gh.Requests()
	refused, hammered := refusals(reqs)
	t.Logf("while the issues were taken in: %d requests refused by the write limit, %d of them sent while whilly had been told to wait", refused, hammered)
	if refused == 0 || hammered > 0 {
		t.Errorf("%d requests refused and %d sent while told to wait; want some refused (the burst reaches the limit) and none sent", refused, hammered)
	}

	// The 40 plans end together: their final syncs, which do not wait for the plans' paced
	// turns, write a label, take one off and edit the comment, 120 writes in a burst.
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
	refused, hammered = refusals(e.gh.Requests()[len(reqs):])
	t.Logf("while the plans' ends were told: %d requests refused by the write limit, %d of them sent while whilly had been told to wait", refused, hammered)
	if refused == 0 || hammered > 0 {
		t.Errorf("%d requests refused and %d sent while told to wait; want some refused and none sent", refused, hammered)
	}
}

// inFlight is how long after a refusal other requests may still arrive that were on their
// way before whilly read it.
const inFlight = time.Second

// refusals counts the requests the fake's limits refused, and among them those that came
// while whilly had been told to wait: after a refusal's Retry-After began, beyond the
// requests already on their way (inFlight), and before it ended. How many are refused
// depends on how many requests are under way at the first 403 (1–15 in runs of this
// test); with a client made anew for every call, which forgets the Retry-After, 55–65
// were refused while the issues were taken in, 14 of them while told to wait (one run of
// two).
func refusals(reqs []testkit.GitHubRequest) (refused, hammered int) {
	reqs = slices.Clone(reqs)
	slices.SortFunc(reqs, func(a, b testkit.GitHubRequest) int { return a.At.Compare(b.At) })
	var grace, quiet time.Time
	for _, r := range reqs {
		if !r.Limited {
			continue
		}
		refused++
		switch {
		case r.At.Before(grace):
		case r.At.Before(quiet):
			hammered++
		default:
			grace, quiet = r.At.Add(inFlight), r.At.Add(r.RetryAfter)
		}
	}
	return refused, hammered
}
