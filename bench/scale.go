package bench

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/whilly-go/whilly/app"
	"github.com/whilly-go/whilly/fakegithub"
	"github.com/whilly-go/whilly/queue"
)

// ScaleOptions are the scale benchmark's knobs.
type ScaleOptions struct {
	Installations int           // GitHub App installations, one repository each
	Issues        int           // labelled issues per installation
	Tasks         int           // tasks in each issue's task list
	Workers       int           // sim workers
	TaskTime      time.Duration // how long a sim worker holds a task (±50 %)
	Rate          float64       // deliveries per second, alternating installations
	Timeout       time.Duration // how long the plans may take to finish
	GitHubLatency time.Duration // how long the fake GitHub takes to answer a request
}

// ScaleResult is what the scale benchmark measured.
type ScaleResult struct {
	Installations int     `json:"installations"`
	Issues        int     `json:"issues"`
	IssuesDone    int     `json:"issues_done"`
	TasksDone     int     `json:"tasks_done"`
	Workers       int     `json:"workers"`
	Seconds       float64 `json:"seconds"`
	// GitHubLatencyMs is the time the fake GitHub took to answer each request.
	GitHubLatencyMs float64 `json:"github_latency_ms"`
	// Transitions are the task transitions the sim workers made (claim, start, complete);
	// Writes the content writes the fake GitHub accepted from the installations.
	Transitions         int     `json:"transitions"`
	Writes              int     `json:"writes"`
	WritesPerTransition float64 `json:"writes_per_transition"`
	// WritesByKind splits Writes: reactions, labels (added or removed), comments
	// (created), comment edits, and other (pull requests, …).
	WritesByKind map[string]int `json:"writes_by_kind"`
	// MaxWritesPerMinute is the most writes any installation made in any 60 s, against
	// WriteLimit (GitHub's secondary limit, which the fake enforces).
	MaxWritesPerMinute int `json:"max_writes_per_minute"`
	WriteLimit         int `json:"write_limit"`
	// RateLimited counts the fake's 403/429 rate-limit answers.
	RateLimited int `json:"rate_limited"`
	// Fairness: the median label-to-first-claim time of each installation's issues; the
	// fastest and slowest of those medians, and slowest / fastest.
	FastestMedianMs float64 `json:"fastest_median_ms"`
	SlowestMedianMs float64 `json:"slowest_median_ms"`
	Spread          float64 `json:"spread"`
	// ChanceSpread is the spread of the same label-to-first-claim times dealt to the
	// installations at random, each round of deliveries among itself (the median over
	// chanceDeals deals): what the times' own scatter makes of Spread when no
	// installation is favoured.
	ChanceSpread    float64 `json:"chance_spread"`
	FirstClaimP50Ms float64 `json:"first_claim_p50_ms"`
	FirstClaimP99Ms float64 `json:"first_claim_p99_ms"`
	// EyesP50Ms and EyesP99Ms are label to 👀 (the intake's acknowledgement), over every
	// issue: how much of the first claim's wait is the intake's.
	EyesP50Ms float64 `json:"eyes_p50_ms"`
	EyesP99Ms float64 `json:"eyes_p99_ms"`
	// DoneP50Ms and DoneP99Ms are from a plan's plan.done to the fake GitHub's receiving
	// its issue's whilly-done label, over every issue: how far the mirror trails.
	DoneP50Ms float64 `json:"done_p50_ms"`
	DoneP99Ms float64 `json:"done_p99_ms"`
	Problems  int64   `json:"problems"`
}

