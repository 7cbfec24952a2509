package store

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/flint-dev/flint/internal/profile"
	"github.com/flint-dev/flint/internal/selector"
	"github.com/flint-dev/flint/internal/symbol"
)

// cpuTime is the CPU time (user + system) this process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkWrite writes the workload's windows (see workload), made of
// fresh objects as the agent's collector makes them, into a store whose
// caches are warm, as in an agent that has run for a while. cpu-ns/op is
// the process's CPU time per window, which is what the agent's budget
// counts; it includes SQLite's automatic WAL checkpoints.
func BenchmarkWrite(b *testing.B) {
	s := openTest(b, b.TempDir(), testOptions())
	wl := newWorkload(t0)
	windows := make([]*profile.Profile, 720) // 2 h, then repeated later
	for i := range windows {
		windows[i] = agentLike(wl.window(i))
	}
	write(b, s, windows[:10]...)
	var samples int64
	for _, smp := range windows[0].Samples {
		samples += smp.Count
	}
	b.ReportAllocs()
	ctx := context.Background()
	i := 10
	cpu := cpuTime()
	for b.Loop() {
		p := *windows[i%len(windows)]
		p.Start = t0.Add(time.Duration(i) * wlWindow)
		if err := s.Write(ctx, &p); err != nil {
			b.Fatal(err)
		}
		i++
	}
	b.ReportMetric(float64(cpuTime()-cpu)/float64(b.N), "cpu-ns/op")
	b.ReportMetric(float64(len(windows[0].Samples)), "pairs/window")
}

// BenchmarkWriteCold writes windows as the first window after a restart:
// with empty caches, every label set, stack, location, function and
// mapping is looked up in the database.
func BenchmarkWriteCold(b *testing.B) {
	s := openTest(b, b.TempDir(), testOptions())
	wl := newWorkload(t0)
	windows := make([]*profile.Profile, 60)
	for i := range windows {
		windows[i] = agentLike(wl.window(i))
	}
	write(b, s, windows...)
	b.ReportAllocs()
	ctx := context.Background()
	i := len(windows)
	var cpu time.Duration
	for b.Loop() {
		s.mu.Lock()
		s.w.resetCaches()
		s.mu.Unlock()
		p := *windows[i%len(windows)]
		p.Start = t0.Add(time.Duration(i) * wlWindow)
		c := cpuTime()
		if err := s.Write(ctx, &p); err != nil {
			b.Fatal(err)
		}
		cpu += cpuTime() - c
		i++
	}
	b.ReportMetric(float64(cpu)/float64(b.N), "cpu-ns/op")
}

// BenchmarkWriteNewProcs writes windows of short-lived processes that each
// bring stacks the store has not seen, as a python3 run a tenth of a
// second does (docs/BENCHMARKS.md, churn): wlChurn new processes a window,
// each with its own label set and six samples on stacks 60 deep, known
// code at the root and one or two locations never stored before near the
// leaf (a Python function at a new line). It writes with a deadline, as
// the agent does. cpu-ns/newproc is the CPU time of a window's write over
// its new processes.
func BenchmarkWriteNewProcs(b *testing.B) {
	s := openTest(b, b.TempDir(), testOptions())
	wl := newWorkload(t0)
	fresh := 0 // locations made so far: each is new to the store
	window := func(i int) *profile.Profile {
		rng := rand.New(rand.NewPCG(uint64(i), 11))
		p := &profile.Profile{Start: t0.Add(time.Duration(i) * wlWindow), Duration: wlWindow, Period: wlPeriod}
		for proc := range wlChurn {
			l := maps.Clone(wl.labels(proc%wlProcs, 0))
			l["pid"] = strconv.Itoa(100_000 + i*wlChurn + proc)
			for k := range 6 {
				base := wl.stack(rng.IntN(wlExes*wlStacksPerExe), 0)
				var st []*profile.Location
				for n := range 1 + k%4/3 {
					fresh++
					known := wl.userLocs[0][(fresh*7+n)%len(wl.userLocs[0])]
					st = append(st, &profile.Location{Address: uint64(fresh), Frames: []symbol.Frame{{
						Function: known.Frames[0].Function, File: known.Frames[0].File, Line: 100_000 + fresh}}})
				}
				for len(st) < 60 {
					st = append(st, base[len(st)%len(base)])
				}
				p.Samples = append(p.Samples, &profile.Sample{Stack: st, Count: 1, Labels: l})
			}
		}
		return agentLike(p)
	}
	write(b, s, window(0))
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	var cpu time.Duration
	i := 1
	for b.Loop() {
		p := window(i)
		c := cpuTime()
		if err := s.Write(ctx, p); err != nil {
			b.Fatal(err)
		}
		cpu += cpuTime() - c
		i++
	}
	b.ReportMetric(float64(cpu)/float64(b.N*wlChurn), "cpu-ns/newproc")
}

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

