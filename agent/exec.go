package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"time"

	"github.com/whilly-go/whilly/plan"
	"github.com/whilly-go/whilly/sandbox"
)

// runner runs an agent executable and turns its exit into a Result. The adapters differ
// only in their argv and their output parser.
type runner struct {
	cfg  Config
	name string
}

// output is what an adapter's parser found in stdout.
type output struct {
	text         string
	isError      bool
	reason       string // the Reason the agent's own report maps to; "" means agent_error when isError
	detail       string
	cost         plan.USD
	costReported bool
	sessionID    string
	turns        int
	usage        Usage
	denials      []json.RawMessage
}

// parseFunc reads an agent's stdout. An error means the output is not what the agent
// prints: no result could be found in it.
type parseFunc func(stdout []byte) (output, error)

// run starts bin with args in req's workspace, feeds it stdin, waits (killing its process
// group on timeout or cancellation) and classifies the outcome.
func (r runner) run(ctx context.Context, req Request, bin string, args []string, stdin *string, parse parseFunc) (Result, error) {
	if res, ok := noBudgetLeft(req); ok {
		return res, nil
	}
	if ctx.Err() != nil {
		return Result{ExitCode: -1, CostReported: true, Reason: ReasonCancelled,
			Detail: fmt.Sprintf("cancelled before start: %v", context.Cause(ctx))}, nil
	}
	path, err := exec.LookPath(bin)
	if err != nil {
		return Result{}, fmt.Errorf("run %s agent: look up %q: %w: %w", r.name, bin, ErrNotFound, err)
	}
	timeout := req.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	box, err := r.cfg.Sandbox.Prepare(ctx, sandbox.Spec{Path: path, Args: args, Dir: req.WorkDir, Agent: r.name,
		Environ: r.cfg.BaseEnv, Env: req.Env, Binds: req.Binds, OnDenied: req.OnEgressDenied})
	if err != nil {
		return Result{}, fmt.Errorf("run %s agent: %w", r.name, err)
	}
	defer box.Close()
	log := r.cfg.Logger
	log.DebugContext(ctx, "agent starting", "agent", r.name, "path", path, "sandbox", box.Mode, "net", box.Net,
		"args", Redact(strings.Join(args, " ")), "dir", req.WorkDir, "timeout", timeout)
	pr, err := runProcess(ctx, procSpec{
		path:    box.Path,
		args:    box.Args,
		dir:     box.Dir,
		env:     box.Env,
		stdin:   stdin,
		log:     req.Log,
		secrets: req.Secrets,
		timeout: timeout,
		grace:   r.cfg.KillGrace,
		maxOut:  r.cfg.MaxOutputBytes,

		extraFiles: box.ExtraFiles,
		started:    box.Started,
	})
	if err != nil {
		return Result{}, fmt.Errorf("run %s agent: %w", r.name, err)
	}
	res := classify(pr, timeout, parse)
	if limit := box.Exceeded(); limit != "" && !pr.cancelled {
		// Whatever the agent printed as it was killed, the limit ended it.
		res.Reason, res.Detail = ReasonResourceLimit, "the box went over its "+limit
	}
	res.Sandbox = box.Mode
	log.DebugContext(ctx, "agent finished", "agent", r.name, "exit_code", res.ExitCode,
		"reason", res.Reason, "cost_usd", res.Cost.String(), "duration", res.Duration)
	return res, nil
}

// classify turns a finished process and its parsed output into a Result. The order is the
// order of blame: our own kill first, then output we cannot read, then what the agent
// reported, then its exit code, then the missing marker.
func classify(pr procResult, timeout time.Duration, parse parseFunc) Result {
	res := Result{
		ExitCode: pr.exitCode,
		Duration: pr.duration,
		Excerpt:  excerpt(pr.stdout, pr.stderr),
	}
	out, perr := parse(pr.stdout)
	if perr == nil {
		res.Complete = strings.Contains(out.text, CompletionMarker)
		res.Text = tailString(Redact(out.text), maxTextBytes)
		res.IsError = out.isError
		res.Cost, res.CostReported = out.cost, out.costReported
		res.SessionID, res.Turns, res.Usage = out.sessionID, out.turns, out.usage
		res.PermissionDenials = boundedDenials(out.denials)
	}
	var detail string
	switch {
	case pr.cancelled:
		res.Reason = ReasonCancelled
		detail = fmt.Sprintf("cancelled after %s: %v", pr.duration.Round(time.Millisecond), pr.cause)
	case pr.timedOut:
		res.Reason = ReasonTimeout
		detail = fmt.Sprintf("killed with its process group after the %s timeout", timeout)
	case perr != nil && pr.exitCode != 0:
		res.Reason = ReasonExitCode
		detail = fmt.Sprintf("exit status %d: %s", pr.exitCode, lastLine(pr.stderr, pr.stdout))
	case perr != nil:
		res.Reason = ReasonMalformedOutput
		detail = perr.Error()
		if pr.truncated {
			detail += " (stdout was cut to its last bytes)"
		}
	case out.isError || out.reason != "":
		res.Reason = out.reason
		if res.Reason == "" {
			res.Reason = ReasonAgentError
		}
		detail = out.detail
	case pr.exitCode != 0:
		res.Reason = ReasonExitCode
		detail = fmt.Sprintf("exit status %d: %s", pr.exitCode, lastLine(pr.stderr, nil))
	case !res.Complete:
		res.Reason = ReasonNoCompletionMarker
		detail = "the agent finished without printing " + CompletionMarker
	}
	res.Detail = bound(strings.TrimSpace(Redact(detail)), maxDetailBytes)
	return res
}

// lastLine returns the last non-blank line of the first of bufs that has one.
func lastLine(bufs ...[]byte) string {
	for _, b := range bufs {
		b = bytes.TrimSpace(b)
		if len(b) == 0 {
			continue
		}
		if i := bytes.LastIndexByte(b, '\n'); i >= 0 {
			b = b[i+1:]
		}
		return string(bytes.TrimSpace(b))
	}
	return "no output"
}

// Bounds of Result.PermissionDenials.
const (
	maxDenials     = 20
	maxDenialBytes = 1 << 10
)

// boundedDenials keeps the first denials, each a JSON value of bounded size, redacted.
func boundedDenials(ds []json.RawMessage) []json.RawMessage {
	var out []json.RawMessage
	for _, d := range ds {
		if len(out) == maxDenials {
			break
		}
		d = json.RawMessage(Redact(string(d)))
		if len(d) > maxDenialBytes || !json.Valid(d) {
			b, _ := json.Marshal(bound(string(d), maxDenialBytes))
			d = b
		}
		out = append(out, d)
	}
	return out
}
