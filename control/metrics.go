package control

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/whilly-go/whilly/control/client"
	"github.com/whilly-go/whilly/internal/version"
	"github.com/whilly-go/whilly/plan"
	"github.com/whilly-go/whilly/queue"
)

// metrics are the server's Prometheus metrics, in a registry of its own (never the
// global one), so several servers can live in one process (tests).
//
// Labels never carry a plan id or a repository name (they may be private) unless
// WHILLY_METRICS_TOKEN guards /metrics: then the per-plan series (ready tasks and budget
// left by plan) are exported too. Installation ids are numbers GitHub assigns, not names.
type metrics struct {
	reg         *prometheus.Registry
	claims      prometheus.Counter
	completions prometheus.Counter
	failures    *prometheus.CounterVec
	claimWait   *prometheus.HistogramVec
	requests    *prometheus.CounterVec
	duration    *prometheus.HistogramVec
	attempts    *prometheus.CounterVec   // by outcome
	attemptDur  *prometheus.HistogramVec // by outcome, as the worker measured it
	spend       *prometheus.CounterVec   // USD by installation
	// claimsWaiting is the long-polling claims asleep right now (not querying).
	claimsWaiting prometheus.Gauge
	// claimQueries counts the claims' attempts on the database (waitForClaim).
	claimQueries prometheus.Counter

	perPlan bool // plan ids may be labels (the metrics token is set)
	// installations caches plan → installation label for spend; plans never change it.
	installations sync.Map

	readyDesc, readyTotalDesc, onlineDesc, budgetDesc, listenerDesc, tasksDesc, jobsDesc *prometheus.Desc
}

// Outcomes of whilly_attempts_total: COMPLETE, a FAIL that retries, a FAIL that ends the
// task, and a RELEASE (the worker handed the task back without an outcome).
const (
	outcomeDone     = "done"
	outcomeRetry    = "retry"
	outcomeFailed   = "failed"
	outcomeReleased = "released"
)

// maxAttemptSeconds bounds a reported attempt duration: the worker's figure is trusted
// for a metric, not for an unbounded one.
const maxAttemptSeconds = 7 * 24 * 3600

func newMetrics(s *Server) *metrics {
	m := &metrics{
		reg:     prometheus.NewRegistry(),
		perPlan: s.cfg.MetricsToken != "",
		attempts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "whilly_attempts_total", Help: "Attempts that ended, by outcome (done, retry, failed, released).",
		}, []string{"outcome"}),
		attemptDur: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "whilly_attempt_duration_seconds",
			Help:    "How long attempts ran on their worker (agent, verification and publishing), by outcome.",
			Buckets: []float64{1, 5, 15, 30, 60, 120, 300, 600, 1200, 1800, 3600, 7200},
		}, []string{"outcome"}),
		spend: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "whilly_spend_usd_total",
			Help: "USD charged by attempts, by GitHub App installation id (none: plans not from GitHub).",
		}, []string{"installation"}),
		claims: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "whilly_claims_total", Help: "Tasks handed out to workers.",
		}),
		completions: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "whilly_completions_total", Help: "Tasks completed by workers.",
		}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "whilly_failures_total", Help: "Failed attempts reported by workers, by reason class.",
		}, []string{"reason_class"}),
		claimWait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "whilly_claim_wait_seconds",
			Help:    "How long a claim request waited, by outcome (claimed, empty).",
			Buckets: []float64{0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60},
		}, []string{"outcome"}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "whilly_http_requests_total", Help: "HTTP requests by route pattern, method and status code.",
		}, []string{"route", "method", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "whilly_http_request_duration_seconds", Help: "HTTP request duration by route pattern and method.",
			Buckets: prometheus.DefBuckets,
		}, []string{"route", "method"}),
		readyDesc: prometheus.NewDesc("whilly_ready_tasks",
			"Claimable tasks per active plan (worker labels aside).", []string{"plan"}, nil),
		readyTotalDesc: prometheus.NewDesc("whilly_ready_tasks",
			"Claimable tasks in active plans (worker labels aside); by plan when WHILLY_METRICS_TOKEN is set.", nil, nil),
		tasksDesc: prometheus.NewDesc("whilly_tasks",
			"Tasks by state, over every plan.", []string{"state"}, nil),
		jobsDesc: prometheus.NewDesc("whilly_river_jobs",
			"Background (River) jobs waiting or running, by queue and state.", []string{"queue", "state"}, nil),
		onlineDesc: prometheus.NewDesc("whilly_workers_online",
			"Workers whose status is online.", nil, nil),
		budgetDesc: prometheus.NewDesc("whilly_budget_remaining_usd",
			"Budget left per active or paused plan with a cap.", []string{"plan"}, nil),
		listenerDesc: prometheus.NewDesc("whilly_listener_up",
			"1 when the LISTEN connection is up.", nil, nil),
	}
	m.claimsWaiting = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "whilly_claims_waiting", Help: "Long-polling claims asleep on this control plane, waiting for a task.",
	})
	m.claimQueries = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "whilly_claim_queries_total",
		Help: "Claims' attempts on the database: one when a claim request starts, one each time a long-polling claim wakes.",
	})
	m.reg.MustRegister(m.claimsWaiting, m.claimQueries)
	m.reg.MustRegister(m.claims, m.completions, m.failures, m.claimWait, m.requests, m.duration, m.attempts, m.attemptDur, m.spend,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		buildInfo(version.Get()))
	for _, c := range reasonClasses() {
		m.failures.WithLabelValues(c) // export zeros, so rates work from the first failure
	}
	for _, o := range []string{outcomeDone, outcomeRetry, outcomeFailed, outcomeReleased} {
		m.attempts.WithLabelValues(o)
	}
	return m
}

