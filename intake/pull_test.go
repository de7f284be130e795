package intake_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/whilly-go/whilly/agent"
	"github.com/whilly-go/whilly/app"
	"github.com/whilly-go/whilly/control"
	"github.com/whilly-go/whilly/control/client"
	"github.com/whilly-go/whilly/plan"
	"github.com/whilly-go/whilly/queue"
	"github.com/whilly-go/whilly/testkit"
	"github.com/whilly-go/whilly/worker"
)

// threeTasks is an issue whose task list makes three tasks, each after the one before.
const threeTasks = `The notes need three more lines.

- [ ] Add the first line to notes.txt for the release
- [ ] Add the second line to notes.txt for the release
- [ ] Add the third line to notes.txt for the release

## Acceptance criteria
- notes.txt has the new lines

## Test steps
- cat notes.txt
`

const branch = "whilly/issue-1"

// editAgent is the command agent: it appends a line to notes.txt in its workspace.
const editAgent = `#!/bin/sh
set -e
cat >/dev/null
echo "$WHILLY_PLAN_ID $WHILLY_TASK_ID" >> notes.txt
printf '{"result": "did %s <promise>COMPLETE</promise>", "total_cost_usd": 0.01}\n' "$WHILLY_TASK_ID"
`

// runWithGitWorkers drains the plan with workers whose command agent edits files, over
// a control plane whose claims carry the App's workspaces: real git, fetching from and
// pushing to the fake GitHub with the minted tokens. It returns the workspace directory.
func runWithGitWorkers(t *testing.T, e *env, planID string, workers int) string {
	t.Helper()
	return runGitAgent(t, e, planID, workers, editAgent, "")
}

// runGitAgent is runWithGitWorkers with the agent script given, run with HOME home ("": a
// directory of its own).
func runGitAgent(t *testing.T, e *env, planID string, workers int, agentScript, home string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(e.ctx, 2*time.Minute)
	defer cancel()
	listener := queue.NewListener(e.pool, nil)
	go func() { _ = listener.Run(ctx) }()
	srv := control.New(e.store, listener, nil, control.Config{Workspaces: e.ws.Workspace})
	hs := httptest.NewServer(srv.Handler())
	defer hs.Close()
	defer srv.Drain()
	dir := t.TempDir()
	script := filepath.Join(dir, "agent.sh")
	if err := os.WriteFile(script, []byte(agentScript), 0o755); err != nil {
		t.Fatal(err)
	}
	if home == "" {
		home = dir
	}
	ag, err := agent.New(agent.NameCommand, agent.Config{Command: script, BaseEnv: []string{"PATH=" + os.Getenv("PATH"), "HOME=" + home}})
	if err != nil {
		t.Fatal(err)
	}
	wsDir := filepath.Join(dir, "workspaces")
	var wg sync.WaitGroup
	for i := range workers {
		w, token, err := e.store.RegisterWorker(e.ctx, fmt.Sprintf("git-%d", i+1), nil)
		if err != nil {
			t.Fatal(err)
		}
		api, err := client.New(hs.URL, token, client.Options{})
		if err != nil {
			t.Fatal(err)
		}
		wk, err := worker.New(api, ag, nil, worker.Config{WorkerID: w.ID, PlanID: planID, Drain: true,
			ClaimWait: 2 * time.Second, WorkspaceDir: wsDir})
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			if _, err := wk.Run(ctx); err != nil {
				t.Errorf("worker: %v", err)
			}
		})
	}
	wg.Wait()
	return wsDir
}

func (e *env) events(planID, typ string) []queue.Event {
	e.t.Helper()
	evs, err := e.store.Events(e.ctx, queue.EventFilter{PlanID: planID, Limit: 1000})
	if err != nil {
		e.t.Fatal(err)
	}
	var out []queue.Event
	for _, ev := range evs {
		if ev.Type == typ {
			out = append(out, ev)
		}
	}
	return out
}

