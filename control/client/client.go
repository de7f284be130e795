// Package client is the typed Go client of whilly's control-plane HTTP API,
// used by the worker, the CLI and the GitHub Action, and it owns the API's wire types,
// which the server reuses. It must import only the standard library and package plan: the
// slim worker binary depends on it, so no pgx, River, chi or ghinstallation may enter its
// import graph (a test checks).
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/whilly-go/whilly/plan"
)

// Options tunes a Client. Zero values take the defaults.
type Options struct {
	// HTTPClient sends the requests; default a client of its own with no overall timeout
	// (every call sets its own deadline).
	HTTPClient *http.Client
	// Timeout bounds each call except long-poll claims (wait + ClaimSlack) and event
	// streams (the caller's ctx only); default 30 s.
	Timeout time.Duration
	// ClaimSlack is added to a claim's wait for its deadline; default 15 s.
	ClaimSlack time.Duration
	// Insecure allows plain http:// to a host that is not loopback.
	Insecure bool
	// UserAgent is sent with every request; default "whilly-client".
	UserAgent string
}

// Client calls one control plane with one bearer token. It is safe for concurrent use.
type Client struct {
	base  *url.URL
	token string
	http  *http.Client
	opts  Options
}

// New returns a client of the control plane at baseURL (scheme, host and an optional path
// prefix). Plain http:// is refused unless the host is loopback (localhost, 127.0.0.0/8,
// ::1) or opts.Insecure is set: tokens must not cross a network in clear text.
func New(baseURL, token string, opts Options) (*Client, error) {
	if err := noScheme(strings.TrimSpace(baseURL)); err != nil {
		return nil, err
	}
	u, err := url.Parse(strings.TrimSpace(baseURL))
	if err != nil {
		return nil, fmt.Errorf("parse control-plane URL: %w", err)
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return nil, fmt.Errorf("control-plane URL %q must start with https:// or http://", baseURL)
	case u.Host == "" || u.Hostname() == "":
		return nil, fmt.Errorf("control-plane URL %q has no host", baseURL)
	case u.User != nil:
		return nil, errors.New("control-plane URL must not carry credentials; pass the token instead")
	case u.RawQuery != "" || u.Fragment != "":
		return nil, fmt.Errorf("control-plane URL %q must not have a query or fragment", baseURL)
	case u.Scheme == "http" && !opts.Insecure && !isLoopback(u.Hostname()):
		return nil, fmt.Errorf("refusing plain http:// to %s, which is not a loopback host: use https:// or pass --insecure", u.Hostname())
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return nil, fmt.Errorf("control-plane URL %q has an invalid port", baseURL)
		}
	}
	u.Path = strings.TrimRight(u.Path, "/")
	u.RawPath = strings.TrimRight(u.RawPath, "/")
	if opts.Timeout <= 0 {
		opts.Timeout = 30 * time.Second
	}
	if opts.ClaimSlack <= 0 {
		opts.ClaimSlack = 15 * time.Second
	}
	if opts.UserAgent == "" {
		opts.UserAgent = "whilly-client"
	}
	hc := opts.HTTPClient
	if hc == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.MaxIdleConnsPerHost = 8
		hc = &http.Client{Transport: t}
	}
	return &Client{base: u, token: token, http: hc, opts: opts}, nil
}

// WithToken returns a client of the same control plane that presents token instead
// (after Register, for instance).
func (c *Client) WithToken(token string) *Client {
	cp := *c
	cp.token = token
	return &cp
}

// Token returns the token the client sends, for its holder to keep it out of what it
// logs or shows.
func (c *Client) Token() string { return c.token }

// BaseURL returns the control plane's URL.
func (c *Client) BaseURL() string { return c.base.String() }

// noScheme answers a URL written without its scheme (localhost:8080), which url.Parse
// misreads or refuses, with the URL to write: http:// for a loopback host, https://
// otherwise (plain http:// to another host is refused).
func noScheme(s string) error {
	if strings.Contains(s, "://") {
		return nil
	}
	u, err := url.Parse("http://" + s)
	switch {
	case err != nil || u.User != nil || u.Host == "":
		return errors.New("control-plane URL must start with https:// or http://")
	case isLoopback(u.Hostname()):
		return fmt.Errorf("control-plane URL %q has no scheme: write http://%s (or https://%s)", s, s, s)
	default:
		return fmt.Errorf("control-plane URL %q has no scheme: write https://%s", s, s)
	}
}

func isLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Error is a non-2xx answer of the control plane.
type Error struct {
	Status  int    // HTTP status
	Code    string // ErrorBody.Error, e.g. CodeLeaseLost
	Message string
}

func (e *Error) Error() string {
	if e.Message == "" {
		return fmt.Sprintf("control plane answered %d %s", e.Status, e.Code)
	}
	return fmt.Sprintf("control plane answered %d: %s", e.Status, e.Message)
}

// StatusOf returns the HTTP status of err when it is (or wraps) an *Error, else 0.
func StatusOf(err error) int {
	var e *Error
	if errors.As(err, &e) {
		return e.Status
	}
	return 0
}

// IsBadRequest reports a 400, 413 or 422: the request cannot succeed as it is.
func IsBadRequest(err error) bool {
	s := StatusOf(err)
	return s == http.StatusBadRequest || s == http.StatusRequestEntityTooLarge || s == http.StatusUnprocessableEntity
}

// IsUnauthorized reports a 401: the token is missing, unknown, revoked or expired.
func IsUnauthorized(err error) bool { return StatusOf(err) == http.StatusUnauthorized }

// IsForbidden reports a 403: the token is valid but not allowed to do this.
func IsForbidden(err error) bool { return StatusOf(err) == http.StatusForbidden }

// IsNotFound reports a 404.
func IsNotFound(err error) bool { return StatusOf(err) == http.StatusNotFound }

// IsConflict reports a 409: a stale lease (CodeLeaseLost) or a state that does not allow
// the change. Nothing was changed.
func IsConflict(err error) bool { return StatusOf(err) == http.StatusConflict }

// IsLeaseLost reports a 409 whose code is CodeLeaseLost: stop working on the task.
func IsLeaseLost(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Status == http.StatusConflict && e.Code == CodeLeaseLost
}

// IsServerError reports a 5xx, worth retrying later.
func IsServerError(err error) bool { return StatusOf(err) >= 500 }

// IsRetryable reports errors after which the same request may succeed: the control plane
// could not be reached or did not answer (a connection it closed, a timeout), or answered
// 5xx, 408 or 429.
func IsRetryable(err error) bool {
	s := StatusOf(err)
	return s == 0 || s >= 500 || s == http.StatusRequestTimeout || s == http.StatusTooManyRequests
}

// pathOf joins escaped path segments: ids may contain "/" and ":", and each becomes one
// segment ("a/b" is sent as "a%2Fb").
func pathOf(segments ...string) string {
	var b strings.Builder
	for _, s := range segments {
		b.WriteByte('/')
		b.WriteString(url.PathEscape(s))
	}
	return b.String()
}

// endpoint builds the URL of an escaped path (from pathOf) and query.
func (c *Client) endpoint(escPath string, q url.Values) (string, error) {
	full := c.base.EscapedPath() + escPath
	u := *c.base
	p, err := url.PathUnescape(full)
	if err != nil {
		return "", fmt.Errorf("build request path: %w", err)
	}
	u.Path, u.RawPath = p, full
	if len(q) > 0 {
		u.RawQuery = q.Encode()
	}
	return u.String(), nil
}

// call sends one request with a JSON body (unless in is nil) and decodes a JSON answer
// into out (unless out is nil). It returns the status; a non-2xx status is an *Error.
func (c *Client) call(ctx context.Context, timeout time.Duration, method, escPath string, q url.Values, in, out any) (int, error) {
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	resp, err := c.send(ctx, method, escPath, q, in, "application/json", nil)
	if err != nil {
		return 0, err
	}
	defer func() { _ = resp.Body.Close() }() // the answer is read (or abandoned): a close error changes nothing
	if resp.StatusCode == http.StatusNoContent {
		return resp.StatusCode, nil
	}
	if out != nil {
		if err := decodeAnswer(resp.Body, out); err != nil {
			return resp.StatusCode, fmt.Errorf("decode answer of %s %s: %w", method, escPath, err)
		}
	}
	return resp.StatusCode, nil
}

// answerBufs holds the buffers answers are read into, up to maxPooledAnswer bytes each.
var answerBufs = sync.Pool{New: func() any { return new(bytes.Buffer) }}

const maxPooledAnswer = 64 << 10

