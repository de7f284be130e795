package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/whilly-go/whilly/app"
	"github.com/whilly-go/whilly/control/client"
	"github.com/whilly-go/whilly/fakegithub"
	"github.com/whilly-go/whilly/plan"
)

// IntakeOptions are the intake benchmark's knobs.
type IntakeOptions struct {
	Issues  int     // labelled issues delivered (one plan each)
	Workers int     // sim workers waiting in long-poll
	Rate    float64 // deliveries per second
	Tasks   int     // tasks in each issue's task list
}

// IntakeResult is what the intake benchmark measured, from the POST of a delivery to
// /webhook to (a) the 👀 reaction arriving at the fake GitHub and (b) a worker holding
// the first claimed task of the issue's plan.
type IntakeResult struct {
	Issues    int     `json:"issues"`
	Workers   int     `json:"workers"`
	Rate      float64 `json:"rate_per_s"`
	EyesP50Ms float64 `json:"eyes_p50_ms"`
	EyesP99Ms float64 `json:"eyes_p99_ms"`
	EyesMaxMs float64 `json:"eyes_max_ms"`
	// Claim: to the first task of the plan claimed.
	ClaimP50Ms float64 `json:"claim_p50_ms"`
	ClaimP99Ms float64 `json:"claim_p99_ms"`
	ClaimMaxMs float64 `json:"claim_max_ms"`
	// Problems are requests the fake GitHub would fail a test on (unknown routes …).
	Problems int64 `json:"problems"`
}

// Intake runs the serve configuration (the GitHub App on a fake GitHub in this process)
// with o.Workers sim workers waiting in long-poll, delivers o.Issues signed
// issues.labeled (whilly-pending) deliveries to POST /webhook at o.Rate a second, and
// times each issue from its POST to its 👀 reaction and to its plan's first claim. The
// whole path runs: webhook → River job → intake → plan → claim.
func Intake(ctx context.Context, s Setup, o IntakeOptions) (IntakeResult, error) {
	res := IntakeResult{Issues: o.Issues, Workers: o.Workers, Rate: o.Rate}
	e, err := open(ctx, s, true)
	if err != nil {
		return res, err
	}
	defer e.close(ctx)
	l := e.newLoad([]int64{benchInstallation}, o.Issues, o.Tasks)
	ws, err := e.registerWorkers(ctx, o.Workers, nil)
	if err != nil {
		return res, err
	}
	s.progressf("intake: %d workers wait in long-poll; %d issues labelled at %.0f/s", o.Workers, o.Issues, o.Rate)
	runCtx, stop := context.WithCancel(ctx)
	done := l.work(runCtx, ws, 0)
	if err := e.waitQuiet(ctx, 500*time.Millisecond, 10*time.Second); err != nil {
		stop()
		return res, err
	}
	err = l.deliver(ctx, o.Rate)
	if err == nil {
		err = l.waitFirstClaims(ctx, 60*time.Second+time.Duration(float64(o.Issues)/o.Rate*float64(time.Second)))
	}
	stop()
	if werr := <-done; err == nil {
		err = werr
	}
	e.plans = append(e.plans, l.planIDs(context.WithoutCancel(ctx))...) // also when interrupted
	if err != nil {
		return res, err
	}
	eyes, err := l.eyes()
	if err != nil {
		return res, err
	}
	claims := l.firstClaims()
	res.EyesP50Ms, res.EyesP99Ms, res.EyesMaxMs = ms(percentile(eyes, 0.5)), ms(percentile(eyes, 0.99)), ms(percentile(eyes, 1))
	res.ClaimP50Ms, res.ClaimP99Ms, res.ClaimMaxMs = ms(percentile(claims, 0.5)), ms(percentile(claims, 0.99)), ms(percentile(claims, 1))
	res.Problems = e.problems.Load()
	return res, nil
}

// load is a set of issues across installations of the fake GitHub, labelled
// whilly-pending through signed deliveries, and the sim workers that run their plans.
type load struct {
	e      *env
	issues []*benchIssue
	byRef  map[string]*benchIssue
	sender string

	mu          sync.Mutex
	transitions int // task transitions the sim workers made (claim, start, complete)
}

