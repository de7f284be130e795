package plan

import (
	"slices"
	"strings"
)

// Hold says why a PENDING task cannot be claimed and will not become claimable without
// someone acting: an operator (reset, budget, resume, edit) or another worker. The string
// values are persisted in answers and events; never rename one.
type Hold string

// Holds.
const (
	HoldPaused           Hold = "paused"            // the plan is paused (not on budget) or ended
	HoldBudget           Hold = "budget"            // the plan reached its budget
	HoldGate             Hold = "gate_rejected"     // the decision gate rejected it in a strict plan
	HoldDependencyFailed Hold = "dependency_failed" // a dependency, or one of theirs, FAILED or was CANCELLED
	HoldDependencyHeld   Hold = "dependency_held"   // a dependency is itself held for one of the reasons above
	HoldLabels           Hold = "labels"            // it needs worker labels this worker lacks
)

// OpenTask is what Outlook needs of a task that is neither DONE nor SKIPPED. A dependency
// that is not among the open tasks is taken as finished.
type OpenTask struct {
	ID           string
	Status       Status
	Dependencies []string
	Labels       []string
	GateRejected bool // REJECT by the gate in a strict plan
	BackingOff   bool // PENDING with not_before still ahead (a retry)
}

// PlanState is what Outlook needs of the plan.
type PlanState struct {
	Status          PlanStatus
	PauseReason     string
	BudgetExhausted bool
}

// HeldTask is one PENDING task that waits on something only someone else can change.
type HeldTask struct {
	TaskID string `json:"task_id"`
	Hold   Hold   `json:"reason"`
	Detail string `json:"detail"`
}

// Outlook is what a worker with some labels may still get from a plan: tasks claimable
// now, waiting on unfinished dependencies, backing off before a retry, or running (and so
// able to come back on failure), and the PENDING tasks held for good with why.
type Outlook struct {
	Claimable int        `json:"claimable"`
	Waiting   int        `json:"waiting"`
	Retrying  int        `json:"retrying"`
	Running   int        `json:"running"`
	Held      []HeldTask `json:"held"`
}

// Drained reports whether nothing is left that the worker may claim, now or later.
func (o Outlook) Drained() bool { return o.Claimable+o.Waiting+o.Retrying+o.Running == 0 }

// LookAhead classifies the open tasks of one plan for a worker carrying labels. A running
// task counts when the worker could take it over after a failure (its labels suffice); a
// task waiting on another worker's dependency counts as waiting, since that worker may
// still finish it. Tasks held by the plan's state or the gate, or downstream of a failure,
// are held whoever asks.
func LookAhead(p PlanState, tasks []OpenTask, labels []string) Outlook {
	byID := make(map[string]int, len(tasks))
	for i, t := range tasks {
		byID[t.ID] = i
	}
	var o Outlook
	held := func(t OpenTask, h Hold, detail string) {
		o.Held = append(o.Held, HeldTask{TaskID: t.ID, Hold: h, Detail: detail})
	}
	dead := newDeadEnds(tasks, byID)
	for i, t := range tasks {
		mayTake := covers(labels, t.Labels)
		switch t.Status {
		case StatusClaimed, StatusInProgress:
			if mayTake {
				o.Running++
			}
			continue
		case StatusPending:
		default:
			continue
		}
		switch {
		case p.Status == PlanPaused && p.PauseReason == "budget", p.Status == PlanActive && p.BudgetExhausted:
			held(t, HoldBudget, "the plan reached its budget")
		case p.Status != PlanActive:
			state := strings.ToLower(string(p.Status))
			if p.PauseReason != "" {
				state += " (" + p.PauseReason + ")"
			}
			held(t, HoldPaused, "the plan is "+state)
		case t.GateRejected:
			held(t, HoldGate, "rejected by the decision gate in a strict plan")
		default:
			if d, end := dead.dependency(i); end.task != "" {
				h, detail := HoldDependencyFailed, "dependency "+d
				if end.task != d {
					detail += " waits on " + end.task + ", which"
				}
				if end.gate {
					h, detail = HoldDependencyHeld, detail+" was rejected by the decision gate"
				} else {
					detail += " is " + string(end.status)
				}
				held(t, h, detail)
				continue
			}
			switch {
			case !mayTake:
				held(t, HoldLabels, "needs labels "+strings.Join(missing(labels, t.Labels), ", ")+" that this worker lacks")
			case t.BackingOff:
				o.Retrying++
			case waitsOnOpen(t, byID):
				o.Waiting++
			default:
				o.Claimable++
			}
		}
	}
	return o
}

// deadEnd is the task where a chain of dependencies ends for good: FAILED or CANCELLED,
// or rejected by the gate. The zero value means the chain can still finish.
type deadEnd struct {
	task   string
	status Status
	gate   bool
}

// deadEnds finds, with memoisation, the dead end under each open task.
type deadEnds struct {
	tasks []OpenTask
	byID  map[string]int
	memo  map[int]deadEnd
	busy  map[int]bool
}

func newDeadEnds(tasks []OpenTask, byID map[string]int) *deadEnds {
	return &deadEnds{tasks: tasks, byID: byID, memo: map[int]deadEnd{}, busy: map[int]bool{}}
}

// of is the dead end of task i itself or under it.
func (d *deadEnds) of(i int) deadEnd {
	if e, ok := d.memo[i]; ok {
		return e
	}
	if d.busy[i] {
		return deadEnd{} // a cycle: validation refuses them; never loop
	}
	d.busy[i] = true
	t := d.tasks[i]
	var e deadEnd
	switch {
	case t.Status == StatusFailed || t.Status == StatusCancelled:
		e = deadEnd{task: t.ID, status: t.Status}
	case t.Status == StatusPending && t.GateRejected:
		e = deadEnd{task: t.ID, status: t.Status, gate: true}
	case t.Status == StatusPending:
		_, e = d.dependency(i)
	}
	d.memo[i] = e
	return e
}

// dependency is the first dependency of task i with a dead end, and that end.
func (d *deadEnds) dependency(i int) (string, deadEnd) {
	for _, dep := range d.tasks[i].Dependencies {
		if j, open := d.byID[dep]; open {
			if e := d.of(j); e.task != "" {
				return dep, e
			}
		}
	}
	return "", deadEnd{}
}

func waitsOnOpen(t OpenTask, open map[string]int) bool {
	for _, d := range t.Dependencies {
		if _, ok := open[d]; ok {
			return true
		}
	}
	return false
}

// covers reports whether have holds every label of need.
func covers(have, need []string) bool {
	return len(missing(have, need)) == 0
}

func missing(have, need []string) []string {
	var out []string
	for _, l := range need {
		if !slices.Contains(have, l) {
			out = append(out, l)
		}
	}
	return out
}

// Sentence says in words why a held task waits, and what unblocks it.
func (h HeldTask) Sentence() string {
	switch h.Hold {
	case HoldGate, HoldDependencyHeld:
		return h.Detail + "; fix the task in the plan file and apply it again"
	case HoldDependencyFailed:
		return h.Detail + "; reset the failed task to try again"
	case HoldBudget:
		return h.Detail + "; raise it with 'whilly plan budget'"
	default:
		return h.Detail
	}
}