func (e *env) pulls() []testkit.FakePull { return e.gh.Pulls(repoName) }

func (e *env) commentOf(planID string) string {
	for _, c := range e.statusComments() {
		if strings.HasPrefix(c.Body, app.Marker(planID)+"\n") {
			return c.Body
		}
	}
	return ""
}

// A 3-task plan from an issue, run by workers whose agent edits files, ends with three
// commits by the App's bot on whilly/issue-1, one draft pull request that says Closes #1
// and turns ready when the plan is DONE, and a status comment linking it. Workers push
// with tokens minted for that one repository. One dispatch per plan start. A second
// intake of the issue continues the branch and the same pull request.
func TestIssueBecomesCommitsOnItsBranchAndOnePullRequest(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{git: true, dispatch: true, body: threeTasks})
	first := e.intake()
	wsDir := runWithGitWorkers(t, e, first.ID, 2)
	if st := e.plan().Status; st != plan.PlanDone {
		t.Fatalf("plan is %s after the workers drained it, want DONE", st)
	}
	testkit.Eventually(t, 20*time.Second, "the pull request ready for review", func() bool {
		ps := e.pulls()
		return len(ps) == 1 && !ps[0].Draft
	})
	e.waitState(app.LabelDone)
	e.idle()

	log := e.gh.Branch(repoName, branch)
	author := fmt.Sprintf("%s <%d+%s@users.noreply.127.0.0.1>", testkit.BotLogin, testkit.BotUserID, testkit.BotLogin)
	if len(log) != 4 {
		t.Fatalf("%s has %d commits, want the initial one and three:\n%s", branch, len(log), strings.Join(log, "\n"))
	}
	for i, id := range []string{"T3", "T2", "T1"} {
		if _, rest, _ := strings.Cut(log[i], " "); !strings.HasPrefix(rest, author+" "+id+": Add the") {
			t.Errorf("commit %d = %q, want %s by %s", i, log[i], id, author)
		}
	}
	if main := e.gh.Branch(repoName, "main"); len(main) != 1 {
		t.Errorf("main has %d commits; the work belongs on %s only", len(main), branch)
	}

	ps := e.pulls()
	pr := ps[0]
	if !pr.OpenedAsDraft || pr.Head != branch || pr.Base != "main" || pr.Author != testkit.BotLogin || pr.Title != "Spelling error in the README file" {
		t.Errorf("pull request = %+v; want a draft by the bot from %s to main titled as the issue", pr, branch)
	}
	for _, want := range []string{"Closes #1\n", "**3/3** tasks done", "- [x] `T1` Add the first line", "- [x] `T3` Add the third line"} {
		if !strings.Contains(pr.Body, want) {
			t.Errorf("pull request body lacks %q:\n%s", want, pr.Body)
		}
	}
	link := fmt.Sprintf("**Pull request** [#%d](https://github.com/%s/pull/%d) from `%s` — ready for review", pr.Number, repoName, pr.Number, branch)
	if body := e.commentOf(first.ID); !strings.Contains(body, link) {
		t.Errorf("status comment lacks %q:\n%s", link, body)
	}
	if n := len(e.events(first.ID, queue.EventPullOpened)); n != 1 {
		t.Errorf("%d pr.opened events, want 1", n)
	}
	if n := len(e.events(first.ID, queue.EventPullReady)); n != 1 {
		t.Errorf("%d pr.ready events, want 1", n)
	}

	// Every git request carried a token minted for this repository, contents: write only.
	var gitRequests int
	for _, r := range e.gh.Requests() {
		if strings.HasPrefix(r.Path, "/"+repoName+".git/") {
			gitRequests++
			if !r.Scoped || r.Status >= 300 {
				t.Errorf("git request %s %s: status %d, scoped %v; want a scoped token that works", r.Method, r.Path, r.Status, r.Scoped)
			}
		}
	}
	if gitRequests == 0 {
		t.Error("no git request reached the fake")
	}
	for _, tr := range e.gh.TokenRequests() {
		if tr.Repositories != nil && (!slices.Equal(tr.Repositories, []string{"Hello-World"}) || len(tr.Permissions) != 1 || tr.Permissions["contents"] != "write") {
			t.Errorf("token request %+v, want Hello-World with contents: write only", tr)
		}
	}
	if ds := e.gh.Dispatches(repoName); len(ds) != 1 || ds[0].EventType != "whilly-work" || ds[0].ClientPayload["plan"] != first.ID {
		t.Errorf("dispatches = %+v, want one whilly-work for %s", ds, first.ID)
	}
	// The repository's object store (.repos) stays for its next plan; the plan's own
	// work tree, index and lock go.
	entries, _ := os.ReadDir(wsDir)
	for _, e := range entries {
		if e.Name() != ".repos" {
			t.Errorf("workspace entry %s left after the plan ended", e.Name())
		}
	}

	// A second intake of the same issue: a new plan on the same branch and pull request.
	e.gh.AddLabelByHand(repoName, issueNum, app.LabelPending)
	e.deliver("issues", e.labeled())
	e.waitState(app.LabelInProgress)
	e.idle()
	second := e.plan()
	if second.ID == first.ID || second.Status != plan.PlanActive {
		t.Fatalf("second intake made plan %s (%s), want a new active one", second.ID, second.Status)
	}
	runWithGitWorkers(t, e, second.ID, 1)
	e.waitState(app.LabelDone)
	testkit.Eventually(t, 20*time.Second, "the pull request's checklist of the second plan", func() bool {
		ps := e.pulls()
		return len(ps) == 1 && strings.Contains(ps[0].Body, "`"+second.ID+"`: **3/3**")
	})
	e.idle()
	if log := e.gh.Branch(repoName, branch); len(log) != 7 {
		t.Errorf("%s has %d commits after the second plan, want 7:\n%s", branch, len(log), strings.Join(log, "\n"))
	}
	if ps := e.pulls(); len(ps) != 1 || ps[0].Number != pr.Number || ps[0].State != "open" || ps[0].Draft {
		t.Errorf("pull requests = %+v, want #%d alone, open and ready", ps, pr.Number)
	}
	if n := e.gh.CountRequests("POST", `/repos/Codertocat/Hello-World/pulls`); n != 1 {
		t.Errorf("%d pull requests created, want 1", n)
	}
	// The first plan left it ready for review; the second turned it back into a draft
	// while it worked, and made it ready again when it was done.
	opened := e.events(second.ID, queue.EventPullOpened)
	if len(opened) != 1 || !strings.Contains(string(opened[0].Payload), `"reused": true`) || !strings.Contains(string(opened[0].Payload), `"draft": true`) {
		t.Errorf("second plan's pr.opened = %+v, want one, reused, a draft again", opened)
	}
	if n := len(e.events(second.ID, queue.EventPullReady)); n != 1 {
		t.Errorf("second plan: %d pr.ready events, want 1", n)
	}
	if body := e.commentOf(second.ID); !strings.Contains(body, fmt.Sprintf("[#%d]", pr.Number)) {
		t.Errorf("second status comment does not link #%d:\n%s", pr.Number, body)
	}
	ds := e.gh.Dispatches(repoName)
	if len(ds) != 2 || ds[1].ClientPayload["plan"] != second.ID {
		t.Errorf("dispatches = %+v, want one per plan start", ds)
	}
}

