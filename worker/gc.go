package worker

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Defaults of `whilly-worker gc`.
const (
	DefaultGCMaxAge  = 72 * time.Hour
	DefaultGCMaxSize = 5_000_000_000 // 5 GB
)

func shortHash(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:5])
}

// WorkspaceInfo describes one workspace on disk.
type WorkspaceInfo struct {
	Dir      string
	PlanID   string // from its lock file; "" when unknown
	Store    string // the name of its repository's store, from its lock file; "" when unknown
	LastUsed time.Time
	Bytes    int64
	lockPath string
}

// List returns the workspaces under the root, least recently used first. Sizes are
// not computed (see GC).
func (ws *Workspaces) List() ([]WorkspaceInfo, error) {
	entries, err := os.ReadDir(ws.root)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list workspaces: %w", err)
	}
	byKey := map[string]*WorkspaceInfo{}
	get := func(k string) *WorkspaceInfo {
		if w, ok := byKey[k]; ok {
			return w
		}
		w := &WorkspaceInfo{Dir: filepath.Join(ws.root, k), lockPath: filepath.Join(ws.root, k+".lock")}
		byKey[k] = w
		return w
	}
	for _, e := range entries {
		name := e.Name()
		switch {
		case strings.HasPrefix(name, "."): // the stores (see GC)
		case e.IsDir():
			w := get(name)
			if info, err := e.Info(); err == nil && w.LastUsed.IsZero() {
				w.LastUsed = info.ModTime()
			}
		case strings.HasSuffix(name, ".lock"):
			w := get(strings.TrimSuffix(name, ".lock"))
			if info, err := e.Info(); err == nil {
				w.LastUsed = info.ModTime() // the lock's mtime is the last use
			}
			if b, err := os.ReadFile(filepath.Join(ws.root, name)); err == nil {
				plan, store, _ := strings.Cut(string(b), "\n")
				w.PlanID, w.Store = strings.TrimSpace(plan), strings.TrimSpace(store)
			}
		}
	}
	out := make([]WorkspaceInfo, 0, len(byKey))
	for _, w := range byKey {
		out = append(out, *w)
	}
	slices.SortFunc(out, func(a, b WorkspaceInfo) int { return a.LastUsed.Compare(b.LastUsed) })
	return out, nil
}

// GCOptions bounds what gc keeps.
type GCOptions struct {
	MaxAge  time.Duration // remove workspaces unused for longer; <= 0 keeps them all
	MaxSize int64         // then remove the least recently used until the rest fit; <= 0: no limit
	DryRun  bool
	Now     time.Time // zero: time.Now()
}

// GCResult says what gc did.
type GCResult struct {
	Removed    []WorkspaceInfo
	Stores     []WorkspaceInfo // repository stores removed: no workspace used them
	Kept       int
	KeptBytes  int64
	Busy       int // in use by a task right now, left alone
	FreedBytes int64
}

// GC removes workspaces unused for longer than MaxAge, then the least recently used ones
// until the others take at most MaxSize bytes. A workspace a task holds is never removed.
// Then the repositories' stores that no workspace left uses go by the same rules; the
// stores in use count toward MaxSize but stay.
func (ws *Workspaces) GC(ctx context.Context, opt GCOptions) (GCResult, error) {
	var res GCResult
	now := opt.Now
	if now.IsZero() {
		now = time.Now()
	}
	list, err := ws.List()
	if err != nil {
		return res, err
	}
	var total int64
	for i := range list {
		list[i].Bytes = dirSize(list[i].Dir)
		total += list[i].Bytes
	}
	remove := func(w WorkspaceInfo) (bool, error) {
		if opt.DryRun {
			return true, nil
		}
		lock, err := lockFile(ctx, w.lockPath, false)
		if errors.Is(err, errLocked) {
			res.Busy++
			return false, nil
		}
		if err != nil {
			return false, err
		}
		return true, removeLocked(w.Dir, w.lockPath, lock)
	}
	var final []WorkspaceInfo
	// Least recently used first: the ones older than MaxAge come before all others.
	for _, w := range list {
		tooOld := opt.MaxAge > 0 && now.Sub(w.LastUsed) > opt.MaxAge
		if tooOld || (opt.MaxSize > 0 && total > opt.MaxSize) {
			ok, err := remove(w)
			if err != nil {
				return res, err
			}
			if ok {
				res.Removed = append(res.Removed, w)
				total -= w.Bytes
				continue
			}
		}
		final = append(final, w)
	}
	total, err = ws.gcStores(ctx, opt, now, total, &res)
	for _, w := range append(res.Removed, res.Stores...) {
		res.FreedBytes += w.Bytes
	}
	res.Kept, res.KeptBytes = len(final), total
	return res, err
}

