package control

import (
	"context"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"time"
	"unicode"

	"github.com/whilly-go/whilly/agent"
	"github.com/whilly-go/whilly/control/client"
	"github.com/whilly-go/whilly/plan"
	"github.com/whilly-go/whilly/queue"
)

var (
	labelPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:/-]{0,63}$`)
	shaPattern   = regexp.MustCompile(`^(?:[0-9a-fA-F]{40}|[0-9a-fA-F]{64})$`)
)

const (
	maxLabels     = 32
	maxIDBytes    = 512
	maxHeldLeases = 1000
	maxReason     = 4096
)

// unprintable reports a rune a name shown to people must not hold: a control character, or
// a format character (bidi overrides, zero-width spaces and joiners), which would make
// it display as another.
func unprintable(r rune) bool { return unicode.IsControl(r) || unicode.Is(unicode.Cf, r) }

func (s *Server) register(w http.ResponseWriter, r *http.Request) {
	var req client.RegisterRequest
	if err := decode(w, r, s.cfg.MaxBodyBytes, &req); err != nil {
		s.writeError(w, r, err)
		return
	}
	req.Hostname = strings.TrimSpace(req.Hostname)
	if req.Hostname == "" || len(req.Hostname) > 255 || strings.IndexFunc(req.Hostname, unprintable) >= 0 {
		s.writeError(w, r, errorf(http.StatusBadRequest, codeBadRequest, "Field hostname must be 1 to 255 printable characters."))
		return
	}
	if len(req.Labels) > maxLabels {
		s.writeError(w, r, errorf(http.StatusBadRequest, codeBadRequest, "A worker may carry at most %d labels.", maxLabels))
		return
	}
	for _, l := range req.Labels {
		if !labelPattern.MatchString(l) {
			s.writeError(w, r, errorf(http.StatusBadRequest, codeBadRequest, "Label %q must match %s.", l, labelPattern))
			return
		}
	}
	asked, err := queue.ParseScopes(req.Scopes)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	// A worker inherits its registrar's scopes and may narrow them, never widen them.
	have := principalFrom(r.Context()).scopes()
	scopes := asked
	if scopes.Unlimited() {
		scopes = have
	}
	if !have.Within(scopes) {
		s.writeError(w, r, errorf(http.StatusForbidden, codeForbidden, "This token may only register workers within its scopes %s.", strings.Join(have, ", ")))
		return
	}
	owner := strings.TrimSpace(req.OwnerEmail)
	if tok := principalFrom(r.Context()).token; tok != nil {
		owner = tok.Owner // the registrar's owner is who registered it, whatever the body says
	}
	if len(owner) > 254 || strings.IndexFunc(owner, unprintable) >= 0 {
		s.writeError(w, r, errorf(http.StatusBadRequest, codeBadRequest, "Field owner_email must be at most 254 printable characters."))
		return
	}
	wk, token, err := s.store.RegisterScopedWorker(r.Context(), req.Hostname, req.Labels, scopes, owner)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.log.InfoContext(r.Context(), "worker registered", "worker_id", wk.ID, "hostname", wk.Hostname, "scopes", []string(wk.Scopes))
	writeJSON(w, http.StatusCreated, client.RegisterResponse{WorkerID: wk.ID, Token: token, Labels: nonNil(wk.Labels), Scopes: wk.Scopes.Strings()})
}

// revokeSelf revokes the calling worker's own token and releases what it holds: a worker
// that registered itself ends its token's life when it exits.
func (s *Server) revokeSelf(w http.ResponseWriter, r *http.Request) {
	p := principalFrom(r.Context())
	id, err := param(r, "worker")
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if id != p.worker.ID {
		s.writeError(w, r, errorf(http.StatusForbidden, codeForbidden, "This token belongs to another worker."))
		return
	}
	n, err := s.store.RevokeWorker(r.Context(), id)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.log.InfoContext(r.Context(), "worker revoked itself", "worker_id", id, "tasks_released", n)
	w.WriteHeader(http.StatusNoContent)
}

// ownWorker reads the worker id of the path, which must be the caller's own.
func ownWorker(r *http.Request) (string, error) {
	id, err := param(r, "worker")
	if err != nil {
		return "", err
	}
	if id != principalFrom(r.Context()).worker.ID {
		return "", errorf(http.StatusForbidden, codeForbidden, "This token belongs to another worker.")
	}
	return id, nil
}

// releaseHeld hands back every task the worker holds: a worker restarted under the same
// id calls it first, so that what its predecessor ran does not wait for its lease to
// expire (and have the attempt counted).
func (s *Server) releaseHeld(w http.ResponseWriter, r *http.Request) {
	id, err := ownWorker(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	var req client.ReleaseHeldRequest
	if err := decode(w, r, s.cfg.MaxBodyBytes, &req); err != nil {
		s.writeError(w, r, err)
		return
	}
	if req.Reason == "" {
		req.Reason = "worker_restarted"
	}
	if err := checkText("reason", req.Reason, 64); err != nil {
		s.writeError(w, r, err)
		return
	}
	n, err := s.store.ReleaseHeld(r.Context(), id, req.Reason)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if n > 0 {
		s.log.InfoContext(r.Context(), "released the tasks of a restarted worker", "worker_id", id, "tasks", n)
	}
	writeJSON(w, http.StatusOK, client.ReleaseHeldResponse{Released: n})
}

// charge charges the cost of an attempt whose lease ended before its report went through.
func (s *Server) charge(w http.ResponseWriter, r *http.Request) {
	req, l, ok := decodeLeased(s, w, r, func(req client.ChargeRequest) string { return req.LeaseID })
	if !ok {
		return
	}
	if err := checkText("reason", req.Reason, maxReason); err != nil {
		s.writeError(w, r, err)
		return
	}
	res, err := s.store.ChargeLost(r.Context(), l, req.CostUSD, req.Reason)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if res.Charged {
		s.countSpend(r.Context(), l.PlanID, req.CostUSD)
	}
	writeJSON(w, http.StatusOK, client.ChargeResponse{Charged: res.Charged})
}

func (s *Server) heartbeat(w http.ResponseWriter, r *http.Request) {
	id, err := ownWorker(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	var req client.HeartbeatRequest
	if err := decode(w, r, s.cfg.MaxBodyBytes, &req); err != nil {
		s.writeError(w, r, err)
		return
	}
	if len(req.Tasks) > maxHeldLeases {
		s.writeError(w, r, errorf(http.StatusBadRequest, codeBadRequest, "A heartbeat may list at most %d tasks.", maxHeldLeases))
		return
	}
	held := make([]queue.Lease, 0, len(req.Tasks))
	for _, t := range req.Tasks {
		if t.PlanID == "" || t.TaskID == "" || len(t.PlanID) > maxIDBytes || len(t.TaskID) > maxIDBytes || !isUUID(t.LeaseID) {
			s.writeError(w, r, errorf(http.StatusBadRequest, codeBadRequest, "Each task needs plan_id, task_id and a UUID lease_id."))
			return
		}
		if err := cmpErr(checkText("tasks.plan_id", t.PlanID, 0), checkText("tasks.task_id", t.TaskID, 0)); err != nil {
			s.writeError(w, r, err)
			return
		}
		held = append(held, queue.Lease{PlanID: t.PlanID, TaskID: t.TaskID, LeaseID: strings.ToLower(t.LeaseID), WorkerID: id})
	}
	res, err := s.store.Heartbeat(r.Context(), id, held)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	out := client.HeartbeatResponse{LeaseExpiresAt: res.LeaseExpiresAt, Cancel: []client.CancelNotice{}}
	for _, c := range res.Cancel {
		out.Cancel = append(out.Cancel, client.CancelNotice{PlanID: c.PlanID, TaskID: c.TaskID, Reason: c.Reason})
	}
	writeJSON(w, http.StatusOK, out)
}

// wakesClaimers reports whether an event of type typ may have made a task claimable: a
// new or returned task, a finished dependency, a plan resumed or given more budget, or a
// listener resync (notifications may have been missed).
func wakesClaimers(typ string) bool {
	switch typ {
	case queue.EventTaskCreated, queue.EventComplete, queue.EventRelease, queue.EventRetry, queue.EventReset,
		queue.EventTaskSkipped, queue.EventPlanBudgetRaised, queue.EventPlanReset, queue.EventPlanResumed,
		queue.EventPlanDone, queue.EventPlanFailed, queue.EventPlanCancelled, queue.EventPlanBudgetExceeded,
		queue.EventPlanReopened, queue.EventTaskUpdated, queue.NotificationResync,
		queue.EventPlanApproved, queue.EventSystemResumed:
		return true
	}
	return false
}

// claimFilter wakes the claims of planID ("" any plan) on the events of that plan that
// wakesClaimers names, and on those without a plan (the fleet resumed).
func claimFilter(planID string) func(queue.Notification) bool {
	return func(n queue.Notification) bool {
		return wakesClaimers(n.Type) && (planID == "" || n.PlanID == planID || n.PlanID == "")
	}
}

const (
	// retryFloor is the shortest wait for a not_before deadline; it doubles while such
	// wake-ups find nothing (clock skew with the database, or a task blocked otherwise),
	// up to retryCeiling, so a waiting claim can never spin.
	retryFloor   = 20 * time.Millisecond
	retryCeiling = time.Second
	// degradedPoll bounds each wait while the LISTEN connection is down.
	degradedPoll = time.Second
)

// claim hands out the next claimable task, long-polling up to wait_seconds. While it
// waits it costs no database query: it sleeps until the listener reports an event that
// can make a task claimable, the next retry backoff expires, or the deadline passes.
func (s *Server) claim(w http.ResponseWriter, r *http.Request) {
	begin := time.Now()
	p := principalFrom(r.Context())
	var req client.ClaimRequest
	if err := decode(w, r, s.cfg.MaxBodyBytes, &req); err != nil {
		s.writeError(w, r, err)
		return
	}
	if req.WaitSeconds < 0 {
		s.writeError(w, r, errorf(http.StatusBadRequest, codeBadRequest, "Field wait_seconds must not be negative."))
		return
	}
	if err := checkText("plan_id", req.PlanID, maxIDBytes); err != nil {
		s.writeError(w, r, err)
		return
	}
	if err := checkKey("idempotency_key", req.IdempotencyKey); err != nil {
		s.writeError(w, r, err)
		return
	}
	if req.PlanID != "" && !p.worker.Scopes.Unlimited() {
		// A plan outside the worker's scopes is answered like an unknown one. (The claim
		// statement never hands out such a task either; this says so at once.)
		if _, err := s.scopedPlan(r, req.PlanID); err != nil {
			s.writeError(w, r, err)
			return
		}
	}
	qreq := queue.ClaimRequest{WorkerID: p.worker.ID, PlanID: req.PlanID, Labels: p.worker.Labels, Scopes: p.worker.Scopes,
		Key: strings.ToLower(req.IdempotencyKey)}
	// A claim retried after its answer was lost gets the task it had claimed.
	if held, err := s.store.HeldClaim(r.Context(), qreq); err != nil || held != nil {
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		if out, err := s.deliver(r, held, 0); err != nil {
			s.writeError(w, r, err)
		} else if out != nil {
			writeJSON(w, http.StatusOK, out)
		}
		return
	}
	wait := time.Duration(min(req.WaitSeconds, s.cfg.MaxClaimWait.Seconds()) * float64(time.Second))
	deadline := begin.Add(wait)
	if wait > 0 {
		// The answer may come only at the deadline: keep the server's write timeout out of
		// the way (an error means the writer has none to move).
		_ = http.NewResponseController(w).SetWriteDeadline(deadline.Add(10 * time.Second))
	}
	c, err := s.waitForClaim(r.Context(), qreq, deadline, req.Drain)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	waited := time.Since(begin).Seconds()
	if c == nil {
		s.metrics.claimWait.WithLabelValues("empty").Observe(waited)
		w.WriteHeader(http.StatusNoContent)
		return
	}
	out, err := s.deliver(r, c, waited)
	switch {
	case err != nil:
		s.writeError(w, r, err)
	case out != nil:
		writeJSON(w, http.StatusOK, out)
	}
}

// deliver turns a claim into its answer, with the workspace of a repository plan. A claim
// that cannot be delivered is released at once rather than when its lease expires: nil
// and an error (503) when the workspace is not available, nil and nil when the worker
// left while the claim was being made.
func (s *Server) deliver(r *http.Request, c *queue.Claim, waited float64) (*client.Claim, error) {
	p := principalFrom(r.Context())
	l := queue.Lease{PlanID: c.Task.PlanID, TaskID: c.Task.ID, LeaseID: c.Lease.ID, WorkerID: p.worker.ID}
	var ws *client.Workspace
	if s.cfg.Workspaces != nil && c.Plan.Repo != "" && r.Context().Err() == nil {
		ctx, cancel := context.WithTimeout(r.Context(), workspaceTimeout)
		var err error
		ws, err = s.cfg.Workspaces(ctx, c.Plan, l)
		cancel()
		if err != nil && r.Context().Err() == nil {
			s.log.WarnContext(r.Context(), "no workspace for the claim; released", "plan_id", l.PlanID, "task_id", l.TaskID, "error", err)
			s.releaseUndelivered(r.Context(), l, "workspace_unavailable")
			return nil, errorf(http.StatusServiceUnavailable, codeUnavailable, "The workspace of plan %s is not available; try again later.", l.PlanID)
		}
	}
	if r.Context().Err() != nil {
		s.releaseUndelivered(r.Context(), l, "claimant_gone")
		return nil, nil
	}
	s.metrics.claims.Inc()
	s.metrics.claimWait.WithLabelValues("claimed").Observe(waited)
	out := client.Claim{Task: taskWire(c.Task), Lease: client.Lease{ID: c.Lease.ID, ExpiresAt: c.Lease.ExpiresAt,
		TTLSeconds: s.store.Config().LeaseTTL.Seconds()}, Plan: planWire(c.Plan), Workspace: ws}
	out.Task.Attempt = c.Task.Attempts
	return &out, nil
}

// workspaceTimeout bounds one call of the WorkspaceProvider (it may mint a token on GitHub).
const workspaceTimeout = 30 * time.Second

// releaseUndelivered hands back a claim its worker will never hear of, with a deadline of
// its own: the request's context may be gone already.
func (s *Server) releaseUndelivered(ctx context.Context, l queue.Lease, reason string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if _, err := s.store.Release(ctx, l, reason); err != nil {
		s.log.WarnContext(ctx, "release of an undelivered claim failed", "plan_id", l.PlanID, "task_id", l.TaskID, "error", err)
	}
}

func (s *Server) waitForClaim(ctx context.Context, req queue.ClaimRequest, deadline time.Time, drain bool) (*queue.Claim, error) {
	if s.isDraining() {
		deadline = time.Now() // one attempt, no wait: this replica is going away
	}
	var w *waiter
	if time.Until(deadline) > 0 {
		// Join before the first attempt, so that nothing appearing in between is missed.
		w = s.room.join(req)
		defer w.leave()
	}
	floor := retryFloor
	for {
		if w != nil {
			w.attempt()
		}
		s.metrics.claimQueries.Inc()
		c, err := s.store.Claim(ctx, req)
		if err != nil || c != nil {
			if c != nil && w != nil {
				w.claimed()
			}
			return c, err
		}
		if req.PlanID != "" {
			// A plan that does not exist, or has ended or paused, would otherwise make the
			// worker wait in vain: say "nothing" now so a draining worker can stop.
			st, err := s.store.PlanStatus(ctx, req.PlanID)
			if err != nil {
				return nil, err
			}
			if st != plan.PlanActive {
				return nil, nil
			}
		}
		if drain {
			// Nothing left that could become claimable for this worker: waiting would only
			// keep a draining worker (an Action job) from stopping until the deadline.
			if open, err := s.store.MayClaimLater(ctx, req); err != nil || !open {
				return nil, err
			}
		}
		remaining := time.Until(deadline)
		if remaining <= 0 {
			return nil, nil
		}
		sleep, retryTimer := remaining, false
		next, err := s.store.NextReadyAt(ctx, req.PlanID)
		if err != nil {
			return nil, err
		}
		if next != nil {
			if d := max(time.Until(*next), floor); d < sleep {
				sleep, retryTimer = d, true
			}
		}
		if !s.listener.Ready() && degradedPoll < sleep {
			sleep, retryTimer = degradedPoll, false
		}
		if !w.sleep() {
			continue // an event came during the attempt: try again at once
		}
		t := time.NewTimer(sleep)
		s.metrics.claimsWaiting.Inc()
		stop, err := false, error(nil)
		select {
		case <-ctx.Done():
			stop, err = true, ctx.Err()
			w.awake(true)
		case <-s.draining:
			stop = true
			w.awake(true)
		case <-w.wake:
			floor = retryFloor
		case <-t.C:
			w.awake(false)
			if retryTimer {
				floor = min(floor*2, retryCeiling)
			}
		}
		t.Stop()
		s.metrics.claimsWaiting.Dec()
		if stop {
			return nil, err
		}
	}
}

// lease reads the plan and task ids from the path and builds the caller's lease.
func lease(r *http.Request, leaseID string) (queue.Lease, error) {
	planID, err := param(r, "plan")
	if err != nil {
		return queue.Lease{}, err
	}
	taskID, err := param(r, "task")
	if err != nil {
		return queue.Lease{}, err
	}
	if !isUUID(leaseID) {
		return queue.Lease{}, errorf(http.StatusBadRequest, codeBadRequest, "Field lease_id must be the UUID of the lease.")
	}
	p := principalFrom(r.Context())
	return queue.Lease{PlanID: planID, TaskID: taskID, LeaseID: strings.ToLower(leaseID), WorkerID: p.worker.ID}, nil
}

// decodeLeased decodes a worker's request body and the lease it presents for the task of
// the path; on failure the error is answered and ok is false.
func decodeLeased[T any](s *Server, w http.ResponseWriter, r *http.Request, leaseID func(T) string) (req T, l queue.Lease, ok bool) {
	if err := decode(w, r, s.cfg.MaxBodyBytes, &req); err != nil {
		s.writeError(w, r, err)
		return req, l, false
	}
	l, err := lease(r, leaseID(req))
	if err != nil {
		s.writeError(w, r, err)
		return req, l, false
	}
	return req, l, true
}

func (s *Server) start(w http.ResponseWriter, r *http.Request) {
	_, l, ok := decodeLeased(s, w, r, func(req client.LeaseRequest) string { return req.LeaseID })
	if !ok {
		return
	}
	t, err := s.store.Start(r.Context(), l)
	s.answerTask(w, r, t, err)
}

func (s *Server) complete(w http.ResponseWriter, r *http.Request) {
	req, l, ok := decodeLeased(s, w, r, func(req client.CompleteRequest) string { return req.LeaseID })
	if !ok {
		return
	}
	if req.HeadSHA != "" && !shaPattern.MatchString(req.HeadSHA) {
		s.writeError(w, r, errorf(http.StatusBadRequest, codeBadRequest, "Field head_sha must be a hexadecimal commit id."))
		return
	}
	if req.ClaimNext != nil {
		if err := cmpErr(checkText("claim_next.plan_id", req.ClaimNext.PlanID, maxIDBytes),
			checkKey("claim_next.idempotency_key", req.ClaimNext.IdempotencyKey)); err != nil {
			s.writeError(w, r, err)
			return
		}
	}
	// The result is the agent's text: whatever it printed is kept, made storable, and
	// marked repaired when that changed it.
	result, repaired := agent.Storable(req.Result)
	tail, err := logTail(req.Log)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	in := queue.CompleteInput{Cost: req.CostUSD, Result: result, HeadSHA: strings.ToLower(req.HeadSHA), NoChanges: req.NoChanges,
		ResultRepaired: repaired || req.ResultRepaired, CostEstimated: req.CostEstimated, Log: tail}
	var (
		t    queue.TaskInfo
		next *queue.Claim
	)
	if req.ClaimNext != nil && !s.isDraining() {
		p := principalFrom(r.Context())
		t, next, err = s.store.CompleteAndClaim(r.Context(), l, in, queue.ClaimRequest{WorkerID: p.worker.ID, PlanID: req.ClaimNext.PlanID,
			Labels: p.worker.Labels, Scopes: p.worker.Scopes, Key: strings.ToLower(req.ClaimNext.IdempotencyKey), Start: req.ClaimNext.Start})
	} else {
		t, err = s.store.Complete(r.Context(), l, in)
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.metrics.completions.Inc()
	s.attemptEnded(r.Context(), t, outcomeDone, req.CostUSD, req.DurationMS)
	out := client.CompleteResponse{Task: taskWire(t)}
	if next != nil {
		// A next claim that cannot be delivered is released; the worker claims as usual.
		out.Next, _ = s.deliver(r, next, 0)
	}
	writeJSON(w, http.StatusOK, out)
}

// isDraining reports whether Drain was called: this replica is going away.
func (s *Server) isDraining() bool {
	select {
	case <-s.draining:
		return true
	default:
		return false
	}
}

func (s *Server) fail(w http.ResponseWriter, r *http.Request) {
	req, l, ok := decodeLeased(s, w, r, func(req client.FailRequest) string { return req.LeaseID })
	if !ok {
		return
	}
	if strings.TrimSpace(req.Reason) == "" || len(req.Reason) > maxReason {
		s.writeError(w, r, errorf(http.StatusBadRequest, codeBadRequest, "Field reason must be 1 to %d bytes.", maxReason))
		return
	}
	if len(req.Detail) > 0 && string(req.Detail) != "null" && req.Detail[0] != '{' {
		s.writeError(w, r, errorf(http.StatusBadRequest, codeBadRequest, "Field detail must be a JSON object."))
		return
	}
	if err := cmpErr(checkText("reason", req.Reason, 0), checkJSONText("detail", req.Detail)); err != nil {
		s.writeError(w, r, err)
		return
	}
	if string(req.Detail) == "null" {
		req.Detail = nil
	}
	if len(req.Output) > client.MaxFailOutput {
		s.writeError(w, r, errorf(http.StatusBadRequest, codeBadRequest, "Field output must be at most %d bytes.", client.MaxFailOutput))
		return
	}
	tail, err := logTail(req.Log)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	// Agent output may hold NUL, which Postgres text cannot store: drop it.
	output, _ := agent.Storable(req.Output)
	t, err := s.store.Fail(r.Context(), l, queue.FailInput{Cost: req.CostUSD, Reason: req.Reason, Retryable: req.Retryable,
		Detail: req.Detail, Output: output, CostEstimated: req.CostEstimated, Log: tail})
	if err == nil {
		s.metrics.failures.WithLabelValues(reasonClass(req.Reason)).Inc()
		outcome := outcomeFailed
		if t.Status == plan.StatusPending {
			outcome = outcomeRetry
		}
		s.attemptEnded(r.Context(), t, outcome, req.CostUSD, req.DurationMS)
	}
	s.answerTask(w, r, t, err)
}

func (s *Server) release(w http.ResponseWriter, r *http.Request) {
	req, l, ok := decodeLeased(s, w, r, func(req client.LeaseRequest) string { return req.LeaseID })
	if !ok {
		return
	}
	if err := checkText("reason", req.Reason, maxReason); err != nil {
		s.writeError(w, r, err)
		return
	}
	t, err := s.store.Release(r.Context(), l, req.Reason)
	if err == nil {
		s.attemptEnded(r.Context(), t, outcomeReleased, 0, 0)
	}
	s.answerTask(w, r, t, err)
}

func (s *Server) answerTask(w http.ResponseWriter, r *http.Request, t queue.TaskInfo, err error) {
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, taskWire(t))
}

func (s *Server) taskEvent(w http.ResponseWriter, r *http.Request) {
	req, l, ok := decodeLeased(s, w, r, func(req client.TaskEventRequest) string { return req.LeaseID })
	if !ok {
		return
	}
	if string(req.Payload) == "null" {
		req.Payload = nil
	}
	if string(req.Detail) == "null" {
		req.Detail = nil
	}
	if err := cmpErr(checkText("type", req.Type, 0), checkJSONText("payload", req.Payload), checkJSONText("detail", req.Detail)); err != nil {
		s.writeError(w, r, err)
		return
	}
	ev, err := s.store.AppendTaskEvent(r.Context(), l, req.Type, req.Payload, req.Detail)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, eventWire(ev))
}

func (s *Server) listWorkers(w http.ResponseWriter, r *http.Request) {
	ws, err := s.store.ListWorkers(r.Context())
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	out := client.WorkerList{Workers: make([]client.Worker, 0, len(ws))}
	scopes := principalFrom(r.Context()).scopes()
	for _, wk := range ws {
		if !scopes.Within(wk.Scopes) {
			continue // a scoped caller sees only workers confined to its own scopes
		}
		out.Workers = append(out.Workers, workerWire(wk))
	}
	writeJSON(w, http.StatusOK, out)
}

// isUUID reports whether s is a UUID written out: 8-4-4-4-12 hexadecimal digits of
// either case. A loop, not a regexp: every worker request checks one or two, and the
// regexp took 7 times as long (BenchmarkIsUUID: 235 vs 32 ns).
func isUUID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i := range len(s) {
		switch c := s[i]; i {
		case 8, 13, 18, 23:
			if c != '-' {
				return false
			}
		default:
			if !isHex(c) {
				return false
			}
		}
	}
	return true
}

func isHex(c byte) bool { return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F' }

// checkKey refuses an idempotency key that is not a UUID ("" is no key).
func checkKey(field, key string) error {
	if key != "" && !isUUID(key) {
		return errorf(http.StatusBadRequest, codeBadRequest, "Field %s must be a UUID.", field)
	}
	return nil
}

// workerMe answers who the worker token belongs to: a worker started with only its token
// learns its id here.
func (s *Server) workerMe(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, workerWire(*principalFrom(r.Context()).worker))
}

func workerWire(wk queue.Worker) client.Worker {
	return client.Worker{ID: wk.ID, Hostname: wk.Hostname, Labels: nonNil(wk.Labels),
		Status: wk.Status, LastHeartbeat: wk.LastHeartbeat, RegisteredAt: wk.RegisteredAt, RevokedAt: wk.RevokedAt,
		Scopes: wk.Scopes.Strings()}
}

// reasonClass maps a free-form failure reason to a bounded set of metric label values:
// the reason's leading word (before ":" or a space) when it is a known class, else "other".
func reasonClass(reason string) string {
	head := strings.ToLower(strings.TrimSpace(reason))
	if i := strings.IndexAny(head, ": \t\n("); i >= 0 {
		head = head[:i]
	}
	if slices.Contains(failureClasses, head) {
		return head
	}
	return "other"
}

// outlook answers what the worker may still claim, so a draining worker knows when to
// stop and can say why the tasks it leaves are held.
func (s *Server) outlook(w http.ResponseWriter, r *http.Request) {
	p := principalFrom(r.Context())
	planID := r.URL.Query().Get("plan_id")
	if len(planID) > maxIDBytes {
		s.writeError(w, r, errorf(http.StatusBadRequest, codeBadRequest, "Parameter plan_id is too long."))
		return
	}
	o, err := s.store.OutlookOf(r.Context(), planID, p.worker.Labels, p.worker.Scopes)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, outlookWire(o))
}

func outlookWire(o queue.Outlook) client.Outlook {
	out := client.Outlook{Claimable: o.Claimable, Waiting: o.Waiting, Retrying: o.Retrying, Running: o.Running,
		Held: []client.HeldTask{}, HeldTotal: len(o.Held)}
	for _, h := range o.Held[:min(len(o.Held), client.MaxHeldListed)] {
		out.Held = append(out.Held, client.HeldTask{PlanID: h.PlanID, TaskID: h.TaskID, Reason: h.Hold, Detail: h.Detail})
	}
	return out
}
