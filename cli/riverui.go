package cli

import (
	"fmt"
	"log/slog"
	"net/http"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"riverqueue.com/riverui"
)

// riverUIPath is where `whilly serve` mounts River's own UI (SPEC §10), for admin
// sessions of the dashboard only.
const riverUIPath = "/riverui"

// newRiverUI is River's UI (riverui, its assets embedded in the binary) over the control
// plane's River client: jobs by state, their errors and attempts, queues, and the
// retry, cancel, delete and pause buttons.
//
// The handler is not started: started, it would refresh its job counts in the
// background every ten seconds, for ever, whether anyone looks or not; unstarted, each
// page view counts with one bounded query, and an idle control plane queries nothing.
func newRiverUI(rc *river.Client[pgx.Tx], log *slog.Logger) (http.Handler, error) {
	h, err := riverui.NewHandler(&riverui.HandlerOpts{
		Endpoints: riverui.NewEndpoints(rc, nil),
		Logger:    log.With("component", "riverui"),
		Prefix:    riverUIPath,
		// Job arguments name plans, tasks and deliveries; shown on demand.
		JobListHideArgsByDefault: true,
	})
	if err != nil {
		return nil, fmt.Errorf("build the River UI: %w", err)
	}
	// Its buttons post to its API: refuse posts from other sites (Sec-Fetch-Site, Origin)
	// besides the session cookie being SameSite=Strict.
	return http.NewCrossOriginProtection().Handler(h), nil
}
