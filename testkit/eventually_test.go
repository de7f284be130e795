package testkit

import (
	"strings"
	"sync"
	"testing"
	"time"
)

func TestEventuallyWaitsForTheCondition(t *testing.T) {
	t.Parallel()
	rec := &fatalRecorder{TB: t}
	calls := 0
	var wg sync.WaitGroup
	wg.Go(func() {
		Eventually(rec, 10*time.Second, "the third call", func() bool { calls++; return calls == 3 })
	})
	wg.Wait()
	if rec.msg != "" || calls != 3 {
		t.Errorf("after %d calls: failed with %q, want success on the third call", calls, rec.msg)
	}
}

func TestEventuallyFailsNamingWhatAndHowLong(t *testing.T) {
	t.Parallel()
	rec := &fatalRecorder{TB: t}
	start := time.Now()
	var wg sync.WaitGroup
	wg.Go(func() {
		Eventually(rec, 50*time.Millisecond, "the sky to fall", func() bool { return false })
		t.Error("Eventually returned without failing")
	})
	wg.Wait()
	if waited := time.Since(start); waited < 50*time.Millisecond {
		t.Errorf("gave up after %v, before its 50ms timeout", waited)
	}
	if !strings.HasPrefix(rec.msg, "timed out after ") || !strings.HasSuffix(rec.msg, " waiting for the sky to fall") {
		t.Errorf("failure message %q does not say how long it waited and for what", rec.msg)
	}
}