// attemptEnded counts an attempt of task t (its state after the transition) that ended
// with outcome, charged cost, and ran for durationMS on its worker (0: not reported).
func (s *Server) attemptEnded(ctx context.Context, t queue.TaskInfo, outcome string, cost plan.USD, durationMS int64) {
	m := s.metrics
	m.attempts.WithLabelValues(outcome).Inc()
	if durationMS > 0 {
		m.attemptDur.WithLabelValues(outcome).Observe(min(float64(durationMS)/1000, maxAttemptSeconds))
	}
	s.countSpend(ctx, t.PlanID, cost)
}

// countSpend adds cost, charged to planID by an attempt, to whilly_spend_usd_total.
func (s *Server) countSpend(ctx context.Context, planID string, cost plan.USD) {
	if cost > 0 {
		s.metrics.spend.WithLabelValues(s.installationLabel(ctx, planID)).Add(cost.Float64())
	}
}

// installationLabel is the installation id of planID as a label, "none" for a plan not
// from GitHub, and "unknown" when the store cannot say (it is asked again next time).
func (s *Server) installationLabel(ctx context.Context, planID string) string {
	if v, ok := s.metrics.installations.Load(planID); ok {
		return v.(string)
	}
	inst, err := s.store.PlanInstallation(ctx, planID)
	if err != nil {
		s.log.WarnContext(ctx, "metrics: read the plan's installation", "plan_id", planID, "error", err)
		return "unknown"
	}
	label := "none"
	if inst != 0 {
		label = strconv.FormatInt(inst, 10)
	}
	s.metrics.installations.Store(planID, label)
	return label
}

// buildInfo is the constant whilly_build_info gauge: 1, labelled with the build, so
// dashboards can show which version each replica runs and alert on a mixed fleet.
func buildInfo(in version.Info) prometheus.Collector {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "whilly_build_info",
		Help: "1, labelled with the version, commit, build date and Go version of this control plane.",
		ConstLabels: prometheus.Labels{
			"version": in.Version, "commit": in.Commit, "date": in.Date, "goversion": in.GoVersion,
		},
	})
	g.Set(1)
	return g
}

// reasonClasses lists the label values of whilly_failures_total.
func reasonClasses() []string {
	return append(slices.Clone(failureClasses), "other")
}

// failureClasses are the failure reasons whilly's workers and agents report (see the
// Reason constants of package agent), plus a few historical ones; anything else is
// "other", so the label's cardinality stays bounded.
var failureClasses = []string{"timeout", "cancelled", "exit_code", "no_completion_marker", "agent_error",
	"malformed_output", "budget_exceeded", "max_turns", "verify_failed", "prompt_injection_blocked", "resource_limit",
	"agent_not_found", "lease_lost", "lease_expired", "diff_rejected", "workspace", "internal"}

// gauges is a scrape's worth of store-derived metrics, computed with the request's context.
type gauges []prometheus.Metric

func (g gauges) Describe(chan<- *prometheus.Desc) {} // unchecked: the set of plans varies

func (g gauges) Collect(ch chan<- prometheus.Metric) {
	for _, m := range g {
		ch <- m
	}
}

