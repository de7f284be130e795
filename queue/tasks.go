package queue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/whilly-go/whilly/plan"
)

// EventTaskRemoved records a task deleted by an operator. Persisted: never rename it.
const EventTaskRemoved = "task.removed"

// RemoveTask deletes a task that no other task of its plan depends on and that is not
// running, with a task.removed event, then settles the plan (its last open task gone, it
// may be DONE). Anything else is ErrConflict, saying why.
// by names who removed it (the event's "by"; empty: not recorded).
func (s *Store) RemoveTask(ctx context.Context, planID, taskID, by string) error {
	return s.inTx(ctx, func(tx pgx.Tx) error {
		status, err := lockPlan(ctx, tx, planID)
		if err != nil {
			return err
		}
		var st plan.Status
		if err := tx.QueryRow(ctx, `SELECT status FROM tasks WHERE plan_id = $1 AND id = $2 FOR UPDATE`, planID, taskID).Scan(&st); err != nil {
			if errors.Is(err, pgx.ErrNoRows) {
				return fmt.Errorf("task %s of plan %s: %w", taskID, planID, ErrNotFound)
			}
			return fmt.Errorf("lock task %s of plan %s: %w", taskID, planID, err)
		}
		if st == plan.StatusClaimed || st == plan.StatusInProgress {
			return fmt.Errorf("task %s of plan %s is %s: it can be removed once its attempt ends: %w", taskID, planID, st, ErrConflict)
		}
		var dependents []string
		if err := tx.QueryRow(ctx, `SELECT coalesce(array_agg(id ORDER BY ord), '{}') FROM tasks
			WHERE plan_id = $1 AND $2 = ANY(dependencies)`, planID, taskID).Scan(&dependents); err != nil {
			return fmt.Errorf("find dependents of task %s of plan %s: %w", taskID, planID, err)
		}
		if len(dependents) > 0 {
			verb := "depend"
			if len(dependents) == 1 {
				verb = "depends"
			}
			return fmt.Errorf("task %s of plan %s cannot be removed: %s %s on it: %w",
				taskID, planID, strings.Join(dependents, ", "), verb, ErrConflict)
		}
		if _, err := tx.Exec(ctx, `DELETE FROM tasks WHERE plan_id = $1 AND id = $2`, planID, taskID); err != nil {
			return fmt.Errorf("remove task %s of plan %s: %w", taskID, planID, err)
		}
		if err := insertEvent(ctx, tx, planID, taskID, EventTaskRemoved, withBy(map[string]any{"status": st}, by), nil); err != nil {
			return err
		}
		if err := settlePlan(ctx, tx, planID, status); err != nil {
			return err
		}
		return s.changed(ctx, tx, planID)
	})
}

