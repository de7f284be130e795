package worker

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"

	"github.com/whilly-go/whilly/agent"
	"github.com/whilly-go/whilly/control/client"
	"github.com/whilly-go/whilly/internal/config"
)

// Workspaces are per-plan git checkouts under one directory (WHILLY_WORKSPACE_DIR):
//
//	<root>/<key>/       the checkout of the plan's branch
//	<root>/<key>.lock   its lock (flock), holding the plan id; its mtime is the last use
//
// where key is the plan id made safe for a file name plus a hash of it. A task locks its
// plan's checkout, fetches the plan branch fresh from the remote (or the base branch when
// the plan branch does not exist yet), runs the agent in it, and publishes what the agent
// changed as one commit pushed fast-forward. The push token reaches git only through the
// environment of the git commands that talk to the remote (GIT_CONFIG_* entries): never
// .git/config, argv, the agent's environment or a log.

// ReasonWorkspace is the class of the FAIL reasons of a task whose workspace could not
// be prepared or published ("workspace: push rejected twice" …).
const ReasonWorkspace = "workspace"

// Default commit author when the workspace names none.
const (
	defaultAuthorName  = "whilly[bot]"
	defaultAuthorEmail = "whilly[bot]@users.noreply.github.com"
	gitTimeout         = 10 * time.Minute // one git command; a first fetch of a big repository is slow
)

// DefaultWorkspaceDir returns <os.UserCacheDir>/whilly/workspaces.
func DefaultWorkspaceDir() (string, error) {
	dir, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("find the user cache directory (set %s): %w", config.WorkspaceDir, err)
	}
	return filepath.Join(dir, "whilly", "workspaces"), nil
}

// Workspaces manages the checkouts under one root directory.
type Workspaces struct {
	root string
	git  string
	log  *slog.Logger
	gate GatePolicy // set by the worker

	mu       sync.Mutex
	coreConf string // .git/config of a fresh `git init` on this machine, see coreConfig
}

// NewWorkspaces returns the workspaces under root, run with the git executable gitBin
// ("" finds git on PATH). Nothing is created until a workspace is opened.
func NewWorkspaces(root, gitBin string, log *slog.Logger) *Workspaces {
	if gitBin == "" {
		gitBin = "git"
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Workspaces{root: root, git: gitBin, log: log}
}

// Root returns the directory holding the workspaces.
func (ws *Workspaces) Root() string { return ws.root }

var unsafeKey = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

// key is the file name of a plan's workspace: readable, and unique thanks to the hash.
func key(planID string) string {
	name := strings.Trim(unsafeKey.ReplaceAllString(planID, "_"), "._")
	if len(name) > 60 {
		name = name[:60]
	}
	return fmt.Sprintf("%s-%s", name, shortHash(planID))
}

// Dir returns where the checkout of planID lives (it may not exist).
func (ws *Workspaces) Dir(planID string) string { return filepath.Join(ws.root, key(planID)) }

func (ws *Workspaces) lockPath(planID string) string { return ws.Dir(planID) + ".lock" }

// Checkout is a plan's workspace, locked for one task.
type Checkout struct {
	// Dir is the work tree the agent runs in.
	Dir    string
	planID string
	spec   client.Workspace
	start  string // the commit the task started from
	git    git
	lock   *fileLock
	core   string // the [core] settings .git/config is rewritten with
	gate   GatePolicy
	log    *slog.Logger
}

// GatePolicy is the machine's side of the diff gate: WHILLY_PROTECTED_PATHS and
// WHILLY_DIFF_MAX_BYTES (zero values: the defaults). The workspace adds its own limits.
type GatePolicy struct {
	Protected []string
	MaxBytes  int64
}

// coreConfig returns the .git/config a fresh `git init` writes on this machine (core
// settings such as ignorecase on macOS), made once in a scratch directory: the
// workspace's own .git/config is not to be trusted after an agent ran there.
func (ws *Workspaces) coreConfig(ctx context.Context) (string, error) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if ws.coreConf != "" {
		return ws.coreConf, nil
	}
	dir, err := os.MkdirTemp("", "whilly-git-init-")
	if err != nil {
		return "", fmt.Errorf("create a scratch repository: %w", err)
	}
	defer func() { _ = os.RemoveAll(dir) }()
	if _, err := (git{bin: ws.git, dir: dir}).run(ctx, false, "init", "-q"); err != nil {
		return "", err
	}
	b, err := os.ReadFile(filepath.Join(dir, ".git", "config"))
	if err != nil {
		return "", fmt.Errorf("read a fresh .git/config: %w", err)
	}
	ws.coreConf = string(b)
	return ws.coreConf, nil
}

