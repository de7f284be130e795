//go:build unix

package agent

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strconv"
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

// startWatchdog starts a tiny process outside the agent's group that SIGKILLs the group
// (pgid) if the worker dies, and then every process whose environment holds tag (those
// that left the group with setsid; where /proc and GNU grep are there): it blocks
// reading a pipe whose only write end the worker holds (close-on-exec, so no other child
// inherits it), and the kernel closes that end when the worker dies, however it dies.
// Pdeathsig alone reaches only the group leader. stop ends the watchdog without letting
// it fire; call it once the group is gone, so a reused group id is never signalled.
// Without a shell there is no watchdog.
func startWatchdog(pgid int, tag string) (stop func()) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		return func() {}
	}
	r, w, err := os.Pipe()
	if err != nil {
		return func() {}
	}
	// Not tied to any context: its whole point is to outlive the worker; stop ends it.
	cmd := exec.CommandContext(context.Background(), sh, "-c", `read _ && exit
kill -s KILL -- "-$1" 2>/dev/null
for f in /proc/[0-9]*/environ; do
  if grep -qzxF -- "$2" "$f" 2>/dev/null; then p=${f#/proc/}; kill -s KILL "${p%/environ}" 2>/dev/null; fi
done`, "whilly-watchdog", strconv.Itoa(pgid), tag)
	cmd.Stdin = r
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	err = cmd.Start()
	_ = r.Close() // the watchdog has its copy
	if err != nil {
		_ = w.Close()
		return func() {}
	}
	return func() {
		_ = cmd.Process.Kill() // first, so that closing w below cannot make it fire
		_ = w.Close()
		_ = cmd.Wait()
	}
}
