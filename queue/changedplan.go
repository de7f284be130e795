package queue

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// ChangedPlan is what a change of a plan means for the GitHub side, as the PlanChanged
// hook is told it. The store works it out in the change's transaction, in one statement
// (markChangedSQL), so that a hook has nothing to ask and, on most changes, nothing to do.
type ChangedPlan struct {
	PlanID    string
	Dirty     bool // the plan is tied to an issue: its mirror's version was bumped
	Fresh     bool // … and its mirror row was created by this change (the plan's first)
	MirrorDue bool // … and no mirror job is known to wait for it: the hook inserts one
	// RevokeDue: a lease of the plan that holds a push token has ended, and no revocation
	// job is known to wait for the plan (github_mirror.revoke_at): the hook asks for the
	// revocation job of the plan's installation (WantRevocation).
	RevokeDue bool
	// Installation is the plan's GitHub App installation (0 none), whose revocation job
	// revokes the push tokens of every plan of it.
	Installation int64
	// Final: … and the plan is DONE, FAILED or CANCELLED after this change: the hook
	// inserts the sync that tells the issue at once, whatever the mirror's pacing.
	Final bool
}

// mirrorJobLost is how long a mirror job is trusted to wait or run before a change
// enqueues another (its unique insert is a no-op while the first still lives): a job
// discarded or deleted meanwhile is replaced by the next change after that.
const mirrorJobLost = "10 minutes"

// revokeDue is markChangedSQL's new revoke_at of the mirror row gm: now() when a push
// token of an ended lease of the plan waits and no revocation job is known to wait
// (revoke_at NULL, or older than mirrorJobLost: the job may have been lost), else as it
// was. It is computed under the mirror row's lock, which every change of the plan takes
// here; the installation's job clears revoke_at (StartRevocation) under that lock before
// it lists the tokens, so no ended lease is left without a job that will see it.
const revokeDue = `CASE WHEN (gm.revoke_at IS NULL OR gm.revoke_at < now() - interval '` + mirrorJobLost + `')
		AND EXISTS (SELECT 1 FROM push_tokens pt WHERE pt.plan_id = gm.plan_id AND ` + leaseEnded + `)
	THEN now() ELSE gm.revoke_at END`

// markChangedSQL marks the plans a transaction changed, once each, in id order (the
// mirror rows are locked in one order: no deadlock between transactions that change
// several plans). The plans are $1, and those of the tasks this transaction changed
// among the tasks $3 of plan $2 and the tasks held by the workers $4: a task this
// transaction changed has this transaction's now() as its updated_at (another
// transaction begun in the same microsecond at worst marks a plan twice, which costs a
// mirror run that writes nothing). For a plan tied to an issue it bumps the mirror's
// version (creating the row on the plan's first change) and says whether a mirror job
// is due, whether a revocation of its ended leases' push tokens is (revokeDue), and
// whether the plan has ended (its status as the transaction left it: run it after the
// plan is settled), with the plan's installation. A
// plan without a mirror row before this change — one without an issue (push tokens are
// minted for issue plans only), or an issue plan's first change — is told to revoke
// whenever a token of an ended lease exists, as before revoke_at: the row it creates has
// revoke_at NULL, which costs at most one more job, once per plan. The workers' claims
// are looked up one worker at a time (a LATERAL subquery that OFFSET 0 keeps the planner
// from flattening into one scan of every running task), by an index scan of
// tasks_claimed_by (see hotSettings).
const markChangedSQL = `WITH p AS (
	SELECT DISTINCT id FROM (
		SELECT unnest($1::text[]) AS id
		UNION ALL
		SELECT plan_id FROM tasks WHERE plan_id = $2 AND id = ANY ($3::text[]) AND updated_at = now()
		UNION ALL
		SELECT x.plan_id FROM unnest($4::text[]) AS w(id) CROSS JOIN LATERAL (
			SELECT plan_id FROM tasks WHERE claimed_by = w.id AND status IN ('CLAIMED', 'IN_PROGRESS') AND updated_at = now() OFFSET 0) x
	) c
), m AS (
	INSERT INTO github_mirror AS gm (plan_id, job_at)
	SELECT pl.id, now() FROM plans pl WHERE pl.id IN (SELECT id FROM p) AND pl.github_issue_ref IS NOT NULL ORDER BY pl.id
	ON CONFLICT (plan_id) DO UPDATE SET version = gm.version + 1,
		job_at = CASE WHEN gm.job_at IS NULL OR gm.job_at < now() - interval '` + mirrorJobLost + `' THEN now() ELSE gm.job_at END,
		revoke_at = ` + revokeDue + `
	RETURNING gm.plan_id, gm.xmax = 0 AS fresh, gm.job_at = now() AS due,
		CASE WHEN gm.xmax <> 0 THEN coalesce(gm.revoke_at = now(), false) END AS revoke
)
SELECT p.id, m.plan_id IS NOT NULL, coalesce(m.fresh, false), coalesce(m.due, false),
	coalesce(m.revoke, EXISTS (SELECT 1 FROM push_tokens pt WHERE pt.plan_id = p.id AND ` + leaseEnded + `)),
	m.plan_id IS NOT NULL AND coalesce(x.status IN ('DONE', 'FAILED', 'CANCELLED'), false), coalesce(x.installation_id, 0)
FROM p LEFT JOIN m ON m.plan_id = p.id LEFT JOIN plans x ON x.id = p.id ORDER BY p.id`

// touched names what a transaction may have changed: plans for certain, and tasks of a
// plan and workers' claims to look at (markChangedSQL's parameters).
type touched struct {
	plans   []string
	plan    string
	tasks   []string
	workers []string
}

func (t touched) args() []any {
	return []any{nonNil(t.plans), t.plan, nonNil(t.tasks), nonNil(t.workers)}
}

// scanChanges reads the answer of markChangedSQL.
func scanChanges(rows pgx.Rows, err error) ([]ChangedPlan, error) {
	if err != nil {
		return nil, fmt.Errorf("mark changed plans: %w", err)
	}
	cs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (ChangedPlan, error) {
		var c ChangedPlan
		err := r.Scan(&c.PlanID, &c.Dirty, &c.Fresh, &c.MirrorDue, &c.RevokeDue, &c.Final, &c.Installation)
		return c, err
	})
	if err != nil {
		return nil, fmt.Errorf("mark changed plans: %w", err)
	}
	return cs, nil
}

// changed marks the plans planIDs changed in tx and runs the PlanChanged hook once for
// each (nothing without a hook).
func (s *Store) changed(ctx context.Context, tx pgx.Tx, planIDs ...string) error {
	if s.cfg.Hooks.PlanChanged == nil {
		return nil
	}
	cs, err := scanChanges(tx.Query(ctx, markChangedSQL, touched{plans: planIDs}.args()...))
	if err != nil {
		return err
	}
	return s.planChanged(ctx, tx, cs)
}

// planChanged runs the PlanChanged hook for each change, in id order.
func (s *Store) planChanged(ctx context.Context, tx pgx.Tx, cs []ChangedPlan) error {
	for _, c := range cs {
		if err := s.cfg.Hooks.PlanChanged(ctx, tx, c); err != nil {
			return fmt.Errorf("plan %s changed hook: %w", c.PlanID, err)
		}
	}
	return nil
}