// Open locks the workspace of planID, waiting while another worker of this machine uses
// it, and brings it to the head of the plan's branch on the remote: fetched fresh, local
// changes and untracked files of earlier attempts discarded (ignored files, such as build
// caches, are kept).
func (ws *Workspaces) Open(ctx context.Context, planID string, spec client.Workspace) (*Checkout, error) {
	if err := validSpec(spec); err != nil {
		return nil, err
	}
	if ws.root == "" {
		return nil, fmt.Errorf("open workspace: no workspace directory (set %s)", config.WorkspaceDir)
	}
	if err := os.MkdirAll(ws.root, 0o750); err != nil {
		return nil, fmt.Errorf("create the workspace directory: %w", err)
	}
	lock, err := lockFile(ctx, ws.lockPath(planID), true)
	if err != nil {
		return nil, fmt.Errorf("lock the workspace of plan %s: %w", planID, err)
	}
	core, err := ws.coreConfig(ctx)
	if err != nil {
		_ = lock.unlock()
		return nil, stageError("init", err)
	}
	c := &Checkout{Dir: ws.Dir(planID), planID: planID, spec: spec, lock: lock, core: core, gate: ws.gate,
		log: ws.log.With("plan_id", planID)}
	c.git = git{bin: ws.git, dir: c.Dir, spec: spec}
	_, statErr := os.Lstat(c.Dir)
	err = c.prepare(ctx, ws.lockPath(planID))
	if err != nil && statErr == nil && ctx.Err() == nil && c.tokenValid() == nil {
		// An existing checkout may be what is broken (an agent deleted objects, replaced
		// .git, left a lock): start it over once from an empty directory.
		c.log.WarnContext(ctx, "workspace unusable; cloning it afresh", "error", err)
		if rerr := os.RemoveAll(c.Dir); rerr != nil {
			_ = c.Close()
			return nil, stageError("init", fmt.Errorf("remove the broken workspace: %w", rerr))
		}
		err = c.prepare(ctx, ws.lockPath(planID))
	}
	if err != nil {
		_ = c.Close()
		return nil, err
	}
	return c, nil
}

// Close unlocks the workspace.
func (c *Checkout) Close() error {
	if c.lock == nil {
		return nil
	}
	err := c.lock.unlock()
	c.lock = nil
	return err
}

// StartSHA is the commit the task started from.
func (c *Checkout) StartSHA() string { return c.start }

var branchPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._/-]*$`)

func validBranch(b string) bool {
	return branchPattern.MatchString(b) && !strings.Contains(b, "..") && !strings.Contains(b, "//") &&
		!strings.HasSuffix(b, "/") && !strings.HasSuffix(b, ".lock") && !strings.HasSuffix(b, ".") && len(b) <= 200
}

// planBranch is the only kind of branch a worker pushes to (SPEC §11): whilly/issue-N.
var planBranch = regexp.MustCompile(`^whilly/issue-[1-9][0-9]{0,9}$`)

func validSpec(s client.Workspace) error {
	if !validBranch(s.Branch) {
		return fmt.Errorf("workspace branch %q is not a valid branch name", s.Branch)
	}
	if !planBranch.MatchString(s.Branch) {
		return fmt.Errorf("workspace branch %q is not a plan branch (whilly/issue-N); the worker pushes to nothing else", s.Branch)
	}
	if s.BaseBranch != "" && !validBranch(s.BaseBranch) {
		return fmt.Errorf("workspace base branch %q is not a valid branch name", s.BaseBranch)
	}
	u, err := url.Parse(s.CloneURL)
	if err != nil || u.Scheme == "" || strings.HasPrefix(s.CloneURL, "-") || strings.ContainsFunc(s.CloneURL, unicode.IsControl) {
		return fmt.Errorf("workspace clone_url %q is not a URL", agent.Redact(s.CloneURL))
	}
	switch u.Scheme {
	case "https", "http", "file", "ssh":
	default:
		return fmt.Errorf("workspace clone_url has the unsupported scheme %q", u.Scheme)
	}
	if _, has := u.User.Password(); has {
		// It would be written to .git/config; the token travels in Token instead.
		return errors.New("workspace clone_url must not carry a password")
	}
	return nil
}

// prepare initialises the checkout if needed and resets it to the remote branch.
func (c *Checkout) prepare(ctx context.Context, lockPath string) error {
	// The lock file names its plan (for gc and for removal when the plan ends) and its
	// mtime records the last use.
	if err := os.WriteFile(lockPath, []byte(c.planID+"\n"), 0o600); err != nil {
		return fmt.Errorf("record the workspace's plan: %w", err)
	}
	if _, err := os.Stat(filepath.Join(c.Dir, ".git")); errors.Is(err, os.ErrNotExist) {
		if err := os.MkdirAll(c.Dir, 0o750); err != nil {
			return fmt.Errorf("create the workspace: %w", err)
		}
		if _, err := c.git.run(ctx, false, "init", "-q"); err != nil {
			return stageError("init", err)
		}
	}
	if err := c.resetGitState(); err != nil {
		return stageError("init", err)
	}
	if err := c.clearAgentState(); err != nil {
		return stageError("init", err)
	}
	if err := c.tokenValid(); err != nil {
		return stageError("fetch", err)
	}
	heads, defaultBranch, err := c.remoteHeads(ctx)
	if err != nil {
		return stageError("fetch", err)
	}
	base := c.spec.BaseBranch
	if base == "" {
		base = defaultBranch
	}
	from := c.spec.Branch
	if _, ok := heads[from]; !ok {
		from = base
		if _, ok := heads[base]; !ok || base == "" {
			return stageError("fetch", fmt.Errorf("the remote has neither branch %s nor its base branch %q", c.spec.Branch, base))
		}
		c.log.InfoContext(ctx, "plan branch not on the remote yet; starting it from the base", "branch", c.spec.Branch, "base", base)
	}
	remoteRef := "refs/remotes/origin/" + from
	if _, err := c.remote(ctx, "fetch", "-q", "--no-tags", "origin", "+refs/heads/"+from+":"+remoteRef); err != nil {
		return stageError("fetch", err)
	}
	if _, err := c.git.run(ctx, false, "checkout", "-q", "-f", "--no-track", "-B", c.spec.Branch, remoteRef); err != nil {
		return stageError("checkout", err)
	}
	// Ignored files go too: what an earlier agent left in .claude/, node_modules/ or a
	// path it listed in .git/info/exclude must not reach this task.
	if _, err := c.git.run(ctx, false, "clean", "-q", "-ffdx"); err != nil {
		return stageError("checkout", err)
	}
	if err := c.dropRefs(ctx, "refs/heads/"+c.spec.Branch, remoteRef); err != nil {
		return stageError("checkout", err)
	}
	head, err := c.git.run(ctx, false, "rev-parse", "HEAD")
	if err != nil {
		return stageError("checkout", err)
	}
	c.start = strings.TrimSpace(head)
	return nil
}

// resetGitState rewrites .git/config from scratch and drops half-done merges and
// rebases. The agent may have edited .git (a hook, core.fsmonitor, url.insteadOf …): the
// git commands that carry the token must not run what it left there.
func (c *Checkout) resetGitState() error {
	gitDir := filepath.Join(c.Dir, ".git")
	info, err := os.Lstat(gitDir)
	if err != nil {
		return fmt.Errorf("inspect .git: %w", err)
	}
	if !info.IsDir() {
		// A .git file (gitdir: elsewhere) or a symlink would send git somewhere else.
		return errors.New(".git is not a directory; remove the workspace")
	}
	cfg := strings.TrimRight(c.core, "\n") + "\n[remote \"origin\"]\n\turl = " + gitQuote(c.spec.CloneURL) +
		"\n\tfetch = +refs/heads/*:refs/remotes/origin/*\n"
	// Removed first: a symlink left there must not redirect the write.
	if err := os.Remove(filepath.Join(gitDir, "config")); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("replace .git/config: %w", err)
	}
	if err := os.WriteFile(filepath.Join(gitDir, "config"), []byte(cfg), 0o600); err != nil {
		return fmt.Errorf("write .git/config: %w", err)
	}
	// Attributes and grafts would change what git reads; worktrees and modules are the
	// agent's to fill; shallow and alternates would change which history git sees.
	// info/exclude stays until the next task (clearAgentState): what the agent excluded
	// is not committed, and is deleted then.
	for _, name := range []string{"config.worktree", "commondir", "MERGE_HEAD", "MERGE_MSG", "MERGE_MODE",
		"CHERRY_PICK_HEAD", "REVERT_HEAD", "rebase-merge", "rebase-apply", "sequencer", "index.lock",
		"info/attributes", "info/grafts", "worktrees", "modules", "shallow", "objects/info/alternates",
		"objects/info/http-alternates"} {
		if err := os.RemoveAll(filepath.Join(gitDir, name)); err != nil {
			return fmt.Errorf("clear .git/%s: %w", name, err)
		}
	}
	return nil
}

// clearAgentState empties .git/info (exclude and everything else) and .git/hooks before a
// task: nothing an earlier agent put there reaches the next one.
func (c *Checkout) clearAgentState() error {
	gitDir := filepath.Join(c.Dir, ".git")
	for _, name := range []string{"info", "hooks"} {
		if err := os.RemoveAll(filepath.Join(gitDir, name)); err != nil {
			return fmt.Errorf("clear .git/%s: %w", name, err)
		}
		// Empty again, as tools that install hooks or exclude files expect them.
		if err := os.Mkdir(filepath.Join(gitDir, name), 0o750); err != nil {
			return fmt.Errorf("recreate .git/%s: %w", name, err)
		}
	}
	return nil
}

// dropRefs deletes every ref but keep: branches, tags, stashes, notes and replace refs an
// agent made. None of them is pushed (the push names one ref), and none may steer git.
func (c *Checkout) dropRefs(ctx context.Context, keep ...string) error {
	out, err := c.git.run(ctx, false, "for-each-ref", "--format=%(refname)")
	if err != nil {
		return err
	}
	var del strings.Builder
	for ref := range strings.Lines(out) {
		if ref = strings.TrimSpace(ref); ref != "" && !slices.Contains(keep, ref) {
			del.WriteString("delete " + ref + "\n")
		}
	}
	if del.Len() == 0 {
		return nil
	}
	_, err = c.git.runInput(ctx, false, del.String(), "update-ref", "--no-deref", "--stdin")
	return err
}

// remote runs a git command that talks to the remote, carrying the token, after writing
// .git/config afresh: nothing the agent (or a process it left) put there since the last
// rewrite steers it.
func (c *Checkout) remote(ctx context.Context, args ...string) (string, error) {
	if err := c.resetGitState(); err != nil {
		return "", err
	}
	return c.git.run(ctx, true, args...)
}

// remoteHeads lists the remote's branches among the plan branch and the base (and its
// default branch when no base is named), in one round trip.
func (c *Checkout) remoteHeads(ctx context.Context) (map[string]string, string, error) {
	args := []string{"ls-remote", "--symref", "origin", "refs/heads/" + c.spec.Branch}
	if c.spec.BaseBranch != "" {
		args = append(args, "refs/heads/"+c.spec.BaseBranch)
	} else {
		args = append(args, "HEAD")
	}
	out, err := c.remote(ctx, args...)
	if err != nil {
		return nil, "", err
	}
	heads := map[string]string{}
	def := ""
	for line := range strings.Lines(out) {
		left, ref, ok := strings.Cut(strings.TrimSpace(line), "\t")
		if !ok {
			continue
		}
		if target, isSym := strings.CutPrefix(left, "ref: "); isSym {
			if ref == "HEAD" {
				def = strings.TrimPrefix(target, "refs/heads/")
			}
			continue
		}
		if name, ok := strings.CutPrefix(ref, "refs/heads/"); ok {
			heads[name] = left
		}
	}
	if c.spec.BaseBranch == "" && def != "" {
		// The default branch is known by name only; it exists if HEAD resolved.
		if _, ok := heads[def]; !ok {
			heads[def] = ""
		}
	}
	return heads, def, nil
}

// tokenValid says clearly when the push token has expired, rather than letting git
// fail with an authentication error; the next claim brings a fresh one.
func (c *Checkout) tokenValid() error {
	if exp := c.spec.TokenExpiresAt; exp != nil && c.spec.Token != "" && !time.Now().Before(*exp) {
		return fmt.Errorf("the push token expired at %s; the next attempt gets a new one", exp.UTC().Format(time.RFC3339))
	}
	return nil
}

// Publication is what publishing a task's changes did.
type Publication struct {
	HeadSHA   string // the plan branch's head on the remote after the push; "" with NoChanges
	NoChanges bool   // the agent changed nothing; nothing was committed or pushed
	Rebased   bool   // the first push was rejected and the commit was rebased once
	Files     int
	Lines     int
}

// WorkspaceError is a git failure of one stage of a workspace: init, fetch, checkout,
// commit, push, rebase.
type WorkspaceError struct {
	Stage string
	Err   error
}

func (e *WorkspaceError) Error() string { return "workspace " + e.Stage + ": " + e.Err.Error() }
func (e *WorkspaceError) Unwrap() error { return e.Err }

func stageError(stage string, err error) error {
	var we *WorkspaceError
	if errors.As(err, &we) {
		return err
	}
	return &WorkspaceError{Stage: stage, Err: err}
}

// errPushRejected means the remote refused a fast-forward push because the branch moved.
var errPushRejected = errors.New("push rejected: the branch moved on the remote")

// CommitMessage is "<task id>: <first line of the description>", bounded, with trailers
// naming the plan and the task.
func CommitMessage(planID, taskID, description string) string {
	first := ""
	for line := range strings.Lines(description) {
		if first = strings.TrimSpace(line); first != "" {
			break
		}
	}
	subject := taskID + ": " + first
	if r := []rune(subject); len(r) > 100 {
		subject = strings.TrimSpace(string(r[:99])) + "…"
	}
	return subject + "\n\nWhilly-Plan: " + planID + "\nWhilly-Task: " + taskID + "\n"
}

// Publish commits everything the agent changed as one commit with message on top of the
// task's start, checks every commit between the start and what is to be pushed with the
// diff gate (a *DiffRejectedError refuses it), and pushes that one commit, fast-forward,
// to the plan branch and nowhere else; a push rejected because the branch moved is
// fetched, rebased once, checked again and pushed again. Commits the agent made itself
// are folded into the one commit. Other failures are *WorkspaceError.
func (c *Checkout) Publish(ctx context.Context, message string) (Publication, error) {
	if err := c.resetGitState(); err != nil {
		return Publication{}, stageError("commit", err)
	}
	if err := c.tokenValid(); err != nil {
		return Publication{}, stageError("push", err)
	}
	if _, err := c.git.run(ctx, false, "add", "-A"); err != nil {
		return Publication{}, stageError("commit", err)
	}
	// One commit per task, on the start: the agent's own commits (if any) are folded in.
	if _, err := c.git.run(ctx, false, "reset", "-q", "--soft", c.start); err != nil {
		return Publication{}, stageError("commit", err)
	}
	changed, err := c.git.run(ctx, false, "diff", "--cached", "--name-only", "-z", "--no-renames", c.start)
	if err != nil {
		return Publication{}, stageError("commit", err)
	}
	if changed == "" {
		return Publication{NoChanges: true}, nil
	}
	if _, err := c.git.runInput(ctx, false, message, "commit", "-q", "--no-verify", "--cleanup=strip", "-F", "-"); err != nil {
		return Publication{}, stageError("commit", err)
	}
	head, err := c.head(ctx)
	if err != nil {
		return Publication{}, stageError("commit", err)
	}
	pub, err := c.check(ctx, c.start, head)
	if err != nil {
		return pub, err
	}
	if err := ctx.Err(); err != nil {
		return pub, stageError("push", err) // the lease is gone or the worker stops: push nothing
	}
	err = c.push(ctx, head)
	if errors.Is(err, errPushRejected) {
		c.log.InfoContext(ctx, "push rejected; rebasing once", "branch", c.spec.Branch)
		pub.Rebased = true
		base, err := c.rebase(ctx)
		if err != nil {
			return pub, err
		}
		if head, err = c.head(ctx); err != nil {
			return pub, stageError("rebase", err)
		}
		// The branch's new commits are on the remote already; what is checked is ours.
		checked, err := c.check(ctx, base, head)
		checked.Rebased = true
		if err != nil {
			return checked, err
		}
		pub = checked
		err = c.push(ctx, head)
		if errors.Is(err, errPushRejected) {
			return pub, stageError("push", fmt.Errorf("%w again after a rebase", err))
		}
		if err != nil {
			return pub, stageError("push", err)
		}
		pub.HeadSHA = head
		return pub, nil
	}
	if err != nil {
		return pub, stageError("push", err)
	}
	pub.HeadSHA = head
	return pub, nil
}

func (c *Checkout) head(ctx context.Context) (string, error) {
	out, err := c.git.run(ctx, false, "rev-parse", "--verify", "HEAD^{commit}")
	return strings.TrimSpace(out), err
}

// limits is the diff gate's policy for this workspace.
func (c *Checkout) limits() DiffLimits {
	return DiffLimits{AllowWorkflows: c.spec.AllowWorkflows, MaxFiles: c.spec.MaxFiles, MaxLines: c.spec.MaxLines,
		MaxBytes: c.gate.MaxBytes, Protected: c.gate.Protected}
}

// check runs the diff gate over every commit in from..to.
func (c *Checkout) check(ctx context.Context, from, to string) (Publication, error) {
	d, err := c.rangeDiff(ctx, from, to)
	var rej *DiffRejectedError
	if errors.As(err, &rej) {
		return Publication{}, err
	}
	if err != nil {
		return Publication{}, stageError("commit", err)
	}
	pub := Publication{Files: len(d.Files), Lines: d.Lines()}
	if reasons := CheckDiff(d, c.limits()); len(reasons) > 0 {
		return pub, &DiffRejectedError{Reasons: reasons, Files: pub.Files, Lines: pub.Lines}
	}
	return pub, nil
}

// rangeDiff reads what each commit of from..to changes against its parent. from must be
// an ancestor of to and every commit must have one parent: anything else is history the
// task did not write, refused as RuleRef.
func (c *Checkout) rangeDiff(ctx context.Context, from, to string) (Diff, error) {
	refuse := func(detail string) error {
		return &DiffRejectedError{Reasons: []DiffReason{{Rule: RuleRef, Detail: detail}}}
	}
	if _, err := c.git.run(ctx, false, "merge-base", "--is-ancestor", from, to); err != nil {
		return Diff{}, refuse("the commits to push do not descend from the task's start")
	}
	out, err := c.git.run(ctx, false, "rev-list", "--reverse", "--parents", from+".."+to)
	if err != nil {
		return Diff{}, err
	}
	var all Diff
	for line := range strings.Lines(out) {
		ids := strings.Fields(line)
		if len(ids) != 2 {
			return Diff{}, refuse("commit " + ids[0] + " is a merge or has no parent")
		}
		d, err := c.commitDiff(ctx, ids[1], ids[0])
		if err != nil {
			return Diff{}, err
		}
		// A commit too large to read has no added lines; the sums then break a limit.
		all.Files = append(all.Files, d.Files...)
		all.Added = append(all.Added, d.Added...)
	}
	return all, nil
}

// commitDiff reads what commit b changes against a: numstat with every file read as text
// (-a: .gitattributes cannot hide a file from the gate), the new blobs' modes and sizes,
// symlink targets, and the added lines unless the change is too large for the gate
// anyway.
func (c *Checkout) commitDiff(ctx context.Context, a, b string) (Diff, error) {
	common := []string{"diff", "-a", "--no-renames", "--no-color", "--no-ext-diff", "--no-textconv", "--src-prefix=a/", "--dst-prefix=b/"}
	out, err := c.git.run(ctx, false, append(common, "--numstat", "-z", a, b)...)
	if err != nil {
		return Diff{}, err
	}
	files, err := parseNumstat([]byte(out))
	if err != nil {
		return Diff{}, err
	}
	rawOut, err := c.git.run(ctx, false, "diff-tree", "-r", "-z", "--raw", "--no-renames", a, b)
	if err != nil {
		return Diff{}, err
	}
	raw, err := parseRaw([]byte(rawOut))
	if err != nil {
		return Diff{}, err
	}
	byPath := map[string]rawChange{}
	var blobs strings.Builder
	for _, r := range raw {
		byPath[r.Path] = r
		if r.NewBlob != "" && r.NewMode != modeGitlink {
			blobs.WriteString(r.NewBlob + "\n")
		}
	}
	sizes := map[string]int64{}
	if blobs.Len() > 0 {
		out, err := c.git.runInput(ctx, false, blobs.String(), "cat-file", "--batch-check")
		if err != nil {
			return Diff{}, err
		}
		for line := range strings.Lines(out) {
			f := strings.Fields(line)
			if len(f) == 3 {
				n, _ := strconv.ParseInt(f[2], 10, 64)
				sizes[f[0]] = n
			}
		}
	}
	for i := range files {
		r, ok := byPath[files[i].Path]
		if !ok {
			continue
		}
		files[i].Mode, files[i].Bytes = r.NewMode, sizes[r.NewBlob]
		if r.NewMode == modeSymlink && files[i].Bytes <= 4096 {
			target, err := c.git.run(ctx, false, "cat-file", "blob", r.NewBlob)
			if err != nil {
				return Diff{}, err
			}
			files[i].Target = target
		}
	}
	d := Diff{Files: files}
	lim := c.limits().withDefaults()
	if len(files) == 0 || len(files) > lim.MaxFiles || d.Lines() > lim.MaxLines || d.Bytes() > lim.MaxBytes {
		return d, nil
	}
	patch, err := c.git.run(ctx, false, append(common, "-U0", a, b)...)
	if err != nil {
		return Diff{}, err
	}
	d.Added = parseAddedLines([]byte(patch))
	return d, nil
}

// push pushes commit head to the plan branch, fast-forward only, with an explicit refspec
// naming that one ref: no tag, note or replace ref goes along.
func (c *Checkout) push(ctx context.Context, head string) error {
	out, err := c.remote(ctx, "push", "--porcelain", "--no-verify", "--no-follow-tags", "origin", head+":refs/heads/"+c.spec.Branch)
	if err == nil {
		return nil
	}
	var ge *gitError
	if errors.As(err, &ge) {
		for line := range strings.Lines(out + "\n" + ge.stderr) {
			if pushLostRace(line) {
				return errPushRejected
			}
		}
	}
	return err
}

// pushLostRace reports whether a line of `git push --porcelain` says the branch moved
// under the push: a non-fast-forward rejection, or the remote refusing to create a branch
// that another push created a moment before ("cannot lock ref …: reference already
// exists", two tasks starting from the base). Either way fetch, rebase, push again.
func pushLostRace(line string) bool {
	if !strings.HasPrefix(line, "!") {
		return false
	}
	return strings.Contains(line, "[rejected]") && (strings.Contains(line, "fetch first") || strings.Contains(line, "non-fast-forward")) ||
		strings.Contains(line, "[remote rejected]") && strings.Contains(line, "reference already exists")
}

// rebase replays the task's commit on the branch's new head, which it returns.
func (c *Checkout) rebase(ctx context.Context) (string, error) {
	remoteRef := "refs/remotes/origin/" + c.spec.Branch
	if _, err := c.remote(ctx, "fetch", "-q", "--no-tags", "origin", "+refs/heads/"+c.spec.Branch+":"+remoteRef); err != nil {
		return "", stageError("rebase", err)
	}
	base, err := c.git.run(ctx, false, "rev-parse", "--verify", remoteRef+"^{commit}")
	if err != nil {
		return "", stageError("rebase", err)
	}
	if _, err := c.git.run(ctx, false, "rebase", "-q", "--no-autosquash", remoteRef); err != nil {
		_, _ = c.git.run(context.WithoutCancel(ctx), false, "rebase", "--abort")
		return "", stageError("rebase", fmt.Errorf("the task's commit does not apply on the branch's new head: %w", err))
	}
	return strings.TrimSpace(base), nil
}

// Remove deletes the workspace of planID, waiting for its lock so that no task of this
// machine is using it.
func (ws *Workspaces) Remove(ctx context.Context, planID string) error {
	lockPath := ws.lockPath(planID)
	if _, err := os.Stat(lockPath); errors.Is(err, os.ErrNotExist) {
		if _, err := os.Stat(ws.Dir(planID)); errors.Is(err, os.ErrNotExist) {
			return nil
		}
	}
	lock, err := lockFile(ctx, lockPath, true)
	if err != nil {
		return fmt.Errorf("lock the workspace of plan %s: %w", planID, err)
	}
	return removeLocked(ws.Dir(planID), lockPath, lock)
}

// removeLocked deletes a workspace and its lock file while holding the lock: whoever
// waits on the old lock file sees it gone and locks a new one (see lockFile).
func removeLocked(dir, lockPath string, lock *fileLock) error {
	err := os.RemoveAll(dir)
	if rerr := os.Remove(lockPath); rerr != nil && !errors.Is(rerr, os.ErrNotExist) && err == nil {
		err = rerr
	}
	if uerr := lock.unlock(); uerr != nil && err == nil {
		err = uerr
	}
	if err != nil {
		return fmt.Errorf("remove workspace %s: %w", dir, err)
	}
	return nil
}

// git runs git commands in a workspace.
type git struct {
	bin  string
	dir  string
	spec client.Workspace
}

// gitError is a git command that failed, with its redacted, bounded stderr.
type gitError struct {
	args   string
	code   int
	stderr string
}

func (e *gitError) Error() string {
	msg := strings.TrimSpace(e.stderr)
	if msg == "" {
		msg = "no output"
	}
	return fmt.Sprintf("git %s: exit status %d: %s", e.args, e.code, msg)
}

func (g git) run(ctx context.Context, remote bool, args ...string) (string, error) {
	return g.runInput(ctx, remote, "", args...)
}

// runInput runs git args with stdin; remote commands get the token. Output is redacted.
// Each command gets a HOME of its own, empty, removed afterwards.
func (g git) runInput(ctx context.Context, remote bool, stdin string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, gitTimeout)
	defer cancel()
	home, err := os.MkdirTemp("", "whilly-git-home-")
	if err != nil {
		return "", fmt.Errorf("create an empty HOME for git: %w", err)
	}
	defer func() { _ = os.RemoveAll(home) }()
	cmd := exec.CommandContext(ctx, g.bin, args...)
	cmd.Dir = g.dir
	cmd.Env = g.env(remote, home)
	cmd.WaitDelay = 5 * time.Second
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	out := stdout.String()
	if err == nil {
		return out, nil
	}
	if ctx.Err() != nil {
		return out, fmt.Errorf("git %s: %w", args[0], ctx.Err())
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return out, fmt.Errorf("run git %s: %w", args[0], err)
	}
	return out, &gitError{args: args[0], code: ee.ExitCode(), stderr: g.scrub(stderr.String())}
}

// scrub redacts git's output for error messages: the token, should git ever echo it, and
// any other secret pattern; bounded to its tail.
func (g git) scrub(s string) string {
	if g.spec.Token != "" {
		s = strings.ReplaceAll(s, g.spec.Token, "[REDACTED]")
		s = strings.ReplaceAll(s, basicAuth(g.spec.Token), "[REDACTED]")
	}
	s = agent.Redact(s)
	if len(s) > 2000 {
		s = "…" + s[len(s)-2000:]
	}
	return s
}

// env is the environment of a git command (SPEC §16: git outside the box, clean): the
// worker's, without git's own variables and without HOME, plus an empty HOME, no system
// or global configuration (so nothing an agent wrote to ~/.gitconfig, ~/.config/git or
// $GIT_CONFIG_GLOBAL counts), replace refs and grafts ignored, and whilly's settings as
// GIT_CONFIG_* entries: hooks off, no fsmonitor, no credential helper, ext:: refused.
// Commands that talk to the remote also get the token, as an Authorization header
// scoped to the clone URL.
func (g git) env(remote bool, home string) []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if (strings.HasPrefix(name, "GIT_") && !keptGitVar(name)) || name == "HOME" || name == "XDG_CONFIG_HOME" {
			continue
		}
		env = append(env, kv)
	}
	name, email := g.spec.AuthorName, g.spec.AuthorEmail
	if name == "" {
		name = defaultAuthorName
	}
	if email == "" {
		email = defaultAuthorEmail
	}
	env = append(env, "HOME="+home, "XDG_CONFIG_HOME="+home, "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL="+os.DevNull,
		"GIT_NO_REPLACE_OBJECTS=1", "GIT_TERMINAL_PROMPT=0", "GCM_INTERACTIVE=never", "LC_ALL=C",
		"GIT_AUTHOR_NAME="+name, "GIT_AUTHOR_EMAIL="+email, "GIT_COMMITTER_NAME="+name, "GIT_COMMITTER_EMAIL="+email)
	cfg := [][2]string{
		{"core.hooksPath", os.DevNull}, // no hook runs, whatever the agent left in .git/hooks
		{"core.fsmonitor", "false"},
		{"protocol.ext.allow", "never"}, // no ext:: URL runs a command
		{"commit.gpgSign", "false"},
		{"credential.helper", ""}, // no helper is asked for, or stores, anything
		{"push.followTags", "false"},
		{"gc.auto", "0"}, // no background gc holding files while a workspace is removed
		{"init.defaultBranch", "main"},
		{"advice.detachedHead", "false"},
	}
	if remote && g.spec.Token != "" {
		cfg = append(cfg, [2]string{"http." + g.spec.CloneURL + ".extraHeader", "Authorization: Basic " + basicAuth(g.spec.Token)})
	}
	env = append(env, "GIT_CONFIG_COUNT="+strconv.Itoa(len(cfg)))
	for i, kv := range cfg {
		env = append(env, fmt.Sprintf("GIT_CONFIG_KEY_%d=%s", i, kv[0]), fmt.Sprintf("GIT_CONFIG_VALUE_%d=%s", i, kv[1]))
	}
	return env
}

// keptGitVar reports the git variables of the worker's environment that git still sees:
// TLS and SSH settings. The others (GIT_DIR, GIT_WORK_TREE, GIT_INDEX_FILE,
// GIT_CONFIG_*, GIT_TRACE* …) would redirect, reconfigure or trace the workspace's git.
func keptGitVar(name string) bool {
	switch name {
	case "GIT_SSL_CAINFO", "GIT_SSL_CAPATH", "GIT_EXEC_PATH", "GIT_SSH", "GIT_SSH_COMMAND", "GIT_HTTP_USER_AGENT":
		return true
	}
	return false
}

// gitQuote quotes a value for a git config file.
func gitQuote(s string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(s) + `"`
}

// basicAuth is how GitHub takes an installation token over HTTPS: user x-access-token.
func basicAuth(token string) string {
	return base64.StdEncoding.EncodeToString([]byte("x-access-token:" + token))
}
