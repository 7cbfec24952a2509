package store

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/flint-dev/flint/internal/profile"
	"github.com/flint-dev/flint/internal/store/chtest"
	"github.com/flint-dev/flint/internal/symbol"
)

// The fleet benchmark: FLINT_BENCH_NODES nodes (default 10) × 8 CPUs
// sampled at 99 Hz for FLINT_BENCH_WINDOWS 10 s windows (default 360: 1 h),
// written into a ClickHouse server of its own as that many agents would;
// then, to reach a fleet's size on a small machine, the server copies
// each node FLINT_BENCH_COPIES−1 times (default 10 in all: 100 nodes) under
// other node names and label set hashes (INSERT … SELECT); then the
// queries the UI makes. docs/BENCHMARKS.md has the command and figures.
//
// The fleet: 20 services, each a non-PIE binary (as Go builds them) with
// 300 distinct stacks whose popularity is Zipf-like; each node runs 50
// processes of random services with 2 thread names each, so a stack recurs
// on every node that runs its service. A node's 7,920 samples per window
// fall on processes and stacks by those popularities.

const (
	fleetServices = 20
	fleetStacks   = 300
	fleetProcs    = 50
	fleetCPUs     = 8
	fleetHz       = 99
)

type fleet struct {
	stacks [][][]*profile.Location // per service
	zipf   []float64               // cumulative popularity of stack i
}

func newFleet() *fleet {
	f := &fleet{}
	kernel := &profile.Mapping{File: "[kernel.kallsyms]", Kernel: true}
	rng := rand.New(rand.NewPCG(11, 12))
	var kern []*profile.Location
	for i := range 400 {
		kern = append(kern, &profile.Location{Address: 0xffffffff81000000 + uint64(i)*0x130, Mapping: kernel,
			Frames: []symbol.Frame{{Function: fmt.Sprintf("kernel_fn%d", i)}}})
	}
	for s := range fleetServices {
		m := &profile.Mapping{Start: 0x400000, Limit: 0x2400000, File: fmt.Sprintf("/usr/local/bin/service%d", s),
			BuildID: fmt.Sprintf("%040x", 0x5e41ce00+s)}
		var locs []*profile.Location
		for i := range 2000 {
			locs = append(locs, &profile.Location{Address: 0x401000 + uint64(i)*0x40, Mapping: m, Frames: []symbol.Frame{{
				Function: fmt.Sprintf("github.com/example/service%d/pkg%d.(*T%d).Method%d", s, i%31, i%7, i),
				File:     fmt.Sprintf("/src/service%d/pkg%d/file%d.go", s, i%31, i%9), Line: 10 + i%700}}})
		}
		var stacks [][]*profile.Location
		for range fleetStacks {
			var st []*profile.Location
			if rng.IntN(3) == 0 {
				for range 3 + rng.IntN(8) {
					st = append(st, kern[rng.IntN(len(kern))])
				}
			}
			for range 15 + rng.IntN(30) {
				st = append(st, locs[rng.IntN(len(locs))])
			}
			stacks = append(stacks, append(st, locs[0]))
		}
		f.stacks = append(f.stacks, stacks)
	}
	var sum float64
	for i := range fleetStacks {
		sum += 1 / math.Pow(float64(i+1), 1.1)
		f.zipf = append(f.zipf, sum)
	}
	for i := range f.zipf {
		f.zipf[i] /= sum
	}
	return f
}

// node returns the label sets of node n's processes (two per process, one
// per thread name) and each process's service.
func (f *fleet) node(n int) (labels [][2]map[string]string, services []int) {
	rng := rand.New(rand.NewPCG(uint64(n), 99))
	name := fmt.Sprintf("node-%03d", n)
	for p := range fleetProcs {
		s := rng.IntN(fleetServices)
		pid := 1000 + p*7
		var pair [2]map[string]string
		for t := range 2 {
			pair[t] = map[string]string{
				"comm": fmt.Sprintf("service%d", s), "thread": fmt.Sprintf("worker-%d", t), "pid": strconv.Itoa(pid),
				"start_time": strconv.Itoa(500000 + pid), "exe": fmt.Sprintf("/usr/local/bin/service%d", s),
				"build_id": fmt.Sprintf("%040x", 0x5e41ce00+s), "cgroup": fmt.Sprintf("/kubepods/pod%d-%d/ctr", n, p),
				"container": fmt.Sprintf("%012x", n*1000+p), "pod": fmt.Sprintf("service%d-%d-%d", s, n, p), "node": name,
			}
		}
		labels = append(labels, pair)
		services = append(services, s)
	}
	return labels, services
}

