package worker

// The report a worker prints as it exits: its counts, a line per task it ran and a line
// per plan it touched, as key=value fields that a shell script reads without JSON tools
// (the GitHub Action's outputs and job summary come from them).

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/whilly-go/whilly/control/client"
	"github.com/whilly-go/whilly/plan"
)

// Limits of the report: a worker that runs for weeks lists its first MaxReportedTasks
// tasks (Summary.TasksUnlisted counts the others), and reads the state of at most
// MaxReportedPlans plans as it exits.
const (
	MaxReportedTasks = 1000
	MaxReportedPlans = 20
)

// Statuses of a TaskRun besides an Outcome's done, released and lease_lost.
const (
	TaskRunFailed   = "failed"   // its last attempt failed: the task is FAILED
	TaskRunRetrying = "retrying" // its attempt failed and the task waits for another
)

// TaskRun is what became of a task this worker ran: the outcome of its last attempt here
// (done, failed, retrying, released, lease_lost), how many attempts it made of it and what
// they cost.
type TaskRun struct {
	PlanID   string   `json:"plan_id"`
	TaskID   string   `json:"task_id"`
	Status   string   `json:"status"`
	Attempts int      `json:"attempts"`
	Cost     plan.USD `json:"cost_usd"`
}

// taskKey names a task of a plan.
type taskKey struct{ plan, task string }

// note records an attempt's outcome in the summary's list of tasks.
func (s *Summary) note(out Outcome) {
	status := out.Status
	if status == "failed" && !out.Final {
		status = TaskRunRetrying
	}
	key := taskKey{out.PlanID, out.TaskID}
	if i, ok := s.listed[key]; ok {
		t := &s.Tasks[i]
		t.Status, t.Attempts, t.Cost = status, t.Attempts+1, t.Cost+out.Cost
		return
	}
	if len(s.Tasks) >= MaxReportedTasks {
		s.TasksUnlisted++
		return
	}
	if s.listed == nil {
		s.listed = map[taskKey]int{}
	}
	s.listed[key] = len(s.Tasks)
	s.Tasks = append(s.Tasks, TaskRun{PlanID: out.PlanID, TaskID: out.TaskID, Status: status, Attempts: 1, Cost: out.Cost})
}

// PlanState is a plan this worker touched, as the control plane answered it at exit; Err
// when it could not be read.
type PlanState struct {
	ID   string
	Plan client.Plan
	Err  error
}

// ReadPlans reads the plans of a finished run: planID (the one the worker was confined
// to, if any) first, then those of the tasks it ran, at most MaxReportedPlans. It runs
// after ctx was cancelled too (a worker stopped by a signal still reports), within 15
// seconds in all. A plan that cannot be read is logged (log may be nil) and has Err.
func ReadPlans(ctx context.Context, api *client.Client, planID string, sum Summary, log *slog.Logger) []PlanState {
	ids := make([]string, 0, 1+len(sum.Tasks))
	seen := map[string]bool{}
	add := func(id string) {
		if id != "" && !seen[id] && len(ids) < MaxReportedPlans {
			seen[id] = true
			ids = append(ids, id)
		}
	}
	add(planID)
	for _, t := range sum.Tasks {
		add(t.PlanID)
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 15*time.Second)
	defer cancel()
	out := make([]PlanState, 0, len(ids))
	for _, id := range ids {
		p, err := api.GetPlan(ctx, id)
		if err != nil && log != nil {
			log.WarnContext(ctx, "could not read the state of a plan for the report", "plan_id", id, "error", err)
		}
		out = append(out, PlanState{ID: id, Plan: p, Err: err})
	}
	return out
}

// WriteReport writes the worker's report: the counts line
//
//	tasks_done=N tasks_failed=N attempts_failed=N tasks_released=N cost_usd=USD [tasks_unlisted=N]
//
// then a line per task it ran and one per plan that could be read:
//
//	task plan_id=ID task_id=ID status=STATUS attempts=N cost_usd=USD
//	plan plan_id=ID status=STATUS [pause_reason=R] [pull_request=URL]
//
// Values are percent-encoded (field), so none holds a space, a | or a line break.
func WriteReport(w io.Writer, sum Summary, plans []PlanState) {
	unlisted := ""
	if sum.TasksUnlisted > 0 {
		unlisted = fmt.Sprintf(" tasks_unlisted=%d", sum.TasksUnlisted)
	}
	fmt.Fprintf(w, "tasks_done=%d tasks_failed=%d attempts_failed=%d tasks_released=%d cost_usd=%s%s\n",
		sum.Done, len(sum.TasksFailed), sum.Failed, sum.Released, sum.Cost, unlisted)
	for _, t := range sum.Tasks {
		fmt.Fprintf(w, "task plan_id=%s task_id=%s status=%s attempts=%d cost_usd=%s\n",
			field(t.PlanID), field(t.TaskID), field(t.Status), t.Attempts, t.Cost)
	}
	for _, p := range plans {
		if p.Err != nil {
			continue
		}
		line := "plan plan_id=" + field(p.ID) + " status=" + field(string(p.Plan.Status))
		if p.Plan.PauseReason != "" {
			line += " pause_reason=" + field(p.Plan.PauseReason)
		}
		if pr := p.Plan.PullRequest; pr != nil && pr.URL != "" {
			line += " pull_request=" + field(pr.URL)
		}
		fmt.Fprintln(w, line)
	}
}

// field percent-encodes every byte of s but letters, digits and the characters a URL may
// hold unescaped (besides % itself): what the control plane answers cannot end a field
// or a line, and the reader decodes %XX to get it back exactly.
func field(s string) string {
	const keep = "-._~:/?#[]@!$&'()*+,;="
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte(keep, c) >= 0 {
			b.WriteByte(c)
			continue
		}
		fmt.Fprintf(&b, "%%%02X", c)
	}
	return b.String()
}
