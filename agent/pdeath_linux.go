package agent

import "syscall"

// dieWithWorker asks the kernel to SIGKILL the agent when the worker dies, so a worker
// killed with SIGKILL does not leave its agent editing the workspace while another worker
// re-runs the task. It reaches the group leader; its children see their pipes close.
func dieWithWorker(a *syscall.SysProcAttr) { a.Pdeathsig = syscall.SIGKILL }
