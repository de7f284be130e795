package queue

// Labels whilly has made sure exist in a repository (github_labels).

import (
	"context"
	"fmt"
)

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
