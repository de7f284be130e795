package client

import (
	"context"
	"fmt"
	"net/http"
	"time"
)

// Fleet is the global pause: while Paused no task is claimed anywhere (GET /v1/fleet,
// POST /v1/admin/pause and /v1/admin/resume).
type Fleet struct {
	Paused   bool       `json:"paused"`
	PausedBy string     `json:"paused_by,omitempty"`
	PausedAt *time.Time `json:"paused_at,omitempty"`
	// Changed says the request paused or resumed the fleet; false when it already was
	// in that state (nothing written).
	Changed bool `json:"changed"`
}

// ApproveRequest approves a plan that awaits approval. Digest is the plan's content
// digest as the approver reviewed it; a digest that is no longer the plan's is refused
// (409). Empty approves the plan as it is now.
type ApproveRequest struct {
	Digest string `json:"digest,omitempty"`
}

// PlanChangeResponse answers pausing, resuming and approving a plan.
type PlanChangeResponse struct {
	Plan Plan `json:"plan"`
	// Changed is false when the plan already was in the state asked for.
	Changed bool `json:"changed"`
	// Digest is the content digest an approval approved.
	Digest string `json:"digest,omitempty"`
}

// GetFleet returns the state of the global pause.
func (c *Client) GetFleet(ctx context.Context) (Fleet, error) {
	var out Fleet
	if _, err := c.call(ctx, c.opts.Timeout, http.MethodGet, pathOf("v1", "fleet"), nil, nil, &out); err != nil {
		return out, fmt.Errorf("read the fleet's pause: %w", err)
	}
	return out, nil
}

// PauseFleet stops new claims on every plan (admin); running attempts finish.
func (c *Client) PauseFleet(ctx context.Context) (Fleet, error) {
	var out Fleet
	if _, err := c.call(ctx, c.opts.Timeout, http.MethodPost, pathOf("v1", "admin", "pause"), nil, nil, &out); err != nil {
		return out, fmt.Errorf("pause the fleet: %w", err)
	}
	return out, nil
}

// ResumeFleet lets claims run again (admin).
func (c *Client) ResumeFleet(ctx context.Context) (Fleet, error) {
	var out Fleet
	if _, err := c.call(ctx, c.opts.Timeout, http.MethodPost, pathOf("v1", "admin", "resume"), nil, nil, &out); err != nil {
		return out, fmt.Errorf("resume the fleet: %w", err)
	}
	return out, nil
}

// PausePlan stops new claims of one plan (admin).
func (c *Client) PausePlan(ctx context.Context, planID string) (PlanChangeResponse, error) {
	var out PlanChangeResponse
	if _, err := c.call(ctx, c.opts.Timeout, http.MethodPost, pathOf("v1", "plans", planID, "pause"), nil, nil, &out); err != nil {
		return out, fmt.Errorf("pause plan %s: %w", planID, err)
	}
	return out, nil
}

// ResumePlan resumes a plan paused with PausePlan (admin).
func (c *Client) ResumePlan(ctx context.Context, planID string) (PlanChangeResponse, error) {
	var out PlanChangeResponse
	if _, err := c.call(ctx, c.opts.Timeout, http.MethodPost, pathOf("v1", "plans", planID, "resume"), nil, nil, &out); err != nil {
		return out, fmt.Errorf("resume plan %s: %w", planID, err)
	}
	return out, nil
}

// ApprovePlan starts a plan that awaits approval (admin).
func (c *Client) ApprovePlan(ctx context.Context, planID string, req ApproveRequest) (PlanChangeResponse, error) {
	var out PlanChangeResponse
	if _, err := c.call(ctx, c.opts.Timeout, http.MethodPost, pathOf("v1", "plans", planID, "approve"), nil, req, &out); err != nil {
		return out, fmt.Errorf("approve plan %s: %w", planID, err)
	}
	return out, nil
}
