//go:build unix

package sandbox

import "syscall"

// openFlags make open fail on a symlink instead of following it, and not block on a FIFO
// an agent planted where a file was expected.
const openFlags = syscall.O_NOFOLLOW | syscall.O_NONBLOCK
