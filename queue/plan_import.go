package queue

// Importing a plan file: the plan's row and its tasks written in one transaction
// (Import, Apply), in batches, with the decision gate's verdicts.

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/whilly-go/whilly/plan"
)

// ImportResult says what an import wrote.
type ImportResult struct {
	PlanID       string `json:"plan_id"`
	PlanCreated  bool   `json:"plan_created"`
	TasksCreated int    `json:"tasks_created"`
	// TasksUpdated are existing tasks whose definition the file changed (see Import).
	TasksUpdated []string `json:"tasks_updated"`
	TasksTotal   int      `json:"tasks_total"`
	// Status is the plan's status after the import; Reopened says the import brought a
	// finished plan back to ACTIVE.
	Status   plan.PlanStatus `json:"status"`
	Reopened bool            `json:"reopened,omitempty"`
}

// Changed reports whether the import wrote anything.
func (r ImportResult) Changed() bool {
	return r.PlanCreated || r.TasksCreated > 0 || len(r.TasksUpdated) > 0
}

// ImportOptions tunes Import.
type ImportOptions struct {
	// Progress, when set, is called after each batch with the tasks handled so far.
	Progress func(done, total int)
	// GitHubIssueRef, InstallationID tie the plan to an issue (GitHub intake).
	GitHubIssueRef string
	InstallationID int64
	// By names who made the change (an API token's owner, the local user); the
	// task.created and task.updated events carry it as "by". Empty: not recorded.
	By string
	// PauseReason, when set, creates the plan PAUSED with this reason (PauseApproval:
	// WHILLY_REQUIRE_APPROVAL); a plan that exists already keeps its status.
	PauseReason string
}

const importBatch = 2000

// Import writes p in one transaction. It is idempotent: an existing plan keeps its row,
// new tasks are inserted with a task.created event, and a task already stored keeps its
// runtime state. When the file changes an existing task's definition (description,
// priority, dependencies, key files, criteria, test steps, requirement, labels, attempt
// limit), a task that has not run — PENDING, or SKIPPED by the decision gate — takes the
// new definition with a task.updated event and a fresh gate verdict (a gate-skipped task
// the gate now accepts returns to PENDING); any other is refused (ErrConflict naming the
// tasks and fields) and nothing is written. Then the plan's status follows its tasks: a
// plan with every task DONE or SKIPPED, or none, is DONE; a DONE or FAILED plan that got
// work to do is ACTIVE again (plan.reopened). p is normalised (plan.Normalize) and must
// then be valid (plan.Validate); nothing is written otherwise.
func (s *Store) Import(ctx context.Context, p *plan.Plan, opts ImportOptions) (ImportResult, error) {
	return s.importPlan(ctx, p, opts, true)
}

// importPlan is Import; settle false leaves the plan's status alone (CreatePlan: an empty
// plan made to receive tasks is not DONE).
func (s *Store) importPlan(ctx context.Context, p *plan.Plan, opts ImportOptions, settle bool) (ImportResult, error) {
	var res ImportResult
	s.normalize(p)
	if err := plan.Validate(p); err != nil {
		return res, err
	}
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		var err error
		if res, err = importTx(ctx, tx, p, opts); err != nil {
			return err
		}
		if settle {
			if err := settleImport(ctx, tx, &res, opts.By); err != nil {
				return err
			}
		}
		if !res.Changed() && !res.Reopened {
			return nil
		}
		return s.changed(ctx, tx, p.ID)
	})
	if err != nil {
		return ImportResult{}, err
	}
	if res.TasksCreated >= analyzeAfter {
		// The planner's statistics do not know the new tasks yet (autovacuum gets to them
		// within a minute): without them it may walk every task of the plan to find one.
		if _, err := s.pool.Exec(ctx, `ANALYZE tasks`); err != nil {
			s.log.WarnContext(ctx, "analyze tasks after a large import", "plan_id", p.ID, "error", err)
		}
	}
	return res, nil
}

// analyzeAfter is the number of tasks an import must create to refresh the statistics.
const analyzeAfter = 1000

// normalize is plan.Normalize, with the store's attempt limit for tasks built without one.
func (s *Store) normalize(p *plan.Plan) {
	for i := range p.Tasks {
		if p.Tasks[i].MaxAttempts == 0 {
			p.Tasks[i].MaxAttempts = s.cfg.MaxAttempts
		}
	}
	plan.Normalize(p)
}

