package queue

// repository_dispatch events sent to start Actions workers on a plan (github_dispatches).

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/whilly-go/whilly/plan"
)

// Dispatch reasons, as github_dispatches.reason records them.
const (
	// DispatchStart: the plan started (created by intake); once per plan.
	DispatchStart = "start"
	// DispatchIdle: the plan has ready tasks that nobody runs (the reconciler).
	DispatchIdle = "idle"
)

// Dispatch is one repository_dispatch whilly sends to start Actions workers on a plan.
type Dispatch struct {
	ID             int64
	PlanID         string
	Reason         string
	Repo           string // owner/name of the plan
	InstallationID int64
	PlanStatus     plan.PlanStatus
	SentAt         *time.Time
}

// RecordDispatchStart runs in the transaction that creates a plan: for a GitHub plan of a
// repository it records the plan's start dispatch and reports it (ok) the first time,
// never again for that plan. The caller inserts the dispatch job in the same
// transaction, so the dispatch exists exactly when the plan does.
func RecordDispatchStart(ctx context.Context, tx pgx.Tx, planID string) (id int64, ok bool, err error) {
	err = tx.QueryRow(ctx, `INSERT INTO github_dispatches (plan_id, reason)
		SELECT id, 'start' FROM plans WHERE id = $1 AND repo IS NOT NULL AND github_issue_ref IS NOT NULL
		ON CONFLICT (plan_id) WHERE reason = 'start' DO NOTHING
		RETURNING id`, planID).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("record the start dispatch of plan %s: %w", planID, err)
	}
	return id, true, nil
}

// GetDispatch returns a dispatch with its plan's repository, installation and status.
func (s *Store) GetDispatch(ctx context.Context, id int64) (Dispatch, error) {
	var d Dispatch
	err := s.pool.QueryRow(ctx, `SELECT d.id, d.plan_id, d.reason, coalesce(p.repo, ''), coalesce(p.installation_id, 0),
			p.status, d.sent_at
		FROM github_dispatches d JOIN plans p ON p.id = d.plan_id WHERE d.id = $1`, id).
		Scan(&d.ID, &d.PlanID, &d.Reason, &d.Repo, &d.InstallationID, &d.PlanStatus, &d.SentAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return d, fmt.Errorf("dispatch %d: %w", id, ErrNotFound)
	}
	if err != nil {
		return d, fmt.Errorf("get dispatch %d: %w", id, err)
	}
	return d, nil
}

// FinishDispatch records how a dispatch ended: sent (with an actions.dispatched event
// naming the event type), or not, with the outcome saying why.
func (s *Store) FinishDispatch(ctx context.Context, d Dispatch, sent bool, eventType, outcome string) error {
	return s.inTx(ctx, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `UPDATE github_dispatches SET outcome = $2,
			sent_at = CASE WHEN $3 THEN now() ELSE sent_at END WHERE id = $1 AND sent_at IS NULL`, d.ID, outcome, sent)
		if err != nil {
			return fmt.Errorf("finish dispatch %d: %w", d.ID, err)
		}
		if tag.RowsAffected() == 0 || !sent {
			return nil
		}
		payload := map[string]any{"event_type": eventType, "reason": d.Reason, "repo": d.Repo, "dispatch_id": d.ID}
		return insertEvent(ctx, tx, d.PlanID, "", EventActionsDispatched, payload, nil)
	})
}

// IdleDispatches records an idle dispatch for each live GitHub plan of a repository
// that has a task ready to claim but none running, and has seen neither a claim nor a
// dispatch for the interval every: its work waits for a worker that is not there. For
// each one, enqueue runs in the same transaction (it inserts the dispatch job). At most
// limit plans are handled per call.
func (s *Store) IdleDispatches(ctx context.Context, every time.Duration, limit int, enqueue func(ctx context.Context, tx pgx.Tx, d Dispatch) error) ([]Dispatch, error) {
	var out []Dispatch
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		// One reconciler at a time, whatever the number of replicas.
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended('whilly:dispatch:idle', 0)), `+indexPaths); err != nil {
			return fmt.Errorf("lock idle dispatches: %w", err)
		}
		rows, err := tx.Query(ctx, `
			WITH idle AS (
				SELECT p.id, p.repo, coalesce(p.installation_id, 0) AS inst, p.status
				FROM plans p
				WHERE p.status = 'ACTIVE' AND p.repo IS NOT NULL AND p.github_issue_ref IS NOT NULL
				  AND (p.budget_usd IS NULL OR p.spent_usd < p.budget_usd)
				  AND NOT EXISTS (SELECT 1 FROM tasks r WHERE r.plan_id = p.id AND r.status IN ('CLAIMED', 'IN_PROGRESS'))
				  AND EXISTS (
					SELECT 1 FROM tasks t
					WHERE t.plan_id = p.id AND t.status = 'PENDING' AND NOT t.waiting
					  AND (t.not_before IS NULL OR t.not_before <= now())
					  AND (NOT p.strict OR t.gate_verdict <> 'REJECT')
					  AND `+depsFinished+`)
				  AND NOT EXISTS (SELECT 1 FROM github_dispatches d
					WHERE d.plan_id = p.id AND d.created_at > now() - make_interval(secs => $1))
				  AND NOT EXISTS (SELECT 1 FROM events e
					WHERE e.plan_id = p.id AND e.type = 'CLAIM' AND e.created_at > now() - make_interval(secs => $1))
				ORDER BY p.id
				LIMIT $2
			), ins AS (
				INSERT INTO github_dispatches (plan_id, reason) SELECT id, 'idle' FROM idle ORDER BY id
				RETURNING id, plan_id
			)
			SELECT ins.id, ins.plan_id, idle.repo, idle.inst, idle.status FROM ins JOIN idle ON idle.id = ins.plan_id
			ORDER BY ins.plan_id`, every.Seconds(), limit)
		if err != nil {
			return fmt.Errorf("find idle plans: %w", err)
		}
		out, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (Dispatch, error) {
			d := Dispatch{Reason: DispatchIdle}
			err := r.Scan(&d.ID, &d.PlanID, &d.Repo, &d.InstallationID, &d.PlanStatus)
			return d, err
		})
		if err != nil {
			return fmt.Errorf("find idle plans: %w", err)
		}
		for _, d := range out {
			if err := enqueue(ctx, tx, d); err != nil {
				return fmt.Errorf("enqueue dispatch of plan %s: %w", d.PlanID, err)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}
