package cli

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/whilly-go/whilly/bench"
)

// The GitHub benchmarks: what a labelled issue costs in latency (intake) and what
// hundreds of busy installations cost in GitHub writes and fairness (scale). Both run the
// serve configuration against a fake GitHub in this process.

type benchIntakeFlags struct {
	bench.IntakeOptions
	pool   int
	asJSON bool
}

func (a *app) benchIntake() *cobra.Command {
	var o benchIntakeFlags
	cmd := &cobra.Command{
		Use:   "intake [--issues N] [--workers K] [--rate R]",
		Short: "Latency from a labelled issue's webhook to its 👀 reaction and to its first task claimed",
		Long: `Runs the control plane 'whilly serve' runs with the GitHub App, against a fake GitHub in
this process (the real go-github and ghinstallation clients talk to it over loopback), and
K sim workers waiting in long-poll for any task. It then POSTs N signed issues.labeled
deliveries (the label whilly-pending, by a user with write permission) to /webhook, R a
second, each at its time whatever the ones before it take (as GitHub sends them), and
follows each through the whole path: the webhook stores the delivery and
enqueues a River job, intake reacts with 👀, plans the issue from its task list and
persists the plan, a waiting worker claims its first task.

  eyes    from the POST to the moment the fake GitHub received the 👀 reaction
  claim   from the POST to the moment a worker held the 200 that gave it the plan's
          first task: of its claim, or of the completion that handed the task over
          (claim_next, as whilly-worker asks)

Targets (issue 15): eyes p99 ≤ 1 s, claim p99 ≤ 1.5 s over at least 200 issues. Other
load on the machine moves every figure: give the load average with them.`,
		Example: `  whilly bench intake --issues 200 --workers 16 --rate 20
  whilly bench intake --issues 20 --json`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch {
			case o.Issues < 1 || o.Issues > 100_000:
				return usagef("--issues must be between 1 and 100000, got %d", o.Issues)
			case o.Workers < 1 || o.Workers > 1000:
				return usagef("--workers must be between 1 and 1000, got %d", o.Workers)
			case o.Rate <= 0 || o.Rate > 10_000:
				return usagef("--rate must be above 0 and at most 10000 deliveries a second, got %g", o.Rate)
			case o.Tasks < 1 || o.Tasks > 100:
				return usagef("--tasks must be between 1 and 100, got %d", o.Tasks)
			}
			return a.runBenchIntake(cmd.Context(), o)
		},
	}
	f := cmd.Flags()
	f.IntVar(&o.Issues, "issues", 200, "labelled issues to deliver")
	f.IntVar(&o.Workers, "workers", 16, "sim workers waiting in long-poll")
	f.Float64Var(&o.Rate, "rate", 20, "deliveries per second")
	f.IntVar(&o.Tasks, "tasks", 2, "tasks in each issue's task list")
	f.IntVar(&o.pool, "pool", 0, poolFlagHelp)
	f.BoolVar(&o.asJSON, "json", false, "print the result as JSON")
	return cmd
}

func (a *app) runBenchIntake(ctx context.Context, o benchIntakeFlags) error {
	s, err := a.benchSetup(ctx, o.pool)
	if err != nil {
		return err
	}
	res, err := bench.Intake(ctx, s, o.IntakeOptions)
	if err != nil {
		return err
	}
	if o.asJSON {
		return a.writeJSON(res)
	}
	tw := newTable(a.io.Out)
	tw.row("FROM THE WEBHOOK POST TO", "ISSUES", "P50", "P99", "MAX", "TARGET P99")
	tw.row("👀 on the issue", fmt.Sprint(res.Issues), fmt.Sprintf("%.1f ms", res.EyesP50Ms), fmt.Sprintf("%.1f ms", res.EyesP99Ms),
		fmt.Sprintf("%.1f ms", res.EyesMaxMs), "1000 ms")
	tw.row("first task claimed", fmt.Sprint(res.Issues), fmt.Sprintf("%.1f ms", res.ClaimP50Ms), fmt.Sprintf("%.1f ms", res.ClaimP99Ms),
		fmt.Sprintf("%.1f ms", res.ClaimMaxMs), "1500 ms")
	if err := tw.flush(); err != nil {
		return err
	}
	a.printf("%d sim workers in long-poll, %.0f deliveries a second, %d requests the fake GitHub does not serve\n", res.Workers, res.Rate, res.Problems)
	a.printf("issues=%d eyes_p50_ms=%.1f eyes_p99_ms=%.1f claim_p50_ms=%.1f claim_p99_ms=%.1f\n",
		res.Issues, res.EyesP50Ms, res.EyesP99Ms, res.ClaimP50Ms, res.ClaimP99Ms)
	return nil
}