// complete claims, starts and completes the plan's next task as a worker that pushed sha.
func (e *env) complete(w queue.Worker, planID, sha string) {
	e.t.Helper()
	c, err := e.store.Claim(e.ctx, queue.ClaimRequest{WorkerID: w.ID, PlanID: planID})
	if err != nil || c == nil {
		e.t.Fatalf("claim: %v, %v", c, err)
	}
	l := queue.Lease{PlanID: planID, TaskID: c.Task.ID, LeaseID: c.Lease.ID, WorkerID: w.ID}
	if _, err := e.store.Start(e.ctx, l); err != nil {
		e.t.Fatal(err)
	}
	if _, err := e.store.Complete(e.ctx, l, queue.CompleteInput{HeadSHA: sha}); err != nil {
		e.t.Fatal(err)
	}
}

// pullEvent delivers a pull_request webhook about #number of the issue's branch.
func (e *env) pullEvent(action string, number int, merged bool) string {
	return e.deliver("pull_request", e.payload("pull_request", "closed", map[string]any{
		"action": action, "number": number, "pull_request.number": number, "pull_request.merged": merged,
		"pull_request.state":    map[bool]string{true: "closed", false: "open"}[action == "closed"],
		"pull_request.head.ref": branch, "pull_request.merge_commit_sha": strings.Repeat("c", 40),
	}))
}

