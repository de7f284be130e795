//go:build linux && race

package e2e_test

// raceEnabled: the test binary runs under the race detector, so the binaries under test
// are built with it too — the build reuses the packages `go test -race` compiled, and a
// data race in a control plane or a worker fails the test that ran into it (exit 66).
const raceEnabled = true
