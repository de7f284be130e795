package queue

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/whilly-go/whilly/plan"
)

// Pause and approval: the one place where the fleet and plans are paused,
// resumed and approved. The API, the CLI (through the API or on the local database), the
// /whilly comment commands and the dashboard's buttons all call these functions. Each
// takes who asks (an Actor), refuses a plan outside the actor's scopes exactly like one
// that does not exist (ErrNotFound), writes its event with the actor's name in the same
// transaction as the change, and marks the plans whose GitHub status comment must say so
// (the PlanChanged hook: the mirror's job is inserted in the same transaction).

// Actor is who pauses, resumes or approves: By names them in the event ("token:OWNER",
// "@login", a local user …); Scopes limit the plans they may change (empty: every plan;
// the caller derives them — an API token's scopes, the repositories a signed-in GitHub
// user may write to, the repository for a comment command).
type Actor struct {
	By     string
	Scopes Scopes
}

// Event types of pause and approval. They are persisted: never rename one.
const (
	// EventSystemPaused and EventSystemResumed have no plan: the whole fleet.
	EventSystemPaused  = "system.paused"
	EventSystemResumed = "system.resumed"
	EventPlanPaused    = "plan.paused"
	EventPlanResumed   = "plan.resumed"
	EventPlanApproved  = "plan.approved"
)

// Pause reasons: plans.pause_reason of a PAUSED plan.
const (
	// PauseBudget: the plan reached its budget; raising it resumes the plan (SetBudget).
	PauseBudget = "budget"
	// PauseApproval: the plan waits for ApprovePlan (WHILLY_REQUIRE_APPROVAL).
	PauseApproval = "approval"
	// PauseOperator: paused by PausePlan; ResumePlan resumes it.
	PauseOperator = "operator"
)

var (
	// ErrStaleDigest: the digest given to ApprovePlan is not the plan's digest now (the
	// plan changed since it was shown). It is also an ErrConflict.
	ErrStaleDigest = errors.New("stale digest")
	// ErrForbidden: the actor may not make this change at all (a scoped actor pausing the
	// whole fleet).
	ErrForbidden = errors.New("forbidden")
)

// Fleet is the state of the global pause.
type Fleet struct {
	Paused   bool       `json:"paused"`
	PausedBy string     `json:"paused_by,omitempty"`
	PausedAt *time.Time `json:"paused_at,omitempty"`
	// Changed says the call that returned it paused or resumed the fleet; false when the
	// fleet already was in the state asked for (nothing written).
	Changed bool `json:"changed"`
}

// fleetRunning is the claim's condition for the global pause (claim.go): one primary-key
// probe of the one-row fleet table.
const fleetRunning = `NOT EXISTS (SELECT 1 FROM fleet WHERE paused)`

// GetFleet returns the state of the global pause.
func (s *Store) GetFleet(ctx context.Context) (Fleet, error) {
	var f Fleet
	err := s.pool.QueryRow(ctx, `SELECT paused, coalesce(paused_by, ''), paused_at FROM fleet`).Scan(&f.Paused, &f.PausedBy, &f.PausedAt)
	if err != nil {
		return f, fmt.Errorf("read the fleet's pause: %w", err)
	}
	return f, nil
}

// PauseFleet stops every new claim, on every plan, until ResumeFleet: a waiting worker
// gets nothing (its long-poll keeps waiting, then answers 204). Attempts already running
// go on and may complete, fail or be released. It writes system.paused with the actor, and marks
// every live plan tied to an issue changed, so their status comments say the fleet is
// paused. Pausing a paused fleet changes nothing and writes nothing (Changed false).
// A claim whose statement began before the pause committed may still land; none that
// begins after it does.
func (s *Store) PauseFleet(ctx context.Context, a Actor) (Fleet, error) {
	return s.setFleet(ctx, true, a)
}

// ResumeFleet lets claims run again and writes system.resumed with the actor; the event wakes
// waiting workers at once (LISTEN/NOTIFY). Resuming a running fleet changes nothing and
// writes nothing (Changed false).
func (s *Store) ResumeFleet(ctx context.Context, a Actor) (Fleet, error) {
	return s.setFleet(ctx, false, a)
}