func (e *env) outcome(deliveryID string) string {
	e.t.Helper()
	var out string
	if err := e.pool.QueryRow(e.ctx, `SELECT coalesce(outcome, '') FROM webhook_deliveries WHERE delivery_id = $1`, deliveryID).Scan(&out); err != nil {
		e.t.Fatal(err)
	}
	return out
}

// A pull request closed unmerged is recorded (pr.closed) and changes nothing else: the
// plan and its tasks run on, the labels stay, nothing is reopened and no other pull
// request is opened. Reopened, it is followed again; merged, pr.merged.
func TestPullRequestClosedUnmergedChangesNothingElse(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{body: blockBody(4)})
	pi := e.intake()
	w := e.worker("w1")
	e.complete(w, pi.ID, strings.Repeat("a", 40))
	testkit.Eventually(t, 20*time.Second, "the draft pull request", func() bool { return len(e.pulls()) == 1 })
	e.idle()
	pr := e.pulls()[0]
	if !pr.Draft || !strings.HasPrefix(pr.Body, "Closes #1\n") || !strings.Contains(pr.Body, "**1/4** tasks done") {
		t.Fatalf("pull request = %+v", pr)
	}

	e.gh.ClosePullByHand(repoName, pr.Number, false)
	id := e.pullEvent("closed", pr.Number, false)
	e.idle()
	if out := e.outcome(id); !strings.Contains(out, "closed: plans "+pi.ID) {
		t.Errorf("delivery outcome %q", out)
	}
	closed := e.events(pi.ID, queue.EventPullClosed)
	if len(closed) != 1 || !strings.Contains(string(closed[0].Payload), fmt.Sprintf(`"number": %d`, pr.Number)) {
		t.Fatalf("pr.closed events = %+v", closed)
	}
	after := e.plan()
	if after.Status != plan.PlanActive || after.Counts[plan.StatusPending] != 3 || after.Counts[plan.StatusDone] != 1 {
		t.Errorf("plan after the pull request closed: %s, %v; want ACTIVE with 3 pending", after.Status, after.Counts)
	}
	if got := e.labels(); !slices.Equal(got, []string{"bug", app.LabelInProgress}) {
		t.Errorf("labels = %v", got)
	}
	if body := e.commentOf(pi.ID); !strings.Contains(body, "closed without merging") {
		t.Errorf("status comment does not say the pull request was closed:\n%s", body)
	}

	// The plan runs on; whilly neither reopens the pull request nor opens another.
	edits := e.gh.CountRequests("PATCH", fmt.Sprintf(`/repos/Codertocat/Hello-World/pulls/%d`, pr.Number))
	e.complete(w, pi.ID, strings.Repeat("b", 40))
	testkit.Eventually(t, 20*time.Second, "the comment to show 2/4", func() bool { return strings.Contains(e.commentOf(pi.ID), "**2/4**") })
	e.idle()
	if ps := e.pulls(); len(ps) != 1 || ps[0].State != "closed" {
		t.Errorf("pull requests = %+v, want the one, still closed", ps)
	}
	if n := e.gh.CountRequests("PATCH", fmt.Sprintf(`/repos/Codertocat/Hello-World/pulls/%d`, pr.Number)); n != edits {
		t.Errorf("the closed pull request was edited %d times more", n-edits)
	}
	if n := e.gh.CountRequests("POST", `/repos/Codertocat/Hello-World/pulls`); n != 1 {
		t.Errorf("%d pull requests created, want 1", n)
	}
	// A redelivery of the close records nothing more.
	e.pullEvent("closed", pr.Number, false)
	e.idle()
	if n := len(e.events(pi.ID, queue.EventPullClosed)); n != 1 {
		t.Errorf("%d pr.closed events after a redelivery, want 1", n)
	}

	// Reopened by a person: followed again (its checklist catches up); then merged.
	e.gh.ReopenPullByHand(repoName, pr.Number)
	e.pullEvent("reopened", pr.Number, false)
	testkit.Eventually(t, 20*time.Second, "the reopened pull request's checklist", func() bool {
		ps := e.pulls()
		return len(ps) == 1 && strings.Contains(ps[0].Body, "**2/4** tasks done")
	})
	e.gh.ClosePullByHand(repoName, pr.Number, true)
	e.pullEvent("closed", pr.Number, true)
	e.idle()
	if n := len(e.events(pi.ID, queue.EventPullReopened)); n != 1 {
		t.Errorf("%d pr.reopened events, want 1", n)
	}
	merged := e.events(pi.ID, queue.EventPullMerged)
	if len(merged) != 1 || !strings.Contains(string(merged[0].Detail), strings.Repeat("c", 40)) {
		t.Errorf("pr.merged events = %+v", merged)
	}
	if st := e.plan().Status; st != plan.PlanActive {
		t.Errorf("plan is %s after the merge, want ACTIVE: merging does not end a plan", st)
	}
	if n := len(e.gh.Dispatches(repoName)); n != 0 {
		t.Errorf("%d dispatches without WHILLY_DISPATCH_ACTIONS", n)
	}
	// A pull request whilly does not know is ignored.
	id = e.pullEvent("closed", 999, false)
	e.idle()
	if out := e.outcome(id); !strings.HasPrefix(out, "ignored") {
		t.Errorf("outcome for an unknown pull request = %q", out)
	}
}

