package sandbox

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// NotDumpable makes this process non-dumpable (PR_SET_DUMPABLE 0): processes of the same
// user can no longer read its memory, environment or file descriptors through /proc or
// ptrace, and it writes no core dump. whilly-worker and whilly serve call it at start:
// they hold tokens and the App key.
func NotDumpable() error {
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fmt.Errorf("prctl PR_SET_DUMPABLE 0: %w", err)
	}
	return nil
}

// Dumpable reports whether this process is dumpable.
func Dumpable() (bool, error) {
	v, err := unix.PrctlRetInt(unix.PR_GET_DUMPABLE, 0, 0, 0, 0)
	if err != nil {
		return false, fmt.Errorf("prctl PR_GET_DUMPABLE: %w", err)
	}
	return v != 0, nil
}
