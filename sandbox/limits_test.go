//go:build linux

package sandbox

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// probeSyscallsArg makes the test binary, run in a box, try the system calls the box's
// filter refuses and print how each ended.
const probeSyscallsArg = "__whilly_test_syscalls"

// probeSyscalls prints "name errno" for each refused call it tries ("ok" when it worked).
func probeSyscalls() int {
	res := func(name string, err error) {
		var en syscall.Errno
		switch {
		case err == nil:
			fmt.Println(name, "ok")
		case errors.As(err, &en):
			fmt.Println(name, unix.ErrnoName(en))
		default:
			fmt.Println(name, err)
		}
	}
	raw := func(name string, nr uintptr, a ...uintptr) {
		a = append(a, 0, 0, 0, 0, 0, 0)
		_, _, en := unix.Syscall6(nr, a[0], a[1], a[2], a[3], a[4], a[5])
		if en == 0 {
			res(name, nil)
		} else {
			res(name, en)
		}
	}
	raw("keyctl", unix.SYS_KEYCTL, unix.KEYCTL_GET_KEYRING_ID, uintptr(0xfffffffd)) // the session keyring
	raw("add_key", unix.SYS_ADD_KEY)
	raw("bpf", unix.SYS_BPF, unix.BPF_PROG_LOAD)
	raw("perf_event_open", unix.SYS_PERF_EVENT_OPEN)
	raw("userfaultfd", unix.SYS_USERFAULTFD)
	raw("fsopen", unix.SYS_FSOPEN)
	res("mount", unix.Mount("none", "/tmp", "tmpfs", 0, ""))
	res("unshare", unix.Unshare(unix.CLONE_NEWUSER))
	raw("clone3", unix.SYS_CLONE3)
	raw("io_uring_setup", unix.SYS_IO_URING_SETUP)
	cmd := exec.Command("/bin/true")
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: unix.CLONE_NEWUSER}
	res("clone_newuser", cmd.Run())
	res("clone_plain", exec.Command("/bin/true").Run())
	return 0
}

