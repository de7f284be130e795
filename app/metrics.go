package app

import (
	"net/http"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics counts whilly's GitHub API requests and keeps the rate limit GitHub reports,
// by installation id ("app" for the App's own JWT calls, "token" for WHILLY_GITHUB_TOKEN).
// It is a prometheus.Collector: register it where /metrics gathers.
type Metrics struct {
	requests  *prometheus.CounterVec
	remaining *prometheus.GaugeVec
}

// NewMetrics returns the collectors, unregistered.
func NewMetrics() *Metrics {
	return &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "whilly_github_requests_total",
			Help: "GitHub API requests by installation id and status code (error: no answer).",
		}, []string{"installation", "code"}),
		remaining: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "whilly_github_rate_limit_remaining",
			Help: "Requests left in the current rate-limit window, as GitHub last reported it, by installation id and resource.",
		}, []string{"installation", "resource"}),
	}
}

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	m.requests.Describe(ch)
	m.remaining.Describe(ch)
}

// Collect implements prometheus.Collector.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	m.requests.Collect(ch)
	m.remaining.Collect(ch)
}

// transport counts the requests that go through next as installation's.
func (m *Metrics) transport(next http.RoundTripper, installation string) http.RoundTripper {
	if m == nil {
		return next
	}
	return &countingTransport{next: next, m: m, installation: installation}
}

type countingTransport struct {
	next         http.RoundTripper
	m            *Metrics
	installation string
}

func (t *countingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.next.RoundTrip(req)
	if err != nil {
		t.m.requests.WithLabelValues(t.installation, "error").Inc()
		return resp, err
	}
	t.m.requests.WithLabelValues(t.installation, strconv.Itoa(resp.StatusCode)).Inc()
	if left, err := strconv.Atoi(resp.Header.Get("X-RateLimit-Remaining")); err == nil {
		resource := resp.Header.Get("X-RateLimit-Resource")
		switch resource {
		case "core", "graphql", "search", "code_search", "integration_manifest", "actions_runner_registration":
		case "":
			resource = "core"
		default:
			resource = "other" // a header value is input: keep the label set bounded
		}
		t.m.remaining.WithLabelValues(t.installation, resource).Set(float64(left))
	}
	return resp, nil
}

// installationLabel is the metrics label of installation id.
func installationLabel(id int64) string {
	if id == 0 {
		return "token"
	}
	return strconv.FormatInt(id, 10)
}