// ResetTask returns one finished task (DONE, FAILED, SKIPPED, CANCELLED) to PENDING with
// a RESET event, attempts and errors cleared; with cascade, every task that depends on it,
// directly or not, and has finished, too. A plan that had ended is ACTIVE again
// (plan.reopened). by names who reset it (the events' "by"). It returns the ids reset, in
// file order.
func (s *Store) ResetTask(ctx context.Context, planID, taskID string, cascade bool, by string) ([]string, error) {
	var ids []string
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		status, err := lockPlan(ctx, tx, planID)
		if err != nil {
			return err
		}
		var st plan.Status
		if err := tx.QueryRow(ctx, `SELECT status FROM tasks WHERE plan_id = $1 AND id = $2`, planID, taskID).Scan(&st); err != nil {
			if errors.Is(err, pgx.ErrNoRows) {
				return fmt.Errorf("task %s of plan %s: %w", taskID, planID, ErrNotFound)
			}
			return fmt.Errorf("read task %s of plan %s: %w", taskID, planID, err)
		}
		if !st.Terminal() {
			return fmt.Errorf("task %s of plan %s is %s: only a DONE, FAILED, SKIPPED or CANCELLED task can be reset: %w",
				taskID, planID, st, ErrConflict)
		}
		err = tx.QueryRow(ctx, `
			WITH RECURSIVE down(id) AS (
				SELECT $2::text
				UNION
				SELECT t.id FROM tasks t JOIN down d ON d.id = ANY(t.dependencies)
				WHERE $3 AND t.plan_id = $1
			), r AS (
				UPDATE tasks SET status = 'PENDING', attempts = 0, not_before = NULL, lease_id = NULL,
				       lease_expires_at = NULL, claimed_by = NULL, last_error = NULL, last_output = NULL, result = NULL,
				       version = version + 1, updated_at = now()
				FROM (SELECT id AS tid, status AS old FROM tasks
				      WHERE plan_id = $1 AND id IN (SELECT id FROM down) AND status IN ('DONE', 'FAILED', 'SKIPPED', 'CANCELLED')
				      ORDER BY id FOR UPDATE) o
				WHERE plan_id = $1 AND id = o.tid AND tasks.status = o.old
				RETURNING id, ord, o.old
			), ev AS (
				INSERT INTO events (plan_id, task_id, type, payload)
				SELECT $1, id, 'RESET', jsonb_build_object('from', old, 'to', 'PENDING', 'cascade_from', $2::text) || `+bySQL("$4")+`
				FROM r ORDER BY ord
				RETURNING task_id
			)
			SELECT coalesce(array_agg(id ORDER BY ord), '{}') FROM r`, planID, taskID, cascade, by).Scan(&ids)
		if err != nil {
			return fmt.Errorf("reset task %s of plan %s: %w", taskID, planID, err)
		}
		if status == plan.PlanDone || status == plan.PlanFailed || status == plan.PlanCancelled {
			if _, err := tx.Exec(ctx, `UPDATE plans SET status = 'ACTIVE', pause_reason = NULL, updated_at = now() WHERE id = $1`, planID); err != nil {
				return fmt.Errorf("reopen plan %s: %w", planID, err)
			}
			if err := insertEvent(ctx, tx, planID, "", EventPlanReopened, withBy(map[string]any{"from": status, "tasks_reset": len(ids)}, by), nil); err != nil {
				return err
			}
		}
		return s.changed(ctx, tx, planID)
	})
	return ids, err
}

// withBy adds who made a change to an event payload, when known.
func withBy(payload map[string]any, by string) map[string]any {
	if by != "" {
		payload["by"] = by
	}
	return payload
}

// bySQL is the SQL of the jsonb object {"by": param} (empty when param is empty), to
// concatenate to an event payload built in SQL.
func bySQL(param string) string {
	return `CASE WHEN ` + param + `::text = '' THEN '{}'::jsonb ELSE jsonb_build_object('by', ` + param + `::text) END`
}

// TaskChange says what AddTask or EditTask did.
type TaskChange struct {
	Task   TaskInfo     `json:"task"`
	Import ImportResult `json:"import"`
	// Changed is false when an edit gave the task the definition it already had.
	Changed bool `json:"changed"`
}

// AddTask adds the task raw describes (one task in the plan-file format) to a plan, with
// a task.created event carrying by. The task is checked with the rest of the plan as an
// import would check it (the plan codec: keys, text, ids, dependencies, cycles); a plan
// that had ended is ACTIVE again. A task id the plan has is ErrConflict; an unknown plan
// ErrNotFound; an invalid task a *plan.ValidationError or ErrInvalid. Nothing is written
// on error.
func (s *Store) AddTask(ctx context.Context, planID string, raw []byte, by string) (TaskChange, error) {
	return s.putTask(ctx, planID, "", raw, by)
}

// EditTask replaces the definition of task taskID with the one raw describes (same id),
// as an import would (see Import): only a task that has not run may change, with a
// task.updated event carrying by and a fresh gate verdict; any other is ErrConflict.
func (s *Store) EditTask(ctx context.Context, planID, taskID string, raw []byte, by string) (TaskChange, error) {
	return s.putTask(ctx, planID, taskID, raw, by)
}

