package cli

import (
	"strconv"
	"strings"
	"time"
)

// envErr makes a configuration error (internal/config) exit 2.
func envErr(err error) error {
	if err == nil {
		return nil
	}
	return &exitError{code: ExitEnv, err: err}
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
