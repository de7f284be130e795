package cli

import (
	"strconv"
	"strings"
	"time"

	"github.com/whilly-go/whilly/worker"
)

// parseDuration reads Go syntax (45s, 30m) or a plain number of seconds.
func parseDuration(name, s string) (time.Duration, error) {
	d, err := worker.ParseDuration(s)
	if err != nil {
		return 0, envf("%s: %w", name, err)
	}
	return d, nil
}

// envDuration reads a duration variable, or def when unset.
func (a *app) envDuration(name string, def time.Duration) (time.Duration, error) {
	v := a.env(name)
	if v == "" {
		return def, nil
	}
	return parseDuration(name, v)
}

// parseExpiry reads a token lifetime such as 30d, 12h or 45m.
func parseExpiry(s string) (time.Duration, error) {
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.Atoi(days)
		if err != nil || n <= 0 {
			return 0, failf("--expires %q is not a number of days such as 30d", s)
		}
		return time.Duration(n) * 24 * time.Hour, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return 0, failf("--expires %q is not a duration such as 30d or 12h", s)
	}
	return d, nil
}
