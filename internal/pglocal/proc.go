package pglocal

import (
	"errors"
	"syscall"
)

// processExists reports whether kill(2) finds pid; EPERM means it exists but belongs
// to another user.
func processExists(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
