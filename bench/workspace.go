package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/whilly-go/whilly/control/client"
	"github.com/whilly-go/whilly/fakegithub"
	"github.com/whilly-go/whilly/sandbox"
	whillyworker "github.com/whilly-go/whilly/worker"
)

// WorkspaceOptions are the workspace benchmark's settings.
type WorkspaceOptions struct {
	// HistoryMB is about the size of the generated repository's packed history, in MiB;
	// TreeMB is its working tree's (part of the history).
	HistoryMB int
	TreeMB    int
	// CacheDir keeps the generated repositories between runs.
	CacheDir string
	// Root is the worker's workspace directory; "" is a temporary one, removed
	// afterwards. A given Root is kept, so that a caller may look at the checkouts.
	Root string
	// Runs is how many times `true` runs in the box, and as many times unboxed.
	Runs int
	// BoxInit is the executable the box runs as its init, as a worker's box runs the
	// worker's binary (whilly-worker); "" is this process's own.
	BoxInit string
	// Progress receives the phases ("bench: …"); nil discards them. With Live, the
	// generation's progress rewrites one line in place (a terminal).
	Progress io.Writer
	Live     bool
	Log      *slog.Logger
}

// WorkspaceResult is what the workspace benchmark measured.
type WorkspaceResult struct {
	Repo WorkspaceRepo `json:"repo"`
	// The checkouts of two plans of one repository on one worker, one after the other.
	First  Checkout `json:"first"`
	Second Checkout `json:"second"`
	// Ratio is Second.Seconds / First.Seconds. The target: at most MaxRatio and at most
	// MaxSecondSeconds.
	Ratio            float64  `json:"ratio"`
	MaxRatio         float64  `json:"max_ratio"`
	MaxSecondSeconds float64  `json:"max_second_seconds"`
	SecondPass       bool     `json:"second_pass"`
	Box              BoxStart `json:"box"`
}

// WorkspaceRepo is the generated repository the checkouts fetch from.
type WorkspaceRepo struct {
	Dir        string  `json:"dir"`
	HistoryMB  int     `json:"history_mb"`
	TreeMB     int     `json:"tree_mb"`
	Head       string  `json:"head"` // the main branch's commit
	Commits    int     `json:"commits"`
	Files      int     `json:"files"`      // in the head's tree
	TreeBytes  int64   `json:"tree_bytes"` // the head's files, in all
	BlobBytes  int64   `json:"blob_bytes"` // every version of every file
	PackBytes  int64   `json:"pack_bytes"` // the repository's packs on disk
	Generated  bool    `json:"generated"`  // by this run; else reused from CacheDir
	GenSeconds float64 `json:"generate_seconds,omitempty"`
}

// Checkout is one plan's checkout: Open and Close of its workspace, timed, and what it
// holds afterwards.
type Checkout struct {
	PlanID    string  `json:"plan_id"`
	Branch    string  `json:"branch"`
	Dir       string  `json:"dir"`
	Seconds   float64 `json:"seconds"`
	Head      string  `json:"head"`
	Files     int     `json:"files"`
	TreeBytes int64   `json:"tree_bytes"`
}

// BoxStart compares running `true` in the sandbox with running it unboxed.
type BoxStart struct {
	// Skipped says why the box was not measured ("" when it was).
	Skipped string `json:"skipped,omitempty"`
	// Init is the box's init: every run in the box starts it first.
	Init         string  `json:"init"`
	Runs         int     `json:"runs"`
	BoxedP50Ms   float64 `json:"boxed_p50_ms"`
	BoxedP90Ms   float64 `json:"boxed_p90_ms"`
	UnboxedP50Ms float64 `json:"unboxed_p50_ms"`
	UnboxedP90Ms float64 `json:"unboxed_p90_ms"`
	// AddedP50Ms is BoxedP50Ms - UnboxedP50Ms; the target: at most MaxAddedP50Ms.
	AddedP50Ms    float64 `json:"added_p50_ms"`
	AddedP90Ms    float64 `json:"added_p90_ms"`
	MaxAddedP50Ms float64 `json:"max_added_p50_ms"`
	Pass          bool    `json:"pass"`
	// The boxed runs' steps, p50 each: the sandbox's Prepare (the box's directory and
	// home, the proxy), the process (bubblewrap, the box's init, true), Close.
	PrepareP50Ms float64 `json:"prepare_p50_ms"`
	ProcessP50Ms float64 `json:"process_p50_ms"`
	CloseP50Ms   float64 `json:"close_p50_ms"`
}

// The workspace benchmark's targets: a second plan's checkout on a worker that holds the
// repository's objects already costs a tenth of the first, and at most 3 s; the box adds
// at most 150 ms to a process's start.
const (
	maxCheckoutRatio  = 0.10
	maxSecondCheckout = 3 * time.Second
	maxBoxAddedP50    = 150 * time.Millisecond
)