type benchIssue struct {
	inst   int64
	repo   string
	number int
	body   string

	labelled time.Time // the delivery's POST was sent
	claimed  time.Time // the first task of its plan was claimed (zero: not yet)
	planID   string
}

// newLoad puts issues issues (each with a task list of tasks items) in a repository of
// each installation of insts, round-robin, so that deliveries alternate installations.
func (e *env) newLoad(insts []int64, issues, tasks int) *load {
	l := &load{e: e, byRef: map[string]*benchIssue{}, sender: "octo-maintainer"}
	repos := map[int64]string{}
	for _, inst := range insts {
		repos[inst] = fmt.Sprintf("whilly-bench-%d/load-%s", inst, e.suffix)
		e.github.Install(inst, repos[inst])
		e.github.SetPermission(repos[inst], l.sender, "write")
	}
	body := issueBody(tasks)
	for i := range issues {
		inst := insts[i%len(insts)]
		b := &benchIssue{inst: inst, repo: repos[inst], number: i/len(insts) + 1, body: body}
		e.github.AddIssue(b.repo, b.number, fmt.Sprintf("whilly bench issue %d", i+1), body, l.sender, app.LabelPending)
		l.issues = append(l.issues, b)
		l.byRef[fmt.Sprintf("%s#%d", b.repo, b.number)] = b
	}
	return l
}

// issueBody is an issue with a task list of n items, acceptance criteria and test steps:
// intake plans it from the text (no planner), n tasks the gate allows.
func issueBody(n int) string {
	var b strings.Builder
	b.WriteString("The bench needs this done, in small steps.\n\n")
	for i := range n {
		fmt.Fprintf(&b, "- [ ] Update section %d of docs/bench.md with the measured figure\n", i+1)
	}
	b.WriteString("\n## Acceptance criteria\n- docs/bench.md has every section updated\n\n## Test steps\n- grep -c TODO docs/bench.md prints 0\n")
	return b.String()
}

// payload is the issues.labeled delivery GitHub sends when a person puts whilly-pending
// on the issue.
func (l *load) payload(b *benchIssue) ([]byte, error) {
	owner, name, _ := strings.Cut(b.repo, "/")
	user := map[string]any{"login": l.sender, "id": 583231, "type": "User"}
	p := map[string]any{
		"action": "labeled",
		"label":  map[string]any{"name": app.LabelPending, "color": "ededed"},
		"issue": map[string]any{
			"number": b.number, "title": fmt.Sprintf("whilly bench issue %s#%d", b.repo, b.number), "body": b.body,
			"state": "open", "user": user, "labels": []map[string]any{{"name": app.LabelPending}},
		},
		"repository": map[string]any{
			"name": name, "full_name": b.repo, "private": false,
			"owner": map[string]any{"login": owner, "type": "Organization"},
		},
		"installation": map[string]any{"id": b.inst},
		"sender":       user,
	}
	out, err := json.Marshal(p)
	if err != nil {
		return nil, fmt.Errorf("encode the issues.labeled payload: %w", err)
	}
	return out, nil
}

// deliver POSTs one signed delivery per issue to /webhook, rate a second, in order, each
// at its time whatever the ones before it take: GitHub does not wait for one delivery's
// answer before it sends the next. It stops sending at the first failed delivery and
// returns its error once the deliveries under way have answered.
func (l *load) deliver(ctx context.Context, rate float64) error {
	hc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 16}}
	defer hc.CloseIdleConnections()
	interval := time.Duration(float64(time.Second) / rate)
	begin := time.Now()
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	fail := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		if first == nil {
			first = err
		}
	}
	failed := func() error {
		mu.Lock()
		defer mu.Unlock()
		return first
	}
	for i, b := range l.issues {
		if wait := time.Until(begin.Add(time.Duration(i) * interval)); wait > 0 {
			select {
			case <-ctx.Done():
				fail(ctx.Err())
			case <-time.After(wait):
			}
		}
		if failed() != nil {
			break
		}
		body, err := l.payload(b)
		if err != nil {
			fail(err)
			break
		}
		req, err := fakegithub.WebhookRequest(ctx, l.e.base+"/webhook", l.e.secret, "issues",
			fmt.Sprintf("bench-%s-%d", l.e.suffix, i+1), body)
		if err != nil {
			fail(err)
			break
		}
		l.mu.Lock()
		b.labelled = time.Now()
		l.mu.Unlock()
		wg.Go(func() {
			resp, err := hc.Do(req)
			if err != nil {
				fail(fmt.Errorf("deliver issues.labeled for %s#%d: %w", b.repo, b.number, err))
				return
			}
			msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
			_ = resp.Body.Close()
			if resp.StatusCode/100 != 2 {
				fail(fmt.Errorf("deliver issues.labeled for %s#%d: HTTP %d: %s", b.repo, b.number, resp.StatusCode, bytes.TrimSpace(msg)))
			}
		})
	}
	wg.Wait()
	return failed()
}