// Scale runs the serve configuration against a fake GitHub that enforces GitHub's
// per-installation limits, labels o.Issues issues in each of o.Installations
// installations (deliveries alternate installations, at o.Rate a second) while o.Workers
// sim workers run every task for about o.TaskTime, and waits until every plan is done
// and its issue says so. It counts the GitHub writes, the busiest installation's writes
// per minute, the rate-limit answers, and how evenly installations got their first task
// claimed.
func Scale(ctx context.Context, s Setup, o ScaleOptions) (ScaleResult, error) {
	res := ScaleResult{Installations: o.Installations, Issues: o.Installations * o.Issues, Workers: o.Workers, WritesByKind: map[string]int{},
		GitHubLatencyMs: ms(o.GitHubLatency)}
	e, err := open(ctx, s, true)
	if err != nil {
		return res, err
	}
	defer e.close(ctx)
	limits := fakegithub.GitHubLimits()
	e.github.SetLimits(limits)
	e.github.SetLatency(o.GitHubLatency)
	res.WriteLimit = limits.SecondaryPerMinute
	insts := make([]int64, o.Installations)
	for i := range insts {
		insts[i] = int64(100_001 + i)
	}
	l := e.newLoad(insts, res.Issues, o.Tasks)
	ws, err := e.registerWorkers(ctx, o.Workers, nil)
	if err != nil {
		return res, err
	}
	s.progressf("scale: %d installations × %d issues of %d tasks, %d sim workers holding a task ~%v, GitHub's limits on",
		o.Installations, o.Issues, o.Tasks, o.Workers, o.TaskTime)
	runCtx, stop := context.WithCancel(ctx)
	done := l.work(runCtx, ws, o.TaskTime)
	begin := time.Now()
	if err = e.waitQuiet(ctx, 500*time.Millisecond, 10*time.Second); err == nil {
		err = l.deliver(ctx, o.Rate)
	}
	if err == nil {
		s.progressf("scale: %d issues labelled in %.1fs; waiting for every plan and issue to be done", res.Issues, time.Since(begin).Seconds())
		err = l.waitDone(ctx, o.Timeout, &res, done)
	}
	res.Seconds = time.Since(begin).Seconds()
	stop()
	if werr := <-done; err == nil {
		err = werr
	}
	e.plans = append(e.plans, l.planIDs(context.WithoutCancel(ctx))...) // also when interrupted
	if err != nil {
		return res, err
	}
	l.mu.Lock()
	res.Transitions = l.transitions
	l.mu.Unlock()
	for _, r := range e.github.Requests() {
		switch {
		case r.Limited || r.Status == http.StatusTooManyRequests:
			res.RateLimited++
		case r.Installation != 0 && r.Write() && r.Status < 300:
			res.Writes++
			res.WritesByKind[writeKind(r.Method, r.Path)]++
		}
	}
	if res.Transitions > 0 {
		res.WritesPerTransition = float64(res.Writes) / float64(res.Transitions)
	}
	for _, n := range e.github.WritesPerMinute() {
		res.MaxWritesPerMinute = max(res.MaxWritesPerMinute, n)
	}
	l.fairness(&res)
	eyes, err := l.eyes()
	if err != nil {
		return res, err
	}
	res.EyesP50Ms, res.EyesP99Ms = ms(percentile(eyes, 0.5)), ms(percentile(eyes, 0.99))
	lags, err := l.doneLags(ctx)
	if err != nil {
		return res, err
	}
	res.DoneP50Ms, res.DoneP99Ms = ms(percentile(lags, 0.5)), ms(percentile(lags, 0.99))
	res.Problems = e.problems.Load()
	return res, nil
}

// writeKind names the kind of a content write to GitHub (ScaleResult.WritesByKind).
func writeKind(method, path string) string {
	switch {
	case strings.HasSuffix(path, "/reactions"):
		return "reactions"
	case strings.Contains(path, "/labels"):
		return "labels"
	case method == http.MethodPost && strings.HasSuffix(path, "/comments"):
		return "comments"
	case method == http.MethodPatch && strings.Contains(path, "/comments/"):
		return "comment edits"
	}
	return "other"
}

