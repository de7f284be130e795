//go:build linux

package e2e_test

import (
	"net/http"
	"syscall"
	"testing"
	"time"

	ghapp "github.com/whilly-go/whilly/app"
	"github.com/whilly-go/whilly/fakegithub"
	"github.com/whilly-go/whilly/queue"
	"github.com/whilly-go/whilly/testkit"
)

// A `whilly serve` SIGKILLed in the middle of an intake — the plan persisted, the 👀 not
// yet on GitHub — leaves the delivery's River job running in the database, and River
// retries a running job only once it takes it for stuck. The next `whilly serve`
// finishes the intake and tells the issue within a few minutes (queue.RescueAfter), not
// River's default hour: one plan, one 👀, the delivery planned.
func TestAnIntakeCutShortBySIGKILLIsFinishedAgain(t *testing.T) {
	t.Parallel()
	const repo = appRepo
	gh := appGitHub(t, 1)
	// The 👀 stalls until the kill (and fails after it: closing the fake waits for it).
	gh.Fail(testkit.Fault{Method: "POST", Path: `/repos/` + repo + `/issues/1/reactions`, Status: http.StatusBadGateway,
		Times: 1, Delay: 30 * time.Second})
	secret := []byte("s")
	c := newCluster(t, appEnv(gh, "WHILLY_GITHUB_WEBHOOK_SECRET="+string(secret))...)
	addr := freeAddr(t)
	a := c.serve("serve-a", addr)

	payload := testkit.WebhookPayload(t, "issues", "labeled", map[string]any{
		"installation": map[string]any{"id": 77}, "label.name": ghapp.LabelPending, "issue.number": 1, "issue.body": spellingIssue})
	req, err := fakegithub.WebhookRequest(t.Context(), "http://"+addr+"/webhook", secret, "issues", "guid-1", payload)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		t.Fatalf("the delivery got HTTP %d", resp.StatusCode)
	}
	count := func(sql string, args ...any) int {
		var n int
		if err := c.pool.QueryRow(t.Context(), sql, args...).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	testkit.Eventually(t, 30*time.Second, "the plan persisted while the delivery's job runs", func() bool {
		return count(`SELECT count(*) FROM plans WHERE github_issue_ref = $1`, repo+"#1") == 1 &&
			count(`SELECT count(*) FROM river_job WHERE kind = $1 AND state = 'running'`, queue.KindGitHubDelivery) == 1
	})
	a.kill(syscall.SIGKILL)
	a.wait(t, 10*time.Second)
	killed := time.Now()
	c.serve("serve-b", addr)

	// The kill also leaves the plan's first mirror sync running (and a push-token
	// revocation): they are retried the same way, so the issue may wait for them too.
	testkit.Eventually(t, queue.RescueAfter+2*time.Minute, "the delivery planned and the issue in progress", func() bool {
		l := gh.IssueLabels(repo, 1)
		return count(`SELECT count(*) FROM webhook_deliveries WHERE processed_at IS NOT NULL AND outcome LIKE 'planned %'`) == 1 &&
			len(l) == 1 && l[0] == ghapp.LabelInProgress && len(gh.IssueComments(repo, 1)) == 1
	})
	t.Logf("the intake was finished and the issue told %v after the kill", time.Since(killed).Round(time.Second))
	if got := gh.IssueReactions(repo, 1); len(got) != 1 || got[0] != ghapp.ReactionEyes {
		t.Errorf("reactions = %v, want one 👀", got)
	}
	if n := count(`SELECT count(*) FROM plans WHERE github_issue_ref = $1`, repo+"#1"); n != 1 {
		t.Errorf("%d plans of the issue, want 1", n)
	}
}
