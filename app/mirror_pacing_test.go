package app

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/whilly-go/whilly/internal/testkit"
	"github.com/whilly-go/whilly/plan"
	"github.com/whilly-go/whilly/queue"
)

// GitHub's secondary limit is per installation: an installation with several busy plans
// gets its syncs spread so that together they make InstallationSyncsPerMinute, while a
// plan alone in its installation keeps the configured coalescing when its state label is
// to change, and three times it when only its progress changed. Finished plans do not
// count.
func TestMirrorPacesAnInstallationsPlans(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := queue.NewStore(testkit.DB(t), nil, queue.Config{})
	m := NewMirror(st, nil, nil, MirrorConfig{Coalesce: 3 * time.Second})
	issuePlan := func(id string, inst int64, tasks int) {
		t.Helper()
		p := &plan.Plan{ID: id, Name: id, Repo: fmt.Sprintf("owner%d/repo", inst)}
		for i := range tasks {
			p.Tasks = append(p.Tasks, plan.Task{ID: fmt.Sprintf("T%d", i), Priority: plan.PriorityMedium, Status: plan.StatusPending,
				Description: "Fix the spelling of commit in README.md", AcceptanceCriteria: []string{"no commmit"}, TestSteps: []string{"grep commmit"}, MaxAttempts: 1})
		}
		if _, err := st.Import(ctx, p, queue.ImportOptions{GitHubIssueRef: p.Repo + "#" + id, InstallationID: inst}); err != nil {
			t.Fatalf("import %s: %v", id, err)
		}
	}
	for i := range 6 {
		issuePlan(fmt.Sprintf("busy%d", i), 9, 2)
	}
	issuePlan("finished", 9, 0) // no task: DONE at once
	issuePlan("alone", 10, 2)
	progress := func(id string) queue.MirrorState {
		return queue.MirrorState{PlanID: id, Label: LabelInProgress, PlanStatus: plan.PlanActive}
	}
	for _, tc := range []struct {
		name string
		st   queue.MirrorState
		want time.Duration
	}{
		{"busy0, progress", progress("busy0"), 6 * time.Minute / InstallationSyncsPerMinute},
		{"busy5, done", queue.MirrorState{PlanID: "busy5", Label: LabelInProgress, PlanStatus: plan.PlanDone}, 6 * time.Minute / InstallationSyncsPerMinute},
		{"alone, progress", progress("alone"), 9 * time.Second},
		{"alone, first label", queue.MirrorState{PlanID: "alone", PlanStatus: plan.PlanActive}, 3 * time.Second},
		{"alone, done", queue.MirrorState{PlanID: "alone", Label: LabelInProgress, PlanStatus: plan.PlanDone}, 3 * time.Second},
		{"alone, out of budget", queue.MirrorState{PlanID: "alone", Label: LabelInProgress, PlanStatus: plan.PlanPaused, PauseReason: "budget"}, 3 * time.Second},
		{"alone, paused by hand", queue.MirrorState{PlanID: "alone", Label: LabelInProgress, PlanStatus: plan.PlanPaused, PauseReason: "operator"}, 9 * time.Second},
	} {
		got, err := m.interval(ctx, tc.st)
		if err != nil {
			t.Fatal(err)
		}
		if got != tc.want {
			t.Errorf("sync interval of %s = %v, want %v", tc.name, got, tc.want)
		}
	}
}
