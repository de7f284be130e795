package queue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
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
		INSERT INTO plans (id, name, budget_usd, strict, repo, verify, github_issue_ref, installation_id, status, pause_reason)
		VALUES ($1, $2, $3::numeric, $4, NULLIF($5, ''), $6, NULLIF($7, ''), NULLIF($8, 0),
			CASE WHEN $9 = '' THEN 'ACTIVE' ELSE 'PAUSED' END, NULLIF($9, ''))
		ON CONFLICT (id) DO NOTHING`,
		p.ID, p.Name, usdParam(p.Budget), p.Strict, p.Repo, verify, opts.GitHubIssueRef, opts.InstallationID, opts.PauseReason)
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
// priority rank, the tasks of the import placed in the fair-share order so far.
func insertTasks(ctx context.Context, tx pgx.Tx, planID string, ord int, tasks []plan.Task, steps map[int]int, by string) (int, error) {
	rows := make([]taskRow, len(tasks))
	for i, t := range tasks {
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
	var n int
	err = tx.QueryRow(ctx, `
		WITH `+fairShareSQL+`, ins AS (
			INSERT INTO tasks (plan_id, id, ord, status, priority, description, dependencies, key_files,
			                   acceptance_criteria, test_steps, prd_requirement, labels, max_attempts,
			                   gate_verdict, gate_reasons, plan_seq, share_round)
			SELECT $1, r.id, r.ord, r.status, r.priority, r.description, r.dependencies, r.key_files,
			       r.acceptance_criteria, r.test_steps, r.prd_requirement, r.labels, r.max_attempts,
			       r.gate_verdict, r.gate_reasons, (SELECT seq FROM plans WHERE id = $1),
			       CASE WHEN r.step = 0 THEN b.first ELSE b.first + 1 + 2 * (SELECT stride FROM share_stride) * (r.step - 1) END
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
			       jsonb_build_object('status', status, 'priority', priority, 'gate', gate_verdict) || `+bySQL("$3")+`
			FROM ins ORDER BY ord
			RETURNING 1
		)
		SELECT count(*) FROM ev`, planID, doc, by).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("insert tasks: %w", err)
	}
	return n, nil
}

// fairShareSQL places the tasks of plan $1 (rows $2, with rank and step) in the claim
// order (migration 0019). Rounds are even; the odd round just before one holds the first
// tasks of plans that came since, so that a new plan's first task is claimed before the
// running plans' next ones (and after the new plans before it), whatever they queued.
// share_base is, for each priority in the batch, that odd round: the head of the claim
// order — the first task a claim of that priority would take now (plan ACTIVE, retry
// time passed, dependencies finished; labels and scopes aside), found by walking
// tasks_claim_fair like a claim, so it costs what a claim costs — or the odd round before
// it; -1 when nothing is pending. The plan's further tasks of that priority take the even
// rounds after it, one each, or every m-th when its installation has m live plans
// (share_stride; plans without an installation are one group), so that an installation's
// many plans together get about what one plan of another installation gets.
const fairShareSQL = `share_base AS (
		SELECT k.rank, CASE WHEN h.round IS NULL THEN -1 WHEN h.round % 2 <> 0 THEN h.round ELSE h.round - 1 END AS first
		FROM (SELECT DISTINCT (e->>'rank')::smallint AS rank FROM jsonb_array_elements($2::jsonb) AS e) k
		CROSS JOIN LATERAL (SELECT (
			SELECT t.share_round FROM tasks t
			WHERE t.status = 'PENDING' AND t.priority_rank = k.rank
			  AND (t.not_before IS NULL OR t.not_before <= now())
			  AND EXISTS (SELECT 1 FROM plans pl WHERE pl.id = t.plan_id AND pl.status = 'ACTIVE')
			  AND ` + depsFinished + `
			ORDER BY t.share_round, t.plan_seq, t.ord
			LIMIT 1) AS round) h
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

const taskColumns = `plan_id, id, status, priority, description, dependencies, key_files, acceptance_criteria,
	test_steps, prd_requirement, labels, gate_verdict, gate_reasons, attempts, max_attempts, not_before,
	coalesce(lease_id::text, ''), lease_expires_at, coalesce(claimed_by, ''), version,
	(cost_usd * 1000000)::bigint, coalesce(last_error, ''), coalesce(last_output, ''), coalesce(triz_finding, ''),
	coalesce(result, ''), created_at, updated_at, round_context`

func scanTask(row pgx.Row) (TaskInfo, error) { return scanTaskExtra(row) }

// scanTaskExtra scans taskColumns followed by extra columns into extra.
func scanTaskExtra(row pgx.Row, extra ...any) (TaskInfo, error) {
	var (
		t    TaskInfo
		cost int64
	)
	dest := []any{&t.PlanID, &t.ID, &t.Status, &t.Priority, &t.Description, &t.Dependencies, &t.KeyFiles,
		&t.AcceptanceCriteria, &t.TestSteps, &t.PRDRequirement, &t.Labels, &t.Gate.Decision, &t.Gate.Reasons,
		&t.Attempts, &t.MaxAttempts, &t.NotBefore, &t.LeaseID, &t.LeaseExpiresAt, &t.ClaimedBy, &t.Version,
		&cost, &t.LastError, &t.LastOutput, &t.TrizFinding, &t.Result, &t.CreatedAt, &t.UpdatedAt, &t.Round}
	err := row.Scan(append(dest, extra...)...)
	t.Cost = plan.USD(cost)
	return t, err
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

// SetBudget sets a plan's budget cap (nil = unlimited) and writes plan.budget_raised. A
// plan paused on budget that the new cap covers resumes (ACTIVE). by names who set it
// (the event's "by"; empty: not recorded).
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
		resume := status == string(plan.PlanPaused) && reason == "budget" && !plan.Exhausted(budget, plan.USD(spent))
		if _, err := tx.Exec(ctx, `UPDATE plans SET budget_usd = $2::numeric, updated_at = now(),
			status = CASE WHEN $3 THEN 'ACTIVE' ELSE status END,
			pause_reason = CASE WHEN $3 THEN NULL ELSE pause_reason END
			WHERE id = $1`, planID, usdParam(budget), resume); err != nil {
			return fmt.Errorf("set budget of plan %s: %w", planID, err)
		}
		var oldUSD *plan.USD
		if old != nil {
			o := plan.USD(*old)
			oldUSD = &o
		}
		payload := withBy(map[string]any{"from": usdParam(oldUSD), "to": usdParam(budget), "spent_usd": plan.USD(spent).String(), "resumed": resume}, by)
		if err := insertEvent(ctx, tx, planID, "", EventPlanBudgetRaised, payload, nil); err != nil {
			return err
		}
		return s.changed(ctx, tx, planID)
	})
	if err != nil {
		return PlanInfo{}, err
	}
	return s.GetPlan(ctx, planID)
}