// putTask is AddTask (edit "") and EditTask. The task is validated spliced into the
// stored plan's file, then imported alone under the plan's lock, its dependencies checked
// again there, so that a task removed meanwhile is neither brought back nor depended on.
func (s *Store) putTask(ctx context.Context, planID, edit string, raw []byte, by string) (TaskChange, error) {
	var head struct {
		ID any `json:"id"`
	}
	if err := json.Unmarshal(raw, &head); err != nil || !isJSONObject(raw) {
		return TaskChange{}, fmt.Errorf("a task must be one JSON object in the plan-file format ({\"id\", \"description\", ...}): %w", ErrInvalid)
	}
	id, _ := head.ID.(string)
	if edit != "" && id != edit {
		return TaskChange{}, fmt.Errorf("the task given has id %q, not %q: an edit keeps the task's id: %w", id, edit, ErrInvalid)
	}
	p, err := s.Export(ctx, planID)
	if err != nil {
		return TaskChange{}, err
	}
	at := len(p.Tasks)
	for i, t := range p.Tasks {
		if t.ID == id {
			at = i
		}
	}
	switch {
	case edit == "" && at < len(p.Tasks):
		return TaskChange{}, fmt.Errorf("plan %s already has a task %s: edit it instead: %w", planID, id, ErrConflict)
	case edit != "" && at == len(p.Tasks):
		return TaskChange{}, fmt.Errorf("task %s of plan %s: %w", edit, planID, ErrNotFound)
	}
	data, err := spliceTask(p, at, raw)
	if err != nil {
		return TaskChange{}, err
	}
	whole, err := plan.ParseWith(data, plan.ParseOptions{MaxAttempts: s.cfg.MaxAttempts})
	if err != nil {
		return TaskChange{}, err
	}
	one := *whole
	one.Tasks = []plan.Task{whole.Tasks[at]}
	s.normalize(&one)
	var res ImportResult
	err = s.inTx(ctx, func(tx pgx.Tx) error {
		if _, err := lockPlan(ctx, tx, planID); err != nil {
			return err
		}
		var missing []string
		if err := tx.QueryRow(ctx, `SELECT coalesce(array_agg(d ORDER BY d), '{}') FROM unnest($2::text[]) d
			WHERE NOT EXISTS (SELECT 1 FROM tasks WHERE plan_id = $1 AND id = d)`, planID, nonNil(one.Tasks[0].Dependencies)).Scan(&missing); err != nil {
			return fmt.Errorf("check dependencies of task %s of plan %s: %w", id, planID, err)
		}
		if len(missing) > 0 {
			return fmt.Errorf("task %s of plan %s depends on %s, which the plan no longer has: %w", id, planID, strings.Join(missing, ", "), ErrConflict)
		}
		if res, err = importTx(ctx, tx, &one, ImportOptions{By: by}); err != nil {
			return err
		}
		if edit == "" && res.TasksCreated == 0 {
			return fmt.Errorf("plan %s already has a task %s: edit it instead: %w", planID, id, ErrConflict)
		}
		if err := settleImport(ctx, tx, &res, by); err != nil {
			return err
		}
		if !res.Changed() && !res.Reopened {
			return nil
		}
		return s.changed(ctx, tx, planID)
	})
	if err != nil {
		return TaskChange{}, err
	}
	res.TasksTotal = len(whole.Tasks)
	t, err := s.GetTask(ctx, planID, id)
	if err != nil {
		return TaskChange{}, err
	}
	return TaskChange{Task: t, Import: res, Changed: res.Changed()}, nil
}

// spliceTask returns p's plan file with raw (one task, as given) in place of task at, or
// appended when at is past the end, so that the plan codec checks raw exactly as written.
func spliceTask(p *plan.Plan, at int, raw []byte) ([]byte, error) {
	data, err := plan.Encode(p)
	if err != nil {
		return nil, fmt.Errorf("encode plan %s: %w", p.ID, err)
	}
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("decode plan %s: %w", p.ID, err)
	}
	var tasks []json.RawMessage
	if err := json.Unmarshal(doc["tasks"], &tasks); err != nil {
		return nil, fmt.Errorf("decode tasks of plan %s: %w", p.ID, err)
	}
	if at == len(tasks) {
		tasks = append(tasks, nil)
	}
	tasks[at] = raw
	// Built by hand: json.Marshal would rewrite raw (invalid UTF-8 and all) before the
	// codec could name what is wrong with it.
	var b strings.Builder
	b.WriteString("{")
	first := true
	for k, v := range doc {
		if k == "tasks" {
			continue
		}
		if !first {
			b.WriteString(",")
		}
		first = false
		key, _ := json.Marshal(k) // a key of our own encoding
		b.Write(key)
		b.WriteString(":")
		b.Write(v)
	}
	if !first {
		b.WriteString(",")
	}
	b.WriteString(`"tasks":[`)
	for i, t := range tasks {
		if i > 0 {
			b.WriteString(",")
		}
		b.Write(t)
	}
	b.WriteString("]}")
	return []byte(b.String()), nil
}