// decodeAnswer reads a whole answer into a pooled buffer and unmarshals it into out. A
// json.Decoder on the body allocates and grows a buffer of its own for every answer:
// for a claim's answer that is 8.9 KB allocated against 2.6 KB (BenchmarkDecodeAnswer).
// Reading to the end also leaves the connection ready for the next request.
func decodeAnswer(r io.Reader, out any) error {
	buf := answerBufs.Get().(*bytes.Buffer)
	defer func() {
		if buf.Cap() <= maxPooledAnswer {
			buf.Reset()
			answerBufs.Put(buf)
		}
	}()
	if _, err := buf.ReadFrom(r); err != nil {
		return err
	}
	return json.Unmarshal(buf.Bytes(), out)
}

// send issues a request; a non-2xx answer is turned into an *Error (and its body closed).
func (c *Client) send(ctx context.Context, method, escPath string, q url.Values, in any, accept string, header http.Header) (*http.Response, error) {
	target, err := c.endpoint(escPath, q)
	if err != nil {
		return nil, err
	}
	var body io.Reader
	if in != nil {
		switch v := in.(type) {
		case []byte:
			body = bytes.NewReader(v)
		default:
			b, err := json.Marshal(in)
			if err != nil {
				return nil, fmt.Errorf("encode %s %s request: %w", method, escPath, err)
			}
			body = bytes.NewReader(b)
		}
	}
	req, err := http.NewRequestWithContext(ctx, method, target, body)
	if err != nil {
		return nil, fmt.Errorf("build %s %s request: %w", method, escPath, err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", accept)
	req.Header.Set("User-Agent", c.opts.UserAgent)
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, escPath, err)
	}
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return resp, nil
	}
	defer func() { _ = resp.Body.Close() }() // the error body is best effort already
	return nil, decodeError(resp)
}

func decodeError(resp *http.Response) error {
	e := &Error{Status: resp.StatusCode}
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10)) // best effort: the status says enough
	var body ErrorBody
	if json.Unmarshal(data, &body) == nil && body.Error != "" {
		e.Code, e.Message = body.Error, body.Message
	} else {
		e.Code = strings.ToLower(strings.ReplaceAll(http.StatusText(resp.StatusCode), " ", "_"))
	}
	return e
}

// Register registers a worker; the client's token must be the bootstrap token or an
// admin token. Use WithToken(resp.Token) for the worker's own calls.
func (c *Client) Register(ctx context.Context, req RegisterRequest) (RegisterResponse, error) {
	var out RegisterResponse
	_, err := c.call(ctx, c.opts.Timeout, http.MethodPost, "/v1/workers/register", nil, req, &out)
	if err != nil {
		return out, fmt.Errorf("register worker: %w", err)
	}
	return out, nil
}

// RevokeSelf revokes the worker's own token (the client's) and releases the tasks it
// holds: a worker that registered itself calls it as it exits.
func (c *Client) RevokeSelf(ctx context.Context, workerID string) error {
	if _, err := c.call(ctx, c.opts.Timeout, http.MethodPost, pathOf("v1", "workers", workerID, "revoke"), nil, struct{}{}, nil); err != nil {
		return fmt.Errorf("revoke worker %s: %w", workerID, err)
	}
	return nil
}

// Heartbeat extends the worker's leases and learns which tasks to abandon.
func (c *Client) Heartbeat(ctx context.Context, workerID string, req HeartbeatRequest) (HeartbeatResponse, error) {
	if req.Tasks == nil {
		req.Tasks = []HeldLease{}
	}
	var out HeartbeatResponse
	_, err := c.call(ctx, c.opts.Timeout, http.MethodPost, pathOf("v1", "workers", workerID, "heartbeat"), nil, req, &out)
	if err != nil {
		return out, fmt.Errorf("heartbeat of worker %s: %w", workerID, err)
	}
	return out, nil
}

// ReleaseHeld hands back every task the worker holds, returning how many.
func (c *Client) ReleaseHeld(ctx context.Context, workerID string, req ReleaseHeldRequest) (ReleaseHeldResponse, error) {
	var out ReleaseHeldResponse
	_, err := c.call(ctx, c.opts.Timeout, http.MethodPost, pathOf("v1", "workers", workerID, "release"), nil, req, &out)
	if err != nil {
		return out, fmt.Errorf("release the tasks of worker %s: %w", workerID, err)
	}
	return out, nil
}

// Claim asks for the next claimable task, waiting up to req.WaitSeconds for one. It
// returns nil, nil when none came.
func (c *Client) Claim(ctx context.Context, req ClaimRequest) (*Claim, error) {
	wait := time.Duration(min(max(req.WaitSeconds, 0), 3600) * float64(time.Second))
	var out Claim
	status, err := c.call(ctx, wait+c.opts.ClaimSlack, http.MethodPost, "/v1/tasks/claim", nil, req, &out)
	if err != nil {
		return nil, fmt.Errorf("claim task: %w", err)
	}
	if status == http.StatusNoContent {
		return nil, nil
	}
	return &out, nil
}

