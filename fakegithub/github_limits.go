package fakegithub

import (
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"time"
)

// GitHub's documented limits for an App installation: 5,000 requests an hour, and, as a
// secondary limit, about 80 content-creating requests a minute.
const (
	HourlyRequests           = 5000
	SecondaryWritesPerMinute = 80
)

// Limits switches on the rate limits the fake enforces, per installation (requests made
// with an installation token; the App's JWT and the static token are not limited). A
// zero field is off. Every answer carries the X-RateLimit headers either way.
type Limits struct {
	// Hourly is the requests an installation may make in an hour; beyond it the fake
	// answers 403 with X-RateLimit-Remaining: 0 and X-RateLimit-Reset, as GitHub does.
	Hourly int
	// SecondaryPerMinute is the content writes (GitHubRequest.Write) an installation may
	// make in any 60 seconds; beyond it the fake answers 403 with GitHub's
	// secondary-rate-limit message and Retry-After.
	SecondaryPerMinute int
	// SecondaryWindow is the window SecondaryPerMinute counts in, a minute when 0; a test
	// that wants the limit hit and waited out in seconds shortens it.
	SecondaryWindow time.Duration
}

// GitHubLimits are GitHub's own figures.
func GitHubLimits() Limits {
	return Limits{Hourly: HourlyRequests, SecondaryPerMinute: SecondaryWritesPerMinute}
}

// SetLatency makes the fake answer every request (API and git alike) d after it arrives,
// as the time a request to GitHub takes there and back; 0, the default, answers at once.
// A request's record (GitHubRequest.At) is the moment the fake acts on it, after the
// wait.
func (g *GitHub) SetLatency(d time.Duration) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.latency = d
}

// wait waits out the latency before a request is served.
func (g *GitHub) wait() {
	g.mu.Lock()
	d := g.latency
	g.mu.Unlock()
	time.Sleep(d)
}

// SetLimits switches the fake's rate limits (Limits{} turns them off, the default).
func (g *GitHub) SetLimits(l Limits) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.limits = l
}

// hourWindow is an installation's hour of requests, GitHub's primary rate limit.
type hourWindow struct {
	start time.Time
	used  int
}

// The answers GitHub gives, so that go-github reports *github.RateLimitError and
// *github.AbuseRateLimitError (it looks at the status, the headers and the
// documentation_url).
const (
	docsPrimary   = "https://docs.github.com/rest/overview/rate-limits-for-the-rest-api#about-the-primary-rate-limit"
	docsSecondary = "https://docs.github.com/rest/overview/rate-limits-for-the-rest-api#about-secondary-rate-limits"
)

// rateLimit counts the request of installation inst (write: a content write) against its
// hour and, for a write, its last minute, and sets the X-RateLimit headers. When a limit
// that is on is spent it answers the request itself and returns its status and true.
func (g *GitHub) rateLimit(w http.ResponseWriter, inst int64, write bool, now time.Time) (int, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	budget := g.limits.Hourly
	if budget == 0 {
		budget = HourlyRequests
	}
	hour := g.hours[inst]
	if hour.start.IsZero() || now.Sub(hour.start) >= time.Hour {
		hour = hourWindow{start: now}
	}
	h := w.Header()
	h.Set("X-RateLimit-Resource", "core")
	h.Set("X-RateLimit-Limit", strconv.Itoa(budget))
	h.Set("X-RateLimit-Reset", strconv.FormatInt(hour.start.Add(time.Hour).Unix(), 10))
	if inst != 0 && g.limits.Hourly > 0 && hour.used >= budget {
		h.Set("X-RateLimit-Remaining", "0")
		h.Set("X-RateLimit-Used", strconv.Itoa(hour.used))
		return writeJSON(w, http.StatusForbidden, map[string]string{
			"message":           fmt.Sprintf("API rate limit exceeded for installation ID %d.", inst),
			"documentation_url": docsPrimary,
		}), true
	}
	hour.used++
	g.hours[inst] = hour
	h.Set("X-RateLimit-Remaining", strconv.Itoa(max(budget-hour.used, 0)))
	h.Set("X-RateLimit-Used", strconv.Itoa(hour.used))
	if inst == 0 || !write || g.limits.SecondaryPerMinute == 0 {
		return 0, false
	}
	window := g.limits.SecondaryWindow
	if window <= 0 {
		window = time.Minute
	}
	recent := g.writesAt[inst]
	for len(recent) > 0 && now.Sub(recent[0]) >= window {
		recent = recent[1:]
	}
	if len(recent) >= g.limits.SecondaryPerMinute {
		g.writesAt[inst] = recent
		wait := recent[0].Add(window).Sub(now)
		h.Set("Retry-After", strconv.Itoa(int((wait+time.Second-1)/time.Second)))
		return writeJSON(w, http.StatusForbidden, map[string]string{
			"message": "You have exceeded a secondary rate limit. Please wait a few minutes before you try again. " +
				"If you reach out to GitHub Support for help, please include the request ID.",
			"documentation_url": docsSecondary,
		}), true
	}
	g.writesAt[inst] = append(recent, now)
	return 0, false
}

// WritesPerMinute returns, for each installation, the most content writes the fake
// accepted from it in any 60 seconds.
func (g *GitHub) WritesPerMinute() map[int64]int {
	byInst := map[int64][]time.Time{}
	for _, r := range g.Requests() {
		if r.Installation != 0 && r.Write() && !r.Limited && r.Status < 300 {
			byInst[r.Installation] = append(byInst[r.Installation], r.At)
		}
	}
	out := map[int64]int{}
	for inst, at := range byInst {
		// Requests are recorded when answered, so sort before sliding the window.
		slices.SortFunc(at, time.Time.Compare)
		lo := 0
		for hi := range at {
			for at[hi].Sub(at[lo]) >= time.Minute {
				lo++
			}
			out[inst] = max(out[inst], hi-lo+1)
		}
	}
	return out
}
