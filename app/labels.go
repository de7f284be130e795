package app

import (
	"github.com/whilly-go/whilly/plan"
	"github.com/whilly-go/whilly/queue"
)

// The state labels. Exactly one is on an issue at a time. They are the
// public contract: never rename one.
const (
	LabelPending        = "whilly-pending"
	LabelInProgress     = "whilly-in-progress"
	LabelDone           = "whilly-done"
	LabelFailed         = "whilly-failed"
	LabelNeedsInfo      = "whilly-needs-info"
	LabelBudgetExceeded = "whilly-budget-exceeded"
	LabelCancelled      = "whilly-cancelled"
)

// StateLabels returns the state labels with the colours and descriptions whilly creates
// them with.
func StateLabels() []Label {
	return []Label{
		{LabelPending, "fbca04", "whilly: work requested; whilly turns the issue into a plan"},
		{LabelInProgress, "1d76db", "whilly: a plan exists for this issue and runs"},
		{LabelDone, "0e8a16", "whilly: every task is done or skipped"},
		{LabelFailed, "d73a4a", "whilly: the plan cannot progress; see the status comment"},
		{LabelNeedsInfo, "d876e3", "whilly: the issue needs more detail; edit it and add whilly-pending again"},
		{LabelBudgetExceeded, "e99695", "whilly: paused on its budget; raise it with /whilly budget USD"},
		{LabelCancelled, "cfd3d7", "whilly: cancelled by command or by closing the issue"},
	}
}

// StateLabel returns the definition of a state label.
func StateLabel(name string) (Label, bool) {
	for _, l := range StateLabels() {
		if l.Name == name {
			return l, true
		}
	}
	return Label{}, false
}

// IsStateLabel reports whether name is one of the state labels.
func IsStateLabel(name string) bool {
	_, ok := StateLabel(name)
	return ok
}

// LabelFor is the state label of a plan.
func LabelFor(p queue.PlanInfo) string {
	switch p.Status {
	case plan.PlanDone:
		return LabelDone
	case plan.PlanFailed:
		return LabelFailed
	case plan.PlanCancelled:
		return LabelCancelled
	case plan.PlanPaused:
		if p.PauseReason == "budget" {
			return LabelBudgetExceeded
		}
		return LabelInProgress
	case plan.PlanActive:
		return LabelInProgress
	}
	return LabelInProgress
}
