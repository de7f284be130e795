package pglocal

import (
	"bytes"
	"os"
	"strconv"
	"strings"
)

// notPostmaster reports whether pid, although kill(pid, 0) finds it, cannot be a live
// postmaster: it is a zombie (its parent, often a container's PID 1, never reaps it),
// or the number now belongs to another program (the pid file survived a reboot). Either
// way the server would refuse to start over the stale pid file. When /proc cannot tell,
// it answers false and leaves the decision to the server.
func notPostmaster(pid int) bool {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// pid (comm) state ...; comm may itself contain ')' so cut at the last one.
	open, end := bytes.IndexByte(stat, '('), bytes.LastIndexByte(stat, ')')
	if open < 0 || end < open || end+2 >= len(stat) {
		return false
	}
	comm, state := string(stat[open+1:end]), stat[end+2]
	if state == 'Z' || state == 'X' {
		return true
	}
	return !strings.Contains(comm, "postgres") && !strings.Contains(comm, "postmaster")
}
