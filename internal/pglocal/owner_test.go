package pglocal

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// TestChownTreeStaysInside checks that chownTree hands over every entry of the tree,
// symlinks themselves rather than their targets, and nothing outside the tree.
func TestChownTreeStaysInside(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("chown to another user needs root")
	}
	const uid, gid = 4242, 4243
	base := t.TempDir()
	dir := filepath.Join(base, "pgdata")
	outside := filepath.Join(base, "outside")
	for _, d := range []string{filepath.Join(dir, "base", "1"), outside} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{filepath.Join(dir, "PG_VERSION"), filepath.Join(dir, "base", "1", "112"), filepath.Join(outside, "secret")} {
		if err := os.WriteFile(f, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(outside, filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}

	o := owner{uid: uid, gid: gid, name: "test", switchUser: true}
	if err := o.chownTree(dir); err != nil {
		t.Fatal(err)
	}

	for _, p := range []string{dir, filepath.Join(dir, "PG_VERSION"), filepath.Join(dir, "base"),
		filepath.Join(dir, "base", "1"), filepath.Join(dir, "base", "1", "112"), filepath.Join(dir, "link")} {
		if u, g := lstatOwner(t, p); u != uid || g != gid {
			t.Errorf("%s is owned by %d:%d, want %d:%d", p, u, g, uid, gid)
		}
	}
	for _, p := range []string{outside, filepath.Join(outside, "secret")} {
		if u, _ := lstatOwner(t, p); u != 0 {
			t.Errorf("%s outside the tree was given to uid %d", p, u)
		}
	}
}

func lstatOwner(t *testing.T, path string) (uid, gid uint32) {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Lstat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Uid, st.Gid
}
