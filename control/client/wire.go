package client

import (
	crand "crypto/rand"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"github.com/whilly-go/whilly/plan"
)

// The wire types of the control-plane API: snake_case JSON, shared by the
// server (package control) and every client. Money travels as exact JSON numbers through
// plan.USD (0.013, never a float sum). Fields may be added; never rename one.

// RegisterRequest registers a worker (POST /v1/workers/register, bootstrap token).
type RegisterRequest struct {
	Hostname string   `json:"hostname"`
	Labels   []string `json:"labels,omitempty"`
	// Scopes narrow the worker to installation:ID, repo:OWNER/NAME or plan:ID.
	// Empty: the registrar's own scopes. A scoped registrar refuses wider ones (403).
	Scopes []string `json:"scopes,omitempty"`
	// OwnerEmail is the operator registering the worker; the owner of a minted bootstrap
	// token overrides it.
	OwnerEmail string `json:"owner_email,omitempty"`
}

// RegisterResponse carries the new worker's id and its token, shown this once.
type RegisterResponse struct {
	WorkerID string   `json:"worker_id"`
	Token    string   `json:"token"`
	Labels   []string `json:"labels"`
	Scopes   []string `json:"scopes"` // empty: every plan
}

// HeldLease names a task the worker believes it holds.
type HeldLease struct {
	PlanID  string `json:"plan_id"`
	TaskID  string `json:"task_id"`
	LeaseID string `json:"lease_id"`
}

// HeartbeatRequest lists the leases the worker holds (POST /v1/workers/{id}/heartbeat).
type HeartbeatRequest struct {
	Tasks []HeldLease `json:"tasks"`
}

// CancelNotice tells a worker to abandon a task it holds.
type CancelNotice struct {
	PlanID string `json:"plan_id"`
	TaskID string `json:"task_id"`
	Reason string `json:"reason"` // cancelled, lease_lost
}

// HeartbeatResponse is the new expiry of the worker's leases and the tasks to abandon.
type HeartbeatResponse struct {
	LeaseExpiresAt time.Time      `json:"lease_expires_at"`
	Cancel         []CancelNotice `json:"cancel"`
}

// ClaimRequest asks for the next claimable task (POST /v1/tasks/claim), of one plan when
// PlanID is set, waiting up to WaitSeconds (capped by the server) for one to appear.
type ClaimRequest struct {
	PlanID      string  `json:"plan_id,omitempty"`
	WaitSeconds float64 `json:"wait_seconds"`
	// IdempotencyKey, a UUID the worker keeps until it has an answer, becomes the id of
	// the lease granted: a claim retried with the same key after its answer was lost gets
	// the task it had claimed back, not another one.
	IdempotencyKey string `json:"idempotency_key,omitempty"`
	// Drain asks for the answer "nothing" (204) at once, not at the end of the wait, when
	// nothing the worker may claim is left that could still come to it (a draining worker
	// stops then): no PENDING task it may take and no task running that could come back.
	Drain bool `json:"drain,omitempty"`
}

// Claim is a claimed task with its lease and its plan, and for a plan tied to a
// repository the workspace to run it in.
type Claim struct {
	Task      Task       `json:"task"`
	Lease     Lease      `json:"lease"`
	Plan      Plan       `json:"plan"`
	Workspace *Workspace `json:"workspace,omitempty"`
}

// Workspace is the repository checkout a task runs in: the worker fetches
// CloneURL, works on Branch (created from BaseBranch when the remote lacks it), commits
// the agent's changes and pushes them fast-forward with Token, a short-lived token that
// may write to that one repository. The diff gate refuses changes under
// .github/workflows/ unless AllowWorkflows, and more than MaxFiles files or MaxLines
// changed lines (zero: the worker's defaults).
type Workspace struct {
	CloneURL       string     `json:"clone_url"`
	BaseBranch     string     `json:"base_branch,omitempty"` // "" is the remote's default branch
	Branch         string     `json:"branch"`                // whilly/issue-<N>, one per plan
	Token          string     `json:"token,omitempty"`
	TokenExpiresAt *time.Time `json:"token_expires_at,omitempty"`
	AuthorName     string     `json:"author_name,omitempty"`
	AuthorEmail    string     `json:"author_email,omitempty"`
	AllowWorkflows bool       `json:"allow_workflows"`
	MaxFiles       int        `json:"max_files,omitempty"`
	MaxLines       int        `json:"max_lines,omitempty"`
}

