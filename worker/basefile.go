package worker

// A stand-in for the checkout's own BaseFile, made on today's Checkout: the workspace's
// rewrite provides the real one.

import (
	"context"
	"fmt"
	"io/fs"
	"strconv"
	"strings"
)

// baseRef is where BaseFile fetches the base branch to; prepare drops it with every
// other ref before the next task.
const baseRef = "refs/whilly/base"

// maxBaseFile bounds a file read from the base branch.
const maxBaseFile = 1 << 20

// BaseFile reads path as the base branch on the remote holds it, never as the checkout's
// work tree or plan branch (which an agent may have changed). A path the base does not
// hold is an error wrapping fs.ErrNotExist.
func (c *Checkout) BaseFile(ctx context.Context, path string) ([]byte, error) {
	base := c.spec.BaseBranch
	if base == "" {
		_, def, err := c.remoteHeads(ctx)
		if err != nil {
			return nil, fmt.Errorf("read %s from the base branch: %w", path, err)
		}
		if base = def; base == "" {
			return nil, fmt.Errorf("read %s from the base branch: the remote names no default branch", path)
		}
	}
	if _, err := c.remote(ctx, "fetch", "-q", "--no-tags", "origin", "+refs/heads/"+base+":"+baseRef); err != nil {
		return nil, fmt.Errorf("fetch the base branch %s: %w", base, err)
	}
	tree, err := c.git.run(ctx, false, "ls-tree", "-z", baseRef+"^{commit}", "--", path)
	if err != nil {
		return nil, fmt.Errorf("read %s from the base branch: %w", path, err)
	}
	// "<mode> <type> <object>\t<path>\x00"
	meta, _, _ := strings.Cut(tree, "\t")
	f := strings.Fields(meta)
	if len(f) != 3 {
		return nil, fmt.Errorf("read %s from the base branch %s: %w", path, base, fs.ErrNotExist)
	}
	if f[1] != "blob" || (f[0] != "100644" && f[0] != "100755") {
		return nil, fmt.Errorf("read %s from the base branch %s: not a regular file (mode %s)", path, base, f[0])
	}
	size, err := c.git.run(ctx, false, "cat-file", "-s", f[2])
	if err != nil {
		return nil, fmt.Errorf("read %s from the base branch: %w", path, err)
	}
	if n, err := strconv.ParseInt(strings.TrimSpace(size), 10, 64); err != nil || n > maxBaseFile {
		return nil, fmt.Errorf("read %s from the base branch: %s bytes, more than %d", path, strings.TrimSpace(size), maxBaseFile)
	}
	out, err := c.git.run(ctx, false, "cat-file", "blob", f[2])
	if err != nil {
		return nil, fmt.Errorf("read %s from the base branch: %w", path, err)
	}
	return []byte(out), nil
}