func importTx(ctx context.Context, tx pgx.Tx, p *plan.Plan, opts ImportOptions) (ImportResult, error) {
	res := ImportResult{PlanID: p.ID, TasksTotal: len(p.Tasks)}
	verify, err := json.Marshal(verifyRows(p.Verify))
	if err != nil {
		return res, fmt.Errorf("encode verify commands: %w", err)
	}
	tag, err := tx.Exec(ctx, `
		INSERT INTO plans (id, name, budget_usd, strict, repo, verify, github_issue_ref, installation_id, status, pause_reason,
			origin, repo_targets)
		VALUES ($1, $2, $3::numeric, $4, NULLIF($5, ''), $6, NULLIF($7, ''), NULLIF($8, 0),
			CASE WHEN $9 = '' THEN 'ACTIVE' ELSE 'PAUSED' END, NULLIF($9, ''), NULLIF($10, '')::jsonb, NULLIF($11, '')::jsonb)
		ON CONFLICT (id) DO NOTHING`,
		p.ID, p.Name, usdParam(p.Budget), p.Strict, p.Repo, verify, opts.GitHubIssueRef, opts.InstallationID, opts.PauseReason,
		string(p.Origin), string(p.RepoTargets))
	if err != nil {
		if isUniqueViolation(err) {
			return res, fmt.Errorf("import plan %s: issue %s already has a live plan: %w", p.ID, opts.GitHubIssueRef, ErrConflict)
		}
		return res, fmt.Errorf("import plan %s: %w", p.ID, err)
	}
	res.PlanCreated = tag.RowsAffected() == 1
	if res.PlanCreated {
		payload := withBy(map[string]any{"name": p.Name, "tasks": len(p.Tasks), "budget_usd": usdParam(p.Budget)}, opts.By)
		if opts.PauseReason != "" {
			payload["pause_reason"] = opts.PauseReason
		}
		if err := insertEvent(ctx, tx, p.ID, "", EventPlanCreated, payload, nil); err != nil {
			return res, err
		}
	}
	if !res.PlanCreated {
		if res.TasksUpdated, err = updateTasks(ctx, tx, p, opts.By); err != nil {
			return res, err
		}
	}
	var base int
	if err := tx.QueryRow(ctx, `SELECT coalesce(max(ord) + 1, 0) FROM tasks WHERE plan_id = $1`, p.ID).Scan(&base); err != nil {
		return res, fmt.Errorf("import plan %s: read task order: %w", p.ID, err)
	}
	steps := map[int]int{} // fair share: a plan's tasks of one priority take one round each, across batches
	for start := 0; start < len(p.Tasks); start += importBatch {
		end := min(start+importBatch, len(p.Tasks))
		n, err := insertTasks(ctx, tx, p.ID, base+start, p.Tasks[start:end], steps, opts.By)
		if err != nil {
			return res, fmt.Errorf("import plan %s: %w", p.ID, err)
		}
		res.TasksCreated += n
		if opts.Progress != nil {
			opts.Progress(end, len(p.Tasks))
		}
	}
	return res, nil
}

// settleImport gives the plan the status its tasks call for after an import: DONE when
// every task is DONE or SKIPPED (or there is none), ACTIVE again (plan.reopened) when a
// DONE or FAILED plan got tasks that can run, else as settlePlan decides.
func settleImport(ctx context.Context, tx pgx.Tx, res *ImportResult, by string) error {
	var (
		status plan.PlanStatus
		open   bool
	)
	err := tx.QueryRow(ctx, `SELECT status, EXISTS (SELECT 1 FROM tasks WHERE plan_id = $1 AND status = 'PENDING')
		FROM plans WHERE id = $1 FOR NO KEY UPDATE`, res.PlanID).Scan(&status, &open)
	if err != nil {
		return fmt.Errorf("read status of plan %s: %w", res.PlanID, err)
	}
	if open && (status == plan.PlanDone || status == plan.PlanFailed) {
		if _, err := tx.Exec(ctx, `UPDATE plans SET status = 'ACTIVE', pause_reason = NULL, updated_at = now() WHERE id = $1`, res.PlanID); err != nil {
			return fmt.Errorf("reopen plan %s: %w", res.PlanID, err)
		}
		payload := withBy(map[string]any{"from": status, "tasks_created": res.TasksCreated, "tasks_updated": len(res.TasksUpdated)}, by)
		if err := insertEvent(ctx, tx, res.PlanID, "", EventPlanReopened, payload, nil); err != nil {
			return err
		}
		status, res.Reopened = plan.PlanActive, true
	}
	if err := settlePlan(ctx, tx, res.PlanID, status); err != nil {
		return err
	}
	return tx.QueryRow(ctx, `SELECT status FROM plans WHERE id = $1`, res.PlanID).Scan(&res.Status)
}