// The box, even for a root worker, is an unprivileged user without capabilities: a
// file the box made read-only cannot be written (as a project's permission tests expect),
// the workspace stays writable, and what the box writes is the worker's outside.
func TestBoxIdentity(t *testing.T) {
	t.Parallel()
	s := boxT(t, Settings{Net: NetNone})
	ws := t.TempDir()
	out, err := runIn(t, s, ws, `id -u; id -un >/dev/null || echo NO-NAME; grep CapEff /proc/self/status; echo x > ro; chmod 0400 ro
if echo y >> ro; then echo WROTE-RO; fi; echo made > made; cat made`, nil)
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if lines[0] == "0" {
		t.Errorf("the box runs as uid 0: %s", out)
	}
	if !strings.Contains(out, "CapEff:\t0000000000000000") {
		t.Errorf("the box has capabilities: %s", out)
	}
	if strings.Contains(out, "WROTE-RO") || !strings.Contains(out, "Permission denied") {
		t.Errorf("a 0400 file was writable in the box: %s", out)
	}
	if strings.Contains(out, "NO-NAME") {
		t.Errorf("the box's user has no name: %s", out)
	}
	if !strings.HasSuffix(strings.TrimSpace(out), "made") {
		t.Errorf("the workspace is not writable: %s", out)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(filepath.Join(ws, "made"), &st); err != nil {
		t.Fatal(err)
	}
	if int(st.Uid) != os.Getuid() || int(st.Gid) != os.Getgid() {
		t.Errorf("the box's file is owned by %d:%d outside, want the worker's %d:%d", st.Uid, st.Gid, os.Getuid(), os.Getgid())
	}
}

// A root worker's box user gets a name where the machine has no user of its uid, and
// keeps the machine's where it has.
func TestUserEntries(t *testing.T) {
	t.Parallel()
	etc, dir := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(etc, "passwd"), []byte("root:x:0:0:root:/root:/bin/sh"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(etc, "group"), []byte("root:x:0:\nstaff:x:1000:\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	a := userEntries(dir, etc)
	if want := []string{"--ro-bind", filepath.Join(dir, "passwd"), "/etc/passwd"}; !slices.Equal(a, want) {
		t.Fatalf("userEntries = %q, want %q", a, want)
	}
	b, err := os.ReadFile(filepath.Join(dir, "passwd"))
	if err != nil || string(b) != "root:x:0:0:root:/root:/bin/sh\nagent:x:1000:1000::/home/agent:/bin/sh\n" {
		t.Errorf("passwd in the box: %q %v", b, err)
	}
}

// The box's /tmp is on disk, not in the worker's memory.
func TestBoxTmpIsOnDisk(t *testing.T) {
	t.Parallel()
	s := boxT(t, Settings{Net: NetNone})
	out, err := runIn(t, s, t.TempDir(), `stat -f -c %T /tmp; echo x > /tmp/f && cat /tmp/f`, nil)
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if strings.HasPrefix(out, "tmpfs") || !strings.HasSuffix(strings.TrimSpace(out), "x") {
		t.Errorf("/tmp in the box: %s", out)
	}
}

// The filter refuses new namespaces, mounts, keyrings, bpf, perf and userfaultfd with
// EPERM, and clone3 with ENOSYS (so libcs fall back to clone); a plain fork still works.
func TestSeccompRefuses(t *testing.T) {
	t.Parallel()
	s := boxT(t, Settings{Net: NetNone})
	ws := t.TempDir()
	out, err := runIn(t, s, ws, `unshare -U true; echo "U=$?"; unshare -m true; echo "m=$?"`, nil)
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if !strings.Contains(out, "U=1") || !strings.Contains(out, "m=1") || strings.Count(out, "Operation not permitted") < 2 {
		t.Errorf("unshare in the box: %s", out)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	c, err := s.Prepare(ctxT(t), Spec{Path: exe, Args: []string{probeSyscallsArg}, Dir: ws})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	raw, err := runCmd(t, c)
	if err != nil {
		t.Fatalf("%v: %s", err, raw)
	}
	got := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(raw), "\n") {
		if k, v, ok := strings.Cut(l, " "); ok {
			got[k] = v
		}
	}
	want := map[string]string{"keyctl": "EPERM", "add_key": "EPERM", "bpf": "EPERM", "perf_event_open": "EPERM",
		"userfaultfd": "EPERM", "fsopen": "EPERM", "mount": "EPERM", "unshare": "EPERM", "clone3": "ENOSYS", "io_uring_setup": "ENOSYS",
		"clone_newuser": "EPERM", "clone_plain": "ok"}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: %q, want %q (all: %s)", k, got[k], v, raw)
		}
	}
}

// Ordinary work is unaffected by the identity and the filter: a shell, git, go build,
// node.
func TestBoxOrdinaryWork(t *testing.T) {
	t.Parallel()
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go on PATH")
	}
	cache, err := exec.Command(gobin, "env", "GOCACHE").Output()
	if err != nil {
		t.Fatal(err)
	}
	s := boxT(t, Settings{Net: NetNone})
	ws := t.TempDir()
	c, err := s.Prepare(ctxT(t), Spec{Path: "/bin/sh", Dir: ws, Args: []string{"-c", `set -e
git init -q . && git -c user.name=a -c user.email=a@b commit -q --allow-empty -m one && git log --oneline | wc -l
printf 'module m\ngo 1.21\n' > go.mod
printf 'package main\nimport "fmt"\nfunc main() { fmt.Println("built-and-ran") }\n' > main.go
go build -o prog . && ./prog
if command -v node >/dev/null; then node -e 'const fs = require("fs"); fs.writeFileSync("/tmp/n", "node-ran"); console.log(fs.readFileSync("/tmp/n", "utf8"))'; else echo node-ran; fi`},
		// The worker's build cache, as the box's caches will be: the standard library is
		// built already.
		Environ: []string{"PATH=" + filepath.Dir(gobin) + ":/usr/bin:/bin"},
		Env:     []string{"GOTOOLCHAIN=local", "GOFLAGS=-buildvcs=false", "GOCACHE=" + strings.TrimSpace(string(cache))},
		Binds:   []Bind{{Src: strings.TrimSpace(string(cache))}}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	out, err := runCmd(t, c)
	if err != nil || !strings.Contains(out, "built-and-ran") || !strings.Contains(out, "node-ran") {
		t.Fatalf("%v: %s", err, out)
	}
}

// A memory hog, a process bomb and a disk filler each end their box, which names the
// limit; the next box of the same Sandbox runs. (Unlimited, as boxes were, a hog got its
// 128 MiB and a bomb its 200 processes.) tail keeps the last lines of its input: here one
// line of 128 MiB.
func TestBoxLimits(t *testing.T) {
	t.Parallel()
	s := boxT(t, Settings{Net: NetNone, Memory: 64 << 20, Pids: 64, Disk: 8 << 20})
	if !s.LimitsEnforced() {
		if os.Getuid() == 0 {
			t.Fatalf("root makes no cgroup here: %s", s.LimitsNote())
		}
		// An address-space rlimit of 64 MiB would not let the box's init start.
		t.Logf("no cgroup here, only the disk limit is tested: %s", s.LimitsNote())
		s = boxT(t, Settings{Net: NetNone, Disk: 8 << 20})
	}
	for _, c := range []struct {
		name, script, want string
		cgroup             bool // a limit only a cgroup enforces
	}{
		{"hog", `head -c 134217728 /dev/zero | tail | wc -c; sleep 20; echo survived`, "memory limit 64 MiB", true},
		{"bomb", `i=0; while [ $i -lt 200 ]; do sleep 20 & i=$((i+1)); done; echo survived; wait`, "process limit 64", true},
		{"tmp filler", `dd if=/dev/zero of=/tmp/fill bs=1M count=16 2>&1; echo filled; sleep 20; echo survived`, "disk limit 8 MiB", false},
		{"checkout filler", `dd if=/dev/zero of=fill bs=1M count=16 2>&1; echo filled`, "disk limit 8 MiB", false},
		{"next", `echo fine`, "", false},
	} {
		if c.cgroup && !s.LimitsEnforced() {
			continue
		}
		t.Run(c.name, func(t *testing.T) {
			box, err := s.Prepare(ctxT(t), Spec{Path: "/bin/sh", Args: []string{"-c", c.script}, Dir: t.TempDir()})
			if err != nil {
				t.Fatal(err)
			}
			defer box.Close()
			out, err := runCmd(t, box)
			if got := box.Exceeded(); got != c.want || strings.Contains(out, "survived") {
				t.Errorf("Exceeded() = %q, want %q; %v: %s", got, c.want, err, out)
			}
			if c.want == "" && (err != nil || out != "fine\n") {
				t.Errorf("the box after the others: %v: %s", err, out)
			}
		})
	}
}

// The cgroup of a box whose worker died (its directory gone) is removed by the next
// Sandbox; a live box's stays.
func TestStaleCgroupsAreRemoved(t *testing.T) {
	s := boxT(t, Settings{Net: NetNone})
	if !s.LimitsEnforced() {
		t.Skip("no cgroup here")
	}
	dead, err := s.cgroups.create(boxDirPrefix+"dead-worker", 64<<20, 64)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(dead.remove)
	live, err := s.Prepare(ctxT(t), Spec{Path: "/bin/true", Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()
	boxT(t, Settings{Net: NetNone})
	for _, d := range dead.dirs {
		if _, err := os.Stat(d); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the dead box's cgroup %s: %v", d, err)
		}
	}
	for _, d := range live.cg.dirs {
		if _, err := os.Stat(d); err != nil {
			t.Errorf("the live box's cgroup %s: %v", d, err)
		}
	}
}

// A read-write bind (a plan's cache) counts against the disk limit by what the box adds
// to it: what it held before is not the box's doing, a filler is.
func TestBoxDiskCountsWhatBindsGrew(t *testing.T) {
	t.Parallel()
	s := boxT(t, Settings{Net: NetNone, Disk: 8 << 20})
	cache := t.TempDir()
	if err := os.WriteFile(filepath.Join(cache, "old"), make([]byte, 12<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ script, want string }{
		{`dd if=/dev/zero of=/cache/small bs=1M count=2 2>&1`, ""},
		{`dd if=/dev/zero of=/cache/fill bs=1M count=16 2>&1`, "disk limit 8 MiB"},
	} {
		box, err := s.Prepare(ctxT(t), Spec{Path: "/bin/sh", Args: []string{"-c", c.script}, Dir: t.TempDir(),
			Binds: []Bind{{Src: cache, Dst: "/cache"}}})
		if err != nil {
			t.Fatal(err)
		}
		out, err := runCmd(t, box)
		if got := box.Exceeded(); got != c.want {
			t.Errorf("%s: Exceeded() = %q, want %q; %v: %s", c.script, got, c.want, err, out)
		}
		box.Close()
	}
}