type benchScaleFlags struct {
	bench.ScaleOptions
	pool   int
	asJSON bool
}

func (a *app) benchScale() *cobra.Command {
	var o benchScaleFlags
	cmd := &cobra.Command{
		Use:   "scale [--installations N] [--issues M] [--workers K]",
		Short: "Many busy installations: GitHub writes, rate limits and fairness",
		Long: `Runs the control plane 'whilly serve' runs with the GitHub App against a fake GitHub in
this process that enforces GitHub's limits per installation: 5,000 requests an hour and
the secondary limit of 80 content writes a minute (beyond them it answers 403, as GitHub
does). N installations, one repository each, get M labelled issues each, delivered to
/webhook R a second alternating installations, each at its time; every issue's task list makes a plan of
--tasks tasks. K sim workers claim any task, start it, hold it for about --task-time and
complete it, until every plan is done and every issue carries whilly-done. Like
whilly-worker, each completion asks for the worker's next task, claimed and started in
its transaction (claim_next); a worker long-polls only when it got none.

  writes/transition   content writes the fake accepted (labels, comments, reactions)
                      per task transition made (claim, start, complete)
  writes/min          the most writes any installation made in any 60 seconds, against
                      the secondary limit; rate-limited counts the 403/429 answers
  fairness            each installation's median time from label to its first claimed
                      task; the slowest median against the fastest. Next to it, the
                      same for the same times dealt to the installations at random
                      (chance_spread, the median of 200 deals): what the times' own
                      scatter makes of it when no installation is favoured
  done→whilly-done    from a plan done to its issue's whilly-done label: how far the
                      mirror trails the work

The fake answers at once unless --github-latency says how long GitHub takes to answer a
request; every call to GitHub then takes that long (the intake's three, the token each
claim mints, the mirror's), as it does in production.

Targets (issue 15): 0 rate-limit answers, at most 0.2 writes per transition, the slowest
median within 2× the fastest. Other load on the machine moves every figure: give the
load average with them.`,
		Example: `  whilly bench scale
  whilly bench scale --github-latency 100ms
  whilly bench scale --installations 20 --issues 3 --workers 16 --task-time 100ms`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch {
			case o.Installations < 1 || o.Installations > 10_000:
				return usagef("--installations must be between 1 and 10000, got %d", o.Installations)
			case o.Issues < 1 || o.Issues > 1000:
				return usagef("--issues must be between 1 and 1000, got %d", o.Issues)
			case o.Tasks < 1 || o.Tasks > 100:
				return usagef("--tasks must be between 1 and 100, got %d", o.Tasks)
			case o.Workers < 1 || o.Workers > 1000:
				return usagef("--workers must be between 1 and 1000, got %d", o.Workers)
			case o.TaskTime < 0 || o.TaskTime > time.Minute:
				return usagef("--task-time must be between 0 and 1m, got %s", o.TaskTime)
			case o.Rate <= 0 || o.Rate > 10_000:
				return usagef("--rate must be above 0 and at most 10000 deliveries a second, got %g", o.Rate)
			case o.Timeout < time.Second:
				return usagef("--timeout must be at least 1s, got %s", o.Timeout)
			case o.GitHubLatency < 0 || o.GitHubLatency > 10*time.Second:
				return usagef("--github-latency must be between 0 and 10s, got %s", o.GitHubLatency)
			}
			return a.runBenchScale(cmd.Context(), o)
		},
	}
	f := cmd.Flags()
	f.IntVar(&o.Installations, "installations", 200, "GitHub App installations")
	f.IntVar(&o.Issues, "issues", 5, "labelled issues per installation")
	f.IntVar(&o.Tasks, "tasks", 20, "tasks in each issue's task list")
	f.IntVar(&o.Workers, "workers", 64, "sim workers")
	f.DurationVar(&o.TaskTime, "task-time", 300*time.Millisecond, "how long a sim worker holds a task (±50 %)")
	f.Float64Var(&o.Rate, "rate", 50, "deliveries per second")
	f.DurationVar(&o.Timeout, "timeout", 20*time.Minute, "how long the plans may take to finish")
	f.DurationVar(&o.GitHubLatency, "github-latency", 0, "how long the fake GitHub takes to answer each request, as GitHub's own round trip")
	f.IntVar(&o.pool, "pool", 0, poolFlagHelp)
	f.BoolVar(&o.asJSON, "json", false, "print the result as JSON")
	return cmd
}