// updateTasks gives the stored tasks of p that have not run the definition p's file
// gives them, and refuses (ErrConflict) when the file changes a task that has run.
func updateTasks(ctx context.Context, tx pgx.Tx, p *plan.Plan, by string) ([]string, error) {
	ids := make([]string, len(p.Tasks))
	for i, t := range p.Tasks {
		ids[i] = t.ID
	}
	rows, err := tx.Query(ctx, `SELECT `+taskColumns+` FROM tasks WHERE plan_id = $1 AND id = ANY($2) ORDER BY ord FOR UPDATE`, p.ID, ids)
	if err != nil {
		return nil, fmt.Errorf("read stored tasks of plan %s: %w", p.ID, err)
	}
	stored, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (TaskInfo, error) { return scanTask(r) })
	if err != nil {
		return nil, fmt.Errorf("read stored tasks of plan %s: %w", p.ID, err)
	}
	if len(stored) == 0 {
		return nil, nil
	}
	inFile := make(map[string]plan.Task, len(p.Tasks))
	for _, t := range p.Tasks {
		inFile[t.ID] = t
	}
	var (
		changed []plan.Task
		refused []string
		fields  = map[string][]string{}
	)
	for _, old := range stored {
		t := inFile[old.ID]
		diff := plan.DefinitionChanges(old.Task(), t)
		if len(diff) == 0 {
			continue
		}
		fields[t.ID] = diff
		if old.Status == plan.StatusPending || (old.Status == plan.StatusSkipped && old.Gate.Decision == plan.DecisionReject) {
			changed = append(changed, t)
			continue
		}
		refused = append(refused, fmt.Sprintf("%s is %s and the file changes its %s", old.ID, old.Status, strings.Join(diff, ", ")))
	}
	if len(refused) > 0 {
		return nil, fmt.Errorf("import plan %s: only a task that has not run may change: %s; reset those tasks first, or give the changed work a new task id: %w",
			p.ID, strings.Join(refused, "; "), ErrConflict)
	}
	var out []string
	for _, t := range changed {
		v := plan.Gate(t)
		reasons := v.Reasons
		if reasons == nil {
			reasons = []plan.Reason{}
		}
		var from, to plan.Status
		err := tx.QueryRow(ctx, `WITH o AS (SELECT status FROM tasks WHERE plan_id = $1 AND id = $2)
			UPDATE tasks SET priority = $3, description = $4, dependencies = $5, key_files = $6,
				acceptance_criteria = $7, test_steps = $8, prd_requirement = $9, labels = $10, max_attempts = $11,
				gate_verdict = $12, gate_reasons = $13,
				status = CASE WHEN status = 'SKIPPED' AND $12 <> 'REJECT' THEN 'PENDING' ELSE status END,
				version = version + 1, updated_at = now()
			WHERE plan_id = $1 AND id = $2 RETURNING (SELECT status FROM o), status`,
			p.ID, t.ID, t.Priority, t.Description, nonNil(t.Dependencies), nonNil(t.KeyFiles), nonNil(t.AcceptanceCriteria),
			nonNil(t.TestSteps), t.PRDRequirement, nonNil(t.Labels), t.MaxAttempts, v.Decision, reasons).Scan(&from, &to)
		if err != nil {
			return nil, fmt.Errorf("update task %s of plan %s: %w", t.ID, p.ID, err)
		}
		payload := withBy(map[string]any{"fields": fields[t.ID], "gate": v.Decision, "from": from, "to": to}, by)
		if err := insertEvent(ctx, tx, p.ID, t.ID, EventTaskUpdated, payload, nil); err != nil {
			return nil, err
		}
		out = append(out, t.ID)
	}
	return out, nil
}

