package queue

// The GitHub side's PlanChanged hook (MarkGitHubChange). The rest of the GitHub App's
// state has a file per table: github_deliveries.go, installations.go, github_intakes.go,
// github_mirror.go, github_labels.go, github_pulls.go, github_dispatches.go,
// github_rounds.go, github_delivery_cursor.go.

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

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
