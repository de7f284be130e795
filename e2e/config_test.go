package e2e_test

import (
	"bufio"
	"encoding/json"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/whilly-go/whilly/testkit"
)

// A bad configuration stops `whilly serve` before it opens the database or a port: exit
// 2, every problem in one message, no "listening".
func TestServeReportsEveryConfigProblemBeforeListening(t *testing.T) {
	t.Parallel()
	addr := freeAddr(t)
	p := start(t, "serve", bins.whilly, []string{
		"WHILLY_DATABASE_URL=postgres://nobody@127.0.0.1:1/none", // never reached
		"WHILLY_LEASE_TTL=soon",
		"WHILLY_LOG_LEVEL=loud",
		"WHILLY_GITHUB_APP_ID=12",
		"WHILLY_METRICS_TOKEN_FILE=/nonexistent/metrics-token",
	}, "serve", "--listen", addr)
	if code := p.wait(t, 30*time.Second); code != 2 {
		t.Fatalf("exit %d, want 2\n%s", code, p.stderr.String())
	}
	stderr := p.stderr.String()
	for _, want := range []string{
		"the configuration has 5 problems:",
		`WHILLY_LEASE_TTL: "soon" is not a duration`,
		`WHILLY_LOG_LEVEL: "loud" is not one of debug, info, warn, error`,
		"WHILLY_GITHUB_APP_ID is set but WHILLY_GITHUB_PRIVATE_KEY is not",
		"WHILLY_GITHUB_APP_ID is set but WHILLY_GITHUB_WEBHOOK_SECRET is not",
		"WHILLY_METRICS_TOKEN_FILE: cannot read /nonexistent/metrics-token",
	} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}
	if strings.Contains(p.stdout.String(), "listening") || strings.Contains(stderr, "127.0.0.1:1") {
		t.Errorf("serve listened or reached the database:\nstdout: %s\nstderr: %s", p.stdout.String(), stderr)
	}
}

// A problem found only while building the control plane (here the TRIZ analyzer's agent)
// also comes before listening: the test holds the port, so an attempt to listen would
// fail with "address already in use" instead.
func TestServeBuildsEverythingBeforeListening(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	p := start(t, "serve", bins.whilly, []string{
		"WHILLY_DATABASE_URL=" + testkit.DSN(t),
		"WHILLY_TRIZ_ENABLED=1", "WHILLY_TRIZ_AGENT=command", // and no WHILLY_AGENT_CMD
	}, "serve", "--listen", ln.Addr().String())
	if code := p.wait(t, 60*time.Second); code != 2 {
		t.Fatalf("exit %d, want 2\n%s", code, p.stderr.String())
	}
	if stderr := p.stderr.String(); !strings.Contains(stderr, "WHILLY_TRIZ_AGENT") || !strings.Contains(stderr, "WHILLY_AGENT_CMD") ||
		strings.Contains(stderr, "address already in use") || strings.Contains(p.stdout.String(), "listening") {
		t.Errorf("want the analyzer's error before any listening:\nstdout: %s\nstderr: %s", p.stdout.String(), stderr)
	}
}

// WHILLY_LOG_FORMAT=json writes one JSON object a line; River's routine INFO lines
// ("River client started") are DEBUG: absent at info, present at debug.
func TestServeLogLevelAndFormat(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	for _, level := range []string{"info", "debug"} {
		c.env = []string{"WHILLY_LOG_FORMAT=json", "WHILLY_LOG_LEVEL=" + level}
		p := c.serve("serve-"+level, freeAddr(t))
		p.kill(syscall.SIGTERM)
		if code := p.wait(t, 30*time.Second); code != 0 {
			t.Fatalf("%s: exit %d\n%s", level, code, p.stderr.String())
		}
		msgs := map[string]string{} // msg → level
		sc := bufio.NewScanner(strings.NewReader(p.stderr.String()))
		for sc.Scan() {
			var rec struct{ Level, Msg string }
			if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
				t.Fatalf("%s: a log line is not JSON: %q", level, sc.Text())
			}
			msgs[rec.Msg] = rec.Level
		}
		if msgs["listening"] != "INFO" {
			t.Errorf("%s: no INFO \"listening\" line: %v", level, msgs)
		}
		river, ok := msgs["River client started"]
		switch {
		case level == "info" && ok:
			t.Errorf("info: River's routine line is there at %s", river)
		case level == "debug" && river != "DEBUG":
			t.Errorf("debug: River's routine line is %q, want DEBUG: %v", river, msgs)
		}
	}
}
