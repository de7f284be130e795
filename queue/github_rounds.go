package queue

// Rounds of a pull request (issue 16): feedback on whilly's pull request — a review, a
// comment, a failing check suite, /whilly retry — becomes one follow-up task of the plan,
// a "round". The SQL of rounds lives here; intake decides what feedback is.

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

// Round triggers, as github_rounds.trigger records them.
const (
	RoundReview  = "review"  // a review (changes requested, or comments), keyed by review id
	RoundComment = "comment" // a comment on the pull request, keyed by comment id
	RoundCheck   = "check"   // a failed check suite on the branch head, keyed by suite id and head
	RoundRetry   = "retry"   // /whilly retry on the pull request, keyed by comment id
)

// Round outcomes, as github_rounds.outcome records them.
const (
	RoundStarted  = "started"
	RoundResolved = "resolved" // a check that passed on re-run before its fix ran
	RoundRefused  = "refused"  // over WHILLY_PR_MAX_ROUNDS or the budget: the plan FAILED
)

// Plan events of rounds. They are persisted: never rename one.
const (
	EventRoundStarted  = "pr.round"
	EventRoundResolved = "pr.round_resolved"
	EventRoundRefused  = "pr.round_refused"
	EventRoundsStopped = "pr.rounds_stopped"
)

// RoundContext is what a round's task prompt says of its round.
type RoundContext struct {
	Number  int    `json:"number"`
	Trigger string `json:"trigger"` // RoundReview …
	// Summary says what triggered the round, in whilly's words ("changes requested by
	// @alice in review 42", "check suite 7 failed: build, lint").
	Summary string `json:"summary"`
	// Commits are the commits whilly already pushed to the branch for the plan, oldest
	// first: "SHA TASK: first line of its description".
	Commits []string `json:"commits,omitempty"`
}

// RoundRequest asks for a round on a plan's pull request.
type RoundRequest struct {
	PlanID    string
	Repo      string // owner/name of the pull request
	Number    int
	Trigger   string // RoundReview …
	TriggerID string // the review, comment or check suite id
	HeadSHA   string // the branch head the feedback is about, when known
	Summary   string // one line for the status comment and the prompt
	// Description is the follow-up task's description: the feedback itself (hidden
	// content stripped; the prompt fences it as untrusted).
	Description string
	// KeyFiles are the files the feedback names (review comments' paths).
	KeyFiles []string
	// MaxRounds is WHILLY_PR_MAX_ROUNDS: rounds after the first per pull request.
	MaxRounds int
	// ByHand (/whilly retry) starts the round past the limit and after /whilly stop; the
	// budget still applies.
	ByHand bool
	// RequireApproval (WHILLY_REQUIRE_APPROVAL): the round's task changes the plan's
	// digest, so the plan waits PAUSED (reason approval) until its new digest is approved,
	// whatever its state was; a task already running finishes.
	RequireApproval bool
	// Analysis, when set, is shown to the failure analyzer (the TaskFailed hook runs for
	// the new task as for a failed attempt) and the task waits up to AnalysisWait for
	// its finding.
	Analysis     *RoundAnalysis
	AnalysisWait time.Duration
}

// RoundAnalysis is the failure a round answers, for the failure analyzer.
type RoundAnalysis struct {
	Reason  string
	Excerpt string
}

// RoundResult says what StartRound did.
type RoundResult struct {
	Outcome string // RoundStarted, RoundRefused, or RoundDuplicate, RoundStopped, RoundClosed
	Round   int
	TaskID  string
	Reason  string // why refused, stopped or closed
}

// StartRound outcomes that write no round.
const (
	RoundDuplicate = "duplicate" // the trigger already made its round (a redelivery)
	RoundStopped   = "stopped"   // /whilly stop ended the loop
	RoundClosed    = "closed"    // the plan is cancelled or failed: nothing to add to
)

// RoundTaskPrefix starts the id of a round's task: pr-round-2, pr-round-3 …
const RoundTaskPrefix = "pr-round-"

