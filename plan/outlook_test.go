package plan

import (
	"reflect"
	"testing"
)

func TestLookAhead(t *testing.T) {
	t.Parallel()
	active := PlanState{Status: PlanActive}
	pending := func(id string, deps ...string) OpenTask {
		return OpenTask{ID: id, Status: StatusPending, Dependencies: deps}
	}
	rejected := OpenTask{ID: "R", Status: StatusPending, GateRejected: true}
	failed := OpenTask{ID: "F", Status: StatusFailed}
	tests := []struct {
		name   string
		plan   PlanState
		tasks  []OpenTask
		labels []string
		want   Outlook
	}{
		{name: "empty", plan: active, want: Outlook{}},
		{name: "claimable and waiting", plan: active, tasks: []OpenTask{pending("A"), pending("B", "A"), pending("C", "DONE-ONE")},
			want: Outlook{Claimable: 2, Waiting: 1}},
		{name: "gate", plan: active, tasks: []OpenTask{rejected},
			want: Outlook{Held: []HeldTask{{"R", HoldGate, "rejected by the decision gate in a strict plan"}}}},
		{name: "failed dependency, also two steps down", plan: active, tasks: []OpenTask{failed, pending("A", "F"), pending("B", "A")},
			want: Outlook{Held: []HeldTask{
				{"A", HoldDependencyFailed, "dependency F is FAILED"},
				{"B", HoldDependencyFailed, "dependency A waits on F, which is FAILED"},
			}}},
		{name: "cancelled dependency", plan: active, tasks: []OpenTask{{ID: "X", Status: StatusCancelled}, pending("A", "X")},
			want: Outlook{Held: []HeldTask{{"A", HoldDependencyFailed, "dependency X is CANCELLED"}}}},
		{name: "dependency rejected by the gate", plan: active, tasks: []OpenTask{rejected, pending("A", "R")},
			want: Outlook{Held: []HeldTask{
				{"R", HoldGate, "rejected by the decision gate in a strict plan"},
				{"A", HoldDependencyHeld, "dependency R was rejected by the decision gate"},
			}}},
		{name: "budget", plan: PlanState{Status: PlanPaused, PauseReason: "budget"}, tasks: []OpenTask{pending("A")},
			want: Outlook{Held: []HeldTask{{"A", HoldBudget, "the plan reached its budget"}}}},
		{name: "budget exhausted while active", plan: PlanState{Status: PlanActive, BudgetExhausted: true}, tasks: []OpenTask{pending("A")},
			want: Outlook{Held: []HeldTask{{"A", HoldBudget, "the plan reached its budget"}}}},
		{name: "paused", plan: PlanState{Status: PlanPaused, PauseReason: "approval"}, tasks: []OpenTask{pending("A")},
			want: Outlook{Held: []HeldTask{{"A", HoldPaused, "the plan is paused (approval)"}}}},
		{name: "labels", plan: active, labels: []string{"linux"},
			tasks: []OpenTask{{ID: "G", Status: StatusPending, Labels: []string{"gpu", "linux"}}},
			want:  Outlook{Held: []HeldTask{{"G", HoldLabels, "needs labels gpu that this worker lacks"}}}},
		{name: "waits on another worker's task", plan: active,
			tasks: []OpenTask{{ID: "G", Status: StatusPending, Labels: []string{"gpu"}}, pending("A", "G")},
			want:  Outlook{Waiting: 1, Held: []HeldTask{{"G", HoldLabels, "needs labels gpu that this worker lacks"}}}},
		{name: "running counts only when the worker could take it over", plan: active,
			tasks: []OpenTask{{ID: "A", Status: StatusInProgress}, {ID: "G", Status: StatusClaimed, Labels: []string{"gpu"}}},
			want:  Outlook{Running: 1}},
		{name: "retrying", plan: active, tasks: []OpenTask{{ID: "A", Status: StatusPending, BackingOff: true}},
			want: Outlook{Retrying: 1}},
		{name: "a cycle does not loop", plan: active, tasks: []OpenTask{pending("A", "B"), pending("B", "A")},
			want: Outlook{Waiting: 2}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := LookAhead(tt.plan, tt.tasks, tt.labels)
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("LookAhead = %+v, want %+v", got, tt.want)
			}
			if got.Drained() != (tt.want.Claimable+tt.want.Waiting+tt.want.Retrying+tt.want.Running == 0) {
				t.Errorf("Drained = %v", got.Drained())
			}
		})
	}
}
