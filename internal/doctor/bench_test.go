package doctor

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
)

// BenchmarkTracingCost measures what flint's tracing adds to a syscall: a C
// loop times 1,000,000 calls of getppid (never traced by doctor: what every
// other syscall on the node pays) and of epoll_wait with a zero timeout (a
// traced call) with nothing attached, with doctor's tracepoints, and with
// `flint syscalls -p PID`'s raw_syscalls tracing another process or the
// looping one. docs/BENCHMARKS.md records the results:
//
//	sudo go test -run '^$' -bench TracingCost -benchtime 1x -count 5 ./internal/doctor/
func BenchmarkTracingCost(b *testing.B) {
	benchmarkRoot(b)
	fx := buildFixtures(b)
	for _, call := range []string{"getppid", "epoll0"} {
		for _, mode := range []string{"untraced", "doctor", "every-other-pid", "every-this-pid"} {
			b.Run(call+"/"+mode, func(b *testing.B) {
				var sum float64
				for range b.N {
					sum += timeCalls(b, fx["syscost"], call, func(pid int) func() {
						var o TracerOptions
						switch mode {
						case "untraced":
							return func() {}
						case "every-other-pid":
							o = TracerOptions{PID: 1, Every: true}
						case "every-this-pid":
							o = TracerOptions{PID: pid, Every: true}
						}
						tr, err := StartTracer(o)
						if err != nil {
							b.Fatal(err)
						}
						return func() { tr.Close() }
					})
				}
				b.ReportMetric(sum/float64(b.N), "ns/call")
			})
		}
	}
}

// BenchmarkUprobeHit measures a uprobe hit: a C loop calls an empty
// function 1,000,000 times, without and with a uprobe (running an empty BPF
// program) on it.
func BenchmarkUprobeHit(b *testing.B) {
	benchmarkRoot(b)
	fx := buildFixtures(b)
	for _, probed := range []bool{false, true} {
		b.Run(fmt.Sprintf("probed=%v", probed), func(b *testing.B) {
			var sum float64
			for range b.N {
				sum += timeCalls(b, fx["syscost"], "call", func(int) func() {
					if !probed {
						return func() {}
					}
					l := attachUprobe(b, fx["syscost"], "probe_target")
					return func() { l.Close() }
				})
			}
			b.ReportMetric(sum/float64(b.N), "ns/call")
		})
	}
}

// timeCalls runs doctor-syscost, attaches what attach returns for its pid,
// lets it loop and returns its nanoseconds per call.
func timeCalls(b *testing.B, bin, call string, attach func(pid int) func()) float64 {
	cmd := exec.Command(bin, call, "1000000")
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer cmd.Wait()
	r := bufio.NewReader(stdout)
	if line, _ := r.ReadString('\n'); line != "ready\n" {
		b.Fatalf("fixture said %q", line)
	}
	detach := attach(cmd.Process.Pid)
	defer detach()
	fmt.Fprintln(stdin, "go")
	line, err := r.ReadString('\n')
	if err != nil {
		b.Fatal(err)
	}
	ns, err := strconv.ParseFloat(strings.TrimSpace(line), 64)
	if err != nil {
		b.Fatal(err)
	}
	return ns
}

func benchmarkRoot(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("needs root to trace; run with sudo")
	}
}
