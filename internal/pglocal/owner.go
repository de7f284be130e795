package pglocal

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// owner is the operating-system user the server runs as.
type owner struct {
	uid, gid uint32
	name     string
	// switchUser is set when whilly runs as root: initdb refuses root, so the server
	// programs run as this unprivileged user instead.
	switchUser bool
}

// clusterOwner picks the user to run the cluster in pgdata as: the current user, or,
// when running as root, the owner of an existing cluster, else postgres, else nobody.
func clusterOwner(pgdata string) (owner, error) {
	if os.Geteuid() != 0 {
		o := owner{uid: uint32(os.Geteuid()), gid: uint32(os.Getegid())}
		o.name = strconv.FormatUint(uint64(o.uid), 10)
		if u, err := user.Current(); err == nil {
			o.name = u.Username
		}
		return o, nil
	}
	if st, err := statT(pgdata); err == nil && st.Uid != 0 {
		o := owner{uid: st.Uid, gid: st.Gid, switchUser: true, name: strconv.FormatUint(uint64(st.Uid), 10)}
		if u, err := user.LookupId(o.name); err == nil {
			o.name = u.Username
			if gid, err := strconv.ParseUint(u.Gid, 10, 32); err == nil {
				o.gid = uint32(gid)
			}
		}
		return o, nil
	}
	for _, name := range []string{"postgres", "nobody"} {
		u, err := user.Lookup(name)
		if err != nil {
			continue
		}
		uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
		gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
		if err1 != nil || err2 != nil || uid == 0 {
			continue
		}
		return owner{uid: uint32(uid), gid: uint32(gid), name: u.Username, switchUser: true}, nil
	}
	return owner{}, errors.New("running as root and neither user postgres nor nobody exists " +
		"to run the server as (initdb refuses root): create a postgres user, run whilly as a " +
		"normal user, or set WHILLY_DATABASE_URL")
}

// command prepares a server program to run as the owner. The working directory is /
// because the owner may not be allowed into the caller's; PG* variables are dropped so
// the caller's client settings cannot redirect the server (PGPORT, PGDATA …).
func (o owner) command(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = "/"
	env := []string{"LC_ALL=C"}
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "PG") || strings.HasPrefix(kv, "LC_") || strings.HasPrefix(kv, "LANG=") {
			continue
		}
		env = append(env, kv)
	}
	cmd.Env = env
	// Its own process group: a Ctrl-C aimed at whilly must not reach pg_ctl or the server.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if o.switchUser {
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: o.uid, Gid: o.gid}
	}
	// pg_ctl hands its output descriptors to the server only after redirecting them to
	// the log; should a server ever keep one open, do not wait on it forever.
	cmd.WaitDelay = 5 * time.Second
	return cmd
}

// run runs cmd and returns an error carrying its combined output.
func run(cmd *exec.Cmd) error {
	out, err := cmd.CombinedOutput()
	if err != nil {
		msg := strings.TrimSpace(string(out))
		if msg == "" {
			return fmt.Errorf("run %s: %w", filepath.Base(cmd.Path), err)
		}
		return fmt.Errorf("run %s: %w: %s", filepath.Base(cmd.Path), err, msg)
	}
	return nil
}

// chown gives path to the owner when the server runs as another user.
func (o owner) chown(path string) error {
	if !o.switchUser {
		return nil
	}
	if err := os.Lchown(path, int(o.uid), int(o.gid)); err != nil {
		return fmt.Errorf("chown %s to %s: %w", path, o.name, err)
	}
	return nil
}

// chownTree gives a whole directory tree to the owner; used when a cluster directory is
// found owned by root, which the server refuses to run in. The walk runs as root while
// the parts already handed over belong to the owner, who could swap a directory for a
// symlink between the listing and the chown: resolving every name inside an os.Root
// keeps the chown from leaving the tree.
func (o owner) chownTree(dir string) error {
	if !o.switchUser {
		return nil
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return fmt.Errorf("chown %s to %s: %w", dir, o.name, err)
	}
	defer func() { _ = root.Close() }() // a directory handle: nothing to lose on close
	err = fs.WalkDir(root.FS(), ".", func(path string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return root.Lchown(path, int(o.uid), int(o.gid))
	})
	if err != nil {
		return fmt.Errorf("chown %s to %s: %w", dir, o.name, err)
	}
	return nil
}

// grantTraversal makes sure the owner may search every directory from / down to dir,
// which a root-owned path such as /root/.local/share/whilly (or a t.TempDir) forbids.
// Only the execute (search) bit for others is added, and only where it is missing: the
// owner can then reach its own files by name but list nothing new.
func (o owner) grantTraversal(ctx context.Context, dir string, log *slog.Logger) error {
	if !o.switchUser {
		return nil
	}
	var chain []string
	for p := filepath.Clean(dir); ; p = filepath.Dir(p) {
		chain = append(chain, p)
		if p == filepath.Dir(p) {
			break
		}
	}
	for i := len(chain) - 1; i >= 0; i-- {
		p := chain[i]
		st, err := statT(p)
		if err != nil {
			return fmt.Errorf("stat %s: %w", p, err)
		}
		if o.canSearch(st) {
			continue
		}
		mode := uint32(st.Mode)&0o7777 | 0o001 //nolint:unconvert // Mode is uint16 on darwin
		if err := syscall.Chmod(p, mode); err != nil {
			return fmt.Errorf("grant search permission on %s to %s: %w", p, o.name, err)
		}
		log.InfoContext(ctx, "granted others search permission on a directory so the database user can reach its data",
			slog.String("path", p), slog.String("user", o.name), slog.String("mode", fmt.Sprintf("%04o", mode)))
	}
	return nil
}

// canSearch applies the POSIX permission rules for the owner's uid and primary gid (the
// server runs with no supplementary groups).
func (o owner) canSearch(st *syscall.Stat_t) bool {
	switch {
	case st.Uid == o.uid:
		return st.Mode&0o100 != 0
	case st.Gid == o.gid:
		return st.Mode&0o010 != 0
	default:
		return st.Mode&0o001 != 0
	}
}

func statT(path string) (*syscall.Stat_t, error) {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return nil, err
	}
	return &st, nil
}
