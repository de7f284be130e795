package queue

// Webhook deliveries (webhook_deliveries) as the receiver stores them, and the comment
// commands a delivery ran (github_commands).

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/riverqueue/river"
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

// InsertOpts puts deliveries in their own queue (QueueGitHubIntake).
func (GitHubDeliveryArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: QueueGitHubIntake}
}

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
