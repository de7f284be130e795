package control_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/whilly-go/whilly/control/client"
	"github.com/whilly-go/whilly/queue"
)

// taskDoc is one task in the plan-file format.
func taskDoc(id string, deps ...string) string {
	d, _ := json.Marshal(deps)
	if deps == nil {
		d = []byte("[]")
	}
	return fmt.Sprintf(`{"id": %q, "priority": "high", "description": "Do the work of task %s thoroughly and well",
		"dependencies": %s, "acceptance_criteria": ["it works"], "test_steps": ["go test ./..."], "key_files": ["x.go"]}`, id, id, d)
}

// lastEvent returns the newest event of type typ of task taskID in plan planID.
func (e *env) lastEvent(planID, taskID, typ string) (queue.Event, bool) {
	e.t.Helper()
	evs, err := e.store.Events(context.Background(), queue.EventFilter{PlanID: planID, Limit: 1000})
	if err != nil {
		e.t.Fatal(err)
	}
	for i := len(evs) - 1; i >= 0; i-- {
		if evs[i].TaskID == taskID && evs[i].Type == typ {
			return evs[i], true
		}
	}
	return queue.Event{}, false
}

// by returns the "by" of an event's payload.
func by(t *testing.T, ev queue.Event) string {
	t.Helper()
	var p struct {
		By string `json:"by"`
	}
	if err := json.Unmarshal(ev.Payload, &p); err != nil {
		t.Fatal(err)
	}
	return p.By
}

