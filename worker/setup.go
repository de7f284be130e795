package worker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/whilly-go/whilly/agent"
	"github.com/whilly-go/whilly/control/client"
	"github.com/whilly-go/whilly/sandbox"
)

// setupTailLines is how many of the setup script's last lines a failure reports.
const setupTailLines = 20

// openCache opens the plan's cache for an attempt (see Caches), first running the
// repository's setup script when it is due, and returns it with the variables and the
// bind that give it to the agent. A nil cache means the worker keeps none. A non-nil
// Result is the attempt's failure: the setup script failed (ReasonSetupFailed), or the
// cache could not be made; the agent must not run.
func (w *Worker) openCache(ctx context.Context, log *slog.Logger, c *client.Claim, co *Checkout, workDir string,
	out io.Writer) (*PlanCache, []string, []sandbox.Bind, *agent.Result) {
	if w.caches == nil {
		return nil, nil, nil, nil
	}
	failed := func(reason, detail, excerpt string) *agent.Result {
		fmt.Fprintf(out, "whilly: %s\n", detail)
		return &agent.Result{ExitCode: -1, Reason: reason, Detail: agent.Redact(detail), Excerpt: excerpt}
	}
	// A plan without a repository shares its base cache with the plans run in the same
	// directory; it has no base branch to read a setup script from.
	if workDir == "" {
		workDir = "."
	}
	repo, err := filepath.Abs(workDir)
	if err != nil {
		return nil, nil, nil, failed(ReasonWorkspace+": cache", fmt.Sprintf("find the work directory: %v", err), "")
	}
	var setup Setup
	if co != nil {
		repo = c.Workspace.CloneURL
		script, err := co.BaseFile(ctx, SetupScript)
		switch {
		case errors.Is(err, fs.ErrNotExist):
		case err != nil:
			return nil, nil, nil, failed(ReasonWorkspace+": setup", fmt.Sprintf("read %s from the base branch: %v", SetupScript, err), "")
		default:
			setup = Setup{Script: script, Run: func(ctx context.Context, baseDir string) error {
				return w.runSetup(ctx, c, co.Dir, script, baseDir, out)
			}}
		}
	}
	w.plansOnDisk[c.Task.PlanID] = true
	pc, err := w.caches.Open(ctx, repo, c.Task.PlanID, setup)
	var se *SetupError
	switch {
	case errors.As(err, &se):
		log.WarnContext(ctx, "the repository's setup script failed; the agent does not run", "detail", se.Detail)
		return nil, nil, nil, failed(ReasonSetupFailed, se.Error(), se.Output)
	case err != nil:
		if ctx.Err() == nil {
			log.WarnContext(ctx, "the plan's cache could not be opened", "error", err)
		}
		return nil, nil, nil, failed(ReasonWorkspace+": cache", err.Error(), "")
	}
	if !w.cfg.Sandbox.Boxed() {
		return pc, CacheEnv(pc.Dir), nil, nil
	}
	return pc, CacheEnv(CacheBoxDir), []sandbox.Bind{{Src: pc.Dir, Dst: CacheBoxDir}}, nil
}

// runSetup runs the repository's setup script as the base branch holds it, in the box
// like the agent (the checkout its directory, the same egress, no credentials), with the
// repository's base cache read-write as its caches and the script itself read-only; its
// output goes to the attempt's log. It has the agent's time limit (WHILLY_AGENT_TIMEOUT).
func (w *Worker) runSetup(ctx context.Context, c *client.Claim, dir string, script []byte, baseDir string, out io.Writer) error {
	f, err := os.CreateTemp("", "whilly-setup-*.sh")
	if err != nil {
		return fmt.Errorf("write the setup script: %w", err)
	}
	defer func() { _ = os.Remove(f.Name()) }()
	_, err = f.Write(script)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(f.Name(), 0o644) // the box's user reads it
	}
	if err != nil {
		return fmt.Errorf("write the setup script: %w", err)
	}
	shell, err := setupShell(script)
	if err != nil {
		return &SetupError{Detail: err.Error()}
	}
	path, cacheDir := f.Name(), baseDir
	var binds []sandbox.Bind
	if w.cfg.Sandbox.Boxed() {
		path, cacheDir = setupBoxPath, CacheBoxDir
		binds = []sandbox.Bind{{Src: f.Name(), Dst: setupBoxPath, ReadOnly: true}, {Src: baseDir, Dst: CacheBoxDir}}
	}
	fmt.Fprintf(out, "whilly: running %s of the base branch\n", SetupScript)
	r, err := agent.RunScript(ctx, w.cfg.Sandbox, sandbox.Spec{Path: shell, Args: []string{path}, Dir: dir, Agent: sandbox.AgentNone,
		Env: append(w.taskEnv(c), CacheEnv(cacheDir)...), Binds: binds,
		OnDenied: func(d sandbox.Denial) { w.egressDenied(ctx, c, d) }}, out, w.cfg.AgentTimeout)
	switch {
	case err != nil:
		return &SetupError{Detail: err.Error()}
	case r.Passed():
		fmt.Fprintf(out, "whilly: %s done in %s\n", SetupScript, r.Duration.Round(time.Millisecond))
		return nil
	case r.Cancelled:
		return fmt.Errorf("run the setup script: %w", context.Cause(ctx))
	case r.TimedOut:
		return &SetupError{Detail: fmt.Sprintf("%s timed out after %s", SetupScript, w.cfg.AgentTimeout), Output: lastLines(r.Output, setupTailLines)}
	}
	return &SetupError{Detail: fmt.Sprintf("%s: exit status %d", SetupScript, r.ExitCode), Output: lastLines(r.Output, setupTailLines)}
}

// setupShell is the shell the setup script runs with: bash when its #! line asks for
// it and bash is installed, else sh.
func setupShell(script []byte) (string, error) {
	first, _, _ := bytes.Cut(script, []byte("\n"))
	if bytes.HasPrefix(first, []byte("#!")) && bytes.Contains(first, []byte("bash")) {
		if p, err := exec.LookPath("bash"); err == nil {
			return p, nil
		}
	}
	p, err := exec.LookPath("sh")
	if err != nil {
		return "", fmt.Errorf("look up sh: %w", err)
	}
	return p, nil
}

// lastLines is the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// evictCaches removes the least recently used caches past WHILLY_CACHE_MAX_BYTES. Caches
// in use stay; then it is tried again when the worker is idle.
func (w *Worker) evictCaches(ctx context.Context) {
	if w.caches == nil {
		return
	}
	res, err := w.caches.Evict(ctx)
	if err != nil {
		w.log.WarnContext(ctx, "evict caches", "error", err)
	}
	w.evictPending = err != nil || res.Busy > 0
}
