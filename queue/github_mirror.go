package queue

// The mirror's coalescing state (github_mirror): what it last wrote to GitHub for a
// plan, and the lock that keeps two writers of one issue apart.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// MirrorState is what the mirror last wrote to GitHub for a plan, and how the plan came
// to be (the intake's source and notes).
type MirrorState struct {
	PlanID        string
	Version       int64
	SyncedVersion int64
	Label         string
	BodySHA256    []byte
	SyncedAt      *time.Time
	Source        string
	Notes         []string
	// Pull is the plan's pull request, nil until one is opened.
	Pull *PullRequest
	// Pushed: a COMPLETE of the plan reported a pushed head (head_sha), so its branch
	// holds work to deliver. Always true once Pull is set.
	Pushed bool
}

// GetMirrorState returns a plan's mirror state (ErrNotFound when the plan has none).
func (s *Store) GetMirrorState(ctx context.Context, planID string) (MirrorState, error) {
	var (
		m  MirrorState
		pr PullRequest
		ok bool
	)
	// The events are looked at only until the pull request exists.
	err := s.pool.QueryRow(ctx, `SELECT m.plan_id, m.version, m.synced_version, coalesce(m.label, ''), m.body_sha256,
			m.synced_at, coalesce(i.source, ''), coalesce(i.notes, '{}'),
			pr.plan_id IS NOT NULL OR EXISTS (SELECT 1 FROM events e WHERE e.plan_id = m.plan_id
				AND e.type = 'COMPLETE' AND e.payload ? 'head_sha'),
			pr.plan_id IS NOT NULL, coalesce(pr.repo, ''), coalesce(pr.number, 0), coalesce(pr.node_id, ''),
			coalesce(pr.url, ''), coalesce(pr.branch, ''), coalesce(pr.state, ''), coalesce(pr.draft, false), pr.body_sha256
		FROM github_mirror m LEFT JOIN github_intakes i ON i.plan_id = m.plan_id
		LEFT JOIN github_pulls pr ON pr.plan_id = m.plan_id
		WHERE m.plan_id = $1`, planID).
		Scan(&m.PlanID, &m.Version, &m.SyncedVersion, &m.Label, &m.BodySHA256, &m.SyncedAt, &m.Source, &m.Notes,
			&m.Pushed, &ok, &pr.Repo, &pr.Number, &pr.NodeID, &pr.URL, &pr.Branch, &pr.State, &pr.Draft, &pr.BodySHA256)
	if errors.Is(err, pgx.ErrNoRows) {
		return m, fmt.Errorf("mirror of plan %s: %w", planID, ErrNotFound)
	}
	if err != nil {
		return m, fmt.Errorf("get mirror of plan %s: %w", planID, err)
	}
	if ok {
		pr.PlanID = planID
		m.Pull = &pr
	}
	return m, nil
}

// MirrorSync is what a mirror run wrote to GitHub.
type MirrorSync struct {
	Version    int64 // the version the run rendered
	Label      string
	BodySHA256 []byte
}

// FinishMirror records a mirror run under the mirror row's lock and, in the same
// transaction, calls done with whether the plan changed again meanwhile (dirty). The
// caller completes its job in done when not dirty, so that no change is ever left
// unmirrored: a change either commits before this (and the run sees dirty) or after
// (and enqueues a new job, the finished one no longer blocking it: a run that finds
// nothing left clears job_at, so the next change's job is due).
func (s *Store) FinishMirror(ctx context.Context, planID string, m MirrorSync, done func(ctx context.Context, tx pgx.Tx, dirty bool) error) (bool, error) {
	var dirty bool
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		err := tx.QueryRow(ctx, `UPDATE github_mirror SET synced_version = greatest(synced_version, $2),
				label = NULLIF($3, ''), body_sha256 = $4, synced_at = now(), job_at = CASE WHEN version > $2 THEN job_at END
			WHERE plan_id = $1 RETURNING version > $2`, planID, m.Version, m.Label, m.BodySHA256).Scan(&dirty)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("mirror of plan %s: %w", planID, ErrNotFound)
		}
		if err != nil {
			return fmt.Errorf("record mirror of plan %s: %w", planID, err)
		}
		if done != nil {
			return done(ctx, tx, dirty)
		}
		return nil
	})
	return dirty, err
}

// SetStatusComment records the id of a plan's status comment. It is bookkeeping, not a
// change of the plan: no event, no hook.
func (s *Store) SetStatusComment(ctx context.Context, planID string, commentID int64) error {
	tag, err := s.pool.Exec(ctx, `UPDATE plans SET status_comment_id = NULLIF($2, 0) WHERE id = $1`, planID, commentID)
	if err != nil {
		return fmt.Errorf("record status comment of plan %s: %w", planID, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("plan %s: %w", planID, ErrNotFound)
	}
	return nil
}

// MirroredPlans returns the GitHub plans the reconciler checks: every live one, and any
// whose mirror is behind.
func (s *Store) MirroredPlans(ctx context.Context) ([]string, error) {
	rows, err := s.pool.Query(ctx, `SELECT p.id FROM plans p JOIN github_mirror m ON m.plan_id = p.id
		WHERE p.status IN ('ACTIVE', 'PAUSED') OR m.version > m.synced_version ORDER BY p.id`)
	if err != nil {
		return nil, fmt.Errorf("list mirrored plans: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("list mirrored plans: %w", err)
	}
	return ids, nil
}

// MirrorLockTTL is how long a mirror lock holds at most (WithMirrorLock): the mirror
// job's own time limit. A holder that died leaves its plan's issue unwritten that long.
const MirrorLockTTL = 2 * time.Minute

// WithMirrorLock runs fn holding the lock of the plan's mirror, so that a mirror job and
// `whilly forge intake` never write one issue at the same time. It returns false,
// without running fn, when someone else holds the lock. The lock is a row
// (github_mirror_locks), not a connection: fn's GitHub calls hold none. It expires
// MirrorLockTTL after it was taken, so that a holder that died does not keep it, and fn's
// context ends before that, so that a live holder does not write past its lock.
func (s *Store) WithMirrorLock(ctx context.Context, planID string, fn func(context.Context) error) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, MirrorLockTTL)
	defer cancel()
	var holder string
	err := s.pool.QueryRow(ctx, `
		INSERT INTO github_mirror_locks AS l (plan_id, holder, expires_at)
		VALUES ($1, gen_random_uuid(), now() + make_interval(secs => $2))
		ON CONFLICT (plan_id) DO UPDATE SET holder = EXCLUDED.holder, expires_at = EXCLUDED.expires_at
		WHERE l.expires_at <= now()
		RETURNING holder::text`, planID, MirrorLockTTL.Seconds()).Scan(&holder)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("lock mirror of plan %s: %w", planID, err)
	}
	defer func() {
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if _, err := s.pool.Exec(uctx, `DELETE FROM github_mirror_locks WHERE plan_id = $1 AND holder = $2`, planID, holder); err != nil {
			s.log.WarnContext(ctx, "mirror lock not released; it expires by itself", "plan_id", planID, "error", err)
		}
	}()
	return true, fn(ctx)
}
