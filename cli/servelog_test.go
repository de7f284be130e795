package cli

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/whilly-go/whilly/internal/testkit"
)

// With WHILLY_LOG_FORMAT=json every line serve writes, on stdout and stderr alike (a
// container's log holds both), is a JSON object; the listening line carries the URL.
func TestServeJSONLogsOnly(t *testing.T) {
	t.Parallel()
	env := map[string]string{"WHILLY_DATA_DIR": t.TempDir(), "WHILLY_DATABASE_URL": testkit.DSN(t), "WHILLY_LOG_FORMAT": "json"}
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
	var listening bool
	for _, line := range out.lines() {
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
		t.Errorf("no listening line with the URL:\n%s", out)
	}
}