// isJSONObject reports whether raw, past leading white space, opens a JSON object.
func isJSONObject(raw []byte) bool {
	for _, c := range raw {
		switch c {
		case ' ', '\t', '\r', '\n':
			continue
		}
		return c == '{'
	}
	return false
}

// RetryResult says what RetryTasks changed.
type RetryResult struct {
	Retried     int             `json:"tasks_retried"`
	PlanStatus  plan.PlanStatus `json:"plan_status"`
	Reactivated bool            `json:"reactivated"`
}

// RetryTasks returns FAILED and CANCELLED tasks of a plan to PENDING with fresh attempts
// (RESET events, reason given) — the named ones, or all of them when taskIDs is empty —
// and reactivates a FAILED or CANCELLED plan. A named task that is not FAILED or
// CANCELLED is ErrConflict; an unknown one ErrNotFound. Reactivating a plan whose issue
// has another live plan is ErrConflict. The last error is kept for the next prompt. by
// names who asked (the events' "by"; empty: not recorded). The comment command, the
// dashboard's retry button and the CLI all come here.
func (s *Store) RetryTasks(ctx context.Context, planID string, taskIDs []string, reason, by string) (RetryResult, error) {
	var res RetryResult
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		st, err := lockPlan(ctx, tx, planID)
		if err != nil {
			return err
		}
		res.PlanStatus = st
		for _, id := range taskIDs {
			var status plan.Status
			err := tx.QueryRow(ctx, `SELECT status FROM tasks WHERE plan_id = $1 AND id = $2`, planID, id).Scan(&status)
			if errors.Is(err, pgx.ErrNoRows) {
				return fmt.Errorf("task %s of plan %s: %w", id, planID, ErrNotFound)
			}
			if err != nil {
				return fmt.Errorf("read task %s of plan %s: %w", id, planID, err)
			}
			if status != plan.StatusFailed && status != plan.StatusCancelled {
				return fmt.Errorf("task %s of plan %s is %s; only FAILED or CANCELLED tasks can be retried: %w", id, planID, status, ErrConflict)
			}
		}
		var ids []string
		if len(taskIDs) > 0 {
			ids = taskIDs
		}
		err = tx.QueryRow(ctx, `
			WITH r AS (
				UPDATE tasks t SET status = 'PENDING', attempts = 0, not_before = NULL, lease_id = NULL,
				       lease_expires_at = NULL, claimed_by = NULL, version = t.version + 1, updated_at = now()
				FROM (SELECT id AS tid, status AS old FROM tasks WHERE plan_id = $1
				      AND status IN ('FAILED', 'CANCELLED') AND ($2::text[] IS NULL OR id = ANY($2)) ORDER BY id FOR UPDATE) o
				WHERE t.plan_id = $1 AND t.id = o.tid AND t.status = o.old
				RETURNING t.id, t.ord, o.old
			), ev AS (
				INSERT INTO events (plan_id, task_id, type, payload)
				SELECT $1, id, 'RESET', jsonb_build_object('from', old, 'to', 'PENDING', 'reason', $3::text) || `+bySQL("$4")+`
				FROM r ORDER BY ord
				RETURNING 1
			)
			SELECT count(*) FROM ev`, planID, ids, reason, by).Scan(&res.Retried)
		if err != nil {
			return fmt.Errorf("retry tasks of plan %s: %w", planID, err)
		}
		if res.Retried == 0 {
			return nil
		}
		if st == plan.PlanFailed || st == plan.PlanCancelled {
			_, err := tx.Exec(ctx, `UPDATE plans SET status = 'ACTIVE', pause_reason = NULL, updated_at = now() WHERE id = $1`, planID)
			if isUniqueViolation(err) {
				return fmt.Errorf("reactivate plan %s: its issue has another live plan: %w", planID, ErrConflict)
			}
			if err != nil {
				return fmt.Errorf("reactivate plan %s: %w", planID, err)
			}
			res.Reactivated = true
			res.PlanStatus = plan.PlanActive
		}
		payload := withBy(map[string]any{"tasks_reset": res.Retried, "from": st, "reason": reason}, by)
		if err := insertEvent(ctx, tx, planID, "", EventPlanReset, payload, nil); err != nil {
			return err
		}
		return s.changed(ctx, tx, planID)
	})
	if err != nil {
		return RetryResult{}, err
	}
	return res, nil
}

