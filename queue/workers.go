package queue

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/whilly-go/whilly/plan"
)

// Token prefixes tell the kinds apart at a glance (and to secret scanners).
const (
	workerTokenPrefix = "whilly_w_"
	adminTokenPrefix  = "whilly_a_"
	readTokenPrefix   = "whilly_r_"
	bootTokenPrefix   = "whilly_b_" // a registrar (whilly admin token mint --bootstrap)
	tokenIDLen        = 8           // characters of the secret kept as its public prefix
)

// newSecret returns a random 256-bit secret, URL-safe.
func newSecret() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("read random bytes: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

// hashToken is what the database stores: SHA-256 of the whole token. Tokens are looked up
// by hash, so the secret itself is never compared byte by byte.
func hashToken(token string) []byte {
	h := sha256.Sum256([]byte(token))
	return h[:]
}

func randomID(prefix string) (string, error) {
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("read random bytes: %w", err)
	}
	return prefix + hex.EncodeToString(b), nil
}

const workerColumns = `id, hostname, labels, status, last_heartbeat, registered_at, revoked_at, scopes`

func scanWorker(r pgx.Row) (Worker, error) {
	var w Worker
	err := r.Scan(&w.ID, &w.Hostname, &w.Labels, &w.Status, &w.LastHeartbeat, &w.RegisteredAt, &w.RevokedAt, &w.Scopes)
	return w, err
}

// RegisterWorker creates an unscoped worker and returns it with its token, shown this once.
func (s *Store) RegisterWorker(ctx context.Context, hostname string, labels []string) (Worker, string, error) {
	return s.RegisterScopedWorker(ctx, hostname, labels, nil)
}

// RegisterScopedWorker creates a worker limited to scopes (normalised, see ParseScopes;
// empty: every plan) and returns it with its token, shown this once.
func (s *Store) RegisterScopedWorker(ctx context.Context, hostname string, labels []string, scopes Scopes) (Worker, string, error) {
	hostname = strings.TrimSpace(hostname)
	if hostname == "" || len(hostname) > 255 {
		return Worker{}, "", fmt.Errorf("hostname must be 1 to 255 characters: %w", ErrInvalid)
	}
	for _, l := range labels {
		if l == "" || len(l) > 64 {
			return Worker{}, "", fmt.Errorf("label %q must be 1 to 64 characters: %w", l, ErrInvalid)
		}
	}
	id, err := randomID("w-")
	if err != nil {
		return Worker{}, "", err
	}
	secret, err := newSecret()
	if err != nil {
		return Worker{}, "", err
	}
	token := workerTokenPrefix + secret
	w, err := scanWorker(s.pool.QueryRow(ctx, `INSERT INTO workers (id, hostname, token_hash, labels, last_heartbeat, scopes)
		VALUES ($1, $2, $3, $4, now(), $5) RETURNING `+workerColumns, id, hostname, hashToken(token), nonNil(labels), scopes.Strings()))
	if err != nil {
		return Worker{}, "", fmt.Errorf("register worker: %w", err)
	}
	return w, token, nil
}

// AuthenticateWorker returns the live worker a token belongs to, or ErrUnauthorized.
func (s *Store) AuthenticateWorker(ctx context.Context, token string) (Worker, error) {
	if !strings.HasPrefix(token, workerTokenPrefix) {
		return Worker{}, ErrUnauthorized
	}
	w, err := scanWorker(s.pool.QueryRow(ctx, `SELECT `+workerColumns+` FROM workers
		WHERE token_hash = $1 AND status <> 'revoked'`, hashToken(token)))
	if errors.Is(err, pgx.ErrNoRows) {
		return Worker{}, ErrUnauthorized
	}
	if err != nil {
		return Worker{}, fmt.Errorf("authenticate worker: %w", err)
	}
	return w, nil
}

