package unwind

import (
	"os"
	"testing"
	"time"

	"github.com/flint-dev/flint/internal/fixture"
	"github.com/flint-dev/flint/internal/proc"
)

// BenchmarkTablesLearn measures what listing a new process of known
// binaries and forgetting it cost, in the CPU of all threads,
// with the calls apart in time as on a node, where the goroutines
// involved go idle between two new processes. The pauses' own CPU (a
// timer's wake-up each) counts too, the same in any design.
func BenchmarkTablesLearn(b *testing.B) {
	tb := newTables(newFakeKernel(), 1<<22)
	defer tb.Close()
	ms := []proc.Mapping{mapping(b, libc, 0x1000000), mapping(b, libm, 0x3000000)}
	tb.Learn(&proc.Process{PID: 1, Mappings: ms}, 1)
	tb.Flush()
	start := selfCPU(b)
	for i := range b.N {
		pid := 2 + i
		tb.Learn(&proc.Process{PID: pid, Mappings: ms}, 1)
		time.Sleep(time.Millisecond)
		tb.Forget(uint32(pid), 1, false)
		time.Sleep(time.Millisecond)
	}
	b.ReportMetric(float64(selfCPU(b)-start)/float64(b.N), "cpu-ns/op")
}

// selfCPU is the CPU time of the benchmark's process, all its threads.
func selfCPU(b *testing.B) time.Duration {
	c, err := fixture.CPU(os.Getpid())
	if err != nil {
		b.Fatal(err)
	}
	return c
}