// work runs a sim worker loop per worker until ctx ends: claim any task (long-poll),
// start it, hold it for taskTime (±50 %; 0: complete at once), complete it. Like
// whilly-worker, each completion asks for the worker's next task, started in the same
// transaction (claim_next), and the worker long-polls only when it got none. The first
// claim of each issue's plan is timed. Each worker heartbeats every 10 s, as
// whilly-worker does, and like it lives with a heartbeat that fails (logged) unless its
// token is refused, and sends a claim, a start or a completion that got no answer
// again (resend). The channel gets the first error, or nil.
func (l *load) work(ctx context.Context, ws []worker, taskTime time.Duration) chan error {
	var (
		wg    sync.WaitGroup
		first firstErr
	)
	ctx, cancel := context.WithCancel(ctx)
	fail := func(err error) { // the first failure stops every worker
		first.set(err)
		cancel()
	}
	for i, w := range ws {
		wg.Go(func() {
			for {
				select {
				case <-ctx.Done():
					return
				case <-time.After(10 * time.Second):
				}
				_, err := w.api.Heartbeat(ctx, w.id, client.HeartbeatRequest{})
				switch {
				case err == nil || ctx.Err() != nil:
				case client.IsUnauthorized(err) || client.IsForbidden(err):
					fail(fmt.Errorf("sim worker %d: heartbeat: %w", i+1, err))
					return
				default: // as whilly-worker, which tries again at its next beat
					l.e.log.WarnContext(ctx, "bench: a sim worker's heartbeat failed; it tries again in 10 s",
						"worker_id", w.id, "error", err)
				}
			}
		})
		wg.Go(func() {
			var next *client.Claim // handed over with the last completion
			for ctx.Err() == nil {
				c := next
				if c == nil {
					req := client.ClaimRequest{WaitSeconds: 5, IdempotencyKey: client.NewKey()}
					err := l.resend(ctx, "claim", func() (err error) {
						c, err = w.api.Claim(ctx, req)
						return err
					})
					if err != nil || c == nil {
						if err != nil && ctx.Err() == nil {
							fail(fmt.Errorf("sim worker %d: %w", i+1, err))
							return
						}
						continue
					}
				}
				l.claimed(c.Plan.GitHubIssueRef, c.Plan.ID, time.Now())
				var err error
				if next, err = l.run(ctx, w, c, taskTime); err != nil {
					if ctx.Err() == nil {
						fail(fmt.Errorf("sim worker %d: %w", i+1, err))
					}
					return
				}
			}
		})
	}
	out := make(chan error, 1)
	go func() {
		wg.Wait()
		cancel()
		out <- first.get()
	}()
	return out
}

// run starts, holds and completes a claimed task as whilly-worker's sim agent would
// (changing nothing in the workspace), and returns the next task the completion handed
// over (nil: none).
func (l *load) run(ctx context.Context, w worker, c *client.Claim, taskTime time.Duration) (*client.Claim, error) {
	transitions := 2 // the claim and the completion
	if taskTime > 0 {
		if c.Task.Status != plan.StatusInProgress { // not started with the last completion
			if err := l.resend(ctx, "start", func() error {
				_, err := w.api.Start(ctx, c.Plan.ID, c.Task.ID, client.LeaseRequest{LeaseID: c.Lease.ID})
				return err
			}); err != nil {
				return nil, err
			}
		}
		transitions++
		hold := taskTime/2 + rand.N(taskTime)
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(hold):
		}
	}
	var done client.CompleteResponse
	req := client.CompleteRequest{LeaseID: c.Lease.ID, NoChanges: true, Result: "sim: nothing to change",
		ClaimNext: &client.NextClaim{IdempotencyKey: client.NewKey(), Start: taskTime > 0}}
	if err := l.resend(ctx, "complete", func() (err error) {
		done, err = w.api.Complete(ctx, c.Plan.ID, c.Task.ID, req)
		return err
	}); err != nil {
		return nil, err
	}
	l.mu.Lock()
	l.transitions += transitions
	l.mu.Unlock()
	return done.Next, nil
}