// storeGauges queries the store for the gauges of one scrape.
func (s *Server) storeGauges(ctx context.Context) (gauges, error) {
	m := s.metrics
	var out gauges
	ready, err := s.store.ReadyCounts(ctx)
	if err != nil {
		return nil, err
	}
	total := 0
	for planID, n := range ready {
		total += n
		if m.perPlan {
			out = append(out, prometheus.MustNewConstMetric(m.readyDesc, prometheus.GaugeValue, float64(n), planID))
		}
	}
	if !m.perPlan {
		out = append(out, prometheus.MustNewConstMetric(m.readyTotalDesc, prometheus.GaugeValue, float64(total)))
	}
	counts, err := s.store.TaskStatusCounts(ctx)
	if err != nil {
		return nil, err
	}
	for _, st := range plan.Statuses() {
		out = append(out, prometheus.MustNewConstMetric(m.tasksDesc, prometheus.GaugeValue, float64(counts[st]), string(st)))
	}
	jobs, err := s.store.JobCounts(ctx)
	if err != nil {
		return nil, err
	}
	for _, j := range jobs {
		out = append(out, prometheus.MustNewConstMetric(m.jobsDesc, prometheus.GaugeValue, float64(j.N), j.Queue, j.State))
	}
	workers, err := s.store.ListWorkers(ctx)
	if err != nil {
		return nil, err
	}
	online := 0
	for _, w := range workers {
		if w.Status == "online" {
			online++
		}
	}
	out = append(out, prometheus.MustNewConstMetric(m.onlineDesc, prometheus.GaugeValue, float64(online)))
	for _, st := range []plan.PlanStatus{plan.PlanActive, plan.PlanPaused} {
		if !m.perPlan {
			break
		}
		plans, err := s.store.AllPlans(ctx, queue.PlanPage{Limit: 500, Status: st})
		if err != nil {
			return nil, err
		}
		for _, p := range plans {
			if rem := plan.Remaining(p.Budget, p.Spent); rem != nil {
				out = append(out, prometheus.MustNewConstMetric(m.budgetDesc, prometheus.GaugeValue, rem.Float64(), p.ID))
			}
		}
	}
	up := 0.0
	if s.listener.Ready() {
		up = 1
	}
	out = append(out, prometheus.MustNewConstMetric(m.listenerDesc, prometheus.GaugeValue, up))
	return out, nil
}

func (s *Server) serveMetrics(w http.ResponseWriter, r *http.Request) {
	if s.cfg.MetricsToken != "" {
		tok, ok := bearer(r)
		if !ok || !equalSecret(tok, s.cfg.MetricsToken) {
			s.writeError(w, r, errorf(http.StatusUnauthorized, codeUnauthorized, "The metrics token is missing or wrong."))
			return
		}
	}
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	g, err := s.storeGauges(ctx)
	if err != nil {
		s.writeError(w, r, fmt.Errorf("collect store metrics: %w", err))
		return
	}
	scrape := prometheus.NewRegistry()
	if err := scrape.Register(g); err != nil {
		s.writeError(w, r, fmt.Errorf("register store metrics: %w", err))
		return
	}
	promhttp.HandlerFor(prometheus.Gatherers{s.metrics.reg, scrape}, promhttp.HandlerOpts{}).ServeHTTP(w, r)
}

func (s *Server) healthz(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, client.Health{Status: "ok"})
}

func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	db := s.store.Pool().Ping(ctx) == nil
	ln := s.listener.Ready()
	h := client.Health{Status: "ok", Database: &db, Listener: &ln}
	status := http.StatusOK
	if !db || !ln {
		h.Status, status = "unavailable", http.StatusServiceUnavailable
	}
	writeJSON(w, status, h)
}

// statusRecorder remembers the status a handler wrote. Unwrap lets
// http.ResponseController reach Flush and SetWriteDeadline of the real writer.
type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (s *statusRecorder) WriteHeader(code int) {
	if s.status == 0 {
		s.status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusRecorder) Write(b []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}

func (s *statusRecorder) Unwrap() http.ResponseWriter { return s.ResponseWriter }

type statusKey struct{}

// setStatus records a status that was never written (the caller left).
func setStatus(r *http.Request, code int) {
	if rec, ok := r.Context().Value(statusKey{}).(*statusRecorder); ok && rec.status == 0 {
		rec.status = code
	}
}

func routePattern(r *http.Request) string {
	if rctx := chi.RouteContext(r.Context()); rctx != nil {
		if p := rctx.RoutePattern(); p != "" {
			return p
		}
	}
	return "unmatched"
}

// instrument counts requests and their durations by route pattern (never the raw path,
// which would make the label set unbounded).
func (s *Server) instrument(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		begin := time.Now()
		rec := &statusRecorder{ResponseWriter: w}
		r = r.WithContext(context.WithValue(r.Context(), statusKey{}, rec))
		next.ServeHTTP(rec, r)
		code := rec.status
		if code == 0 {
			code = http.StatusOK
		}
		route, method := routePattern(r), r.Method
		if code < 300 && strings.HasPrefix(route, "/v1/") {
			s.dbRecovered(r.Context()) // the API's answers come from the database
		}
		switch method {
		case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
			http.MethodDelete, http.MethodOptions:
		default:
			method = "other" // any token may be sent as a method: keep the label set bounded
		}
		s.metrics.requests.WithLabelValues(route, method, strconv.Itoa(code)).Inc()
		s.metrics.duration.WithLabelValues(route, method).Observe(time.Since(begin).Seconds())
	})
}

// recoverer turns a handler panic into a logged 500.
func (s *Server) recoverer(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if v := recover(); v != nil {
				// Re-panic so net/http aborts the response without logging, as it does
				// when no recoverer is installed.
				if err, ok := v.(error); ok && errors.Is(err, http.ErrAbortHandler) {
					panic(v)
				}
				s.writeError(w, r, fmt.Errorf("handler panic: %v", v))
			}
		}()
		next.ServeHTTP(w, r)
	})
}
