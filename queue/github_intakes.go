package queue

// Issue intakes (github_intakes): which delivery turns an issue into a plan, under a
// per-issue lock, and the plan an issue has.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// IssuePlan returns the plan of a GitHub issue (owner/repo#N): the live one (ACTIVE or
// PAUSED) when there is one, else the most recent.
func (s *Store) IssuePlan(ctx context.Context, ref string) (PlanInfo, error) {
	pi, err := scanPlan(s.pool.QueryRow(ctx, `SELECT `+planColumns+` FROM plans p WHERE p.github_issue_ref = $1
		ORDER BY (p.status IN ('ACTIVE', 'PAUSED')) DESC, p.created_at DESC, p.id DESC LIMIT 1`, ref))
	if errors.Is(err, pgx.ErrNoRows) {
		return pi, fmt.Errorf("plan of issue %s: %w", ref, ErrNotFound)
	}
	if err != nil {
		return pi, fmt.Errorf("get plan of issue %s: %w", ref, err)
	}
	return pi, nil
}

// IntakeOutcome says what BeginIntake decided.
type IntakeOutcome string

// Intake outcomes.
const (
	// IntakeStarted: this delivery owns a new intake of the issue.
	IntakeStarted IntakeOutcome = "started"
	// IntakeResumed: this delivery already owned the unfinished intake (a retried job),
	// or took over one abandoned for longer than the stale limit.
	IntakeResumed IntakeOutcome = "resumed"
	// IntakeLive: the issue has a live plan (PlanID); nothing to start.
	IntakeLive IntakeOutcome = "live"
	// IntakeBusy: another delivery's intake of the issue is under way.
	IntakeBusy IntakeOutcome = "busy"
)

// IntakeClaim is BeginIntake's answer.
type IntakeClaim struct {
	Outcome IntakeOutcome
	Seq     int
	PlanID  string
}

// Intake states FinishIntake records.
const (
	IntakePlanned   = "planned"
	IntakeNeedsInfo = "needs_info"
)

// BeginIntake decides, under a per-issue advisory lock, whether this delivery starts an
// intake of the issue: not when a live plan exists or another delivery's intake is under
// way (unless it went stale). A new intake gets the next sequence number of the issue and
// the plan id planID(seq), skipping ids already taken, so that the id is deterministic
// and a reopened issue gets a new one.
func (s *Store) BeginIntake(ctx context.Context, ref, deliveryID string, staleAfter time.Duration, planID func(seq int) string) (IntakeClaim, error) {
	var c IntakeClaim
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended('whilly:intake:' || $1, 0))`, ref); err != nil {
			return fmt.Errorf("lock intake of %s: %w", ref, err)
		}
		var started struct {
			seq      int
			planID   string
			delivery string
			stale    bool
		}
		err := tx.QueryRow(ctx, `SELECT seq, plan_id, delivery_id, updated_at < now() - make_interval(secs => $2)
			FROM github_intakes WHERE issue_ref = $1 AND state = 'started'`, ref, staleAfter.Seconds()).
			Scan(&started.seq, &started.planID, &started.delivery, &started.stale)
		hasStarted := err == nil
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("read intake of %s: %w", ref, err)
		}
		var live string
		err = tx.QueryRow(ctx, `SELECT id FROM plans WHERE github_issue_ref = $1 AND status IN ('ACTIVE', 'PAUSED')`, ref).Scan(&live)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("read live plan of %s: %w", ref, err)
		}
		switch {
		case hasStarted && started.delivery == deliveryID:
			c = IntakeClaim{Outcome: IntakeResumed, Seq: started.seq, PlanID: started.planID}
			return nil
		case live != "":
			c = IntakeClaim{Outcome: IntakeLive, PlanID: live}
			return nil
		case hasStarted && !started.stale:
			c = IntakeClaim{Outcome: IntakeBusy, Seq: started.seq, PlanID: started.planID}
			return nil
		case hasStarted:
			if _, err := tx.Exec(ctx, `UPDATE github_intakes SET delivery_id = $3, updated_at = now()
				WHERE issue_ref = $1 AND seq = $2`, ref, started.seq, deliveryID); err != nil {
				return fmt.Errorf("take over intake of %s: %w", ref, err)
			}
			c = IntakeClaim{Outcome: IntakeResumed, Seq: started.seq, PlanID: started.planID}
			return nil
		}
		var seq int
		if err := tx.QueryRow(ctx, `SELECT coalesce(max(seq), 0) + 1 FROM github_intakes WHERE issue_ref = $1`, ref).Scan(&seq); err != nil {
			return fmt.Errorf("number intake of %s: %w", ref, err)
		}
		for tries := 0; ; tries++ {
			if tries == 1000 {
				return fmt.Errorf("find a free plan id for %s: %w", ref, ErrConflict)
			}
			id := planID(seq)
			var taken bool
			if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM plans WHERE id = $1)
				OR EXISTS (SELECT 1 FROM github_intakes WHERE plan_id = $1)`, id).Scan(&taken); err != nil {
				return fmt.Errorf("check plan id %s: %w", id, err)
			}
			if !taken {
				c = IntakeClaim{Outcome: IntakeStarted, Seq: seq, PlanID: id}
				break
			}
			seq++
		}
		if _, err := tx.Exec(ctx, `INSERT INTO github_intakes (issue_ref, seq, plan_id, delivery_id) VALUES ($1, $2, $3, $4)`,
			ref, c.Seq, c.PlanID, deliveryID); err != nil {
			return fmt.Errorf("record intake of %s: %w", ref, err)
		}
		return nil
	})
	if err != nil {
		return IntakeClaim{}, err
	}
	return c, nil
}

// FinishIntake records how an intake ended (IntakePlanned or IntakeNeedsInfo), where its
// plan came from and notes for the status comment.
func (s *Store) FinishIntake(ctx context.Context, ref string, seq int, state, source string, notes []string) error {
	if state != IntakePlanned && state != IntakeNeedsInfo {
		return fmt.Errorf("intake state %q: %w", state, ErrInvalid)
	}
	return s.inTx(ctx, func(tx pgx.Tx) error {
		var planID string
		err := tx.QueryRow(ctx, `UPDATE github_intakes SET state = $3, source = NULLIF($4, ''), notes = $5, updated_at = now()
			WHERE issue_ref = $1 AND seq = $2 RETURNING plan_id`, ref, seq, state, source, nonNil(notes)).Scan(&planID)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("finish intake of %s: %w", ref, err)
		}
		if state != IntakePlanned {
			return nil
		}
		// The plan committed before this: a mirror job may already have rendered the
		// status comment without the source and notes recorded here. Mark the plan changed
		// so the comment is rendered again with them.
		return s.changed(ctx, tx, planID)
	})
}

// AbandonIntake forgets an intake that turned out to have nothing to do (a stale
// delivery), so its sequence number is used by the next one.
func (s *Store) AbandonIntake(ctx context.Context, ref string, seq int) error {
	if _, err := s.pool.Exec(ctx, `DELETE FROM github_intakes WHERE issue_ref = $1 AND seq = $2 AND state = 'started'`, ref, seq); err != nil {
		return fmt.Errorf("abandon intake of %s: %w", ref, err)
	}
	return nil
}
