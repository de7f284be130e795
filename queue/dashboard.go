package queue

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// Reads of the web dashboard (package web) that the API does not need.

// TasksByID returns the named tasks of a plan, in file order; unknown ids are left out.
func (s *Store) TasksByID(ctx context.Context, planID string, ids []string) ([]TaskInfo, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+taskColumns+` FROM tasks WHERE plan_id = $1 AND id = ANY($2) ORDER BY ord`, planID, ids)
	if err != nil {
		return nil, fmt.Errorf("read tasks of plan %s: %w", planID, err)
	}
	tasks, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (TaskInfo, error) { return scanTask(r) })
	if err != nil {
		return nil, fmt.Errorf("read tasks of plan %s: %w", planID, err)
	}
	return tasks, nil
}

// PlansByID returns the named plans the scopes allow, by id; unknown ids are left out.
func (s *Store) PlansByID(ctx context.Context, ids []string, scopes Scopes) ([]PlanInfo, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+planColumns+` FROM plans p WHERE p.id = ANY($1) AND `+scopeMatchSQL("$2")+` ORDER BY p.id`,
		ids, scopes.Strings())
	if err != nil {
		return nil, fmt.Errorf("read plans: %w", err)
	}
	plans, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (PlanInfo, error) { return scanPlan(r) })
	if err != nil {
		return nil, fmt.Errorf("read plans: %w", err)
	}
	return plans, nil
}

// RecentFilter selects the newest events, for reading the log backwards.
type RecentFilter struct {
	PlanID string // "" any
	TaskID string // "" any
	Type   string // "" any
	Before int64  // only ids below this; 0: from the newest
	Limit  int    // default 100, at most 500
	Scopes Scopes // only events of plans these allow (limited: no event without a plan)
}

// RecentEvents returns the newest events that match f, newest first.
func (s *Store) RecentEvents(ctx context.Context, f RecentFilter) ([]Event, error) {
	if f.Limit <= 0 {
		f.Limit = 100
	}
	f.Limit = min(f.Limit, 500)
	rows, err := s.pool.Query(ctx, `
		SELECT e.id, coalesce(e.plan_id, ''), coalesce(e.task_id, ''), e.type, e.payload, e.detail, e.created_at
		FROM events e
		WHERE ($1 = 0 OR e.id < $1) AND ($2 = '' OR e.plan_id = $2) AND ($3 = '' OR e.task_id = $3) AND ($4 = '' OR e.type = $4)
		  AND ($6::text[] = '{}' OR e.plan_id IN (SELECT p.id FROM plans p WHERE `+scopeMatchSQL("$6")+`))
		ORDER BY e.id DESC
		LIMIT $5`, f.Before, f.PlanID, f.TaskID, f.Type, f.Limit, f.Scopes.Strings())
	if err != nil {
		return nil, fmt.Errorf("list recent events: %w", err)
	}
	evs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Event, error) {
		var e Event
		err := r.Scan(&e.ID, &e.PlanID, &e.TaskID, &e.Type, &e.Payload, &e.Detail, &e.CreatedAt)
		return e, err
	})
	if err != nil {
		return nil, fmt.Errorf("list recent events: %w", err)
	}
	return evs, nil
}

// WorkerTask names a task a worker holds now.
type WorkerTask struct {
	PlanID string
	TaskID string
	Status string
}

// WorkerTasks returns the tasks each worker holds now (CLAIMED or IN_PROGRESS), by worker.
func (s *Store) WorkerTasks(ctx context.Context) (map[string][]WorkerTask, error) {
	rows, err := s.pool.Query(ctx, `SELECT claimed_by, plan_id, id, status FROM tasks
		WHERE status IN ('CLAIMED', 'IN_PROGRESS') AND claimed_by IS NOT NULL ORDER BY plan_id, ord`)
	if err != nil {
		return nil, fmt.Errorf("list held tasks: %w", err)
	}
	defer rows.Close()
	out := map[string][]WorkerTask{}
	for rows.Next() {
		var w string
		var t WorkerTask
		if err := rows.Scan(&w, &t.PlanID, &t.TaskID, &t.Status); err != nil {
			return nil, fmt.Errorf("list held tasks: %w", err)
		}
		out[w] = append(out[w], t)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list held tasks: %w", err)
	}
	return out, nil
}
