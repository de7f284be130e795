package queue

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// PushToken is the push token minted for one lease (SPEC §16), sealed by the GitHub App
// package; it is revoked on GitHub once the lease has ended.
type PushToken struct {
	LeaseID        string
	PlanID         string
	TaskID         string
	InstallationID int64
	Sealed         []byte
	ExpiresAt      time.Time
}

// leaseEnded holds for the push_tokens row pt whose lease no task holds any more. The
// task is a scalar subquery, one probe of tasks_pkey per token: written as NOT EXISTS,
// it let the planner anti-join every token with every running task — in bench scale,
// markChangedSQL's generic plan read all 486 tokens of all plans to decide one plan's
// revocation (8 ms, in the transaction of a claim or a completion).
const leaseEnded = `(SELECT t.lease_id = pt.lease_id AND t.status IN ('CLAIMED', 'IN_PROGRESS')
	FROM tasks t WHERE t.plan_id = pt.plan_id AND t.id = pt.task_id) IS NOT TRUE`

// RecordPushToken remembers the push token handed to a lease, until it is revoked. A
// claim delivered again (its answer was lost) gets a new token: the one it replaces is
// returned (sealed; nil when there was none), for the caller to revoke.
func (s *Store) RecordPushToken(ctx context.Context, t PushToken) ([]byte, error) {
	var old []byte
	err := s.pool.QueryRow(ctx, `WITH old AS (SELECT sealed FROM push_tokens WHERE lease_id = $1)
		INSERT INTO push_tokens (lease_id, plan_id, task_id, installation_id, sealed, expires_at)
		VALUES ($1, $2, $3, $4, $5, $6)
		ON CONFLICT (lease_id) DO UPDATE SET installation_id = EXCLUDED.installation_id, sealed = EXCLUDED.sealed,
			expires_at = EXCLUDED.expires_at
		RETURNING (SELECT sealed FROM old)`, t.LeaseID, t.PlanID, t.TaskID, t.InstallationID, t.Sealed, t.ExpiresAt).Scan(&old)
	if err != nil {
		return nil, fmt.Errorf("record the push token of lease %s: %w", t.LeaseID, err)
	}
	return old, nil
}

// EndedPushTokens returns up to limit push tokens whose lease has ended, of plan planID
// ("" any plan).
func (s *Store) EndedPushTokens(ctx context.Context, planID string, limit int) ([]PushToken, error) {
	rows, err := s.pool.Query(ctx, `SELECT lease_id::text, plan_id, task_id, installation_id, sealed, expires_at
		FROM push_tokens pt WHERE ($1 = '' OR pt.plan_id = $1) AND `+leaseEnded+` ORDER BY created_at LIMIT $2`, planID, limit)
	if err != nil {
		return nil, fmt.Errorf("list ended push tokens: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (PushToken, error) {
		var t PushToken
		err := r.Scan(&t.LeaseID, &t.PlanID, &t.TaskID, &t.InstallationID, &t.Sealed, &t.ExpiresAt)
		return t, err
	})
	if err != nil {
		return nil, fmt.Errorf("list ended push tokens: %w", err)
	}
	return out, nil
}

// MarkRevocation records whether a revocation job of planID is known to wait
// (github_mirror.revoke_at, which markChangedSQL sets when it asks for one). The job
// clears it (waiting false) when it starts, in a statement of its own, before it lists
// the plan's ended tokens: a change that ends a lease takes the mirror row's lock in the
// transaction that ends it (markChangedSQL), so it either committed before the clear,
// which waited for it, and the job's list sees its lease ended, or it reads revoke_at
// after the clear and enqueues a new job. A job that fails sets it again (waiting true):
// its retry will clear and list anew, so changes meanwhile need not enqueue another.
// Nothing happens for a plan without a mirror row.
func (s *Store) MarkRevocation(ctx context.Context, planID string, waiting bool) error {
	if _, err := s.pool.Exec(ctx, `UPDATE github_mirror SET revoke_at = CASE WHEN $2 THEN coalesce(revoke_at, now()) END
		WHERE plan_id = $1`, planID, waiting); err != nil {
		return fmt.Errorf("mark the push token revocation of plan %s: %w", planID, err)
	}
	return nil
}

// DeletePushTokens forgets the push tokens of leases once they are revoked, in one
// statement.
func (s *Store) DeletePushTokens(ctx context.Context, leaseIDs []string) error {
	if len(leaseIDs) == 0 {
		return nil
	}
	if _, err := s.pool.Exec(ctx, `DELETE FROM push_tokens WHERE lease_id = ANY($1::uuid[])`, leaseIDs); err != nil {
		return fmt.Errorf("forget the push tokens of %d leases: %w", len(leaseIDs), err)
	}
	return nil
}
