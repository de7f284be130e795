package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/whilly-go/whilly/control/client"
	"github.com/whilly-go/whilly/queue"
)

type eventsTailOptions struct {
	planID    string
	since     int64
	recent    int
	asJSON    bool
	connect   string
	tokenFile string
	insecure  bool
}

func (a *app) eventsCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "events", Short: "Read the audit log of events"}
	o := eventsTailOptions{}
	tail := &cobra.Command{
		Use: "tail [--plan ID] [--json] [--since ID]",
		Example: `  whilly events tail --plan demo --recent 50
  whilly events tail --json --since 1200 | jq .type`,
		Short: "Print recent events, then follow new ones live until interrupted",
		Long: `Print the most recent events (--recent, default 20), or every event after --since ID,
then follow new ones as they are written, one line each: time, id, type, plan, task and a
short payload (--json: one event object per line). Ctrl-C ends it.

Without --connect it reads the local database (WHILLY_DATABASE_URL, or the embedded one)
and wakes on its LISTEN/NOTIFY channel. With --connect URL it follows that control plane's
event stream with the API token in --token-file, else in WHILLY_API_TOKEN (a read token
from 'whilly admin token mint --owner EMAIL'; a worker or admin token works too).`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !cmd.Flags().Changed("since") {
				o.since = -1
			} else if o.since < 0 {
				return failf("--since must be an event id (0 or more), got %d", o.since)
			}
			if o.recent < 0 || o.recent > 10_000 {
				return failf("--recent must be between 0 and 10000, got %d", o.recent)
			}
			if o.connect != "" {
				return a.tailRemote(cmd.Context(), o)
			}
			return a.tailLocal(cmd.Context(), o)
		},
	}
	f := tail.Flags()
	f.StringVar(&o.planID, "plan", "", "only the events of this plan")
	f.Int64Var(&o.since, "since", 0, "print every event after this id first (default: the --recent latest)")
	f.IntVar(&o.recent, "recent", 20, "how many recent events to print first, without --since")
	f.BoolVar(&o.asJSON, "json", false, "print each event as a JSON object on its own line")
	f.StringVar(&o.connect, "connect", "", "control plane URL (default: the local database)")
	f.StringVar(&o.tokenFile, "token-file", "", "with --connect: file holding the API token (default $WHILLY_API_TOKEN)")
	f.BoolVar(&o.insecure, "insecure", false, "with --connect: allow plain http:// to a non-loopback host")
	cmd.AddCommand(tail)
	return cmd
}

// eventLine is what one printed event needs, from the store or from the API.
type eventLine struct {
	ID        int64           `json:"id"`
	Type      string          `json:"type"`
	PlanID    string          `json:"plan_id"`
	TaskID    string          `json:"task_id,omitempty"`
	Payload   json.RawMessage `json:"payload"`
	Detail    json.RawMessage `json:"detail"`
	CreatedAt time.Time       `json:"created_at"`
}

func storeEvent(e queue.Event) eventLine {
	return eventLine{ID: e.ID, Type: e.Type, PlanID: e.PlanID, TaskID: e.TaskID, Payload: e.Payload, Detail: e.Detail, CreatedAt: e.CreatedAt}
}

func apiEvent(e client.Event) eventLine {
	return eventLine{ID: e.ID, Type: e.Type, PlanID: e.PlanID, TaskID: e.TaskID, Payload: e.Payload, Detail: e.Detail, CreatedAt: e.CreatedAt}
}

const maxPayloadText = 160

func (a *app) printEvent(e eventLine, asJSON bool) error {
	if asJSON {
		b, err := json.Marshal(e)
		if err != nil {
			return fmt.Errorf("encode event %d: %w", e.ID, err)
		}
		_, err = fmt.Fprintf(a.io.Out, "%s\n", b)
		return err
	}
	task := e.TaskID
	if task == "" {
		task = "-"
	}
	payload := strings.TrimSpace(string(e.Payload))
	if payload == "{}" || payload == "null" {
		payload = ""
	}
	payload = termLine(payload) // one line without escape sequences, whatever the payload holds
	if len(payload) > maxPayloadText {
		payload = payload[:maxPayloadText] + "…"
	}
	_, err := fmt.Fprintf(a.io.Out, "%s  %8d  %-22s %-24s %-16s %s\n",
		e.CreatedAt.Local().Format("2006-01-02 15:04:05.000"), e.ID, termLine(e.Type), termLine(e.PlanID), termLine(task), payload)
	return err
}

