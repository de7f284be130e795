package worker

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// What crosses between the box and the worker's git: the work tree, read and cleaned here
// in Go without following links, and the attempt's own .git, written here with plain file
// writes and never read back.

// maxTreeReasons bounds the refused entries of a work tree listed in a FAIL event.
const maxTreeReasons = 20

// scrubTree removes what git must not meet in a work tree an earlier attempt left: any
// .git below the top, FIFOs, sockets and devices.
func scrubTree(dir string) error {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return fmt.Errorf("clean the work tree: %w", err)
	}
	defer func() { _ = root.Close() }()
	err = fs.WalkDir(root.FS(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == "." {
			return nil
		}
		keep := d.IsDir() || d.Type().IsRegular() || d.Type()&fs.ModeSymlink != 0
		if strings.EqualFold(d.Name(), ".git") || !keep {
			if err := root.RemoveAll(p); err != nil {
				return err
			}
			if d.IsDir() {
				return fs.SkipDir
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("clean the work tree: %w", err)
	}
	return nil
}

// checkTree refuses a work tree holding what git would not commit as the agent left it:
// a FIFO, a socket or a device (RuleSpecial), or a .git below the top, which git would
// take for another repository (RuleSubmodule). Links are not followed; git commits them
// as links, and the diff gate checks their targets.
func checkTree(dir string) error {
	var reasons []DiffReason
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == dir {
			return nil
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		switch t := d.Type(); {
		case strings.EqualFold(d.Name(), ".git"):
			reasons = append(reasons, DiffReason{Rule: RuleSubmodule, Path: rel, Detail: "a .git inside the work tree: another repository"})
			if d.IsDir() {
				return fs.SkipDir
			}
		case d.IsDir(), t.IsRegular(), t&fs.ModeSymlink != 0:
		default:
			reasons = append(reasons, DiffReason{Rule: RuleSpecial, Path: rel, Detail: "a " + fileKind(t) + " is not a file git can commit"})
		}
		if len(reasons) >= maxTreeReasons {
			return fs.SkipAll
		}
		return nil
	})
	if err != nil {
		return stageError("commit", fmt.Errorf("read the work tree: %w", err))
	}
	if len(reasons) > 0 {
		return &DiffRejectedError{Reasons: reasons}
	}
	return nil
}

func fileKind(t fs.FileMode) string {
	switch {
	case t&fs.ModeNamedPipe != 0:
		return "FIFO"
	case t&fs.ModeSocket != 0:
		return "socket"
	case t&fs.ModeDevice != 0:
		return "device"
	}
	return "special file"
}

// removeTree removes dir and everything in it, even directories an agent left without
// write permission (made writable through os.Root, so that a link cannot point the chmod
// outside dir).
func removeTree(dir string) error {
	if err := os.RemoveAll(dir); err == nil {
		return nil
	}
	if root, err := os.OpenRoot(dir); err == nil {
		_ = fs.WalkDir(root.FS(), ".", func(p string, d fs.DirEntry, _ error) error {
			if d != nil && d.IsDir() {
				_ = root.Chmod(p, 0o700)
			}
			return nil
		})
		_ = root.Close()
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("remove %s: %w", dir, err)
	}
	return nil
}

// writeBoxGit writes the attempt's own .git into the work tree: the plan branch at the
// start commit, checked out (a copy of the plan's index), its objects those of the store
// (alternates; the box sees them read-only, see Binds). Whatever the agent does to it,
// the worker never runs git on it, and removes it before it reads the work tree.
func (c *Checkout) writeBoxGit() error {
	gitDir := filepath.Join(c.Dir, ".git")
	for _, d := range []string{"", "objects/info", "objects/pack", "refs/heads/" + filepath.Dir(c.spec.Branch), "refs/tags", "info", "hooks"} {
		if err := os.MkdirAll(filepath.Join(gitDir, d), 0o755); err != nil {
			return stageError("checkout", fmt.Errorf("write the attempt's .git: %w", err))
		}
	}
	files := map[string]string{
		"HEAD":                        "ref: refs/heads/" + c.spec.Branch + "\n",
		"config":                      c.core,
		"refs/heads/" + c.spec.Branch: c.start + "\n",
		"objects/info/alternates":     filepath.Join(c.store.gitDir, "objects") + "\n",
	}
	for name, content := range files {
		if err := writeNew(filepath.Join(gitDir, name), strings.NewReader(content)); err != nil {
			return stageError("checkout", fmt.Errorf("write the attempt's .git: %w", err))
		}
	}
	if err := copyNew(indexPath(c.Dir), filepath.Join(gitDir, "index")); err != nil {
		return stageError("checkout", fmt.Errorf("write the attempt's .git: %w", err))
	}
	return nil
}

// writeNew writes a file that must not exist yet (nothing planted is written through).
func writeNew(path string, r io.Reader) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	_, err = io.Copy(f, r)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// copyNew copies the worker's file src to dst, which must not exist yet.
func copyNew(src, dst string) error {
	f, err := os.Open(src)
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }()
	return writeNew(dst, f)
}

// quarantine is where one publication writes its objects: a directory of the store's
// own, outside the objects the boxes see, with a copy of the plan's index.
type quarantine struct {
	dir string
	git git // on the work tree, writing objects to the quarantine, reading the store's too
}

func (c *Checkout) quarantine() (*quarantine, error) {
	dir, err := os.MkdirTemp(c.store.gitDir, "quarantine-")
	if err != nil {
		return nil, fmt.Errorf("make a quarantine for the commit: %w", err)
	}
	q := &quarantine{dir: dir}
	if err := os.Mkdir(filepath.Join(dir, "objects"), 0o750); err != nil {
		q.remove()
		return nil, fmt.Errorf("make a quarantine for the commit: %w", err)
	}
	if err := copyNew(indexPath(c.Dir), filepath.Join(dir, "index")); err != nil {
		q.remove()
		return nil, fmt.Errorf("copy the plan's index: %w", err)
	}
	q.git = c.tree.withTree(c.Dir, "GIT_INDEX_FILE="+filepath.Join(dir, "index"),
		"GIT_OBJECT_DIRECTORY="+filepath.Join(dir, "objects"),
		"GIT_ALTERNATE_OBJECT_DIRECTORIES="+filepath.Join(c.store.gitDir, "objects"))
	return q, nil
}

func (q *quarantine) remove() { _ = os.RemoveAll(q.dir) }

// migrate moves the quarantine's objects into the store (pushed, they are the remote's
// now): loose objects, then packs with their indexes last, so that no reader sees an
// index without its pack.
func (q *quarantine) migrate(store string) error {
	from := filepath.Join(q.dir, "objects")
	var files []string
	err := filepath.WalkDir(from, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			files = append(files, p)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("list the quarantined objects: %w", err)
	}
	slices.SortStableFunc(files, func(a, b string) int {
		return boolInt(strings.HasSuffix(a, ".idx")) - boolInt(strings.HasSuffix(b, ".idx"))
	})
	for _, p := range files {
		rel, _ := filepath.Rel(from, p)
		dst := filepath.Join(store, "objects", rel)
		if _, err := os.Lstat(dst); err == nil {
			continue
		}
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return fmt.Errorf("move the pushed objects into the store: %w", err)
		}
		if err := os.Rename(p, dst); err != nil && !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("move the pushed objects into the store: %w", err)
		}
	}
	return nil
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
