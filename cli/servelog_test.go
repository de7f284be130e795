package cli

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/whilly-go/whilly/testkit"
)

// serveLog runs serve with env and JSON logs on one stream (as a container's log holds
// stdout and stderr) until it says it listens, stops it and returns what it wrote.
func serveLog(t *testing.T, env map[string]string) []string {
	t.Helper()
	env["WHILLY_DATA_DIR"], env["WHILLY_DATABASE_URL"], env["WHILLY_LOG_FORMAT"] = t.TempDir(), testkit.DSN(t), "json"
	out := &syncBuffer{}
	ctx, stop := context.WithCancel(context.Background())
	served := make(chan int, 1)
	go func() {
		served <- Execute(ctx, []string{"serve", "--listen", "127.0.0.1:0"},
			IO{In: strings.NewReader(""), Out: out, Err: out, Getenv: func(k string) string { return env[k] }})
	}()
	testkit.Eventually(t, 60*time.Second, "serve to log that it listens", func() bool { return strings.Contains(out.String(), `"msg":"listening"`) })
	stop()
	select {
	case code := <-served:
		if code != ExitOK {
			t.Errorf("serve exited %d:\n%s", code, out)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not stop")
	}
	return out.lines()
}

// With WHILLY_LOG_FORMAT=json every line serve writes, on stdout and stderr alike, is a
// JSON object; the listening line carries the URL.
func TestServeJSONLogsOnly(t *testing.T) {
	t.Parallel()
	var listening bool
	lines := serveLog(t, map[string]string{})
	for _, line := range lines {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Errorf("not a JSON line: %q", line)
			continue
		}
		if rec["msg"] == "listening" {
			url, _ := rec["url"].(string)
			listening = strings.HasPrefix(url, "http://127.0.0.1:")
		}
	}
	if !listening {
		t.Errorf("no listening line with the URL:\n%s", strings.Join(lines, "\n"))
	}
}

// Pull mode without a GitHub App pulls nothing: serve says so, with what to set.
func TestServePullModeWithoutAnApp(t *testing.T) {
	t.Parallel()
	lines := serveLog(t, map[string]string{"WHILLY_GITHUB_DELIVERIES": "pull"})
	const want = `"level":"WARN","msg":"WHILLY_GITHUB_DELIVERIES=pull, but there is no GitHub App to pull deliveries with: run whilly app create, or set WHILLY_GITHUB_APP_ID and WHILLY_GITHUB_PRIVATE_KEY"`
	if !strings.Contains(strings.Join(lines, "\n"), want) {
		t.Errorf("serve's log lacks %s:\n%s", want, strings.Join(lines, "\n"))
	}
}
