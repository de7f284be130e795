//go:build linux

package e2e_test

import (
	"net/http"
	"strconv"
	"syscall"
	"testing"
	"time"

	ghapp "github.com/whilly-go/whilly/app"
	"github.com/whilly-go/whilly/internal/fakegithub"
	"github.com/whilly-go/whilly/internal/testkit"
	"github.com/whilly-go/whilly/queue"
)

// A `whilly serve` SIGKILLed in the middle of an intake leaves the delivery's River job
// running in the database, and River retries a running job only once it takes it for
// stuck: the next `whilly serve` takes the issue in within a few minutes
// (queue.RescueAfter), not River's default hour, and makes one plan of it.
func TestAnIntakeCutShortBySIGKILLIsTakenInAgain(t *testing.T) {
	t.Parallel()
	const repo = "Codertocat/Hello-World"
	const body = "- [ ] Fix the spelling of commit in README.md\n\n## Acceptance criteria\n- README.md spells commit right\n\n## Test steps\n- grep -c commmit README.md\n"
	gh := testkit.NewGitHub(t)
	gh.Install(77, repo)
	gh.SetPermission(repo, "Codertocat", "admin")
	gh.AddIssue(repo, 1, "Spelling", body, "Codertocat", ghapp.LabelPending)
	secret := []byte("s")
	c := newCluster(t,
		"WHILLY_GITHUB_APP_ID="+strconv.FormatInt(gh.AppID, 10), "WHILLY_GITHUB_PRIVATE_KEY="+string(gh.KeyPEM),
		"WHILLY_GITHUB_WEBHOOK_SECRET="+string(secret), "WHILLY_GITHUB_API_URL="+gh.URL())
	addr := freeAddr(t)
	a := c.serve("serve-a", addr)

	// The intake waits on its first GitHub call until the kill; the fake's handler sleeps on
	// (not for too long: closing the fake waits for it).
	gh.SetLatency(30 * time.Second)
	payload := testkit.WebhookPayload(t, "issues", "labeled", map[string]any{
		"installation": map[string]any{"id": 77}, "label.name": ghapp.LabelPending, "issue.number": 1, "issue.body": body})
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
	testkit.Eventually(t, 30*time.Second, "the delivery's job running", func() bool {
		var n int
		if err := c.pool.QueryRow(t.Context(), `SELECT count(*) FROM river_job WHERE kind = $1 AND state = 'running'`,
			queue.KindGitHubDelivery).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == 1
	})
	a.kill(syscall.SIGKILL)
	a.wait(t, 10*time.Second)
	killed := time.Now()
	gh.SetLatency(0)
	c.serve("serve-b", addr)

	testkit.Eventually(t, queue.RescueAfter+2*time.Minute, "the issue in progress after the kill", func() bool {
		l := gh.IssueLabels(repo, 1)
		return len(l) == 1 && l[0] == ghapp.LabelInProgress && len(gh.IssueComments(repo, 1)) == 1
	})
	t.Logf("the issue was taken in %v after the kill", time.Since(killed).Round(time.Second))
	var plans int
	if err := c.pool.QueryRow(t.Context(), `SELECT count(*) FROM plans WHERE github_issue_ref = $1`, repo+"#1").Scan(&plans); err != nil || plans != 1 {
		t.Errorf("%d plans of the issue (%v), want 1", plans, err)
	}
}
