package queue

// API tokens (api_tokens): minted, authenticated, listed and revoked. Worker tokens
// are in workers.go; both share the token helpers there.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// MintToken creates an unscoped API token (admin, or read-only) and returns it, shown
// this once.
func (s *Store) MintToken(ctx context.Context, owner string, admin bool, expiresAt *time.Time) (string, APIToken, error) {
	return s.Mint(ctx, TokenSpec{Owner: owner, Admin: admin, ExpiresAt: expiresAt})
}

// TokenSpec is an API token to mint: read-only unless Admin or Registrar.
type TokenSpec struct {
	Owner     string
	Admin     bool       // changes plans, registers workers; never scoped
	Registrar bool       // registers workers and nothing else (a bootstrap token)
	Scopes    Scopes     // read and registrar tokens: what they (and workers they register) may see
	ExpiresAt *time.Time // nil: never
}

// Mint creates an API token and returns it, shown this once.
func (s *Store) Mint(ctx context.Context, spec TokenSpec) (string, APIToken, error) {
	owner := strings.TrimSpace(spec.Owner)
	if owner == "" {
		return "", APIToken{}, fmt.Errorf("a token needs an owner: %w", ErrInvalid)
	}
	if spec.Admin && (spec.Registrar || !spec.Scopes.Unlimited()) {
		return "", APIToken{}, fmt.Errorf("an admin token is neither a registrar nor scoped: %w", ErrInvalid)
	}
	secret, err := newSecret()
	if err != nil {
		return "", APIToken{}, err
	}
	kind := readTokenPrefix
	switch {
	case spec.Admin:
		kind = adminTokenPrefix
	case spec.Registrar:
		kind = bootTokenPrefix
	}
	token := kind + secret
	t := APIToken{Prefix: kind + secret[:tokenIDLen], Owner: owner, Admin: spec.Admin, Registrar: spec.Registrar,
		Scopes: spec.Scopes.Strings(), ExpiresAt: spec.ExpiresAt}
	err = s.pool.QueryRow(ctx, `INSERT INTO api_tokens (prefix, token_hash, owner, admin, registrar, scopes, expires_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING created_at`, t.Prefix, hashToken(token), owner, t.Admin, t.Registrar,
		t.Scopes, t.ExpiresAt).Scan(&t.CreatedAt)
	if err != nil {
		return "", APIToken{}, fmt.Errorf("mint token: %w", err)
	}
	return token, t, nil
}

const tokenColumns = `prefix, owner, admin, registrar, scopes, created_at, expires_at, revoked_at`

func scanToken(r pgx.Row) (APIToken, error) {
	var t APIToken
	err := r.Scan(&t.Prefix, &t.Owner, &t.Admin, &t.Registrar, &t.Scopes, &t.CreatedAt, &t.ExpiresAt, &t.RevokedAt)
	return t, err
}

// AuthenticateToken returns the live API token, or ErrUnauthorized when it is unknown,
// revoked or expired.
func (s *Store) AuthenticateToken(ctx context.Context, token string) (APIToken, error) {
	if !strings.HasPrefix(token, adminTokenPrefix) && !strings.HasPrefix(token, readTokenPrefix) && !strings.HasPrefix(token, bootTokenPrefix) {
		return APIToken{}, ErrUnauthorized
	}
	t, err := scanToken(s.pool.QueryRow(ctx, `SELECT `+tokenColumns+` FROM api_tokens
		WHERE token_hash = $1 AND revoked_at IS NULL AND (expires_at IS NULL OR expires_at > now())`, hashToken(token)))
	if errors.Is(err, pgx.ErrNoRows) {
		return APIToken{}, ErrUnauthorized
	}
	if err != nil {
		return APIToken{}, fmt.Errorf("authenticate token: %w", err)
	}
	return t, nil
}

// ListTokens returns every API token (never the secrets), newest first.
func (s *Store) ListTokens(ctx context.Context) ([]APIToken, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+tokenColumns+` FROM api_tokens ORDER BY created_at DESC, id DESC`)
	if err != nil {
		return nil, fmt.Errorf("list tokens: %w", err)
	}
	ts, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (APIToken, error) { return scanToken(r) })
	if err != nil {
		return nil, fmt.Errorf("list tokens: %w", err)
	}
	return ts, nil
}

// RevokeToken revokes the token whose public prefix is prefix.
func (s *Store) RevokeToken(ctx context.Context, prefix string) error {
	// The prefix may be shortened: it must then name one token, not several.
	var matches []string
	if err := s.pool.QueryRow(ctx, `SELECT coalesce(array_agg(prefix ORDER BY prefix), '{}') FROM (
			SELECT prefix FROM api_tokens WHERE starts_with(prefix, $1) LIMIT 6) m`, prefix).Scan(&matches); err != nil {
		return fmt.Errorf("find token %s: %w", prefix, err)
	}
	switch {
	case len(matches) == 0:
		return fmt.Errorf("token %s: %w", prefix, ErrNotFound)
	case len(matches) > 1 && !slices.Contains(matches, prefix):
		more := ""
		if len(matches) > 5 {
			matches, more = matches[:5], " …"
		}
		return fmt.Errorf("token prefix %q is ambiguous: it begins %s%s; give more of it: %w",
			prefix, strings.Join(matches, ", "), more, ErrConflict)
	case len(matches) == 1:
		prefix = matches[0]
	}
	if _, err := s.pool.Exec(ctx, `UPDATE api_tokens SET revoked_at = coalesce(revoked_at, now()) WHERE prefix = $1`, prefix); err != nil {
		return fmt.Errorf("revoke token %s: %w", prefix, err)
	}
	return nil
}
