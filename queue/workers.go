package queue

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
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

const workerColumns = `id, hostname, labels, status, last_heartbeat, registered_at, revoked_at, scopes, coalesce(owner_email, '')`

func scanWorker(r pgx.Row) (Worker, error) {
	var w Worker
	err := r.Scan(&w.ID, &w.Hostname, &w.Labels, &w.Status, &w.LastHeartbeat, &w.RegisteredAt, &w.RevokedAt, &w.Scopes, &w.OwnerEmail)
	return w, err
}

// RegisterWorker creates an unscoped worker and returns it with its token, shown this once.
func (s *Store) RegisterWorker(ctx context.Context, hostname string, labels []string) (Worker, string, error) {
	return s.RegisterScopedWorker(ctx, hostname, labels, nil, "")
}

// RegisterScopedWorker creates a worker limited to scopes (normalised, see ParseScopes;
// empty: every plan), registered by the operator ownerEmail ("" when unknown), and
// returns it with its token, shown this once.
func (s *Store) RegisterScopedWorker(ctx context.Context, hostname string, labels []string, scopes Scopes, ownerEmail string) (Worker, string, error) {
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
	w, err := scanWorker(s.pool.QueryRow(ctx, `INSERT INTO workers (id, hostname, token_hash, labels, last_heartbeat, scopes, owner_email)
		VALUES ($1, $2, $3, $4, now(), $5, NULLIF($6, '')) RETURNING `+workerColumns, id, hostname, hashToken(token), nonNil(labels), scopes.Strings(),
		strings.TrimSpace(ownerEmail)))
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

// MarkOfflineWorkers marks workers silent for longer than after as offline.
func (s *Store) MarkOfflineWorkers(ctx context.Context, after time.Duration) (int, error) {
	tag, err := s.pool.Exec(ctx, `UPDATE workers SET status = 'offline'
		WHERE status = 'online' AND last_heartbeat < now() - make_interval(secs => $1)`, after.Seconds())
	if err != nil {
		return 0, fmt.Errorf("mark offline workers: %w", err)
	}
	return int(tag.RowsAffected()), nil
}
