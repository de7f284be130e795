//go:build !linux

package sandbox

// NotDumpable has no equivalent outside Linux; bubblewrap is Linux-only anyway.
func NotDumpable() error { return nil }

// Dumpable reports true: nothing makes this process non-dumpable here.
func Dumpable() (bool, error) { return true, nil }
