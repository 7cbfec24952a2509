package unwind

import (
	"syscall"
	"testing"
	"time"

	"github.com/flint-dev/flint/internal/proc"
)

// BenchmarkTablesLearn measures what listing a new process of known
// binaries and forgetting it cost, in the CPU of all threads (getrusage),
// with the calls apart in time as on a node, where the goroutines
// involved go idle between two new processes. The pauses' own CPU (a
// timer's wake-up each) counts too, the same in any design.
func BenchmarkTablesLearn(b *testing.B) {
	tb := newTables(newFakeKernel(), 1<<22)
	defer tb.Close()
	ms := []proc.Mapping{mapping(b, libc, 0x1000000), mapping(b, libm, 0x3000000)}
	tb.Learn(&proc.Process{PID: 1, Mappings: ms}, 1)
	tb.Flush()
	start := cpuTime()
	for i := range b.N {
		pid := 2 + i
		tb.Learn(&proc.Process{PID: pid, Mappings: ms}, 1)
		time.Sleep(time.Millisecond)
		tb.Forget(uint32(pid), 1)
		time.Sleep(time.Millisecond)
	}
	b.ReportMetric(float64(cpuTime()-start)/float64(b.N), "cpu-ns/op")
}

// cpuTime is the CPU time the test process has used, all threads.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
