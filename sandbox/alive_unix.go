//go:build unix

package sandbox

import (
	"errors"
	"syscall"
)

// processAlive reports whether pid names a process (of any user).
func processAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
