package queue

// The GitHub App's state: webhook deliveries, installations, issue intakes, the
// mirror's coalescing state, and retrying tasks on a comment command. The GitHub
// packages (webhook, intake, app) call these; the SQL stays here with the rest.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/whilly-go/whilly/plan"
)

// KindGitHubDelivery is the River job that processes one stored webhook delivery. It is
// persisted: never rename it.
const KindGitHubDelivery = "whilly.github_delivery"

// GitHubDeliveryArgs names the delivery a job processes. The webhook receiver inserts
// it in the transaction that stores the delivery; the intake package works it.
type GitHubDeliveryArgs struct {
	DeliveryID string `json:"delivery_id"`
}

// Kind implements river.JobArgs.
func (GitHubDeliveryArgs) Kind() string { return KindGitHubDelivery }

// Delivery is one webhook delivery as received (X-GitHub-Delivery, X-GitHub-Event).
type Delivery struct {
	ID             string
	Event          string
	Action         string
	InstallationID int64
	Payload        []byte
	ReceivedAt     time.Time
	ProcessedAt    *time.Time
	Outcome        string
}

// RecordDelivery stores a delivery and, in the same transaction, runs enqueue (which
// inserts its River job). A delivery id already stored is left alone and reported with
// stored false: GitHub's redeliveries and retries are acknowledged and ignored.
func (s *Store) RecordDelivery(ctx context.Context, d Delivery, enqueue func(ctx context.Context, tx pgx.Tx) error) (bool, error) {
	stored := false
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `INSERT INTO webhook_deliveries (delivery_id, event, action, installation_id, payload)
			VALUES ($1, $2, NULLIF($3, ''), NULLIF($4, 0), $5) ON CONFLICT (delivery_id) DO NOTHING`,
			d.ID, d.Event, d.Action, d.InstallationID, d.Payload)
		if err != nil {
			if isUnstorableJSON(err) {
				return fmt.Errorf("store delivery %s: the payload cannot be stored as jsonb: %w", d.ID, ErrInvalid)
			}
			return fmt.Errorf("store delivery %s: %w", d.ID, err)
		}
		if tag.RowsAffected() == 0 {
			return nil
		}
		stored = true
		if enqueue == nil {
			return nil
		}
		if err := enqueue(ctx, tx); err != nil {
			return fmt.Errorf("enqueue delivery %s: %w", d.ID, err)
		}
		return nil
	})
	if err != nil {
		return false, err
	}
	return stored, nil
}

// isUnstorableJSON reports whether Postgres refused a JSON text as jsonb: a NUL
// (\u0000) or a lone surrogate escape, or bytes that are not UTF-8.
func isUnstorableJSON(err error) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return false
	}
	switch pgErr.Code {
	case "22P02", "22P05", "22021", "22025", "2202E":
		return true
	}
	return false
}

// GetDelivery returns a stored delivery with its payload.
func (s *Store) GetDelivery(ctx context.Context, id string) (Delivery, error) {
	var d Delivery
	err := s.pool.QueryRow(ctx, `SELECT delivery_id, event, coalesce(action, ''), coalesce(installation_id, 0), payload::text,
		received_at, processed_at, coalesce(outcome, '') FROM webhook_deliveries WHERE delivery_id = $1`, id).
		Scan(&d.ID, &d.Event, &d.Action, &d.InstallationID, &d.Payload, &d.ReceivedAt, &d.ProcessedAt, &d.Outcome)
	if errors.Is(err, pgx.ErrNoRows) {
		return d, fmt.Errorf("delivery %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return d, fmt.Errorf("get delivery %s: %w", id, err)
	}
	return d, nil
}

// FinishDelivery records what processing a delivery did.
func (s *Store) FinishDelivery(ctx context.Context, id, outcome string) error {
	if _, err := s.pool.Exec(ctx, `UPDATE webhook_deliveries SET processed_at = now(), outcome = $2 WHERE delivery_id = $1`, id, outcome); err != nil {
		return fmt.Errorf("finish delivery %s: %w", id, err)
	}
	return nil
}

// KnownDeliveries returns which of the delivery ids are stored.
func (s *Store) KnownDeliveries(ctx context.Context, ids []string) (map[string]bool, error) {
	rows, err := s.pool.Query(ctx, `SELECT delivery_id FROM webhook_deliveries WHERE delivery_id = ANY($1)`, ids)
	if err != nil {
		return nil, fmt.Errorf("look up deliveries: %w", err)
	}
	found, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("look up deliveries: %w", err)
	}
	out := make(map[string]bool, len(found))
	for _, id := range found {
		out[id] = true
	}
	return out, nil
}

