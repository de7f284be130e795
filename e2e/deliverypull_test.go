//go:build linux

package e2e_test

import (
	"strconv"
	"syscall"
	"testing"
	"time"

	ghapp "github.com/whilly-go/whilly/app"
	"github.com/whilly-go/whilly/testkit"
)

// Pull mode across two real `whilly serve` processes on one database, one of them
// killed with SIGKILL after the first delivery: every labelled issue in the App's
// delivery log becomes one plan with one status comment, the ones logged after the kill
// included (taken by the survivor, at the latest once the dead replica's lease on the
// cursor has run out).
func TestPullModeSurvivesAKilledReplica(t *testing.T) {
	t.Parallel()
	const repo, body = appRepo, spellingIssue
	gh := appGitHub(t, 3)
	c := newCluster(t, appEnv(gh, "WHILLY_GITHUB_WEBHOOK_SECRET=s", "WHILLY_GITHUB_DELIVERIES=pull", "WHILLY_GITHUB_PULL_INTERVAL=1s")...)
	a := c.serve("serve-a", freeAddr(t))
	c.serve("serve-b", freeAddr(t))

	label := func(n int) {
		payload := testkit.WebhookPayload(t, "issues", "labeled", map[string]any{
			"installation": map[string]any{"id": 77}, "label.name": ghapp.LabelPending,
			"issue.number": n, "issue.body": body})
		gh.LogDelivery("issues", "guid-"+strconv.Itoa(n), payload)
	}
	inProgress := func(n int) func() bool {
		return func() bool {
			l := gh.IssueLabels(repo, n)
			return len(l) == 1 && l[0] == ghapp.LabelInProgress && len(gh.IssueComments(repo, n)) == 1
		}
	}
	label(1)
	testkit.Eventually(t, 60*time.Second, "issue 1 in progress", inProgress(1))
	a.kill(syscall.SIGKILL)
	a.wait(t, 10*time.Second)
	label(2)
	label(3)
	testkit.Eventually(t, 150*time.Second, "issues 2 and 3 in progress after the kill", func() bool { return inProgress(2)() && inProgress(3)() })

	// A few more polls: nothing is taken twice.
	polls := gh.CountRequests("GET", `/app/hook/deliveries`)
	testkit.Eventually(t, 30*time.Second, "three more polls", func() bool { return gh.CountRequests("GET", `/app/hook/deliveries`) >= polls+3 })
	for n := 1; n <= 3; n++ {
		if cs := gh.IssueComments(repo, n); len(cs) != 1 {
			t.Errorf("issue %d has %d comments, want the one status comment", n, len(cs))
		}
	}
	var plans, deliveries int
	if err := c.pool.QueryRow(t.Context(), `SELECT count(*) FROM plans WHERE id LIKE 'gh/%'`).Scan(&plans); err != nil {
		t.Fatal(err)
	}
	if err := c.pool.QueryRow(t.Context(), `SELECT count(*) FROM webhook_deliveries`).Scan(&deliveries); err != nil {
		t.Fatal(err)
	}
	if plans != 3 || deliveries != 3 {
		t.Errorf("%d plans and %d stored deliveries, want 3 and 3", plans, deliveries)
	}
}
