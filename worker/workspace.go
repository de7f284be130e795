package worker

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/url"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"

	"github.com/whilly-go/whilly/agent"
	"github.com/whilly-go/whilly/control/client"
	"github.com/whilly-go/whilly/internal/config"
	"github.com/whilly-go/whilly/sandbox"
)

// Workspaces are per-plan work trees under one directory (WHILLY_WORKSPACE_DIR), with
// the worker's git kept outside every one of them:
//
//	<root>/.repos/<hash>.git   one bare object store per repository (hash of its clone URL)
//	<root>/.repos/<hash>.lock  its lock (flock), held while fetching; its mtime is the last use
//	<root>/<key>/              the plan's work tree: files only
//	<root>/<key>.index         the plan's git index (the work tree's state at the task's start)
//	<root>/<key>.lock          the plan's lock (flock), naming the plan and its store; its
//	                           mtime is the last use
//
// where key is the plan id made safe for a file name plus a hash of it. A task locks its
// plan, fetches the plan branch and the base branch into the store (under refs/whilly/
// <key>/, so plans of one repository never move each other's refs, and a new plan
// fetches only what is new), and brings the work tree to the start commit with git run
// on the store, the work tree and the plan's index; whatever an earlier attempt left
// (untracked and ignored files, links, FIFOs, nested .git) goes.
//
// The agent may use git: the work tree gets a .git of the attempt's own, written here
// with plain file writes (HEAD, a minimal config, the branch at the start commit, a copy
// of the index, and objects/info/alternates naming the store's objects, which the box
// sees read-only). The worker never runs git on it: it is removed, unread, when the
// attempt is published or the next one starts. What the attempt produced is read from
// the work tree after the box ended — walked without following links, FIFOs, sockets,
// devices and nested .git refused — and committed with git run on the store, the work
// tree and a copy of the plan's index, its new objects written to a quarantine
// directory: a commit the diff gate refuses never reaches the store that later boxes
// read. After the push its objects move into the store.
//
// The push token reaches git only through the environment of the git commands that talk
// to the remote (GIT_CONFIG_* entries): never a config file, argv, the agent's
// environment or a log.

// ReasonWorkspace is the class of the FAIL reasons of a task whose workspace could not
// be prepared or published ("workspace: push rejected twice" …).
const ReasonWorkspace = "workspace"

// Default commit author when the workspace names none.
const (
	defaultAuthorName  = "whilly[bot]"
	defaultAuthorEmail = "whilly[bot]@users.noreply.github.com"
	gitTimeout         = 10 * time.Minute // one git command; a first fetch of a big repository is slow
	storesDir          = ".repos"
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
	if abs, err := filepath.Abs(root); err == nil && root != "" {
		root = abs // git's index and alternates name absolute paths
	}
	return &Workspaces{root: root, git: gitBin, log: log}
}

// Root returns the directory holding the workspaces.
func (ws *Workspaces) Root() string { return ws.root }

// unsafeKey matches what may not appear in a file name made of an id. This package's
// regexps are compiled on first use: this binary is also every sandbox box's init, which
// uses none of them.
var unsafeKey = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`[^A-Za-z0-9._-]+`) })

// key is the file name of a plan's workspace: readable, and unique thanks to the hash.
// It never starts with a dot, so it never names the stores' directory.
func key(planID string) string {
	name := strings.Trim(unsafeKey().ReplaceAllString(planID, "_"), "._")
	if len(name) > 60 {
		name = name[:60]
	}
	return fmt.Sprintf("%s-%s", name, shortHash(planID))
}

// Dir returns where the checkout of planID lives (it may not exist).
func (ws *Workspaces) Dir(planID string) string { return filepath.Join(ws.root, key(planID)) }

func (ws *Workspaces) lockPath(planID string) string { return ws.Dir(planID) + ".lock" }

// indexPath is the plan's git index, next to its work tree.
func indexPath(dir string) string { return dir + ".index" }

// storeName is the name of a repository's object store: its clone URL, hashed.
func storeName(cloneURL string) string { return shortHash(cloneURL) }