// PruneDeliveries deletes processed deliveries received before the cutoff.
func (s *Store) PruneDeliveries(ctx context.Context, before time.Time) (int64, error) {
	tag, err := s.pool.Exec(ctx, `DELETE FROM webhook_deliveries WHERE received_at < $1 AND processed_at IS NOT NULL`, before)
	if err != nil {
		return 0, fmt.Errorf("prune deliveries: %w", err)
	}
	return tag.RowsAffected(), nil
}

// Installation is a GitHub App installation as its webhooks describe it.
type Installation struct {
	ID          int64
	Account     string
	AccountType string
	Repos       []string // owner/name
}

// UpsertInstallation records a new (or re-created) installation with its repositories.
func (s *Store) UpsertInstallation(ctx context.Context, in Installation) error {
	_, err := s.pool.Exec(ctx, `INSERT INTO installations (id, account, account_type, repos)
		VALUES ($1, $2, NULLIF($3, ''), $4)
		ON CONFLICT (id) DO UPDATE SET account = EXCLUDED.account, account_type = EXCLUDED.account_type,
			repos = EXCLUDED.repos, deleted_at = NULL, suspended_at = NULL, updated_at = now()`,
		in.ID, in.Account, in.AccountType, nonNil(in.Repos))
	if err != nil {
		return fmt.Errorf("record installation %d: %w", in.ID, err)
	}
	return nil
}

// Installation states SetInstallationState accepts.
const (
	InstallationDeleted     = "deleted"
	InstallationSuspended   = "suspended"
	InstallationUnsuspended = "unsuspended"
)

// SetInstallationState marks an installation deleted, suspended or unsuspended. An
// unknown installation is recorded first with the account given.
func (s *Store) SetInstallationState(ctx context.Context, id int64, account, state string) error {
	set := map[string]string{
		InstallationDeleted:     `deleted_at = now()`,
		InstallationSuspended:   `suspended_at = now()`,
		InstallationUnsuspended: `suspended_at = NULL`,
	}[state]
	if set == "" {
		return fmt.Errorf("installation state %q: %w", state, ErrInvalid)
	}
	_, err := s.pool.Exec(ctx, `INSERT INTO installations (id, account) VALUES ($1, $2) ON CONFLICT (id) DO NOTHING`, id, account)
	if err == nil {
		_, err = s.pool.Exec(ctx, `UPDATE installations SET `+set+`, updated_at = now() WHERE id = $1`, id)
	}
	if err != nil {
		return fmt.Errorf("mark installation %d %s: %w", id, state, err)
	}
	return nil
}

// ChangeInstallationRepos adds and removes repositories of an installation.
func (s *Store) ChangeInstallationRepos(ctx context.Context, id int64, account string, added, removed []string) error {
	_, err := s.pool.Exec(ctx, `INSERT INTO installations (id, account, repos) VALUES ($1, $2, '{}')
		ON CONFLICT (id) DO NOTHING`, id, account)
	if err == nil {
		_, err = s.pool.Exec(ctx, `UPDATE installations SET updated_at = now(), repos = ARRAY(
			SELECT DISTINCT r FROM unnest(repos || $2::text[]) AS r WHERE r <> ALL($3::text[]) ORDER BY r)
			WHERE id = $1`, id, nonNil(added), nonNil(removed))
	}
	if err != nil {
		return fmt.Errorf("change repositories of installation %d: %w", id, err)
	}
	return nil
}

