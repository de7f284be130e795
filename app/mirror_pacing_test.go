package app

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/whilly-go/whilly/plan"
	"github.com/whilly-go/whilly/queue"
	"github.com/whilly-go/whilly/testkit"
)

// GitHub's secondary limits are per installation: the live plans of an installation get
// their syncs spread so that together they make InstallationSyncsPerMinute, a plan alone
// in its installation too, and a configured coalescing longer than that share wins.
// Finished plans do not count.
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
	for _, tc := range []struct {
		plan string
		want time.Duration
	}{
		{"busy0", 6 * time.Minute / InstallationSyncsPerMinute},
		{"busy5", 6 * time.Minute / InstallationSyncsPerMinute},
		{"alone", time.Minute / InstallationSyncsPerMinute},
	} {
		got, err := m.interval(ctx, tc.plan)
		if err != nil {
			t.Fatal(err)
		}
		if got != tc.want {
			t.Errorf("sync interval of %s = %v, want %v", tc.plan, got, tc.want)
		}
	}
	slow := NewMirror(st, nil, nil, MirrorConfig{Coalesce: time.Minute})
	if got, err := slow.interval(ctx, "alone"); err != nil || got != time.Minute {
		t.Errorf("sync interval of alone with a coalescing of 1m = %v, %v; want 1m", got, err)
	}
}