// A plan start sends one dispatch, however many tasks run and however often the label
// event is delivered; the reconciler dispatches again only once ready tasks have waited
// for the interval with nothing running, and at most once per interval.
func TestDispatchOncePerPlanStartAndAgainWhenIdle(t *testing.T) {
	t.Parallel()
	idle := 500 * time.Millisecond
	e := newEnv(t, envOptions{dispatch: true, dispatchIdle: idle, body: blockBody(5)})
	pi := e.intake()
	for range 3 {
		e.deliver("issues", e.labeled()) // redeliveries of the label event under new ids
	}
	w := e.worker("w1")
	e.complete(w, pi.ID, "")
	e.complete(w, pi.ID, "")
	e.idle()
	ds := e.gh.Dispatches(repoName)
	if len(ds) != 1 || ds[0].EventType != app.DispatchEventType || ds[0].ClientPayload["plan"] != pi.ID || ds[0].Installation != instID {
		t.Fatalf("dispatches = %+v, want one whilly-work for %s by installation %d", ds, pi.ID, instID)
	}
	if evs := e.events(pi.ID, queue.EventActionsDispatched); len(evs) != 1 {
		t.Errorf("%d actions.dispatched events, want 1", len(evs))
	}

	// Nobody claims: after the interval the reconciler dispatches again, once.
	var res app.ReconcileResult
	testkit.Eventually(t, 20*time.Second, "an idle dispatch", func() bool {
		var err error
		if res, err = e.rec.Run(e.ctx, e.river); err != nil {
			t.Fatal(err)
		}
		return res.Dispatched == 1
	})
	if res, err := e.rec.Run(e.ctx, e.river); err != nil || res.Dispatched != 0 {
		t.Errorf("an immediate second run dispatched %d (%v), want 0", res.Dispatched, err)
	}
	e.idle()
	if ds := e.gh.Dispatches(repoName); len(ds) != 2 {
		t.Fatalf("dispatches = %+v, want the start and one idle", ds)
	}
	var reasons []string
	rows, err := e.pool.Query(e.ctx, `SELECT reason FROM github_dispatches WHERE plan_id = $1 ORDER BY id`, pi.ID)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var r string
		if err := rows.Scan(&r); err != nil {
			t.Fatal(err)
		}
		reasons = append(reasons, r)
	}
	if !slices.Equal(reasons, []string{queue.DispatchStart, queue.DispatchIdle}) {
		t.Errorf("dispatch reasons = %v", reasons)
	}

	// A task runs: the plan is not idle, however long it takes.
	c, err := e.store.Claim(e.ctx, queue.ClaimRequest{WorkerID: w.ID, PlanID: pi.ID})
	if err != nil || c == nil {
		t.Fatal(c, err)
	}
	claimed := time.Now()
	testkit.Eventually(t, 20*time.Second, "twice the interval since the claim", func() bool {
		if res, err := e.rec.Run(e.ctx, e.river); err != nil || res.Dispatched != 0 {
			t.Fatalf("reconciler dispatched %d (%v) while a task runs", res.Dispatched, err)
		}
		return time.Since(claimed) > 2*idle
	})
}

