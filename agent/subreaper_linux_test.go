//go:build linux

package agent

import "syscall"

const prSetChildSubreaper = 36

func becomeSubreaper() {
	_, _, _ = syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 1, 0)
}
