package sandbox

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// cgroupParent is where this worker makes each box's cgroup: under its own cgroup, in
// cgroup v2's unified hierarchy or in cgroup v1's memory and pids hierarchies. The zero
// value makes none.
type cgroupParent struct {
	v2        string // the unified hierarchy's directory of this process's cgroup
	mem, pids string // cgroup v1's
}

// findCgroupParent finds where this process may make cgroups with a memory and a process
// limit, by making one: as root, or where a cgroup was delegated to its user.
func findCgroupParent() cgroupParent {
	own := ownCgroups()
	mounts := cgroupMounts()
	v1 := func(ctrl string) string {
		for _, m := range mounts {
			if !m.v2 && slices.Contains(m.opts, ctrl) {
				return under(m, own[ctrl])
			}
		}
		return ""
	}
	works := func(p cgroupParent) bool {
		g, err := p.create(fmt.Sprintf("whilly-probe-%d", os.Getpid()), 64<<20, 64)
		g.remove()
		return err == nil
	}
	if p := (cgroupParent{mem: v1("memory"), pids: v1("pids")}); p.mem != "" && p.pids != "" && works(p) {
		return p
	}
	for _, m := range mounts {
		if !m.v2 {
			continue
		}
		dir := under(m, own[""])
		if filepath.Base(dir) == workerLeaf {
			dir = filepath.Dir(dir) // moved there by an earlier call
		}
		if dir != "" && enableControllers(dir) == nil && works(cgroupParent{v2: dir}) {
			return cgroupParent{v2: dir}
		}
	}
	return cgroupParent{}
}

// workerLeaf is the cgroup (v2) the worker's processes move to, below their own.
const workerLeaf = "whilly-worker"

// enableControllers lets dir's children (cgroup v2) have memory and process limits. Only
// a cgroup without processes of its own may: where dir holds this worker (a delegated
// cgroup, a container's), its processes move to a leaf of their own first.
func enableControllers(dir string) error {
	ctl := filepath.Join(dir, "cgroup.subtree_control")
	err := writeCgroup(ctl, "+memory +pids")
	if !errors.Is(err, syscall.EBUSY) {
		return err
	}
	leaf := filepath.Join(dir, workerLeaf)
	if err := os.Mkdir(leaf, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return err
	}
	for _, pid := range strings.Fields(string(b)) {
		_ = writeCgroup(filepath.Join(leaf, "cgroup.procs"), pid) // one that ended meanwhile stays behind
	}
	return writeCgroup(ctl, "+memory +pids")
}

// ok reports whether boxes get cgroups.
func (p cgroupParent) ok() bool { return p.v2 != "" || p.mem != "" }

// removeStale removes the cgroups of boxes whose directory in tmpDir is gone: their worker
// died without closing them. A cgroup that still holds a process stays (rmdir refuses).
func (p cgroupParent) removeStale(tmpDir string) {
	for _, parent := range []string{p.v2, p.mem, p.pids} {
		if parent == "" {
			continue
		}
		entries, _ := os.ReadDir(parent)
		for _, e := range entries {
			if !e.IsDir() || !strings.HasPrefix(e.Name(), boxDirPrefix) {
				continue
			}
			if _, err := os.Lstat(filepath.Join(tmpDir, e.Name())); errors.Is(err, os.ErrNotExist) {
				_ = syscall.Rmdir(filepath.Join(parent, e.Name()))
			}
		}
	}
}

// cgroup is one box's cgroup: its directory in each hierarchy.
type cgroup struct {
	v2   bool
	dirs []string // v2: the one; v1: memory's, then pids'
}

// create makes the cgroup name with the limits. The memory limit covers swap too, where
// the controller accounts for it.
func (p cgroupParent) create(name string, memory int64, pids int) (*cgroup, error) {
	mem, pid := strconv.FormatInt(memory, 10), strconv.Itoa(pids)
	var g *cgroup
	type setting struct {
		file, value string
		optional    bool // skipped where the kernel does not have the file
	}
	var settings []setting
	if p.v2 != "" {
		d := filepath.Join(p.v2, name)
		g = &cgroup{v2: true, dirs: []string{d}}
		settings = []setting{{d + "/memory.max", mem, false}, {d + "/memory.swap.max", "0", true}, {d + "/pids.max", pid, false}}
	} else {
		m, q := filepath.Join(p.mem, name), filepath.Join(p.pids, name)
		g = &cgroup{dirs: []string{m, q}}
		settings = []setting{{m + "/memory.limit_in_bytes", mem, false}, {m + "/memory.memsw.limit_in_bytes", mem, true}, {q + "/pids.max", pid, false}}
	}
	for _, d := range g.dirs {
		if err := os.Mkdir(d, 0o755); err != nil {
			g.remove()
			return nil, fmt.Errorf("make the box's cgroup: %w", err)
		}
	}
	for _, s := range settings {
		if err := writeCgroup(s.file, s.value); err != nil && (!s.optional || !errors.Is(err, os.ErrNotExist)) {
			g.remove()
			return nil, fmt.Errorf("limit the box's cgroup: %w", err)
		}
	}
	return g, nil
}