func (a *app) runBenchScale(ctx context.Context, o benchScaleFlags) error {
	s, err := a.benchSetup(ctx, o.pool)
	if err != nil {
		return err
	}
	res, err := bench.Scale(ctx, s, o.ScaleOptions)
	if err != nil {
		return err
	}
	if o.asJSON {
		return a.writeJSON(res)
	}
	tw := newTable(a.io.Out)
	tw.row("MEASURE", "RESULT", "TARGET", "DETAIL")
	tw.row("issues done", fmt.Sprintf("%d of %d", res.IssuesDone, res.Issues), "all",
		fmt.Sprintf("%d installations × %d issues, %d tasks done in %.1f s by %d sim workers", res.Installations, o.Issues, res.TasksDone, res.Seconds, res.Workers))
	tw.row("writes/transition", fmt.Sprintf("%.3f", res.WritesPerTransition), "≤ 0.2",
		fmt.Sprintf("%d writes for %d task transitions: %s", res.Writes, res.Transitions, writeKinds(res.WritesByKind)))
	tw.row("writes/min", fmt.Sprint(res.MaxWritesPerMinute), fmt.Sprintf("< %d", res.WriteLimit), "the busiest installation's most writes in any 60 s")
	tw.row("rate-limited", fmt.Sprint(res.RateLimited), "0", "403/429 answers of the fake GitHub's limits")
	tw.row("fairness", fmt.Sprintf("%.2f×", res.Spread), "≤ 2×",
		fmt.Sprintf("median label→first claim per installation: fastest %.0f ms, slowest %.0f ms; all issues p50 %.0f ms, p99 %.0f ms; the same times dealt to installations at random: %.2f×",
			res.FastestMedianMs, res.SlowestMedianMs, res.FirstClaimP50Ms, res.FirstClaimP99Ms, res.ChanceSpread))
	tw.row("label→👀", fmt.Sprintf("p50 %.0f ms", res.EyesP50Ms), "-", fmt.Sprintf("p99 %.0f ms: the intake's part of the wait for a first claim", res.EyesP99Ms))
	tw.row("done→whilly-done", fmt.Sprintf("p50 %.1f s", res.DoneP50Ms/1000), "-",
		fmt.Sprintf("p99 %.1f s: from a plan done to its issue's whilly-done label", res.DoneP99Ms/1000))
	if err := tw.flush(); err != nil {
		return err
	}
	a.printf("the fake GitHub answered each request after %.0f ms; %d requests it does not serve\n", res.GitHubLatencyMs, res.Problems)
	a.printf("issues_done=%d writes_per_transition=%.3f max_writes_per_min=%d rate_limited=%d fairness_spread=%.2f chance_spread=%.2f done_p99_ms=%.0f\n",
		res.IssuesDone, res.WritesPerTransition, res.MaxWritesPerMinute, res.RateLimited, res.Spread, res.ChanceSpread, res.DoneP99Ms)
	return nil
}

// writeKinds lists a count of writes by kind, most first.
func writeKinds(by map[string]int) string {
	kinds := slices.Collect(maps.Keys(by))
	slices.SortFunc(kinds, func(a, b string) int { return cmp.Or(by[b]-by[a], strings.Compare(a, b)) })
	parts := make([]string, len(kinds))
	for i, k := range kinds {
		parts[i] = fmt.Sprintf("%d %s", by[k], k)
	}
	return strings.Join(parts, ", ")
}
