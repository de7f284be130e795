package queue

// The pull requests plans deliver their commits in (github_pulls).

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"
)

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