// The dispatch is recorded in the transaction of the plan's creation: one row, whatever
// the store's hooks see afterwards.
func TestDispatchRowIsWrittenWithThePlan(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{dispatch: true, noRiver: true})
	e.deliver("issues", e.labeled())
	if _, err := e.svc.HandleDelivery(e.ctx, "delivery-1"); err != nil {
		t.Fatal(err)
	}
	pi := e.plan()
	var rows, jobs int
	if err := e.pool.QueryRow(e.ctx, `SELECT count(*) FROM github_dispatches WHERE plan_id = $1 AND reason = 'start'`, pi.ID).Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if err := e.pool.QueryRow(e.ctx, `SELECT count(*) FROM river_job WHERE kind = $1 AND args->>'plan_id' = $2`, app.KindDispatch, pi.ID).Scan(&jobs); err != nil {
		t.Fatal(err)
	}
	if rows != 1 || jobs != 1 {
		t.Errorf("%d start dispatches and %d dispatch jobs for the new plan, want 1 and 1", rows, jobs)
	}
}

// GitHub refusing the pull request (an installation that has not accepted the
// pull_requests permission yet) holds back neither the label nor the status comment;
// the next change opens it.
func TestRefusedPullRequestDoesNotHoldTheStatusComment(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{body: blockBody(3)})
	pi := e.intake()
	e.idle()
	e.gh.Fail(testkit.Fault{Method: "POST", Path: `/repos/Codertocat/Hello-World/pulls`, Status: 403, Times: 1})
	w := e.worker("w1")
	e.complete(w, pi.ID, strings.Repeat("a", 40))
	testkit.Eventually(t, 20*time.Second, "the comment to show 1/3", func() bool { return strings.Contains(e.commentOf(pi.ID), "**1/3**") })
	e.idle()
	if ps := e.pulls(); len(ps) != 0 {
		t.Fatalf("pull requests = %+v, want none yet", ps)
	}
	e.complete(w, pi.ID, strings.Repeat("b", 40))
	testkit.Eventually(t, 20*time.Second, "the pull request", func() bool { return len(e.pulls()) == 1 })
	testkit.Eventually(t, 20*time.Second, "the comment to link it", func() bool {
		return strings.Contains(e.commentOf(pi.ID), "**2/3**") && strings.Contains(e.commentOf(pi.ID), "**Pull request**")
	})
	e.idle()
}
