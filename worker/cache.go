package worker

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/whilly-go/whilly/internal/config"
)

// Caches are the box's dependency and build caches under one root (WHILLY_CACHE_DIR):
//
//	<root>/base/<key>/        a repository's base cache, written only by its setup script
//	<root>/base/<key>.lock    its lock (flock), naming the repository; mtime: its last use
//	<root>/base/<key>.setup   the hash of the setup script that last filled it
//	<root>/plan/<key>/        a plan's own cache, read-write for the plan's tasks here
//	<root>/plan/<key>.lock    its lock, naming the plan; mtime: its last use
//	<root>/plan/<key>.setup   the hash of the setup script it was last seeded after
//
// A base cache is keyed by repository (the clone URL; for a plan without a repository,
// the directory its agent works in), a plan's by plan id. Each cache holds one directory
// per ecosystem (cacheVars), which the ecosystems' variables point at.
//
// Bubblewrap 0.8 has no overlay mounts, so a plan's cache is not layered over the base
// one: it is a copy of it, made when the plan's cache is first made on this worker and
// topped up (nothing overwritten) when the setup script runs again. Agents only ever get
// their plan's cache, never the base: nothing an agent writes (a poisoned build cache)
// reaches the base or another plan.
//
// A plan's cache is held with a shared lock while an attempt uses it (tasks of one plan
// may run side by side on one machine); making or seeding it, running the setup script
// and removing a cache take the exclusive lock, always the plan's before the base's.
// Eviction takes no lock it would wait for: a cache in use is never removed.
type Caches struct {
	root string
	max  int64
	log  *slog.Logger
}

// Cache paths, the repository's setup script, and the FAIL reason of an attempt whose
// setup failed.
const (
	// CacheBoxDir is where the box sees its cache.
	CacheBoxDir = "/whilly/cache"
	// SetupScript is the repository's setup script, read from its base branch.
	SetupScript = ".github/whilly/setup.sh"
	// setupBoxPath is where the box sees the setup script (bound read-only).
	setupBoxPath = "/whilly/setup.sh"
	// ReasonSetupFailed is the FAIL reason of an attempt whose setup script failed: the
	// agent did not run.
	ReasonSetupFailed = "setup_failed"
	// DefaultCacheMaxBytes is WHILLY_CACHE_MAX_BYTES's default.
	DefaultCacheMaxBytes = 10 << 30
)

// cacheVars are the ecosystems' cache variables and the directory of a cache each one
// points at.
var cacheVars = [][2]string{
	{"GOMODCACHE", "go-mod"},
	{"GOCACHE", "go-build"},
	{"npm_config_cache", "npm"},
	{"PIP_CACHE_DIR", "pip"},
	{"UV_CACHE_DIR", "uv"},
	{"CARGO_HOME", "cargo"},
	{"XDG_CACHE_HOME", "xdg"},
}

// CacheEnv is the environment that points the ecosystems' caches into dir: CacheBoxDir
// in a box, the cache's own directory unboxed.
func CacheEnv(dir string) []string {
	out := make([]string, 0, len(cacheVars))
	for _, v := range cacheVars {
		out = append(out, v[0]+"="+filepath.Join(dir, v[1]))
	}
	return out
}

// DefaultCacheDir returns <os.UserCacheDir>/whilly/cache.
func DefaultCacheDir() (string, error) {
	dir, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("find the user cache directory (set %s): %w", config.CacheDir, err)
	}
	return filepath.Join(dir, "whilly", "cache"), nil
}

