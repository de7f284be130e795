package queue_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/whilly-go/whilly/plan"
	"github.com/whilly-go/whilly/queue"
	"github.com/whilly-go/whilly/testkit"
)

const roundRepo = "octo/widgets"

// donePlanWithPull makes a one-task plan DONE with a recorded pull request #7 and, when
// budget > 0, that budget.
func donePlanWithPull(t *testing.T, budget plan.USD) (*queue.Store, string) {
	t.Helper()
	ctx := context.Background()
	st := queue.NewStore(testkit.DB(t), nil, queue.Config{})
	p := &plan.Plan{ID: "rounds", Name: "rounds", Tasks: []plan.Task{goodTask("T1")}}
	if budget > 0 {
		p.Budget = &budget
	}
	importTasks(t, st, p)
	w := register(t, st)
	c := mustClaim(t, st, w, p.ID)
	if _, err := st.Start(ctx, leaseOf(c, w.ID)); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Complete(ctx, leaseOf(c, w.ID), queue.CompleteInput{HeadSHA: "aaaaaaaaaaaaaaaaaaaa", Cost: 10_000}); err != nil {
		t.Fatal(err)
	}
	err := st.RecordPull(ctx, queue.PullRequest{PlanID: p.ID, Repo: roundRepo, Number: 7, NodeID: "PR_x", URL: "https://github.com/octo/widgets/pull/7",
		Branch: "whilly/issue-1"}, false)
	if err != nil {
		t.Fatal(err)
	}
	if s, _ := st.PlanStatus(ctx, p.ID); s != plan.PlanDone {
		t.Fatalf("plan is %s, want DONE", s)
	}
	return st, p.ID
}

func roundReq(planID, trigger, id string, max int) queue.RoundRequest {
	return queue.RoundRequest{PlanID: planID, Repo: roundRepo, Number: 7, Trigger: trigger, TriggerID: id,
		Summary: "changes requested by @alice in review " + id, Description: "Address the review " + id + ": rename the helper.",
		MaxRounds: max}
}

