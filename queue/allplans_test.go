package queue_test

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/whilly-go/whilly/plan"
	"github.com/whilly-go/whilly/queue"
)

// AllPlans follows the cursor to the last page, keeping the page's filter.
func TestAllPlansReadsEveryPage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, _ := newStore(t)
	var want []string
	for i := range 7 {
		id := fmt.Sprintf("p%d", i)
		if _, err := st.CreatePlan(ctx, id, "plan "+id, nil); err != nil {
			t.Fatal(err)
		}
		if i%3 == 0 {
			if _, err := st.CancelPlan(ctx, id, "test", ""); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want = append(want, id)
	}
	got, err := st.AllPlans(ctx, queue.PlanPage{Limit: 2, Status: plan.PlanActive})
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]string, len(got))
	for i, p := range got {
		ids[i] = p.ID
	}
	if !slices.Equal(ids, want) {
		t.Errorf("AllPlans(ACTIVE, 2 a page) = %v, want %v", ids, want)
	}
	all, err := st.AllPlans(ctx, queue.PlanPage{Limit: 3})
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 7 {
		t.Errorf("AllPlans(any status, 3 a page) = %d plans, want 7", len(all))
	}
	none, err := st.AllPlans(ctx, queue.PlanPage{Status: plan.PlanPaused})
	if err != nil || len(none) != 0 {
		t.Errorf("AllPlans(PAUSED) = %v, %v; want none", none, err)
	}
}
