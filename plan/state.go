package plan

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"time"
)

// Transition is a change of task status. The string values name events and
// appear in logs; never rename one.
type Transition string

// Task transitions.
const (
	TransitionClaim    Transition = "CLAIM"    // PENDING → CLAIMED
	TransitionStart    Transition = "START"    // CLAIMED → IN_PROGRESS
	TransitionComplete Transition = "COMPLETE" // CLAIMED, IN_PROGRESS → DONE
	TransitionFail     Transition = "FAIL"     // CLAIMED, IN_PROGRESS → FAILED: no attempts left, or not retryable
	TransitionRetry    Transition = "RETRY"    // CLAIMED, IN_PROGRESS → PENDING: a failure with attempts left
	TransitionRelease  Transition = "RELEASE"  // CLAIMED, IN_PROGRESS → PENDING: shutdown, lease expired, worker revoked
	TransitionSkip     Transition = "SKIP"     // PENDING → SKIPPED
	TransitionCancel   Transition = "CANCEL"   // PENDING, CLAIMED, IN_PROGRESS → CANCELLED
	TransitionReset    Transition = "RESET"    // DONE, FAILED, SKIPPED, CANCELLED → PENDING (operator)
)

// Transitions lists every transition, in the order of the transition table.
func Transitions() []Transition {
	return []Transition{
		TransitionClaim, TransitionStart, TransitionComplete, TransitionFail, TransitionRetry,
		TransitionRelease, TransitionSkip, TransitionCancel, TransitionReset,
	}
}

// ErrInvalidTransition is wrapped by every error Next returns.
var ErrInvalidTransition = errors.New("invalid transition")

// Next returns the status a task in status from moves to under t. A pair outside the
// transition table, an unknown status or an unknown transition is an error wrapping
// ErrInvalidTransition; nothing is ever silently ignored.
func Next(from Status, t Transition) (Status, error) {
	running := from == StatusClaimed || from == StatusInProgress
	var to Status
	switch t {
	case TransitionClaim:
		if from == StatusPending {
			to = StatusClaimed
		}
	case TransitionStart:
		if from == StatusClaimed {
			to = StatusInProgress
		}
	case TransitionComplete:
		if running {
			to = StatusDone
		}
	case TransitionFail:
		if running {
			to = StatusFailed
		}
	case TransitionRetry, TransitionRelease:
		if running {
			to = StatusPending
		}
	case TransitionSkip:
		if from == StatusPending {
			to = StatusSkipped
		}
	case TransitionCancel:
		if from == StatusPending || running {
			to = StatusCancelled
		}
	case TransitionReset:
		if from.Valid() && from.Terminal() {
			to = StatusPending
		}
	default:
		return "", fmt.Errorf("apply unknown transition %q to %s task: %w", t, from, ErrInvalidTransition)
	}
	if to == "" {
		if !from.Valid() {
			return "", fmt.Errorf("apply %s to task with unknown status %q: %w", t, from, ErrInvalidTransition)
		}
		return "", fmt.Errorf("apply %s to %s task: %w", t, from, ErrInvalidTransition)
	}
	return to, nil
}

// FailOutcome decides what a failed attempt does: RETRY while the failure is retryable and
// attempts (those made so far, this one included) is below maxAttempts, FAIL otherwise.
// Values below 1 count as 1, so a missing limit never retries forever.
func FailOutcome(attempts, maxAttempts int, retryable bool) Transition {
	if retryable && max(attempts, 1) < max(maxAttempts, 1) {
		return TransitionRetry
	}
	return TransitionFail
}

// Default retry backoff.
const (
	DefaultBackoffBase = 10 * time.Second
	DefaultBackoffMax  = 10 * time.Minute
)

// Backoff returns how long a task waits before its next attempt after failing attempt
// number attempt: base for the first, doubling each time, never above maxDelay (a
// maxDelay of zero or less means no cap). It never overflows, whatever attempt is. An
// attempt below 1 counts as 1; a base of zero or less gives no delay.
func Backoff(attempt int, base, maxDelay time.Duration) time.Duration {
	if base <= 0 {
		return 0
	}
	limit := maxDelay
	if limit <= 0 {
		limit = math.MaxInt64
	}
	d := min(base, limit)
	for i := 1; i < attempt && d < limit; i++ {
		if d > limit/2 {
			return limit
		}
		d *= 2
	}
	return d
}

// PlanStatuses lists every plan status.
func PlanStatuses() []PlanStatus {
	return []PlanStatus{PlanActive, PlanPaused, PlanDone, PlanFailed, PlanCancelled}
}

// planMoves are the changes of a plan's status whilly makes, by the status they leave.
// A live plan (ACTIVE, PAUSED) is paused and resumed, and ends DONE, FAILED or CANCELLED.
// An ended plan is reopened: ACTIVE by a reset, a /whilly retry, an import that adds
// work or a pull request's follow-up round, PAUSED when that round awaits approval; a
// DONE plan whose follow-up round is refused becomes FAILED, and a FAILED one can still
// be cancelled. A DONE plan is not cancelled, and a CANCELLED plan only comes back by a
// reset: nothing else moves it.
var planMoves = map[PlanStatus][]PlanStatus{
	PlanActive:    {PlanPaused, PlanDone, PlanFailed, PlanCancelled},
	PlanPaused:    {PlanActive, PlanDone, PlanFailed, PlanCancelled},
	PlanDone:      {PlanActive, PlanPaused, PlanFailed},
	PlanFailed:    {PlanActive, PlanPaused, PlanCancelled},
	PlanCancelled: {PlanActive},
}

// PlanMove checks that a plan may go from status from to status to (a different one):
// the database refuses every other change of a plan's status (migration 0028), and a
// test holds its list to this one.
func PlanMove(from, to PlanStatus) error {
	if slices.Contains(planMoves[from], to) {
		return nil
	}
	return fmt.Errorf("move a %s plan to %s: %w", from, to, ErrInvalidTransition)
}

// PlanOutcome tells whether a plan with these tasks has finished: DONE when every task
// is DONE or SKIPPED (an empty plan included); otherwise, once nothing can progress any
// more — no task is running and every PENDING task waits on a FAILED or CANCELLED task
// somewhere down its dependency chain — FAILED if some task failed (or the remaining
// tasks are stuck on a cycle or a missing dependency) and CANCELLED if tasks were only
// cancelled. While something can still progress it returns (PlanActive, false).
func PlanOutcome(tasks []Task) (PlanStatus, bool) {
	live := canFinish(tasks)
	allDone := true
	failed, cancelled := false, false
	for i, t := range tasks {
		switch t.Status {
		case StatusDone, StatusSkipped:
			continue
		case StatusFailed:
			failed = true
		case StatusCancelled:
			cancelled = true
		case StatusPending, StatusClaimed, StatusInProgress:
			if live[i] {
				return PlanActive, false
			}
		}
		allDone = false
	}
	switch {
	case allDone:
		return PlanDone, true
	case cancelled && !failed:
		return PlanCancelled, true
	default:
		return PlanFailed, true
	}
}
