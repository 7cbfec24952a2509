package store

import (
	"context"
	"os"
	"runtime/pprof"
	"slices"
	"strconv"
	"testing"
	"time"
)

// BenchmarkWriteAgentWindows writes a stopped agent's windows
// (FLINT_BENCH_REPLAY, its data directory) into a new store, in order, as
// that agent wrote them: the windows starting before FLINT_BENCH_REPLAY_SPLIT
// (Unix seconds) are "idle", the others "busy" (the agent's churn). It
// reports the median CPU time of a window of each, leaving out each
// part's first three (the store's first rows; the churn's first runs).
// The busy ones run under the profiler label phase=busy, for
// `go tool pprof -tagfocus phase=busy`. docs/BENCHMARKS.md records a
// store and the command.
func BenchmarkWriteAgentWindows(b *testing.B) {
	dir := os.Getenv("FLINT_BENCH_REPLAY")
	if dir == "" {
		b.Skip("FLINT_BENCH_REPLAY (a stopped agent's data directory) is not set")
	}
	split, err := strconv.ParseInt(os.Getenv("FLINT_BENCH_REPLAY_SPLIT"), 10, 64)
	if err != nil {
		b.Fatalf("FLINT_BENCH_REPLAY_SPLIT: want the Unix time the busy windows start at: %v", err)
	}
	windows, err := agentWindows(dir)
	if err != nil {
		b.Fatal(err)
	}
	cpu := make([]time.Duration, len(windows))
	for b.Loop() {
		b.StopTimer()
		s, err := Open(b.TempDir(), testOptions())
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		for i, w := range windows {
			p := agentLike(w)
			phase := "busy"
			if w.Start.Unix() < split {
				phase = "idle"
			}
			c := cpuTime()
			pprof.Do(context.Background(), pprof.Labels("phase", phase), func(ctx context.Context) {
				if err := s.Write(ctx, p); err != nil {
					b.Fatal(err)
				}
			})
			cpu[i] += cpuTime() - c
		}
		s.Close()
	}
	var idle, busy []time.Duration
	for i, w := range windows {
		if w.Start.Unix() < split {
			idle = append(idle, cpu[i]/time.Duration(b.N))
		} else {
			busy = append(busy, cpu[i]/time.Duration(b.N))
		}
	}
	median := func(part []time.Duration) float64 {
		if len(part) <= 3 {
			b.Fatalf("%d windows in a part: want more than three", len(part))
		}
		part = part[3:]
		slices.Sort(part)
		return float64(part[len(part)/2])
	}
	b.ReportMetric(median(idle), "idle-cpu-ns/window")
	b.ReportMetric(median(busy), "busy-cpu-ns/window")
}
