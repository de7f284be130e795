package control_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/whilly-go/whilly/control"
	"github.com/whilly-go/whilly/control/client"
)

// TestMalformedRequestsChangeNothing sends every kind of bad request and checks that each
// gets its 4xx with a JSON error, and that no row changed.
func TestMalformedRequestsChangeNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{control: control.Config{MaxPlanBytes: 64 << 10}})
	ctx := context.Background()
	e.importPlan(planDoc("p", "T1", "T2"))
	tokA, idA := e.register()
	tokB, _ := e.register()
	claim, err := e.client(tokA).Claim(ctx, client.ClaimRequest{PlanID: "p"})
	if err != nil || claim == nil {
		t.Fatalf("claim: %v, %v", claim, err)
	}
	lease := claim.Lease.ID
	task := "/v1/plans/p/tasks/" + claim.Task.ID
	huge := `{"hostname": "` + strings.Repeat("h", 2<<20) + `"}`
	cycle := `{"plan_id": "c", "project": "Cycle", "tasks": [
		{"id": "A", "priority": "high", "description": "a task that waits for B forever", "dependencies": ["B"]},
		{"id": "B", "priority": "high", "description": "a task that waits for A forever", "dependencies": ["A"]}]}`

	for _, tc := range []struct {
		name          string
		token         string
		method, path  string
		body          string
		header        []string
		want          int
		wantInMessage string
	}{
		{"register: broken JSON", bootstrapToken, "POST", "/v1/workers/register", `{"hostname": `, nil, 400, "not valid JSON"},
		{"register: empty body", bootstrapToken, "POST", "/v1/workers/register", ``, nil, 400, "empty"},
		{"register: array", bootstrapToken, "POST", "/v1/workers/register", `[]`, nil, 400, "object"},
		{"register: unknown field", bootstrapToken, "POST", "/v1/workers/register", `{"hostname": "h", "admin": true}`, nil, 400, "unknown field"},
		{"register: two objects", bootstrapToken, "POST", "/v1/workers/register", `{"hostname": "h"} {"hostname": "i"}`, nil, 400, "single JSON object"},
		{"register: no hostname", bootstrapToken, "POST", "/v1/workers/register", `{"hostname": "  "}`, nil, 400, "hostname"},
		{"register: hostname type", bootstrapToken, "POST", "/v1/workers/register", `{"hostname": 5}`, nil, 400, "hostname"},
		{"register: control character", bootstrapToken, "POST", "/v1/workers/register", `{"hostname": "a\u0000b"}`, nil, 400, "hostname"},
		// A right-to-left override would show "build-01" in the dashboard and the CLI for
		// a worker that registered as "10-dliub"; zero-width characters make look-alikes.
		{"register: bidi override", bootstrapToken, "POST", "/v1/workers/register", `{"hostname": "\u202e10-dliub"}`, nil, 400, "hostname"},
		{"register: zero-width space", bootstrapToken, "POST", "/v1/workers/register", `{"hostname": "build\u200b-01"}`, nil, 400, "hostname"},
		{"register: bad label", bootstrapToken, "POST", "/v1/workers/register", `{"hostname": "h", "labels": ["gpu; rm -rf"]}`, nil, 400, "Label"},
		{"register: too large", bootstrapToken, "POST", "/v1/workers/register", huge, nil, 413, "larger than"},

		{"heartbeat: lease missing", tokA, "POST", "/v1/workers/" + idA + "/heartbeat", `{"tasks": [{"plan_id": "p", "task_id": "T1"}]}`, nil, 400, "lease_id"},
		{"heartbeat: wrong type", tokA, "POST", "/v1/workers/" + idA + "/heartbeat", `{"tasks": "all"}`, nil, 400, "tasks"},

		{"claim: negative wait", tokA, "POST", "/v1/tasks/claim", `{"wait_seconds": -1}`, nil, 400, "wait_seconds"},
		{"claim: wait as string", tokA, "POST", "/v1/tasks/claim", `{"wait_seconds": "5"}`, nil, 400, "wait_seconds"},
		{"claim: unknown plan", tokA, "POST", "/v1/tasks/claim", `{"plan_id": "nope", "wait_seconds": 0}`, nil, 404, "nope"},

		{"start: no lease", tokA, "POST", task + "/start", `{}`, nil, 400, "lease_id"},
		{"start: lease not a UUID", tokA, "POST", task + "/start", `{"lease_id": "'; DROP TABLE tasks; --"}`, nil, 400, "lease_id"},
		{"complete: negative cost", tokA, "POST", task + "/complete", fmt.Sprintf(`{"lease_id": %q, "cost_usd": -1}`, lease), nil, 400, "negative"},
		{"complete: cost not a number", tokA, "POST", task + "/complete", fmt.Sprintf(`{"lease_id": %q, "cost_usd": "abc"}`, lease), nil, 400, "amount"},
		{"complete: sub-micro cost", tokA, "POST", task + "/complete", fmt.Sprintf(`{"lease_id": %q, "cost_usd": 0.0000001}`, lease), nil, 400, "decimal places"},
		{"complete: stale lease", tokA, "POST", task + "/complete", `{"lease_id": "6f1c1d2e-0000-4000-8000-000000000000", "cost_usd": 0}`, nil, 409, "lease"},
		{"complete: stale lease, claim next", tokA, "POST", task + "/complete", `{"lease_id": "6f1c1d2e-0000-4000-8000-000000000000", "cost_usd": 0, "claim_next": {"plan_id": "p"}}`, nil, 409, "lease"},
		{"complete: claim_next not an object", tokA, "POST", task + "/complete", fmt.Sprintf(`{"lease_id": %q, "cost_usd": 0, "claim_next": 5}`, lease), nil, 400, "claim_next"},
		{"complete: claim_next plan too long", tokA, "POST", task + "/complete", fmt.Sprintf(`{"lease_id": %q, "cost_usd": 0, "claim_next": {"plan_id": %q}}`, lease, strings.Repeat("p", 600)), nil, 400, "too long"},
		{"complete: another worker", tokB, "POST", task + "/complete", fmt.Sprintf(`{"lease_id": %q, "cost_usd": 0}`, lease), nil, 409, "lease"},
		{"complete: unknown task", tokA, "POST", "/v1/plans/p/tasks/NOPE/complete", fmt.Sprintf(`{"lease_id": %q, "cost_usd": 0}`, lease), nil, 404, "NOPE"},
		{"complete: unknown plan", tokA, "POST", "/v1/plans/nope/tasks/T1/complete", fmt.Sprintf(`{"lease_id": %q, "cost_usd": 0}`, lease), nil, 404, "nope"},
		{"fail: empty reason", tokA, "POST", task + "/fail", fmt.Sprintf(`{"lease_id": %q, "cost_usd": 0, "reason": ""}`, lease), nil, 400, "reason"},
		{"fail: detail not an object", tokA, "POST", task + "/fail", fmt.Sprintf(`{"lease_id": %q, "cost_usd": 0, "reason": "x", "detail": "x"}`, lease), nil, 400, "detail"},
		{"release: reason too long", tokA, "POST", task + "/release", fmt.Sprintf(`{"lease_id": %q, "reason": %q}`, lease, strings.Repeat("r", 5000)), nil, 400, "reason"},
		{"event: forged lifecycle type", tokA, "POST", task + "/events", fmt.Sprintf(`{"lease_id": %q, "type": "COMPLETE"}`, lease), nil, 400, "agent"},
		{"event: payload not an object", tokA, "POST", task + "/events", fmt.Sprintf(`{"lease_id": %q, "type": "agent.output", "payload": [1]}`, lease), nil, 400, "object"},

		{"import: not JSON", e.admin, "POST", "/v1/plans", `tasks: []`, nil, 400, "JSON"},
		{"import: no tasks", e.admin, "POST", "/v1/plans", `{"project": "x"}`, nil, 422, "tasks"},
		{"import: cycle", e.admin, "POST", "/v1/plans", cycle, nil, 422, "→"},
		{"import: strict not a bool", e.admin, "POST", "/v1/plans?strict=maybe", planDoc("q", "A"), nil, 400, "strict"},
		{"import: too large", e.admin, "POST", "/v1/plans", planDoc("big", "A") + strings.Repeat(" ", 64<<10), nil, 413, "larger than"},
		{"patch: nothing", e.admin, "PATCH", "/v1/plans/p", `{}`, nil, 400, "budget_usd"},
		{"patch: status ACTIVE", e.admin, "PATCH", "/v1/plans/p", `{"status": "ACTIVE"}`, nil, 400, "CANCELLED"},
		{"patch: negative budget", e.admin, "PATCH", "/v1/plans/p", `{"budget_usd": -5}`, nil, 400, "negative"},
		{"patch: unknown field", e.admin, "PATCH", "/v1/plans/p", `{"budget_usd": 5, "spent_usd": 0}`, nil, 400, "unknown field"},
		{"patch: unknown plan", e.admin, "PATCH", "/v1/plans/nope", `{"budget_usd": 5}`, nil, 404, "nope"},

		{"plans: limit 0", e.read, "GET", "/v1/plans?limit=0", "", nil, 400, "limit"},
		{"plans: limit text", e.read, "GET", "/v1/plans?limit=ten", "", nil, 400, "limit"},
		{"plans: bad status", e.read, "GET", "/v1/plans?status=RUNNING", "", nil, 400, "status"},
		{"plan: unknown", e.read, "GET", "/v1/plans/nope", "", nil, 404, "nope"},
		{"tasks: unknown plan", e.read, "GET", "/v1/plans/nope/tasks", "", nil, 404, "nope"},
		{"events: negative after", e.read, "GET", "/v1/events?after=-1", "", nil, 400, "after"},
		{"events: limit too big", e.read, "GET", "/v1/events?limit=5000", "", nil, 400, "limit"},
		{"stream: bad Last-Event-ID", e.read, "GET", "/v1/events/stream", "", []string{"Last-Event-ID", "abc"}, 400, "Last-Event-ID"},
		{"unknown route", e.read, "GET", "/v1/nothing", "", nil, 404, "/v1/nothing"},
		{"wrong method", e.admin, "DELETE", "/v1/plans/p", "", nil, 405, "DELETE"},
	} {
		before := e.stateDigest()
		var body any
		if tc.body != "" {
			body = tc.body
		}
		status, resp := e.do(tc.method, tc.path, tc.token, body, tc.header...)
		if status != tc.want {
			t.Errorf("%s: status %d, want %d (%.300s)", tc.name, status, tc.want, resp)
			continue
		}
		var eb client.ErrorBody
		if err := json.Unmarshal([]byte(resp), &eb); err != nil || eb.Error == "" || eb.Message == "" {
			t.Errorf("%s: error body %q is not {error, message}", tc.name, resp)
		}
		if !strings.Contains(eb.Message, tc.wantInMessage) {
			t.Errorf("%s: message %q does not mention %q", tc.name, eb.Message, tc.wantInMessage)
		}
		if after := e.stateDigest(); after != before {
			t.Errorf("%s: the database changed", tc.name)
		}
	}
}