// setFleet pauses or resumes the fleet. Only an actor without scopes may: the fleet
// serves every plan.
func (s *Store) setFleet(ctx context.Context, paused bool, a Actor) (Fleet, error) {
	var f Fleet
	if !a.Scopes.Unlimited() {
		return f, fmt.Errorf("a scoped actor cannot pause or resume the whole fleet: %w", ErrForbidden)
	}
	by := a.By
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		var was bool
		if err := tx.QueryRow(ctx, `SELECT paused FROM fleet FOR UPDATE`).Scan(&was); err != nil {
			return fmt.Errorf("lock the fleet's pause: %w", err)
		}
		if was != paused {
			f.Changed = true
			if _, err := tx.Exec(ctx, `UPDATE fleet SET paused = $1,
				paused_by = CASE WHEN $1 THEN NULLIF($2, '') END, paused_at = CASE WHEN $1 THEN now() END`, paused, by); err != nil {
				return fmt.Errorf("set the fleet's pause: %w", err)
			}
			typ := EventSystemResumed
			if paused {
				typ = EventSystemPaused
			}
			p, err := jsonObject(withBy(map[string]any{}, a.By))
			if err != nil {
				return fmt.Errorf("encode %s payload: %w", typ, err)
			}
			if _, err := tx.Exec(ctx, `INSERT INTO events (plan_id, type, payload) VALUES (NULL, $1, $2)`, typ, p); err != nil {
				return fmt.Errorf("insert %s event: %w", typ, err)
			}
			var ids []string
			if err := tx.QueryRow(ctx, `SELECT coalesce(array_agg(id ORDER BY id), '{}') FROM plans
				WHERE status IN ('ACTIVE', 'PAUSED') AND github_issue_ref IS NOT NULL`).Scan(&ids); err != nil {
				return fmt.Errorf("list live plans of issues: %w", err)
			}
			if err := s.changed(ctx, tx, ids...); err != nil {
				return err
			}
		}
		return tx.QueryRow(ctx, `SELECT paused, coalesce(paused_by, ''), paused_at FROM fleet`).Scan(&f.Paused, &f.PausedBy, &f.PausedAt)
	})
	if err != nil {
		return Fleet{}, err
	}
	return f, nil
}

// PlanChange is what PausePlan, ResumePlan and ApprovePlan did.
type PlanChange struct {
	Plan PlanInfo `json:"plan"`
	// Changed is false when the plan already was in the state asked for (nothing written).
	Changed bool `json:"changed"`
	// Digest is the plan's content digest (plan.Digest) that ApprovePlan approved.
	Digest string `json:"digest,omitempty"`
}

// lockPlanPause locks a plan's row for a change of its status and returns its status and
// pause reason. A plan outside the actor's scopes is ErrNotFound.
func lockPlanPause(ctx context.Context, tx pgx.Tx, planID string, a Actor) (plan.PlanStatus, string, error) {
	var (
		st     plan.PlanStatus
		reason string
	)
	err := tx.QueryRow(ctx, `SELECT p.status, coalesce(p.pause_reason, '') FROM plans p
		WHERE p.id = $1 AND `+scopeMatchSQL("$2")+` FOR UPDATE`, planID, a.Scopes.Strings()).Scan(&st, &reason)
	if errors.Is(err, pgx.ErrNoRows) {
		return st, reason, fmt.Errorf("plan %s: %w", planID, ErrNotFound)
	}
	if err != nil {
		return st, reason, fmt.Errorf("lock plan %s: %w", planID, err)
	}
	return st, reason, nil
}