// InstallationForRepo returns the live installation that covers repo (owner/name).
func (s *Store) InstallationForRepo(ctx context.Context, repo string) (int64, error) {
	var id int64
	err := s.pool.QueryRow(ctx, `SELECT id FROM installations
		WHERE lower($1) = ANY(SELECT lower(r) FROM unnest(repos) r) AND deleted_at IS NULL AND suspended_at IS NULL
		ORDER BY updated_at DESC LIMIT 1`, repo).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, fmt.Errorf("installation for %s: %w", repo, ErrNotFound)
	}
	if err != nil {
		return 0, fmt.Errorf("find installation for %s: %w", repo, err)
	}
	return id, nil
}

// IssuePlan returns the plan of a GitHub issue (owner/repo#N): the live one (ACTIVE or
// PAUSED) when there is one, else the most recent.
func (s *Store) IssuePlan(ctx context.Context, ref string) (PlanInfo, error) {
	pi, err := scanPlan(s.pool.QueryRow(ctx, `SELECT `+planColumns+` FROM plans p WHERE p.github_issue_ref = $1
		ORDER BY (p.status IN ('ACTIVE', 'PAUSED')) DESC, p.created_at DESC, p.id DESC LIMIT 1`, ref))
	if errors.Is(err, pgx.ErrNoRows) {
		return pi, fmt.Errorf("plan of issue %s: %w", ref, ErrNotFound)
	}
	if err != nil {
		return pi, fmt.Errorf("get plan of issue %s: %w", ref, err)
	}
	return pi, nil
}

// IntakeOutcome says what BeginIntake decided.
type IntakeOutcome string

// Intake outcomes.
const (
	// IntakeStarted: this delivery owns a new intake of the issue.
	IntakeStarted IntakeOutcome = "started"
	// IntakeResumed: this delivery already owned the unfinished intake (a retried job),
	// or took over one abandoned for longer than the stale limit.
	IntakeResumed IntakeOutcome = "resumed"
	// IntakeLive: the issue has a live plan (PlanID); nothing to start.
	IntakeLive IntakeOutcome = "live"
	// IntakeBusy: another delivery's intake of the issue is under way.
	IntakeBusy IntakeOutcome = "busy"
)

// IntakeClaim is BeginIntake's answer.
type IntakeClaim struct {
	Outcome IntakeOutcome
	Seq     int
	PlanID  string
}

// Intake states FinishIntake records.
const (
	IntakePlanned   = "planned"
	IntakeNeedsInfo = "needs_info"
)

