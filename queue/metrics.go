package queue

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/whilly-go/whilly/plan"
)

// TaskStatusCounts returns how many tasks are in each status, over every plan: the
// whilly_tasks gauge.
func (s *Store) TaskStatusCounts(ctx context.Context) (map[plan.Status]int, error) {
	rows, err := s.pool.Query(ctx, `SELECT status, count(*) FROM tasks GROUP BY status`)
	if err != nil {
		return nil, fmt.Errorf("count tasks by status: %w", err)
	}
	out := map[plan.Status]int{}
	var (
		st string
		n  int
	)
	_, err = pgx.ForEachRow(rows, []any{&st, &n}, func() error {
		out[plan.Status(st)] = n
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("count tasks by status: %w", err)
	}
	return out, nil
}

// JobCount is how many River jobs of one queue are in one state.
type JobCount struct {
	Queue string
	State string
	N     int
}

// JobCounts returns the River jobs waiting or running, by queue and state (available,
// scheduled, retryable, running): the whilly_river_jobs gauge.
func (s *Store) JobCounts(ctx context.Context) ([]JobCount, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT queue, state::text, count(*) FROM river_job
		WHERE state IN ('available', 'scheduled', 'retryable', 'running')
		GROUP BY queue, state ORDER BY queue, state`)
	if err != nil {
		return nil, fmt.Errorf("count background jobs: %w", err)
	}
	jobs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (JobCount, error) {
		var c JobCount
		return c, row.Scan(&c.Queue, &c.State, &c.N)
	})
	if err != nil {
		return nil, fmt.Errorf("count background jobs: %w", err)
	}
	return jobs, nil
}

// PlanInstallation returns the GitHub App installation of plan id, 0 when it has none.
func (s *Store) PlanInstallation(ctx context.Context, id string) (int64, error) {
	var inst int64
	err := s.pool.QueryRow(ctx, `SELECT coalesce(installation_id, 0) FROM plans WHERE id = $1`, id).Scan(&inst)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, fmt.Errorf("plan %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return 0, fmt.Errorf("read the installation of plan %s: %w", id, err)
	}
	return inst, nil
}
