package queue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/whilly-go/whilly/plan"
)

// More sentinel errors of the worker protocol.
var (
	// ErrLeaseLost: the caller does not hold the task's current lease (expired, reclaimed,
	// cancelled, or another worker's). Nothing was changed. HTTP 409.
	ErrLeaseLost = errors.New("lease lost")
	// ErrUnauthorized: the token is unknown, revoked or expired. HTTP 401.
	ErrUnauthorized = errors.New("unauthorized")
	// ErrInvalid: the request is malformed (negative cost, empty reason…). HTTP 400.
	ErrInvalid = errors.New("invalid request")
)

// Lease identifies a claimed task and the worker that presents the lease.
type Lease struct {
	PlanID   string
	TaskID   string
	LeaseID  string
	WorkerID string
}

// ClaimRequest asks for the next claimable task, of one plan when PlanID is set.
type ClaimRequest struct {
	WorkerID string
	PlanID   string
	Labels   []string // the worker's labels; a task's labels must be among them
	Scopes   Scopes   // the worker's scopes; a task's plan must be allowed by them
	// Key, a UUID chosen by the worker, becomes the lease's id: a claim retried after its
	// answer was lost finds the task it got (HeldClaim) instead of taking another.
	Key string
	// Start, in the claim that follows a completion (CompleteAndClaim), asks for the task
	// to be started by the claim itself, with its START event after its CLAIM, when the
	// batched path takes it (it needs Key): the claim comes back IN_PROGRESS, and the
	// worker makes no START request. Otherwise it comes back CLAIMED, as any claim.
	Start bool
}

// LeaseInfo is the lease a claim grants.
type LeaseInfo struct {
	ID        string    `json:"id"`
	ExpiresAt time.Time `json:"expires_at"`
}

// Claim is a claimed task with its lease and plan.
type Claim struct {
	Task  TaskInfo  `json:"task"`
	Lease LeaseInfo `json:"lease"`
	Plan  PlanInfo  `json:"plan"`
}

// CompleteInput is what a worker reports on success.
type CompleteInput struct {
	Cost   plan.USD
	Result string
	// HeadSHA is the plan branch's head the task pushed; NoChanges says it changed nothing.
	// Both go into the COMPLETE event's payload (head_sha, no_changes).
	HeadSHA   string
	NoChanges bool
	// ResultRepaired says Result is the agent's text made storable (result_repaired in the
	// COMPLETE event's payload).
	ResultRepaired bool
	// CostEstimated says Cost is whilly's price of the agent's tokens (cost_estimated in
	// the event's payload).
	CostEstimated bool
	// Log, when set, is the last chunk of the attempt's log, stored with the completion.
	Log *LogTail
}

// FailInput is what a worker reports on failure. Retryable nil means true.
type FailInput struct {
	Cost      plan.USD
	Reason    string
	Retryable *bool
	Detail    json.RawMessage
	// Output is the attempt's error text and output tail, given to the next attempt.
	Output string
	// CostEstimated is as in CompleteInput.
	CostEstimated bool
	// Log is as in CompleteInput.
	Log *LogTail
}

// CancelNotice tells a worker to stop working on a task it holds.
type CancelNotice struct {
	PlanID string `json:"plan_id"`
	TaskID string `json:"task_id"`
	Reason string `json:"reason"` // cancelled, lease_lost
}

// HeartbeatResult extends the worker's leases and lists tasks it must abandon.
type HeartbeatResult struct {
	LeaseExpiresAt time.Time      `json:"lease_expires_at"`
	Cancel         []CancelNotice `json:"cancel"`
}

