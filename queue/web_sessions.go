package queue

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Principal kinds of a dashboard session.
const (
	PrincipalToken  = "token"  // signed in with a read or admin API token
	PrincipalGitHub = "github" // signed in with GitHub (the App's OAuth user-to-server flow)
)

// Principal is who a dashboard session acts for: an API token's owner, or a GitHub user
// with the repositories it may read and write. It is stored with the session (JSON); for
// a token the token's current admin flag and scopes are read again at every request.
type Principal struct {
	Kind string `json:"kind"` // PrincipalToken or PrincipalGitHub
	// Name is the token's owner or the GitHub login.
	Name string `json:"name"`
	// TokenPrefix is the API token's public prefix (token sessions): revoking the token
	// ends the session.
	TokenPrefix string `json:"token_prefix,omitempty"`
	// Admin sees every plan its scopes allow and gets every button.
	Admin bool `json:"admin"`
	// Scopes limit a token session as they limit the token (empty: every plan).
	Scopes Scopes `json:"scopes,omitempty"`
	// ReadRepos and WriteRepos are a GitHub user's repositories (owner/name), those it may
	// read and those where it has write, maintain or admin: it sees the plans of the
	// first and gets the buttons on the second. Ignored for tokens.
	ReadRepos  []string `json:"read_repos,omitempty"`
	WriteRepos []string `json:"write_repos,omitempty"`
}

// By names the principal in the events of the changes it makes: "token:OWNER" like the
// API, "@LOGIN" like a comment command.
func (p Principal) By() string {
	if p.Kind == PrincipalGitHub {
		return "@" + p.Name
	}
	return "token:" + p.Name
}

// ReadScopes are the scopes of the plans the principal may see; ok false means none.
func (p Principal) ReadScopes() (sc Scopes, ok bool) {
	if p.Kind != PrincipalGitHub {
		return p.Scopes, true
	}
	if p.Admin {
		return nil, true
	}
	for _, r := range p.ReadRepos {
		if s, err := ParseScope("repo:" + r); err == nil {
			sc = append(sc, s)
		}
	}
	slices.Sort(sc)
	sc = slices.Compact(sc)
	return sc, len(sc) > 0
}

// CanRead reports whether the principal may see plan pi.
func (p Principal) CanRead(pi PlanInfo) bool {
	sc, ok := p.ReadScopes()
	return ok && sc.Allow(pi)
}

// CanWrite reports whether the principal may change plan pi (retry, cancel, budget,
// pause, approve): an admin that may read it, or a GitHub user with write access to its
// repository.
func (p Principal) CanWrite(pi PlanInfo) bool {
	if !p.CanRead(pi) {
		return false
	}
	if p.Admin {
		return true
	}
	return p.Kind == PrincipalGitHub && pi.Repo != "" &&
		slices.ContainsFunc(p.WriteRepos, func(r string) bool { return strings.EqualFold(r, pi.Repo) })
}

// Actor is the principal as the one who pauses, resumes or approves (PausePlan …): its
// name, and the scopes of the plans it may change. ok false: it may change none.
func (p Principal) Actor() (a Actor, ok bool) {
	a.By = p.By()
	if p.Admin {
		a.Scopes, ok = p.ReadScopes()
		return a, ok
	}
	if p.Kind != PrincipalGitHub {
		return a, false
	}
	for _, r := range p.WriteRepos {
		if s, err := ParseScope("repo:" + r); err == nil {
			a.Scopes = append(a.Scopes, s)
		}
	}
	slices.Sort(a.Scopes)
	a.Scopes = slices.Compact(a.Scopes)
	return a, len(a.Scopes) > 0
}

// Session is a live dashboard session.
type Session struct {
	Principal Principal
	// CSRF is the token every form post of the session must carry.
	CSRF      string
	ExpiresAt time.Time
}

// sessionIDBytes is the entropy of a session id and of its CSRF token.
const sessionIDBytes = 32