// transition posts req to the task's op endpoint and decodes the answer as Out.
func transition[Out any](ctx context.Context, c *Client, op, planID, taskID string, req any) (Out, error) {
	var out Out
	_, err := c.call(ctx, c.opts.Timeout, http.MethodPost, pathOf("v1", "plans", planID, "tasks", taskID, op), nil, req, &out)
	if err != nil {
		return out, fmt.Errorf("%s task %s of plan %s: %w", op, taskID, planID, err)
	}
	return out, nil
}

// Start moves the claimed task to IN_PROGRESS.
func (c *Client) Start(ctx context.Context, planID, taskID string, req LeaseRequest) (Task, error) {
	return transition[Task](ctx, c, "start", planID, taskID, req)
}

// Complete marks the task DONE and charges its cost. With req.ClaimNext set, the answer
// may also hold the worker's next claim (CompleteResponse.Next).
func (c *Client) Complete(ctx context.Context, planID, taskID string, req CompleteRequest) (CompleteResponse, error) {
	return transition[CompleteResponse](ctx, c, "complete", planID, taskID, req)
}

// Fail records a failed attempt and charges its cost; the task retries or fails.
func (c *Client) Fail(ctx context.Context, planID, taskID string, req FailRequest) (Task, error) {
	return transition[Task](ctx, c, "fail", planID, taskID, req)
}

// Release hands the task back to the queue without counting the attempt.
func (c *Client) Release(ctx context.Context, planID, taskID string, req LeaseRequest) (Task, error) {
	return transition[Task](ctx, c, "release", planID, taskID, req)
}

// Charge charges the cost of an attempt whose lease ended before its report went through.
func (c *Client) Charge(ctx context.Context, planID, taskID string, req ChargeRequest) (ChargeResponse, error) {
	return transition[ChargeResponse](ctx, c, "charge", planID, taskID, req)
}

// TaskEvent appends a progress or log event to the task the lease holds.
func (c *Client) TaskEvent(ctx context.Context, planID, taskID string, req TaskEventRequest) (Event, error) {
	var out Event
	_, err := c.call(ctx, c.opts.Timeout, http.MethodPost, pathOf("v1", "plans", planID, "tasks", taskID, "events"), nil, req, &out)
	if err != nil {
		return out, fmt.Errorf("append event to task %s of plan %s: %w", taskID, planID, err)
	}
	return out, nil
}

// PlanQuery selects a page of plans.
type PlanQuery struct {
	After  string // the cursor: NextCursor of the previous page
	Limit  int    // default 50, at most 500
	Status plan.PlanStatus
}

// ListPlans returns a page of plans ordered by id.
func (c *Client) ListPlans(ctx context.Context, q PlanQuery) (PlanList, error) {
	v := url.Values{}
	if q.After != "" {
		v.Set("after", q.After)
	}
	if q.Limit > 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	if q.Status != "" {
		v.Set("status", string(q.Status))
	}
	var out PlanList
	if _, err := c.call(ctx, c.opts.Timeout, http.MethodGet, "/v1/plans", v, nil, &out); err != nil {
		return out, fmt.Errorf("list plans: %w", err)
	}
	return out, nil
}

// ImportPlan imports a plan file (admin). Importing is idempotent; strict applies the
// decision gate, turning rejected tasks SKIPPED.
func (c *Client) ImportPlan(ctx context.Context, planFile []byte, strict bool) (ImportResponse, error) {
	var v url.Values
	if strict {
		v = url.Values{"strict": {"true"}}
	}
	var out ImportResponse
	if _, err := c.call(ctx, c.opts.Timeout, http.MethodPost, "/v1/plans", v, planFile, &out); err != nil {
		return out, fmt.Errorf("import plan: %w", err)
	}
	return out, nil
}

// GetPlan returns one plan.
func (c *Client) GetPlan(ctx context.Context, planID string) (Plan, error) {
	var out Plan
	if _, err := c.call(ctx, c.opts.Timeout, http.MethodGet, pathOf("v1", "plans", planID), nil, nil, &out); err != nil {
		return out, fmt.Errorf("get plan %s: %w", planID, err)
	}
	return out, nil
}

