package app_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/whilly-go/whilly/app"
	"github.com/whilly-go/whilly/testkit"
)

// The factory's clients count their requests and keep GitHub's rate limit, by
// installation id, through the real go-github and ghinstallation transports.
func TestMetricsCountRequestsAndRateLimitByInstallation(t *testing.T) {
	t.Parallel()
	gh := testkit.NewGitHub(t)
	gh.Install(7, repo)
	gh.AddIssue(repo, 12, "Harden login", "body", "octo")
	m := app.NewMetrics()
	f, err := app.NewFactory(app.Config{AppID: gh.AppID, PrivateKey: gh.KeyPEM, APIURL: gh.URL(), Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	c, err := f.Installation(ctx, 7)
	if err != nil {
		t.Fatal(err)
	}
	ref := app.IssueRef{Repo: app.Repo{Owner: "octo", Name: "shop"}, Number: 12}
	for range 3 {
		if _, err := c.Issue(ctx, ref); err != nil {
			t.Fatal(err)
		}
	}
	gh.Fail(testkit.Fault{Method: http.MethodGet, Path: "/repos/octo/shop/issues/12", Status: http.StatusForbidden,
		Header: map[string]string{"X-RateLimit-Remaining": "0", "X-RateLimit-Resource": "core"}, Times: 1})
	if _, err := c.Issue(ctx, ref); err == nil {
		t.Fatal("the injected 403 did not fail the call")
	}
	expose(t, m, `whilly_github_rate_limit_remaining{installation="7",resource="core"} 0`,
		`whilly_github_requests_total{code="200",installation="7"} 3`,
		`whilly_github_requests_total{code="403",installation="7"} 1`)
}

// expose fails the test unless m's exposition holds every line of want.
func expose(t *testing.T, m prometheus.Collector, want ...string) string {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(m)
	rec := httptest.NewRecorder()
	promhttp.HandlerFor(reg, promhttp.HandlerOpts{}).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	body := rec.Body.String()
	for _, line := range want {
		if !strings.Contains(body, line+"\n") {
			t.Errorf("metrics lack %q:\n%s", line, body)
		}
	}
	return body
}

func TestMetricsRateLimitLeftDecreases(t *testing.T) {
	t.Parallel()
	gh := testkit.NewGitHub(t)
	gh.Install(7, repo)
	gh.AddIssue(repo, 12, "Harden login", "body", "octo")
	m := app.NewMetrics()
	f, err := app.NewFactory(app.Config{AppID: gh.AppID, PrivateKey: gh.KeyPEM, APIURL: gh.URL(), Token: gh.Token, Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	c, err := f.Installation(ctx, 0) // the plain token
	if err != nil {
		t.Fatal(err)
	}
	ref := app.IssueRef{Repo: app.Repo{Owner: "octo", Name: "shop"}, Number: 12}
	for range 2 {
		if _, err := c.Issue(ctx, ref); err != nil {
			t.Fatal(err)
		}
	}
	expose(t, m, `whilly_github_requests_total{code="200",installation="token"} 2`,
		`whilly_github_rate_limit_remaining{installation="token",resource="core"} 4998`)
}
