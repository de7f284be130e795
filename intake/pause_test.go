package intake_test

import (
	"encoding/json"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/whilly-go/whilly/app"
	"github.com/whilly-go/whilly/plan"
	"github.com/whilly-go/whilly/queue"
	"github.com/whilly-go/whilly/testkit"
)

var approveLine = regexp.MustCompile(`/whilly approve ([0-9a-f]{64})`)

// shownDigest is the digest the status comment asks to approve ("" when none).
func (e *env) shownDigest() string {
	e.t.Helper()
	cs := e.statusComments()
	if len(cs) != 1 {
		return ""
	}
	m := approveLine.FindStringSubmatch(cs[0].Body)
	if m == nil {
		return ""
	}
	return m[1]
}

// approvals returns the plan.approved events of the plan as (by, digest) pairs.
func (e *env) approvals(planID string) [][2]string {
	e.t.Helper()
	evs, err := e.store.Events(e.ctx, queue.EventFilter{PlanID: planID, Limit: 1000})
	if err != nil {
		e.t.Fatal(err)
	}
	var out [][2]string
	for _, ev := range evs {
		if ev.Type != queue.EventPlanApproved {
			continue
		}
		var p struct{ By, Digest string }
		if err := json.Unmarshal(ev.Payload, &p); err != nil {
			e.t.Fatal(err)
		}
		out = append(out, [2]string{p.By, p.Digest})
	}
	return out
}

// lastComment is the body of the issue's newest comment.
func (e *env) lastComment() string {
	cs := e.gh.IssueComments(repoName, issueNum)
	return cs[len(cs)-1].Body
}

// With WHILLY_REQUIRE_APPROVAL the plan from the issue waits, its status comment shows the
// digest; a read-only user's approval and a stale digest are refused; the current digest
// from a write+ user starts it, once, however often the comment is delivered.
func TestApprovalByCommentNeedsTheCurrentDigest(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{requireApproval: true})
	pi := e.intake()
	if pi.Status != plan.PlanPaused || pi.PauseReason != queue.PauseApproval {
		t.Fatalf("plan from the issue is %s (%s); want PAUSED (approval)", pi.Status, pi.PauseReason)
	}
	testkit.Eventually(t, 20*time.Second, "the digest in the status comment", func() bool { return e.shownDigest() != "" })
	shown := e.shownDigest()
	if want, err := e.store.PlanDigest(e.ctx, pi.ID); err != nil || shown != want {
		t.Fatalf("comment shows %s; the plan's digest is %s (%v)", shown, want, err)
	}
	w := e.worker("w1")
	if e.runTask(w, pi.ID, "0", false) {
		t.Fatal("a task of a plan awaiting approval was claimed")
	}

	// A read-only user cannot approve, even with the right digest; no reply.
	e.idle()
	before := len(e.gh.IssueComments(repoName, issueNum))
	e.comment("reader", "/whilly approve "+shown)
	e.idle()
	if got := e.plan(); got.Status != plan.PlanPaused || len(e.approvals(pi.ID)) != 0 {
		t.Fatalf("after a read-only approval the plan is %s with approvals %v", got.Status, e.approvals(pi.ID))
	}
	if n := len(e.gh.IssueComments(repoName, issueNum)); n != before+1 {
		t.Fatalf("%d comments, want %d (the command and no reply)", n, before+1)
	}

	// The plan changes after the digest was shown: the old digest is refused.
	raw := []byte(`{"id": "1", "priority": "medium", "description": "Fix the spelling of commit in README.md and also in every other file",
		"acceptance_criteria": ["README.md spells commit correctly everywhere"], "test_steps": ["grep -c commmit README.md prints 0"]}`)
	if _, err := e.store.EditTask(e.ctx, pi.ID, firstTask(t, e, pi.ID), rewriteID(raw, firstTask(t, e, pi.ID)), "token:ops"); err != nil {
		t.Fatalf("edit: %v", err)
	}
	testkit.Eventually(t, 20*time.Second, "the new digest in the status comment", func() bool { d := e.shownDigest(); return d != "" && d != shown })
	fresh := e.shownDigest()
	e.comment(admin, "/whilly approve "+shown)
	e.idle()
	if got := e.plan(); got.Status != plan.PlanPaused || len(e.approvals(pi.ID)) != 0 {
		t.Fatalf("a stale digest was accepted: plan %s, approvals %v", got.Status, e.approvals(pi.ID))
	}
	if body := e.lastComment(); !strings.Contains(body, "Nothing was approved") || !strings.Contains(body, "changed since") {
		t.Fatalf("reply to a stale digest: %q", body)
	}

	// The current digest, in upper case with a prefix, from a write+ user: approved.
	did := e.comment(admin, "/whilly approve sha256:"+strings.ToUpper(fresh))
	e.waitState(app.LabelInProgress)
	testkit.Eventually(t, 20*time.Second, "the plan approved", func() bool { return e.plan().Status == plan.PlanActive })
	testkit.Eventually(t, 20*time.Second, "👍 on the approval", func() bool {
		return slices.Equal(e.gh.CommentReactions(repoName, commentID(t, e, did)), []string{app.ReactionThumbsUp})
	})
	if got := e.approvals(pi.ID); !slices.Equal(got, [][2]string{{"@" + admin, fresh}}) {
		t.Fatalf("plan.approved events = %v; want one by @%s with %s", got, admin, fresh)
	}
	testkit.Eventually(t, 20*time.Second, "the approval line gone from the status comment", func() bool {
		cs := e.statusComments()
		return len(cs) == 1 && !strings.Contains(cs[0].Body, "/whilly approve")
	})

	// The same comment delivered again (a new delivery id) runs nothing.
	e.idle()
	before = len(e.gh.IssueComments(repoName, issueNum))
	cid := commentID(t, e, did)
	e.deliver("issue_comment", e.payload("issue_comment", "created", map[string]any{
		"comment.body": "/whilly approve " + fresh, "comment.id": cid, "comment.user.login": admin, "sender.login": admin,
	}))
	e.idle()
	if got := e.approvals(pi.ID); len(got) != 1 {
		t.Fatalf("%d plan.approved events after a redelivery; want 1", len(got))
	}
	if n := len(e.gh.IssueComments(repoName, issueNum)); n != before {
		t.Fatalf("a redelivered approval wrote %d comments", n-before)
	}
	if !e.runTask(w, pi.ID, "0", false) {
		t.Fatal("nothing claimable after the approval")
	}
}

