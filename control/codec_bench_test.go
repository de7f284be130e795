package control

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/whilly-go/whilly/control/client"
	"github.com/whilly-go/whilly/plan"
)

// benchComplete is a worker's COMPLETE with claim_next and a log tail, as a fleet sends it.
func benchComplete(b *testing.B) []byte {
	b.Helper()
	body, err := json.Marshal(client.CompleteRequest{LeaseID: "0b8f1e52-3c1a-4d6e-9a7b-2f4c5d6e7f80", Result: "done",
		DurationMS: 1200, Log: &client.LogTail{Offset: 0, Text: strings.Repeat("agent output line\n", 16)},
		ClaimNext: &client.NextClaim{PlanID: "bench", IdempotencyKey: "5e2d7c90-1b3a-4f5e-8d6c-7a9b0c1d2e3f", Start: true}})
	if err != nil {
		b.Fatal(err)
	}
	return body
}

// benchAnswer is the answer to benchComplete: the completed task and the next claim.
func benchAnswer() client.CompleteResponse {
	now := time.Date(2026, 12, 7, 10, 0, 0, 123456000, time.UTC)
	exp := now.Add(time.Minute)
	task := func(id string, st plan.Status) client.Task {
		return client.Task{PlanID: "bench", ID: id, Status: st, Priority: "medium",
			Description: "Do the work of task " + id + " thoroughly and well", Dependencies: []string{},
			KeyFiles: []string{"x.go"}, AcceptanceCriteria: []string{"it works"}, TestSteps: []string{"go test ./..."},
			Labels: []string{}, Gate: plan.Verdict{Decision: "accept", Reasons: []plan.Reason{}}, Attempts: 1, MaxAttempts: 3,
			Version: 3, CostUSD: 0, Result: "done", CreatedAt: now, UpdatedAt: now}
	}
	next := task("T000124", plan.StatusInProgress)
	next.Result, next.LeaseExpiresAt, next.ClaimedBy, next.Attempt = "", &exp, "w-0b8f1e52", 1
	return client.CompleteResponse{Task: task("T000123", plan.StatusDone), Next: &client.Claim{Task: next,
		Lease: client.Lease{ID: "5e2d7c90-1b3a-4f5e-8d6c-7a9b0c1d2e3f", ExpiresAt: exp, TTLSeconds: 60},
		Plan: client.Plan{ID: "bench", Name: "Project bench", Status: plan.PlanActive, Verify: []client.Verify{},
			Counts: map[plan.Status]int{plan.StatusPending: 3000, plan.StatusDone: 990, plan.StatusInProgress: 8},
			Total:  4000, CreatedAt: now, UpdatedAt: now}}}
}

// BenchmarkDecodeComplete decodes a COMPLETE request's body.
func BenchmarkDecodeComplete(b *testing.B) {
	body := benchComplete(b)
	w := httptest.NewRecorder()
	for b.Loop() {
		r := httptest.NewRequest(http.MethodPost, "/", bytes.NewReader(body))
		var req client.CompleteRequest
		if err := decode(w, r, 1<<20, &req); err != nil {
			b.Fatal(err)
		}
	}
}

// discard is a ResponseWriter that keeps nothing.
type discard struct{ h http.Header }

func (d *discard) Header() http.Header         { return d.h }
func (d *discard) Write(p []byte) (int, error) { return len(p), nil }
func (d *discard) WriteHeader(int)             {}

// BenchmarkWriteComplete encodes the answer to a COMPLETE with the next claim.
func BenchmarkWriteComplete(b *testing.B) {
	out := benchAnswer()
	for b.Loop() {
		writeJSON(&discard{h: http.Header{}}, http.StatusOK, out)
	}
}
