package agent

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"slices"
	"time"

	"github.com/whilly-go/whilly/plan"
)

// SimConfig drives the sim agent.
type SimConfig struct {
	Delay    time.Duration // how long each run takes; 0 returns at once
	Cost     plan.USD      // what each run, successful or not, costs
	FailRate float64       // share of runs that fail, 0 … 1
	Seed     uint64        // with the same seed, the same request fails or succeeds every time
}

func (c SimConfig) validate() error {
	switch {
	case math.IsNaN(c.FailRate) || c.FailRate < 0 || c.FailRate > 1:
		return fmt.Errorf("fail rate %v is not between 0 and 1", c.FailRate)
	case c.Cost < 0:
		return errors.New("cost must not be negative")
	case c.Delay < 0:
		return errors.New("delay must not be negative")
	}
	return nil
}

// simLogEvery is how often the sim agent writes a progress line to its log while it runs.
const simLogEvery = 250 * time.Millisecond

// simAgent is no model at all, for demos, tests and benchmarks. It runs in process (no
// fork, no pipes), so a benchmark measures whilly and not process start-up. Whether a run
// fails is a pure function of the seed, the prompt and the environment (which holds the
// task id and attempt), so runs are reproducible whatever the order workers take tasks in.
// It honours the budget cap the way Claude Code does: a run that would cost more than the
// cap is charged the cap and fails with budget_exceeded.
type simAgent struct{ cfg SimConfig }

func (a *simAgent) Name() string { return NameSim }

func (a *simAgent) Run(ctx context.Context, req Request) (Result, error) {
	start := time.Now()
	if res, ok := noBudgetLeft(req); ok {
		return res, nil
	}
	timeout := req.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	if err := ctx.Err(); err != nil {
		return simStopped(ReasonCancelled, fmt.Sprintf("cancelled before start: %v", context.Cause(ctx)), start), nil
	}
	// The sim's log goes through the redactor every adapter's output goes through.
	log := (&logSink{w: req.Log, secrets: req.Secrets}).stream()
	defer log.flush()
	if a.cfg.Delay > 0 {
		wait, timedOut := a.cfg.Delay, false
		if timeout < wait {
			wait, timedOut = timeout, true
		}
		log.write(fmt.Appendf(nil, "whilly sim agent: a simulation, no model runs; working for %s\n", a.cfg.Delay))
		t := time.NewTimer(wait)
		tick := time.NewTicker(simLogEvery)
		defer tick.Stop()
	working:
		for {
			select {
			case <-ctx.Done():
				t.Stop()
				return simStopped(ReasonCancelled, fmt.Sprintf("cancelled: %v", context.Cause(ctx)), start), nil
			case <-tick.C:
				log.write(fmt.Appendf(nil, "whilly sim agent: working, %s of %s\n", time.Since(start).Round(time.Millisecond), a.cfg.Delay))
			case <-t.C:
				break working
			}
		}
		if timedOut {
			return simStopped(ReasonTimeout, fmt.Sprintf("the simulated run takes %s, more than the %s timeout", a.cfg.Delay, timeout), start), nil
		}
	}

	res := Result{Cost: a.cfg.Cost, CostReported: true, Turns: 1}
	switch {
	case req.BudgetCap != nil && a.cfg.Cost > *req.BudgetCap:
		res.Cost = *req.BudgetCap
		res.ExitCode, res.IsError, res.Reason = 1, true, ReasonBudgetExceeded
		res.Text = fmt.Sprintf("whilly sim agent (a simulation, no model ran): a run costs %s USD, more than the %s USD cap; stopped at the cap.", a.cfg.Cost, *req.BudgetCap)
		res.Detail = "simulated spending cap reached"
	case a.fails(req):
		res.ExitCode, res.IsError, res.Reason = 1, true, ReasonAgentError
		res.Text = fmt.Sprintf("whilly sim agent (a simulation, no model ran): simulated failure (fail rate %g, seed %d).", a.cfg.FailRate, a.cfg.Seed)
		res.Detail = "simulated failure"
	case slices.Contains(req.Env, "WHILLY_AGENT_ROLE=planner"):
		res.Text = simPlanAnswer(req.Prompt)
	default:
		res.Text = "whilly sim agent: this is a simulation; no model ran and no file was changed.\n" + CompletionMarker
		res.Complete = true
	}
	res.Excerpt = res.Text
	res.Duration = time.Since(start)
	log.write([]byte(res.Text + "\n"))
	return res, nil
}

// simPlanAnswer is the sim planner's answer (agent.Plan sets WHILLY_AGENT_ROLE=planner): a
// PRD and a valid three-task plan, the same for the same prompt. Its project name carries
// a hash of the prompt, so two ideas make two plans. No model reads the idea.
func simPlanAnswer(prompt string) string {
	h := fnv.New32a()
	_, _ = io.WriteString(h, prompt)
	project := fmt.Sprintf("Simulated plan %08x", h.Sum32())
	return fmt.Sprintf(`# %[1]s

Written by the whilly sim planner: a simulation, no model read the idea. The plan below has
the shape of a real one so that whilly init, whilly run --agent sim and the dashboard can
be tried without an agent.

## Requirements

- F1: the groundwork the feature needs is in place.
- F2: the feature itself works.
- F3: an end-to-end test covers the feature.

`+"```json"+`
{"project": %[2]q, "tasks": [
  {"id": "SIM-1", "priority": "high", "description": "Lay the groundwork the simulated feature needs: its package, its configuration and its types.",
   "dependencies": [], "key_files": ["sim/setup.go"], "acceptance_criteria": ["the package builds", "the configuration is read once"],
   "test_steps": ["go build ./..."], "prd_requirement": "F1"},
  {"id": "SIM-2", "priority": "medium", "description": "Build the simulated feature on the groundwork of SIM-1 and cover it with unit tests.",
   "dependencies": ["SIM-1"], "key_files": ["sim/feature.go"], "acceptance_criteria": ["the feature answers as the PRD says", "its unit tests pass"],
   "test_steps": ["go test ./sim/..."], "prd_requirement": "F2"},
  {"id": "SIM-3", "priority": "low", "description": "Test the whole simulated feature end to end, from the command line to the stored result.",
   "dependencies": ["SIM-2"], "key_files": ["sim/e2e_test.go"], "acceptance_criteria": ["the end-to-end test passes", "it fails when the feature is removed"],
   "test_steps": ["go test -run TestEndToEnd ./sim/..."], "prd_requirement": "F3"}
]}
`+"```"+`
`, project, project)
}

// fails decides a run from a hash of the seed, the prompt and the sorted environment.
func (a *simAgent) fails(req Request) bool {
	if a.cfg.FailRate <= 0 {
		return false
	}
	if a.cfg.FailRate >= 1 {
		return true
	}
	h := fnv.New64a()
	var seed [8]byte
	binary.LittleEndian.PutUint64(seed[:], a.cfg.Seed)
	_, _ = h.Write(seed[:])
	_, _ = io.WriteString(h, req.Prompt)
	env := slices.Clone(req.Env)
	slices.Sort(env)
	for _, kv := range env {
		_, _ = io.WriteString(h, "\x00"+kv)
	}
	// fnv's low bits mix poorly for near-identical inputs; finish with a 64-bit mixer.
	x := mix64(h.Sum64())
	return float64(x>>11)/(1<<53) < a.cfg.FailRate
}

// mix64 is the splitmix64 finaliser.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

func simStopped(reason, detail string, start time.Time) Result {
	return Result{ExitCode: -1, CostReported: true, Reason: reason, Detail: detail, Duration: time.Since(start)}
}