// Workspace generates (or reuses) a repository, serves it over git's smart HTTP on a
// loopback port, times two plans' checkouts on one fresh worker root through the worker's
// own workspaces, then times `true` in the sandbox against `true` unboxed.
func Workspace(ctx context.Context, o WorkspaceOptions) (WorkspaceResult, error) {
	s := Setup{Progress: o.Progress}
	log := o.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	repo, err := workspaceRepo(ctx, o)
	if err != nil {
		return WorkspaceResult{}, err
	}
	res := WorkspaceResult{Repo: repo, MaxRatio: maxCheckoutRatio, MaxSecondSeconds: maxSecondCheckout.Seconds()}

	srv, cloneURL, err := serveRepo(ctx, repo.Dir)
	if err != nil {
		return WorkspaceResult{}, err
	}
	defer func() { _ = srv.Close() }()

	root := o.Root
	if root == "" {
		if root, err = os.MkdirTemp("", "whilly-bench-workspaces-"); err != nil {
			return WorkspaceResult{}, fmt.Errorf("make the worker's workspace directory: %w", err)
		}
		defer func() { _ = os.RemoveAll(root) }()
	}
	ws := whillyworker.NewWorkspaces(root, "", log)
	for i, c := range []*Checkout{&res.First, &res.Second} {
		c.PlanID = fmt.Sprintf("bench-workspace-%d", i+1)
		c.Branch = fmt.Sprintf("whilly/issue-%d", i+1)
		s.progressf("checkout of plan %d (branch %s from main, %s)", i+1, c.Branch, cloneURL)
		if err := checkout(ctx, ws, cloneURL, repo, c); err != nil {
			return WorkspaceResult{}, err
		}
		s.progressf("plan %d checked out in %.2f s", i+1, c.Seconds)
	}
	res.Ratio = res.Second.Seconds / res.First.Seconds
	res.SecondPass = res.Ratio <= maxCheckoutRatio && res.Second.Seconds <= maxSecondCheckout.Seconds()

	res.Box, err = boxStart(ctx, s, res.First.Dir, o)
	return res, err
}

// checkout opens the workspace of c.PlanID on the plan branch c.Branch (new, so started
// from main) and closes it, timed; then checks that it holds the repository's head.
func checkout(ctx context.Context, ws *whillyworker.Workspaces, cloneURL string, repo WorkspaceRepo, c *Checkout) error {
	start := time.Now()
	co, err := ws.Open(ctx, c.PlanID, client.Workspace{CloneURL: cloneURL, Branch: c.Branch, BaseBranch: "main"})
	if err != nil {
		return fmt.Errorf("check out plan %s: %w", c.PlanID, err)
	}
	c.Dir, c.Head = co.Dir, co.StartSHA()
	if err := co.Close(); err != nil {
		return fmt.Errorf("close the workspace of plan %s: %w", c.PlanID, err)
	}
	c.Seconds = time.Since(start).Seconds()
	if c.Files, c.TreeBytes, err = treeSize(c.Dir); err != nil {
		return err
	}
	if c.Head != repo.Head || c.Files != repo.Files || c.TreeBytes != repo.TreeBytes {
		return fmt.Errorf("the checkout of plan %s holds %s, %d files, %d bytes; the repository's main is %s, %d files, %d bytes",
			c.PlanID, c.Head, c.Files, c.TreeBytes, repo.Head, repo.Files, repo.TreeBytes)
	}
	return nil
}

// treeSize counts the regular files of a work tree, and their bytes, but for its .git
// (a directory, or a file naming the repository elsewhere).
func treeSize(dir string) (files int, size int64, err error) {
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		switch {
		case err != nil:
			return err
		case d.Name() == ".git" && filepath.Dir(p) == dir:
			if d.IsDir() {
				return filepath.SkipDir
			}
		case d.Type().IsRegular():
			info, err := d.Info()
			if err != nil {
				return err
			}
			files++
			size += info.Size()
		}
		return nil
	})
	if err != nil {
		return 0, 0, fmt.Errorf("count the files of %s: %w", dir, err)
	}
	return files, size, nil
}

// serveRepo serves the bare repository dir over git's smart HTTP on a loopback port and
// returns its clone URL.
func serveRepo(ctx context.Context, dir string) (*http.Server, string, error) {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		return nil, "", fmt.Errorf("listen on a loopback port: %w", err)
	}
	srv := &http.Server{Handler: &fakegithub.GitHTTP{Root: filepath.Dir(dir)}, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	return srv, "http://" + ln.Addr().String() + "/" + filepath.Base(dir), nil
}

