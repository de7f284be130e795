package worker

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/whilly-go/whilly/agent"
)

// What the next attempt is told of a failure is the error and the last lines of what the
// agent printed, not the CLI's whole JSON: its usage counters, session and run ids.
func TestFailOutputKeepsTheErrorAndTheLastLines(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ file, detail string }{
		{"claude-2.1.328-json-not-logged-in.json", "Not logged in · Please run /login"},
		{"claude-2.1.328-stream-json-not-logged-in.jsonl", "Not logged in · Please run /login"},
		{"codex-0.169.0-exec-json-offline.jsonl", "Reconnecting... 5/5 (stream disconnected before completion)"},
	} {
		raw, err := os.ReadFile(filepath.Join("..", "testdata", "fixtures", "agent-output", c.file))
		if err != nil {
			t.Fatal(err)
		}
		printed := strings.TrimSpace(string(raw)) + "\n--- stderr ---\nwarning: the config file is old\nError: the agent gave up"
		out := failOutput(agent.Result{Detail: c.detail, Excerpt: printed}, errors.New("exit status 1"))
		for _, want := range []string{"exit status 1", c.detail, "Error: the agent gave up", "warning: the config file is old"} {
			if !strings.Contains(out, want) {
				t.Errorf("%s: the failure lacks %q:\n%s", c.file, want, out)
			}
		}
		for _, noise := range []string{"total_cost_usd", "session_id", "thread_id", "input_tokens", "uuid", `{"type"`} {
			if strings.Contains(out, noise) {
				t.Errorf("%s: the failure carries the CLI's JSON (%s):\n%s", c.file, noise, out)
			}
		}
	}
	long := strings.Repeat("line\n", 100) + "the last line"
	if out := failOutput(agent.Result{Excerpt: long}, nil); strings.Count(out, "line\n") > maxFailLines || !strings.HasSuffix(out, "the last line") {
		t.Errorf("a long output is not cut to its last %d lines:\n%s", maxFailLines, out)
	}
}
