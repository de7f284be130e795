package server

import (
	"context"
	"log/slog"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/whilly-go/whilly/queue"
	"github.com/whilly-go/whilly/triz"
)

// StoreHooks are the store's hooks for the capabilities cfg configures, inserting
// through jobs: the GitHub side's (mirror, push tokens, dispatch) and the TRIZ
// analyzer's. New builds the store with them, before anything that uses it; this is the
// only place they are assembled (queue's tests run its races under them too).
func StoreHooks(cfg Config, jobs *river.Client[pgx.Tx], log *slog.Logger) queue.Hooks {
	var h queue.Hooks
	if cfg.GitHub.intake() {
		h = githubConfig(cfg).Hooks(jobs)
	}
	if cfg.TRIZ.Enabled {
		h.TaskFailed = func(ctx context.Context, tx pgx.Tx, f queue.TaskFailure) error {
			return triz.Enqueue(ctx, tx, jobs, f, log)
		}
	}
	return h
}