// StartRound adds a round to the plan, in one transaction, once per trigger: the next
// round number of the pull request; refused (recorded, plan FAILED with the reason, a
// pr.round_refused event) when the plan's budget is spent or the pull request has had
// MaxRounds rounds already; else one task that depends on the plan's last task — so
// feedback that arrives while a round runs waits for it, and is the next round — the
// plan back to ACTIVE (plan.reopened; under RequireApproval PAUSED awaiting approval
// of its new digest, from any state) and a pr.round event. The PlanChanged hook runs, so
// the mirror turns the pull request back into a draft and shows the round.
func (s *Store) StartRound(ctx context.Context, req RoundRequest) (RoundResult, error) {
	var res RoundResult
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		st, err := lockPlan(ctx, tx, req.PlanID)
		if err != nil {
			return err
		}
		var dup bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM github_rounds
			WHERE lower(repo) = lower($1) AND number = $2 AND trigger = $3 AND trigger_id = $4)`,
			req.Repo, req.Number, req.Trigger, req.TriggerID).Scan(&dup); err != nil {
			return fmt.Errorf("look up round of %s#%d: %w", req.Repo, req.Number, err)
		}
		if dup {
			res = RoundResult{Outcome: RoundDuplicate}
			return nil
		}
		if st == plan.PlanCancelled || (st == plan.PlanFailed && !req.ByHand) {
			res = RoundResult{Outcome: RoundClosed, Reason: "plan " + req.PlanID + " is " + strings.ToLower(string(st))}
			return nil
		}
		var (
			stoppedBy      string
			done, last     int
			budget         *int64
			spent          int64
			lastTask       string
			existingRounds int
		)
		err = tx.QueryRow(ctx, `SELECT coalesce((SELECT rounds_stopped_by FROM github_pulls WHERE plan_id = $1), ''),
			(SELECT count(*) FROM github_rounds WHERE lower(repo) = lower($2) AND number = $3 AND outcome = 'started'),
			(SELECT coalesce(max(round), 1) FROM github_rounds WHERE lower(repo) = lower($2) AND number = $3),
			(SELECT count(*) FROM github_rounds WHERE plan_id = $1),
			(p.budget_usd * 1000000)::bigint, (p.spent_usd * 1000000)::bigint,
			coalesce((SELECT id FROM tasks WHERE plan_id = $1 ORDER BY ord DESC LIMIT 1), '')
			FROM plans p WHERE p.id = $1`, req.PlanID, req.Repo, req.Number).
			Scan(&stoppedBy, &done, &last, &existingRounds, &budget, &spent, &lastTask)
		if err != nil {
			return fmt.Errorf("read rounds of plan %s: %w", req.PlanID, err)
		}
		if stoppedBy != "" && !req.ByHand {
			res = RoundResult{Outcome: RoundStopped, Reason: "rounds stopped by " + stoppedBy}
			return nil
		}
		res.Round = last + 1
		var budgetCap *plan.USD
		if budget != nil {
			c := plan.USD(*budget)
			budgetCap = &c
		}
		switch {
		case plan.Exhausted(budgetCap, plan.USD(spent)):
			res.Reason = fmt.Sprintf("the plan's budget is spent ($%s of $%s)", plan.USD(spent), *budgetCap)
		case done >= req.MaxRounds && !req.ByHand:
			res.Reason = fmt.Sprintf("the pull request had its %d follow-up rounds (WHILLY_PR_MAX_ROUNDS)", req.MaxRounds)
		}
		if res.Reason != "" {
			res.Outcome = RoundRefused
			return s.refuseRound(ctx, tx, req, st, res)
		}
		res.Outcome = RoundStarted
		return s.addRoundTask(ctx, tx, req, st, lastTask, &res)
	})
	if err != nil {
		return RoundResult{}, err
	}
	return res, nil
}

// refuseRound records a refused round and ends the plan FAILED with the reason.
func (s *Store) refuseRound(ctx context.Context, tx pgx.Tx, req RoundRequest, st plan.PlanStatus, res RoundResult) error {
	if err := insertRound(ctx, tx, req, res.Round, "", RoundRefused, res.Reason); err != nil {
		return err
	}
	payload := map[string]any{"round": res.Round, "trigger": req.Trigger, "reason": res.Reason, "number": req.Number}
	if err := insertEvent(ctx, tx, req.PlanID, "", EventRoundRefused, payload, map[string]any{"summary": req.Summary}); err != nil {
		return err
	}
	if st != plan.PlanFailed {
		if _, err := tx.Exec(ctx, `UPDATE plans SET status = 'FAILED', pause_reason = NULL, updated_at = now() WHERE id = $1`, req.PlanID); err != nil {
			return fmt.Errorf("fail plan %s: %w", req.PlanID, err)
		}
		if err := insertEvent(ctx, tx, req.PlanID, "", EventPlanFailed, map[string]any{"from": st, "reason": res.Reason}, nil); err != nil {
			return err
		}
	}
	return s.changed(ctx, tx, req.PlanID)
}

func insertRound(ctx context.Context, tx pgx.Tx, req RoundRequest, round int, taskID, outcome, reason string) error {
	_, err := tx.Exec(ctx, `INSERT INTO github_rounds (plan_id, repo, number, round, trigger, trigger_id, head_sha, task_id, summary, outcome, reason)
		VALUES ($1, $2, $3, $4, $5, $6, NULLIF($7, ''), NULLIF($8, ''), $9, $10, NULLIF($11, ''))`,
		req.PlanID, req.Repo, req.Number, round, req.Trigger, req.TriggerID, req.HeadSHA, taskID, req.Summary, outcome, reason)
	if err != nil {
		return fmt.Errorf("record round %d of %s#%d: %w", round, req.Repo, req.Number, err)
	}
	return nil
}

// addRoundTask inserts the round's task after lastTask, reopens the plan and records
// the round.
func (s *Store) addRoundTask(ctx context.Context, tx pgx.Tx, req RoundRequest, st plan.PlanStatus, lastTask string, res *RoundResult) error {
	id := fmt.Sprintf("%s%d", RoundTaskPrefix, res.Round)
	for n := 2; ; n++ {
		var taken bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM tasks WHERE plan_id = $1 AND id = $2)`, req.PlanID, id).Scan(&taken); err != nil {
			return fmt.Errorf("check task id %s: %w", id, err)
		}
		if !taken {
			break
		}
		id = fmt.Sprintf("%s%d-%d", RoundTaskPrefix, res.Round, n)
	}
	t := plan.Task{
		ID: id, Status: plan.StatusPending, Priority: plan.PriorityHigh, Description: req.Description,
		KeyFiles: req.KeyFiles, MaxAttempts: s.cfg.MaxAttempts,
		AcceptanceCriteria: []string{"Every point of the feedback above is addressed on the branch, or the summary says why not"},
		TestSteps:          []string{"Run the repository's tests and checks that the feedback concerns; they pass"},
	}
	if lastTask != "" {
		t.Dependencies = []string{lastTask}
	}
	t.Dependencies, t.KeyFiles, t.Labels = nonNil(t.Dependencies), nonNil(t.KeyFiles), []string{}
	var ord int
	if err := tx.QueryRow(ctx, `SELECT coalesce(max(ord) + 1, 0) FROM tasks WHERE plan_id = $1`, req.PlanID).Scan(&ord); err != nil {
		return fmt.Errorf("read task order of plan %s: %w", req.PlanID, err)
	}
	if _, err := insertTasks(ctx, tx, req.PlanID, ord, []plan.Task{t}, map[int]int{}, ""); err != nil {
		return fmt.Errorf("add round %d to plan %s: %w", res.Round, req.PlanID, err)
	}
	commits, err := branchCommits(ctx, tx, req.PlanID)
	if err != nil {
		return err
	}
	rc, err := json.Marshal(RoundContext{Number: res.Round, Trigger: req.Trigger, Summary: req.Summary, Commits: commits})
	if err != nil {
		return fmt.Errorf("encode round context: %w", err)
	}
	hold := req.Analysis != nil && s.cfg.Hooks.TaskFailed != nil && req.AnalysisWait > 0
	var version int
	if err := tx.QueryRow(ctx, `UPDATE tasks SET round_context = $3,
			not_before = CASE WHEN $4 THEN now() + make_interval(secs => $5) ELSE NULL END
		WHERE plan_id = $1 AND id = $2 RETURNING version`, req.PlanID, id, rc, hold, req.AnalysisWait.Seconds()).Scan(&version); err != nil {
		return fmt.Errorf("record round context of task %s: %w", id, err)
	}
	if err := reopenForRound(ctx, tx, req, st, res.Round); err != nil {
		return err
	}
	if err := insertRound(ctx, tx, req, res.Round, id, RoundStarted, ""); err != nil {
		return err
	}
	payload := map[string]any{"round": res.Round, "trigger": req.Trigger, "trigger_id": req.TriggerID, "number": req.Number}
	if err := insertEvent(ctx, tx, req.PlanID, id, EventRoundStarted, payload, map[string]any{"summary": req.Summary}); err != nil {
		return err
	}
	res.TaskID = id
	if req.Analysis != nil && s.cfg.Hooks.TaskFailed != nil {
		detail, err := json.Marshal(map[string]any{"excerpt": req.Analysis.Excerpt})
		if err != nil {
			return fmt.Errorf("encode analysis of round %d: %w", res.Round, err)
		}
		f := TaskFailure{PlanID: req.PlanID, TaskID: id, Attempt: 0, Version: version, Reason: req.Analysis.Reason, Detail: detail}
		if err := s.cfg.Hooks.TaskFailed(ctx, tx, f); err != nil {
			return fmt.Errorf("analyze round %d of plan %s: %w", res.Round, req.PlanID, err)
		}
	}
	return s.changed(ctx, tx, req.PlanID)
}

