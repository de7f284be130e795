package queue

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// PushToken is the push token minted for one lease, sealed by the GitHub App
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
	return s.endedPushTokens(ctx, `SELECT lease_id::text, plan_id, task_id, installation_id, sealed, expires_at
		FROM push_tokens pt WHERE ($1 = '' OR pt.plan_id = $1) AND `+leaseEnded+` ORDER BY created_at LIMIT $2`, planID, limit)
}

// EndedPushTokensOf returns up to limit push tokens whose lease has ended, of the plans
// of the GitHub App installation installationID (0 the plans without one), whatever
// installation minted the token.
func (s *Store) EndedPushTokensOf(ctx context.Context, installationID int64, limit int) ([]PushToken, error) {
	return s.endedPushTokens(ctx, `SELECT pt.lease_id::text, pt.plan_id, pt.task_id, pt.installation_id, pt.sealed, pt.expires_at
		FROM push_tokens pt JOIN plans p ON p.id = pt.plan_id
		WHERE coalesce(p.installation_id, 0) = $1 AND `+leaseEnded+` ORDER BY pt.created_at LIMIT $2`, installationID, limit)
}

func (s *Store) endedPushTokens(ctx context.Context, sql string, args ...any) ([]PushToken, error) {
	rows, err := s.pool.Query(ctx, sql, args...)
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

// Push tokens are revoked by one job per installation (app.PushTokens), not per plan or
// per lease. Two marks keep the number of jobs small without losing an ended lease:
//
//   - github_mirror.revoke_at, per plan: a job is known to wait for the plan. A change
//     of the plan takes the mirror row's lock and, when a lease of the plan has ended
//     and the mark is not set, sets it and is told RevokeDue (markChangedSQL): most
//     changes of a busy plan ask for nothing.
//   - push_token_revocations, per installation: the installation's job has not started.
//     A change told RevokeDue asks for the job (WantRevocation): it inserts one only when
//     no row is there, and otherwise holds the row until it commits.
//
// The job, when it starts (StartRevocation), deletes its installation's row, which waits
// for every change holding it, and then clears the marks of its installation's plans,
// which waits for every change holding their mirror rows; only then does it list the
// ended tokens. So a change that found a mark or the row either committed before the job
// lists, or comes after the clear and asks for the next job.

// revocationLost is how long a push_token_revocations row is trusted: its job may have
// been lost (discarded, deleted) when it has not started by then, and a change asks for
// another.
const revocationLost = mirrorJobLost

// WantRevocation says, in the transaction tx of a change of a plan of installation
// installationID that was told RevokeDue, that the installation's revocation job must
// run after it: true when the caller must insert the job (none waits, or the one that
// waits may be lost), false when one waits — then the row it holds until it commits
// makes that job's start wait for it.
func WantRevocation(ctx context.Context, tx pgx.Tx, installationID int64) (bool, error) {
	var insert bool
	err := tx.QueryRow(ctx, `WITH held AS (
		SELECT 1 FROM push_token_revocations WHERE installation_id = $1 AND since > now() - interval '`+revocationLost+`' FOR KEY SHARE
	), ins AS (
		INSERT INTO push_token_revocations AS r (installation_id) SELECT $1 WHERE NOT EXISTS (SELECT 1 FROM held)
		ON CONFLICT (installation_id) DO UPDATE SET since = now() WHERE r.since <= now() - interval '`+revocationLost+`'
		RETURNING 1
	)
	SELECT EXISTS (SELECT 1 FROM ins)`, installationID).Scan(&insert)
	if err != nil {
		return false, fmt.Errorf("ask for the push token revocation of installation %d: %w", installationID, err)
	}
	return insert, nil
}

// StartRevocation is the start of installation installationID's revocation job: it
// deletes the installation's row, then clears the marks of the installation's plans,
// in id order (the order changes lock them in), each statement on its own so that
// neither holds a lock while it waits for the other's. It returns the plans it cleared,
// for RetryRevocation.
func (s *Store) StartRevocation(ctx context.Context, installationID int64) ([]string, error) {
	if _, err := s.pool.Exec(ctx, `DELETE FROM push_token_revocations WHERE installation_id = $1`, installationID); err != nil {
		return nil, fmt.Errorf("start the push token revocation of installation %d: %w", installationID, err)
	}
	rows, err := s.pool.Query(ctx, `UPDATE github_mirror gm SET revoke_at = NULL WHERE gm.plan_id IN (
		SELECT m.plan_id FROM github_mirror m JOIN plans p ON p.id = m.plan_id
		WHERE m.revoke_at IS NOT NULL AND coalesce(p.installation_id, 0) = $1 ORDER BY m.plan_id FOR UPDATE OF m)
		RETURNING gm.plan_id`, installationID)
	if err == nil {
		var plans []string
		if plans, err = pgx.CollectRows(rows, pgx.RowTo[string]); err == nil {
			return plans, nil
		}
	}
	return nil, fmt.Errorf("start the push token revocation of installation %d: %w", installationID, err)
}

// RetryRevocation is a failed revocation job of installationID: the plans it cleared
// (planIDs) are marked as waiting for it again, in id order, then its installation, so
// that changes meanwhile ask for no other job — its retry will clear and list anew. Two
// statements, so that neither holds a lock while it waits for one a change holds.
func (s *Store) RetryRevocation(ctx context.Context, installationID int64, planIDs []string) error {
	if _, err := s.pool.Exec(ctx, `UPDATE github_mirror gm SET revoke_at = coalesce(gm.revoke_at, now()) WHERE gm.plan_id IN (
		SELECT plan_id FROM github_mirror WHERE plan_id = ANY ($1::text[]) ORDER BY plan_id FOR UPDATE)`, nonNil(planIDs)); err != nil {
		return fmt.Errorf("mark the push token revocation of installation %d for its retry: %w", installationID, err)
	}
	if _, err := s.pool.Exec(ctx, `INSERT INTO push_token_revocations (installation_id) VALUES ($1)
		ON CONFLICT (installation_id) DO UPDATE SET since = now()`, installationID); err != nil {
		return fmt.Errorf("mark the push token revocation of installation %d for its retry: %w", installationID, err)
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
