package worker_test

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/whilly-go/whilly/cmd/whilly-worker/workercli"
)

// TestTokenFlagWarns: a token on the command line is readable by every user of the
// machine (ps); whilly-worker says so and names the safer ways. The environment does not warn.
func TestTokenFlagWarns(t *testing.T) {
	t.Parallel()
	env := map[string]string{"WHILLY_SANDBOX": "none", "WHILLY_AGENT": "sim"}
	getenv := func(k string) string { return env[k] }
	for _, c := range []struct {
		args []string
		warn bool
	}{
		{[]string{"--connect", "http://control.invalid", "--token", "whilly_w_abc"}, true},
		{[]string{"--connect", "http://control.invalid"}, false},
	} {
		var out, errb bytes.Buffer
		workercli.Main(context.Background(), c.args, &out, &errb, getenv)
		got := strings.Contains(errb.String(), "warning: --token is visible to every user")
		if got != c.warn || (c.warn && !strings.Contains(errb.String(), "WHILLY_WORKER_TOKEN or use --token-file")) {
			t.Errorf("%v: stderr %q, want the warning: %v", c.args, errb.String(), c.warn)
		}
	}
}