// wlChurn is the new processes of a window at ten a second.
const wlChurn = 100

// The 24 h dataset: 8640 windows of the workload, generated once per test
// binary run into a temporary directory that TestMain removes. With
// FLINT_BENCH_AGENT_STORE set to a stopped agent's data directory (as
// bench/agent.sh does), the windows are that agent's, repeated in order.
var dataset struct {
	once    sync.Once
	dir     string
	err     error
	bytes   int64 // of flint.db after a checkpoint
	samples int64 // sum of counts
	pairs   int64 // (labels, stack, count) triples written
	gen     time.Duration
}

const datasetWindows = 8640

func TestMain(m *testing.M) {
	if os.Getenv(crashChildEnv) != "" {
		crashChild()
		return
	}
	code := m.Run()
	stopSharedClickHouse()
	stopFleet()
	if dataset.dir != "" {
		os.RemoveAll(dataset.dir)
	}
	os.Exit(code)
}

func dataset24h(b *testing.B) string {
	b.Helper()
	dataset.once.Do(func() {
		dataset.dir, dataset.err = os.MkdirTemp("", "flint-store-bench-")
		if dataset.err != nil {
			return
		}
		start := time.Now()
		s, err := Open(dataset.dir, testOptions())
		if err != nil {
			dataset.err = err
			return
		}
		wl := newWorkload(t0)
		ctx := context.Background()
		var recorded []*profile.Profile
		if dir := os.Getenv("FLINT_BENCH_AGENT_STORE"); dir != "" {
			if recorded, err = agentWindows(dir); err != nil {
				dataset.err = err
				s.Close()
				return
			}
		}
		for i := range datasetWindows {
			var p *profile.Profile
			if recorded != nil {
				w := *recorded[i%len(recorded)]
				w.Start = t0.Add(time.Duration(i) * w.Duration)
				p = &w
			} else {
				p = agentLike(wl.window(i))
			}
			for _, smp := range p.Samples {
				dataset.samples += smp.Count
			}
			dataset.pairs += int64(len(p.Samples))
			if err := s.Write(ctx, p); err != nil {
				dataset.err = err
				s.Close()
				return
			}
		}
		// Leave the data in the main file, as a long-running agent's
		// checkpoints do.
		s.mu.Lock()
		s.w.conn.ExecContext(ctx, "PRAGMA wal_checkpoint(TRUNCATE)")
		s.mu.Unlock()
		if dataset.err = s.Close(); dataset.err != nil {
			return
		}
		fi, err := os.Stat(filepath.Join(dataset.dir, DBFile))
		if err != nil {
			dataset.err = err
			return
		}
		dataset.bytes = fi.Size()
		dataset.gen = time.Since(start)
	})
	if dataset.err != nil {
		b.Fatal(dataset.err)
	}
	source := "synthetic workload"
	if dir := os.Getenv("FLINT_BENCH_AGENT_STORE"); dir != "" {
		source = "the windows of the agent in " + dir
	}
	b.Logf("24 h dataset from %s: %d windows, %d samples, %d (labels, stack) pairs, %d bytes (%.2f B/sample, %.1f B/pair), generated in %s",
		source, datasetWindows, dataset.samples, dataset.pairs, dataset.bytes,
		float64(dataset.bytes)/float64(dataset.samples), float64(dataset.bytes)/float64(dataset.pairs), dataset.gen.Round(time.Second))
	return dataset.dir
}