// setPlanStatus moves a locked plan to ACTIVE or PAUSED (with reason), writes the event
// typ with payload and runs the PlanChanged hook.
func (s *Store) setPlanStatus(ctx context.Context, tx pgx.Tx, planID string, to plan.PlanStatus, reason, typ string, payload map[string]any) error {
	if _, err := tx.Exec(ctx, `UPDATE plans SET status = $2, pause_reason = NULLIF($3, ''), updated_at = now() WHERE id = $1`,
		planID, to, reason); err != nil {
		return fmt.Errorf("set plan %s %s: %w", planID, to, err)
	}
	if err := insertEvent(ctx, tx, planID, "", typ, payload, nil); err != nil {
		return err
	}
	return s.changed(ctx, tx, planID)
}

// PausePlan stops new claims of an ACTIVE plan (PAUSED, reason operator) and writes
// plan.paused with the actor. Attempts already running go on and may finish. A plan already
// paused, for whatever reason, is left as it is (Changed false); a plan that has ended
// is ErrConflict.
func (s *Store) PausePlan(ctx context.Context, planID string, a Actor) (PlanChange, error) {
	var ch PlanChange
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		st, _, err := lockPlanPause(ctx, tx, planID, a)
		if err != nil {
			return err
		}
		switch st {
		case plan.PlanPaused:
			return nil
		case plan.PlanActive:
			ch.Changed = true
			return s.setPlanStatus(ctx, tx, planID, plan.PlanPaused, PauseOperator, EventPlanPaused, withBy(map[string]any{}, a.By))
		case plan.PlanDone, plan.PlanFailed, plan.PlanCancelled:
		}
		return fmt.Errorf("plan %s is %s: only an active plan can be paused: %w", planID, st, ErrConflict)
	})
	return s.planChange(ctx, planID, ch, err)
}

// ResumePlan makes a plan paused by PausePlan ACTIVE again and writes plan.resumed with
// the actor. A plan paused on its budget resumes when its budget is raised (SetBudget), a plan
// awaiting approval when it is approved (ApprovePlan): both are ErrConflict here, saying
// so, as is a plan that has ended. An ACTIVE plan is left as it is (Changed false).
func (s *Store) ResumePlan(ctx context.Context, planID string, a Actor) (PlanChange, error) {
	var ch PlanChange
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		st, reason, err := lockPlanPause(ctx, tx, planID, a)
		if err != nil {
			return err
		}
		switch {
		case st == plan.PlanActive:
			return nil
		case st == plan.PlanPaused && reason == PauseBudget:
			return fmt.Errorf("plan %s is paused on its budget: raise the budget to resume it: %w", planID, ErrConflict)
		case st == plan.PlanPaused && reason == PauseApproval:
			return fmt.Errorf("plan %s awaits approval: approve it (with its digest) to start it: %w", planID, ErrConflict)
		case st == plan.PlanPaused:
			ch.Changed = true
			return s.setPlanStatus(ctx, tx, planID, plan.PlanActive, "", EventPlanResumed, withBy(map[string]any{"pause_reason": reason}, a.By))
		}
		return fmt.Errorf("plan %s is %s: only a paused plan can be resumed: %w", planID, st, ErrConflict)
	})
	return s.planChange(ctx, planID, ch, err)
}

