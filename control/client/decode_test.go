package client

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/whilly-go/whilly/plan"
)

// completeAnswer is the answer to a COMPLETE with claim_next as whilly bench e2e sees it:
// the completed task and the next claim, about 1.8 KB of JSON.
func completeAnswer(tb testing.TB) []byte {
	tb.Helper()
	at := time.Date(2026, 12, 7, 10, 55, 1, 123456000, time.UTC)
	exp := at.Add(5 * time.Minute)
	task := func(n int, status plan.Status) Task {
		id := "T-" + string(rune('0'+n))
		return Task{PlanID: "bench-1765104901", ID: id, Status: status, Priority: plan.PriorityMedium,
			Description: "whilly bench task " + id + ": no work at all", Dependencies: []string{}, KeyFiles: []string{},
			AcceptanceCriteria: []string{"none"}, TestSteps: []string{"none"}, Labels: []string{},
			Gate:     plan.Verdict{Decision: plan.DecisionWarn, Reasons: []plan.Reason{{Code: "description_too_short", Message: "the description is shorter than 40 characters"}}},
			Attempts: 1, MaxAttempts: 1, Version: 3, CostUSD: 0, CreatedAt: at, UpdatedAt: at}
	}
	done := task(1, plan.StatusDone)
	done.Result = "sim: done"
	next := task(2, plan.StatusClaimed)
	next.Attempt, next.Attempts, next.Version = 1, 0, 2
	next.LeaseExpiresAt, next.ClaimedBy = &exp, "w-0f3c2a9e-bench-7"
	ans := CompleteResponse{Task: done, Next: &Claim{
		Task:  next,
		Lease: Lease{ID: "0193a7c4-5b2e-7d11-9f3e-2c4b6a8d0e1f", ExpiresAt: exp, TTLSeconds: 300},
		Plan: Plan{ID: "bench-1765104901", Name: "whilly bench (scratch, deleted afterwards)", Status: plan.PlanActive,
			Verify: []Verify{}, Total: 4000, CreatedAt: at, UpdatedAt: at},
	}}
	b, err := json.Marshal(ans)
	if err != nil {
		tb.Fatal(err)
	}
	return append(b, '\n')
}

func TestDecodeAnswerMatchesDecoder(t *testing.T) {
	t.Parallel()
	body := completeAnswer(t)
	var want, got CompleteResponse
	if err := json.NewDecoder(bytes.NewReader(body)).Decode(&want); err != nil {
		t.Fatal(err)
	}
	if err := decodeAnswer(bytes.NewReader(body), &got); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("decodeAnswer = %+v, want %+v", got, want)
	}
	if err := decodeAnswer(bytes.NewReader(body[:len(body)/2]), &got); err == nil {
		t.Fatal("a cut-off answer decoded without an error")
	}
}

// BenchmarkDecodeAnswer decodes a COMPLETE answer with the next claim, as the worker does
// once per task, and the same with a json.Decoder on the body for comparison.
func BenchmarkDecodeAnswer(b *testing.B) {
	body := completeAnswer(b)
	b.Logf("%d bytes", len(body))
	b.Run("decodeAnswer", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var out CompleteResponse
			if err := decodeAnswer(bytes.NewReader(body), &out); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("json.Decoder", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var out CompleteResponse
			if err := json.NewDecoder(bytes.NewReader(body)).Decode(&out); err != nil {
				b.Fatal(err)
			}
		}
	})
}