// agentWindows reads every window of the store in dir, oldest first.
func agentWindows(dir string) ([]*profile.Profile, error) {
	s, err := Open(dir, testOptions())
	if err != nil {
		return nil, err
	}
	defer s.Close()
	// CPU windows: the benchmarks measure CPU queries and bytes per sample.
	rows, err := s.rdb.Query(`SELECT start, duration, period FROM windows WHERE type = 0 ORDER BY start`)
	if err != nil {
		return nil, err
	}
	type window struct{ start, duration, period int64 }
	var ws []window
	for rows.Next() {
		var w window
		if err := rows.Scan(&w.start, &w.duration, &w.period); err != nil {
			rows.Close()
			return nil, err
		}
		ws = append(ws, w)
	}
	rows.Close()
	if len(ws) == 0 {
		return nil, fmt.Errorf("no windows in %s", dir)
	}
	var out []*profile.Profile
	for _, w := range ws {
		start := time.Unix(0, w.start)
		p, err := s.Profile(context.Background(), Query{From: start, To: start.Add(time.Nanosecond)})
		if err != nil {
			return nil, err
		}
		p.Start, p.Duration, p.Period = start, time.Duration(w.duration), time.Duration(w.period)
		out = append(out, p)
	}
	return out, nil
}

func benchmarkProfile(b *testing.B, span time.Duration) {
	dir := dataset24h(b)
	s := openTest(b, dir, testOptions())
	from := t0
	if span < 24*time.Hour {
		from = t0.Add(12 * time.Hour) // the middle of the day
	}
	tests := []struct {
		name string
		q    Query
	}{
		{"all-labels", Query{}},
		{"keep-comm", Query{KeepLabels: []string{"comm"}}},
		{"pod-selector", Query{Selector: mustParseB(b, `{pod=~"svc1-.*"}`), KeepLabels: []string{"comm"}}},
	}
	for _, tt := range tests {
		b.Run(tt.name, func(b *testing.B) {
			q := tt.q
			q.From, q.To = from, from.Add(span)
			var n int
			cpu := cpuTime()
			for b.Loop() {
				p, err := s.Profile(context.Background(), q)
				if err != nil {
					b.Fatal(err)
				}
				n = len(p.Samples)
			}
			b.ReportMetric(float64(cpuTime()-cpu)/float64(b.N), "cpu-ns/op")
			b.ReportMetric(float64(n), "samples")
			b.ReportMetric(float64(dataset.bytes)/float64(dataset.samples), "disk-B/sample")
		})
	}
}

func mustParseB(b *testing.B, text string) selector.Selector {
	b.Helper()
	sel, err := selector.Parse(text)
	if err != nil {
		b.Fatal(err)
	}
	return sel
}

func BenchmarkProfile1h(b *testing.B)  { benchmarkProfile(b, time.Hour) }
func BenchmarkProfile24h(b *testing.B) { benchmarkProfile(b, 24*time.Hour) }

func BenchmarkSeries24h(b *testing.B) {
	s := openTest(b, dataset24h(b), testOptions())
	for _, by := range []string{"comm", "pid"} {
		b.Run(by, func(b *testing.B) {
			q := SeriesQuery{Query: Query{From: t0, To: t0.Add(24 * time.Hour)}, By: by, Step: 5 * time.Minute}
			var n int
			cpu := cpuTime()
			for b.Loop() {
				set, err := s.Series(context.Background(), q)
				if err != nil {
					b.Fatal(err)
				}
				n = len(set.Series)
			}
			b.ReportMetric(float64(cpuTime()-cpu)/float64(b.N), "cpu-ns/op")
			b.ReportMetric(float64(n), "series")
		})
	}
}

func BenchmarkLabelValues24h(b *testing.B) {
	s := openTest(b, dataset24h(b), testOptions())
	cpu := cpuTime()
	for b.Loop() {
		// A fresh store each time would measure the label cache cold; the
		// server keeps one store, so warm is what users see.
		if _, err := s.LabelValues(context.Background(), "pod", t0, t0.Add(24*time.Hour)); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(cpuTime()-cpu)/float64(b.N), "cpu-ns/op")
}

// BenchmarkQuickCheck24h times the check Open runs on the 24 h store; its
// MB/s says what a store of MaxSize costs at start.
func BenchmarkQuickCheck24h(b *testing.B) {
	dir := dataset24h(b)
	path := filepath.Join(dir, DBFile)
	fi, err := os.Stat(path)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(fi.Size())
	cpu := cpuTime()
	for b.Loop() {
		if err := quickCheck(context.Background(), path); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(cpuTime()-cpu)/float64(b.N), "cpu-ns/op")
}
