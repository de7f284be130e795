package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"time"

	"github.com/riverqueue/river"

	"github.com/whilly-go/whilly/queue"
)

// Pull mode (WHILLY_GITHUB_DELIVERIES=pull) takes webhooks without a public URL: GitHub
// records every delivery of the App's webhook, failed ones included, in the App's
// delivery log, and whilly polls it (GET /app/hook/deliveries, App JWT), fetches each new
// delivery it handles (GET /app/hook/deliveries/{id}) and hands it to the same
// store-then-process path as POST /webhook: webhook_deliveries, keyed by the delivery's
// GUID, and its intake job in one transaction. A poll is a periodic River job (the
// leader enqueues it once per interval); a lease on the cursor row keeps a slow poll and
// the next one from overlapping on two replicas, and the GUID keeps a delivery that is
// taken twice anyway (a redelivery, a lease that ran out) to one.
//
// Cost: one list request per interval while fewer than 100 deliveries arrived since the
// last poll, plus one request per new delivery of an event whilly handles, all against
// the App's own (JWT) rate limit, not the installations'. Latency: the interval, plus a
// job pickup.

// PullDefaultInterval is the poll interval when none is configured.
const PullDefaultInterval = 10 * time.Second

// pullOverlap is how far before the cursor each poll looks again: the log is ordered by
// delivery time, which is not exactly the order deliveries become visible in it.
// Deliveries already stored are recognised by their GUID and not fetched again.
const pullOverlap = time.Minute

// pullTimeout bounds one poll.
const pullTimeout = time.Minute

// pullBackfill is how far back the very first poll looks.
const pullBackfill = time.Hour

// PullConfig configures pull mode.
type PullConfig struct {
	// AppID keys the cursor: another App starts from scratch.
	AppID int64
	// Interval between polls; default PullDefaultInterval.
	Interval time.Duration
	// Events are the events whilly handles; deliveries of others are not fetched.
	Events []string
	// Receive stores a fetched delivery (the webhook receiver's path) and returns its
	// outcome; an error leaves the delivery to the next poll.
	Receive func(ctx context.Context, guid, event string, payload []byte) (string, error)
}

// DeliveryPuller polls the App's delivery log.
type DeliveryPuller struct {
	store   *queue.Store
	clients Clients
	log     *slog.Logger
	cfg     PullConfig
}