// boxStart runs `true` runs times in the sandbox and runs times unboxed, interleaved, each
// through Prepare, the process and Close; it skips (Skipped says why) when bubblewrap
// does not work here.
func boxStart(ctx context.Context, s Setup, dir string, o WorkspaceOptions) (BoxStart, error) {
	runs := o.Runs
	res := BoxStart{Runs: runs, MaxAddedP50Ms: ms(maxBoxAddedP50), Init: o.BoxInit}
	if res.Init == "" {
		exe, err := os.Executable()
		if err != nil {
			return res, fmt.Errorf("find this program, the box's init: %w", err)
		}
		res.Init = exe
	}
	box, err := openBox(ctx, o.BoxInit)
	if err != nil {
		if !errors.Is(err, sandbox.ErrUnavailable) {
			return res, fmt.Errorf("open the sandbox: %w", err)
		}
		res.Skipped = err.Error()
		s.progressf("box start skipped: %v", err)
		return res, nil
	}
	bin, err := exec.LookPath("true")
	if err != nil {
		return res, fmt.Errorf("find true: %w", err)
	}
	s.progressf("box start: true, %d times in the box and %d times unboxed, interleaved", runs, runs)
	var boxed, unboxed []time.Duration
	var steps [3][]time.Duration // of the boxed runs: Prepare, the process, Close
	for i := range runs {
		order := []*sandbox.Sandbox{box, nil}
		if i%2 == 1 {
			slices.Reverse(order)
		}
		for _, sb := range order {
			t, err := runTrue(ctx, sb, bin, dir)
			if err != nil {
				return res, err
			}
			if !sb.Boxed() {
				unboxed = append(unboxed, t.total())
				continue
			}
			boxed = append(boxed, t.total())
			for j, d := range []time.Duration{t.prepare, t.run, t.close} {
				steps[j] = append(steps[j], d)
			}
		}
	}
	slices.Sort(boxed)
	slices.Sort(unboxed)
	res.BoxedP50Ms, res.BoxedP90Ms = ms(percentile(boxed, 0.5)), ms(percentile(boxed, 0.9))
	res.UnboxedP50Ms, res.UnboxedP90Ms = ms(percentile(unboxed, 0.5)), ms(percentile(unboxed, 0.9))
	for i, p := range []*float64{&res.PrepareP50Ms, &res.ProcessP50Ms, &res.CloseP50Ms} {
		slices.Sort(steps[i])
		*p = ms(percentile(steps[i], 0.5))
	}
	res.AddedP50Ms, res.AddedP90Ms = res.BoxedP50Ms-res.UnboxedP50Ms, res.BoxedP90Ms-res.UnboxedP90Ms
	res.Pass = res.AddedP50Ms <= res.MaxAddedP50Ms
	return res, nil
}

// openBox opens the sandbox as a worker with no sandbox variable set does, with init
// as the box's init ("" is this process).
func openBox(ctx context.Context, init string) (*sandbox.Sandbox, error) {
	set, err := sandbox.SettingsFromEnv(func(string) string { return "" })
	if err != nil {
		return nil, fmt.Errorf("the sandbox's default settings: %w", err)
	}
	if init == "" {
		return sandbox.Open(ctx, set, true)
	}
	box, err := sandbox.New(sandbox.Config{Settings: set, Init: init})
	if err == nil {
		err = box.Probe(ctx)
	}
	return box, err
}

// runTimes are the steps of one run of true.
type runTimes struct{ prepare, run, close time.Duration }

func (t runTimes) total() time.Duration { return t.prepare + t.run + t.close }

// runTrue prepares a run of bin in dir with sb (nil: unboxed), runs it and closes it,
// timing each step.
func runTrue(ctx context.Context, sb *sandbox.Sandbox, bin, dir string) (runTimes, error) {
	var t runTimes
	start := time.Now()
	c, err := sb.Prepare(ctx, sandbox.Spec{Path: bin, Dir: dir, Agent: sandbox.AgentCommand})
	if err != nil {
		return t, fmt.Errorf("prepare a run of %s (%s): %w", bin, sb.Mode(), err)
	}
	t.prepare = time.Since(start)
	cmd := exec.CommandContext(ctx, c.Path, c.Args...)
	var out bytes.Buffer
	cmd.Dir, cmd.Env, cmd.ExtraFiles, cmd.Stdout, cmd.Stderr = c.Dir, c.Env, c.ExtraFiles, &out, &out
	if err = cmd.Start(); err == nil {
		c.Started(cmd.Process)
		err = cmd.Wait()
	}
	t.run = time.Since(start) - t.prepare
	c.Close()
	t.close = time.Since(start) - t.prepare - t.run
	if err != nil {
		return t, fmt.Errorf("run %s (%s): %w: %s", bin, sb.Mode(), err, strings.TrimSpace(out.String()))
	}
	return t, nil
}

// gitOut runs git in dir, isolated from the machine's configuration, and returns its
// output trimmed.
func gitOut(ctx context.Context, dir string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Dir, cmd.Env = dir, append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL="+os.DevNull)
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return "", fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(ee.Stderr)))
		}
		return "", fmt.Errorf("git %s: %w", strings.Join(args, " "), err)
	}
	return strings.TrimSpace(string(out)), nil
}
