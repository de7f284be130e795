//go:build unix

package agent

import (
	"errors"
	"os"
	"os/exec"
	"syscall"
)

// setProcessGroup makes the child the leader of a new process group whose id is its pid,
// so one signal reaches it and everything it spawns.
func setProcessGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	dieWithWorker(cmd.SysProcAttr)
}

// terminateGroup asks the whole group to stop (SIGTERM).
func terminateGroup(p *os.Process) error { return signalGroup(p, syscall.SIGTERM) }

// killGroup kills whatever is left of the group (SIGKILL). Called after the leader was
// reaped it still reaches the leader's children: the group id lives as long as a member
// does, and the kernel does not reuse a pid that still names a process group.
func killGroup(p *os.Process) error { return signalGroup(p, syscall.SIGKILL) }

func signalGroup(p *os.Process, sig syscall.Signal) error {
	if p == nil || p.Pid <= 0 {
		return nil
	}
	err := syscall.Kill(-p.Pid, sig)
	if errors.Is(err, syscall.ESRCH) {
		return nil // the group is already gone
	}
	return err
}

func isTextBusy(err error) bool { return errors.Is(err, syscall.ETXTBSY) }
