//go:build !unix

package agent

import (
	"os"
	"os/exec"
)

// Without process groups only the direct child can be stopped; whilly's workers run on
// unix systems, this keeps the package compiling elsewhere.
func setProcessGroup(*exec.Cmd) {}

func terminateGroup(p *os.Process) error { return killGroup(p) }

func killGroup(p *os.Process) error {
	if p == nil {
		return nil
	}
	return p.Kill()
}

func isTextBusy(error) bool { return false }

// startWatchdog has no equivalent without process groups.
func startWatchdog(int, string) (stop func()) { return func() {} }