// TaskInfo is a task's row: the plan-file fields and the runtime state.
type TaskInfo struct {
	PlanID             string        `json:"plan_id"`
	ID                 string        `json:"id"`
	Status             plan.Status   `json:"status"`
	Priority           plan.Priority `json:"priority"`
	Description        string        `json:"description"`
	Dependencies       []string      `json:"dependencies"`
	KeyFiles           []string      `json:"key_files"`
	AcceptanceCriteria []string      `json:"acceptance_criteria"`
	TestSteps          []string      `json:"test_steps"`
	PRDRequirement     string        `json:"prd_requirement"`
	Labels             []string      `json:"labels"`
	Gate               plan.Verdict  `json:"gate"`
	Attempts           int           `json:"attempts"`
	MaxAttempts        int           `json:"max_attempts"`
	NotBefore          *time.Time    `json:"not_before,omitempty"`
	LeaseID            string        `json:"lease_id,omitempty"`
	LeaseExpiresAt     *time.Time    `json:"lease_expires_at,omitempty"`
	ClaimedBy          string        `json:"claimed_by,omitempty"`
	Version            int           `json:"version"`
	Cost               plan.USD      `json:"cost_usd"`
	LastError          string        `json:"last_error,omitempty"`
	// LastOutput is the last failed attempt's error text and output tail (redacted by the
	// worker), for the next attempt's prompt.
	LastOutput  string    `json:"last_output,omitempty"`
	TrizFinding string    `json:"triz_finding,omitempty"`
	Result      string    `json:"result,omitempty"`
	CreatedAt   time.Time `json:"created_at"`
	UpdatedAt   time.Time `json:"updated_at"`
	// Round is set on the task of a pull request's follow-up round (StartRound).
	Round *RoundContext `json:"round,omitempty"`
}

// Task returns the plan-file view of the row.
func (t TaskInfo) Task() plan.Task {
	return plan.Task{
		ID: t.ID, Status: t.Status, Priority: t.Priority, Description: t.Description,
		Dependencies: t.Dependencies, KeyFiles: t.KeyFiles, AcceptanceCriteria: t.AcceptanceCriteria,
		TestSteps: t.TestSteps, PRDRequirement: t.PRDRequirement, MaxAttempts: t.MaxAttempts, Labels: t.Labels,
	}
}

// SetTrizFinding records the failure analyzer's finding on a task, for its next
// attempt's prompt, and writes the analyzer's event in the same transaction.
func (s *Store) SetTrizFinding(ctx context.Context, planID, taskID, finding, eventType string, detail any) error {
	return s.inTx(ctx, func(tx pgx.Tx) error {
		// A round's task that has not run waits for its analysis (StartRound): no longer.
		tag, err := tx.Exec(ctx, `UPDATE tasks SET triz_finding = NULLIF($3, ''), updated_at = now(),
				not_before = CASE WHEN status = 'PENDING' AND attempts = 0 AND round_context IS NOT NULL THEN NULL ELSE not_before END
			WHERE plan_id = $1 AND id = $2`, planID, taskID, finding)
		if err != nil {
			return fmt.Errorf("record finding on task %s of plan %s: %w", taskID, planID, err)
		}
		if tag.RowsAffected() == 0 {
			return fmt.Errorf("task %s of plan %s: %w", taskID, planID, ErrNotFound)
		}
		if err := insertEvent(ctx, tx, planID, taskID, eventType, nil, detail); err != nil {
			return err
		}
		return s.changed(ctx, tx, planID)
	})
}

const taskColumns = `plan_id, id, status, priority, description, dependencies, key_files, acceptance_criteria,
	test_steps, prd_requirement, labels, gate_verdict, gate_reasons, attempts, max_attempts, not_before,
	coalesce(lease_id::text, ''), lease_expires_at, coalesce(claimed_by, ''), version,
	(cost_usd * 1000000)::bigint, coalesce(last_error, ''), coalesce(last_output, ''), coalesce(triz_finding, ''),
	coalesce(result, ''), created_at, updated_at, round_context`

// taskColumnCount is the number of columns of taskColumns.
const taskColumnCount = 28

func scanTask(row pgx.Row) (TaskInfo, error) { return scanTaskExtra(row) }

