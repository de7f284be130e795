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

// PlanInfo is a plan's row plus task counts by status.
type PlanInfo struct {
	ID             string              `json:"id"`
	Name           string              `json:"name"`
	Status         plan.PlanStatus     `json:"status"`
	PauseReason    string              `json:"pause_reason,omitempty"`
	Budget         *plan.USD           `json:"budget_usd"`
	Spent          plan.USD            `json:"spent_usd"`
	Strict         bool                `json:"strict"`
	Repo           string              `json:"repo,omitempty"`
	GitHubIssueRef string              `json:"github_issue_ref,omitempty"`
	InstallationID int64               `json:"installation_id,omitempty"`
	CommentID      int64               `json:"status_comment_id,omitempty"`
	Verify         []plan.Verify       `json:"verify,omitempty"`
	Counts         map[plan.Status]int `json:"counts"`
	Total          int                 `json:"total"`
	CreatedAt      time.Time           `json:"created_at"`
	UpdatedAt      time.Time           `json:"updated_at"`
}

// CreatePlan creates an empty ACTIVE plan, to receive tasks. An existing id is ErrConflict.
func (s *Store) CreatePlan(ctx context.Context, id, name string, budget *plan.USD) (PlanInfo, error) {
	return s.CreatePlanWith(ctx, id, name, budget, ImportOptions{})
}

// CreatePlanWith is CreatePlan with import options: opts.GitHubIssueRef and
// opts.InstallationID tie the new plan to an issue (whilly bench's scratch plans).
func (s *Store) CreatePlanWith(ctx context.Context, id, name string, budget *plan.USD, opts ImportOptions) (PlanInfo, error) {
	p := &plan.Plan{ID: id, Name: name, Budget: budget}
	if err := plan.Validate(p); err != nil {
		return PlanInfo{}, err
	}
	res, err := s.importPlan(ctx, p, opts, false)
	if err != nil {
		return PlanInfo{}, err
	}
	if !res.PlanCreated {
		return PlanInfo{}, fmt.Errorf("create plan %s: it already exists: %w", id, ErrConflict)
	}
	return s.GetPlan(ctx, id)
}

const planBaseColumns = `p.id, p.name, p.status, coalesce(p.pause_reason, ''),
	(p.budget_usd * 1000000)::bigint, (p.spent_usd * 1000000)::bigint, p.strict, coalesce(p.repo, ''),
	coalesce(p.github_issue_ref, ''), coalesce(p.installation_id, 0), coalesce(p.status_comment_id, 0),
	p.verify, p.created_at, p.updated_at`

// planColumns reads a plan with its task counts by status; planColumnsNoCounts skips the
// counts for hot paths such as a claim.
const (
	planColumns = planBaseColumns + `,
	coalesce((SELECT jsonb_object_agg(status, n) FROM (
		SELECT status, count(*) AS n FROM tasks t WHERE t.plan_id = p.id GROUP BY status) c), '{}')`
	planColumnsNoCounts = planBaseColumns + `, '{}'::jsonb`
)

func scanPlan(row pgx.Row) (PlanInfo, error) {
	var ps planScan
	if err := row.Scan(ps.dest()...); err != nil {
		return PlanInfo{}, err
	}
	return ps.info(), nil
}

// planScan receives the plan columns of a row that may hold more (dest), then builds the
// plan (info).
type planScan struct {
	pi     PlanInfo
	budget *int64
	spent  int64
	verify []verifyRow
	counts map[plan.Status]int
}

func (ps *planScan) dest() []any {
	pi := &ps.pi
	return []any{&pi.ID, &pi.Name, &pi.Status, &pi.PauseReason, &ps.budget, &ps.spent, &pi.Strict, &pi.Repo,
		&pi.GitHubIssueRef, &pi.InstallationID, &pi.CommentID, &ps.verify, &pi.CreatedAt, &pi.UpdatedAt, &ps.counts}
}