// reopenForRound sets the plan's status for a round's new task: ACTIVE again when it had
// ended; under approval PAUSED (reason approval) from any state, because the task — feedback
// and CI output, not the text that was approved — changed what the plan asks of agents.
func reopenForRound(ctx context.Context, tx pgx.Tx, req RoundRequest, st plan.PlanStatus, round int) error {
	var reason string
	if err := tx.QueryRow(ctx, `SELECT coalesce(pause_reason, '') FROM plans WHERE id = $1`, req.PlanID).Scan(&reason); err != nil {
		return fmt.Errorf("read plan %s: %w", req.PlanID, err)
	}
	ended := st != plan.PlanActive && st != plan.PlanPaused
	switch {
	case req.RequireApproval && (st != plan.PlanPaused || reason != PauseApproval):
		if _, err := tx.Exec(ctx, `UPDATE plans SET status = 'PAUSED', pause_reason = $2, updated_at = now() WHERE id = $1`, req.PlanID, PauseApproval); err != nil {
			return fmt.Errorf("pause plan %s for approval of round %d: %w", req.PlanID, round, err)
		}
		payload := map[string]any{"from": st, "tasks_created": 1, "round": round, "pause_reason": PauseApproval}
		typ := EventPlanReopened
		if !ended {
			typ = EventPlanPaused
			payload = map[string]any{"from": st, "round": round, "pause_reason": PauseApproval, "by": "whilly"}
		}
		return insertEvent(ctx, tx, req.PlanID, "", typ, payload, nil)
	case ended:
		if _, err := tx.Exec(ctx, `UPDATE plans SET status = 'ACTIVE', pause_reason = NULL, updated_at = now() WHERE id = $1`, req.PlanID); err != nil {
			return fmt.Errorf("reopen plan %s: %w", req.PlanID, err)
		}
		return insertEvent(ctx, tx, req.PlanID, "", EventPlanReopened, map[string]any{"from": st, "tasks_created": 1, "round": round}, nil)
	}
	return nil
}

