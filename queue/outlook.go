package queue

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/whilly-go/whilly/plan"
)

// OutlookOf says what a worker carrying labels and confined to scopes may still claim
// from one plan, or from every ACTIVE plan of its scopes when planID is ""
// (plan.LookAhead), and which PENDING tasks are held
// for good and why. Held tasks carry their plan's id in PlanID order. It reads every open
// task of those plans, so it is for idle moments: a worker that found nothing to claim,
// the end of a run.
func (s *Store) OutlookOf(ctx context.Context, planID string, labels []string, scopes Scopes) (Outlook, error) {
	var out Outlook
	rows, err := s.pool.Query(ctx, `SELECT `+planColumnsNoCounts+` FROM plans p
		WHERE ($1 <> '' AND p.id = $1) OR ($1 = '' AND p.status = 'ACTIVE') ORDER BY p.id`, planID)
	if err != nil {
		return out, fmt.Errorf("read plans for the outlook: %w", err)
	}
	type planRow struct {
		id     string
		state  plan.PlanState
		strict bool
	}
	infos, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (PlanInfo, error) { return scanPlan(r) })
	if err != nil {
		return out, fmt.Errorf("read plans for the outlook: %w", err)
	}
	var plans []planRow
	for _, pi := range infos {
		// A worker confined to some plans looks at those only; another plan is unknown.
		if scopes.Allow(pi) {
			plans = append(plans, planRow{id: pi.ID, strict: pi.Strict, state: plan.PlanState{Status: pi.Status,
				PauseReason: pi.PauseReason, BudgetExhausted: plan.Exhausted(pi.Budget, pi.Spent)}})
		}
	}
	if planID != "" && len(plans) == 0 {
		return out, fmt.Errorf("plan %s: %w", planID, ErrNotFound)
	}
	for _, p := range plans {
		rows, err := s.pool.Query(ctx, `SELECT id, status, dependencies, labels, gate_verdict = 'REJECT',
				status = 'PENDING' AND coalesce(not_before > now(), false)
			FROM tasks WHERE plan_id = $1 AND status NOT IN ('DONE', 'SKIPPED') ORDER BY ord`, p.id)
		if err != nil {
			return out, fmt.Errorf("read open tasks of plan %s: %w", p.id, err)
		}
		tasks, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (plan.OpenTask, error) {
			var t plan.OpenTask
			err := r.Scan(&t.ID, &t.Status, &t.Dependencies, &t.Labels, &t.GateRejected, &t.BackingOff)
			t.GateRejected = t.GateRejected && p.strict
			return t, err
		})
		if err != nil {
			return out, fmt.Errorf("read open tasks of plan %s: %w", p.id, err)
		}
		o := plan.LookAhead(p.state, tasks, labels)
		out.Claimable += o.Claimable
		out.Waiting += o.Waiting
		out.Retrying += o.Retrying
		out.Running += o.Running
		for _, h := range o.Held {
			out.Held = append(out.Held, HeldTask{PlanID: p.id, HeldTask: h})
		}
	}
	return out, nil
}

// Outlook is plan.Outlook over several plans: each held task names its plan.
type Outlook struct {
	Claimable int        `json:"claimable"`
	Waiting   int        `json:"waiting"`
	Retrying  int        `json:"retrying"`
	Running   int        `json:"running"`
	Held      []HeldTask `json:"held"`
}

// Drained reports whether nothing is left that the worker may claim, now or later.
func (o Outlook) Drained() bool { return o.Claimable+o.Waiting+o.Retrying+o.Running == 0 }

// HeldTask is a held task of some plan.
type HeldTask struct {
	PlanID string `json:"plan_id"`
	plan.HeldTask
}

// mayClaimLaterSQL holds when a task of plan $1 (any plan when empty) that a worker with
// labels $2 and scopes $3 may take could still be handed to it: PENDING and neither held
// by the budget nor rejected by the gate of a strict plan, or running (it comes back if
// it fails), in an ACTIVE plan. A PENDING task downstream of a failure still counts: the
// outlook (OutlookOf) tells those apart, at a cost a long-poll's every wake-up must not pay.
// Plan $1 without any task yet counts too: its tasks are on their way (workers started
// before the import wait for them, as for a plan that does not exist yet).
var mayClaimLaterSQL = `SELECT ($1 <> '' AND NOT EXISTS (SELECT 1 FROM tasks WHERE plan_id = $1))
	OR EXISTS (SELECT 1 FROM tasks t JOIN plans p ON p.id = t.plan_id
	WHERE ($1 = '' OR t.plan_id = $1) AND p.status = 'ACTIVE' AND ` + scopeMatchSQL("$3") + `
	  AND t.status IN ('PENDING', 'CLAIMED', 'IN_PROGRESS')
	  AND (t.labels = '{}' OR t.labels <@ $2::text[])
	  AND (t.status <> 'PENDING' OR ((p.budget_usd IS NULL OR p.spent_usd < p.budget_usd)
	       AND (NOT p.strict OR t.gate_verdict <> 'REJECT'))))`

// MayClaimLater reports whether anything req's worker may claim, from req's plan or from
// every plan, is left: a claim that found nothing need not wait for more when nothing is.
func (s *Store) MayClaimLater(ctx context.Context, req ClaimRequest) (bool, error) {
	var open bool
	if err := s.pool.QueryRow(ctx, mayClaimLaterSQL, req.PlanID, nonNil(req.Labels), req.Scopes.Strings()).Scan(&open); err != nil {
		return false, fmt.Errorf("look for work worker %s may still claim: %w", req.WorkerID, err)
	}
	return open, nil
}