// LogValue keeps the token out of logs.
func (w Workspace) LogValue() slog.Value {
	return slog.GroupValue(slog.String("clone_url", w.CloneURL), slog.String("branch", w.Branch),
		slog.String("base_branch", w.BaseBranch), slog.Bool("token", w.Token != ""))
}

// Lease is the fencing token of a claim; it expires at ExpiresAt unless heartbeats extend it.
type Lease struct {
	ID        string    `json:"id"`
	ExpiresAt time.Time `json:"expires_at"`
	// TTLSeconds is how long a claim or a heartbeat extends the lease: a worker that
	// cannot reach the control plane knows its lease has certainly expired once this long
	// has passed since its last answer, whatever the clocks say.
	TTLSeconds float64 `json:"ttl_seconds,omitempty"`
}

// Task is a task's plan-file fields and runtime state.
type Task struct {
	PlanID             string        `json:"plan_id"`
	ID                 string        `json:"id"`
	Status             plan.Status   `json:"status"`
	Priority           plan.Priority `json:"priority"`
	Description        string        `json:"description"`
	Dependencies       []string      `json:"dependencies"`
	KeyFiles           []string      `json:"key_files"`
	AcceptanceCriteria []string      `json:"acceptance_criteria"`
	TestSteps          []string      `json:"test_steps"`
	PRDRequirement     string        `json:"prd_requirement"`
	Labels             []string      `json:"labels"`
	Gate               plan.Verdict  `json:"gate"`
	// Attempt is the number of the attempt a claim starts (1 for the first); set in claims only.
	Attempt        int        `json:"attempt,omitempty"`
	Attempts       int        `json:"attempts"`
	MaxAttempts    int        `json:"max_attempts"`
	NotBefore      *time.Time `json:"not_before,omitempty"`
	LeaseExpiresAt *time.Time `json:"lease_expires_at,omitempty"`
	ClaimedBy      string     `json:"claimed_by,omitempty"`
	Version        int        `json:"version"`
	CostUSD        plan.USD   `json:"cost_usd"`
	LastError      string     `json:"last_error,omitempty"`
	LastOutput     string     `json:"last_output,omitempty"` // the last failure's error text and output tail
	TrizFinding    string     `json:"triz_finding,omitempty"`
	// Round is set on the task of a pull request's follow-up round (review or CI
	// feedback): its prompt says so.
	Round     *Round    `json:"round,omitempty"`
	Result    string    `json:"result,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

// Round is the pull request round a task answers.
type Round struct {
	Number  int      `json:"number"`
	Trigger string   `json:"trigger"` // review, comment, check, retry
	Summary string   `json:"summary"`
	Commits []string `json:"commits,omitempty"` // already on the branch, oldest first
}

// Verify is a plan verification command, run in the workspace after the agent.
type Verify struct {
	Name     string `json:"name"`
	Command  string `json:"command"`
	Required bool   `json:"required"`
}

// Plan is a plan's state, budget and task counts.
type Plan struct {
	ID             string          `json:"id"`
	Name           string          `json:"name"`
	Status         plan.PlanStatus `json:"status"`
	PauseReason    string          `json:"pause_reason,omitempty"`
	BudgetUSD      *plan.USD       `json:"budget_usd"`    // null: unlimited
	SpentUSD       plan.USD        `json:"spent_usd"`     //
	RemainingUSD   *plan.USD       `json:"remaining_usd"` // null: unlimited
	Strict         bool            `json:"strict"`
	Repo           string          `json:"repo,omitempty"`
	GitHubIssueRef string          `json:"github_issue_ref,omitempty"`
	Verify         []Verify        `json:"verify"`
	// Counts are the plan's tasks by status; absent in claims.
	Counts    map[plan.Status]int `json:"counts,omitempty"`
	Total     int                 `json:"total"`
	CreatedAt time.Time           `json:"created_at"`
	UpdatedAt time.Time           `json:"updated_at"`
	// Digest is the plan's content digest while it awaits approval (pause_reason
	// approval), on GET /v1/plans/{id}: what /whilly approve and plan approve take.
	Digest string `json:"digest,omitempty"`
	// PullRequest is the pull request the plan's commits are delivered in, on
	// GET /v1/plans/{id} once the GitHub App opened it.
	PullRequest *PullRequest `json:"pull_request,omitempty"`
}

// PullRequest is a plan's pull request on GitHub.
type PullRequest struct {
	Number int    `json:"number"`
	URL    string `json:"url"`
	State  string `json:"state"` // open, closed, merged
	Draft  bool   `json:"draft"`
}

// LeaseRequest presents a lease: START and RELEASE (with an optional reason).
type LeaseRequest struct {
	LeaseID string `json:"lease_id"`
	Reason  string `json:"reason,omitempty"`
}

// CompleteRequest reports a successful attempt and its cost. In a workspace, HeadSHA is
// the plan branch's head after the task's commit was pushed, and NoChanges says the
// agent changed nothing (so nothing was pushed).
//
// ClaimNext asks for the worker's next task in the same round trip: the answer's Next is
// a claim made at once (no long-poll) as by POST /v1/tasks/claim with that plan_id, or
// absent when nothing is claimable now (then claim the usual way). The completion stands
// whatever becomes of the claim.
type CompleteRequest struct {
	LeaseID   string     `json:"lease_id"`
	CostUSD   plan.USD   `json:"cost_usd"`
	Result    string     `json:"result,omitempty"`
	HeadSHA   string     `json:"head_sha,omitempty"`
	NoChanges bool       `json:"no_changes,omitempty"`
	ClaimNext *NextClaim `json:"claim_next,omitempty"`
	// DurationMS is how long the attempt ran on the worker: the attempt duration metric.
	DurationMS int64 `json:"duration_ms,omitempty"`
	// ResultRepaired says the worker had to repair the agent's text to send it (NUL bytes
	// removed, bytes that are not UTF-8 replaced); the COMPLETE event records it.
	ResultRepaired bool `json:"result_repaired,omitempty"`
	// CostEstimated says CostUSD is whilly's price of the tokens the agent reported (codex),
	// not the agent's own figure; the COMPLETE event records it.
	CostEstimated bool `json:"cost_estimated,omitempty"`
	// Log is the last chunk of the attempt's log, stored with the completion: no request of
	// its own (see LogTail).
	Log *LogTail `json:"log,omitempty"`
}

// NextClaim is the claim a COMPLETE asks for: of one plan, or of any when PlanID is empty.
type NextClaim struct {
	PlanID         string `json:"plan_id,omitempty"`
	IdempotencyKey string `json:"idempotency_key,omitempty"` // as in ClaimRequest
	// Start asks for the next task to be started in the transaction that claims it, with
	// its START event: it then comes back IN_PROGRESS and needs no START request. It may
	// come back CLAIMED all the same (START it then). It needs IdempotencyKey.
	Start bool `json:"start,omitempty"`
}

// ChargeRequest charges the cost of an attempt whose lease ended before its COMPLETE or
// FAIL went through (POST /v1/plans/{plan}/tasks/{task}/charge).
type ChargeRequest struct {
	LeaseID string   `json:"lease_id"`
	CostUSD plan.USD `json:"cost_usd"`
	Reason  string   `json:"reason,omitempty"`
}

// ChargeResponse says whether the cost was charged now (false: it was already).
type ChargeResponse struct {
	Charged bool `json:"charged"`
}

// ReleaseHeldRequest asks to hand back every task the worker holds
// (POST /v1/workers/{id}/release): a worker restarted under the same id does so first.
type ReleaseHeldRequest struct {
	Reason string `json:"reason,omitempty"`
}

// ReleaseHeldResponse counts the tasks handed back.
type ReleaseHeldResponse struct {
	Released int `json:"released"`
}

// CompleteResponse is the completed task and, when ClaimNext was asked and a task was
// claimable, the worker's next claim.
type CompleteResponse struct {
	Task
	Next *Claim `json:"next,omitempty"`
}

// FailRequest reports a failed attempt and its cost. Retryable nil means true.
type FailRequest struct {
	LeaseID   string          `json:"lease_id"`
	CostUSD   plan.USD        `json:"cost_usd"`
	Reason    string          `json:"reason"`
	Retryable *bool           `json:"retryable,omitempty"`
	Detail    json.RawMessage `json:"detail,omitempty"`
	// Output is the attempt's error text and the tail of its output (redacted, at most
	// MaxFailOutput bytes): the next attempt's prompt carries it.
	Output string `json:"output,omitempty"`
	// DurationMS is how long the attempt ran on the worker: the attempt duration metric.
	DurationMS int64 `json:"duration_ms,omitempty"`
	// CostEstimated is as in CompleteRequest; the FAIL or RETRY event records it.
	CostEstimated bool `json:"cost_estimated,omitempty"`
	// Log is as in CompleteRequest.
	Log *LogTail `json:"log,omitempty"`
}

// TaskEventRequest appends a progress or log event (types agent.*, progress.*, log.*)
// to the task the lease holds.
type TaskEventRequest struct {
	LeaseID string          `json:"lease_id"`
	Type    string          `json:"type"`
	Payload json.RawMessage `json:"payload,omitempty"`
	Detail  json.RawMessage `json:"detail,omitempty"`
}

// Event is one entry of the audit log.
type Event struct {
	ID        int64           `json:"id"`
	Type      string          `json:"type"`
	PlanID    string          `json:"plan_id"`
	TaskID    string          `json:"task_id,omitempty"`
	Payload   json.RawMessage `json:"payload"`
	Detail    json.RawMessage `json:"detail"`
	CreatedAt time.Time       `json:"created_at"`
}

// EventList is a page of events; pass NextAfter as after to read on.
type EventList struct {
	Events    []Event `json:"events"`
	NextAfter int64   `json:"next_after"`
}

// PlanList is a page of plans; NextCursor is empty on the last page.
type PlanList struct {
	Plans      []Plan `json:"plans"`
	NextCursor string `json:"next_cursor,omitempty"`
}

// TaskList is a page of a plan's tasks, in file order; pass NextCursor as after to read
// the next page. NextCursor is empty on the last page.
type TaskList struct {
	Tasks      []Task `json:"tasks"`
	NextCursor string `json:"next_cursor,omitempty"`
}

// ImportResult says what importing a plan file wrote.
type ImportResult struct {
	PlanID       string `json:"plan_id"`
	PlanCreated  bool   `json:"plan_created"`
	TasksCreated int    `json:"tasks_created"`
	TasksTotal   int    `json:"tasks_total"`
	// Skipped counts the tasks a strict import turned SKIPPED (decision gate).
	Skipped int `json:"skipped,omitempty"`
}

// ImportResponse answers POST /v1/plans.
type ImportResponse struct {
	Import ImportResult `json:"import"`
	Plan   Plan         `json:"plan"`
	// Notes says what the file held that whilly read past, and why (keys of the Python
	// system's plan files).
	Notes []string `json:"notes,omitempty"`
}

// PatchPlanRequest changes a plan (PATCH /v1/plans/{id}, admin): its budget, and/or its
// status (only CANCELLED, which cancels every open task).
type PatchPlanRequest struct {
	BudgetUSD BudgetPatch     `json:"budget_usd,omitzero"`
	Status    plan.PlanStatus `json:"status,omitempty"`
	Reason    string          `json:"reason,omitempty"`
}

// BudgetPatch is a budget change: absent (the zero value), a cap, or null (unlimited).
type BudgetPatch struct {
	Set   bool
	Limit *plan.USD // nil with Set: unlimited
}

// SetBudget returns a patch to the cap usd.
func SetBudget(usd plan.USD) BudgetPatch { return BudgetPatch{Set: true, Limit: &usd} }

// Unlimited returns a patch that removes the budget cap.
func Unlimited() BudgetPatch { return BudgetPatch{Set: true} }

// IsZero reports whether the patch leaves the budget alone (for omitzero).
func (b BudgetPatch) IsZero() bool { return !b.Set }

// MarshalJSON writes the cap, or null for unlimited.
func (b BudgetPatch) MarshalJSON() ([]byte, error) {
	if b.Limit == nil {
		return []byte("null"), nil
	}
	return b.Limit.MarshalJSON()
}

// UnmarshalJSON reads a cap or null; either way the patch is set.
func (b *BudgetPatch) UnmarshalJSON(data []byte) error {
	b.Set = true
	b.Limit = nil
	if string(data) == "null" {
		return nil
	}
	var u plan.USD
	if err := u.UnmarshalJSON(data); err != nil {
		return err
	}
	b.Limit = &u
	return nil
}

// Worker is a registered worker.
type Worker struct {
	ID            string     `json:"id"`
	Hostname      string     `json:"hostname"`
	Labels        []string   `json:"labels"`
	Status        string     `json:"status"`
	LastHeartbeat *time.Time `json:"last_heartbeat,omitempty"`
	RegisteredAt  time.Time  `json:"registered_at"`
	RevokedAt     *time.Time `json:"revoked_at,omitempty"`
	Scopes        []string   `json:"scopes"` // empty: every plan
}

// WorkerList is every registered worker, newest first.
type WorkerList struct {
	Workers []Worker `json:"workers"`
}

// Health answers /healthz and /readyz.
type Health struct {
	Status   string `json:"status"` // ok, unavailable
	Database *bool  `json:"database,omitempty"`
	Listener *bool  `json:"listener,omitempty"`
}

// ErrorBody is the body of every error response.
type ErrorBody struct {
	Error   string `json:"error"`
	Message string `json:"message"`
}

// Error codes of ErrorBody.Error. They are part of the API: never rename one.
const (
	CodeBadRequest       = "bad_request"        // 400: malformed JSON, unknown field, bad value
	CodeUnauthorized     = "unauthorized"       // 401: missing, unknown, revoked or expired token
	CodeForbidden        = "forbidden"          // 403: wrong role, or another worker's id
	CodeNotFound         = "not_found"          // 404
	CodeMethodNotAllowed = "method_not_allowed" // 405
	CodeLeaseLost        = "lease_lost"         // 409: the lease is not the task's current one
	CodeConflict         = "conflict"           // 409: the state does not allow the change
	CodeTooLarge         = "body_too_large"     // 413
	CodeBodyTimeout      = "body_timeout"       // 408: the body did not arrive in time
	CodeInvalidPlan      = "invalid_plan"       // 422: plan validation problems, one per line
	CodeInternal         = "internal"           // 500: the cause is in the server's log
	CodeUnavailable      = "unavailable"        // 503
)

// Outlook is what the asking worker may still claim (GET /v1/tasks/outlook): tasks
// claimable now, waiting on unfinished dependencies, backing off before a retry, running
// (they may come back), and the PENDING tasks held for good, with why (at most
// MaxHeldListed of them; HeldTotal counts all).
type Outlook struct {
	Claimable int        `json:"claimable"`
	Waiting   int        `json:"waiting"`
	Retrying  int        `json:"retrying"`
	Running   int        `json:"running"`
	Held      []HeldTask `json:"held"`
	HeldTotal int        `json:"held_total"`
}

// MaxHeldListed bounds the held tasks an outlook lists.
const MaxHeldListed = 100

// Drained reports whether nothing is left that the worker may claim, now or later.
func (o Outlook) Drained() bool { return o.Claimable+o.Waiting+o.Retrying+o.Running == 0 }

// HeldTask is a PENDING task that only someone else can unblock: reason is one of
// paused, budget, gate_rejected, dependency_failed, dependency_held, labels.
type HeldTask struct {
	PlanID string    `json:"plan_id"`
	TaskID string    `json:"task_id"`
	Reason plan.Hold `json:"reason"`
	Detail string    `json:"detail"`
}

// MaxFailOutput bounds FailRequest.Output.
const MaxFailOutput = 8 << 10

// TaskChangeResponse answers adding a task to a plan or editing one.
type TaskChangeResponse struct {
	Task Task `json:"task"`
	// Changed is false when an edit gave the task the definition it already had.
	Changed bool `json:"changed"`
	// Plan is the plan after the change (a finished plan that got work is ACTIVE again).
	Plan Plan `json:"plan"`
}

// TaskResetResponse answers resetting a task: the ids returned to PENDING, in file order.
type TaskResetResponse struct {
	Reset []string `json:"reset"`
	Plan  Plan     `json:"plan"`
}

// MaxLogChunk bounds the text of one LogChunkRequest, in bytes.
const MaxLogChunk = 64 << 10

// LogChunkRequest appends a chunk of the agent's log (redacted by the worker) to the
// attempt the lease holds: POST /v1/plans/{plan}/tasks/{task}/attempts/{n}/log.
type LogChunkRequest struct {
	LeaseID string `json:"lease_id"`
	// Offset is where Text begins in the log as this worker produced it, in bytes: bytes
	// it dropped (the agent wrote faster than it uploads) leave a gap. A chunk sent again
	// with the same offset is answered without being stored twice.
	Offset int64  `json:"offset"`
	Text   string `json:"text"`
}

// LogTail is the last chunk of an attempt's log (at most MaxLogChunk bytes, redacted by
// the worker like every chunk), carried by the COMPLETE or FAIL report and stored in its
// transaction when the report ends the attempt. As with a LogChunkRequest, bytes already
// stored at its offsets are not stored again: a report sent again is safe.
type LogTail struct {
	Offset int64  `json:"offset"`
	Text   string `json:"text"`
}

// LogChunkResponse is where the log stands after a chunk.
type LogChunkResponse struct {
	NextOffset int64 `json:"next_offset"`
	Duplicate  bool  `json:"duplicate,omitempty"`
}

// AttemptLog is what is kept of an attempt's log (its last 1 MiB) from an offset on:
// GET /v1/plans/{plan}/tasks/{task}/attempts/{n}/log?after=OFFSET&wait=SECONDS.
type AttemptLog struct {
	PlanID  string `json:"plan_id"`
	TaskID  string `json:"task_id"`
	Attempt int    `json:"attempt"`
	// Offset is where Text begins: the offset asked for, or later when the bytes there
	// are no longer kept. NextOffset follows the last byte: pass it as after to follow.
	Offset     int64  `json:"offset"`
	NextOffset int64  `json:"next_offset"`
	Text       string `json:"text"`
	// Running says the attempt still holds its lease: more may come.
	Running    bool        `json:"running"`
	TaskStatus plan.Status `json:"task_status"`
	UpdatedAt  *time.Time  `json:"updated_at,omitempty"`
}

// NewKey returns a random UUID (version 4), an idempotency key (ClaimRequest,
// NextClaim).
func NewKey() string {
	var b [16]byte
	_, _ = crand.Read(b[:]) // never fails (crypto/rand)
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}
