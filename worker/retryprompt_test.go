package worker_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/whilly-go/whilly/agent"
	"github.com/whilly-go/whilly/worker"
)

// TestRetryPromptCarriesTheErrorText: the second attempt's prompt holds what the first
// one said when it failed, not only the failure's class.
func TestRetryPromptCarriesTheErrorText(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.importTasks(t, "retry", 1)
	dir := t.TempDir()
	script := `cat > "` + dir + `/prompt.$WHILLY_ATTEMPT"; echo "parser.go:12: unexpected semicolon, expected }" >&2; exit 3`
	wk, api := e.registered(t, e.url)
	ag, err := agent.New(agent.NameCommand, agent.Config{Command: script})
	if err != nil {
		t.Fatal(err)
	}
	for attempt := 1; attempt <= 2; attempt++ {
		w, err := worker.New(api, ag, nil, worker.Config{WorkerID: wk.ID, PlanID: "retry", Once: true, ClaimWait: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if sum, err := w.Run(context.Background()); err != nil || sum.Failed != 1 {
			t.Fatalf("attempt %d: %+v, %v; want one failure", attempt, sum, err)
		}
		// Skip the retry's backoff.
		if _, err := e.st.Pool().Exec(context.Background(), `UPDATE tasks SET not_before = NULL WHERE plan_id = 'retry'`); err != nil {
			t.Fatal(err)
		}
	}
	first, err := os.ReadFile(filepath.Join(dir, "prompt.1"))
	if err != nil {
		t.Fatal(err)
	}
	second, err := os.ReadFile(filepath.Join(dir, "prompt.2"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(first), "unexpected semicolon") {
		t.Fatal("the first prompt already holds the error")
	}
	if !strings.Contains(string(second), "parser.go:12: unexpected semicolon, expected }") {
		t.Fatalf("the retry's prompt does not carry the first attempt's error text:\n%s", second)
	}
	task, err := e.st.GetTask(context.Background(), "retry", "T00")
	if err != nil || !strings.Contains(task.LastOutput, "unexpected semicolon") {
		t.Fatalf("task's last output = %q, %v", task.LastOutput, err)
	}
}