// firstTask is the id of the plan's first task.
func firstTask(t *testing.T, e *env, planID string) string {
	t.Helper()
	ts, err := e.store.Tasks(e.ctx, planID)
	if err != nil || len(ts) == 0 {
		t.Fatalf("tasks of %s: %v", planID, err)
	}
	return ts[0].ID
}

func rewriteID(raw []byte, id string) []byte {
	var m map[string]any
	_ = json.Unmarshal(raw, &m)
	m["id"] = id
	out, _ := json.Marshal(m)
	return out
}

func TestPauseAndResumeCommands(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	pi := e.intake()
	w := e.worker("w1")

	e.comment("reader", "/whilly pause")
	e.idle()
	if got := e.plan(); got.Status != plan.PlanActive {
		t.Fatalf("a read-only user paused the plan: %s", got.Status)
	}
	did := e.comment(admin, "/whilly pause")
	testkit.Eventually(t, 20*time.Second, "the plan paused", func() bool { return e.plan().Status == plan.PlanPaused })
	if got := e.plan(); got.PauseReason != queue.PauseOperator {
		t.Fatalf("pause reason %q; want operator", got.PauseReason)
	}
	testkit.Eventually(t, 20*time.Second, "👍 on the pause", func() bool {
		return slices.Equal(e.gh.CommentReactions(repoName, commentID(t, e, did)), []string{app.ReactionThumbsUp})
	})
	testkit.Eventually(t, 20*time.Second, "the status comment says paused", func() bool {
		cs := e.statusComments()
		return len(cs) == 1 && strings.Contains(cs[0].Body, "whilly: paused")
	})
	if e.runTask(w, pi.ID, "0", false) {
		t.Fatal("a task of a paused plan was claimed")
	}
	e.comment(admin, "/whilly pause")
	e.idle()
	if body := e.lastComment(); !strings.Contains(body, "already paused") {
		t.Fatalf("reply to a second pause: %q", body)
	}
	e.comment(admin, "/whilly resume")
	testkit.Eventually(t, 20*time.Second, "the plan resumed", func() bool { return e.plan().Status == plan.PlanActive })
	e.idle()
	e.comment(admin, "/whilly resume")
	e.idle()
	if body := e.lastComment(); !strings.Contains(body, "is not paused") {
		t.Fatalf("reply to resuming an active plan: %q", body)
	}
	evs, err := e.store.Events(e.ctx, queue.EventFilter{PlanID: pi.ID, Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, ev := range evs {
		if ev.Type == queue.EventPlanPaused || ev.Type == queue.EventPlanResumed {
			var p struct{ By string }
			_ = json.Unmarshal(ev.Payload, &p)
			kinds = append(kinds, ev.Type+" "+p.By)
		}
	}
	if want := []string{"plan.paused @" + admin, "plan.resumed @" + admin}; !slices.Equal(kinds, want) {
		t.Fatalf("events %v; want %v", kinds, want)
	}
	if !e.runTask(w, pi.ID, "0", false) {
		t.Fatal("nothing claimable after /whilly resume")
	}
}

// The fleet's pause reaches the status comments of live plans, and its resume clears it.
func TestFleetPauseShowsInTheStatusComment(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	e.intake()
	const note = "paused by its operator"
	if _, err := e.store.PauseFleet(e.ctx, queue.Actor{By: "token:ops@example.com"}); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 20*time.Second, "the comment to say the fleet is paused", func() bool {
		cs := e.statusComments()
		return len(cs) == 1 && strings.Contains(cs[0].Body, note)
	})
	if strings.Contains(e.statusComments()[0].Body, "ops@example.com") {
		t.Fatal("the status comment names the operator who paused")
	}
	if _, err := e.store.ResumeFleet(e.ctx, queue.Actor{By: "token:ops@example.com"}); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 20*time.Second, "the comment to drop the pause", func() bool {
		cs := e.statusComments()
		return len(cs) == 1 && !strings.Contains(cs[0].Body, note)
	})
}
