package queue

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
)

// KindPullDeliveries is the periodic River job of pull mode (WHILLY_GITHUB_DELIVERIES=pull):
// one poll of the App's delivery log. It is persisted: never rename it.
const KindPullDeliveries = "whilly.github_pull_deliveries"

// PullDeliveriesArgs is the pull-mode poll job; it carries nothing.
type PullDeliveriesArgs struct{}

// Kind implements river.JobArgs.
func (PullDeliveriesArgs) Kind() string { return KindPullDeliveries }

// InsertOpts puts the poll in the GitHub queue.
func (PullDeliveriesArgs) InsertOpts() river.InsertOpts { return river.InsertOpts{Queue: QueueGitHub} }

// DeliveryCursor is a replica's lease on polling the App's delivery log, and how far the
// log has been taken. Since is the zero time before the first poll.
type DeliveryCursor struct {
	AppID int64
	Since time.Time
	token string
}

// LeaseDeliveryCursor takes the App's cursor for ttl (on the database clock) unless
// another replica holds it; ok is false then, and that replica polls.
func (s *Store) LeaseDeliveryCursor(ctx context.Context, appID int64, ttl time.Duration) (c DeliveryCursor, ok bool, err error) {
	c.AppID = appID
	var since *time.Time
	err = s.pool.QueryRow(ctx, `INSERT INTO github_delivery_cursor AS c (app_id, lease_token, leased_until)
		VALUES ($1, gen_random_uuid(), now() + make_interval(secs => $2))
		ON CONFLICT (app_id) DO UPDATE SET lease_token = gen_random_uuid(), leased_until = EXCLUDED.leased_until
			WHERE c.leased_until < now()
		RETURNING lease_token::text, delivered_at`, appID, ttl.Seconds()).Scan(&c.token, &since)
	if errors.Is(err, pgx.ErrNoRows) {
		return c, false, nil
	}
	if err != nil {
		return c, false, fmt.Errorf("lease the delivery cursor of App %d: %w", appID, err)
	}
	if since != nil {
		c.Since = *since
	}
	return c, true, nil
}

// ReleaseDeliveryCursor moves the cursor to since (never backwards) and ends the lease.
// A lease that expired and was taken by another replica is left alone: ErrLeaseLost.
func (s *Store) ReleaseDeliveryCursor(ctx context.Context, c DeliveryCursor, since time.Time) error {
	var at *time.Time
	if !since.IsZero() {
		at = &since
	}
	tag, err := s.pool.Exec(ctx, `UPDATE github_delivery_cursor
		SET delivered_at = greatest(delivered_at, $3), lease_token = NULL, leased_until = '-infinity', polled_at = now()
		WHERE app_id = $1 AND lease_token = $2::uuid`, c.AppID, c.token, at)
	if err != nil {
		return fmt.Errorf("move the delivery cursor of App %d: %w", c.AppID, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("move the delivery cursor of App %d: %w", c.AppID, ErrLeaseLost)
	}
	return nil
}
