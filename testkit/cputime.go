package testkit

import (
	"syscall"
	"testing"
	"time"
)

// ReportCPU reports, when the benchmark ends, the CPU time (user and system, every
// thread of this process, not the database's) spent per op since it was called: unlike
// ns/op, it does not count the time other processes of a busy machine hold the CPU.
func ReportCPU(b *testing.B) {
	b.Helper()
	begin := processCPU(b)
	b.Cleanup(func() {
		if b.N > 0 {
			b.ReportMetric(float64(processCPU(b)-begin)/float64(b.N), "cpu-ns/op")
		}
	})
}

func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatalf("getrusage: %v", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
