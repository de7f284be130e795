package queue

// The GitHub App's state: webhook deliveries, installations, issue intakes, the
// mirror's coalescing state, and retrying tasks on a comment command. The GitHub
// packages (webhook, intake, app) call these; the SQL stays here with the rest.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/riverqueue/river"

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

// InsertOpts puts deliveries in the GitHub queue.
func (GitHubDeliveryArgs) InsertOpts() river.InsertOpts { return river.InsertOpts{Queue: QueueGitHub} }

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

// ClaimCommand records that delivery deliveryID runs the command of issue comment
// commentID and reports whether it may. The first delivery of a comment owns its command
// and may run it again when its job is retried; any other delivery of the same comment —
// GitHub's redelivery, or a signed payload replayed under a new delivery id — may not.
func (s *Store) ClaimCommand(ctx context.Context, commentID int64, deliveryID string) (bool, error) {
	var owner string
	// DO UPDATE (a no-op) rather than DO NOTHING: it returns the row that won, also when
	// another delivery inserted it concurrently.
	err := s.pool.QueryRow(ctx, `INSERT INTO github_commands (comment_id, delivery_id) VALUES ($1, $2)
		ON CONFLICT (comment_id) DO UPDATE SET comment_id = excluded.comment_id RETURNING delivery_id`, commentID, deliveryID).Scan(&owner)
	if err != nil {
		return false, fmt.Errorf("claim the command of comment %d: %w", commentID, err)
	}
	return owner == deliveryID, nil
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
	return s.inTx(ctx, func(tx pgx.Tx) error {
		var planID string
		err := tx.QueryRow(ctx, `UPDATE github_intakes SET state = $3, source = NULLIF($4, ''), notes = $5, updated_at = now()
			WHERE issue_ref = $1 AND seq = $2 RETURNING plan_id`, ref, seq, state, source, nonNil(notes)).Scan(&planID)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("finish intake of %s: %w", ref, err)
		}
		if state != IntakePlanned {
			return nil
		}
		// The plan committed before this: a mirror job may already have rendered the
		// status comment without the source and notes recorded here. Mark the plan changed
		// so the comment is rendered again with them.
		return s.changed(ctx, tx, planID)
	})
}

// AbandonIntake forgets an intake that turned out to have nothing to do (a stale
// delivery), so its sequence number is used by the next one.
func (s *Store) AbandonIntake(ctx context.Context, ref string, seq int) error {
	if _, err := s.pool.Exec(ctx, `DELETE FROM github_intakes WHERE issue_ref = $1 AND seq = $2 AND state = 'started'`, ref, seq); err != nil {
		return fmt.Errorf("abandon intake of %s: %w", ref, err)
	}
	return nil
}

// GitHubChange is what a change of a plan means for the GitHub side (MarkGitHubChange).
type GitHubChange struct {
	Dirty       bool // the plan is tied to an issue: its mirror's version was bumped
	Fresh       bool // … and its mirror row was created by this change (the plan's first)
	EndedTokens bool // a lease of the plan that holds a push token has ended
}

// MarkGitHubChange runs in the transaction of every change of a plan (the GitHub side's
// PlanChanged hook), in one statement, since it runs under the locks of the change: for a
// plan tied to a GitHub issue it bumps the mirror's version, creating the mirror row on
// the first change; and it looks for push tokens of ended leases. For any other plan it
// is two index probes.
func MarkGitHubChange(ctx context.Context, tx pgx.Tx, planID string) (GitHubChange, error) {
	var c GitHubChange
	err := tx.QueryRow(ctx, `WITH m AS (
			INSERT INTO github_mirror (plan_id)
			SELECT id FROM plans WHERE id = $1 AND github_issue_ref IS NOT NULL
			ON CONFLICT (plan_id) DO UPDATE SET version = github_mirror.version + 1
			RETURNING (xmax = 0) AS fresh)
		SELECT EXISTS (SELECT 1 FROM m), coalesce((SELECT fresh FROM m), false),
			EXISTS (SELECT 1 FROM push_tokens pt WHERE pt.plan_id = $1 AND `+leaseEnded+`)`, planID).
		Scan(&c.Dirty, &c.Fresh, &c.EndedTokens)
	if err != nil {
		return c, fmt.Errorf("mark the change of plan %s for GitHub: %w", planID, err)
	}
	return c, nil
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
	// Pull is the plan's pull request, nil until one is opened.
	Pull *PullRequest
	// Pushed: a COMPLETE of the plan reported a pushed head (head_sha), so its branch
	// holds work to deliver. Always true once Pull is set.
	Pushed bool
}