func (ws *Workspaces) storePath(name string) string {
	return filepath.Join(ws.root, storesDir, name+".git")
}

func (ws *Workspaces) storeLockPath(name string) string {
	return filepath.Join(ws.root, storesDir, name+".lock")
}

// Checkout is a plan's workspace, locked for one task.
type Checkout struct {
	// Dir is the work tree the agent runs in.
	Dir    string
	planID string
	spec   client.Workspace
	start  string // the commit the task started from
	base   string // the head of the base branch as fetched
	ns     string // the plan's refs in the store: refs/whilly/<key>/
	store  git    // git on the store alone
	sLock  string // the store's lock file, held while fetching into it
	tree   git    // git on the store, the work tree and the plan's index
	lock   *fileLock
	core   string // the .git/config of the attempt's own .git
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
// settings such as ignorecase on macOS), made once in a scratch directory, for the
// attempts' own .git.
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
// it, fetches the plan branch (or the base branch when the plan branch does not exist
// yet) and the base branch into the repository's store, and brings the work tree to the
// plan branch's head: everything an earlier attempt left there, ignored files too, is
// gone.
func (ws *Workspaces) Open(ctx context.Context, planID string, spec client.Workspace) (*Checkout, error) {
	if err := validSpec(spec); err != nil {
		return nil, err
	}
	if ws.root == "" {
		return nil, fmt.Errorf("open workspace: no workspace directory (set %s)", config.WorkspaceDir)
	}
	if err := os.MkdirAll(filepath.Join(ws.root, storesDir), 0o750); err != nil {
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
	name := storeName(spec.CloneURL)
	dir := ws.Dir(planID)
	store := bareGit(ws.git, ws.storePath(name), spec)
	c := &Checkout{Dir: dir, planID: planID, spec: spec, lock: lock, core: core, gate: ws.gate,
		ns: "refs/whilly/" + key(planID) + "/", store: store, sLock: ws.storeLockPath(name), tree: store.withTree(dir, "GIT_INDEX_FILE="+indexPath(dir)),
		log: ws.log.With("plan_id", planID)}
	// The lock file names its plan and its store (for gc and for removal when the plan
	// ends), and its mtime records the last use. Written before the store is locked: gc
	// looks for the stores' users while holding a store's lock.
	if err := os.WriteFile(ws.lockPath(planID), []byte(planID+"\n"+name+"\n"), 0o600); err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("record the workspace's plan: %w", err)
	}
	if err := c.fetch(ctx); err != nil {
		_ = c.Close()
		return nil, err
	}
	err = c.checkout(ctx)
	if err != nil && ctx.Err() == nil {
		// The work tree or the plan's index may be what is broken: start them over once.
		c.log.WarnContext(ctx, "work tree unusable; checking it out afresh", "error", err)
		err = c.checkoutAfresh(ctx)
	}
	if err == nil {
		err = c.writeBoxGit()
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

// Binds are what a box running in the checkout needs besides the work tree: the store's
// objects, read-only, at their own path, where the attempt's .git finds them.
func (c *Checkout) Binds() []sandbox.Bind {
	return []sandbox.Bind{{Src: filepath.Join(c.store.gitDir, "objects"), ReadOnly: true}}
}

// BaseFile returns the contents of the file at path at the head of the base branch as
// fetched when the checkout was opened, never what an agent wrote; an error wrapping
// fs.ErrNotExist when the base branch has no such file.
func (c *Checkout) BaseFile(ctx context.Context, name string) ([]byte, error) {
	clean := path.Clean(name)
	if name == "" || path.IsAbs(name) || clean == "." || strings.HasPrefix(clean, "../") || clean == ".." ||
		strings.ContainsFunc(name, unicode.IsControl) {
		return nil, fmt.Errorf("read %q from the base branch: not a path in the repository", name)
	}
	out, err := c.store.runInput(ctx, false, c.base+":"+clean+"\n", "cat-file", "--batch")
	if err != nil {
		return nil, fmt.Errorf("read %s from the base branch: %w", clean, err)
	}
	header, body, _ := strings.Cut(out, "\n")
	f := strings.Fields(header)
	switch {
	case len(f) == 2 && f[1] == "missing":
		return nil, fmt.Errorf("read %s from the base branch: %w", clean, fs.ErrNotExist)
	case len(f) != 3:
		return nil, fmt.Errorf("read %s from the base branch: unexpected answer %q", clean, header)
	case f[1] != "blob":
		return nil, fmt.Errorf("read %s from the base branch: it is a %s, not a file", clean, f[1])
	}
	size, err := strconv.Atoi(f[2])
	if err != nil || size > len(body) {
		return nil, fmt.Errorf("read %s from the base branch: unexpected answer %q", clean, header)
	}
	return []byte(body[:size]), nil
}

var branchPattern = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._/-]*$`) })

func validBranch(b string) bool {
	return branchPattern().MatchString(b) && !strings.Contains(b, "..") && !strings.Contains(b, "//") &&
		!strings.HasSuffix(b, "/") && !strings.HasSuffix(b, ".lock") && !strings.HasSuffix(b, ".") && len(b) <= 200
}

// planBranch is the only kind of branch a worker pushes to: whilly/issue-N.
var planBranch = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^whilly/issue-[1-9][0-9]{0,9}$`) })