// gcStores removes the stores no workspace uses that are older than MaxAge or, least
// recently used first, while total is over MaxSize; it returns the new total. A store is
// checked again for users while its lock is held: Open names its store in its
// workspace's lock file before it locks the store.
func (ws *Workspaces) gcStores(ctx context.Context, opt GCOptions, now time.Time, total int64, res *GCResult) (int64, error) {
	entries, err := os.ReadDir(filepath.Join(ws.root, storesDir))
	if errors.Is(err, fs.ErrNotExist) {
		return total, nil
	}
	if err != nil {
		return total, fmt.Errorf("list stores: %w", err)
	}
	inUse := func() (map[string]bool, error) {
		list, err := ws.List()
		used := map[string]bool{}
		for _, w := range list {
			used[w.Store] = true
		}
		return used, err
	}
	used, err := inUse()
	if err != nil {
		return total, err
	}
	var idle []WorkspaceInfo
	for _, e := range entries {
		name, ok := strings.CutSuffix(e.Name(), ".git")
		if !ok || !e.IsDir() {
			continue
		}
		s := WorkspaceInfo{Dir: ws.storePath(name), Store: name, lockPath: ws.storeLockPath(name), Bytes: dirSize(ws.storePath(name))}
		total += s.Bytes
		if used[name] {
			continue
		}
		if info, err := os.Stat(s.lockPath); err == nil {
			s.LastUsed = info.ModTime()
		} else if info, err := e.Info(); err == nil {
			s.LastUsed = info.ModTime()
		}
		idle = append(idle, s)
	}
	slices.SortFunc(idle, func(a, b WorkspaceInfo) int { return a.LastUsed.Compare(b.LastUsed) })
	for _, s := range idle {
		tooOld := opt.MaxAge > 0 && now.Sub(s.LastUsed) > opt.MaxAge
		if !tooOld && (opt.MaxSize <= 0 || total <= opt.MaxSize) {
			continue
		}
		if !opt.DryRun {
			lock, err := lockFile(ctx, s.lockPath, false)
			if errors.Is(err, errLocked) {
				res.Busy++
				continue
			}
			if err != nil {
				return total, err
			}
			if used, err = inUse(); err != nil || used[s.Store] {
				_ = lock.unlock()
				if err != nil {
					return total, err
				}
				continue
			}
			err = os.RemoveAll(s.Dir)
			if rerr := os.Remove(s.lockPath); rerr != nil && err == nil {
				err = rerr
			}
			_ = lock.unlock()
			if err != nil {
				return total, fmt.Errorf("remove store %s: %w", s.Dir, err)
			}
		}
		res.Stores = append(res.Stores, s)
		total -= s.Bytes
	}
	return total, nil
}

// dirSize is the bytes of the regular files under dir (0 when it is missing).
func dirSize(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil //nolint:nilerr // an unreadable corner counts as empty
		}
		if d.Type().IsRegular() {
			if info, err := d.Info(); err == nil {
				n += info.Size()
			}
		}
		return nil
	})
	return n
}

// ParseSize reads a byte size: a plain number of bytes, or a number with B, KB, MB, GB,
// TB (powers of 1000) or KiB, MiB, GiB, TiB (powers of 1024), case-insensitive.
func ParseSize(s string) (int64, error) {
	t := strings.ToUpper(strings.TrimSpace(s))
	units := []struct {
		suffix string
		mult   float64
	}{{"KIB", 1 << 10}, {"MIB", 1 << 20}, {"GIB", 1 << 30}, {"TIB", 1 << 40},
		{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12}, {"K", 1e3}, {"M", 1e6}, {"G", 1e9}, {"T", 1e12}, {"B", 1}}
	mult := 1.0
	for _, u := range units {
		if num, ok := strings.CutSuffix(t, u.suffix); ok {
			t, mult = strings.TrimSpace(num), u.mult
			break
		}
	}
	n, err := strconv.ParseFloat(t, 64)
	if err != nil || n < 0 || n*mult > 1<<62 {
		return 0, fmt.Errorf("%q is not a size such as 500MB, 5GB or 2GiB", s)
	}
	return int64(n * mult), nil
}

// FormatSize prints bytes with a decimal unit.
func FormatSize(n int64) string {
	switch {
	case n >= 1e9:
		return fmt.Sprintf("%.1f GB", float64(n)/1e9)
	case n >= 1e6:
		return fmt.Sprintf("%.1f MB", float64(n)/1e6)
	case n >= 1e3:
		return fmt.Sprintf("%.1f kB", float64(n)/1e3)
	}
	return fmt.Sprintf("%d B", n)
}