// NewDeliveryPuller returns the puller.
func NewDeliveryPuller(store *queue.Store, clients Clients, log *slog.Logger, cfg PullConfig) *DeliveryPuller {
	if cfg.Interval <= 0 {
		cfg.Interval = PullDefaultInterval
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &DeliveryPuller{store: store, clients: clients, log: log, cfg: cfg}
}

// PullResult says what a poll did.
type PullResult struct {
	Skipped  bool // another replica holds the cursor
	Listed   int  // deliveries in the log since the cursor (minus the overlap)
	Received int  // fetched and handed to Receive
}

// Poll takes the cursor, lists the log since it, fetches and receives the new
// deliveries oldest first, and moves the cursor past the last one received. It stops at
// the first delivery it cannot fetch or store, so that one is tried again next time.
func (p *DeliveryPuller) Poll(ctx context.Context) (PullResult, error) {
	var res PullResult
	// The lease outlives the poll job's timeout: a replica killed mid-poll holds up
	// polling for that long at most.
	cur, ok, err := p.store.LeaseDeliveryCursor(ctx, p.cfg.AppID, pullTimeout+30*time.Second)
	if err != nil || !ok {
		res.Skipped = !ok
		return res, err
	}
	next, err := p.take(ctx, cur, &res)
	if rerr := p.store.ReleaseDeliveryCursor(ctx, cur, next); rerr != nil {
		err = errors.Join(err, rerr)
	}
	return res, err
}

func (p *DeliveryPuller) take(ctx context.Context, cur queue.DeliveryCursor, res *PullResult) (time.Time, error) {
	ac, err := p.clients.App(ctx)
	if err != nil {
		return time.Time{}, err
	}
	since := cur.Since.Add(-pullOverlap)
	if cur.Since.IsZero() {
		since = time.Now().Add(-pullBackfill)
	}
	ds, err := ac.HookDeliveries(ctx, since)
	if err != nil {
		return time.Time{}, err
	}
	res.Listed = len(ds)
	slices.SortStableFunc(ds, func(a, b HookDelivery) int {
		if c := a.DeliveredAt.Compare(b.DeliveredAt); c != 0 {
			return c
		}
		return int(min(max(a.ID-b.ID, -1), 1))
	})
	guids := make([]string, 0, len(ds))
	for _, d := range ds {
		guids = append(guids, d.GUID)
	}
	known, err := p.store.KnownDeliveries(ctx, guids)
	if err != nil {
		return time.Time{}, err
	}
	var reached time.Time // the cursor moves to the newest delivery taken
	for _, d := range ds {
		if known[d.GUID] || d.GUID == "" || !slices.Contains(p.cfg.Events, d.Event) {
			reached = d.DeliveredAt
			continue
		}
		full, payload, err := ac.HookDelivery(ctx, d.ID)
		if err != nil {
			return reached, err
		}
		if full.GUID != d.GUID {
			return reached, fmt.Errorf("webhook delivery %d: GitHub listed GUID %s and sent %s", d.ID, d.GUID, full.GUID)
		}
		if _, err := p.cfg.Receive(ctx, d.GUID, d.Event, payload); err != nil {
			return reached, fmt.Errorf("store pulled delivery %s: %w", d.GUID, err)
		}
		known[d.GUID] = true // a redelivery later in the same list is the same delivery
		res.Received++
		reached = d.DeliveredAt
	}
	return reached, nil
}

// Schedule is the poll's periodic job, enqueued by every control plane with the App once
// per interval (one job whatever the number of replicas), and at start.
func (p *DeliveryPuller) Schedule() queue.Schedule {
	return queue.Schedule{Name: queue.KindPullDeliveries, Every: p.cfg.Interval, RunOnStart: true,
		Args: func() (river.JobArgs, *river.InsertOpts) {
			return queue.PullDeliveriesArgs{}, &river.InsertOpts{MaxAttempts: 1, UniqueOpts: river.UniqueOpts{ByPeriod: p.cfg.Interval}}
		}}
}

// Worker returns the River worker of the poll job.
func (p *DeliveryPuller) Worker() river.Worker[queue.PullDeliveriesArgs] { return &pullWorker{p: p} }

type pullWorker struct {
	river.WorkerDefaults[queue.PullDeliveriesArgs]
	p *DeliveryPuller
}

func (w *pullWorker) Timeout(*river.Job[queue.PullDeliveriesArgs]) time.Duration { return pullTimeout }

// Work polls once. A failed poll is not retried: the next period's poll starts from the
// same cursor.
func (w *pullWorker) Work(ctx context.Context, _ *river.Job[queue.PullDeliveriesArgs]) error {
	res, err := w.p.Poll(ctx)
	if err != nil {
		var rl *RateLimitError
		if errors.As(err, &rl) {
			w.p.log.WarnContext(ctx, "pull webhook deliveries: rate limited", "retry_in", rl.Wait, "error", err)
			return nil
		}
		var se *StatusError
		if errors.As(err, &se) && se.Status == http.StatusUnauthorized {
			w.p.log.WarnContext(ctx, "GitHub refuses the App's JWT, so no webhook delivery is pulled: check WHILLY_GITHUB_APP_ID and WHILLY_GITHUB_PRIVATE_KEY (whilly doctor checks them)",
				"app_id", w.p.cfg.AppID, "error", err)
		}
		return fmt.Errorf("pull webhook deliveries: %w", err)
	}
	if res.Received > 0 {
		w.p.log.InfoContext(ctx, "pulled webhook deliveries", "listed", res.Listed, "received", res.Received)
	}
	return nil
}
