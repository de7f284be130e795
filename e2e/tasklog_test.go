//go:build linux

package e2e_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/whilly-go/whilly/control/client"
	"github.com/whilly-go/whilly/queue"
	"github.com/whilly-go/whilly/testkit"
)

// The attempt log end to end, in real processes: whilly serve, a whilly-worker running the
// sim agent (4 s an attempt), and `whilly task log --follow --connect` started before the
// task is claimed. A reader gets chunks of the log while the attempt runs; the follower
// prints the whole log as the API has it once the attempt ended, then exits 0 by itself.
func TestTaskLogFollowsASimAttemptThroughARealWorker(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	base := c.serveOne()
	c.importPlan(base, planDoc("logs", 1, 0))
	readToken, _, err := queue.NewStore(c.pool, nil, queue.Config{}).MintToken(context.Background(), "e2e-reader", false, nil)
	if err != nil {
		t.Fatal(err)
	}
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(readToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	w := c.worker("worker", base, []string{"WHILLY_AGENT=sim", "WHILLY_SIM_DELAY=4s"}, "--plan", "logs", "--once")

	api := c.api(base, readToken)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	// The attempt is running: start following it, and read a chunk of it meanwhile.
	testkit.Eventually(t, 30*time.Second, "the task to start", func() bool { return c.task("logs", "T001").status == "IN_PROGRESS" })
	follower := start(t, "task log", bins.whilly, []string{"WHILLY_DATABASE_URL=postgres://nobody@127.0.0.1:1/none"},
		"task", "log", "logs", "T001", "--follow", "--connect", base, "--token-file", tokenFile)
	var live client.AttemptLog
	testkit.Eventually(t, 30*time.Second, "a chunk of the log while the attempt runs", func() bool {
		lg, err := api.AttemptLog(ctx, "logs", "T001", client.LogQuery{})
		if err != nil || lg.Text == "" || !lg.Running {
			return false
		}
		live = lg
		return true
	})
	if strings.Contains(live.Text, "<promise>COMPLETE</promise>") || c.task("logs", "T001").status != "IN_PROGRESS" {
		t.Fatalf("read %q, task %s: not while the attempt ran", live.Text, c.task("logs", "T001").status)
	}
	if code := w.wait(t, 60*time.Second); code != 0 {
		t.Fatalf("the worker exited %d", code)
	}
	if code := follower.wait(t, 30*time.Second); code != 0 {
		t.Fatalf("whilly task log --follow exited %d: %s", code, follower.stderr.String())
	}
	end, err := api.AttemptLog(ctx, "logs", "T001", client.LogQuery{Attempt: 1})
	if err != nil {
		t.Fatal(err)
	}
	if end.Running || !strings.HasPrefix(end.Text, live.Text) || !strings.HasSuffix(end.Text, "<promise>COMPLETE</promise>\n") {
		t.Fatalf("the log once the attempt ended: %+v", end)
	}
	if got := follower.stdout.String(); got != end.Text {
		t.Errorf("the follower printed\n%s\nthe API has\n%s", got, end.Text)
	}
	if !strings.Contains(follower.stderr.String(), "attempt 1 has ended; the task is DONE") {
		t.Errorf("the follower's notes: %s", follower.stderr.String())
	}
	t.Logf("read %d bytes while the attempt ran; the follower printed %d", len(live.Text), len(follower.stdout.String()))
}