// maxBranchCommits bounds the commits a round's prompt lists.
const maxBranchCommits = 50

// branchCommits lists the commits the plan's tasks pushed (their COMPLETE events' heads),
// oldest first, as "SHA TASK: first line of the description".
func branchCommits(ctx context.Context, tx pgx.Tx, planID string) ([]string, error) {
	rows, err := tx.Query(ctx, `SELECT left(e.payload->>'head_sha', 12), t.id, t.description
		FROM events e JOIN tasks t ON t.plan_id = e.plan_id AND t.id = e.task_id
		WHERE e.plan_id = $1 AND e.type = 'COMPLETE' AND e.payload ? 'head_sha' AND e.payload->>'head_sha' <> ''
		ORDER BY e.id DESC LIMIT $2`, planID, maxBranchCommits)
	if err != nil {
		return nil, fmt.Errorf("list commits of plan %s: %w", planID, err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (string, error) {
		var sha, id, desc string
		if err := r.Scan(&sha, &id, &desc); err != nil {
			return "", err
		}
		line, _, _ := strings.Cut(strings.TrimSpace(desc), "\n")
		if len(line) > 100 {
			line = line[:100] + "…"
		}
		return sha + " " + id + ": " + line, nil
	})
	if err != nil {
		return nil, fmt.Errorf("list commits of plan %s: %w", planID, err)
	}
	for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
	return out, nil
}

// ResolveCheckRound ends without work the check round of a pull request whose suite
// passed on re-run on the same head: its task, not started yet, is SKIPPED (task.skipped,
// reason check_passed), the round resolved (pr.round_resolved) and the plan settles (DONE
// when nothing else is left). It returns the round resolved, 0 when there was none.
func (s *Store) ResolveCheckRound(ctx context.Context, repo string, number int, headSHA string) (int, error) {
	var round int
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		var planID, taskID string
		err := tx.QueryRow(ctx, `SELECT r.plan_id, r.task_id, r.round FROM github_rounds r
			JOIN tasks t ON t.plan_id = r.plan_id AND t.id = r.task_id
			WHERE lower(r.repo) = lower($1) AND r.number = $2 AND r.trigger = 'check' AND r.head_sha = $3
			  AND r.outcome = 'started' AND t.status = 'PENDING'
			ORDER BY r.round DESC LIMIT 1`, repo, number, headSHA).Scan(&planID, &taskID, &round)
		if errors.Is(err, pgx.ErrNoRows) {
			round = 0
			return nil
		}
		if err != nil {
			return fmt.Errorf("find the check round of %s#%d: %w", repo, number, err)
		}
		st, err := lockPlan(ctx, tx, planID)
		if err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, `UPDATE tasks SET status = 'SKIPPED', version = version + 1, updated_at = now()
			WHERE plan_id = $1 AND id = $2 AND status = 'PENDING'`, planID, taskID)
		if err != nil {
			return fmt.Errorf("skip task %s of plan %s: %w", taskID, planID, err)
		}
		if tag.RowsAffected() == 0 {
			round = 0 // claimed meanwhile: the fix runs
			return nil
		}
		if err := insertEvent(ctx, tx, planID, taskID, EventTaskSkipped, map[string]any{"reason": "check_passed", "from": "PENDING"}, nil); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE github_rounds SET outcome = 'resolved' WHERE plan_id = $1 AND round = $2 AND lower(repo) = lower($3) AND number = $4`,
			planID, round, repo, number); err != nil {
			return fmt.Errorf("resolve round %d of %s#%d: %w", round, repo, number, err)
		}
		if err := insertEvent(ctx, tx, planID, "", EventRoundResolved, map[string]any{"round": round, "head_sha": headSHA}, nil); err != nil {
			return err
		}
		if err := settlePlan(ctx, tx, planID, st); err != nil {
			return err
		}
		return s.changed(ctx, tx, planID)
	})
	if err != nil {
		return 0, err
	}
	return round, nil
}

// StopRounds ends the plan's review/CI loop (/whilly stop): no feedback starts a round
// any more, but /whilly retry. A round under way finishes. It reports false when the
// loop was already stopped or the plan has no pull request.
func (s *Store) StopRounds(ctx context.Context, planID, by string) (bool, error) {
	stopped := false
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `UPDATE github_pulls SET rounds_stopped_by = $2, updated_at = now()
			WHERE plan_id = $1 AND rounds_stopped_by IS NULL`, planID, by)
		if err != nil {
			return fmt.Errorf("stop rounds of plan %s: %w", planID, err)
		}
		if tag.RowsAffected() == 0 {
			return nil
		}
		stopped = true
		if err := insertEvent(ctx, tx, planID, "", EventRoundsStopped, map[string]any{"by": by}, nil); err != nil {
			return err
		}
		return s.changed(ctx, tx, planID)
	})
	return stopped, err
}

// Round is a round of a plan's pull request, as the status comment shows it.
type Round struct {
	Round     int
	Trigger   string
	Summary   string
	TaskID    string
	Outcome   string
	Reason    string
	CreatedAt time.Time
}

// PullRounds is a plan's rounds, oldest first, and who stopped the loop ("" when nobody).
type PullRounds struct {
	Rounds    []Round
	StoppedBy string
}

// Rounds returns the rounds of a plan's pull request.
func (s *Store) Rounds(ctx context.Context, planID string) (PullRounds, error) {
	var out PullRounds
	rows, err := s.pool.Query(ctx, `SELECT round, trigger, summary, coalesce(task_id, ''), outcome, coalesce(reason, ''), created_at
		FROM github_rounds WHERE plan_id = $1 ORDER BY round`, planID)
	if err != nil {
		return out, fmt.Errorf("list rounds of plan %s: %w", planID, err)
	}
	out.Rounds, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (Round, error) {
		var x Round
		err := r.Scan(&x.Round, &x.Trigger, &x.Summary, &x.TaskID, &x.Outcome, &x.Reason, &x.CreatedAt)
		return x, err
	})
	if err != nil {
		return out, fmt.Errorf("list rounds of plan %s: %w", planID, err)
	}
	err = s.pool.QueryRow(ctx, `SELECT coalesce((SELECT rounds_stopped_by FROM github_pulls WHERE plan_id = $1), '')`, planID).Scan(&out.StoppedBy)
	if err != nil {
		return out, fmt.Errorf("read rounds of plan %s: %w", planID, err)
	}
	return out, nil
}

// PullOf returns the pull request whilly opened for a plan in repo with that number
// (lower-case compare), the most recent plan's when a second intake reused it;
// ErrNotFound when it is none of whilly's.
func (s *Store) PullOf(ctx context.Context, repo string, number int) (PullRequest, error) {
	return s.findPull(ctx, `lower(repo) = lower($1) AND number = $2`, repo, number)
}

// PullOfBranch returns whilly's open pull request from a branch of repo (the most
// recent plan's); ErrNotFound when there is none.
func (s *Store) PullOfBranch(ctx context.Context, repo, branch string) (PullRequest, error) {
	return s.findPull(ctx, `lower(repo) = lower($1) AND branch = $2 AND state = 'open'`, repo, branch)
}

// PullOfPlan returns the pull request a plan's commits are delivered in; ErrNotFound
// until one is opened.
func (s *Store) PullOfPlan(ctx context.Context, planID string) (PullRequest, error) {
	return s.findPull(ctx, `plan_id = $1`, planID)
}

func (s *Store) findPull(ctx context.Context, where string, args ...any) (PullRequest, error) {
	var pr PullRequest
	err := s.pool.QueryRow(ctx, `SELECT plan_id, repo, number, node_id, url, branch, state, draft, body_sha256
		FROM github_pulls WHERE `+where+` ORDER BY created_at DESC, plan_id DESC LIMIT 1`, args...).
		Scan(&pr.PlanID, &pr.Repo, &pr.Number, &pr.NodeID, &pr.URL, &pr.Branch, &pr.State, &pr.Draft, &pr.BodySHA256)
	if errors.Is(err, pgx.ErrNoRows) {
		return pr, fmt.Errorf("pull request of %v: %w", args, ErrNotFound)
	}
	if err != nil {
		return pr, fmt.Errorf("find pull request of %v: %w", args, err)
	}
	return pr, nil
}

// PlanHead returns the branch head the plan's last push reported ("" when none).
func (s *Store) PlanHead(ctx context.Context, planID string) (string, error) {
	var sha string
	err := s.pool.QueryRow(ctx, `SELECT coalesce((SELECT payload->>'head_sha' FROM events
		WHERE plan_id = $1 AND type = 'COMPLETE' AND payload ? 'head_sha' AND payload->>'head_sha' <> ''
		ORDER BY id DESC LIMIT 1), '')`, planID).Scan(&sha)
	if err != nil {
		return "", fmt.Errorf("read the branch head of plan %s: %w", planID, err)
	}
	return sha, nil
}

// SetPullDraft records that the plan's pull request is a draft again (a round began).
// Bookkeeping of the mirror: no hook runs.
func (s *Store) SetPullDraft(ctx context.Context, planID string) error {
	if _, err := s.pool.Exec(ctx, `UPDATE github_pulls SET draft = true, updated_at = now() WHERE plan_id = $1`, planID); err != nil {
		return fmt.Errorf("record pull request of plan %s draft: %w", planID, err)
	}
	return nil
}

// RoundExists reports whether a trigger already made its round (started or refused):
// a redelivered review or check suite then costs no call to GitHub. StartRound decides
// again under the plan's lock.
func (s *Store) RoundExists(ctx context.Context, repo string, number int, trigger, triggerID string) (bool, error) {
	var ok bool
	err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM github_rounds
		WHERE lower(repo) = lower($1) AND number = $2 AND trigger = $3 AND trigger_id = $4)`, repo, number, trigger, triggerID).Scan(&ok)
	if err != nil {
		return false, fmt.Errorf("look up round of %s#%d: %w", repo, number, err)
	}
	return ok, nil
}
