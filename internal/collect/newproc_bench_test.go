package collect

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/flint-dev/flint/internal/proc"
	"github.com/flint-dev/flint/internal/symbol"
)

// startMapper starts a long-lived process that maps many shared libraries,
// as a new process on a busy node does: python3 when installed (through
// whatever shims lead to it), else sleep. It returns once the process runs
// its final executable.
func startMapper(b *testing.B) int {
	b.Helper()
	argv := []string{"sleep", "600"}
	if _, err := exec.LookPath("python3"); err == nil {
		argv = []string{"python3", "-c", "import time, math, zlib, bz2, lzma, random; time.sleep(600)"}
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	pid := cmd.Process.Pid
	// A shim execs the real binary under the same PID: wait for its
	// mappings to settle (the last library it loads).
	for range 200 {
		exe, _ := os.Readlink("/proc/" + itoa(pid) + "/exe")
		maps, _ := os.ReadFile("/proc/" + itoa(pid) + "/maps")
		base := filepath.Base(exe)
		if strings.HasPrefix(base, strings.TrimSuffix(argv[0], "3")) &&
			(argv[0] == "sleep" || strings.Contains(string(maps), "lzma")) {
			return pid
		}
		time.Sleep(10 * time.Millisecond)
	}
	b.Fatalf("%s did not start", argv[0])
	return 0
}

func itoa(n int) string { return strconv.Itoa(n) }

// cpuTime is the CPU time this process has used. On a shared machine the
// wall time per operation counts the time other work held the CPU; the
// CPU time per operation is what the agent would spend.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// reportCPU reports the CPU time per operation since start.
func reportCPU(b *testing.B, start time.Duration) {
	b.ReportMetric(float64(cpuTime()-start)/float64(b.N), "cpu-ns/op")
}

// BenchmarkNewProc measures what the agent spends when the sampler
// announces a new process: warm is the common case on a node, a new
// process of a binary whose files the agent already knows (a script run
// again, a worker forked); cold is the first process of its binaries.
func BenchmarkNewProc(b *testing.B) {
	pid := startMapper(b)
	p, err := proc.Read(pid)
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("pid %d: %s, %d executable mappings", pid, p.Exe, len(p.Mappings))
	b.Run("warm", func(b *testing.B) {
		sym := symbol.New()
		defer sym.Close()
		c := New(sym, "")
		c.NewProc(uint32(pid), 0)
		gen := uint32(1)
		cpu := cpuTime()
		for b.Loop() {
			c.NewProc(uint32(pid), gen)
			gen++
		}
		reportCPU(b, cpu)
	})
	b.Run("cold", func(b *testing.B) {
		cpu := cpuTime()
		for b.Loop() {
			sym := symbol.New()
			New(sym, "").NewProc(uint32(pid), 1)
			sym.Close()
		}
		reportCPU(b, cpu)
	})
}