// TestTaskOperationsOverHTTP: an admin adds, edits, resets and removes one task of a plan
// over the API; each change is an event that names the admin token's owner.
func TestTaskOperationsOverHTTP(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	ctx := context.Background()
	e.importPlan(planDoc("p", "T1"))
	admin := e.client(e.admin)
	for _, typ := range []string{"plan.created", "task.created"} {
		if ev, ok := e.lastEvent("p", map[string]string{"task.created": "T1"}[typ], typ); !ok || by(t, ev) != "token:ops@example.com" {
			t.Errorf("%s event of the import: %v %s", typ, ok, ev.Payload)
		}
	}

	// Add: a task depending on T1.
	added, err := admin.AddTask(ctx, "p", []byte(taskDoc("T2", "T1")))
	if err != nil {
		t.Fatal(err)
	}
	if added.Task.ID != "T2" || added.Task.Status != "PENDING" || !added.Changed || added.Plan.Counts["PENDING"] != 2 {
		t.Errorf("add: %+v", added)
	}
	ev, ok := e.lastEvent("p", "T2", "task.created")
	if !ok || by(t, ev) != "token:ops@example.com" {
		t.Errorf("task.created event: %v %s", ok, ev.Payload)
	}

	// Edit: a new description.
	edited := strings.Replace(taskDoc("T2", "T1"), "thoroughly and well", "with care, step by step", 1)
	ch, err := admin.EditTask(ctx, "p", "T2", []byte(edited))
	if err != nil {
		t.Fatal(err)
	}
	if !ch.Changed || !strings.Contains(ch.Task.Description, "step by step") {
		t.Errorf("edit: %+v", ch)
	}
	ev, ok = e.lastEvent("p", "T2", "task.updated")
	if !ok || by(t, ev) != "token:ops@example.com" || !strings.Contains(string(ev.Payload), "description") {
		t.Errorf("task.updated event: %v %s", ok, ev.Payload)
	}
	// The same definition again changes nothing.
	before := e.stateDigest()
	if ch, err := admin.EditTask(ctx, "p", "T2", []byte(edited)); err != nil || ch.Changed {
		t.Errorf("same edit again: %+v, %v", ch, err)
	}
	if e.stateDigest() != before {
		t.Error("an edit that changes nothing wrote something")
	}

	// Reset with cascade: run both tasks to DONE first.
	w, _ := e.worker()
	for range 2 {
		c, err := w.Claim(ctx, client.ClaimRequest{PlanID: "p"})
		if err != nil || c == nil {
			t.Fatalf("claim: %v, %v", c, err)
		}
		if _, err := w.Complete(ctx, "p", c.Task.ID, client.CompleteRequest{LeaseID: c.Lease.ID}); err != nil {
			t.Fatal(err)
		}
	}
	res, err := admin.ResetTask(ctx, "p", "T1", true)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(res.Reset, ",") != "T1,T2" || res.Plan.Status != "ACTIVE" {
		t.Errorf("reset --cascade: %+v", res)
	}
	for _, id := range []string{"T1", "T2"} {
		if ev, ok := e.lastEvent("p", id, "RESET"); !ok || by(t, ev) != "token:ops@example.com" {
			t.Errorf("RESET event of %s: %v %s", id, ok, ev.Payload)
		}
	}
	if ev, ok := e.lastEvent("p", "", "plan.reopened"); !ok || by(t, ev) != "token:ops@example.com" {
		t.Errorf("plan.reopened event: %v %s", ok, ev.Payload)
	}

	// Remove T2 (nothing depends on it).
	if err := admin.RemoveTask(ctx, "p", "T2"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.store.GetTask(ctx, "p", "T2"); !errors.Is(err, queue.ErrNotFound) {
		t.Errorf("T2 after removal: %v", err)
	}
	if ev, ok := e.lastEvent("p", "T2", "task.removed"); !ok || by(t, ev) != "token:ops@example.com" {
		t.Errorf("task.removed event: %v %s", ok, ev.Payload)
	}
}

// TestTaskOperationsRefusals: hostile and wrong requests get a 4xx with a sentence and
// write nothing.
func TestTaskOperationsRefusals(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	ctx := context.Background()
	e.importPlan(planDoc("p", "T1", "T3"))
	admin := e.client(e.admin)
	// One task runs; T2 depends on the other, which waits.
	w, _ := e.worker()
	c, err := w.Claim(ctx, client.ClaimRequest{PlanID: "p"})
	if err != nil || c == nil {
		t.Fatalf("claim: %v, %v", c, err)
	}
	running, waiting := c.Task.ID, "T1"
	if running == "T1" {
		waiting = "T3"
	}
	if _, err := admin.AddTask(ctx, "p", []byte(taskDoc("T2", waiting))); err != nil {
		t.Fatal(err)
	}
	bad := strings.Replace(taskDoc("T9"), `"priority"`, `"dependncies": ["T1"], "priority"`, 1)
	for _, rq := range []struct {
		name, method, path, body string
		status                   int
		says                     string
	}{
		{"add to an unknown plan", "POST", "/v1/plans/nope/tasks", taskDoc("T9"), 404, "nope"},
		{"edit an unknown task", "PATCH", "/v1/plans/p/tasks/T9", taskDoc("T9"), 404, "T9"},
		{"remove an unknown task", "DELETE", "/v1/plans/p/tasks/T9", "", 404, "T9"},
		{"reset an unknown task", "POST", "/v1/plans/p/tasks/T9/reset", "", 404, "T9"},
		{"remove from an unknown plan", "DELETE", "/v1/plans/nope/tasks/T1", "", 404, "nope"},
		{"add an existing id", "POST", "/v1/plans/p/tasks", taskDoc("T1"), 409, "already has a task T1"},
		{"edit a running task", "PATCH", "/v1/plans/p/tasks/" + running, strings.Replace(taskDoc(running), "thoroughly", "quickly", 1), 409, "only a task that has not run may change"},
		{"remove a running task", "DELETE", "/v1/plans/p/tasks/" + running, "", 409, "once its attempt ends"},
		{"remove a task something depends on", "DELETE", "/v1/plans/p/tasks/" + waiting, "", 409, "T2 depends on it."},
		{"reset a pending task", "POST", "/v1/plans/p/tasks/" + waiting + "/reset", "", 409, "only a DONE, FAILED, SKIPPED or CANCELLED task"},
		{"reset with a bad cascade", "POST", "/v1/plans/p/tasks/" + waiting + "/reset?cascade=maybe", "", 400, "cascade"},
		{"edit that changes the id", "PATCH", "/v1/plans/p/tasks/T1", taskDoc("T7"), 400, "keeps the task's id"},
		{"an unknown key", "POST", "/v1/plans/p/tasks", bad, 400, "dependncies"},
		{"a NUL byte", "POST", "/v1/plans/p/tasks", strings.Replace(taskDoc("T9"), "thoroughly", `thor\u0000oughly`, 1), 400, "description"},
		{"invalid UTF-8", "POST", "/v1/plans/p/tasks", strings.Replace(taskDoc("T9"), "thoroughly", "thor\xffoughly", 1), 400, "description"},
		{"a duplicate key", "POST", "/v1/plans/p/tasks", strings.Replace(taskDoc("T9"), `"priority": "high"`, `"priority": "high", "priority": "low"`, 1), 400, "priority"},
		{"an unknown dependency", "POST", "/v1/plans/p/tasks", taskDoc("T9", "GHOST"), 400, "GHOST"},
		{"a cycle", "PATCH", "/v1/plans/p/tasks/" + waiting, taskDoc(waiting, "T2"), 400, "cycle"},
		{"not an object", "POST", "/v1/plans/p/tasks", `["T9"]`, 400, "one JSON object"},
		{"not JSON", "POST", "/v1/plans/p/tasks", `{"id": "T9",`, 400, "one JSON object"},
		{"an object and more", "POST", "/v1/plans/p/tasks", taskDoc("T9") + `]}, "evil": {`, 400, "one JSON object"},
		{"an empty body", "POST", "/v1/plans/p/tasks", "", 400, "one JSON object"},
		{"a bad id", "POST", "/v1/plans/p/tasks", taskDoc("../T9"), 400, "id"},
		{"a NUL in the path", "DELETE", "/v1/plans/p/tasks/T%00", "", 400, "task id in the path"},
		{"a body too large", "POST", "/v1/plans/p/tasks", strings.Repeat(" ", 1<<20) + taskDoc("T9"), 413, "larger than"},
	} {
		before := e.stateDigest()
		var body any
		if rq.body != "" {
			body = rq.body
		}
		status, out := e.do(rq.method, rq.path, e.admin, body)
		t.Logf("%s: %d %s", rq.name, status, out)
		if status != rq.status || !strings.Contains(out, rq.says) {
			t.Errorf("%s: %d %s; want %d saying %q", rq.name, status, out, rq.status, rq.says)
		}
		if e.stateDigest() != before {
			t.Errorf("%s: the refused request changed the database", rq.name)
		}
	}
}

// TestTaskOperationsNeedAnAdminToken: worker, bootstrap and read tokens — scoped to the
// plan or not — are refused with 403 before anything is read, so a scoped token learns
// nothing of plans outside its scopes; no token is 401. Nothing is written.
func TestTaskOperationsNeedAnAdminToken(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	ctx := context.Background()
	e.importPlan(planDoc("p", "T1", "T2"))
	e.importPlan(planDoc("other", "T1"))
	workerTok, _ := e.register()
	inScope, _, err := e.store.Mint(ctx, queue.TokenSpec{Owner: "scoped", Scopes: queue.Scopes{"plan:p"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tok := range []string{workerTok, bootstrapToken, e.read, inScope, ""} {
		want := 403
		if tok == "" {
			want = 401
		}
		for _, planID := range []string{"p", "other", "nope"} {
			before := e.stateDigest()
			for _, rq := range []struct{ method, path, body string }{
				{"POST", "/v1/plans/" + planID + "/tasks", taskDoc("T9")},
				{"PATCH", "/v1/plans/" + planID + "/tasks/T1", taskDoc("T1")},
				{"DELETE", "/v1/plans/" + planID + "/tasks/T2", ""},
				{"POST", "/v1/plans/" + planID + "/tasks/T1/reset?cascade=true", ""},
			} {
				var body any
				if rq.body != "" {
					body = rq.body
				}
				if status, out := e.do(rq.method, rq.path, tok, body); status != want {
					t.Errorf("%.12s… %s %s: %d, want %d (%s)", tok, rq.method, rq.path, status, want, out)
				}
			}
			if e.stateDigest() != before {
				t.Errorf("%.12s…: a refused request changed the database", tok)
			}
		}
	}
	// The worker protocol under the same path still takes worker tokens, not admin ones.
	if status, out := e.do("POST", "/v1/plans/p/tasks/T1/start", e.admin, `{"lease_id": "x"}`); status != 403 {
		t.Errorf("admin token on the worker protocol: %d %s", status, out)
	}
}
