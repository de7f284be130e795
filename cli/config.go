package cli

import (
	"strconv"
	"strings"
	"time"
)

// parseDuration reads Go syntax (45s, 30m) or a plain number of seconds.
func parseDuration(name, s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if n, err := strconv.ParseFloat(s, 64); err == nil {
		if n <= 0 {
			return 0, envf("%s must be positive, got %q", name, s)
		}
		return time.Duration(n * float64(time.Second)), nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return 0, envf("%s must be a duration such as 45s or 30m, or a number of seconds, got %q", name, s)
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

// durationFlag parses a duration flag value such as 30d, 12h or 45m.
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
