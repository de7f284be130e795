//go:build linux

package agent

import (
	"bytes"
	"os"
	"strconv"
	"syscall"
)

// killTagged SIGKILLs every process whose environment holds tag (runTag's variable):
// the descendants of an attempt that left its process group with setsid, which the
// group signals cannot reach. It scans /proc a few times, for those that fork while it
// kills. Processes of other users cannot be read and are not ours.
func killTagged(tag string) {
	first, later := []byte(tag+"\x00"), []byte("\x00"+tag+"\x00")
	for range 5 {
		entries, err := os.ReadDir("/proc")
		if err != nil {
			return
		}
		found := false
		for _, e := range entries {
			pid, err := strconv.Atoi(e.Name())
			if err != nil || pid == os.Getpid() {
				continue
			}
			env, err := os.ReadFile("/proc/" + e.Name() + "/environ")
			if err != nil || (!bytes.HasPrefix(env, first) && !bytes.Contains(env, later)) {
				continue
			}
			found = true
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		if !found {
			return
		}
	}
}