// BeginIntake decides, under a per-issue advisory lock, whether this delivery starts an
// intake of the issue: not when a live plan exists or another delivery's intake is under
// way (unless it went stale). A new intake gets the next sequence number of the issue and
// the plan id planID(seq), skipping ids already taken, so that the id is deterministic
// and a reopened issue gets a new one.
func (s *Store) BeginIntake(ctx context.Context, ref, deliveryID string, staleAfter time.Duration, planID func(seq int) string) (IntakeClaim, error) {
	var c IntakeClaim
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended('whilly:intake:' || $1, 0))`, ref); err != nil {
			return fmt.Errorf("lock intake of %s: %w", ref, err)
		}
		var started struct {
			seq      int
			planID   string
			delivery string
			stale    bool
		}
		err := tx.QueryRow(ctx, `SELECT seq, plan_id, delivery_id, updated_at < now() - make_interval(secs => $2)
			FROM github_intakes WHERE issue_ref = $1 AND state = 'started'`, ref, staleAfter.Seconds()).
			Scan(&started.seq, &started.planID, &started.delivery, &started.stale)
		hasStarted := err == nil
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("read intake of %s: %w", ref, err)
		}
		var live string
		err = tx.QueryRow(ctx, `SELECT id FROM plans WHERE github_issue_ref = $1 AND status IN ('ACTIVE', 'PAUSED')`, ref).Scan(&live)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("read live plan of %s: %w", ref, err)
		}
		switch {
		case hasStarted && started.delivery == deliveryID:
			c = IntakeClaim{Outcome: IntakeResumed, Seq: started.seq, PlanID: started.planID}
			return nil
		case live != "":
			c = IntakeClaim{Outcome: IntakeLive, PlanID: live}
			return nil
		case hasStarted && !started.stale:
			c = IntakeClaim{Outcome: IntakeBusy, Seq: started.seq, PlanID: started.planID}
			return nil
		case hasStarted:
			if _, err := tx.Exec(ctx, `UPDATE github_intakes SET delivery_id = $3, updated_at = now()
				WHERE issue_ref = $1 AND seq = $2`, ref, started.seq, deliveryID); err != nil {
				return fmt.Errorf("take over intake of %s: %w", ref, err)
			}
			c = IntakeClaim{Outcome: IntakeResumed, Seq: started.seq, PlanID: started.planID}
			return nil
		}
		var seq int
		if err := tx.QueryRow(ctx, `SELECT coalesce(max(seq), 0) + 1 FROM github_intakes WHERE issue_ref = $1`, ref).Scan(&seq); err != nil {
			return fmt.Errorf("number intake of %s: %w", ref, err)
		}
		for tries := 0; ; tries++ {
			if tries == 1000 {
				return fmt.Errorf("find a free plan id for %s: %w", ref, ErrConflict)
			}
			id := planID(seq)
			var taken bool
			if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM plans WHERE id = $1)
				OR EXISTS (SELECT 1 FROM github_intakes WHERE plan_id = $1)`, id).Scan(&taken); err != nil {
				return fmt.Errorf("check plan id %s: %w", id, err)
			}
			if !taken {
				c = IntakeClaim{Outcome: IntakeStarted, Seq: seq, PlanID: id}
				break
			}
			seq++
		}
		if _, err := tx.Exec(ctx, `INSERT INTO github_intakes (issue_ref, seq, plan_id, delivery_id) VALUES ($1, $2, $3, $4)`,
			ref, c.Seq, c.PlanID, deliveryID); err != nil {
			return fmt.Errorf("record intake of %s: %w", ref, err)
		}
		return nil
	})
	if err != nil {
		return IntakeClaim{}, err
	}
	return c, nil
}

// FinishIntake records how an intake ended (IntakePlanned or IntakeNeedsInfo), where its
// plan came from and notes for the status comment.
func (s *Store) FinishIntake(ctx context.Context, ref string, seq int, state, source string, notes []string) error {
	if state != IntakePlanned && state != IntakeNeedsInfo {
		return fmt.Errorf("intake state %q: %w", state, ErrInvalid)
	}
	_, err := s.pool.Exec(ctx, `UPDATE github_intakes SET state = $3, source = NULLIF($4, ''), notes = $5, updated_at = now()
		WHERE issue_ref = $1 AND seq = $2`, ref, seq, state, source, nonNil(notes))
	if err != nil {
		return fmt.Errorf("finish intake of %s: %w", ref, err)
	}
	return nil
}

// AbandonIntake forgets an intake that turned out to have nothing to do (a stale
// delivery), so its sequence number is used by the next one.
func (s *Store) AbandonIntake(ctx context.Context, ref string, seq int) error {
	if _, err := s.pool.Exec(ctx, `DELETE FROM github_intakes WHERE issue_ref = $1 AND seq = $2 AND state = 'started'`, ref, seq); err != nil {
		return fmt.Errorf("abandon intake of %s: %w", ref, err)
	}
	return nil
}