// NewCaches returns the caches under root, at most maxBytes together (<= 0:
// DefaultCacheMaxBytes). Nothing is created until a cache is opened.
func NewCaches(root string, maxBytes int64, log *slog.Logger) *Caches {
	if maxBytes <= 0 {
		maxBytes = DefaultCacheMaxBytes
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Caches{root: root, max: maxBytes, log: log}
}

// Root returns the directory holding the caches.
func (cs *Caches) Root() string { return cs.root }

// cacheEntry is one cache's paths.
type cacheEntry struct {
	dir, lock, setup string
}

func (cs *Caches) entry(kind, id string) cacheEntry {
	dir := filepath.Join(cs.root, kind, key(id))
	return cacheEntry{dir: dir, lock: dir + ".lock", setup: dir + ".setup"}
}

// PlanCache is a plan's cache, held for one attempt: Close it when the attempt is over.
type PlanCache struct {
	// Dir is the cache's directory on the worker.
	Dir  string
	lock *fileLock
}

// Close lets the cache go (it may be evicted from now on).
func (p *PlanCache) Close() error {
	if p == nil || p.lock == nil {
		return nil
	}
	err := p.lock.unlock()
	p.lock = nil
	return err
}

// Setup is a repository's setup script and how to run it.
type Setup struct {
	// Script is the script as the base branch holds it; nil when there is none.
	Script []byte
	// Run runs the script with its caches in baseDir, the repository's base cache. An
	// error fails the attempt; a *SetupError says how the script ended.
	Run func(ctx context.Context, baseDir string) error
}

// SetupError is a setup script that did not succeed.
type SetupError struct {
	// Detail says how it ended ("exit status 3", "timed out after 30m0s").
	Detail string
	// Output is the end of what it printed, redacted.
	Output string
}

func (e *SetupError) Error() string { return "the setup script failed: " + e.Detail }

// Open returns the cache of planID, held for one attempt, seeded from the base cache of
// repo when it is first made. When setup has a script that this plan's cache was not
// seeded after (a new plan on this worker, or a changed script), the script runs first,
// under the base cache's lock, so two workers of one machine never run it at once. A
// failed script leaves the plan's cache as it was and fails Open with its error.
func (cs *Caches) Open(ctx context.Context, repo, planID string, setup Setup) (*PlanCache, error) {
	if cs.root == "" {
		return nil, fmt.Errorf("open the plan's cache: no cache directory (set %s)", config.CacheDir)
	}
	base, pc := cs.entry("base", repo), cs.entry("plan", planID)
	for _, d := range []string{filepath.Dir(base.dir), filepath.Dir(pc.dir)} {
		if err := os.MkdirAll(d, 0o750); err != nil {
			return nil, fmt.Errorf("create the cache directory: %w", err)
		}
	}
	hash := ""
	if setup.Script != nil {
		sum := sha256.Sum256(setup.Script)
		hash = hex.EncodeToString(sum[:])
	}
	// Shared first: tasks of one plan use its cache side by side. Only when the cache must
	// be made, seeded or set up again is the lock taken exclusively (waiting for the
	// plan's running attempts), and the state read again under it.
	for exclusive := false; ; exclusive = true {
		pl, err := lockFileMode(ctx, pc.lock, true, !exclusive)
		if err != nil {
			return nil, fmt.Errorf("lock the cache of plan %s: %w", planID, err)
		}
		_, statErr := os.Lstat(pc.dir)
		fresh := errors.Is(statErr, fs.ErrNotExist)
		// The record is written once the cache is seeded: without it, a seed was cut short.
		_, recErr := os.Lstat(pc.setup)
		seeded := !fresh && recErr == nil
		runSetup := setup.Script != nil && (!seeded || readRecord(pc.setup) != hash)
		switch {
		case seeded && !runSetup:
			// The plan's cache and its base are in use: their last use is now.
			now := time.Now()
			_ = os.Chtimes(pc.lock, now, now)
			_ = os.Chtimes(base.lock, now, now)
		case !exclusive:
			_ = pl.unlock()
			continue
		default:
			if err := cs.fill(ctx, base, pc, repo, planID, hash, runSetup, setup, fresh); err != nil {
				_ = pl.unlock()
				return nil, err
			}
		}
		if exclusive {
			if err := pl.share(); err != nil {
				_ = pl.unlock()
				return nil, err
			}
		}
		return &PlanCache{Dir: pc.dir, lock: pl}, nil
	}
}

// fill runs the setup script on the base cache when runSetup, then copies the base into
// the plan's cache: all of it when the plan's cache is fresh, else what it lacks. The
// caller holds the plan's lock exclusively; fill takes the base's.
func (cs *Caches) fill(ctx context.Context, base, pc cacheEntry, repo, planID, hash string, runSetup bool, setup Setup, fresh bool) error {
	// The lock file names its plan; its mtime records the last use.
	if err := os.WriteFile(pc.lock, []byte(planID+"\n"), 0o600); err != nil {
		return fmt.Errorf("record the cache's plan: %w", err)
	}
	bl, err := lockFile(ctx, base.lock, true)
	if err != nil {
		return fmt.Errorf("lock the base cache of %s: %w", repo, err)
	}
	defer func() { _ = bl.unlock() }()
	if err := os.WriteFile(base.lock, []byte(repo+"\n"), 0o600); err != nil {
		return fmt.Errorf("record the base cache's repository: %w", err)
	}
	if runSetup {
		for _, v := range cacheVars {
			if err := os.MkdirAll(filepath.Join(base.dir, v[1]), 0o750); err != nil {
				return fmt.Errorf("create the base cache: %w", err)
			}
		}
		started := time.Now()
		if err := setup.Run(ctx, base.dir); err != nil {
			return err
		}
		cs.log.InfoContext(ctx, "setup script ran", "repo", repo, "duration", time.Since(started))
		if err := os.WriteFile(base.setup, []byte(hash+"\n"), 0o600); err != nil {
			return fmt.Errorf("record the setup script's hash: %w", err)
		}
	}
	if fresh {
		if err := os.Mkdir(pc.dir, 0o750); err != nil {
			return fmt.Errorf("create the plan's cache: %w", err)
		}
	}
	if _, err := os.Lstat(base.dir); err == nil {
		if err := copyTree(base.dir, pc.dir, !fresh); err != nil {
			if fresh {
				_ = removeTree(pc.dir) // made again, whole, by the next attempt
			}
			return fmt.Errorf("seed the plan's cache from the base: %w", err)
		}
	}
	for _, v := range cacheVars {
		if err := os.MkdirAll(filepath.Join(pc.dir, v[1]), 0o750); err != nil {
			return fmt.Errorf("create the plan's cache: %w", err)
		}
	}
	if err := os.WriteFile(pc.setup, []byte(hash+"\n"), 0o600); err != nil {
		return fmt.Errorf("record the setup script's hash: %w", err)
	}
	return nil
}

func readRecord(p string) string {
	b, err := os.ReadFile(p)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// copyTree copies src into dst: directories, regular files with their modes, and
// symbolic links as links (never followed, on either side: both are opened as roots, so
// nothing resolves outside them). FIFOs, sockets and devices are skipped, and so is what
// cannot be read or made for want of permission: a cache entry less is a download more.
// With topUp, an entry dst already has stays as it is.
func copyTree(src, dst string, topUp bool) error {
	from, err := os.OpenRoot(src)
	if err != nil {
		return err
	}
	defer func() { _ = from.Close() }()
	to, err := os.OpenRoot(dst)
	if err != nil {
		return err
	}
	defer func() { _ = to.Close() }()
	type dirMode struct {
		path string
		mode fs.FileMode
	}
	var made []dirMode
	skip := func(err error) bool {
		return topUp && errors.Is(err, fs.ErrExist) || errors.Is(err, fs.ErrPermission)
	}
	walkErr := fs.WalkDir(from.FS(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if skip(err) {
				return nil
			}
			return err
		}
		if p == "." {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			// Made writable for the copy; its own mode is set once it is full.
			switch err := to.Mkdir(p, 0o700); {
			case err == nil:
				made = append(made, dirMode{p, info.Mode().Perm()})
			case skip(err):
				if !errors.Is(err, fs.ErrExist) {
					return fs.SkipDir
				}
			default:
				return err
			}
		case d.Type()&fs.ModeSymlink != 0:
			target, err := from.Readlink(p)
			if err != nil {
				return err
			}
			if err := to.Symlink(target, p); err != nil && !skip(err) {
				return err
			}
		case d.Type().IsRegular():
			if err := copyFile(from, to, p, info.Mode().Perm()); err != nil && !skip(err) {
				return err
			}
		}
		return nil
	})
	for _, m := range slices.Backward(made) {
		if err := to.Chmod(m.path, m.mode); err != nil && walkErr == nil {
			walkErr = err
		}
	}
	return walkErr
}

// copyFile copies the regular file p of from to a new file p of to, with mode.
func copyFile(from, to *os.Root, p string, mode fs.FileMode) error {
	in, err := from.OpenFile(p, os.O_RDONLY|openNoFollow, 0)
	if err != nil {
		return err
	}
	defer func() { _ = in.Close() }()
	out, err := to.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL|openNoFollow, 0o600)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, in)
	if err == nil {
		err = out.Chmod(mode)
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return err
}