func validSpec(s client.Workspace) error {
	if !validBranch(s.Branch) {
		return fmt.Errorf("workspace branch %q is not a valid branch name", s.Branch)
	}
	if !planBranch().MatchString(s.Branch) {
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
		// It would travel in argv and land in errors; the token travels in Token instead.
		return errors.New("workspace clone_url must not carry a password")
	}
	return nil
}

// fetch brings the plan branch (or the base when the plan branch does not exist yet) and
// the base branch into the store, under the plan's refs, in one fetch, holding the
// store's lock; it sets the start and base commits.
func (c *Checkout) fetch(ctx context.Context) error {
	if err := c.tokenValid(); err != nil {
		return stageError("fetch", err)
	}
	unlock, err := c.lockStore(ctx)
	if err != nil {
		return stageError("fetch", err)
	}
	defer unlock()
	if _, err := os.Stat(filepath.Join(c.store.gitDir, "objects")); errors.Is(err, fs.ErrNotExist) {
		if err := os.RemoveAll(c.store.gitDir); err != nil {
			return stageError("init", fmt.Errorf("clear a half-made store: %w", err))
		}
		if _, err := (git{bin: c.store.bin, dir: filepath.Dir(c.store.gitDir)}).run(ctx, false, "init", "-q", "--bare", c.store.gitDir); err != nil {
			return stageError("init", err)
		}
	}
	heads, defaultBranch, err := c.remoteHeads(ctx)
	if err != nil {
		return stageError("fetch", err)
	}
	base := c.spec.BaseBranch
	if base == "" {
		base = defaultBranch
	}
	if _, ok := heads[base]; !ok || base == "" {
		if _, ok := heads[c.spec.Branch]; !ok {
			return stageError("fetch", fmt.Errorf("the remote has neither branch %s nor its base branch %q", c.spec.Branch, base))
		}
		return stageError("fetch", fmt.Errorf("the remote has no base branch %q", base))
	}
	refspecs := []string{"+refs/heads/" + base + ":" + c.ns + "base"}
	startRef := c.ns + "base"
	if _, ok := heads[c.spec.Branch]; ok {
		refspecs = append(refspecs, "+refs/heads/"+c.spec.Branch+":"+c.ns+"branch")
		startRef = c.ns + "branch"
	} else {
		c.log.InfoContext(ctx, "plan branch not on the remote yet; starting it from the base", "branch", c.spec.Branch, "base", base)
	}
	args := append([]string{"fetch", "-q", "--no-tags", "--no-write-fetch-head", "--", c.spec.CloneURL}, refspecs...)
	if _, err := c.store.run(ctx, true, args...); err != nil {
		return stageError("fetch", err)
	}
	out, err := c.store.run(ctx, false, "rev-parse", startRef+"^{commit}", c.ns+"base^{commit}")
	if err != nil {
		return stageError("fetch", err)
	}
	f := strings.Fields(out)
	if len(f) != 2 {
		return stageError("fetch", fmt.Errorf("unexpected rev-parse output %q", out))
	}
	c.start, c.base = f[0], f[1]
	return nil
}

