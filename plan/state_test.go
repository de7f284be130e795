package plan

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"
)

func TestNextEveryPair(t *testing.T) {
	t.Parallel()
	const invalid Status = "" // the pair is not in the table
	// want[from][transition], written out in full: 7 statuses × 9 transitions.
	want := map[Status]map[Transition]Status{
		StatusPending: {
			TransitionClaim:    StatusClaimed,
			TransitionStart:    invalid,
			TransitionComplete: invalid,
			TransitionFail:     invalid,
			TransitionRetry:    invalid,
			TransitionRelease:  invalid,
			TransitionSkip:     StatusSkipped,
			TransitionCancel:   StatusCancelled,
			TransitionReset:    invalid,
		},
		StatusClaimed: {
			TransitionClaim:    invalid,
			TransitionStart:    StatusInProgress,
			TransitionComplete: StatusDone,
			TransitionFail:     StatusFailed,
			TransitionRetry:    StatusPending,
			TransitionRelease:  StatusPending,
			TransitionSkip:     invalid,
			TransitionCancel:   StatusCancelled,
			TransitionReset:    invalid,
		},
		StatusInProgress: {
			TransitionClaim:    invalid,
			TransitionStart:    invalid,
			TransitionComplete: StatusDone,
			TransitionFail:     StatusFailed,
			TransitionRetry:    StatusPending,
			TransitionRelease:  StatusPending,
			TransitionSkip:     invalid,
			TransitionCancel:   StatusCancelled,
			TransitionReset:    invalid,
		},
		StatusDone: {
			TransitionClaim:    invalid,
			TransitionStart:    invalid,
			TransitionComplete: invalid,
			TransitionFail:     invalid,
			TransitionRetry:    invalid,
			TransitionRelease:  invalid,
			TransitionSkip:     invalid,
			TransitionCancel:   invalid,
			TransitionReset:    StatusPending,
		},
		StatusFailed: {
			TransitionClaim:    invalid,
			TransitionStart:    invalid,
			TransitionComplete: invalid,
			TransitionFail:     invalid,
			TransitionRetry:    invalid,
			TransitionRelease:  invalid,
			TransitionSkip:     invalid,
			TransitionCancel:   invalid,
			TransitionReset:    StatusPending,
		},
		StatusSkipped: {
			TransitionClaim:    invalid,
			TransitionStart:    invalid,
			TransitionComplete: invalid,
			TransitionFail:     invalid,
			TransitionRetry:    invalid,
			TransitionRelease:  invalid,
			TransitionSkip:     invalid,
			TransitionCancel:   invalid,
			TransitionReset:    StatusPending,
		},
		StatusCancelled: {
			TransitionClaim:    invalid,
			TransitionStart:    invalid,
			TransitionComplete: invalid,
			TransitionFail:     invalid,
			TransitionRetry:    invalid,
			TransitionRelease:  invalid,
			TransitionSkip:     invalid,
			TransitionCancel:   invalid,
			TransitionReset:    StatusPending,
		},
	}
	// The table must cover exactly Statuses() × Transitions().
	if len(want) != len(Statuses()) {
		t.Fatalf("table has %d statuses, Statuses() has %d", len(want), len(Statuses()))
	}
	pairs := 0
	for _, from := range Statuses() {
		row, ok := want[from]
		if !ok {
			t.Fatalf("table misses status %s", from)
		}
		if len(row) != len(Transitions()) {
			t.Fatalf("row %s has %d transitions, Transitions() has %d", from, len(row), len(Transitions()))
		}
		for _, tr := range Transitions() {
			to, ok := row[tr]
			if !ok {
				t.Fatalf("table misses %s from %s", tr, from)
			}
			pairs++
			t.Run(string(from)+"/"+string(tr), func(t *testing.T) {
				t.Parallel()
				got, err := Next(from, tr)
				if to == invalid {
					if !errors.Is(err, ErrInvalidTransition) {
						t.Fatalf("Next(%s, %s) = %q, %v; want ErrInvalidTransition", from, tr, got, err)
					}
					if got != "" {
						t.Errorf("Next returned status %q with an error", got)
					}
					for _, name := range []string{string(from), string(tr)} {
						if !strings.Contains(err.Error(), name) {
							t.Errorf("error %q does not name %s", err, name)
						}
					}
					return
				}
				if err != nil || got != to {
					t.Fatalf("Next(%s, %s) = %q, %v; want %s", from, tr, got, err, to)
				}
			})
		}
	}
	if pairs != 63 {
		t.Fatalf("checked %d pairs, want 63", pairs)
	}
}

