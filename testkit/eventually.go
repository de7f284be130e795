package testkit

import (
	"testing"
	"time"
)

// Eventually polls cond until it returns true, failing the test when timeout passes first
// with a message naming what was awaited and how long. It polls soon after the first try,
// then backs off to every 20 ms, so a fast condition is seen fast and a slow one does not
// keep a core busy. cond runs on the test's goroutine.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	start := time.Now()
	deadline := start.Add(timeout)
	pause := time.Millisecond
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", time.Since(start).Round(time.Millisecond), what)
		}
		time.Sleep(pause)
		pause = min(2*pause, 20*time.Millisecond)
	}
}