// writeCgroup writes one of a cgroup's files, which exist or do not: it never makes one.
func writeCgroup(file, value string) error {
	f, err := os.OpenFile(file, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString(value)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// procs are the files the box's first process writes its pid to.
func (g *cgroup) procs() []string {
	var out []string
	for _, d := range g.dirs {
		out = append(out, filepath.Join(d, "cgroup.procs"))
	}
	return out
}

// exceeded says which limit the cgroup's counters saw reached: the kernel's OOM killer
// killed in it, or a fork failed at its process limit.
func (g *cgroup) exceeded() (memory, pids bool) {
	if g == nil {
		return false, false
	}
	memDir, pidsDir := g.dirs[0], g.dirs[0]
	memFile := "memory.events"
	if !g.v2 {
		pidsDir, memFile = g.dirs[1], "memory.oom_control"
	}
	oom, found := counter(filepath.Join(memDir, memFile), "oom_kill")
	if !found && !g.v2 {
		// Kernels before 4.13 do not count OOM kills.
		oom, _ = counter(filepath.Join(memDir, "memory.oom_control"), "under_oom")
	}
	max, _ := counter(filepath.Join(pidsDir, "pids.events"), "max")
	return oom > 0, max > 0
}

// counter reads the value of key in a cgroup's "key value" file.
func counter(file, key string) (n int64, found bool) {
	b, err := os.ReadFile(file)
	if err != nil {
		return 0, false
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), " "); ok && k == key {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return n, err == nil
		}
	}
	return 0, false
}

// kill kills every process in the cgroup.
func (g *cgroup) kill() {
	if g == nil {
		return
	}
	for _, f := range g.procs() {
		b, _ := os.ReadFile(f)
		for _, l := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(l); err == nil && pid > 0 {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	}
}

// remove kills what is left in the cgroup and removes it. The kernel lets a cgroup go
// once its last process is reaped, a moment after the kill.
func (g *cgroup) remove() {
	if g == nil {
		return
	}
	for try := 0; try < 100; try++ {
		g.kill()
		left := false
		for _, d := range g.dirs {
			if err := syscall.Rmdir(d); err != nil && !errors.Is(err, syscall.ENOENT) {
				left = true
			}
		}
		if !left {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// ownCgroups maps each v1 controller to this process's cgroup in its hierarchy, and ""
// to its cgroup in the unified hierarchy.
func ownCgroups() map[string]string {
	out := map[string]string{}
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return out
	}
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		parts := strings.SplitN(l, ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[1] == "" {
			out[""] = parts[2]
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			out[c] = parts[2]
		}
	}
	return out
}

// cgroupMount is one mounted cgroup hierarchy.
type cgroupMount struct {
	dir, root string   // where it is mounted; the hierarchy's directory mounted there
	v2        bool     // the unified hierarchy
	opts      []string // its super options (v1's controllers among them)
}

func cgroupMounts() []cgroupMount {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	var out []cgroupMount
	for _, l := range strings.Split(string(b), "\n") {
		pre, post, ok := strings.Cut(l, " - ")
		f, g := strings.Fields(pre), strings.Fields(post)
		if !ok || len(f) < 5 || len(g) < 3 || (g[0] != "cgroup" && g[0] != "cgroup2") {
			continue
		}
		out = append(out, cgroupMount{dir: unescapeMount(f[4]), root: unescapeMount(f[3]), v2: g[0] == "cgroup2",
			opts: strings.Split(g[2], ",")})
	}
	return out
}

// under is the directory of cgroup path in mount m; "" when the mount does not show it.
func under(m cgroupMount, path string) string {
	if path == "" {
		return ""
	}
	rel, err := filepath.Rel(m.root, path)
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		// A container that sees its own cgroup as the mount's root.
		rel = "."
	}
	d := filepath.Join(m.dir, rel)
	if fi, err := os.Stat(d); err != nil || !fi.IsDir() {
		return ""
	}
	return d
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// limitAddressSpace bounds this process's address space and its children's: the best
// a box without a cgroup gets for its memory.
func limitAddressSpace(n int64) error {
	return syscall.Setrlimit(syscall.RLIMIT_AS, &syscall.Rlimit{Cur: uint64(n), Max: uint64(n)})
}
