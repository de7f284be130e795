package control_test

import (
	"context"
	"encoding/json"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/whilly-go/whilly/control/client"
	"github.com/whilly-go/whilly/plan"
	"github.com/whilly-go/whilly/queue"
	"github.com/whilly-go/whilly/testkit"
)

// The global pause over HTTP: a waiting worker gets nothing until the fleet resumes, then
// gets its task as soon as system.resumed is notified; the attempt that was running when
// the fleet paused completes; only an admin token pauses; the events name the token owner.
func TestFleetPauseOverHTTP(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	ctx := context.Background()
	e.importPlan(planDoc("p", "T1", "T2"))
	busy, _ := e.worker()
	running, err := busy.Claim(ctx, client.ClaimRequest{PlanID: "p"})
	if err != nil || running == nil {
		t.Fatalf("claim = %v, %v", running, err)
	}

	for _, tok := range []string{e.read, ""} {
		if status, body := e.do("POST", "/v1/admin/pause", tok, nil); status != 403 && status != 401 {
			t.Fatalf("pause with token %q: %d %s; want 401/403", tok, status, body)
		}
	}
	admin := e.client(e.admin)
	f, err := admin.PauseFleet(ctx)
	if err != nil || !f.Paused || !f.Changed || f.PausedBy != "token:ops@example.com" {
		t.Fatalf("pause = %+v, %v", f, err)
	}
	if got, err := e.client(e.read).GetFleet(ctx); err != nil || !got.Paused || got.PausedAt == nil {
		t.Fatalf("fleet read with a read token = %+v, %v", got, err)
	}

	idle, _ := e.worker()
	// A claim that waits out its deadline while paused is answered 204 (nil).
	if c, err := idle.Claim(ctx, client.ClaimRequest{WaitSeconds: 1}); err != nil || c != nil {
		t.Fatalf("claim while paused = %+v, %v; want nothing", c, err)
	}
	// One that waits is not woken into a claim by new work while paused.
	waiting := claimAsync(ctx, idle, client.ClaimRequest{PlanID: "p", WaitSeconds: 25})
	testkit.Eventually(t, 20*time.Second, "the claim to wait", func() bool { return e.listener.Subscribers() == 1 })
	e.importPlan(planDoc("p", "T1", "T2", "T3"))
	if c, err := e.client(e.admin).GetPlan(ctx, "p"); err != nil || c.Total != 3 {
		t.Fatalf("plan = %+v, %v", c, err)
	}

	// The running attempt finishes while paused.
	if _, err := busy.Complete(ctx, "p", running.Task.ID, client.CompleteRequest{LeaseID: running.Lease.ID}); err != nil {
		t.Fatalf("complete while paused: %v", err)
	}
	select {
	case r := <-waiting:
		t.Fatalf("a claim returned while the fleet was paused: %+v, %v", r.claim, r.err)
	default:
	}

	resumedAt := time.Now()
	if f, err := admin.ResumeFleet(ctx); err != nil || f.Paused || !f.Changed {
		t.Fatalf("resume = %+v, %v", f, err)
	}
	r := receive(t, waiting)
	if r.err != nil || r.claim == nil || r.claim.Task.PlanID != "p" {
		t.Fatalf("claim after resume = %+v, %v", r.claim, r.err)
	}
	// Woken by system.resumed, not by its 25 s deadline.
	if d := r.at.Sub(resumedAt); d > 10*time.Second {
		t.Fatalf("the waiting claim got its task %v after the resume; the NOTIFY should wake it at once", d)
	}
	t.Logf("resume → claimed: %v", r.at.Sub(resumedAt))

	page, err := admin.ListEvents(ctx, client.EventQuery{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]string{}
	for _, ev := range page.Events {
		if ev.Type == queue.EventSystemPaused || ev.Type == queue.EventSystemResumed {
			var p struct {
				By string `json:"by"`
			}
			if err := json.Unmarshal(ev.Payload, &p); err != nil {
				t.Fatal(err)
			}
			seen[ev.Type] = p.By
		}
	}
	if seen[queue.EventSystemPaused] != "token:ops@example.com" || seen[queue.EventSystemResumed] != "token:ops@example.com" {
		t.Fatalf("system events by = %v; want both by token:ops@example.com", seen)
	}
}

// Plan pause, resume and approval over HTTP, with a plan id holding / and :.
func TestPlanPauseResumeApproveOverHTTP(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	ctx := context.Background()
	const id = "gh/acme/shop:12"
	esc := "/v1/plans/" + url.PathEscape(id)
	p, err := plan.Parse([]byte(planDoc(id, "T1")))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.store.Import(ctx, p, queue.ImportOptions{PauseReason: queue.PauseApproval}); err != nil {
		t.Fatal(err)
	}
	admin := e.client(e.admin)
	w, _ := e.worker()
	if c, err := w.Claim(ctx, client.ClaimRequest{}); err != nil || c != nil {
		t.Fatalf("claim of a plan awaiting approval = %+v, %v", c, err)
	}
	got, err := e.client(e.read).GetPlan(ctx, id)
	if err != nil || got.Status != plan.PlanPaused || got.PauseReason != queue.PauseApproval || len(got.Digest) != plan.DigestLen {
		t.Fatalf("plan = %+v, %v; want PAUSED (approval) with its digest", got, err)
	}

	// Refusals write nothing.
	before := e.stateDigest()
	for _, c := range []struct {
		token, path, body string
		status            int
	}{
		{e.read, esc + "/approve", `{"digest": "` + got.Digest + `"}`, 403},
		{e.admin, esc + "/approve", `{"digest": "not-a-digest"}`, 400},
		{e.admin, esc + "/approve", `{"digest": "` + strings.Repeat("ab", 32) + `"}`, 409},
		{e.admin, esc + "/approve", `{"digest": "` + got.Digest + `", "extra": 1}`, 400},
		{e.admin, esc + "/resume", ``, 409},
		{e.admin, "/v1/plans/nope/approve", ``, 404},
		{e.admin, "/v1/plans/nope/pause", ``, 404},
	} {
		status, body := e.do("POST", c.path, c.token, c.body)
		if status != c.status {
			t.Errorf("POST %s %s: %d %s; want %d", c.path, c.body, status, body, c.status)
		}
		if status >= 400 && !strings.Contains(body, `"message"`) {
			t.Errorf("POST %s: error body %s has no message", c.path, body)
		}
	}
	if after := e.stateDigest(); after != before {
		t.Fatal("a refused request changed the database")
	}

	res, err := admin.ApprovePlan(ctx, id, client.ApproveRequest{Digest: got.Digest})
	if err != nil || !res.Changed || res.Plan.Status != plan.PlanActive || res.Digest != got.Digest {
		t.Fatalf("approve = %+v, %v", res, err)
	}
	if got, _ := admin.GetPlan(ctx, id); got.Digest != "" {
		t.Fatalf("an approved plan still shows a digest: %s", got.Digest)
	}

	res, err = admin.PausePlan(ctx, id)
	if err != nil || !res.Changed || res.Plan.Status != plan.PlanPaused || res.Plan.PauseReason != queue.PauseOperator {
		t.Fatalf("pause = %+v, %v", res, err)
	}
	if c, err := w.Claim(ctx, client.ClaimRequest{PlanID: id, WaitSeconds: 5}); err != nil || c != nil {
		t.Fatalf("claim of a paused plan = %+v, %v; want nothing at once", c, err)
	}
	waiting := claimAsync(ctx, w, client.ClaimRequest{WaitSeconds: 25})
	testkit.Eventually(t, 20*time.Second, "the claim to wait", func() bool { return e.listener.Subscribers() == 1 })
	if res, err = admin.ResumePlan(ctx, id); err != nil || !res.Changed || res.Plan.Status != plan.PlanActive {
		t.Fatalf("resume = %+v, %v", res, err)
	}
	if r := receive(t, waiting); r.err != nil || r.claim == nil || r.claim.Task.PlanID != id {
		t.Fatalf("claim after resume = %+v, %v", r.claim, r.err)
	}
	if status, body := e.do("POST", esc+"/pause", e.read, nil); status != 403 {
		t.Fatalf("pause with a read token: %d %s; want 403", status, body)
	}
}
