//go:build !linux

package pglocal

// notPostmaster cannot inspect processes without /proc; the server's own stale-lock
// handling decides.
func notPostmaster(int) bool { return false }
