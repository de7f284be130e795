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
// transaction, the store has marked a GitHub plan's mirror dirty (queue.ChangedPlan);
// the hook inserts what that calls for: the mirror's job when none waits (most changes
// of a busy plan need none) or when the plan has ended (its final sync, at once), the
// revocation of the push tokens of ended leases of the plan's installation when none
// waits either (one job for all its plans), and a new plan's start dispatch. They need
// only the job inserter, not the store: the store is built with them, before anything
// that uses it (one store, hooks fixed at construction).
func Hooks(jobs Jobs, cfg HooksConfig) queue.Hooks {
	return queue.Hooks{PlanChanged: func(ctx context.Context, tx pgx.Tx, c queue.ChangedPlan) error {
		if c.RevokeDue {
			if err := wantRevocation(ctx, tx, jobs, c.Installation); err != nil {
				return err
			}
		}
		if c.Fresh && cfg.Dispatch {
			if err := startDispatch(ctx, tx, jobs, c.PlanID); err != nil {
				return err
			}
		}
		if !c.MirrorDue && !c.Final {
			return nil
		}
		if _, err := jobs.InsertTx(ctx, tx, MirrorArgs{PlanID: c.PlanID, Final: c.Final}, nil); err != nil {
			return fmt.Errorf("enqueue mirror of plan %s: %w", c.PlanID, err)
		}
		return nil
	}}
}

// wantRevocation inserts the revocation job of installation inst, in the transaction of
// a change that ended a lease of one of its plans, unless one waits (queue.WantRevocation).
func wantRevocation(ctx context.Context, tx pgx.Tx, jobs Jobs, inst int64) error {
	insert, err := queue.WantRevocation(ctx, tx, inst)
	if err != nil || !insert {
		return err
	}
	if _, err := jobs.InsertTx(ctx, tx, RevokePushTokensArgs{Installation: &inst}, nil); err != nil {
		return fmt.Errorf("enqueue push token revocation of installation %d: %w", inst, err)
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
