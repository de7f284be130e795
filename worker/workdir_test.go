package worker_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/whilly-go/whilly/plan"
)

// TestWorkerInHomeExitsTwoInsteadOfFailingEveryAttempt: started in HOME, a boxed worker
// would run the agent of a plan without a repository in HOME, which the box refuses, and
// fail every attempt of the plan as a retryable agent_error. With --plan it says so and
// exits 2 before it claims anything; without, it hands back the first such task it gets,
// uncounted, and exits 2 with the same sentence.
func TestWorkerInHomeExitsTwoInsteadOfFailingEveryAttempt(t *testing.T) {
	t.Parallel()
	boxedT(t)
	e := newEnv(t)
	e.importTasks(t, "home", 1)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	home := t.TempDir()
	run := func(args ...string) (int, string) {
		_, token, err := e.st.RegisterWorker(context.Background(), "home", nil)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, exe, append([]string{workerMainArg, "--connect", e.url, "--once"}, args...)...)
		cmd.Dir = home
		cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + home, "WHILLY_WORKER_TOKEN=" + token,
			"WHILLY_AGENT=command", "WHILLY_AGENT_CMD=/bin/true", "WHILLY_SANDBOX=bwrap"}
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			t.Fatal(err)
		}
		return cmd.ProcessState.ExitCode(), string(out)
	}
	const sentence = "start whilly-worker in a project directory, or pass --workdir DIR"
	for _, args := range [][]string{{"--plan", "home"}, nil} {
		code, out := run(args...)
		if code != 2 || !strings.Contains(out, "would expose all of "+home) || !strings.Contains(out, sentence) {
			t.Errorf("worker %v in HOME: exit %d; want 2 saying what to do:\n%s", args, code, out)
		}
		task, err := e.st.GetTask(context.Background(), "home", "T00")
		if err != nil {
			t.Fatal(err)
		}
		if task.Status != plan.StatusPending || task.Attempts != 0 {
			t.Errorf("worker %v in HOME: task %s with %d attempts; want it PENDING, no attempt counted", args, task.Status, task.Attempts)
		}
	}
}
