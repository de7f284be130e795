package control

import (
	"encoding/json"

	"github.com/whilly-go/whilly/control/client"
	"github.com/whilly-go/whilly/plan"
	"github.com/whilly-go/whilly/queue"
)

// The store's rows become wire types here, and only here.

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func taskWire(t queue.TaskInfo) client.Task {
	gate := t.Gate
	if gate.Reasons == nil {
		gate.Reasons = []plan.Reason{}
	}
	return client.Task{
		PlanID: t.PlanID, ID: t.ID, Status: t.Status, Priority: t.Priority, Description: t.Description,
		Dependencies: nonNil(t.Dependencies), KeyFiles: nonNil(t.KeyFiles),
		AcceptanceCriteria: nonNil(t.AcceptanceCriteria), TestSteps: nonNil(t.TestSteps),
		PRDRequirement: t.PRDRequirement, Labels: nonNil(t.Labels), Gate: gate,
		Attempts: t.Attempts, MaxAttempts: t.MaxAttempts, NotBefore: t.NotBefore,
		LeaseExpiresAt: t.LeaseExpiresAt, ClaimedBy: t.ClaimedBy, Version: t.Version, CostUSD: t.Cost,
		LastError: t.LastError, LastOutput: t.LastOutput, TrizFinding: t.TrizFinding, Result: t.Result, CreatedAt: t.CreatedAt, UpdatedAt: t.UpdatedAt,
		Round: roundWire(t.Round),
	}
}

func roundWire(r *queue.RoundContext) *client.Round {
	if r == nil {
		return nil
	}
	return &client.Round{Number: r.Number, Trigger: r.Trigger, Summary: r.Summary, Commits: r.Commits}
}

func planWire(p queue.PlanInfo) client.Plan {
	out := client.Plan{
		ID: p.ID, Name: p.Name, Status: p.Status, PauseReason: p.PauseReason, BudgetUSD: p.Budget,
		SpentUSD: p.Spent, RemainingUSD: plan.Remaining(p.Budget, p.Spent), Strict: p.Strict, Repo: p.Repo,
		GitHubIssueRef: p.GitHubIssueRef, Verify: make([]client.Verify, 0, len(p.Verify)),
		Counts: p.Counts, Total: p.Total, CreatedAt: p.CreatedAt, UpdatedAt: p.UpdatedAt,
	}
	for _, v := range p.Verify {
		out.Verify = append(out.Verify, client.Verify{Name: v.Name, Command: v.Command, Required: v.Required})
	}
	return out
}

func eventWire(e queue.Event) client.Event {
	return client.Event{
		ID: e.ID, Type: e.Type, PlanID: e.PlanID, TaskID: e.TaskID,
		Payload: orEmpty(e.Payload), Detail: orEmpty(e.Detail), CreatedAt: e.CreatedAt,
	}
}

func orEmpty(r json.RawMessage) json.RawMessage {
	if len(r) == 0 {
		return json.RawMessage(`{}`)
	}
	return r
}
