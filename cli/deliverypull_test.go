package cli

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	ghapp "github.com/whilly-go/whilly/app"
	"github.com/whilly-go/whilly/queue"
	"github.com/whilly-go/whilly/testkit"
)

// Pull mode with two replicas (two control planes, each with its own pool, on one
// database): a labelled-issue delivery (the real fixture) that GitHub failed to post is
// read from the App's delivery log, fetched once, and processed once: one plan, one
// label swap, one status comment. A redelivery of it (same GUID) is not even fetched.
func TestPullModeTakesADeliveryFromTheLogOnceWithTwoReplicas(t *testing.T) {
	t.Parallel()
	const repo, issue = "Codertocat/Hello-World", 1
	gh := testkit.NewGitHub(t)
	gh.Install(77, repo)
	const body = "- [ ] Fix the spelling of commit in README.md\n\n## Acceptance criteria\n- README.md spells commit right\n\n## Test steps\n- grep -c commmit README.md\n"
	gh.AddIssue(repo, issue, "Spelling", body, "Codertocat", ghapp.LabelPending)
	gh.SetPermission(repo, "Codertocat", "admin")
	env := map[string]string{
		"WHILLY_GITHUB_APP_ID": strconv.FormatInt(gh.AppID, 10), "WHILLY_GITHUB_PRIVATE_KEY": string(gh.KeyPEM),
		"WHILLY_GITHUB_WEBHOOK_SECRET": "s", "WHILLY_GITHUB_API_URL": gh.URL(),
		"WHILLY_GITHUB_DELIVERIES": "pull", "WHILLY_GITHUB_PULL_INTERVAL": "1s",
	}
	dsn := testkit.DSN(t)
	ctx := context.Background()
	var stores []*queue.Store
	for range 2 {
		pool, err := pgxpool.New(ctx, dsn)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		a, _ := githubTestApp(env)
		if os.Getenv("WHILLY_TEST_LOG") != "" {
			a.log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		cp, err := a.startControlPlane(ctx, pool, ln)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cp.Shutdown(ctx) })
		stores = append(stores, cp.Store())
	}

	payload := testkit.WebhookPayload(t, "issues", "labeled", map[string]any{
		"installation": map[string]any{"id": 77}, "label.name": ghapp.LabelPending, "issue.body": body})
	d := gh.LogDelivery("issues", "72d3162e-cc78-11e3-81ab-4c9367dc0958", payload)
	other := gh.LogDelivery("star", "0b4c5b1e-0000-11e3-81ab-4c9367dc0958", []byte(`{"action":"created"}`))

	testkit.Eventually(t, 30*time.Second, "the issue to be in progress", func() bool {
		return slicesContain(gh.IssueLabels(repo, issue), ghapp.LabelInProgress)
	})
	// A redelivery of the same delivery shows up in the log with a new id.
	gh.AddHookDelivery(testkit.FakeHookDelivery{ID: d.ID + 1000, GUID: d.GUID, DeliveredAt: time.Now(), StatusCode: 502,
		Event: "issues", Action: "labeled", Payload: payload})
	// Let several more polls run, on either replica.
	polls := gh.CountRequests("GET", `/app/hook/deliveries`)
	testkit.Eventually(t, 30*time.Second, "five more polls", func() bool { return gh.CountRequests("GET", `/app/hook/deliveries`) >= polls+5 })

	if n := gh.CountRequests("GET", `/app/hook/deliveries/`+strconv.FormatInt(d.ID, 10)); n != 1 {
		t.Errorf("the delivery was fetched %d times, want once", n)
	}
	for _, id := range []int64{d.ID + 1000, other.ID} {
		if n := gh.CountRequests("GET", `/app/hook/deliveries/`+strconv.FormatInt(id, 10)); n != 0 {
			t.Errorf("delivery %d (a redelivery, or an event whilly does not handle) was fetched %d times", id, n)
		}
	}
	stored, err := stores[1].GetDelivery(ctx, d.GUID)
	if err != nil || stored.Event != "issues" || stored.Action != "labeled" || stored.InstallationID != 77 {
		t.Errorf("stored delivery = %+v, %v", stored, err)
	}
	if cs := gh.IssueComments(repo, issue); len(cs) != 1 {
		t.Errorf("%d comments, want the one status comment", len(cs))
	}
	if got := gh.IssueLabels(repo, issue); len(got) != 1 || got[0] != ghapp.LabelInProgress {
		t.Errorf("labels = %v, want whilly-in-progress alone", got)
	}
	if n := gh.CountRequests("POST", `/app/hook/deliveries/[0-9]+/attempts`); n != 0 {
		t.Errorf("%d redeliveries requested in pull mode, want none", n)
	}
	plans, _, err := stores[0].ListPlans(ctx, queue.PlanPage{})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, p := range plans {
		if strings.HasPrefix(p.ID, "gh/") {
			n++
		}
	}
	if n != 1 {
		t.Errorf("%d plans from the issue, want 1", n)
	}
}

// `whilly serve` without an App answers /webhook with 503 and names what is missing,
// instead of a 404 that reads like a wrong URL; pull mode's settings are checked.
func TestServeWithoutAnAppAnswersTheWebhookWith503(t *testing.T) {
	t.Parallel()
	a, _ := githubTestApp(map[string]string{"WHILLY_DATA_DIR": t.TempDir(), "WHILLY_GITHUB_WEBHOOK_SECRET": "s"})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	cp, err := a.startControlPlane(ctx, testkit.DB(t), ln)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cp.Shutdown(ctx) })
	resp, err := http.Post("http://"+ln.Addr().String()+"/webhook", "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(b), "WHILLY_GITHUB_APP_ID, WHILLY_GITHUB_PRIVATE_KEY (or _FILE)") ||
		strings.Contains(string(b), "WHILLY_GITHUB_WEBHOOK_SECRET") {
		t.Errorf("/webhook without an App: %d %s", resp.StatusCode, b)
	}

	for value, name := range map[string]string{"poll": "WHILLY_GITHUB_DELIVERIES", "10ms": "WHILLY_GITHUB_PULL_INTERVAL"} {
		env := map[string]string{"WHILLY_DATA_DIR": t.TempDir(), "WHILLY_GITHUB_DELIVERIES": "pull"}
		env[name] = value
		a, _ := githubTestApp(env)
		var ee *exitError
		if _, _, err := a.readGitHubEnv(); !errors.As(err, &ee) || ee.code != ExitEnv || !strings.Contains(err.Error(), name) {
			t.Errorf("%s=%s: %v, want exit 2 naming it", name, value, err)
		}
	}
}