func (ps *planScan) info() PlanInfo {
	pi := ps.pi
	if ps.budget != nil {
		b := plan.USD(*ps.budget)
		pi.Budget = &b
	}
	pi.Spent = plan.USD(ps.spent)
	for _, v := range ps.verify {
		pi.Verify = append(pi.Verify, plan.Verify(v))
	}
	pi.Counts = ps.counts
	for _, n := range ps.counts {
		pi.Total += n
	}
	return pi
}

// GetPlan returns one plan with its task counts.
func (s *Store) GetPlan(ctx context.Context, id string) (PlanInfo, error) {
	pi, err := scanPlan(s.pool.QueryRow(ctx, `SELECT `+planColumns+` FROM plans p WHERE p.id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return pi, fmt.Errorf("plan %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return pi, fmt.Errorf("get plan %s: %w", id, err)
	}
	return pi, nil
}

// Charge adds the cost of work done for a plan outside any task attempt — the planner,
// the failure analyzer — to its spend, with a plan.charged event naming the source, and
// pauses the plan if that crosses its budget, exactly like an attempt's cost.
func (s *Store) Charge(ctx context.Context, planID string, cost plan.USD, source string, detail any) error {
	if cost < 0 {
		return fmt.Errorf("cost must not be negative: %w", ErrInvalid)
	}
	return s.inTx(ctx, func(tx pgx.Tx) error {
		if _, err := lockPlan(ctx, tx, planID); err != nil {
			return err
		}
		payload := map[string]any{"source": source, "cost_usd": cost.String()}
		if err := insertEvent(ctx, tx, planID, "", EventPlanCharged, payload, detail); err != nil {
			return err
		}
		return s.chargeAndSettle(ctx, tx, planID, "", cost)
	})
}

// PlanStatus returns a plan's status alone (cheap: no task counts).
func (s *Store) PlanStatus(ctx context.Context, id string) (plan.PlanStatus, error) {
	var st plan.PlanStatus
	err := s.pool.QueryRow(ctx, `SELECT status FROM plans WHERE id = $1`, id).Scan(&st)
	if errors.Is(err, pgx.ErrNoRows) {
		return st, fmt.Errorf("plan %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return st, fmt.Errorf("get status of plan %s: %w", id, err)
	}
	return st, nil
}

// PlanPage selects a page of plans ordered by id: those after the cursor After.
type PlanPage struct {
	After  string
	Limit  int // default 50, at most 500
	Status plan.PlanStatus
	Scopes Scopes // only the plans these allow
}

// ListPlans returns a page of plans and the cursor of the next page ("" at the end).
func (s *Store) ListPlans(ctx context.Context, pg PlanPage) ([]PlanInfo, string, error) {
	if pg.Limit <= 0 {
		pg.Limit = 50
	}
	pg.Limit = min(pg.Limit, 500)
	rows, err := s.pool.Query(ctx, `SELECT `+planColumns+` FROM plans p
		WHERE p.id > $1 AND ($2 = '' OR p.status = $2) AND `+scopeMatchSQL("$4")+` ORDER BY p.id LIMIT $3`,
		pg.After, string(pg.Status), pg.Limit+1, pg.Scopes.Strings())
	if err != nil {
		return nil, "", fmt.Errorf("list plans: %w", err)
	}
	plans, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (PlanInfo, error) { return scanPlan(r) })
	if err != nil {
		return nil, "", fmt.Errorf("list plans: %w", err)
	}
	next := ""
	if len(plans) > pg.Limit {
		plans = plans[:pg.Limit]
		next = plans[len(plans)-1].ID
	}
	return plans, next, nil
}

// AllPlans returns every plan of pg (its status and scopes; pg.After the first cursor),
// reading them pg.Limit at a time.
func (s *Store) AllPlans(ctx context.Context, pg PlanPage) ([]PlanInfo, error) {
	var all []PlanInfo
	for {
		plans, next, err := s.ListPlans(ctx, pg)
		if err != nil {
			return nil, err
		}
		all = append(all, plans...)
		if next == "" {
			return all, nil
		}
		pg.After = next
	}
}

// Export returns the plan as a plan file would hold it, tasks in file order.
func (s *Store) Export(ctx context.Context, planID string) (*plan.Plan, error) {
	pi, err := s.GetPlan(ctx, planID)
	if err != nil {
		return nil, err
	}
	tasks, err := s.Tasks(ctx, planID)
	if err != nil {
		return nil, err
	}
	p := &plan.Plan{ID: pi.ID, Name: pi.Name, Budget: pi.Budget, Strict: pi.Strict, Repo: pi.Repo, Verify: pi.Verify}
	var origin, targets *string
	if err := s.pool.QueryRow(ctx, `SELECT origin::text, repo_targets::text FROM plans WHERE id = $1`, planID).Scan(&origin, &targets); err != nil {
		return nil, fmt.Errorf("read origin of plan %s: %w", planID, err)
	}
	if origin != nil {
		p.Origin = json.RawMessage(*origin)
	}
	if targets != nil {
		p.RepoTargets = json.RawMessage(*targets)
	}
	for _, t := range tasks {
		p.Tasks = append(p.Tasks, t.Task())
	}
	return p, nil
}

// ResetResult says what a reset changed.
type ResetResult struct {
	PlanID  string `json:"plan_id"`
	Hard    bool   `json:"hard"`
	Reset   int    `json:"tasks_reset"`
	Deleted int    `json:"tasks_deleted"`
}

// ResetOptions chooses what ResetPlan does.
type ResetOptions struct {
	// Hard deletes the plan and its tasks instead.
	Hard bool
	// IncludeSkipped also returns SKIPPED tasks to PENDING. Without it a skip stays: the
	// decision gate's (which would only reject the task again) and the file's alike.
	IncludeSkipped bool
}

// ResetPlan brings a plan back to work. Soft: every DONE, FAILED or CANCELLED task (and
// SKIPPED with IncludeSkipped) returns to PENDING with a RESET event (attempts, errors
// and leases cleared) and the plan becomes ACTIVE; running tasks are left alone. Hard:
// the plan's rows are deleted; the audit log keeps its events and gains plan.deleted.
func (s *Store) ResetPlan(ctx context.Context, planID string, opts ResetOptions) (ResetResult, error) {
	hard := opts.Hard
	res := ResetResult{PlanID: planID, Hard: hard}
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		var status string
		if err := tx.QueryRow(ctx, `SELECT status FROM plans WHERE id = $1 FOR UPDATE`, planID).Scan(&status); err != nil {
			if errors.Is(err, pgx.ErrNoRows) {
				return fmt.Errorf("plan %s: %w", planID, ErrNotFound)
			}
			return fmt.Errorf("lock plan %s: %w", planID, err)
		}
		if hard {
			if err := tx.QueryRow(ctx, `SELECT count(*) FROM tasks WHERE plan_id = $1`, planID).Scan(&res.Deleted); err != nil {
				return fmt.Errorf("count tasks of plan %s: %w", planID, err)
			}
			if _, err := tx.Exec(ctx, `DELETE FROM plans WHERE id = $1`, planID); err != nil {
				return fmt.Errorf("delete plan %s: %w", planID, err)
			}
			return insertEvent(ctx, tx, planID, "", EventPlanDeleted, map[string]any{"tasks": res.Deleted, "status": status}, nil)
		}
		err := tx.QueryRow(ctx, `
			WITH r AS (
				UPDATE tasks SET status = 'PENDING', attempts = 0, not_before = NULL, lease_id = NULL,
				       lease_expires_at = NULL, claimed_by = NULL, last_error = NULL, last_output = NULL, result = NULL,
				       version = version + 1, updated_at = now()
				FROM (SELECT id AS tid, status AS old FROM tasks
				      WHERE plan_id = $1 AND (status IN ('DONE', 'FAILED', 'CANCELLED') OR ($2 AND status = 'SKIPPED'))
				      ORDER BY id FOR UPDATE) o
				WHERE plan_id = $1 AND id = o.tid AND tasks.status = o.old
				RETURNING id, ord, o.old
			), ev AS (
				INSERT INTO events (plan_id, task_id, type, payload)
				SELECT $1, id, 'RESET', jsonb_build_object('from', old, 'to', 'PENDING') FROM r ORDER BY ord
				RETURNING 1
			)
			SELECT count(*) FROM ev`, planID, opts.IncludeSkipped).Scan(&res.Reset)
		if err != nil {
			return fmt.Errorf("reset tasks of plan %s: %w", planID, err)
		}
		// A plan awaiting approval stays paused: only ApprovePlan starts it.
		if _, err := tx.Exec(ctx, `UPDATE plans SET status = 'ACTIVE', pause_reason = NULL, updated_at = now()
			WHERE id = $1 AND status <> 'ACTIVE' AND pause_reason IS DISTINCT FROM 'approval'`, planID); err != nil {
			return fmt.Errorf("reactivate plan %s: %w", planID, err)
		}
		if err := insertEvent(ctx, tx, planID, "", EventPlanReset, map[string]any{"tasks_reset": res.Reset, "from": status}, nil); err != nil {
			return err
		}
		return s.changed(ctx, tx, planID)
	})
	if err != nil {
		return ResetResult{}, err
	}
	return res, nil
}

// SetBudget sets a plan's budget cap (nil = unlimited) and writes plan.budget_raised, or
// plan.budget_lowered when the new cap is below the old one. A plan paused on budget that
// the new cap covers resumes (ACTIVE); an ACTIVE plan that has already spent the new cap
// is paused on budget, with plan.budget_exceeded, as when its spending crosses the cap.
// by names who set it (the event's "by"; empty: not recorded).
func (s *Store) SetBudget(ctx context.Context, planID string, budget *plan.USD, by string) (PlanInfo, error) {
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		var old *int64
		var status, reason string
		var spent int64
		err := tx.QueryRow(ctx, `SELECT (budget_usd * 1000000)::bigint, (spent_usd * 1000000)::bigint, status,
			coalesce(pause_reason, '') FROM plans WHERE id = $1 FOR UPDATE`, planID).Scan(&old, &spent, &status, &reason)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("plan %s: %w", planID, ErrNotFound)
		}
		if err != nil {
			return fmt.Errorf("lock plan %s: %w", planID, err)
		}
		exhausted := plan.Exhausted(budget, plan.USD(spent))
		resume := status == string(plan.PlanPaused) && reason == PauseBudget && !exhausted
		if _, err := tx.Exec(ctx, `UPDATE plans SET budget_usd = $2::numeric, updated_at = now(),
			status = CASE WHEN $3 THEN 'ACTIVE' ELSE status END,
			pause_reason = CASE WHEN $3 THEN NULL ELSE pause_reason END
			WHERE id = $1`, planID, usdParam(budget), resume); err != nil {
			return fmt.Errorf("set budget of plan %s: %w", planID, err)
		}
		oldUSD := budgetPtr(old)
		typ := EventPlanBudgetRaised
		if budget != nil && (oldUSD == nil || *budget < *oldUSD) {
			typ = EventPlanBudgetLowered
		}
		payload := withBy(map[string]any{"from": usdParam(oldUSD), "to": usdParam(budget), "spent_usd": plan.USD(spent).String(), "resumed": resume}, by)
		if err := insertEvent(ctx, tx, planID, "", typ, payload, nil); err != nil {
			return err
		}
		if status == string(plan.PlanActive) && exhausted {
			if err := pauseOnBudget(ctx, tx, planID, *budget, plan.USD(spent), withBy(map[string]any{}, by)); err != nil {
				return err
			}
		}
		return s.changed(ctx, tx, planID)
	})
	if err != nil {
		return PlanInfo{}, err
	}
	return s.GetPlan(ctx, planID)
}

// pauseOnBudget pauses a locked ACTIVE plan that has spent its budget (PAUSED, reason
// budget) and writes plan.budget_exceeded with the budget, the spend and payload's other
// fields: the one way a plan stops on its budget, whether its spending crossed the cap or
// the cap was lowered below its spending.
func pauseOnBudget(ctx context.Context, tx pgx.Tx, planID string, budget, spent plan.USD, payload map[string]any) error {
	if _, err := tx.Exec(ctx, `UPDATE plans SET status = 'PAUSED', pause_reason = 'budget' WHERE id = $1`, planID); err != nil {
		return fmt.Errorf("pause plan %s on budget: %w", planID, err)
	}
	payload["budget_usd"], payload["spent_usd"] = budget.String(), spent.String()
	return insertEvent(ctx, tx, planID, "", EventPlanBudgetExceeded, payload, nil)
}

// lockPlanSQL locks a plan's row and reads its status (lockPlan, and the paths that send
// it in a batch).
const lockPlanSQL = `SELECT status FROM plans WHERE id = $1 FOR NO KEY UPDATE`

// lockPlan locks the plan row and returns its status. Every writer that touches a plan
// and its tasks locks the plan first, so they cannot deadlock.
func lockPlan(ctx context.Context, tx pgx.Tx, planID string) (plan.PlanStatus, error) {
	var st plan.PlanStatus
	err := tx.QueryRow(ctx, lockPlanSQL, planID).Scan(&st)
	if errors.Is(err, pgx.ErrNoRows) {
		return st, fmt.Errorf("plan %s: %w", planID, ErrNotFound)
	}
	if err != nil {
		return st, fmt.Errorf("lock plan %s: %w", planID, err)
	}
	return st, nil
}

// CancelPlan cancels every open task of the plan (CANCEL events) and the plan itself.
// Workers holding a cancelled task learn it at their next heartbeat; their lease is void.
// by names who cancelled it (the events' "by"; empty: not recorded).
func (s *Store) CancelPlan(ctx context.Context, planID, reason, by string) (int, error) {
	if reason == "" {
		reason = "cancelled"
	}
	var n int
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		st, err := lockPlan(ctx, tx, planID)
		if err != nil {
			return err
		}
		err = tx.QueryRow(ctx, `
			WITH c AS (
				UPDATE tasks t SET status = 'CANCELLED', lease_id = NULL, lease_expires_at = NULL,
				       version = t.version + 1, updated_at = now()
				FROM (SELECT id AS tid, status AS old FROM tasks WHERE plan_id = $1
				      AND status IN ('PENDING', 'CLAIMED', 'IN_PROGRESS') ORDER BY id FOR UPDATE) o
				WHERE t.plan_id = $1 AND t.id = o.tid AND t.status = o.old
				RETURNING t.id, t.ord, o.old
			), ev AS (
				INSERT INTO events (plan_id, task_id, type, payload)
				SELECT $1, id, 'CANCEL', jsonb_build_object('from', old, 'reason', $2::text) || `+bySQL("$3")+` FROM c ORDER BY ord
				RETURNING 1
			)
			SELECT count(*) FROM ev`, planID, reason, by).Scan(&n)
		if err != nil {
			return fmt.Errorf("cancel tasks of plan %s: %w", planID, err)
		}
		if st == plan.PlanCancelled || st == plan.PlanDone {
			return s.changed(ctx, tx, planID)
		}
		if _, err := tx.Exec(ctx, `UPDATE plans SET status = 'CANCELLED', pause_reason = NULL, updated_at = now() WHERE id = $1`, planID); err != nil {
			return fmt.Errorf("cancel plan %s: %w", planID, err)
		}
		if err := insertEvent(ctx, tx, planID, "", EventPlanCancelled, withBy(map[string]any{"from": st, "reason": reason, "tasks": n}, by), nil); err != nil {
			return err
		}
		return s.changed(ctx, tx, planID)
	})
	return n, err
}
