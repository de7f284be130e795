package worker

import (
	"fmt"
	"strings"
	"testing"

	"github.com/whilly-go/whilly/plan"
)

// TestSummaryListsEachTaskOnce: a task's attempts update its one entry, whichever came
// in between; past MaxReportedTasks tasks are counted, not listed.
func TestSummaryListsEachTaskOnce(t *testing.T) {
	t.Parallel()
	var s Summary
	for i := range MaxReportedTasks + 5 {
		s.note(Outcome{PlanID: "p", TaskID: fmt.Sprintf("T%d", i), Status: "done", Cost: 1})
	}
	// The same task id in another plan is another task.
	s.note(Outcome{PlanID: "q", TaskID: "T0", Status: "failed", Cost: 2})
	s.note(Outcome{PlanID: "p", TaskID: "T7", Status: "failed", Final: true, Cost: 3})
	s.note(Outcome{PlanID: "p", TaskID: "T0", Status: "failed", Cost: 4})

	if len(s.Tasks) != MaxReportedTasks || s.TasksUnlisted != 6 {
		t.Fatalf("listed %d, unlisted %d; want %d and 6", len(s.Tasks), s.TasksUnlisted, MaxReportedTasks)
	}
	want := map[int]TaskRun{
		0: {PlanID: "p", TaskID: "T0", Status: TaskRunRetrying, Attempts: 2, Cost: 5},
		7: {PlanID: "p", TaskID: "T7", Status: TaskRunFailed, Attempts: 2, Cost: 4},
		8: {PlanID: "p", TaskID: "T8", Status: "done", Attempts: 1, Cost: 1},
	}
	for i, w := range want {
		if got := s.Tasks[i]; got != w {
			t.Errorf("entry %d: %+v, want %+v", i, got, w)
		}
	}
}

// TestSummaryTellsApartIdsThatJoinAlike: ids come from the control plane and may hold
// any byte; two tasks whose plan and task ids would join into one string stay two.
func TestSummaryTellsApartIdsThatJoinAlike(t *testing.T) {
	t.Parallel()
	var s Summary
	s.note(Outcome{PlanID: "a\x00b", TaskID: "c", Status: "done"})
	s.note(Outcome{PlanID: "a", TaskID: "b\x00c", Status: "done"})
	if len(s.Tasks) != 2 || s.Tasks[0].Attempts != 1 || s.Tasks[1].Attempts != 1 {
		t.Fatalf("two tasks whose ids join alike: %d entries, want two of one attempt each", len(s.Tasks))
	}
}

// BenchmarkSummaryNote: noting a task's outcome costs the same whether the worker ran
// ten tasks before it or a thousand. Each outcome's plan id is a string of its own, as
// one decoded from each claim is.
func BenchmarkSummaryNote(b *testing.B) {
	ids := make([]string, MaxReportedTasks)
	for i := range ids {
		ids[i] = fmt.Sprintf("T%04d", i)
	}
	const planID = "0b6f3c8e-8f0e-4b8e-9a55-3d6f0f5b2a10"
	var s Summary
	i := 0
	for b.Loop() {
		if i == len(ids) {
			s, i = Summary{}, 0
		}
		s.note(Outcome{PlanID: strings.Clone(planID), TaskID: ids[i], Status: "done", Cost: plan.USD(1)})
		i++
	}
}