// ApprovePlan starts a plan that awaits approval (PAUSED, reason approval): it becomes
// ACTIVE and plan.approved records the actor and the digest approved. digest is the plan's
// content digest (plan.Digest) as the approver saw it: when it is not the plan's digest
// now — the plan changed since — nothing is written and the error is ErrStaleDigest (and
// ErrConflict). An empty digest approves the plan as it is now (an admin on the CLI or
// API). A plan not awaiting approval is ErrConflict; the digest is checked under the
// plan's row lock, so no change of the plan can slip between the check and the approval.
func (s *Store) ApprovePlan(ctx context.Context, planID, digest string, a Actor) (PlanChange, error) {
	var ch PlanChange
	want := ""
	if digest != "" {
		d, ok := plan.NormalizeDigest(digest)
		if !ok {
			return ch, fmt.Errorf("the digest must be the plan's digest: %d hexadecimal digits: %w", plan.DigestLen, ErrInvalid)
		}
		want = d
	}
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		st, reason, err := lockPlanPause(ctx, tx, planID, a)
		if err != nil {
			return err
		}
		if st != plan.PlanPaused || reason != PauseApproval {
			return fmt.Errorf("plan %s does not await approval (it is %s): %w", planID, describeStatus(st, reason), ErrConflict)
		}
		p, err := planDefinition(ctx, tx, planID)
		if err != nil {
			return err
		}
		have := plan.Digest(p)
		switch {
		case want == "" || want == have:
		case want == plan.DigestV1(p):
			// Shown before the digest covered the plan's name: it cannot say the name
			// was seen, so it approves nothing; the status comment now shows the digest.
			return fmt.Errorf("digest %s of plan %s is of whilly's earlier digest format, which did not cover the plan's name; "+
				"review the plan and approve the digest its status comment shows now: %w: %w", want[:12], planID, ErrStaleDigest, ErrConflict)
		default:
			return fmt.Errorf("plan %s changed since digest %s was shown; review it and approve its digest now: %w: %w",
				planID, want[:12], ErrStaleDigest, ErrConflict)
		}
		ch.Changed, ch.Digest = true, have
		return s.setPlanStatus(ctx, tx, planID, plan.PlanActive, "", EventPlanApproved,
			withBy(map[string]any{"digest": have, "digest_version": plan.DigestVersion}, a.By))
	})
	return s.planChange(ctx, planID, ch, err)
}

// PlanDigest returns the plan's content digest (plan.Digest) as it is now.
func (s *Store) PlanDigest(ctx context.Context, planID string) (string, error) {
	var d string
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		var err error
		d, err = planDigest(ctx, tx, planID)
		return err
	})
	return d, err
}

// planDigest reads the plan's definition and digests it.
func planDigest(ctx context.Context, tx pgx.Tx, planID string) (string, error) {
	p, err := planDefinition(ctx, tx, planID)
	if err != nil {
		return "", err
	}
	return plan.Digest(p), nil
}

// planDefinition reads what a plan's digest covers: its name, repository, verify
// commands and tasks in file order.
func planDefinition(ctx context.Context, tx pgx.Tx, planID string) (*plan.Plan, error) {
	pi, err := scanPlan(tx.QueryRow(ctx, `SELECT `+planColumnsNoCounts+` FROM plans p WHERE p.id = $1`, planID))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("plan %s: %w", planID, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("read plan %s: %w", planID, err)
	}
	rows, err := tx.Query(ctx, `SELECT `+taskColumns+` FROM tasks WHERE plan_id = $1 ORDER BY ord`, planID)
	if err != nil {
		return nil, fmt.Errorf("read tasks of plan %s: %w", planID, err)
	}
	tasks, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (TaskInfo, error) { return scanTask(r) })
	if err != nil {
		return nil, fmt.Errorf("read tasks of plan %s: %w", planID, err)
	}
	return definitionOf(pi, tasks), nil
}

// DigestOf is the content digest (plan.Digest) of a plan read from the store: its row
// and its tasks in file order. The status comment shows it; ApprovePlan checks it.
func DigestOf(pi PlanInfo, tasks []TaskInfo) string {
	return plan.Digest(definitionOf(pi, tasks))
}

func definitionOf(pi PlanInfo, tasks []TaskInfo) *plan.Plan {
	p := plan.Plan{ID: pi.ID, Name: pi.Name, Repo: pi.Repo, Verify: pi.Verify, Tasks: make([]plan.Task, 0, len(tasks))}
	for _, t := range tasks {
		p.Tasks = append(p.Tasks, t.Task())
	}
	return &p
}

// planChange finishes PausePlan, ResumePlan and ApprovePlan: the plan as it is now.
func (s *Store) planChange(ctx context.Context, planID string, ch PlanChange, err error) (PlanChange, error) {
	if err != nil {
		return PlanChange{}, err
	}
	if ch.Plan, err = s.GetPlan(ctx, planID); err != nil {
		return PlanChange{}, err
	}
	return ch, nil
}

func describeStatus(st plan.PlanStatus, reason string) string {
	if st == plan.PlanPaused && reason != "" {
		return fmt.Sprintf("%s (%s)", st, reason)
	}
	return string(st)
}