// ListWorkers returns every worker, newest first.
func (s *Store) ListWorkers(ctx context.Context) ([]Worker, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+workerColumns+` FROM workers ORDER BY registered_at DESC, id`)
	if err != nil {
		return nil, fmt.Errorf("list workers: %w", err)
	}
	ws, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Worker, error) { return scanWorker(r) })
	if err != nil {
		return nil, fmt.Errorf("list workers: %w", err)
	}
	return ws, nil
}

// RevokeWorker revokes a worker's token and, in the same transaction, releases every
// task it holds (RELEASE, reason worker_revoked; the attempt is not counted).
func (s *Store) RevokeWorker(ctx context.Context, id string) (int, error) {
	var released int
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `UPDATE workers SET status = 'revoked', revoked_at = now() WHERE id = $1 AND status <> 'revoked'`, id)
		if err != nil {
			return fmt.Errorf("revoke worker %s: %w", id, err)
		}
		if tag.RowsAffected() == 0 {
			var exists bool
			if err := tx.QueryRow(ctx, `SELECT true FROM workers WHERE id = $1`, id).Scan(&exists); errors.Is(err, pgx.ErrNoRows) {
				return fmt.Errorf("worker %s: %w", id, ErrNotFound)
			}
			return nil
		}
		// Every control plane's cache of worker tokens forgets this one (Listener.Revocations).
		if _, err := tx.Exec(ctx, `SELECT pg_notify($1, json_build_object('type', $2::text, 'worker_id', $3::text)::text)`,
			EventsChannel, NotificationWorkerRevoked, id); err != nil {
			return fmt.Errorf("announce the revocation of worker %s: %w", id, err)
		}
		released, err = s.releaseHeld(ctx, tx, id, "worker_revoked")
		return err
	})
	if err != nil {
		return 0, err
	}
	return released, nil
}

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

