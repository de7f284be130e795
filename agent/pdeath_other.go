//go:build unix && !linux

package agent

import "syscall"

// dieWithWorker has no portable equivalent outside Linux.
func dieWithWorker(*syscall.SysProcAttr) {}
