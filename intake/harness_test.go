package intake_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/whilly-go/whilly/agent"
	"github.com/whilly-go/whilly/app"
	"github.com/whilly-go/whilly/intake"
	"github.com/whilly-go/whilly/plan"
	"github.com/whilly-go/whilly/queue"
	"github.com/whilly-go/whilly/server"
	"github.com/whilly-go/whilly/testkit"
)

const (
	repoName = "Codertocat/Hello-World" // the fixtures' repository and issue
	issueNum = 1
	instID   = 77
	admin    = "Codertocat" // the fixtures' sender
	issueRef = repoName + "#1"
)

// goodBody makes a two-task plan the gate allows.
const goodBody = `The README spells "commit" with three m's in two places.

- [ ] Fix the spelling of commit in README.md, both places
- [ ] Add a spelling check for README.md to the CI workflow

## Acceptance criteria
- README.md spells commit correctly everywhere

## Test steps
- grep -c commmit README.md prints 0
`

// env is the GitHub side of whilly over a real database and the fake GitHub: the
// webhook receiver on httptest, River running the delivery, mirror and reconciler
// workers.
type env struct {
	t       testing.TB
	ctx     context.Context
	gh      *testkit.GitHub
	pool    *pgxpool.Pool
	store   *queue.Store // the one store, with the GitHub side's hooks
	river   *river.Client[pgx.Tx]
	svc     *intake.Service
	mirror  *app.Mirror
	rec     *app.Reconciler
	ws      *app.Workspaces
	push    *app.PushTokens
	disp    *app.Dispatcher // with envOptions.dispatch
	hookURL string
	secret  []byte
	body    string // the issue's body, as the fake and the payloads hold it
	seq     atomic.Int64
}

type envOptions struct {
	coalesce time.Duration
	body     string
	noRiver  bool
	// git serves the repository from the fake as a git repository (branch main).
	git bool
	// dispatch sends repository_dispatch on plan starts (WHILLY_DISPATCH_ACTIONS=1),
	// and again after dispatchIdle (default 10 min) from the reconciler.
	dispatch     bool
	dispatchIdle time.Duration
	// reconcileEvery is the reconciler's interval (default 5 min).
	reconcileEvery time.Duration
	// planner is WHILLY_PLANNER's agent, as intake sees it.
	planner intake.Planner
	// allowedOwners is WHILLY_GITHUB_ALLOWED_OWNERS.
	allowedOwners []string
	// requireApproval is WHILLY_REQUIRE_APPROVAL=1.
	requireApproval bool
	// maxRounds is WHILLY_PR_MAX_ROUNDS; analyzer, when set, is the TRIZ analyzer agent
	// (WHILLY_TRIZ_ENABLED=1) whose jobs River runs.
	maxRounds int
	analyzer  agent.Agent
}