// Eight deliveries of one review at once start one round; the others are duplicates.
// Three different reviews at once get rounds 2, 3 and 4, each task after the one before:
// feedback that arrives while a round runs is the next round.
func TestStartRoundOncePerTriggerAndQueuesTheNext(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, id := donePlanWithPull(t, 0)
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		outs []string
	)
	for range 8 {
		wg.Go(func() {
			res, err := st.StartRound(ctx, roundReq(id, queue.RoundReview, "42", 3))
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			outs = append(outs, res.Outcome)
			mu.Unlock()
		})
	}
	wg.Wait()
	slices.Sort(outs)
	want := append([]string{queue.RoundDuplicate, queue.RoundDuplicate, queue.RoundDuplicate, queue.RoundDuplicate,
		queue.RoundDuplicate, queue.RoundDuplicate, queue.RoundDuplicate}, queue.RoundStarted)
	if !slices.Equal(outs, want) {
		t.Fatalf("outcomes %v, want one started and seven duplicates", outs)
	}
	pi, err := st.GetPlan(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if pi.Status != plan.PlanActive || pi.Total != 2 {
		t.Fatalf("plan %s with %d tasks, want ACTIVE with 2", pi.Status, pi.Total)
	}

	for i := range 2 {
		wg.Go(func() {
			if _, err := st.StartRound(ctx, roundReq(id, queue.RoundComment, fmt.Sprint(100+i), 3)); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	tasks, err := st.Tasks(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, tk := range tasks {
		got = append(got, fmt.Sprintf("%s<-%v round %v", tk.ID, tk.Dependencies, tk.Round != nil))
	}
	wantTasks := []string{"T1<-[] round false", "pr-round-2<-[T1] round true", "pr-round-3<-[pr-round-2] round true", "pr-round-4<-[pr-round-3] round true"}
	if !slices.Equal(got, wantTasks) {
		t.Errorf("tasks %v, want %v", got, wantTasks)
	}
	rc := tasks[1].Round
	if rc.Number != 2 || len(rc.Commits) != 1 || rc.Commits[0] != "aaaaaaaaaaaa T1: "+tasks[0].Description {
		t.Errorf("round context %+v, want round 2 with T1's commit", rc)
	}

	// The limit (3 rounds): the next trigger is refused, the plan FAILED with the reason.
	res, err := st.StartRound(ctx, roundReq(id, queue.RoundCheck, "9@abc", 3))
	if err != nil || res.Outcome != queue.RoundRefused || res.Round != 5 {
		t.Fatalf("fourth round: %+v, %v; want round 5 refused", res, err)
	}
	if s, _ := st.PlanStatus(ctx, id); s != plan.PlanFailed {
		t.Errorf("plan is %s after the refusal, want FAILED", s)
	}
	if res, _ := st.StartRound(ctx, roundReq(id, queue.RoundCheck, "9@abc", 3)); res.Outcome != queue.RoundDuplicate {
		t.Errorf("the refused trigger again: %+v, want duplicate", res)
	}
	if res, _ := st.StartRound(ctx, roundReq(id, queue.RoundReview, "43", 3)); res.Outcome != queue.RoundClosed {
		t.Errorf("a new trigger on the FAILED plan: %+v, want closed", res)
	}
	byHand := roundReq(id, queue.RoundRetry, "77", 3)
	byHand.ByHand = true
	if res, err := st.StartRound(ctx, byHand); err != nil || res.Outcome != queue.RoundStarted || res.Round != 6 {
		t.Errorf("/whilly retry: %+v, %v; want round 6 started past the limit", res, err)
	}
}

// The plan's budget bounds rounds too; /whilly stop ends the loop, but for /whilly retry.
func TestRoundBudgetAndStop(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, id := donePlanWithPull(t, 10_000) // $0.01, spent by T1
	res, err := st.StartRound(ctx, roundReq(id, queue.RoundReview, "1", 3))
	if err != nil || res.Outcome != queue.RoundRefused || res.Reason != "the plan's budget is spent ($0.01 of $0.01)" {
		t.Fatalf("round on a spent budget: %+v, %v", res, err)
	}

	st2, id2 := donePlanWithPull(t, 0)
	if ok, err := st2.StopRounds(ctx, id2, "@alice"); err != nil || !ok {
		t.Fatalf("stop: %v, %v", ok, err)
	}
	if ok, _ := st2.StopRounds(ctx, id2, "@bob"); ok {
		t.Error("a second stop stopped again")
	}
	if res, _ := st2.StartRound(ctx, roundReq(id2, queue.RoundReview, "1", 3)); res.Outcome != queue.RoundStopped {
		t.Errorf("round after stop: %+v", res)
	}
	r := roundReq(id2, queue.RoundRetry, "2", 3)
	r.ByHand = true
	if res, _ := st2.StartRound(ctx, r); res.Outcome != queue.RoundStarted {
		t.Errorf("retry after stop: %+v", res)
	}
}

// A check round whose suite passes on re-run before its fix starts ends without work:
// the task SKIPPED, the plan DONE again. Once claimed, the fix runs.
func TestCheckRoundResolvedByARerun(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, id := donePlanWithPull(t, 0)
	r := roundReq(id, queue.RoundCheck, "5@aaaa", 3)
	r.HeadSHA = "aaaa"
	if res, err := st.StartRound(ctx, r); err != nil || res.Outcome != queue.RoundStarted {
		t.Fatal(res, err)
	}
	if n, err := st.ResolveCheckRound(ctx, roundRepo, 7, "bbbb"); err != nil || n != 0 {
		t.Errorf("another head resolved round %d (%v)", n, err)
	}
	n, err := st.ResolveCheckRound(ctx, roundRepo, 7, "aaaa")
	if err != nil || n != 2 {
		t.Fatalf("resolve: %d, %v; want round 2", n, err)
	}
	ti, _ := st.GetTask(ctx, id, "pr-round-2")
	if s, _ := st.PlanStatus(ctx, id); s != plan.PlanDone || ti.Status != plan.StatusSkipped {
		t.Errorf("plan %s, task %s; want DONE and SKIPPED", s, ti.Status)
	}
	rs, err := st.Rounds(ctx, id)
	if err != nil || len(rs.Rounds) != 1 || rs.Rounds[0].Outcome != queue.RoundResolved {
		t.Errorf("rounds %+v, %v", rs, err)
	}
	// A resolved round does not count against the limit.
	if res, _ := st.StartRound(ctx, roundReq(id, queue.RoundReview, "8", 1)); res.Outcome != queue.RoundStarted {
		t.Errorf("round after a resolved one with a limit of 1: %+v", res)
	}
}

// Under approval every round waits for its new digest: from DONE the plan reopens PAUSED
// (reason approval, plan.reopened says so); a second review while the first round's
// task runs pauses the ACTIVE plan (plan.paused) so its task is not claimed; the running
// attempt still completes. Approved, the queued task runs.
func TestRoundUnderApprovalWaits(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, id := donePlanWithPull(t, 0)
	w := register(t, st)
	req := roundReq(id, queue.RoundReview, "42", 3)
	req.RequireApproval = true
	if res, err := st.StartRound(ctx, req); err != nil || res.Outcome != queue.RoundStarted {
		t.Fatalf("round = %+v, %v", res, err)
	}
	pi, err := st.GetPlan(ctx, id)
	if err != nil || pi.Status != plan.PlanPaused || pi.PauseReason != queue.PauseApproval {
		t.Fatalf("plan after a round under approval: %s (%s), %v; want PAUSED (approval)", pi.Status, pi.PauseReason, err)
	}
	reopened := eventsOfType(t, st, queue.EventPlanReopened)
	if len(reopened) != 1 || payloadOf(t, reopened[0])["pause_reason"] != queue.PauseApproval {
		t.Fatalf("plan.reopened = %+v; want one with pause_reason approval", reopened)
	}
	if c := tryClaim(t, st, w, id); c != nil {
		t.Fatalf("claimed %s before approval", c.Task.ID)
	}
	if _, err := st.ApprovePlan(ctx, id, "", queue.Actor{By: "@maintainer"}); err != nil {
		t.Fatal(err)
	}
	c := mustClaim(t, st, w, id)
	if _, err := st.Start(ctx, leaseOf(c, w.ID)); err != nil {
		t.Fatal(err)
	}

	// A second review while round 2 runs: the plan pauses for approval again.
	req = roundReq(id, queue.RoundReview, "43", 3)
	req.RequireApproval = true
	if res, err := st.StartRound(ctx, req); err != nil || res.Outcome != queue.RoundStarted {
		t.Fatalf("round 3 = %+v, %v", res, err)
	}
	if pi, _ := st.GetPlan(ctx, id); pi.Status != plan.PlanPaused || pi.PauseReason != queue.PauseApproval {
		t.Fatalf("ACTIVE plan after a round under approval: %s (%s); want PAUSED (approval)", pi.Status, pi.PauseReason)
	}
	if paused := eventsOfType(t, st, queue.EventPlanPaused); len(paused) != 1 || payloadOf(t, paused[0])["pause_reason"] != queue.PauseApproval {
		t.Fatalf("plan.paused = %+v; want one with pause_reason approval", paused)
	}
	if _, err := st.Complete(ctx, leaseOf(c, w.ID), queue.CompleteInput{HeadSHA: "bbbbbbbbbbbbbbbbbbbb"}); err != nil {
		t.Fatalf("the running attempt could not complete: %v", err)
	}
	if c := tryClaim(t, st, w, id); c != nil {
		t.Fatalf("claimed %s before round 3 was approved", c.Task.ID)
	}
	if pi, _ := st.GetPlan(ctx, id); pi.Status != plan.PlanPaused || pi.PauseReason != queue.PauseApproval {
		t.Fatalf("plan after round 2 completed: %s (%s); want PAUSED (approval)", pi.Status, pi.PauseReason)
	}
	if _, err := st.ApprovePlan(ctx, id, "", queue.Actor{By: "@maintainer"}); err != nil {
		t.Fatal(err)
	}
	if c := tryClaim(t, st, w, id); c == nil || c.Task.ID != "pr-round-3" {
		t.Fatalf("after approval claimed %+v; want pr-round-3", c)
	}
}

// A check round awaiting approval whose suite passes on re-run ends without work and the
// plan is DONE again, not left waiting for an approval of nothing.
func TestCheckRoundAwaitingApprovalResolvedByARerun(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, id := donePlanWithPull(t, 0)
	r := roundReq(id, queue.RoundCheck, "5@aaaa", 3)
	r.HeadSHA, r.RequireApproval = "aaaa", true
	if res, err := st.StartRound(ctx, r); err != nil || res.Outcome != queue.RoundStarted {
		t.Fatal(res, err)
	}
	if s, _ := st.PlanStatus(ctx, id); s != plan.PlanPaused {
		t.Fatalf("plan %s; want PAUSED", s)
	}
	if n, err := st.ResolveCheckRound(ctx, roundRepo, 7, "aaaa"); err != nil || n != 2 {
		t.Fatalf("resolve: %d, %v; want round 2", n, err)
	}
	pi, err := st.GetPlan(ctx, id)
	if err != nil || pi.Status != plan.PlanDone || pi.PauseReason != "" {
		t.Fatalf("plan %s (%s), %v; want DONE", pi.Status, pi.PauseReason, err)
	}
}