// removeEntry removes a cache whose exclusive lock the caller holds, and lets the lock
// go: whoever waits on the old lock file then locks a new one (see lockFile).
func removeEntry(e cacheEntry, lock *fileLock) error {
	err := removeTree(e.dir)
	for _, p := range []string{e.setup, e.lock} {
		if rerr := os.Remove(p); rerr != nil && !errors.Is(rerr, fs.ErrNotExist) && err == nil {
			err = rerr
		}
	}
	if uerr := lock.unlock(); uerr != nil && err == nil {
		err = uerr
	}
	return err
}

// RemovePlan removes the cache of planID (an ended plan), waiting while an attempt
// uses it.
func (cs *Caches) RemovePlan(ctx context.Context, planID string) error {
	if cs.root == "" {
		return nil
	}
	e := cs.entry("plan", planID)
	if _, err := os.Lstat(e.lock); errors.Is(err, fs.ErrNotExist) {
		if _, err := os.Lstat(e.dir); errors.Is(err, fs.ErrNotExist) {
			return nil
		}
	}
	lock, err := lockFile(ctx, e.lock, true)
	if err != nil {
		return fmt.Errorf("lock the cache of plan %s: %w", planID, err)
	}
	if err := removeEntry(e, lock); err != nil {
		return fmt.Errorf("remove the cache of plan %s: %w", planID, err)
	}
	return nil
}