func newEnv(t testing.TB, o envOptions) *env {
	t.Helper()
	if o.coalesce == 0 {
		o.coalesce = 100 * time.Millisecond
	}
	if o.body == "" {
		o.body = goodBody
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	log := slog.New(slog.DiscardHandler)
	if os.Getenv("WHILLY_TEST_LOG") != "" {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	gh := testkit.NewGitHub(t)
	gh.Install(instID, repoName)
	gh.AddIssue(repoName, issueNum, "Spelling error in the README file", o.body, admin, "bug", app.LabelPending)
	gh.SetPermission(repoName, admin, "admin")
	gh.SetPermission(repoName, "reader", "read")
	if o.git {
		gh.AddGitRepo(repoName, "main", map[string]string{"README.md": "# Hello World\n", "notes.txt": "notes\n"})
	}

	pool := testkit.DB(t)
	secret := []byte("s3cret-for-tests")
	// The control plane of `whilly serve` with the App of the fake GitHub: the store
	// with the GitHub side's hooks, River working its jobs, the webhook on the
	// control plane's router.
	cfg := server.Defaults()
	cfg.Queue.BackoffBase = 10 * time.Millisecond
	cfg.PublicURL, cfg.DataDir = "https://whilly.example.com", t.TempDir()
	cfg.PollInterval = 20 * time.Millisecond
	g := &cfg.GitHub
	g.AppID, g.PrivateKey, g.APIURL, g.Token, g.WebhookSecret = gh.AppID, gh.KeyPEM, gh.URL(), gh.Token, secret
	// 20 syncs a minute, a plan alone every 3 s: the pacing the tests count their writes
	// against (a round ends in one coalesced sync); production's 6 would make them wait
	// 10 s for each sync after the first.
	g.Mirror.Coalesce, g.Mirror.InstallationSyncsPerMinute = o.coalesce, 20
	g.Dispatch, g.DispatchIdle = o.dispatch, o.dispatchIdle
	if o.reconcileEvery > 0 {
		g.Reconcile = o.reconcileEvery
	}
	g.Intake.Planner, g.Intake.AllowedOwners, g.Intake.RequireApproval = o.planner, o.allowedOwners, o.requireApproval
	g.Intake.MaxRounds, g.Intake.AnalysisWait = o.maxRounds, 30*time.Second
	if o.analyzer != nil {
		cfg.TRIZ.Enabled, cfg.TRIZ.Timeout = true, 10*time.Second
		cfg.QuestionAgent = func(string, *slog.Logger) (agent.Agent, error) { return o.analyzer, nil }
	}
	cp, err := server.New(ctx, pool, log, cfg)
	if err != nil {
		t.Fatal(err)
	}
	parts := cp.GitHub()
	e := &env{t: t, ctx: ctx, gh: gh, pool: pool, store: cp.Store(), river: cp.Jobs(), svc: parts.Intake, mirror: parts.Mirror,
		rec: parts.Reconciler, ws: parts.Workspaces, push: parts.PushTokens, disp: parts.Dispatcher, secret: secret, body: o.body}
	if o.noRiver {
		srv := httptest.NewServer(cp.Handler())
		t.Cleanup(srv.Close)
		e.hookURL = srv.URL + "/webhook"
		return e
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := cp.Start(ln); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cp.Shutdown(context.Background()) })
	e.hookURL = "http://" + ln.Addr().String() + "/webhook"
	return e
}

// payload is a real fixture with the installation, and the edits given.
func (e *env) payload(event, name string, edits map[string]any) []byte {
	all := map[string]any{"installation": map[string]any{"id": instID}}
	for k, v := range edits {
		all[k] = v
	}
	return testkit.WebhookPayload(e.t, event, name, all)
}

// labeled is the issues.labeled delivery of whilly-pending.
func (e *env) labeled() []byte {
	return e.payload("issues", "labeled", map[string]any{"label.name": app.LabelPending, "issue.body": e.body})
}

// post delivers a signed payload and returns the status.
func (e *env) post(event, id string, body []byte) int {
	e.t.Helper()
	req := testkit.WebhookRequest(e.t, e.hookURL, e.secret, event, id, body)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatalf("post webhook: %v", err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// deliver posts with a fresh delivery id and expects 202.
func (e *env) deliver(event string, body []byte) string {
	e.t.Helper()
	id := fmt.Sprintf("delivery-%d", e.seq.Add(1))
	if st := e.post(event, id, body); st != http.StatusAccepted {
		e.t.Fatalf("webhook answered %d, want 202", st)
	}
	return id
}

// comment delivers issue_comment.created with body by user.
func (e *env) comment(user, body string) string {
	id := e.gh.AddComment(repoName, issueNum, user, body)
	return e.deliver("issue_comment", e.payload("issue_comment", "created", map[string]any{
		"comment.body": body, "comment.id": id, "comment.user.login": user, "sender.login": user,
	}))
}

// idle waits until every delivery is processed and no job is waiting or running.
func (e *env) idle() {
	e.t.Helper()
	testkit.Eventually(e.t, 20*time.Second, "deliveries processed and jobs drained", func() bool {
		var open, jobs int
		if err := e.pool.QueryRow(e.ctx, `SELECT count(*) FROM webhook_deliveries WHERE processed_at IS NULL`).Scan(&open); err != nil {
			e.t.Fatal(err)
		}
		if err := e.pool.QueryRow(e.ctx, `SELECT count(*) FROM river_job WHERE state IN ('available', 'running', 'scheduled', 'retryable', 'pending')`).Scan(&jobs); err != nil {
			e.t.Fatal(err)
		}
		return open == 0 && jobs == 0
	})
}

func (e *env) plan() queue.PlanInfo {
	e.t.Helper()
	pi, err := e.store.IssuePlan(e.ctx, issueRef)
	if err != nil {
		e.t.Fatalf("plan of the issue: %v", err)
	}
	return pi
}

func (e *env) labels() []string { return e.gh.IssueLabels(repoName, issueNum) }

func (e *env) stateLabels() []string { return e.stateLabelsOf(issueNum) }

// stateLabelsOf are the whilly-* state labels of issue n of the repository.
func (e *env) stateLabelsOf(n int) []string {
	var out []string
	for _, l := range e.gh.IssueLabels(repoName, n) {
		if app.IsStateLabel(l) {
			out = append(out, l)
		}
	}
	return out
}

func (e *env) statusComments() []testkit.FakeComment { return e.statusCommentsOf(issueNum) }

// statusCommentsOf are whilly's status comments on issue n of the repository.
func (e *env) statusCommentsOf(n int) []testkit.FakeComment {
	var out []testkit.FakeComment
	for _, c := range e.gh.IssueComments(repoName, n) {
		if strings.HasPrefix(c.Body, "<!-- whilly:status plan=") {
			out = append(out, c)
		}
	}
	return out
}

// waitState waits until the issue's only state label is want.
func (e *env) waitState(want string) {
	e.t.Helper()
	testkit.Eventually(e.t, 20*time.Second, "state label "+want, func() bool {
		l := e.stateLabels()
		return len(l) == 1 && l[0] == want
	})
}

// intake delivers the label event and waits for the plan, the label and the comment.
func (e *env) intake() queue.PlanInfo {
	e.t.Helper()
	e.deliver("issues", e.labeled())
	e.waitState(app.LabelInProgress)
	testkit.Eventually(e.t, 20*time.Second, "the status comment", func() bool { return len(e.statusComments()) == 1 })
	return e.plan()
}

// runTask claims, starts and completes (or fails) the next task of the plan as a worker.
func (e *env) runTask(w queue.Worker, planID string, cost string, fail bool) bool {
	e.t.Helper()
	c, err := e.store.Claim(e.ctx, queue.ClaimRequest{WorkerID: w.ID, PlanID: planID})
	if err != nil {
		e.t.Fatal(err)
	}
	if c == nil {
		return false
	}
	l := queue.Lease{PlanID: c.Task.PlanID, TaskID: c.Task.ID, LeaseID: c.Lease.ID, WorkerID: w.ID}
	if _, err := e.store.Start(e.ctx, l); err != nil {
		e.t.Fatal(err)
	}
	u, err := plan.ParseUSD(cost)
	if err != nil {
		e.t.Fatal(err)
	}
	if fail {
		no := false
		_, err = e.store.Fail(e.ctx, l, queue.FailInput{Cost: u, Reason: "tests failed: `go test` exited 1", Retryable: &no})
	} else {
		_, err = e.store.Complete(e.ctx, l, queue.CompleteInput{Cost: u, Result: "<promise>COMPLETE</promise>"})
	}
	if err != nil {
		e.t.Fatal(err)
	}
	return true
}

func (e *env) worker(name string) queue.Worker {
	e.t.Helper()
	w, _, err := e.store.RegisterWorker(e.ctx, name, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	return w
}