// CreateSession stores a new session for p, valid for ttl, and returns its id (the cookie
// value; only its hash is stored). A token session needs p.TokenPrefix of a live token.
// Sessions expired for a day are deleted on the way.
func (s *Store) CreateSession(ctx context.Context, p Principal, ttl time.Duration) (string, Session, error) {
	if p.Kind != PrincipalToken && p.Kind != PrincipalGitHub {
		return "", Session{}, fmt.Errorf("session principal kind %q: %w", p.Kind, ErrInvalid)
	}
	if ttl <= 0 {
		return "", Session{}, fmt.Errorf("session lifetime %s: %w", ttl, ErrInvalid)
	}
	id, err := randomText()
	if err != nil {
		return "", Session{}, err
	}
	csrf, err := randomText()
	if err != nil {
		return "", Session{}, err
	}
	raw, err := json.Marshal(p)
	if err != nil {
		return "", Session{}, fmt.Errorf("encode session principal: %w", err)
	}
	var prefix *string
	if p.Kind == PrincipalToken {
		prefix = &p.TokenPrefix
	}
	sess := Session{Principal: p, CSRF: csrf}
	err = s.inTx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `DELETE FROM web_sessions WHERE expires_at < now() - interval '1 day'`); err != nil {
			return fmt.Errorf("delete expired sessions: %w", err)
		}
		err := tx.QueryRow(ctx, `INSERT INTO web_sessions (id_hash, principal, token_prefix, csrf_secret, expires_at)
			VALUES ($1, $2, $3, $4, now() + make_interval(secs => $5)) RETURNING expires_at`,
			hashToken(id), raw, prefix, []byte(csrf), ttl.Seconds()).Scan(&sess.ExpiresAt)
		if isForeignKeyViolation(err) {
			return fmt.Errorf("session for token %s: %w", p.TokenPrefix, ErrUnauthorized)
		}
		if err != nil {
			return fmt.Errorf("create session: %w", err)
		}
		return nil
	})
	if err != nil {
		return "", Session{}, err
	}
	return id, sess, nil
}

// AuthenticateSession returns the live session of id (a cookie value), or ErrUnauthorized
// when it is unknown, expired, revoked, or its token is revoked or expired. A token
// session takes the token's current admin flag and scopes.
func (s *Store) AuthenticateSession(ctx context.Context, id string) (Session, error) {
	if id == "" || len(id) > 256 {
		return Session{}, ErrUnauthorized
	}
	var (
		sess   Session
		raw    []byte
		csrf   []byte
		admin  *bool
		scopes []string
	)
	err := s.pool.QueryRow(ctx, `SELECT s.principal, s.csrf_secret, s.expires_at, t.admin, t.scopes
		FROM web_sessions s LEFT JOIN api_tokens t ON t.prefix = s.token_prefix
		WHERE s.id_hash = $1 AND s.revoked_at IS NULL AND s.expires_at > now()
		  AND (s.token_prefix IS NULL OR (t.revoked_at IS NULL AND (t.expires_at IS NULL OR t.expires_at > now())
		       AND NOT t.registrar))`, hashToken(id)).Scan(&raw, &csrf, &sess.ExpiresAt, &admin, &scopes)
	if errors.Is(err, pgx.ErrNoRows) {
		return Session{}, ErrUnauthorized
	}
	if err != nil {
		return Session{}, fmt.Errorf("authenticate session: %w", err)
	}
	if err := json.Unmarshal(raw, &sess.Principal); err != nil {
		return Session{}, fmt.Errorf("decode session principal: %w", err)
	}
	if sess.Principal.Kind == PrincipalToken {
		if admin == nil {
			return Session{}, ErrUnauthorized
		}
		sess.Principal.Admin, sess.Principal.Scopes = *admin, Scopes(scopes)
	}
	sess.CSRF = string(csrf)
	return sess, nil
}

// RevokeSession ends the session of id (sign-out); an unknown id is no error.
func (s *Store) RevokeSession(ctx context.Context, id string) error {
	if _, err := s.pool.Exec(ctx, `UPDATE web_sessions SET revoked_at = coalesce(revoked_at, now()) WHERE id_hash = $1`, hashToken(id)); err != nil {
		return fmt.Errorf("revoke session: %w", err)
	}
	return nil
}

// randomText is 256 random bits, base64url without padding.
func randomText() (string, error) {
	b := make([]byte, sessionIDBytes)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("read random bytes: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

// isForeignKeyViolation reports whether err is a foreign-key violation.
func isForeignKeyViolation(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "23503"
}
