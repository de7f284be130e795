package agent

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/whilly-go/whilly/sandbox"
)

// ScriptResult is how a command run by RunScript ended.
type ScriptResult struct {
	ExitCode  int // -1 when killed
	TimedOut  bool
	Cancelled bool
	// Output is the tail of its stdout and stderr together, redacted, at most
	// MaxExcerptBytes.
	Output   string
	Duration time.Duration
	// Limit names the box's limit the command went over ("memory limit 4 GiB"), if any.
	Limit string
}

// Passed reports whether the command exited 0 by itself, within the box's limits.
func (r ScriptResult) Passed() bool {
	return r.ExitCode == 0 && !r.TimedOut && !r.Cancelled && r.Limit == ""
}

// RunScript runs spec in sb (nil: unboxed, with the allow-listed environment) in its own
// process group, as an agent runs, stdout and stderr merged into log (redacted line by
// line; nil keeps only the tail), killed with its group after timeout (0:
// DefaultTimeout) or when ctx ends. It is how whilly runs what is not an agent in the
// box: verification commands and a repository's setup script. The error is for a run
// that could not start.
func RunScript(ctx context.Context, sb *sandbox.Sandbox, spec sandbox.Spec, log io.Writer, timeout time.Duration) (ScriptResult, error) {
	box, err := sb.Prepare(ctx, spec)
	if err != nil {
		return ScriptResult{ExitCode: -1}, err
	}
	defer box.Close()
	pr, err := runProcess(ctx, procSpec{
		path:    box.Path,
		args:    box.Args,
		dir:     box.Dir,
		env:     box.Env,
		log:     log,
		timeout: timeout,
		grace:   DefaultKillGrace,
		maxOut:  MaxExcerptBytes * 4,
		merge:   true,

		extraFiles: box.ExtraFiles,
		started:    box.Started,
	})
	if err != nil {
		return ScriptResult{ExitCode: -1}, fmt.Errorf("run %s: %w", spec.Path, err)
	}
	return ScriptResult{ExitCode: pr.exitCode, TimedOut: pr.timedOut, Cancelled: pr.cancelled,
		Output: redactTail(pr.stdout, MaxExcerptBytes), Duration: pr.duration, Limit: box.Exceeded()}, nil
}