// MarkMirrorDirty runs in the transaction of every change of a plan (the PlanChanged
// hook): for a plan tied to a GitHub issue it bumps the mirror's version, creating the
// mirror row on the first change (fresh). For any other plan it is one index probe and
// reports dirty false.
func MarkMirrorDirty(ctx context.Context, tx pgx.Tx, planID string) (dirty, fresh bool, err error) {
	err = tx.QueryRow(ctx, `INSERT INTO github_mirror (plan_id)
		SELECT id FROM plans WHERE id = $1 AND github_issue_ref IS NOT NULL
		ON CONFLICT (plan_id) DO UPDATE SET version = github_mirror.version + 1
		RETURNING (xmax = 0)`, planID).Scan(&fresh)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, false, nil
	}
	if err != nil {
		return false, false, fmt.Errorf("mark mirror of plan %s dirty: %w", planID, err)
	}
	return true, fresh, nil
}

// MirrorState is what the mirror last wrote to GitHub for a plan, and how the plan came
// to be (the intake's source and notes).
type MirrorState struct {
	PlanID        string
	Version       int64
	SyncedVersion int64
	Label         string
	BodySHA256    []byte
	SyncedAt      *time.Time
	Source        string
	Notes         []string
}

// GetMirrorState returns a plan's mirror state (ErrNotFound when the plan has none).
func (s *Store) GetMirrorState(ctx context.Context, planID string) (MirrorState, error) {
	var m MirrorState
	err := s.pool.QueryRow(ctx, `SELECT m.plan_id, m.version, m.synced_version, coalesce(m.label, ''), m.body_sha256,
			m.synced_at, coalesce(i.source, ''), coalesce(i.notes, '{}')
		FROM github_mirror m LEFT JOIN github_intakes i ON i.plan_id = m.plan_id
		WHERE m.plan_id = $1`, planID).
		Scan(&m.PlanID, &m.Version, &m.SyncedVersion, &m.Label, &m.BodySHA256, &m.SyncedAt, &m.Source, &m.Notes)
	if errors.Is(err, pgx.ErrNoRows) {
		return m, fmt.Errorf("mirror of plan %s: %w", planID, ErrNotFound)
	}
	if err != nil {
		return m, fmt.Errorf("get mirror of plan %s: %w", planID, err)
	}
	return m, nil
}

// MirrorSync is what a mirror run wrote to GitHub.
type MirrorSync struct {
	Version    int64 // the version the run rendered
	Label      string
	BodySHA256 []byte
}

// FinishMirror records a mirror run under the mirror row's lock and, in the same
// transaction, calls done with whether the plan changed again meanwhile (dirty). The
// caller completes its job in done when not dirty, so that no change is ever left
// unmirrored: a change either commits before this (and the run sees dirty) or after
// (and enqueues a new job, the finished one no longer blocking it).
func (s *Store) FinishMirror(ctx context.Context, planID string, m MirrorSync, done func(ctx context.Context, tx pgx.Tx, dirty bool) error) (bool, error) {
	var dirty bool
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		err := tx.QueryRow(ctx, `UPDATE github_mirror SET synced_version = greatest(synced_version, $2),
				label = NULLIF($3, ''), body_sha256 = $4, synced_at = now()
			WHERE plan_id = $1 RETURNING version > $2`, planID, m.Version, m.Label, m.BodySHA256).Scan(&dirty)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("mirror of plan %s: %w", planID, ErrNotFound)
		}
		if err != nil {
			return fmt.Errorf("record mirror of plan %s: %w", planID, err)
		}
		if done != nil {
			return done(ctx, tx, dirty)
		}
		return nil
	})
	return dirty, err
}