// scanTaskExtra scans taskColumns followed by extra columns into extra. The destinations
// are the types pgx scans into without wrappers (string, not plan.Status; a FlatArray,
// not *[]string), which cost reflection on every row.
func scanTaskExtra(row pgx.Row, extra ...any) (TaskInfo, error) {
	// One variable for every destination: one allocation, not one each.
	var v struct {
		t                          TaskInfo
		status, priority, decision string
		cost                       int64
	}
	t := &v.t
	dest := append(make([]any, 0, taskColumnCount+len(extra)), &t.PlanID, &t.ID, &v.status, &v.priority, &t.Description,
		(*pgtype.FlatArray[string])(&t.Dependencies), (*pgtype.FlatArray[string])(&t.KeyFiles),
		(*pgtype.FlatArray[string])(&t.AcceptanceCriteria), (*pgtype.FlatArray[string])(&t.TestSteps), &t.PRDRequirement,
		(*pgtype.FlatArray[string])(&t.Labels), &v.decision, &t.Gate.Reasons,
		&t.Attempts, &t.MaxAttempts, &t.NotBefore, &t.LeaseID, &t.LeaseExpiresAt, &t.ClaimedBy, &t.Version,
		&v.cost, &t.LastError, &t.LastOutput, &t.TrizFinding, &t.Result, &t.CreatedAt, &t.UpdatedAt, &t.Round)
	err := row.Scan(append(dest, extra...)...)
	t.Status, t.Priority, t.Gate.Decision, t.Cost = plan.Status(v.status), plan.Priority(v.priority), plan.Decision(v.decision), plan.USD(v.cost)
	return *t, err
}

// Tasks returns every task of a plan in file order.
func (s *Store) Tasks(ctx context.Context, planID string) ([]TaskInfo, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+taskColumns+` FROM tasks WHERE plan_id = $1 ORDER BY ord`, planID)
	if err != nil {
		return nil, fmt.Errorf("list tasks of plan %s: %w", planID, err)
	}
	tasks, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (TaskInfo, error) { return scanTask(r) })
	if err != nil {
		return nil, fmt.Errorf("list tasks of plan %s: %w", planID, err)
	}
	return tasks, nil
}

// TaskPage selects a page of a plan's tasks in file order.
type TaskPage struct {
	From   int         // the first order key to include: 0, or a next cursor
	Limit  int         // default 1000, at most plan.MaxTaskPage
	Status plan.Status // only tasks in this status ("" any)
}

// TaskPageOf returns a page of a plan's tasks and the order key the next page begins at
// (-1 at the end).
func (s *Store) TaskPageOf(ctx context.Context, planID string, pg TaskPage) ([]TaskInfo, int, error) {
	if pg.Limit <= 0 {
		pg.Limit = 1000
	}
	pg.Limit = min(pg.Limit, plan.MaxTaskPage)
	rows, err := s.pool.Query(ctx, `SELECT `+taskColumns+`, ord FROM tasks
		WHERE plan_id = $1 AND ord >= $2 AND ($3 = '' OR status = $3) ORDER BY ord LIMIT $4`,
		planID, pg.From, string(pg.Status), pg.Limit+1)
	if err != nil {
		return nil, -1, fmt.Errorf("list tasks of plan %s: %w", planID, err)
	}
	var ords []int
	tasks, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (TaskInfo, error) {
		var ord int
		t, err := scanTaskExtra(r, &ord)
		ords = append(ords, ord)
		return t, err
	})
	if err != nil {
		return nil, -1, fmt.Errorf("list tasks of plan %s: %w", planID, err)
	}
	if len(tasks) > pg.Limit {
		return tasks[:pg.Limit], ords[pg.Limit], nil
	}
	return tasks, -1, nil
}

// GetTask returns one task.
func (s *Store) GetTask(ctx context.Context, planID, taskID string) (TaskInfo, error) {
	t, err := scanTask(s.pool.QueryRow(ctx, `SELECT `+taskColumns+` FROM tasks WHERE plan_id = $1 AND id = $2`, planID, taskID))
	if errors.Is(err, pgx.ErrNoRows) {
		return t, fmt.Errorf("task %s of plan %s: %w", taskID, planID, ErrNotFound)
	}
	if err != nil {
		return t, fmt.Errorf("get task %s of plan %s: %w", taskID, planID, err)
	}
	return t, nil
}