// PatchPlan changes a plan's budget or cancels it (admin) and returns the plan.
func (c *Client) PatchPlan(ctx context.Context, planID string, req PatchPlanRequest) (Plan, error) {
	var out Plan
	if _, err := c.call(ctx, c.opts.Timeout, http.MethodPatch, pathOf("v1", "plans", planID), nil, req, &out); err != nil {
		return out, fmt.Errorf("change plan %s: %w", planID, err)
	}
	return out, nil
}

// TaskQuery selects a page of a plan's tasks: After is the NextCursor of the previous
// page ("" the first), Limit 0 the server's default, Status "" any.
type TaskQuery struct {
	After  string
	Limit  int
	Status plan.Status
}

// ListTaskPage returns one page of a plan's tasks in file order.
func (c *Client) ListTaskPage(ctx context.Context, planID string, q TaskQuery) (TaskList, error) {
	v := url.Values{}
	if q.After != "" {
		v.Set("after", q.After)
	}
	if q.Limit > 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	if q.Status != "" {
		v.Set("status", string(q.Status))
	}
	var out TaskList
	if _, err := c.call(ctx, c.opts.Timeout, http.MethodGet, pathOf("v1", "plans", planID, "tasks"), v, nil, &out); err != nil {
		return out, fmt.Errorf("list tasks of plan %s: %w", planID, err)
	}
	return out, nil
}

// ListTasks returns every task of a plan in file order, reading page after page of the
// largest size (each page costs the server a scan of the plan's tasks).
func (c *Client) ListTasks(ctx context.Context, planID string) ([]Task, error) {
	var all []Task
	q := TaskQuery{Limit: plan.MaxTaskPage}
	for {
		page, err := c.ListTaskPage(ctx, planID, q)
		if err != nil {
			return nil, err
		}
		all = append(all, page.Tasks...)
		if page.NextCursor == "" {
			return all, nil
		}
		if page.NextCursor == q.After || len(page.Tasks) == 0 {
			return nil, fmt.Errorf("list tasks of plan %s: the server's next cursor %q does not advance", planID, page.NextCursor)
		}
		q.After = page.NextCursor
	}
}

// AddTask adds a task (one task in the plan-file format) to a plan (admin).
func (c *Client) AddTask(ctx context.Context, planID string, task []byte) (TaskChangeResponse, error) {
	var out TaskChangeResponse
	if _, err := c.call(ctx, c.opts.Timeout, http.MethodPost, pathOf("v1", "plans", planID, "tasks"), nil, task, &out); err != nil {
		return out, fmt.Errorf("add a task to plan %s: %w", planID, err)
	}
	return out, nil
}

// EditTask replaces the definition of a task that has not run (admin); task keeps its id.
func (c *Client) EditTask(ctx context.Context, planID, taskID string, task []byte) (TaskChangeResponse, error) {
	var out TaskChangeResponse
	if _, err := c.call(ctx, c.opts.Timeout, http.MethodPatch, pathOf("v1", "plans", planID, "tasks", taskID), nil, task, &out); err != nil {
		return out, fmt.Errorf("edit task %s of plan %s: %w", taskID, planID, err)
	}
	return out, nil
}

// RemoveTask removes a task nothing depends on and that is not running (admin).
func (c *Client) RemoveTask(ctx context.Context, planID, taskID string) error {
	if _, err := c.call(ctx, c.opts.Timeout, http.MethodDelete, pathOf("v1", "plans", planID, "tasks", taskID), nil, nil, nil); err != nil {
		return fmt.Errorf("remove task %s of plan %s: %w", taskID, planID, err)
	}
	return nil
}

// ResetTask returns a finished task to PENDING, with cascade also the finished tasks
// that depend on it (admin).
func (c *Client) ResetTask(ctx context.Context, planID, taskID string, cascade bool) (TaskResetResponse, error) {
	var out TaskResetResponse
	v := url.Values{"cascade": {strconv.FormatBool(cascade)}}
	if _, err := c.call(ctx, c.opts.Timeout, http.MethodPost, pathOf("v1", "plans", planID, "tasks", taskID, "reset"), v, nil, &out); err != nil {
		return out, fmt.Errorf("reset task %s of plan %s: %w", taskID, planID, err)
	}
	return out, nil
}

// ListWorkers returns every registered worker.
func (c *Client) ListWorkers(ctx context.Context) ([]Worker, error) {
	var out WorkerList
	if _, err := c.call(ctx, c.opts.Timeout, http.MethodGet, "/v1/workers", nil, nil, &out); err != nil {
		return nil, fmt.Errorf("list workers: %w", err)
	}
	return out.Workers, nil
}