// waitDone waits until every issue's plan is DONE and the issue carries whilly-done, at
// most limit, and counts what is done. It gives up when the sim workers stop (failed
// gets their first error, which it hands back for the caller to read again).
func (l *load) waitDone(ctx context.Context, limit time.Duration, res *ScaleResult, failed chan error) error {
	refs := make([]string, len(l.issues))
	for i, b := range l.issues {
		refs[i] = fmt.Sprintf("%s#%d", b.repo, b.number)
	}
	deadline := time.Now().Add(limit)
	for {
		// Once a second, and as cheap as can be: the control plane under measure shares
		// the database. The tasks are counted once, at the end.
		err := l.e.pool.QueryRow(ctx, `SELECT count(*) FROM plans WHERE github_issue_ref = ANY($1) AND status = 'DONE'`,
			refs).Scan(&res.IssuesDone)
		if err != nil {
			return fmt.Errorf("count the plans done: %w", err)
		}
		labelled := 0
		if res.IssuesDone == len(refs) {
			for _, b := range l.issues {
				if slices.Contains(l.e.github.IssueLabels(b.repo, b.number), app.LabelDone) {
					labelled++
				}
			}
			if labelled == len(refs) {
				if err := l.e.pool.QueryRow(ctx, `SELECT count(*) FROM tasks t JOIN plans p ON p.id = t.plan_id
					WHERE p.github_issue_ref = ANY($1) AND t.status = 'DONE'`, refs).Scan(&res.TasksDone); err != nil {
					return fmt.Errorf("count the tasks done: %w", err)
				}
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("after %v, %d of %d plans are done and %d issues say so (raise --timeout, or look for errors with WHILLY_LOG_LEVEL=debug)",
				limit, res.IssuesDone, len(refs), labelled)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-failed:
			failed <- err
			return fmt.Errorf("the sim workers stopped before the plans were done: %w", err)
		case <-time.After(time.Second):
		}
	}
}

// doneLags are the times, sorted, from each issue's plan.done to the fake GitHub's
// receiving its whilly-done label: the last label the mirror adds to the issue (a done
// plan gets no other), which waitDone saw there.
func (l *load) doneLags(ctx context.Context) ([]time.Duration, error) {
	labelled := map[string]time.Time{} // issue ref → its last label added
	for _, r := range l.e.github.Requests() {
		if ref, ok := issuePost(r, "labels"); ok {
			labelled[ref] = r.At
		}
	}
	refs := make([]string, len(l.issues))
	for i, b := range l.issues {
		refs[i] = b.repo + "#" + strconv.Itoa(b.number)
	}
	rows, err := l.e.pool.Query(ctx, `SELECT p.github_issue_ref, e.created_at FROM events e JOIN plans p ON p.id = e.plan_id
		WHERE p.github_issue_ref = ANY($1) AND e.type = $2`, refs, queue.EventPlanDone)
	if err != nil {
		return nil, fmt.Errorf("read when the plans were done: %w", err)
	}
	var (
		out []time.Duration
		ref string
		at  time.Time
	)
	_, err = pgx.ForEachRow(rows, []any{&ref, &at}, func() error {
		got, ok := labelled[ref]
		if !ok {
			return fmt.Errorf("issue %s never got a label", ref)
		}
		out = append(out, got.Sub(at))
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read when the plans were done: %w", err)
	}
	slices.Sort(out)
	return out, nil
}

// fairness fills in the spread of label-to-first-claim medians across installations.
func (l *load) fairness(res *ScaleResult) {
	l.mu.Lock()
	byInst := map[int64][]time.Duration{}
	for _, b := range l.issues {
		if !b.claimed.IsZero() {
			byInst[b.inst] = append(byInst[b.inst], b.claimed.Sub(b.labelled))
		}
	}
	l.mu.Unlock()
	if len(byInst) == 0 {
		return
	}
	groups := slices.Collect(maps.Values(byInst))
	var fastest, slowest time.Duration
	res.Spread, fastest, slowest = spread(groups)
	res.FastestMedianMs, res.SlowestMedianMs = ms(fastest), ms(slowest)
	res.ChanceSpread = chanceSpread(groups, chanceDeals)
	all := l.firstClaims()
	res.FirstClaimP50Ms, res.FirstClaimP99Ms = ms(percentile(all, 0.5)), ms(percentile(all, 0.99))
}

// chanceDeals is how many random deals chanceSpread takes the median of.
const chanceDeals = 200

// spread returns the slowest of the groups' medians over the fastest (0 when the fastest
// is 0), and those two medians.
func spread(groups [][]time.Duration) (float64, time.Duration, time.Duration) {
	medians := make([]time.Duration, len(groups))
	for i, g := range groups {
		ds := slices.Clone(g)
		slices.Sort(ds)
		medians[i] = percentile(ds, 0.5)
	}
	fastest, slowest := slices.Min(medians), slices.Max(medians)
	if fastest <= 0 {
		return 0, fastest, slowest
	}
	return float64(slowest) / float64(fastest), fastest, slowest
}

// chanceSpread deals the groups' times at random among the groups, as many times as
// deals (with a fixed seed, so that a run's figure can be computed again), and returns
// the median of the deals' spreads. A group's k-th time goes to some group's k-th place: each
// installation's k-th issue was labelled in the k-th round of deliveries, so a deal keeps
// what the moment of each issue made of its time and moves only who it belonged to.
func chanceSpread(groups [][]time.Duration, deals int) float64 {
	r := rand.New(rand.NewPCG(1, 2))
	dealt := make([][]time.Duration, len(groups))
	for i, g := range groups {
		dealt[i] = slices.Clone(g)
	}
	spreads := make([]float64, deals)
	for d := range spreads {
		for k := 0; ; k++ {
			var at []int // the groups with a k-th time
			for i, g := range dealt {
				if k < len(g) {
					at = append(at, i)
				}
			}
			if len(at) == 0 {
				break
			}
			r.Shuffle(len(at), func(a, b int) { dealt[at[a]][k], dealt[at[b]][k] = dealt[at[b]][k], dealt[at[a]][k] })
		}
		spreads[d], _, _ = spread(dealt)
	}
	slices.Sort(spreads)
	return spreads[deals/2]
}