func TestNextUnknown(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		from Status
		tr   Transition
		want string
	}{
		{"unknown transition", StatusPending, "PROMOTE", `unknown transition "PROMOTE"`},
		{"empty transition", StatusPending, "", `unknown transition ""`},
		{"lower-case transition", StatusPending, "claim", `unknown transition "claim"`},
		{"unknown status", "WAITING", TransitionClaim, `unknown status "WAITING"`},
		{"empty status", "", TransitionCancel, `unknown status ""`},
		{"lower-case status", "pending", TransitionClaim, `unknown status "pending"`},
		{"reset from unknown status", "ARCHIVED", TransitionReset, `unknown status "ARCHIVED"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := Next(tt.from, tt.tr)
			if !errors.Is(err, ErrInvalidTransition) || got != "" {
				t.Fatalf("Next(%q, %q) = %q, %v; want ErrInvalidTransition", tt.from, tt.tr, got, err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %q does not contain %q", err, tt.want)
			}
		})
	}
}

func TestFailOutcome(t *testing.T) {
	t.Parallel()
	tests := []struct {
		attempts, max int
		retryable     bool
		want          Transition
	}{
		{1, 3, true, TransitionRetry},
		{2, 3, true, TransitionRetry},
		{3, 3, true, TransitionFail},
		{4, 3, true, TransitionFail},
		{1, 3, false, TransitionFail},
		{1, 1, true, TransitionFail},
		{1, 0, true, TransitionFail},
		{0, 0, true, TransitionFail},
		{0, -5, true, TransitionFail},
		{99, 100, true, TransitionRetry},
		{100, 100, true, TransitionFail},
	}
	for _, tt := range tests {
		if got := FailOutcome(tt.attempts, tt.max, tt.retryable); got != tt.want {
			t.Errorf("FailOutcome(%d, %d, %v) = %s, want %s", tt.attempts, tt.max, tt.retryable, got, tt.want)
		}
	}
}

func TestBackoff(t *testing.T) {
	t.Parallel()
	const s = time.Second
	tests := []struct {
		attempt   int
		base, max time.Duration
		want      time.Duration
	}{
		{1, 10 * s, 600 * s, 10 * s},
		{2, 10 * s, 600 * s, 20 * s},
		{3, 10 * s, 600 * s, 40 * s},
		{6, 10 * s, 600 * s, 320 * s},
		{7, 10 * s, 600 * s, 600 * s},
		{8, 10 * s, 600 * s, 600 * s},
		{64, 10 * s, 600 * s, 600 * s},
		{math.MaxInt, 10 * s, 600 * s, 600 * s},
		{0, 10 * s, 600 * s, 10 * s},
		{-3, 10 * s, 600 * s, 10 * s},
		{1, 10 * s, 5 * s, 5 * s},
		{1, 0, 600 * s, 0},
		{5, -s, 600 * s, 0},
		{3, s, 0, 4 * s},
		{math.MaxInt, s, 0, time.Duration(math.MaxInt64)},
		{63, 1, -1, 1 << 62},
		{64, 1, -1, time.Duration(math.MaxInt64)},
		{2, time.Duration(math.MaxInt64), 0, time.Duration(math.MaxInt64)},
	}
	for _, tt := range tests {
		if got := Backoff(tt.attempt, tt.base, tt.max); got != tt.want {
			t.Errorf("Backoff(%d, %v, %v) = %v, want %v", tt.attempt, tt.base, tt.max, got, tt.want)
		}
	}
	if got := Backoff(2, DefaultBackoffBase, DefaultBackoffMax); got != 20*s {
		t.Errorf("default backoff of attempt 2 = %v, want 20s", got)
	}
}

func task(id string, status Status, deps ...string) Task {
	return Task{ID: id, Status: status, Priority: PriorityMedium, Description: "task " + id, Dependencies: deps, MaxAttempts: DefaultMaxAttempts}
}

func TestPlanOutcome(t *testing.T) {
	t.Parallel()
	const (
		P = StatusPending
		C = StatusClaimed
		I = StatusInProgress
		D = StatusDone
		F = StatusFailed
		S = StatusSkipped
		X = StatusCancelled
	)
	tests := []struct {
		name     string
		tasks    []Task
		want     PlanStatus
		finished bool
	}{
		{"empty plan", nil, PlanDone, true},
		{"all done", []Task{task("a", D), task("b", D)}, PlanDone, true},
		{"done and skipped", []Task{task("a", D), task("b", S, "a")}, PlanDone, true},
		{"all skipped", []Task{task("a", S)}, PlanDone, true},
		{"pending", []Task{task("a", P)}, PlanActive, false},
		{"claimed", []Task{task("a", D), task("b", C)}, PlanActive, false},
		{"in progress", []Task{task("a", I)}, PlanActive, false},
		{"waiting on running", []Task{task("a", I), task("b", P, "a")}, PlanActive, false},
		{"waiting on pending", []Task{task("a", P), task("b", P, "a")}, PlanActive, false},
		{"failed alone", []Task{task("a", F)}, PlanFailed, true},
		{"failed with done", []Task{task("a", D), task("b", F)}, PlanFailed, true},
		{"failed while another runs", []Task{task("a", F), task("b", I)}, PlanActive, false},
		{"failed while an independent task waits", []Task{task("a", F), task("b", P)}, PlanActive, false},
		{"dependent of failed", []Task{task("a", F), task("b", P, "a")}, PlanFailed, true},
		{"chain through failed", []Task{task("a", F), task("b", P, "a"), task("c", P, "b")}, PlanFailed, true},
		{"chain through pending to failed", []Task{task("c", P, "b"), task("b", P, "a"), task("a", F)}, PlanFailed, true},
		{"running dependent of failed still runs", []Task{task("a", F), task("b", C, "a")}, PlanActive, false},
		{"diamond one side failed", []Task{task("a", D), task("b", F, "a"), task("c", D, "a"), task("d", P, "b", "c")}, PlanFailed, true},
		{"cancelled only", []Task{task("a", X)}, PlanCancelled, true},
		{"cancelled and done", []Task{task("a", D), task("b", X)}, PlanCancelled, true},
		{"dependent of cancelled", []Task{task("a", X), task("b", P, "a")}, PlanCancelled, true},
		{"failed and cancelled", []Task{task("a", X), task("b", F)}, PlanFailed, true},
		{"skipped dependency satisfies", []Task{task("a", S), task("b", P, "a")}, PlanActive, false},
		{"cycle cannot progress", []Task{task("a", P, "b"), task("b", P, "a")}, PlanFailed, true},
		{"unknown dependency cannot progress", []Task{task("a", P, "ghost")}, PlanFailed, true},
		{"unknown status cannot progress", []Task{task("a", "WAITING")}, PlanFailed, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, finished := PlanOutcome(tt.tasks)
			if got != tt.want || finished != tt.finished {
				t.Fatalf("PlanOutcome = %s, %v; want %s, %v", got, finished, tt.want, tt.finished)
			}
		})
	}
}