// EventQuery selects a page of events.
type EventQuery struct {
	PlanID string
	After  int64 // events with a larger id
	Limit  int   // default 100, at most 1000
}

// ListEvents returns a page of events in id order.
func (c *Client) ListEvents(ctx context.Context, q EventQuery) (EventList, error) {
	v := url.Values{}
	if q.PlanID != "" {
		v.Set("plan_id", q.PlanID)
	}
	if q.After > 0 {
		v.Set("after", strconv.FormatInt(q.After, 10))
	}
	if q.Limit > 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	var out EventList
	if _, err := c.call(ctx, c.opts.Timeout, http.MethodGet, "/v1/events", v, nil, &out); err != nil {
		return out, fmt.Errorf("list events: %w", err)
	}
	return out, nil
}

// Healthz checks that the control plane answers (no database involved).
func (c *Client) Healthz(ctx context.Context) error {
	if _, err := c.call(ctx, c.opts.Timeout, http.MethodGet, "/healthz", nil, nil, nil); err != nil {
		return fmt.Errorf("check control-plane health: %w", err)
	}
	return nil
}

// Readyz checks that the control plane reaches its database and LISTEN connection.
func (c *Client) Readyz(ctx context.Context) error {
	if _, err := c.call(ctx, c.opts.Timeout, http.MethodGet, "/readyz", nil, nil, nil); err != nil {
		return fmt.Errorf("check control-plane readiness: %w", err)
	}
	return nil
}

// Outlook says what the worker may still claim from planID ("" for every plan it may
// claim from), and which tasks are held for good and why: --drain stops when it is
// drained.
func (c *Client) Outlook(ctx context.Context, planID string) (Outlook, error) {
	var out Outlook
	q := url.Values{}
	if planID != "" {
		q.Set("plan_id", planID)
	}
	if _, err := c.call(ctx, c.opts.Timeout, http.MethodGet, "/v1/tasks/outlook", q, nil, &out); err != nil {
		return out, fmt.Errorf("outlook of plan %q: %w", planID, err)
	}
	return out, nil
}

// Me returns the worker the client's token belongs to (GET /v1/workers/me).
func (c *Client) Me(ctx context.Context) (Worker, error) {
	var out Worker
	if _, err := c.call(ctx, c.opts.Timeout, http.MethodGet, "/v1/workers/me", nil, nil, &out); err != nil {
		return out, fmt.Errorf("ask who this worker is: %w", err)
	}
	return out, nil
}

// AppendLog appends a chunk of the agent's log to attempt n of the task the lease holds.
func (c *Client) AppendLog(ctx context.Context, planID, taskID string, n int, req LogChunkRequest) (LogChunkResponse, error) {
	var out LogChunkResponse
	_, err := c.call(ctx, c.opts.Timeout, http.MethodPost, pathOf("v1", "plans", planID, "tasks", taskID, "attempts", strconv.Itoa(n), "log"), nil, req, &out)
	if err != nil {
		return out, fmt.Errorf("append to the log of attempt %d of task %s of plan %s: %w", n, taskID, planID, err)
	}
	return out, nil
}

// LogQuery selects what AttemptLog reads.
type LogQuery struct {
	Attempt int           // 0 is the task's latest attempt
	After   int64         // the offset to read from: NextOffset of the previous answer
	Wait    time.Duration // when nothing follows After and the attempt runs, wait this long for more (at most 30 s)
}

// AttemptLog reads the log of an attempt from q.After on, long-polling up to q.Wait when
// there is nothing new yet and the attempt still runs.
func (c *Client) AttemptLog(ctx context.Context, planID, taskID string, q LogQuery) (AttemptLog, error) {
	var out AttemptLog
	n := "latest"
	if q.Attempt > 0 {
		n = strconv.Itoa(q.Attempt)
	}
	v := url.Values{}
	if q.After > 0 {
		v.Set("after", strconv.FormatInt(q.After, 10))
	}
	if q.Wait > 0 {
		v.Set("wait", strconv.FormatFloat(q.Wait.Seconds(), 'f', -1, 64))
	}
	_, err := c.call(ctx, c.opts.Timeout+q.Wait, http.MethodGet, pathOf("v1", "plans", planID, "tasks", taskID, "attempts", n, "log"), v, nil, &out)
	if err != nil {
		return out, fmt.Errorf("read the log of task %s of plan %s: %w", taskID, planID, err)
	}
	return out, nil
}