// claimed notes a claim of a task of plan planID, the plan of issue ref.
func (l *load) claimed(ref, planID string, at time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if b := l.byRef[ref]; b != nil && b.claimed.IsZero() {
		b.claimed, b.planID = at, planID
	}
}

// resendTries is how many times a sim worker sends a request whose answer it did not get.
const resendTries = 5

// resend sends a request (claim, start, complete) again while the control plane does not
// answer it, or answers 5xx, 408 or 429, as whilly-worker does: a report is idempotent on
// the lease, a claim and the completion's next claim on their key, kept across the
// tries. Each retry is logged; after resendTries the error stands.
func (l *load) resend(ctx context.Context, what string, send func() error) error {
	for try := 1; ; try++ {
		err := send()
		if err == nil || !client.IsRetryable(err) || try == resendTries || ctx.Err() != nil {
			return err
		}
		l.e.log.WarnContext(ctx, "bench: a sim worker's request got no answer; it sends it again", "request", what, "try", try, "error", err)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Duration(try) * 200 * time.Millisecond):
		}
	}
}

// waitFirstClaims waits until every issue's plan has had a task claimed, at most limit.
func (l *load) waitFirstClaims(ctx context.Context, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		l.mu.Lock()
		left := 0
		for _, b := range l.issues {
			if b.claimed.IsZero() {
				left++
			}
		}
		l.mu.Unlock()
		if left == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d issues had no task claimed after %v (is intake failing? run with WHILLY_LOG_LEVEL=debug)", left, len(l.issues), limit)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// firstClaims are the label-to-first-claim times of the issues whose plan had a claim,
// sorted.
func (l *load) firstClaims() []time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []time.Duration
	for _, b := range l.issues {
		if !b.claimed.IsZero() {
			out = append(out, b.claimed.Sub(b.labelled))
		}
	}
	slices.Sort(out)
	return out
}

// eyes are the label-to-👀 times, sorted, from the fake's record of the reaction
// requests it answered.
func (l *load) eyes() ([]time.Duration, error) {
	at := map[string]time.Time{}
	for _, r := range l.e.github.Requests() {
		if ref, ok := issuePost(r, "reactions"); ok {
			if _, seen := at[ref]; !seen {
				at[ref] = r.At
			}
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]time.Duration, 0, len(l.issues))
	for _, b := range l.issues {
		t, ok := at[b.repo+"#"+strconv.Itoa(b.number)]
		if !ok {
			return nil, fmt.Errorf("issue %s#%d never got its 👀 reaction", b.repo, b.number)
		}
		out = append(out, t.Sub(b.labelled))
	}
	slices.Sort(out)
	return out, nil
}

// issuePost says which issue a request the fake answered with a 2xx was made on, when it
// was a POST /repos/OWNER/NAME/issues/N/<what>: OWNER/NAME#N.
func issuePost(r fakegithub.GitHubRequest, what string) (string, bool) {
	parts := strings.Split(strings.TrimPrefix(r.Path, "/repos/"), "/")
	if r.Method != http.MethodPost || r.Status >= 300 || len(parts) != 5 || parts[2] != "issues" || parts[4] != what {
		return "", false
	}
	return parts[0] + "/" + parts[1] + "#" + parts[3], true
}

// planIDs are the plans the intake made, for close to delete.
func (l *load) planIDs(ctx context.Context) []string {
	var out []string
	for _, b := range l.issues {
		if pi, err := l.e.store.IssuePlan(ctx, fmt.Sprintf("%s#%d", b.repo, b.number)); err == nil {
			out = append(out, pi.ID)
		}
	}
	return out
}