// SetStatusComment records the id of a plan's status comment. It is bookkeeping, not a
// change of the plan: no event, no hook.
func (s *Store) SetStatusComment(ctx context.Context, planID string, commentID int64) error {
	tag, err := s.pool.Exec(ctx, `UPDATE plans SET status_comment_id = NULLIF($2, 0) WHERE id = $1`, planID, commentID)
	if err != nil {
		return fmt.Errorf("record status comment of plan %s: %w", planID, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("plan %s: %w", planID, ErrNotFound)
	}
	return nil
}

// MirroredPlans returns the GitHub plans the reconciler checks: every live one, and any
// whose mirror is behind.
func (s *Store) MirroredPlans(ctx context.Context) ([]string, error) {
	rows, err := s.pool.Query(ctx, `SELECT p.id FROM plans p JOIN github_mirror m ON m.plan_id = p.id
		WHERE p.status IN ('ACTIVE', 'PAUSED') OR m.version > m.synced_version ORDER BY p.id`)
	if err != nil {
		return nil, fmt.Errorf("list mirrored plans: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("list mirrored plans: %w", err)
	}
	return ids, nil
}

// LabelKnown reports whether whilly has already made sure the label exists in repo.
func (s *Store) LabelKnown(ctx context.Context, repo, name string) (bool, error) {
	var ok bool
	if err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM github_labels WHERE repo = $1 AND name = $2)`, repo, name).Scan(&ok); err != nil {
		return false, fmt.Errorf("look up label %s of %s: %w", name, repo, err)
	}
	return ok, nil
}

// RecordLabel notes that the label exists in repo.
func (s *Store) RecordLabel(ctx context.Context, repo, name string) error {
	if _, err := s.pool.Exec(ctx, `INSERT INTO github_labels (repo, name) VALUES ($1, $2) ON CONFLICT DO NOTHING`, repo, name); err != nil {
		return fmt.Errorf("record label %s of %s: %w", name, repo, err)
	}
	return nil
}

// ForgetLabel drops the note that the label exists (it was deleted by hand).
func (s *Store) ForgetLabel(ctx context.Context, repo, name string) error {
	if _, err := s.pool.Exec(ctx, `DELETE FROM github_labels WHERE repo = $1 AND name = $2`, repo, name); err != nil {
		return fmt.Errorf("forget label %s of %s: %w", name, repo, err)
	}
	return nil
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
// has another live plan is ErrConflict. The last error is kept for the next prompt.
func (s *Store) RetryTasks(ctx context.Context, planID string, taskIDs []string, reason string) (RetryResult, error) {
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
				      AND status IN ('FAILED', 'CANCELLED') AND ($2::text[] IS NULL OR id = ANY($2)) FOR UPDATE) o
				WHERE t.plan_id = $1 AND t.id = o.tid AND t.status = o.old
				RETURNING t.id, t.ord, o.old
			), ev AS (
				INSERT INTO events (plan_id, task_id, type, payload)
				SELECT $1, id, 'RESET', jsonb_build_object('from', old, 'to', 'PENDING', 'reason', $3::text) FROM r ORDER BY ord
				RETURNING 1
			)
			SELECT count(*) FROM ev`, planID, ids, reason).Scan(&res.Retried)
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
		payload := map[string]any{"tasks_reset": res.Retried, "from": st, "reason": reason}
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

// WithMirrorLock runs fn holding a session advisory lock on the plan's mirror, so that a
// mirror job and `whilly forge intake` never write one issue at the same time. It
// returns false, without running fn, when someone else holds the lock. The lock is held
// on a pooled connection for the duration of fn (GitHub calls, no transaction).
func (s *Store) WithMirrorLock(ctx context.Context, planID string, fn func() error) (bool, error) {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return false, fmt.Errorf("lock mirror of plan %s: %w", planID, err)
	}
	defer conn.Release()
	const key = `hashtextextended('whilly:mirror:' || $1, 0)`
	var ok bool
	if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock(`+key+`)`, planID).Scan(&ok); err != nil {
		return false, fmt.Errorf("lock mirror of plan %s: %w", planID, err)
	}
	if !ok {
		return false, nil
	}
	defer func() {
		if _, err := conn.Exec(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock(`+key+`)`, planID); err != nil {
			// A connection whose unlock failed must not go back to the pool holding the lock.
			_ = conn.Conn().Close(context.WithoutCancel(ctx))
		}
	}()
	return true, fn()
}