// window returns node n's window i: 7,920 samples, a process's share of
// them Zipf-like too.
func (f *fleet) window(n, i int, start time.Time, labels [][2]map[string]string, services []int) *profile.Profile {
	rng := rand.New(rand.NewPCG(uint64(n), uint64(i)))
	type key struct{ p, t, s int }
	counts := map[key]int64{}
	for range fleetCPUs * fleetHz * 10 {
		p := f.pick(rng) % fleetProcs
		st := f.pick(rng)
		counts[key{p, rng.IntN(2), st}]++
	}
	w := &profile.Profile{Start: start, Duration: 10 * time.Second, Period: time.Second / fleetHz}
	for k, c := range counts {
		w.Samples = append(w.Samples, &profile.Sample{Stack: f.stacks[services[k.p]][k.s], Count: c, Labels: labels[k.p][k.t]})
	}
	return w
}

func (f *fleet) pick(rng *rand.Rand) int {
	x := rng.Float64()
	lo, hi := 0, len(f.zipf)-1
	for lo < hi {
		mid := (lo + hi) / 2
		if f.zipf[mid] < x {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return lo
}

var fleetData struct {
	once    sync.Once
	srv     *chtest.Server
	dir     string
	err     error
	dsn     string
	nodes   int
	copies  int
	windows int
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// fleetStore ingests the fleet once per test binary and reports what it
// cost.
func fleetStore(b *testing.B) *ClickHouse {
	fd := &fleetData
	fd.once.Do(func() {
		fd.nodes = envInt("FLINT_BENCH_NODES", 10)
		fd.copies = envInt("FLINT_BENCH_COPIES", 10)
		fd.windows = envInt("FLINT_BENCH_WINDOWS", 360)
		if fd.dir, fd.err = os.MkdirTemp("", "flint-fleet-"); fd.err != nil {
			return
		}
		if fd.srv, fd.err = chtest.New(fd.dir); fd.err != nil {
			return
		}
		fd.dsn = fd.srv.DSN("flint")
		fd.err = ingestFleet(b, fd.dsn, fd.nodes, fd.copies, fd.windows)
	})
	if fd.err != nil {
		b.Fatal(fd.err)
	}
	s, err := OpenClickHouse(context.Background(), fd.dsn, testOptions())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	return s
}

func stopFleet() {
	if fleetData.srv != nil {
		fleetData.srv.Stop()
	}
	if fleetData.dir != "" {
		os.RemoveAll(fleetData.dir)
	}
}

// ingestFleet writes the fleet's windows through two writers (agents), each
// writing half the nodes, window after window.
func ingestFleet(b *testing.B, dsn string, nodes, copies, windows int) error {
	f := newFleet()
	type nodeState struct {
		labels   [][2]map[string]string
		services []int
	}
	states := make([]nodeState, nodes)
	for n := range nodes {
		states[n].labels, states[n].services = f.node(n)
	}
	const writers = 2
	var rows, samples [writers]int64
	var gen [writers]time.Duration
	errs := make(chan error, writers)
	begin := time.Now()
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			s, err := OpenClickHouse(context.Background(), dsn, testOptions())
			if err != nil {
				errs <- err
				return
			}
			defer s.Close()
			for i := range windows {
				for n := w; n < nodes; n += writers {
					g := time.Now()
					p := f.window(n, i, t0.Add(time.Duration(i)*10*time.Second), states[n].labels, states[n].services)
					gen[w] += time.Since(g)
					if err := s.Write(context.Background(), p); err != nil {
						errs <- err
						return
					}
					rows[w] += int64(len(p.Samples))
					samples[w] += p.Total()
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return err
	}
	took := time.Since(begin) - (gen[0]+gen[1])/writers
	s, err := OpenClickHouse(context.Background(), dsn, testOptions())
	if err != nil {
		return err
	}
	defer s.Close()
	ctx := context.Background()
	var bytes, diskRows, samplesBytes uint64
	sizes := func() error {
		bytes = 0
		return s.queryRows(ctx, "SELECT table, sum(bytes_on_disk), sum(rows) FROM system.parts WHERE active AND database = 'flint' GROUP BY table", func(r *rowReader) error {
			t, by, n := r.string(), r.uint64(), r.uint64()
			bytes += by
			if t == "samples" {
				diskRows, samplesBytes = n, by
			}
			b.Logf("  %s: %d rows, %d bytes", t, n, by)
			return nil
		})
	}
	b.Logf("fleet: %d nodes × %d windows: %d rows, %d samples in %s (%.0f rows/s, %.0f samples/s; window generation excluded)",
		nodes, windows, rows[0]+rows[1], samples[0]+samples[1], took.Round(time.Millisecond),
		float64(rows[0]+rows[1])/took.Seconds(), float64(samples[0]+samples[1])/took.Seconds())
	if err := sizes(); err != nil {
		return err
	}
	b.Logf("on disk after ingest: %d bytes, %.2f bytes per row, %.3f per sample", bytes,
		float64(bytes)/float64(rows[0]+rows[1]), float64(bytes)/float64(samples[0]+samples[1]))
	for _, t := range []string{"samples", "totals", "labelsets", "stacks", "windows"} {
		if err := s.hosts[0].exec(ctx, "OPTIMIZE TABLE "+t+" FINAL", nil); err != nil {
			return err
		}
	}
	if err := sizes(); err != nil {
		return err
	}
	if diskRows != uint64(rows[0]+rows[1]) {
		return fmt.Errorf("%d sample rows on disk, %d written", diskRows, rows[0]+rows[1])
	}
	b.Logf("on disk merged: %d bytes, %.2f bytes per row, %.3f per sample", bytes,
		float64(bytes)/float64(rows[0]+rows[1]), float64(bytes)/float64(samples[0]+samples[1]))
	if copies < 2 {
		return nil
	}
	// Copies: node X's k-th copy is node "X-ck", whose label sets hash
	// differently; stacks are shared, as between nodes running the same
	// binaries.
	begin = time.Now()
	k := fmt.Sprintf(" ARRAY JOIN arrayMap(x -> x + 1, range(%d)) AS k", copies-1)
	for _, q := range []string{
		"INSERT INTO labelsets SELECT day, concat(node, '-c', toString(k)) AS nn, cityHash64(hash, k), names, arrayMap((n, v) -> if(n = 'node', nn, v), names, values) FROM labelsets" + k,
		"INSERT INTO windows SELECT day, concat(node, '-c', toString(k)), start, duration, period, samples FROM windows" + k,
		"INSERT INTO samples SELECT day, concat(node, '-c', toString(k)), start, cityHash64(labels, k), stack, count, type FROM samples" + k,
		"INSERT INTO totals SELECT day, concat(node, '-c', toString(k)), start, cityHash64(labels, k), count, type FROM totals" + k,
		"OPTIMIZE TABLE samples FINAL",
		"OPTIMIZE TABLE totals FINAL",
		"OPTIMIZE TABLE labelsets FINAL",
	} {
		if err := s.hosts[0].exec(ctx, q, nil); err != nil {
			return fmt.Errorf("%.60s: %w", q, err)
		}
	}
	if err := sizes(); err != nil {
		return err
	}
	var total uint64
	err = s.queryRows(ctx, "SELECT sum(count) FROM samples", func(r *rowReader) error {
		total = r.uint64()
		return nil
	})
	if err != nil {
		return err
	}
	if want := uint64(copies) * uint64(samples[0]+samples[1]); total != want {
		return fmt.Errorf("%d samples after copying, want %d", total, want)
	}
	b.Logf("copied to %d nodes in %s: %d samples in %d sample rows; %d bytes on disk, %.2f per sample; the samples table %.2f bytes per row",
		nodes*copies, time.Since(begin).Round(time.Millisecond), total, diskRows, bytes, float64(bytes)/float64(total), float64(samplesBytes)/float64(diskRows))
	return nil
}

func BenchmarkClickHouseFleet(b *testing.B) {
	s := fleetStore(b)
	ctx := context.Background()
	hour := Query{From: t0, To: t0.Add(time.Hour), KeepLabels: []string{"comm"}}
	service := hour
	service.Selector = mustParseB(b, `{comm="service3"}`)
	b.Run("service-flame-1h", func(b *testing.B) {
		for b.Loop() {
			p, err := s.Profile(ctx, service)
			if err != nil || len(p.Samples) == 0 {
				b.Fatal(err)
			}
		}
	})
	b.Run("fleet-flame-1h", func(b *testing.B) {
		for b.Loop() {
			p, err := s.Profile(ctx, hour)
			if err != nil || len(p.Samples) == 0 {
				b.Fatal(err)
			}
		}
	})
	b.Run("series-1h", func(b *testing.B) {
		for b.Loop() {
			set, err := s.Series(ctx, SeriesQuery{Query: hour, By: "comm", Step: 10 * time.Second})
			if err != nil || len(set.Series) == 0 {
				b.Fatal(err)
			}
		}
	})
	b.Run("service-series-1h", func(b *testing.B) {
		for b.Loop() {
			set, err := s.Series(ctx, SeriesQuery{Query: service, By: "pod", Step: 10 * time.Second})
			if err != nil || len(set.Series) == 0 {
				b.Fatal(err)
			}
		}
	})
}