// tailLocal follows the local database with a queue.Follower, woken by the listener's
// notifications.
func (a *app) tailLocal(ctx context.Context, o eventsTailOptions) error {
	st, closeDB, err := a.openStore(ctx)
	if err != nil {
		return err
	}
	defer closeDB()
	if o.planID != "" {
		// A plan that never existed would have the tail wait forever for its events; a
		// deleted plan's events stay in the audit log and are still printed.
		if _, err := st.PlanStatus(ctx, o.planID); errors.Is(err, queue.ErrNotFound) {
			if latest, err := st.LatestEventID(ctx, o.planID); err != nil {
				return err
			} else if latest == 0 {
				return noSuchPlan(o.planID)
			}
		} else if err != nil {
			return err
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ln := queue.NewListener(st.Pool(), a.log)
	go func() {
		if err := ln.Run(ctx); err != nil {
			a.log.ErrorContext(ctx, "event listener stopped", "error", err)
		}
	}()
	start := o.since // nothing at or below it is printed
	if start < 0 {
		if start, err = a.recentStart(ctx, st, o); err != nil {
			return storeErr(err)
		}
	}
	f := st.Follow(ln, queue.FollowOptions{PlanID: o.planID, After: start})
	defer f.Close()
	for {
		evs, err := f.Next(ctx, 0)
		if err != nil {
			return quietCancel(ctx, err)
		}
		for _, e := range evs {
			if err := a.printEvent(storeEvent(e), o.asJSON); err != nil {
				return err
			}
		}
	}
}

// noSuchPlan is the answer to --plan naming a plan that does not exist (or that the
// token may not read).
func noSuchPlan(id string) error {
	return failf("no plan %s: 'whilly plan list' lists the plans", id)
}

// recentStart returns the id after which the --recent latest events (of the plan) lie.
func (a *app) recentStart(ctx context.Context, st *queue.Store, o eventsTailOptions) (int64, error) {
	latest, err := st.LatestEventID(ctx, o.planID)
	if err != nil || o.recent == 0 || latest == 0 {
		return latest, err
	}
	return widenBack(latest, o.recent, func(after int64) ([]int64, error) {
		evs, err := st.Events(ctx, queue.EventFilter{PlanID: o.planID, After: after, Limit: 1000})
		ids := make([]int64, len(evs))
		for i, e := range evs {
			ids[i] = e.ID
		}
		return ids, err
	})
}

// widenBack finds the id after which the recent latest events lie, the newest being
// latest: ids are shared by every plan, so a window back from latest is widened until it
// holds enough events of the plan. page lists the (plan's) ids after an id, 1000 at most.
func widenBack(latest int64, recent int, page func(after int64) ([]int64, error)) (int64, error) {
	for window := int64(recent); ; window *= 4 {
		from := max(latest-window, 0)
		var ids []int64
		for after := from; ; {
			p, err := page(after)
			if err != nil {
				return 0, err
			}
			ids = append(ids, p...)
			if len(p) < 1000 {
				break
			}
			after = p[len(p)-1]
		}
		if len(ids) >= recent || from == 0 {
			if len(ids) <= recent {
				return from, nil
			}
			return ids[len(ids)-recent-1], nil
		}
	}
}

// quietCancel turns the error of an interrupted read into a clean end.
func quietCancel(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// tailRemote follows a control plane's event stream, reconnecting with the id of the
// last event printed.
func (a *app) tailRemote(ctx context.Context, o eventsTailOptions) error {
	api, err := a.connectAPI(o.connect, o.tokenFile, o.insecure, "whilly-events", "events tail --connect needs an API token in --token-file or WHILLY_API_TOKEN (mint a read token with 'whilly admin token mint --owner EMAIL')")
	if err != nil {
		return err
	}
	if o.planID != "" {
		// As tailLocal: a plan that never existed, none of whose events are left.
		if _, err := api.GetPlan(ctx, o.planID); client.IsNotFound(err) {
			page, err := api.ListEvents(ctx, client.EventQuery{PlanID: o.planID, Limit: 1})
			if err == nil && len(page.Events) == 0 {
				return noSuchPlan(o.planID)
			}
		} else if err != nil && !client.IsUnauthorized(err) && !client.IsForbidden(err) {
			return envf("read plan %s from %s: %v", o.planID, o.connect, err)
		}
	}
	last := o.since
	if last < 0 {
		if last, err = remoteRecentStart(ctx, api, o); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if client.IsUnauthorized(err) || client.IsForbidden(err) {
				return envf("the control plane at %s refused the token: %v", o.connect, err)
			}
			return envf("read events from %s: %v", o.connect, err)
		}
	}
	// Print what lies after the starting point first: the stream replays it too, but a
	// stream that starts at 0 begins from now instead.
	for {
		page, err := api.ListEvents(ctx, client.EventQuery{PlanID: o.planID, After: last, Limit: 1000})
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if client.IsUnauthorized(err) || client.IsForbidden(err) {
				return envf("the control plane at %s refused the token: %v", o.connect, err)
			}
			return envf("read events from %s: %v", o.connect, err)
		}
		for _, e := range page.Events {
			if err := a.printEvent(apiEvent(e), o.asJSON); err != nil {
				return err
			}
			last = max(last, e.ID)
		}
		if len(page.Events) < 1000 {
			break
		}
	}
	// The control plane's follower sends each event once, never one at or below the
	// Last-Event-ID a stream starts from: nothing is printed twice.
	backoff := 200 * time.Millisecond
	for {
		err := api.StreamEvents(ctx, o.planID, last, func(e client.Event) error {
			backoff = 200 * time.Millisecond
			last = max(last, e.ID)
			return a.printEvent(apiEvent(e), o.asJSON)
		})
		if ctx.Err() != nil {
			return nil
		}
		if client.IsUnauthorized(err) || client.IsForbidden(err) {
			return envf("the control plane at %s refused the token: %v", o.connect, err)
		}
		if err != nil && !errors.Is(err, client.ErrStreamClosed) {
			a.log.WarnContext(ctx, "event stream interrupted; reconnecting", "error", err, "retry_in", backoff)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 10*time.Second)
	}
}

// remoteRecentStart finds, through the events API (which pages forwards only), the id
// after which the --recent latest events lie: a galloping then binary search for the
// newest id, then a window widened back from it.
func remoteRecentStart(ctx context.Context, api *client.Client, o eventsTailOptions) (int64, error) {
	anyAfter := func(after int64) (bool, error) {
		page, err := api.ListEvents(ctx, client.EventQuery{PlanID: o.planID, After: after, Limit: 1})
		return len(page.Events) > 0, err
	}
	// The newest id is the largest x such that anyAfter(x-1).
	lo, hi := int64(0), int64(1) // invariant: anyAfter(lo) or lo == 0; !anyAfter(hi) once found
	for {
		ok, err := anyAfter(hi)
		if err != nil {
			return 0, err
		}
		if !ok {
			break
		}
		lo, hi = hi, hi*2
		if hi > 1<<62 {
			break
		}
	}
	for lo+1 < hi {
		mid := lo + (hi-lo)/2
		ok, err := anyAfter(mid)
		if err != nil {
			return 0, err
		}
		if ok {
			lo = mid
		} else {
			hi = mid
		}
	}
	latest := hi // no event after hi, some after lo: the newest id is hi
	if ok, err := anyAfter(0); err != nil || !ok {
		return 0, err
	}
	if o.recent == 0 {
		return latest, nil
	}
	return widenBack(latest, o.recent, func(after int64) ([]int64, error) {
		page, err := api.ListEvents(ctx, client.EventQuery{PlanID: o.planID, After: after, Limit: 1000})
		ids := make([]int64, len(page.Events))
		for i, e := range page.Events {
			ids[i] = e.ID
		}
		return ids, err
	})
}
