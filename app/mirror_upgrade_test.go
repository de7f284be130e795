package app

import (
	"context"
	"testing"

	"github.com/riverqueue/river"

	"github.com/whilly-go/whilly/queue"
	"github.com/whilly-go/whilly/testkit"
)

// mirrorArgsBeforeFinal is MirrorArgs as control planes inserted it before it had Final: a
// paced job of theirs may still be queued when an upgraded control plane starts.
type mirrorArgsBeforeFinal struct {
	PlanID string `json:"plan_id" river:"unique"`
	Verify bool   `json:"verify,omitempty"`
}

func (mirrorArgsBeforeFinal) Kind() string { return KindMirror }

func (mirrorArgsBeforeFinal) InsertOpts() river.InsertOpts { return MirrorArgs{}.InsertOpts() }

// After an upgrade, the changes of a plan whose paced mirror job an older control plane
// queued still join that job (the unique key is the same), and the plan's final sync is
// a job of its own.
func TestAMirrorJobQueuedBeforeAnUpgradeStillCoalesces(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	jobs, err := queue.NewInserter(queue.NewStore(testkit.DB(t), nil, queue.Config{}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := jobs.Insert(ctx, mirrorArgsBeforeFinal{PlanID: "gh/octo/shop/1"}, nil); err != nil {
		t.Fatal(err)
	}
	res, err := jobs.Insert(ctx, MirrorArgs{PlanID: "gh/octo/shop/1"}, nil)
	if err != nil || !res.UniqueSkippedAsDuplicate {
		t.Errorf("a change's mirror job beside the older queued one: skipped %v (%v), want skipped as a duplicate",
			res != nil && res.UniqueSkippedAsDuplicate, err)
	}
	res, err = jobs.Insert(ctx, MirrorArgs{PlanID: "gh/octo/shop/1", Final: true}, nil)
	if err != nil || res.UniqueSkippedAsDuplicate {
		t.Errorf("the final sync beside the older queued job: skipped %v (%v), want a job of its own",
			res != nil && res.UniqueSkippedAsDuplicate, err)
	}
}
