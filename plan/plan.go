// Package plan is whilly's domain: plans, tasks, their statuses and the task state
// machine, dependency checks, the decision gate, exact budget arithmetic and the plan-file
// codec. It is pure: it imports only the standard library (never another whilly package,
// pgx, River, chi or go-github) and does no I/O, so every rule here can be table-tested
// and reused by the store, the control plane, the worker and the CLI alike.
package plan

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// Status is a task's state. The string values are persisted and appear on the wire.
type Status string

// Task statuses.
const (
	StatusPending    Status = "PENDING"
	StatusClaimed    Status = "CLAIMED"
	StatusInProgress Status = "IN_PROGRESS"
	StatusDone       Status = "DONE"
	StatusFailed     Status = "FAILED"
	StatusSkipped    Status = "SKIPPED"
	StatusCancelled  Status = "CANCELLED"
)

// MaxTaskPage is the most tasks one page of a task list holds (GET /v1/plans/{plan}/tasks).
const MaxTaskPage = 5000

// Statuses lists every task status in lifecycle order.
func Statuses() []Status {
	return []Status{StatusPending, StatusClaimed, StatusInProgress, StatusDone, StatusFailed, StatusSkipped, StatusCancelled}
}

// Terminal reports whether no transition but RESET leaves s.
func (s Status) Terminal() bool {
	switch s {
	case StatusDone, StatusFailed, StatusSkipped, StatusCancelled:
		return true
	case StatusPending, StatusClaimed, StatusInProgress:
		return false
	}
	return false
}

// Valid reports whether s is one of the seven statuses, in canonical (upper) case.
func (s Status) Valid() bool {
	switch s {
	case StatusPending, StatusClaimed, StatusInProgress, StatusDone, StatusFailed, StatusSkipped, StatusCancelled:
		return true
	}
	return false
}

// ParseStatus reads a status case-insensitively ("pending", "In_Progress").
func ParseStatus(s string) (Status, error) {
	st := Status(asciiUpper(s))
	if !st.Valid() {
		return "", fmt.Errorf("parse status %q: must be one of %s", s, statusList)
	}
	return st, nil
}

// statusList is Statuses joined for error messages.
const statusList = "PENDING, CLAIMED, IN_PROGRESS, DONE, FAILED, SKIPPED, CANCELLED"

// Satisfies reports whether a dependency in status s lets its dependents run.
func (s Status) Satisfies() bool { return s == StatusDone || s == StatusSkipped }

// PlanStatus is a plan's state.
type PlanStatus string

// Plan statuses.
const (
	PlanActive    PlanStatus = "ACTIVE"
	PlanPaused    PlanStatus = "PAUSED"
	PlanDone      PlanStatus = "DONE"
	PlanFailed    PlanStatus = "FAILED"
	PlanCancelled PlanStatus = "CANCELLED"
)

// Priority orders claimable tasks: critical first.
type Priority string

// Task priorities.
const (
	PriorityCritical Priority = "critical"
	PriorityHigh     Priority = "high"
	PriorityMedium   Priority = "medium"
	PriorityLow      Priority = "low"
)

// Priorities lists every priority, most urgent first.
func Priorities() []Priority {
	return []Priority{PriorityCritical, PriorityHigh, PriorityMedium, PriorityLow}
}

// Valid reports whether p is one of the four priorities, in canonical (lower) case.
func (p Priority) Valid() bool { return p.Rank() >= 0 }

// Rank orders priorities for claiming: 0 for critical up to 3 for low, -1 when invalid.
func (p Priority) Rank() int {
	switch p {
	case PriorityCritical:
		return 0
	case PriorityHigh:
		return 1
	case PriorityMedium:
		return 2
	case PriorityLow:
		return 3
	}
	return -1
}

// ParsePriority reads a priority case-insensitively ("High").
func ParsePriority(s string) (Priority, error) {
	p := Priority(asciiLower(s))
	if !p.Valid() {
		return "", fmt.Errorf("parse priority %q: must be one of %s", s, priorityList)
	}
	return p, nil
}

// priorityList is Priorities joined for error messages.
const priorityList = "critical, high, medium, low"

// asciiUpper upper-cases ASCII letters only, so that look-alike Unicode letters (the
// Kelvin sign, the long s) never fold into a valid status.
func asciiUpper(s string) string {
	return strings.Map(func(r rune) rune {
		if 'a' <= r && r <= 'z' {
			return r - 'a' + 'A'
		}
		return r
	}, s)
}

// asciiLower is asciiUpper's counterpart for priorities.
func asciiLower(s string) string {
	return strings.Map(func(r rune) rune {
		if 'A' <= r && r <= 'Z' {
			return r - 'A' + 'a'
		}
		return r
	}, s)
}

// DefaultMaxAttempts is a task's attempt limit when the plan file names none.
const DefaultMaxAttempts = 3

// Verify is a command run in the workspace after the agent; a required one that fails
// fails the attempt.
type Verify struct {
	Name     string
	Command  string
	Required bool
}

// Task is one unit of agent work inside a plan. Its ID is unique within the plan only.
type Task struct {
	ID                 string
	Status             Status
	Priority           Priority
	Description        string
	Dependencies       []string
	KeyFiles           []string
	AcceptanceCriteria []string
	TestSteps          []string
	PRDRequirement     string
	MaxAttempts        int
	Labels             []string
}

// MaxMaxAttempts is the largest attempt limit a task may carry.
const MaxMaxAttempts = 100

// Plan is a named set of tasks with a budget, as imported from or exported to a plan file.
type Plan struct {
	ID     string
	Name   string
	Budget *USD // nil: unlimited
	Strict bool
	Repo   string // owner/name, optional
	Verify []Verify
	Tasks  []Task
	// Origin and RepoTargets are the Python system's "origin" (an object) and
	// "repo_targets" (a list of objects) as the file gave them: whilly does not use them,
	// and writes them back in an export. Nil when the file has none.
	Origin      json.RawMessage
	RepoTargets json.RawMessage
	// Notes says what Parse read past and why (keys of the Python system's files that
	// whilly has no use for, keys it mapped): for the reader to show. Never stored.
	Notes []string
}

// DefinitionChanges names the plan-file fields in which b's definition differs from a's:
// what the file says the work is, not its runtime state (status). Lists compare by
// content, nil and empty alike.
func DefinitionChanges(a, b Task) []string {
	var out []string
	add := func(name string, same bool) {
		if !same {
			out = append(out, name)
		}
	}
	add("priority", a.Priority == b.Priority)
	add("description", a.Description == b.Description)
	add("dependencies", slices.Equal(a.Dependencies, b.Dependencies))
	add("key_files", slices.Equal(a.KeyFiles, b.KeyFiles))
	add("acceptance_criteria", slices.Equal(a.AcceptanceCriteria, b.AcceptanceCriteria))
	add("test_steps", slices.Equal(a.TestSteps, b.TestSteps))
	add("prd_requirement", a.PRDRequirement == b.PRDRequirement)
	add("labels", slices.Equal(a.Labels, b.Labels))
	add("max_attempts", a.MaxAttempts == b.MaxAttempts)
	return out
}