// Worker is a registered worker.
type Worker struct {
	ID            string     `json:"id"`
	Hostname      string     `json:"hostname"`
	Labels        []string   `json:"labels"`
	Status        string     `json:"status"`
	LastHeartbeat *time.Time `json:"last_heartbeat,omitempty"`
	RegisteredAt  time.Time  `json:"registered_at"`
	RevokedAt     *time.Time `json:"revoked_at,omitempty"`
	Scopes        Scopes     `json:"scopes"` // empty: every plan
	// OwnerEmail is the operator who registered the worker: its bootstrap token's owner,
	// or what the registration said. Carried in the worker's CLAIM events.
	OwnerEmail string `json:"owner_email,omitempty"`
}

// APIToken is an admin, read or registrar token (the secret itself is never stored).
type APIToken struct {
	Prefix    string     `json:"prefix"`
	Owner     string     `json:"owner"`
	Admin     bool       `json:"admin"`
	Registrar bool       `json:"registrar"` // a bootstrap token: registers workers, nothing else
	Scopes    Scopes     `json:"scopes"`    // empty: every plan
	CreatedAt time.Time  `json:"created_at"`
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
	RevokedAt *time.Time `json:"revoked_at,omitempty"`
}

// Transition event types of the task lifecycle (the plan.Transition names).
const (
	EventClaim    = "CLAIM"
	EventStart    = "START"
	EventComplete = "COMPLETE"
	EventFail     = "FAIL"
	EventRetry    = "RETRY"
	EventRelease  = "RELEASE"
	EventCancel   = "CANCEL"
	EventReset    = "RESET"
)

// ReapExpiredLeases returns tasks whose lease expired to PENDING (the attempt counts;
// after max_attempts they are FAILED), with a RELEASE event (reason lease_expired), and
// settles their plans. It works plan by plan, locking the plan row before its tasks like
// every other writer, and takes tasks with SKIP LOCKED, so several replicas may run it at
// once.
func (s *Store) ReapExpiredLeases(ctx context.Context) (int, error) {
	rows, err := s.pool.Query(ctx, `SELECT DISTINCT plan_id FROM tasks
		WHERE status IN ('CLAIMED', 'IN_PROGRESS') AND lease_expires_at < now()`)
	if err != nil {
		return 0, fmt.Errorf("find expired leases: %w", err)
	}
	plans, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return 0, fmt.Errorf("find expired leases: %w", err)
	}
	total := 0
	for _, planID := range plans {
		err := s.inTx(ctx, func(tx pgx.Tx) error {
			st, err := lockPlan(ctx, tx, planID)
			if err != nil {
				return err
			}
			var n int
			err = tx.QueryRow(ctx, `
				WITH x AS (
					SELECT id, claimed_by, attempts, max_attempts FROM tasks
					WHERE plan_id = $1 AND status IN ('CLAIMED', 'IN_PROGRESS') AND lease_expires_at < now()
					FOR UPDATE SKIP LOCKED
				), r AS (
					UPDATE tasks t SET
						status = CASE WHEN x.attempts >= x.max_attempts THEN 'FAILED' ELSE 'PENDING' END,
						last_error = 'lease expired', lease_id = NULL, lease_expires_at = NULL, claimed_by = NULL,
						version = t.version + 1, updated_at = now()
					FROM x WHERE t.plan_id = $1 AND t.id = x.id
					RETURNING t.id, t.ord, t.status, x.claimed_by, t.attempts
				), ev AS (
					INSERT INTO events (plan_id, task_id, type, payload)
					SELECT $1, id, 'RELEASE', jsonb_build_object('reason', 'lease_expired', 'worker_id', claimed_by,
						'attempt', attempts, 'to', status) FROM r ORDER BY ord
					RETURNING 1
				)
				SELECT count(*) FROM ev`, planID).Scan(&n)
			if err != nil {
				return fmt.Errorf("reap expired leases of plan %s: %w", planID, err)
			}
			total += n
			if n == 0 {
				return nil
			}
			if err := settlePlan(ctx, tx, planID, st); err != nil {
				return err
			}
			return s.changed(ctx, tx, planID)
		})
		if err != nil {
			return total, err
		}
	}
	return total, nil
}