type taskRow struct {
	ID                 string        `json:"id"`
	Ord                int           `json:"ord"`
	Status             plan.Status   `json:"status"`
	Priority           plan.Priority `json:"priority"`
	Description        string        `json:"description"`
	Dependencies       []string      `json:"dependencies"`
	KeyFiles           []string      `json:"key_files"`
	AcceptanceCriteria []string      `json:"acceptance_criteria"`
	TestSteps          []string      `json:"test_steps"`
	PRDRequirement     string        `json:"prd_requirement"`
	Labels             []string      `json:"labels"`
	MaxAttempts        int           `json:"max_attempts"`
	GateVerdict        plan.Decision `json:"gate_verdict"`
	GateReasons        []plan.Reason `json:"gate_reasons"`
	// Rank and Step place the task in the fair-share order (fairShareSQL): its
	// priority's rank, and how many tasks of that priority come before it in the batch.
	Rank int `json:"rank"`
	Step int `json:"step"`
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// insertTasks inserts a batch of normalised tasks with one statement; existing (plan_id, id) rows are kept.
// Each inserted row gets its task.created event in the same statement. steps counts, by
// priority rank, the tasks of the import placed in the fair-share order so far. A task
// with a dependency that is not DONE or SKIPPED (stored, or in the batch) is inserted
// waiting (migration 0024).
func insertTasks(ctx context.Context, tx pgx.Tx, planID string, ord int, tasks []plan.Task, steps map[int]int, by string) (int, error) {
	rows := make([]taskRow, len(tasks))
	satisfied := []string{} // the batch's tasks that satisfy a dependency: not waited for
	for i, t := range tasks {
		if t.Status.Satisfies() {
			satisfied = append(satisfied, t.ID)
		}
		v := plan.Gate(t)
		rank := t.Priority.Rank()
		rows[i] = taskRow{
			ID: t.ID, Ord: ord + i, Status: t.Status, Priority: t.Priority, Description: t.Description,
			Dependencies: t.Dependencies, KeyFiles: t.KeyFiles, AcceptanceCriteria: t.AcceptanceCriteria,
			TestSteps: t.TestSteps, PRDRequirement: t.PRDRequirement, Labels: t.Labels, MaxAttempts: t.MaxAttempts,
			GateVerdict: v.Decision, GateReasons: v.Reasons, Rank: rank, Step: steps[rank],
		}
		steps[rank]++
		if rows[i].GateReasons == nil {
			rows[i].GateReasons = []plan.Reason{}
		}
	}
	doc, err := json.Marshal(rows)
	if err != nil {
		return 0, fmt.Errorf("encode tasks: %w", err)
	}
	// The plan's dependency lock (migration 0024) before waiting is read: a dependency
	// that finishes meanwhile unblocks these tasks once they are committed.
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended('whilly:deps:' || $1, 0)), `+indexPaths, planID); err != nil {
		return 0, fmt.Errorf("insert tasks: %w", err)
	}
	var n int
	err = tx.QueryRow(ctx, insertTasksSQL, planID, doc, by, satisfied).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("insert tasks: %w", err)
	}
	return n, nil
}

// insertTasksSQL inserts the tasks $2 (JSON rows, see taskRow) of plan $1 in their
// fair-share places, each with its task.created event (by $3); $4 are the ids of the
// batch's tasks that satisfy a dependency. It answers the number of tasks inserted.
var insertTasksSQL = `
		WITH ` + fairShareSQL + `, ins AS (
			INSERT INTO tasks (plan_id, id, ord, status, priority, description, dependencies, key_files,
			                   acceptance_criteria, test_steps, prd_requirement, labels, max_attempts,
			                   gate_verdict, gate_reasons, plan_seq, share_round, waiting)
			SELECT $1, r.id, r.ord, r.status, r.priority, r.description, r.dependencies, r.key_files,
			       r.acceptance_criteria, r.test_steps, r.prd_requirement, r.labels, r.max_attempts,
			       r.gate_verdict, r.gate_reasons, (SELECT seq FROM plans WHERE id = $1),
			       CASE WHEN r.step = 0 THEN b.first ELSE b.first + 1 + 2 * (SELECT stride FROM share_stride) * (r.step - 1) END,
			       EXISTS (SELECT 1 FROM unnest(r.dependencies) AS d(dep)
			               WHERE coalesce((SELECT x.status FROM tasks x WHERE x.plan_id = $1 AND x.id = d.dep),
			                              CASE WHEN d.dep = ANY ($4::text[]) THEN 'DONE' END, '') NOT IN ('DONE', 'SKIPPED'))
			FROM jsonb_to_recordset($2::jsonb) AS r(
				id text, ord int, status text, priority text, description text, dependencies text[],
				key_files text[], acceptance_criteria text[], test_steps text[], prd_requirement text,
				labels text[], max_attempts int, gate_verdict text, gate_reasons jsonb, rank smallint, step bigint)
			JOIN share_base b ON b.rank = r.rank
			ORDER BY r.ord
			ON CONFLICT (plan_id, id) DO NOTHING
			RETURNING id, ord, status, priority, gate_verdict
		), ev AS (
			INSERT INTO events (plan_id, task_id, type, payload)
			SELECT $1, id, 'task.created',
			       jsonb_build_object('status', status, 'priority', priority, 'gate', gate_verdict) || ` + bySQL("$3") + `
			FROM ins ORDER BY ord
			RETURNING 1
		)
		SELECT count(*) FROM ev`

// shareWalk bounds the fair-share walk of an import (fairShareSQL).
const shareWalk = "256"

// fairShareSQL places the tasks of plan $1 (rows $2, with rank and step) in the claim
// order (migration 0019). Rounds are even; the odd round just before one holds the first
// tasks of plans that came since, so that a new plan's first task is claimed before the
// running plans' next ones (and after the new plans before it), whatever they queued.
// share_base is, for each priority in the batch, that odd round: the head of the claim
// order — the first task a claim of that priority would take now (plan ACTIVE, retry time
// passed, dependencies finished; labels and scopes aside), found by walking
// tasks_claim_fair like a claim — or the odd round before it; -1 when nothing is
// claimable. The walk goes no further than the round of the shareWalk-th pending task
// (bound): when none before it is claimable, that round stands for the head, which can
// only lie further on: tasks held back by a retry, a paused plan, an unfinished dependency
// the waiting flag missed; unbounded, a walk past a chain's waiting tasks (when they were
// in the claim order) cost every import 14–25 ms in bench scale. Each lateral is evaluated
// once (OFFSET 0): inlined, the CASE below ran the walk once for each mention of its
// round. share_base is MATERIALIZED: inlined, the planner joined the batch's rows first
// and walked once for each task (20 walks for an issue's list: the statement took 3.2 ms,
// 2.5 ms with one walk, in a lightly loaded bench scale). The plan's further tasks of that
// priority take the even rounds after it, one each, or every m-th when its installation
// has m live plans (share_stride; plans without an installation are one group), so that an
// installation's many plans together get about what one plan of another installation gets.
const fairShareSQL = `share_base AS MATERIALIZED (
		SELECT k.rank, CASE WHEN h.round IS NULL THEN -1 WHEN h.round % 2 <> 0 THEN h.round ELSE h.round - 1 END AS first
		FROM (SELECT DISTINCT (e->>'rank')::smallint AS rank FROM jsonb_array_elements($2::jsonb) AS e) k
		CROSS JOIN LATERAL (SELECT (
			SELECT t.share_round FROM tasks t
			WHERE t.status = 'PENDING' AND NOT t.waiting AND t.priority_rank = k.rank
			ORDER BY t.share_round, t.plan_seq, t.ord
			OFFSET ` + shareWalk + ` - 1 LIMIT 1) AS bound OFFSET 0) b
		CROSS JOIN LATERAL (SELECT coalesce((
			SELECT t.share_round FROM tasks t
			WHERE t.status = 'PENDING' AND NOT t.waiting AND t.priority_rank = k.rank
			  AND t.share_round <= coalesce(b.bound, 9223372036854775807)
			  AND (t.not_before IS NULL OR t.not_before <= now())
			  AND EXISTS (SELECT 1 FROM plans pl WHERE pl.id = t.plan_id AND pl.status = 'ACTIVE')
			  AND ` + depsFinished + `
			ORDER BY t.share_round, t.plan_seq, t.ord
			LIMIT 1), b.bound) AS round OFFSET 0) h
	), share_stride AS (
		SELECT greatest(count(*), 1) AS stride FROM plans o
		WHERE o.status IN ('ACTIVE', 'PAUSED')
		  AND o.installation_id IS NOT DISTINCT FROM (SELECT installation_id FROM plans WHERE id = $1)
	)`

type verifyRow struct {
	Name     string `json:"name"`
	Command  string `json:"command"`
	Required bool   `json:"required"`
}

func verifyRows(vs []plan.Verify) []verifyRow {
	out := make([]verifyRow, len(vs))
	for i, v := range vs {
		out[i] = verifyRow(v)
	}
	return out
}

// ApplyResult is an import followed by the decision gate.
type ApplyResult struct {
	Import   ImportResult  `json:"import"`
	Verdicts []TaskVerdict `json:"verdicts"`
	Allowed  int           `json:"allowed"`
	Warned   int           `json:"warned"`
	Rejected int           `json:"rejected"`
	Skipped  int           `json:"skipped"`
	Strict   bool          `json:"strict"`
}

// TaskVerdict is the gate's verdict on one task.
type TaskVerdict struct {
	TaskID  string `json:"task_id"`
	Verdict plan.Verdict
}

// MarshalJSON flattens the verdict next to the task id.
func (v TaskVerdict) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		TaskID   string        `json:"task_id"`
		Decision plan.Decision `json:"decision"`
		Reasons  []plan.Reason `json:"reasons"`
	}{v.TaskID, v.Verdict.Decision, v.Verdict.Reasons})
}

// Apply imports p and runs the decision gate on every task of the file. With strict, each
// rejected task still PENDING becomes SKIPPED with a task.skipped event (reason
// decision_gate) and the plan becomes strict, so the control plane re-checks the gate at
// claim. One plan.applied event records the counts. All of it is one transaction.
func (s *Store) Apply(ctx context.Context, p *plan.Plan, strict bool, opts ImportOptions) (ApplyResult, error) {
	res := ApplyResult{Strict: strict}
	s.normalize(p)
	if err := plan.Validate(p); err != nil {
		return res, err
	}
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		var err error
		if res.Import, err = importTx(ctx, tx, p, opts); err != nil {
			return err
		}
		var rejected []string
		for _, t := range p.Tasks {
			v := plan.Gate(t)
			res.Verdicts = append(res.Verdicts, TaskVerdict{TaskID: t.ID, Verdict: v})
			switch v.Decision {
			case plan.DecisionAllow:
				res.Allowed++
			case plan.DecisionWarn:
				res.Warned++
			case plan.DecisionReject:
				res.Rejected++
				rejected = append(rejected, t.ID)
			}
		}
		if strict {
			if _, err := tx.Exec(ctx, `UPDATE plans SET strict = true, updated_at = now() WHERE id = $1 AND NOT strict`, p.ID); err != nil {
				return fmt.Errorf("mark plan %s strict: %w", p.ID, err)
			}
			n, err := skipRejected(ctx, tx, p.ID, rejected)
			if err != nil {
				return err
			}
			res.Skipped = n
		}
		payload := map[string]any{
			"tasks_count": len(p.Tasks), "allowed_count": res.Allowed, "warned_count": res.Warned,
			"rejected_count": res.Rejected, "skipped_count": res.Skipped, "strict": strict,
		}
		if err := insertEvent(ctx, tx, p.ID, "", EventPlanApplied, payload, nil); err != nil {
			return err
		}
		if err := settleImport(ctx, tx, &res.Import, opts.By); err != nil {
			return err
		}
		return s.changed(ctx, tx, p.ID)
	})
	if err != nil {
		return ApplyResult{}, err
	}
	return res, nil
}

// skipRejected moves the PENDING tasks among ids to SKIPPED with a task.skipped event
// carrying the gate's reasons. Tasks already skipped or past PENDING are left alone.
func skipRejected(ctx context.Context, tx pgx.Tx, planID string, ids []string) (int, error) {
	if len(ids) == 0 {
		return 0, nil
	}
	var n int
	err := tx.QueryRow(ctx, `
		WITH sk AS (
			UPDATE tasks SET status = 'SKIPPED', version = version + 1, updated_at = now()
			WHERE plan_id = $1 AND id = ANY($2) AND status = 'PENDING' AND gate_verdict = 'REJECT'
			RETURNING id, ord, gate_reasons
		), ev AS (
			INSERT INTO events (plan_id, task_id, type, payload, detail)
			SELECT $1, id, 'task.skipped', jsonb_build_object('reason', 'decision_gate', 'from', 'PENDING'),
			       jsonb_build_object('reasons', gate_reasons)
			FROM sk ORDER BY ord
			RETURNING 1
		)
		SELECT count(*) FROM ev`, planID, ids).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("skip gate-rejected tasks of plan %s: %w", planID, err)
	}
	return n, nil
}