// lockStore takes the store's lock, waiting for it, and records the store's last use.
func (c *Checkout) lockStore(ctx context.Context) (func(), error) {
	lock, err := lockFile(ctx, c.sLock, true)
	if err != nil {
		return nil, fmt.Errorf("lock the repository's store: %w", err)
	}
	now := time.Now()
	_ = os.Chtimes(c.sLock, now, now) // for gc
	return func() { _ = lock.unlock() }, nil
}

// checkout brings the work tree to the start commit: what an earlier attempt left that
// git must not meet (the attempt's .git, nested .git, FIFOs, sockets, devices) is
// removed first, then untracked and ignored files, then the tracked files are reset.
func (c *Checkout) checkout(ctx context.Context) error {
	if err := os.MkdirAll(c.Dir, 0o750); err != nil {
		return stageError("checkout", fmt.Errorf("create the work tree: %w", err))
	}
	if err := os.RemoveAll(filepath.Join(c.Dir, ".git")); err != nil {
		return stageError("checkout", fmt.Errorf("remove the last attempt's .git: %w", err))
	}
	if err := scrubTree(c.Dir); err != nil {
		return stageError("checkout", err)
	}
	if _, err := c.tree.run(ctx, false, "clean", "-q", "-ffdx"); err != nil {
		return stageError("checkout", err)
	}
	if _, err := c.tree.run(ctx, false, "read-tree", "--reset", "-u", c.start); err != nil {
		return stageError("checkout", err)
	}
	return nil
}

// checkoutAfresh empties the work tree and the plan's index and checks the start out.
func (c *Checkout) checkoutAfresh(ctx context.Context) error {
	if err := removeTree(c.Dir); err != nil {
		return stageError("checkout", err)
	}
	if err := os.Remove(indexPath(c.Dir)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return stageError("checkout", fmt.Errorf("remove the plan's index: %w", err))
	}
	return c.checkout(ctx)
}