// GetMirrorState returns a plan's mirror state (ErrNotFound when the plan has none).
func (s *Store) GetMirrorState(ctx context.Context, planID string) (MirrorState, error) {
	var (
		m  MirrorState
		pr PullRequest
		ok bool
	)
	// The events are looked at only until the pull request exists.
	err := s.pool.QueryRow(ctx, `SELECT m.plan_id, m.version, m.synced_version, coalesce(m.label, ''), m.body_sha256,
			m.synced_at, coalesce(i.source, ''), coalesce(i.notes, '{}'),
			pr.plan_id IS NOT NULL OR EXISTS (SELECT 1 FROM events e WHERE e.plan_id = m.plan_id
				AND e.type = 'COMPLETE' AND e.payload ? 'head_sha'),
			pr.plan_id IS NOT NULL, coalesce(pr.repo, ''), coalesce(pr.number, 0), coalesce(pr.node_id, ''),
			coalesce(pr.url, ''), coalesce(pr.branch, ''), coalesce(pr.state, ''), coalesce(pr.draft, false), pr.body_sha256
		FROM github_mirror m LEFT JOIN github_intakes i ON i.plan_id = m.plan_id
		LEFT JOIN github_pulls pr ON pr.plan_id = m.plan_id
		WHERE m.plan_id = $1`, planID).
		Scan(&m.PlanID, &m.Version, &m.SyncedVersion, &m.Label, &m.BodySHA256, &m.SyncedAt, &m.Source, &m.Notes,
			&m.Pushed, &ok, &pr.Repo, &pr.Number, &pr.NodeID, &pr.URL, &pr.Branch, &pr.State, &pr.Draft, &pr.BodySHA256)
	if errors.Is(err, pgx.ErrNoRows) {
		return m, fmt.Errorf("mirror of plan %s: %w", planID, ErrNotFound)
	}
	if err != nil {
		return m, fmt.Errorf("get mirror of plan %s: %w", planID, err)
	}
	if ok {
		pr.PlanID = planID
		m.Pull = &pr
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

// Pull request states, as github_pulls.state records them.
const (
	PullOpen   = "open"
	PullClosed = "closed"
	PullMerged = "merged"
)

// Plan events of pull requests and Actions dispatches. They are persisted: never rename
// one.
const (
	EventPullOpened        = "pr.opened"
	EventPullReady         = "pr.ready"
	EventPullMerged        = "pr.merged"
	EventPullClosed        = "pr.closed"
	EventPullReopened      = "pr.reopened"
	EventActionsDispatched = "actions.dispatched"
)

// PullRequest is the pull request a plan's commits are delivered in.
type PullRequest struct {
	PlanID     string
	Repo       string // owner/name
	Number     int
	NodeID     string // GitHub's GraphQL id
	URL        string
	Branch     string
	State      string // PullOpen, PullClosed, PullMerged
	Draft      bool
	BodySHA256 []byte // of the body whilly last wrote
}

// RecordPull records the pull request of a plan — opened by whilly, or found open from
// the plan's branch (reused, a second intake of the issue) — with a pr.opened event. It
// is bookkeeping of the mirror, not a change of the plan: no hook runs.
func (s *Store) RecordPull(ctx context.Context, pr PullRequest, reused bool) error {
	if pr.State == "" {
		pr.State = PullOpen
	}
	return s.inTx(ctx, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO github_pulls (plan_id, repo, number, node_id, url, branch, state, draft, body_sha256)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
			ON CONFLICT (plan_id) DO UPDATE SET repo = EXCLUDED.repo, number = EXCLUDED.number, node_id = EXCLUDED.node_id,
				url = EXCLUDED.url, branch = EXCLUDED.branch, state = EXCLUDED.state, draft = EXCLUDED.draft,
				body_sha256 = EXCLUDED.body_sha256, updated_at = now()`,
			pr.PlanID, pr.Repo, pr.Number, pr.NodeID, pr.URL, pr.Branch, pr.State, pr.Draft, pr.BodySHA256)
		if err != nil {
			return fmt.Errorf("record pull request of plan %s: %w", pr.PlanID, err)
		}
		payload := map[string]any{"number": pr.Number, "url": pr.URL, "branch": pr.Branch, "draft": pr.Draft, "reused": reused}
		return insertEvent(ctx, tx, pr.PlanID, "", EventPullOpened, payload, nil)
	})
}

// SetPullBody records the digest of the pull request body the mirror wrote.
func (s *Store) SetPullBody(ctx context.Context, planID string, sha []byte) error {
	if _, err := s.pool.Exec(ctx, `UPDATE github_pulls SET body_sha256 = $2, updated_at = now() WHERE plan_id = $1`, planID, sha); err != nil {
		return fmt.Errorf("record pull request body of plan %s: %w", planID, err)
	}
	return nil
}

// SetPullReady records that the plan's draft pull request is ready for review, with a
// pr.ready event (once). Bookkeeping: no hook runs.
func (s *Store) SetPullReady(ctx context.Context, planID string) error {
	return s.inTx(ctx, func(tx pgx.Tx) error {
		var (
			number int
			url    string
		)
		err := tx.QueryRow(ctx, `UPDATE github_pulls SET draft = false, updated_at = now() WHERE plan_id = $1 AND draft
			RETURNING number, url`, planID).Scan(&number, &url)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("record pull request of plan %s ready: %w", planID, err)
		}
		return insertEvent(ctx, tx, planID, "", EventPullReady, map[string]any{"number": number, "url": url}, nil)
	})
}

// PullChanged records what GitHub says became of a pull request (repo owner/name, its
// number): closed, merged or reopened (state PullClosed, PullMerged or PullOpen). Each
// plan it delivers gets a pr.closed, pr.merged or pr.reopened event with detail, and the
// PlanChanged hook runs so that the status comment shows it; nothing else of the plan
// changes. Plans whose pull request is already in that state are left alone, so a
// redelivered webhook writes nothing. It returns the plans it changed.
func (s *Store) PullChanged(ctx context.Context, repo string, number int, state string, detail map[string]any) ([]string, error) {
	typ := map[string]string{PullOpen: EventPullReopened, PullClosed: EventPullClosed, PullMerged: EventPullMerged}[state]
	if typ == "" {
		return nil, fmt.Errorf("pull request state %q: %w", state, ErrInvalid)
	}
	var ids []string
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `UPDATE github_pulls SET state = $3, updated_at = now()
			WHERE lower(repo) = lower($1) AND number = $2 AND state <> $3 RETURNING plan_id`, repo, number, state)
		if err != nil {
			return fmt.Errorf("record pull request %s#%d %s: %w", repo, number, state, err)
		}
		if ids, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
			return fmt.Errorf("record pull request %s#%d %s: %w", repo, number, state, err)
		}
		slices.Sort(ids)
		for _, id := range ids {
			payload := map[string]any{"number": number, "repo": repo}
			if err := insertEvent(ctx, tx, id, "", typ, payload, detail); err != nil {
				return err
			}
		}
		return s.changed(ctx, tx, ids...)
	})
	if err != nil {
		return nil, err
	}
	return ids, nil
}

// Dispatch reasons, as github_dispatches.reason records them.
const (
	// DispatchStart: the plan started (created by intake); once per plan.
	DispatchStart = "start"
	// DispatchIdle: the plan has ready tasks that nobody runs (the reconciler).
	DispatchIdle = "idle"
)

// Dispatch is one repository_dispatch whilly sends to start Actions workers on a plan.
type Dispatch struct {
	ID             int64
	PlanID         string
	Reason         string
	Repo           string // owner/name of the plan
	InstallationID int64
	PlanStatus     plan.PlanStatus
	SentAt         *time.Time
}

// RecordDispatchStart runs in the transaction that creates a plan: for a GitHub plan of a
// repository it records the plan's start dispatch and reports it (ok) the first time,
// never again for that plan. The caller inserts the dispatch job in the same
// transaction, so the dispatch exists exactly when the plan does.
func RecordDispatchStart(ctx context.Context, tx pgx.Tx, planID string) (id int64, ok bool, err error) {
	err = tx.QueryRow(ctx, `INSERT INTO github_dispatches (plan_id, reason)
		SELECT id, 'start' FROM plans WHERE id = $1 AND repo IS NOT NULL AND github_issue_ref IS NOT NULL
		ON CONFLICT (plan_id) WHERE reason = 'start' DO NOTHING
		RETURNING id`, planID).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("record the start dispatch of plan %s: %w", planID, err)
	}
	return id, true, nil
}

// GetDispatch returns a dispatch with its plan's repository, installation and status.
func (s *Store) GetDispatch(ctx context.Context, id int64) (Dispatch, error) {
	var d Dispatch
	err := s.pool.QueryRow(ctx, `SELECT d.id, d.plan_id, d.reason, coalesce(p.repo, ''), coalesce(p.installation_id, 0),
			p.status, d.sent_at
		FROM github_dispatches d JOIN plans p ON p.id = d.plan_id WHERE d.id = $1`, id).
		Scan(&d.ID, &d.PlanID, &d.Reason, &d.Repo, &d.InstallationID, &d.PlanStatus, &d.SentAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return d, fmt.Errorf("dispatch %d: %w", id, ErrNotFound)
	}
	if err != nil {
		return d, fmt.Errorf("get dispatch %d: %w", id, err)
	}
	return d, nil
}

// FinishDispatch records how a dispatch ended: sent (with an actions.dispatched event
// naming the event type), or not, with the outcome saying why.
func (s *Store) FinishDispatch(ctx context.Context, d Dispatch, sent bool, eventType, outcome string) error {
	return s.inTx(ctx, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `UPDATE github_dispatches SET outcome = $2,
			sent_at = CASE WHEN $3 THEN now() ELSE sent_at END WHERE id = $1 AND sent_at IS NULL`, d.ID, outcome, sent)
		if err != nil {
			return fmt.Errorf("finish dispatch %d: %w", d.ID, err)
		}
		if tag.RowsAffected() == 0 || !sent {
			return nil
		}
		payload := map[string]any{"event_type": eventType, "reason": d.Reason, "repo": d.Repo, "dispatch_id": d.ID}
		return insertEvent(ctx, tx, d.PlanID, "", EventActionsDispatched, payload, nil)
	})
}

// IdleDispatches records an idle dispatch for each live GitHub plan of a repository
// that has a task ready to claim but none running, and has seen neither a claim nor a
// dispatch for the interval every: its work waits for a worker that is not there. For
// each one, enqueue runs in the same transaction (it inserts the dispatch job). At most
// limit plans are handled per call.
func (s *Store) IdleDispatches(ctx context.Context, every time.Duration, limit int, enqueue func(ctx context.Context, tx pgx.Tx, d Dispatch) error) ([]Dispatch, error) {
	var out []Dispatch
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		// One reconciler at a time, whatever the number of replicas.
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended('whilly:dispatch:idle', 0))`); err != nil {
			return fmt.Errorf("lock idle dispatches: %w", err)
		}
		rows, err := tx.Query(ctx, `
			WITH idle AS (
				SELECT p.id, p.repo, coalesce(p.installation_id, 0) AS inst, p.status
				FROM plans p
				WHERE p.status = 'ACTIVE' AND p.repo IS NOT NULL AND p.github_issue_ref IS NOT NULL
				  AND (p.budget_usd IS NULL OR p.spent_usd < p.budget_usd)
				  AND NOT EXISTS (SELECT 1 FROM tasks r WHERE r.plan_id = p.id AND r.status IN ('CLAIMED', 'IN_PROGRESS'))
				  AND EXISTS (
					SELECT 1 FROM tasks t
					WHERE t.plan_id = p.id AND t.status = 'PENDING'
					  AND (t.not_before IS NULL OR t.not_before <= now())
					  AND (NOT p.strict OR t.gate_verdict <> 'REJECT')
					  AND NOT EXISTS (
						SELECT 1 FROM unnest(t.dependencies) AS d(dep)
						LEFT JOIN tasks x ON x.plan_id = t.plan_id AND x.id = d.dep
						WHERE x.status IS NULL OR x.status NOT IN ('DONE', 'SKIPPED')))
				  AND NOT EXISTS (SELECT 1 FROM github_dispatches d
					WHERE d.plan_id = p.id AND d.created_at > now() - make_interval(secs => $1))
				  AND NOT EXISTS (SELECT 1 FROM events e
					WHERE e.plan_id = p.id AND e.type = 'CLAIM' AND e.created_at > now() - make_interval(secs => $1))
				ORDER BY p.id
				LIMIT $2
			), ins AS (
				INSERT INTO github_dispatches (plan_id, reason) SELECT id, 'idle' FROM idle ORDER BY id
				RETURNING id, plan_id
			)
			SELECT ins.id, ins.plan_id, idle.repo, idle.inst, idle.status FROM ins JOIN idle ON idle.id = ins.plan_id
			ORDER BY ins.plan_id`, every.Seconds(), limit)
		if err != nil {
			return fmt.Errorf("find idle plans: %w", err)
		}
		out, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (Dispatch, error) {
			d := Dispatch{Reason: DispatchIdle}
			err := r.Scan(&d.ID, &d.PlanID, &d.Repo, &d.InstallationID, &d.PlanStatus)
			return d, err
		})
		if err != nil {
			return fmt.Errorf("find idle plans: %w", err)
		}
		for _, d := range out {
			if err := enqueue(ctx, tx, d); err != nil {
				return fmt.Errorf("enqueue dispatch of plan %s: %w", d.PlanID, err)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}
