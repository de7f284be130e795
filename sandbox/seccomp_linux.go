package sandbox

import (
	"encoding/binary"
	"runtime"

	"golang.org/x/sys/unix"
)

// refused are the system calls the box's filter answers with EPERM: an agent that builds
// and tests code has no use for them, and each is a way at the kernel or out of the box
// (keyrings, bpf, perf, userfaultfd, mounts, new namespaces, kernel modules, kexec).
var refused = []uintptr{
	unix.SYS_KEYCTL, unix.SYS_ADD_KEY, unix.SYS_REQUEST_KEY,
	unix.SYS_BPF, unix.SYS_PERF_EVENT_OPEN, unix.SYS_USERFAULTFD,
	unix.SYS_MOUNT, unix.SYS_UMOUNT2, unix.SYS_PIVOT_ROOT, unix.SYS_MOUNT_SETATTR,
	unix.SYS_FSOPEN, unix.SYS_FSMOUNT, unix.SYS_MOVE_MOUNT, unix.SYS_OPEN_TREE, unix.SYS_FSCONFIG, unix.SYS_FSPICK,
	unix.SYS_UNSHARE, unix.SYS_SETNS,
	unix.SYS_KEXEC_LOAD, unix.SYS_KEXEC_FILE_LOAD,
	unix.SYS_INIT_MODULE, unix.SYS_FINIT_MODULE, unix.SYS_DELETE_MODULE,
}

// missing are the system calls the filter answers with ENOSYS, as a kernel without them
// would, so that their callers fall back: clone3, whose flags (in memory) a filter cannot
// read, to clone, whose flags it checks; io_uring, a frequent path of kernel exploits, to
// ordinary reads and writes (libuv, Node's, does).
var missing = []uintptr{unix.SYS_CLONE3, unix.SYS_IO_URING_SETUP, unix.SYS_IO_URING_ENTER, unix.SYS_IO_URING_REGISTER}

// cloneNamespaces are clone's flags that make new namespaces: refused like unshare.
const cloneNamespaces = unix.CLONE_NEWNS | unix.CLONE_NEWCGROUP | unix.CLONE_NEWUTS | unix.CLONE_NEWIPC |
	unix.CLONE_NEWUSER | unix.CLONE_NEWPID | unix.CLONE_NEWNET

// auditArch is the architecture the filter admits system calls of; 0 where it has none.
var auditArch = map[string]uint32{"amd64": unix.AUDIT_ARCH_X86_64, "arm64": unix.AUDIT_ARCH_AARCH64}[runtime.GOARCH]

// seccompFilter is the box's filter as bubblewrap's --seccomp reads it (a classic BPF
// program over struct seccomp_data, in the machine's byte order); nil on an architecture
// it does not know. System calls of another architecture (i386 and x32 on x86_64) are
// refused whole.
func seccompFilter() []byte {
	if auditArch == 0 {
		return nil
	}
	const (
		offNr   = 0  // seccomp_data.nr
		offArch = 4  // seccomp_data.arch
		offArg0 = 16 // the low half of seccomp_data.args[0] (little-endian)
		ld      = unix.BPF_LD | unix.BPF_W | unix.BPF_ABS
		jeq     = unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K
		jge     = unix.BPF_JMP | unix.BPF_JGE | unix.BPF_K
		jset    = unix.BPF_JMP | unix.BPF_JSET | unix.BPF_K
		ret     = unix.BPF_RET | unix.BPF_K
		allow   = unix.SECCOMP_RET_ALLOW
		eperm   = unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM)
		enosys  = unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS)
	)
	p := []unix.SockFilter{
		{Code: ld, K: offArch},
		{Code: jeq, Jt: 1, K: auditArch},
		{Code: ret, K: eperm},
		{Code: ld, K: offNr},
	}
	if runtime.GOARCH == "amd64" {
		const x32 = 0x40000000 // __X32_SYSCALL_BIT
		p = append(p, unix.SockFilter{Code: jge, Jf: 1, K: x32}, unix.SockFilter{Code: ret, K: eperm})
	}
	refuse := func(nr uintptr, with uint32) {
		p = append(p, unix.SockFilter{Code: jeq, Jf: 1, K: uint32(nr)}, unix.SockFilter{Code: ret, K: with})
	}
	for _, nr := range refused {
		refuse(nr, eperm)
	}
	for _, nr := range missing {
		refuse(nr, enosys)
	}
	p = append(p,
		unix.SockFilter{Code: jeq, Jf: 3, K: unix.SYS_CLONE},
		unix.SockFilter{Code: ld, K: offArg0},
		unix.SockFilter{Code: jset, Jf: 1, K: cloneNamespaces},
		unix.SockFilter{Code: ret, K: eperm},
		unix.SockFilter{Code: ret, K: allow},
	)
	out := make([]byte, 0, 8*len(p))
	for _, f := range p {
		out = binary.NativeEndian.AppendUint16(out, f.Code)
		out = append(out, f.Jt, f.Jf)
		out = binary.NativeEndian.AppendUint32(out, f.K)
	}
	return out
}
