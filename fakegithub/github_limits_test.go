package fakegithub_test

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/bradleyfalzon/ghinstallation/v2"
	"github.com/google/go-github/v62/github"

	"github.com/whilly-go/whilly/fakegithub"
)

// newFake starts a fake with installations 1 and 2 (repositories o/one and o/two, an
// issue #1 in each) and returns it with a go-github client per installation.
func newFake(t *testing.T) (*fakegithub.GitHub, map[int64]*github.Client) {
	t.Helper()
	g, err := fakegithub.New(func(format string, args ...any) { t.Errorf("fake GitHub: "+format, args...) })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(g.Close)
	clients := map[int64]*github.Client{}
	for inst, repo := range map[int64]string{1: "o/one", 2: "o/two"} {
		g.Install(inst, repo)
		g.AddIssue(repo, 1, "An issue", "", "octocat")
		clients[inst] = installationClient(t, g, inst)
	}
	return g, clients
}

// installationClient is a go-github client of installation inst, on the real
// ghinstallation token exchange.
func installationClient(t *testing.T, g *fakegithub.GitHub, inst int64) *github.Client {
	t.Helper()
	base, err := url.Parse(g.URL())
	if err != nil {
		t.Fatal(err)
	}
	tr, err := ghinstallation.New(http.DefaultTransport, g.AppID, inst, g.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	tr.BaseURL = g.Server.URL
	c := github.NewClient(&http.Client{Transport: tr})
	c.BaseURL = base
	return c
}

func addLabel(ctx context.Context, c *github.Client, repo string) error {
	_, _, err := c.Issues.AddLabelsToIssue(ctx, "o", repo, 1, []string{"x"})
	return err
}

// Past SecondaryPerMinute writes in a minute an installation gets GitHub's secondary
// rate-limit answer (403, the message, Retry-After), which go-github reports as an
// AbuseRateLimitError; its reads and the other installation's writes go on.
func TestSecondaryLimitAnswersWithRetryAfter(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	g, c := newFake(t)
	g.SetLimits(fakegithub.Limits{SecondaryPerMinute: 3})
	for i := range 3 {
		if err := addLabel(ctx, c[1], "one"); err != nil {
			t.Fatalf("write %d: %v", i+1, err)
		}
	}
	err := addLabel(ctx, c[1], "one")
	var abuse *github.AbuseRateLimitError
	if !errors.As(err, &abuse) {
		t.Fatalf("write 4 = %v (%T); want GitHub's secondary rate limit", err, err)
	}
	if abuse.RetryAfter == nil || *abuse.RetryAfter <= 0 || *abuse.RetryAfter > time.Minute {
		t.Fatalf("Retry-After = %v; want up to a minute", abuse.RetryAfter)
	}
	// A fresh client: go-github holds back every request until Retry-After has passed.
	if _, _, err := installationClient(t, g, 1).Issues.Get(ctx, "o", "one", 1); err != nil {
		t.Fatalf("a read under the secondary limit: %v", err)
	}
	if err := addLabel(ctx, c[2], "two"); err != nil {
		t.Fatalf("the other installation's write: %v", err)
	}
	limited := 0
	for _, r := range g.Requests() {
		if r.Limited {
			limited++
			if r.Installation != 1 || r.Status != http.StatusForbidden || !r.Write() {
				t.Errorf("refused %+v; want installation 1's fourth write, 403", r)
			}
		}
	}
	if limited != 1 {
		t.Errorf("%d requests refused, want 1", limited)
	}
	if got := g.WritesPerMinute(); got[1] != 3 || got[2] != 1 {
		t.Errorf("WritesPerMinute = %v, want 1:3 2:1", got)
	}
}

// Past Hourly requests an installation gets GitHub's primary rate-limit answer (403,
// X-RateLimit-Remaining 0, X-RateLimit-Reset within the hour), which go-github reports as
// a RateLimitError; the other installation has its own budget.
func TestHourlyLimitAnswersWithReset(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	g, c := newFake(t)
	g.SetLimits(fakegithub.Limits{Hourly: 4})
	for i := range 4 {
		_, resp, err := c[1].Issues.Get(ctx, "o", "one", 1)
		if err != nil {
			t.Fatalf("request %d: %v", i+1, err)
		}
		if want := 3 - i; resp.Rate.Remaining != want || resp.Rate.Limit != 4 {
			t.Fatalf("request %d: remaining %d of %d, want %d of 4", i+1, resp.Rate.Remaining, resp.Rate.Limit, want)
		}
	}
	before := time.Now()
	_, _, err := c[1].Issues.Get(ctx, "o", "one", 1)
	var rl *github.RateLimitError
	if !errors.As(err, &rl) {
		t.Fatalf("request 5 = %v (%T); want GitHub's rate limit", err, err)
	}
	if reset := rl.Rate.Reset.Time; rl.Rate.Remaining != 0 || reset.Before(before.Add(-time.Second)) || reset.After(before.Add(time.Hour+time.Second)) {
		t.Fatalf("rate = %+v; want 0 remaining and a reset within the hour", rl.Rate)
	}
	if _, _, err := c[2].Issues.Get(ctx, "o", "two", 1); err != nil {
		t.Fatalf("the other installation: %v", err)
	}
	// The App's own requests (a new token for installation 1) have a budget of their own.
	if _, _, err := installationClient(t, g, 1).Issues.Get(ctx, "o", "one", 1); !errors.As(err, &rl) {
		t.Fatalf("a fresh client of installation 1 = %v; want its hourly limit", err)
	}
	minted := 0
	for _, r := range g.Requests() {
		if strings.HasSuffix(r.Path, "/access_tokens") && r.Status == http.StatusCreated {
			minted++
		}
	}
	if minted != 3 {
		t.Errorf("%d installation tokens minted, want 3 (the App's requests are not limited)", minted)
	}
	// A fresh client: go-github remembers the reset and would not even ask.
	g.SetLimits(fakegithub.Limits{})
	if _, _, err := installationClient(t, g, 1).Issues.Get(ctx, "o", "one", 1); err != nil {
		t.Fatalf("with the limits off: %v", err)
	}
}

// With a latency the fake answers each request that long after it arrives: the token
// exchange and the API call alike.
func TestLatencyDelaysEveryAnswer(t *testing.T) {
	t.Parallel()
	g, clients := newFake(t)
	const latency = 150 * time.Millisecond
	g.SetLatency(latency)
	begin := time.Now()
	if err := addLabel(context.Background(), clients[1], "one"); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(begin); took < 2*latency {
		t.Errorf("a token exchange and a request took %v, want at least twice the latency %v", took, latency)
	}
}