// CacheInfo describes one cache on disk.
type CacheInfo struct {
	Dir string
	// Kind is "base" or "plan"; Name the repository or the plan its lock file names.
	Kind, Name string
	LastUsed   time.Time
	Bytes      int64
}

// List returns the caches on disk, least recently used first, with their sizes.
func (cs *Caches) List() ([]CacheInfo, error) { return cs.list(true) }

func (cs *Caches) list(sizes bool) ([]CacheInfo, error) {
	var out []CacheInfo
	for _, kind := range []string{"base", "plan"} {
		dir := filepath.Join(cs.root, kind)
		entries, err := os.ReadDir(dir)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("list the caches: %w", err)
		}
		for _, e := range entries {
			if !e.IsDir() {
				continue
			}
			ci := CacheInfo{Dir: filepath.Join(dir, e.Name()), Kind: kind}
			if info, err := os.Stat(ci.Dir + ".lock"); err == nil {
				ci.LastUsed = info.ModTime()
			} else if info, err := e.Info(); err == nil {
				ci.LastUsed = info.ModTime()
			}
			if b, err := os.ReadFile(ci.Dir + ".lock"); err == nil {
				ci.Name = strings.TrimSpace(string(b))
			}
			if sizes {
				ci.Bytes = dirSize(ci.Dir)
			}
			out = append(out, ci)
		}
	}
	slices.SortFunc(out, func(a, b CacheInfo) int { return a.LastUsed.Compare(b.LastUsed) })
	return out, nil
}

// EvictResult says what an eviction did.
type EvictResult struct {
	Removed []CacheInfo
	// Busy counts the caches that would have gone but were in use.
	Busy int
	// Bytes is what the caches hold afterwards.
	Bytes int64
}

// Evict removes the least recently used caches until all of them together hold at most
// the limit (WHILLY_CACHE_MAX_BYTES). A cache in use is left alone.
func (cs *Caches) Evict(ctx context.Context) (EvictResult, error) {
	var res EvictResult
	if cs.root == "" {
		return res, nil
	}
	list, err := cs.List()
	if err != nil {
		return res, err
	}
	for _, ci := range list {
		res.Bytes += ci.Bytes
	}
	for _, ci := range list {
		if res.Bytes <= cs.max {
			break
		}
		e := cacheEntry{dir: ci.Dir, lock: ci.Dir + ".lock", setup: ci.Dir + ".setup"}
		lock, err := lockFile(ctx, e.lock, false)
		if errors.Is(err, errLocked) {
			res.Busy++
			continue
		}
		if err != nil {
			return res, err
		}
		if err := removeEntry(e, lock); err != nil {
			return res, fmt.Errorf("evict the cache %s: %w", ci.Dir, err)
		}
		res.Bytes -= ci.Bytes
		res.Removed = append(res.Removed, ci)
		cs.log.InfoContext(ctx, "cache evicted", "kind", ci.Kind, "name", ci.Name, "bytes", ci.Bytes,
			"last_used", ci.LastUsed)
	}
	return res, nil
}

// Plans returns the plan ids whose caches are on disk.
func (cs *Caches) Plans() []string {
	list, err := cs.list(false)
	if err != nil {
		return nil
	}
	var out []string
	for _, ci := range list {
		if ci.Kind == "plan" && ci.Name != "" {
			out = append(out, ci.Name)
		}
	}
	return out
}