// remoteHeads lists the remote's branches among the plan branch and the base (and its
// default branch when no base is named), in one round trip.
func (c *Checkout) remoteHeads(ctx context.Context) (map[string]string, string, error) {
	args := []string{"ls-remote", "--symref", "--", c.spec.CloneURL, "refs/heads/" + c.spec.Branch}
	if c.spec.BaseBranch != "" {
		args = append(args, "refs/heads/"+c.spec.BaseBranch)
	} else {
		args = append(args, "HEAD")
	}
	out, err := c.store.run(ctx, true, args...)
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

// Publish commits what the work tree holds as one commit with message on top of the
// task's start, checks every commit between the start and what is to be pushed with the
// diff gate (a *DiffRejectedError refuses it), and pushes that one commit, fast-forward,
// to the plan branch and nowhere else; a push rejected because the branch moved is
// fetched, merged once, checked again and pushed again. The attempt's .git is discarded
// unread: commits the agent made itself count only by the files they left. Other
// failures are *WorkspaceError.
func (c *Checkout) Publish(ctx context.Context, message string) (Publication, error) {
	if err := c.tokenValid(); err != nil {
		return Publication{}, stageError("push", err)
	}
	if err := os.RemoveAll(filepath.Join(c.Dir, ".git")); err != nil {
		return Publication{}, stageError("commit", fmt.Errorf("remove the attempt's .git: %w", err))
	}
	if err := checkTree(c.Dir); err != nil {
		return Publication{}, err
	}
	q, err := c.quarantine()
	if err != nil {
		return Publication{}, stageError("commit", err)
	}
	defer q.remove()
	g := q.git
	if _, err := g.run(ctx, false, "add", "-A"); err != nil {
		return Publication{}, stageError("commit", err)
	}
	head, err := c.commit(ctx, g, message, c.start)
	if err != nil || head == "" {
		return Publication{NoChanges: head == "" && err == nil}, err
	}
	pub, err := c.check(ctx, g, c.start, head)
	if err != nil {
		return pub, err
	}
	if err := ctx.Err(); err != nil {
		return pub, stageError("push", err) // the lease is gone or the worker stops: push nothing
	}
	err = c.push(ctx, g, head)
	if errors.Is(err, errPushRejected) {
		c.log.InfoContext(ctx, "push rejected; rebasing once", "branch", c.spec.Branch)
		if pub, head, err = c.pushRebased(ctx, g, head, message); err != nil {
			return pub, err
		}
	}
	if err != nil {
		return pub, stageError("push", err)
	}
	pub.HeadSHA = head
	if err := q.migrate(c.store.gitDir); err != nil {
		// The commit is on the remote; the next fetch brings its objects.
		c.log.WarnContext(ctx, "keep the pushed objects in the store", "error", err)
	}
	return pub, nil
}

// pushRebased replays the task's commit head on the branch's new head, checks it and
// pushes it; it returns what it published and the pushed commit.
func (c *Checkout) pushRebased(ctx context.Context, g git, head, message string) (Publication, string, error) {
	base, rebased, err := c.rebase(ctx, g, head, message)
	if err != nil {
		return Publication{Rebased: true}, "", err
	}
	// The branch's new commits are on the remote already; what is checked is ours.
	pub, err := c.check(ctx, g, base, rebased)
	pub.Rebased = true
	if err != nil {
		return pub, "", err
	}
	err = c.push(ctx, g, rebased)
	if errors.Is(err, errPushRejected) {
		return pub, "", stageError("push", fmt.Errorf("%w again after a rebase", err))
	}
	if err != nil {
		return pub, "", stageError("push", err)
	}
	return pub, rebased, nil
}

// commit writes the index's tree as a commit with message on parent, and returns it;
// "" when the tree is the parent's.
func (c *Checkout) commit(ctx context.Context, g git, message, parent string) (string, error) {
	tree, err := g.run(ctx, false, "write-tree")
	if err != nil {
		return "", stageError("commit", err)
	}
	return c.commitTree(ctx, g, strings.TrimSpace(tree), message, parent)
}

// commitTree commits tree with message on parent, unless the tree is the parent's ("").
func (c *Checkout) commitTree(ctx context.Context, g git, tree, message, parent string) (string, error) {
	old, err := g.run(ctx, false, "rev-parse", "--verify", "--end-of-options", parent+"^{tree}")
	if err != nil {
		return "", stageError("commit", err)
	}
	if strings.TrimSpace(old) == tree {
		return "", nil
	}
	out, err := g.runInput(ctx, false, message, "commit-tree", "--no-gpg-sign", "-p", parent, tree)
	if err != nil {
		return "", stageError("commit", err)
	}
	return strings.TrimSpace(out), nil
}

// limits is the diff gate's policy for this workspace.
func (c *Checkout) limits() DiffLimits {
	return DiffLimits{AllowWorkflows: c.spec.AllowWorkflows, MaxFiles: c.spec.MaxFiles, MaxLines: c.spec.MaxLines,
		MaxBytes: c.gate.MaxBytes, Protected: c.gate.Protected}
}

// check runs the diff gate over every commit in from..to.
func (c *Checkout) check(ctx context.Context, g git, from, to string) (Publication, error) {
	d, err := c.rangeDiff(ctx, g, from, to)
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
func (c *Checkout) rangeDiff(ctx context.Context, g git, from, to string) (Diff, error) {
	refuse := func(detail string) error {
		return &DiffRejectedError{Reasons: []DiffReason{{Rule: RuleRef, Detail: detail}}}
	}
	if _, err := g.run(ctx, false, "merge-base", "--is-ancestor", from, to); err != nil {
		return Diff{}, refuse("the commits to push do not descend from the task's start")
	}
	out, err := g.run(ctx, false, "rev-list", "--reverse", "--parents", from+".."+to)
	if err != nil {
		return Diff{}, err
	}
	var all Diff
	for line := range strings.Lines(out) {
		ids := strings.Fields(line)
		if len(ids) != 2 {
			return Diff{}, refuse("commit " + ids[0] + " is a merge or has no parent")
		}
		d, err := c.commitDiff(ctx, g, ids[1], ids[0])
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
func (c *Checkout) commitDiff(ctx context.Context, g git, a, b string) (Diff, error) {
	common := []string{"diff", "-a", "--no-renames", "--no-color", "--no-ext-diff", "--no-textconv", "--src-prefix=a/", "--dst-prefix=b/"}
	out, err := g.run(ctx, false, append(common, "--numstat", "-z", a, b)...)
	if err != nil {
		return Diff{}, err
	}
	files, err := parseNumstat([]byte(out))
	if err != nil {
		return Diff{}, err
	}
	rawOut, err := g.run(ctx, false, "diff-tree", "-r", "-z", "--raw", "--no-renames", a, b)
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
		out, err := g.runInput(ctx, false, blobs.String(), "cat-file", "--batch-check")
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
			target, err := g.run(ctx, false, "cat-file", "blob", r.NewBlob)
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
	patch, err := g.run(ctx, false, append(common, "-U0", a, b)...)
	if err != nil {
		return Diff{}, err
	}
	d.Added = parseAddedLines([]byte(patch))
	return d, nil
}

// push pushes commit head to the plan branch, fast-forward only, with an explicit refspec
// naming that one ref: no tag, note or replace ref goes along.
func (c *Checkout) push(ctx context.Context, g git, head string) error {
	out, err := g.run(ctx, true, "push", "--porcelain", "--no-verify", "--no-follow-tags", "--", c.spec.CloneURL, head+":refs/heads/"+c.spec.Branch)
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

// rebase replays the task's commit head on the branch's new head: fetched into the
// store, merged with git merge-tree (no work tree needed), committed on it. It returns
// the branch's new head and the new commit.
func (c *Checkout) rebase(ctx context.Context, g git, head, message string) (string, string, error) {
	unlock, err := c.lockStore(ctx)
	if err != nil {
		return "", "", stageError("rebase", err)
	}
	_, err = c.store.run(ctx, true, "fetch", "-q", "--no-tags", "--no-write-fetch-head", "--", c.spec.CloneURL,
		"+refs/heads/"+c.spec.Branch+":"+c.ns+"branch")
	unlock()
	if err != nil {
		return "", "", stageError("rebase", err)
	}
	out, err := c.store.run(ctx, false, "rev-parse", "--verify", "--end-of-options", c.ns+"branch^{commit}")
	if err != nil {
		return "", "", stageError("rebase", err)
	}
	base := strings.TrimSpace(out)
	// Our commit's only parent is the start, so the merge base of the two is the start
	// as long as the branch descends from it: the merge is the replay of our change.
	tree, err := g.run(ctx, false, "merge-tree", "--write-tree", "--no-messages", base, head)
	if err != nil {
		return "", "", stageError("rebase", fmt.Errorf("the task's commit does not apply on the branch's new head: %w", err))
	}
	tree, _, _ = strings.Cut(tree, "\n")
	rebased, err := c.commitTree(ctx, g, strings.TrimSpace(tree), message, base)
	if err != nil {
		return "", "", stageError("rebase", err)
	}
	if rebased == "" {
		return "", "", stageError("rebase", errors.New("the task's change is already on the branch's new head"))
	}
	return base, rebased, nil
}

// Remove deletes the workspace of planID, waiting for its lock so that no task of this
// machine is using it. The repository's store stays for the next plan; gc removes it
// once no workspace uses it.
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
	if err := ws.dropPlanRefs(ctx, planID, lockPath); err != nil {
		ws.log.WarnContext(ctx, "drop the plan's refs from its store", "plan_id", planID, "error", err)
	}
	return removeLocked(ws.Dir(planID), lockPath, lock)
}

// dropPlanRefs deletes the plan's refs from the store its lock file names, if any.
func (ws *Workspaces) dropPlanRefs(ctx context.Context, planID, lockPath string) error {
	b, err := os.ReadFile(lockPath)
	if err != nil {
		return nil //nolint:nilerr // no lock file: nothing was fetched
	}
	_, name, _ := strings.Cut(string(b), "\n")
	name = strings.TrimSpace(name)
	if name == "" || unsafeKey().MatchString(name) || strings.HasPrefix(name, ".") {
		return nil
	}
	if _, err := os.Stat(ws.storePath(name)); err != nil {
		return nil //nolint:nilerr // gc removed the store already
	}
	lock, err := lockFile(ctx, ws.storeLockPath(name), true)
	if err != nil {
		return fmt.Errorf("lock the repository's store: %w", err)
	}
	defer func() { _ = lock.unlock() }()
	ns := "refs/whilly/" + key(planID) + "/"
	_, err = bareGit(ws.git, ws.storePath(name), client.Workspace{}).runInput(ctx, false,
		"delete "+ns+"branch\ndelete "+ns+"base\n", "update-ref", "--stdin")
	return err
}

// removeLocked deletes a workspace, its index and its lock file while holding the lock:
// whoever waits on the old lock file sees it gone and locks a new one (see lockFile).
func removeLocked(dir, lockPath string, lock *fileLock) error {
	err := removeTree(dir)
	if rerr := os.Remove(indexPath(dir)); rerr != nil && !errors.Is(rerr, os.ErrNotExist) && err == nil {
		err = rerr
	}
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

// git runs git commands: on a repository (gitDir, with its work tree workTree when set,
// and more variables in env: the index, a quarantine) or, without gitDir, in dir.
type git struct {
	bin      string
	dir      string // where git runs
	gitDir   string
	workTree string
	vars     []string // GIT_INDEX_FILE, GIT_OBJECT_DIRECTORY …
	spec     client.Workspace
}

// bareGit returns git on the repository gitDir alone.
func bareGit(bin, gitDir string, spec client.Workspace) git {
	return git{bin: bin, dir: gitDir, gitDir: gitDir, spec: spec}
}

// withTree returns g on the work tree dir, with more variables.
func (g git) withTree(dir string, env ...string) git {
	g.dir, g.workTree, g.vars = dir, dir, env
	return g
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
	var pre []string
	if g.gitDir != "" {
		pre = append(pre, "--git-dir="+g.gitDir)
	}
	if g.workTree != "" {
		pre = append(pre, "--work-tree="+g.workTree)
	}
	cmd := exec.CommandContext(ctx, g.bin, append(pre, args...)...)
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

// env is the environment of a git command (git outside the box, clean): of the worker's,
// only what keptVar and keptGitVar allow, plus an empty HOME, no system
// or global configuration (so nothing an agent wrote to ~/.gitconfig, ~/.config/git or
// $GIT_CONFIG_GLOBAL counts), replace refs and grafts ignored, and whilly's settings as
// GIT_CONFIG_* entries: hooks off, no fsmonitor, no credential helper, ext:: refused.
// Commands that talk to the remote also get the token, as an Authorization header
// scoped to the clone URL.
func (g git) env(remote bool, home string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if name, _, _ := strings.Cut(kv, "="); keptGitVar(name) || keptVar(name) {
			env = append(env, kv)
		}
	}
	name, email := g.spec.AuthorName, g.spec.AuthorEmail
	if name == "" {
		name = defaultAuthorName
	}
	if email == "" {
		email = defaultAuthorEmail
	}
	env = append(env, g.vars...)
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

// keptVar reports the variables of the worker's environment, besides git's own, that its
// git commands get: what git needs to find its programs and reach the remote (the proxy,
// TLS settings, the worker's own SSH agent for ssh:// URLs). The rest — the worker's
// token, the agents' keys, anything else of the worker's — never reaches git nor a
// program git starts.
func keptVar(name string) bool {
	switch strings.ToUpper(name) {
	case "PATH", "LANG", "LANGUAGE", "TZ", "TMPDIR", "USER", "LOGNAME",
		"HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY", "NO_PROXY",
		"SSL_CERT_FILE", "SSL_CERT_DIR", "CURL_CA_BUNDLE", "SSH_AUTH_SOCK":
		return true
	}
	return strings.HasPrefix(name, "LC_")
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

// basicAuth is how GitHub takes an installation token over HTTPS: user x-access-token.
func basicAuth(token string) string {
	return base64.StdEncoding.EncodeToString([]byte("x-access-token:" + token))
}
