package app

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/whilly-go/whilly/queue"
)

// HooksConfig says which of the GitHub side's reactions to a plan change are on.
type HooksConfig struct {
	// Dispatch (WHILLY_DISPATCH_ACTIONS): a GitHub plan's first change (its creation by
	// intake) records and enqueues its start dispatch.
	Dispatch bool
}

// Hooks returns the GitHub side's store hooks. On every change of a plan, in its
// transaction, the push tokens of leases it ended are queued for revocation, and a
// GitHub plan's mirror is marked dirty and its job inserted (a no-op when one waits
// already). They need only the job inserter, not the store: the store is built with
// them, before anything that uses it (issue 15: one store, hooks fixed at construction).
func Hooks(jobs Jobs, cfg HooksConfig) queue.Hooks {
	return queue.Hooks{PlanChanged: func(ctx context.Context, tx pgx.Tx, planID string) error {
		if err := revokeEnded(ctx, tx, jobs, planID); err != nil {
			return err
		}
		return markMirror(ctx, tx, jobs, cfg, planID)
	}}
}

// markMirror marks a GitHub plan's mirror dirty and inserts its mirror job; for other
// plans it costs one index probe.
func markMirror(ctx context.Context, tx pgx.Tx, jobs Jobs, cfg HooksConfig, planID string) error {
	dirty, fresh, err := queue.MarkMirrorDirty(ctx, tx, planID)
	if err != nil || !dirty {
		return err
	}
	if fresh && cfg.Dispatch {
		if err := startDispatch(ctx, tx, jobs, planID); err != nil {
			return err
		}
	}
	if _, err := jobs.InsertTx(ctx, tx, MirrorArgs{PlanID: planID}, nil); err != nil {
		return fmt.Errorf("enqueue mirror of plan %s: %w", planID, err)
	}
	return nil
}

// revokeEnded enqueues the plan's push token revocation when the change ended a lease
// that holds one. Plans without push tokens cost one index probe.
func revokeEnded(ctx context.Context, tx pgx.Tx, jobs Jobs, planID string) error {
	ended, err := queue.HasEndedPushTokens(ctx, tx, planID)
	if err != nil || !ended {
		return err
	}
	if _, err := jobs.InsertTx(ctx, tx, RevokePushTokensArgs{PlanID: planID}, nil); err != nil {
		return fmt.Errorf("enqueue push token revocation of plan %s: %w", planID, err)
	}
	return nil
}

// startDispatch records a new GitHub plan's start dispatch and inserts its job, in the
// transaction that creates the plan.
func startDispatch(ctx context.Context, tx pgx.Tx, jobs Jobs, planID string) error {
	id, ok, err := queue.RecordDispatchStart(ctx, tx, planID)
	if err != nil || !ok {
		return err
	}
	if _, err := jobs.InsertTx(ctx, tx, DispatchArgs{DispatchID: id, PlanID: planID}, nil); err != nil {
		return fmt.Errorf("enqueue the start dispatch of plan %s: %w", planID, err)
	}
	return nil
}
