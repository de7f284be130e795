package cli

import (
	"log/slog"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/whilly-go/whilly/queue"
	"github.com/whilly-go/whilly/testkit"
)

// An issue's delivery job runs the planner agent: WHILLY_PLANNER_TIMEOUT for each of its
// two calls (the second when the first plan was invalid). River cuts a job at its time
// limit, so the limit must outlast both calls, whatever WHILLY_PLANNER_TIMEOUT says; a
// job cut short is retried and cut again, and the issue is never taken in.
func TestADeliveryJobOutlastsItsPlannerCalls(t *testing.T) {
	t.Parallel()
	pool := testkit.DB(t)
	jobs, err := river.NewClient(riverpgxv5.New(pool), &river.Config{})
	if err != nil {
		t.Fatal(err)
	}
	st := queue.NewStore(pool, nil, queue.Config{})
	for _, c := range []struct {
		env  map[string]string
		want time.Duration
	}{
		{map[string]string{"WHILLY_PLANNER": "sim", "WHILLY_PLANNER_TIMEOUT": "30m"}, 61 * time.Minute},
		{map[string]string{"WHILLY_PLANNER": "sim"}, 21 * time.Minute},
		{map[string]string{"WHILLY_PLANNER": "sim", "WHILLY_PLANNER_TIMEOUT": "2m"}, 5 * time.Minute},
		{map[string]string{}, time.Minute},
	} {
		c.env["WHILLY_GITHUB_TOKEN"] = "ghp_for_tests"
		a := newApp(IO{Getenv: func(k string) string { return c.env[k] }}, slog.New(slog.DiscardHandler))
		env, hasApp, err := a.readGitHubEnv()
		if err != nil {
			t.Fatal(err)
		}
		g, err := a.githubParts(st, jobs, env, hasApp)
		if err != nil {
			t.Fatal(err)
		}
		if got := g.Intake.Worker().Timeout(nil); got != c.want {
			t.Errorf("with %v the delivery job's time limit is %v, want %v", c.env, got, c.want)
		}
	}
}
