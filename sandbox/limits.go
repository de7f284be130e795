package sandbox

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// Each box runs with limits: memory and processes in a cgroup of its own where the worker
// may make one, else memory as an address-space rlimit (a best effort); the disk its
// checkout and its scratch directory (HOME, /tmp) take, by a monitor that sums them while
// it runs. Going over one ends the run: Cmd.Exceeded names the limit.
//
// The box's first process is this program again, run outside the box as a shim:
//
//	init __whilly_sandbox_limits [--cgroup PROCS]… [--as BYTES] -- BWRAP ARGS…
//
// It moves itself into the cgroup (writing its pid to each PROCS file) or sets the
// rlimit, then executes bubblewrap: so everything in the box is in the cgroup before it
// can fork.
const limitsArg = "__whilly_sandbox_limits"

// How often a running box's counters are read, and how often at most its disk is summed:
// a walk that takes long (a huge checkout) waits ten times its own length.
const (
	watchEvery = 500 * time.Millisecond
	diskEvery  = 2 * time.Second
)

// runLimits is the shim.
func runLimits(args []string) int {
	for len(args) >= 2 && args[0] != "--" {
		flag, val := args[0], args[1]
		args = args[2:]
		var err error
		switch flag {
		case "--cgroup":
			err = writeCgroup(val, strconv.Itoa(os.Getpid()))
		case "--as":
			var n int64
			if n, err = strconv.ParseInt(val, 10, 64); err == nil {
				err = limitAddressSpace(n)
			}
		default:
			args = nil
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "whilly sandbox: limit the box (%s %s): %v\n", flag, val, err)
			return 125
		}
	}
	if len(args) < 2 || args[0] != "--" {
		fmt.Fprintln(os.Stderr, "whilly sandbox: usage: init "+limitsArg+" [--cgroup PROCS]… [--as BYTES] -- BWRAP ARGS…")
		return 125
	}
	err := syscall.Exec(args[1], args[1:], os.Environ()) // #nosec G702 -- the worker's own bwrap command line, built by Prepare
	fmt.Fprintf(os.Stderr, "whilly sandbox: run %s: %v\n", args[1], err)
	return 126
}

// LimitsEnforced reports whether the box's memory and process limits are a cgroup's; when
// not, memory is an rlimit of the address space (which some runtimes, reserving much
// more than they use, cannot start under) and processes are not bounded.
func (s *Sandbox) LimitsEnforced() bool { return s.Boxed() && s.cgroups.ok() }

// LimitsNote says how this machine limits the boxes, for whilly-worker's start and
// whilly doctor.
func (s *Sandbox) LimitsNote() string {
	if s.LimitsEnforced() {
		return fmt.Sprintf("each box runs in its own cgroup: memory %s, %d processes, disk %s",
			sizeString(s.limits.Memory), s.limits.Pids, sizeString(s.limits.Disk))
	}
	return fmt.Sprintf("this worker cannot make cgroups (it needs root, or a delegated cgroup): a box's memory is only an address-space rlimit of %s, "+
		"its processes are not limited; its disk is limited to %s", sizeString(s.limits.Memory), sizeString(s.limits.Disk))
}

// limitArgs are the shim's arguments for c: its cgroup, or the rlimit.
func (c *Cmd) limitArgs() []string {
	a := []string{limitsArg}
	if c.cg == nil {
		return append(a, "--as", strconv.FormatInt(c.limits.Memory, 10))
	}
	for _, p := range c.cg.procs() {
		a = append(a, "--cgroup", p)
	}
	return a
}

// Started watches the running box p: when it goes over a limit, it is killed. Call it
// once the process has started; Close stops the watch.
func (c *Cmd) Started(p *os.Process) {
	if c == nil || c.tmp == "" || c.watchDone != nil {
		return
	}
	c.watchStop, c.watchDone = make(chan struct{}), make(chan struct{})
	go c.watch(p)
}

func (c *Cmd) watch(p *os.Process) {
	defer close(c.watchDone)
	t := time.NewTicker(watchEvery)
	defer t.Stop()
	nextDisk := time.Now().Add(diskEvery)
	for {
		select {
		case <-c.watchStop:
			return
		case <-t.C:
		}
		start := time.Now()
		withDisk := !start.Before(nextDisk)
		why := c.over(withDisk)
		if withDisk {
			nextDisk = time.Now().Add(max(diskEvery, 10*time.Since(start)))
		}
		if why != "" {
			c.mu.Lock()
			c.exceeded = why
			c.mu.Unlock()
			_ = p.Kill() // bubblewrap: the box dies with it
			c.cg.kill()
			return
		}
	}
}

// stopWatch ends the watch, once.
func (c *Cmd) stopWatch() {
	if c.watchDone == nil {
		return
	}
	select {
	case <-c.watchStop:
	default:
		close(c.watchStop)
	}
	<-c.watchDone
}

// Exceeded names the limit the run went over ("memory limit 4 GiB"), or is "". Call it
// once the process has ended.
func (c *Cmd) Exceeded() string {
	if c == nil || c.tmp == "" {
		return ""
	}
	c.stopWatch()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.exceeded == "" {
		c.exceeded = c.over(true)
	}
	return c.exceeded
}

// over names the limit the box is over, summing its disk when withDisk.
func (c *Cmd) over(withDisk bool) string {
	memory, pids := c.cg.exceeded()
	switch {
	case memory:
		return "memory limit " + sizeString(c.limits.Memory)
	case pids:
		return fmt.Sprintf("process limit %d", c.limits.Pids)
	case withDisk && c.diskUsed() > c.limits.Disk:
		return "disk limit " + sizeString(c.limits.Disk)
	}
	return ""
}

// diskUsed is what the box holds on disk: its checkout and its own directory (HOME,
// /tmp) whole, and what its read-write binds (caches) grew by since it was prepared.
func (c *Cmd) diskUsed() int64 {
	return diskUsage(c.Dir, c.tmp) + max(0, diskUsage(c.rwBinds...)-c.rwBase)
}

// diskUsage sums the blocks the entries under dirs take (sparse files count what they
// hold; links are not followed), each at least a block's worth: empty files cost inodes.
func diskUsage(dirs ...string) int64 {
	const block = 4 << 10
	var n int64
	for _, d := range dirs {
		_ = filepath.WalkDir(d, func(_ string, e fs.DirEntry, err error) error {
			if err != nil {
				return nil //nolint:nilerr // what cannot be read is not counted
			}
			size := int64(block)
			if fi, err := e.Info(); err == nil {
				if st, ok := fi.Sys().(*syscall.Stat_t); ok {
					size = max(size, int64(st.Blocks)*512)
				} else {
					size = max(size, fi.Size())
				}
			}
			n += size
			return nil
		})
	}
	return n
}

// sizeString writes n bytes in the largest binary unit that divides it ("4 GiB").
func sizeString(n int64) string {
	for _, u := range []struct {
		shift uint
		name  string
	}{{40, "TiB"}, {30, "GiB"}, {20, "MiB"}, {10, "KiB"}} {
		if n >= 1<<u.shift && n%(1<<u.shift) == 0 {
			return fmt.Sprintf("%d %s", n>>u.shift, u.name)
		}
	}
	return fmt.Sprintf("%d bytes", n)
}

// limitsState is a Cmd's part in the limits.
type limitsState struct {
	limits               Settings // Memory, Pids, Disk
	cg                   *cgroup  // nil without one
	rwBinds              []string // the read-write binds' sources
	rwBase               int64    // their disk usage when the box was prepared
	watchStop, watchDone chan struct{}
	mu                   sync.Mutex
	exceeded             string
}
