package agent

import (
	"context"
	"fmt"
	"os/exec"
	"time"

	"github.com/whilly-go/whilly/plan"
	"github.com/whilly-go/whilly/sandbox"
)

// VerifyResult is how one verification command ended.
type VerifyResult struct {
	Name      string        `json:"name"`
	Command   string        `json:"command"`
	Required  bool          `json:"required"`
	Passed    bool          `json:"passed"`
	ExitCode  int           `json:"exit_code"` // -1 when killed or not started
	TimedOut  bool          `json:"timed_out,omitempty"`
	Cancelled bool          `json:"cancelled,omitempty"`
	Skipped   bool          `json:"skipped,omitempty"` // not run: ctx was done before its turn
	Error     string        `json:"error,omitempty"`   // could not start, or the limit its box went over
	Output    string        `json:"output,omitempty"`  // tail of stdout and stderr, redacted, ≤ MaxExcerptBytes
	Duration  time.Duration `json:"duration"`
}

// RunVerify runs the plan's verification commands one after another with `sh -c` in dir,
// each in its own process group with timeout (0: DefaultVerifyTimeout) and the same
// environment an agent gets. Every command runs, so the report is complete; once ctx is
// done the rest are marked Skipped.
//
// They run in sb like the agent (a nil sb runs them unboxed): they run the code the agent
// wrote.
func RunVerify(ctx context.Context, sb *sandbox.Sandbox, dir string, cmds []plan.Verify, timeout time.Duration) []VerifyResult {
	return RunVerifyIn(ctx, sb, sandbox.Spec{Dir: dir}, cmds, timeout)
}

// RunVerifyIn is RunVerify in the directory of at, with its environment (Env) and binds
// (Binds) besides: the attempt's caches.
func RunVerifyIn(ctx context.Context, sb *sandbox.Sandbox, at sandbox.Spec, cmds []plan.Verify, timeout time.Duration) []VerifyResult {
	if timeout <= 0 {
		timeout = DefaultVerifyTimeout
	}
	out := make([]VerifyResult, 0, len(cmds))
	sh, lookErr := exec.LookPath("sh")
	for _, c := range cmds {
		vr := VerifyResult{Name: c.Name, Command: c.Command, Required: c.Required, ExitCode: -1}
		switch {
		case ctx.Err() != nil:
			vr.Skipped, vr.Error = true, fmt.Sprintf("not run: %v", context.Cause(ctx))
		case lookErr != nil:
			vr.Error = fmt.Sprintf("look up sh: %v", lookErr)
		default:
			runVerifyOne(ctx, sb, sh, at, c.Command, timeout, &vr)
		}
		out = append(out, vr)
	}
	return out
}

func runVerifyOne(ctx context.Context, sb *sandbox.Sandbox, sh string, at sandbox.Spec, command string, timeout time.Duration, vr *VerifyResult) {
	spec := sandbox.Spec{Path: sh, Args: []string{"-c", command}, Dir: at.Dir, Agent: sandbox.AgentNone, Env: at.Env, Binds: at.Binds}
	r, err := RunScript(ctx, sb, spec, nil, timeout)
	if err != nil {
		vr.Error = err.Error()
		return
	}
	vr.ExitCode, vr.TimedOut, vr.Cancelled = r.ExitCode, r.TimedOut, r.Cancelled
	vr.Passed, vr.Output, vr.Duration = r.Passed(), r.Output, r.Duration
	if r.Limit != "" {
		vr.Error = "the box went over its " + r.Limit
	}
}

// VerifyFailure returns the first required verification that did not pass.
func VerifyFailure(rs []VerifyResult) (VerifyResult, bool) {
	for _, r := range rs {
		if r.Required && !r.Passed {
			return r, true
		}
	}
	return VerifyResult{}, false
}

// ApplyVerify folds verification into an attempt's result: when the agent succeeded and a
// required command failed, the attempt fails with ReasonVerifyFailed. An attempt that
// already failed keeps its own reason.
func (r *Result) ApplyVerify(rs []VerifyResult) {
	if r.Reason != "" {
		return
	}
	f, failed := VerifyFailure(rs)
	if !failed {
		return
	}
	r.Reason = ReasonVerifyFailed
	var why string
	switch {
	case f.Error != "":
		why = f.Error
	case f.TimedOut:
		why = "timed out"
	case f.Cancelled:
		why = "cancelled"
	default:
		why = fmt.Sprintf("exit status %d", f.ExitCode)
	}
	name := f.Name
	if name == "" {
		name = f.Command
	}
	r.Detail = bound(Redact(fmt.Sprintf("verification %q failed: %s", name, why)), maxDetailBytes)
	if last := lastLine([]byte(f.Output)); last != "no output" {
		r.Detail = bound(r.Detail+": "+Redact(last), maxDetailBytes)
	}
}
