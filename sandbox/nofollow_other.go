//go:build !unix

package sandbox

// openFlags have no equivalent here; bubblewrap, and so a box, is Linux-only anyway.
const openFlags = 0
