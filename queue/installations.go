package queue

// GitHub App installations and their repositories (installations).

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

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