// ReapExpiredLeases returns tasks whose lease expired to PENDING (the attempt counts;
// after max_attempts they are FAILED), with a RELEASE event (reason lease_expired), and
// settles their plans. It works plan by plan, locking the plan row before its tasks like
// every other writer, and takes tasks with SKIP LOCKED, so several replicas may run it at
// once.
func (s *Store) ReapExpiredLeases(ctx context.Context) (int, error) {
	rows, err := s.pool.Query(ctx, `SELECT DISTINCT plan_id FROM tasks
		WHERE status IN ('CLAIMED', 'IN_PROGRESS') AND lease_expires_at < now()`)
	if err != nil {
		return 0, fmt.Errorf("find expired leases: %w", err)
	}
	plans, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return 0, fmt.Errorf("find expired leases: %w", err)
	}
	total := 0
	for _, planID := range plans {
		err := s.inTx(ctx, func(tx pgx.Tx) error {
			st, err := lockPlan(ctx, tx, planID)
			if err != nil {
				return err
			}
			var n int
			err = tx.QueryRow(ctx, `
				WITH x AS (
					SELECT id, claimed_by, attempts, max_attempts FROM tasks
					WHERE plan_id = $1 AND status IN ('CLAIMED', 'IN_PROGRESS') AND lease_expires_at < now()
					FOR UPDATE SKIP LOCKED
				), r AS (
					UPDATE tasks t SET
						status = CASE WHEN x.attempts >= x.max_attempts THEN 'FAILED' ELSE 'PENDING' END,
						last_error = 'lease expired', lease_id = NULL, lease_expires_at = NULL, claimed_by = NULL,
						version = t.version + 1, updated_at = now()
					FROM x WHERE t.plan_id = $1 AND t.id = x.id
					RETURNING t.id, t.ord, t.status, x.claimed_by, t.attempts
				), ev AS (
					INSERT INTO events (plan_id, task_id, type, payload)
					SELECT $1, id, 'RELEASE', jsonb_build_object('reason', 'lease_expired', 'worker_id', claimed_by,
						'attempt', attempts, 'to', status) FROM r ORDER BY ord
					RETURNING 1
				)
				SELECT count(*) FROM ev`, planID).Scan(&n)
			if err != nil {
				return fmt.Errorf("reap expired leases of plan %s: %w", planID, err)
			}
			total += n
			if n == 0 {
				return nil
			}
			if err := settlePlan(ctx, tx, planID, st); err != nil {
				return err
			}
			return s.changed(ctx, tx, planID)
		})
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

// lockPlan locks the plan row and returns its status. Every writer that touches a plan
// and its tasks locks the plan first, so they cannot deadlock.
func lockPlan(ctx context.Context, tx pgx.Tx, planID string) (plan.PlanStatus, error) {
	var st plan.PlanStatus
	err := tx.QueryRow(ctx, `SELECT status FROM plans WHERE id = $1 FOR NO KEY UPDATE`, planID).Scan(&st)
	if errors.Is(err, pgx.ErrNoRows) {
		return st, fmt.Errorf("plan %s: %w", planID, ErrNotFound)
	}
	if err != nil {
		return st, fmt.Errorf("lock plan %s: %w", planID, err)
	}
	return st, nil
}

// MarkOfflineWorkers marks workers silent for longer than after as offline.
func (s *Store) MarkOfflineWorkers(ctx context.Context, after time.Duration) (int, error) {
	tag, err := s.pool.Exec(ctx, `UPDATE workers SET status = 'offline'
		WHERE status = 'online' AND last_heartbeat < now() - make_interval(secs => $1)`, after.Seconds())
	if err != nil {
		return 0, fmt.Errorf("mark offline workers: %w", err)
	}
	return int(tag.RowsAffected()), nil
}

// CancelPlan cancels every open task of the plan (CANCEL events) and the plan itself.
// Workers holding a cancelled task learn it at their next heartbeat; their lease is void.
// by names who cancelled it (the events' "by"; empty: not recorded).
func (s *Store) CancelPlan(ctx context.Context, planID, reason, by string) (int, error) {
	if reason == "" {
		reason = "cancelled"
	}
	var n int
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		st, err := lockPlan(ctx, tx, planID)
		if err != nil {
			return err
		}
		err = tx.QueryRow(ctx, `
			WITH c AS (
				UPDATE tasks t SET status = 'CANCELLED', lease_id = NULL, lease_expires_at = NULL,
				       version = t.version + 1, updated_at = now()
				FROM (SELECT id AS tid, status AS old FROM tasks WHERE plan_id = $1
				      AND status IN ('PENDING', 'CLAIMED', 'IN_PROGRESS') ORDER BY id FOR UPDATE) o
				WHERE t.plan_id = $1 AND t.id = o.tid AND t.status = o.old
				RETURNING t.id, t.ord, o.old
			), ev AS (
				INSERT INTO events (plan_id, task_id, type, payload)
				SELECT $1, id, 'CANCEL', jsonb_build_object('from', old, 'reason', $2::text) || `+bySQL("$3")+` FROM c ORDER BY ord
				RETURNING 1
			)
			SELECT count(*) FROM ev`, planID, reason, by).Scan(&n)
		if err != nil {
			return fmt.Errorf("cancel tasks of plan %s: %w", planID, err)
		}
		if st == plan.PlanCancelled || st == plan.PlanDone {
			return s.changed(ctx, tx, planID)
		}
		if _, err := tx.Exec(ctx, `UPDATE plans SET status = 'CANCELLED', pause_reason = NULL, updated_at = now() WHERE id = $1`, planID); err != nil {
			return fmt.Errorf("cancel plan %s: %w", planID, err)
		}
		if err := insertEvent(ctx, tx, planID, "", EventPlanCancelled, withBy(map[string]any{"from": st, "reason": reason, "tasks": n}, by), nil); err != nil {
			return err
		}
		return s.changed(ctx, tx, planID)
	})
	return n, err
}
