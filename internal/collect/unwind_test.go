package collect

import (
	"bufio"
	"bytes"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/flint-dev/flint/internal/fixture"
	"github.com/flint-dev/flint/internal/profile"
	"github.com/flint-dev/flint/internal/sampler"
)

// nofpPaths are the stacks of testdata/fixtures/nofp/nofp.c, as the
// functions of the fixture and its plugin in them from main down (the
// libc frames between them differ from one qsort or raise to the next),
// and the share of samples each should take, in percent (func_b's 30% falls
// between compare and qsort's own code). The recursion is 41 frames.
var nofpPaths = map[string]float64{
	"main;func_a;" + strings.Repeat("recurse;", 40) + "recurse": 50,
	"main;func_c;plugin_burn":                                   10,
	"main;func_c;on_signal":                                     10,
}

// nofpFuncs are the fixture's own functions: fixturePath keeps these.
var nofpFuncs = map[string]bool{
	"main": true, "func_a": true, "func_b": true, "func_c": true, "recurse": true,
	"compare": true, "plugin_burn": true, "spin": true, "on_signal": true,
}

// TestRecordWithoutFramePointers records C and C++ fixtures built without
// frame pointers, whose work runs inside libc, libstdc++, libgcc_s, a
// library loaded after the first sample and a signal handler: the CPU
// split holds and at least 99% of the stacks reach main, which takes
// walking the binaries' unwind tables.
func TestRecordWithoutFramePointers(t *testing.T) {
	requireRoot(t)
	fx := buildFixtures(t)
	t.Run("c", func(t *testing.T) {
		cmd := startFixture(t, fx["nofp"], fx["nofp-plugin"], "60")
		p := recordFixture(t, RecordOptions{PID: cmd.Process.Pid})
		checkSplit(t, p, byPID(cmd.Process.Pid), cFuncs, "main")
		got, _, _ := shares(p, byPID(cmd.Process.Pid), []string{"plugin_burn", "on_signal"}, "main")
		for i, fn := range []string{"plugin_burn", "on_signal"} {
			if math.Abs(got[i]-10) > tolerance {
				t.Errorf("%s: %.1f%% of samples, want 10%% ± %.0f", fn, got[i], tolerance)
			}
		}
		paths := fixturePaths(flintStacks(p))
		for path, want := range nofpPaths {
			if got := paths[path]; math.Abs(got-want) > 2*tolerance {
				t.Errorf("%.1f%% of stacks are %s, want about %.0f%%", got, path, want)
			}
		}
	})
	t.Run("c++", func(t *testing.T) {
		cmd := startFixture(t, fx["nofp-cc"], "60")
		p := recordFixture(t, RecordOptions{PID: cmd.Process.Pid})
		checkSplit(t, p, byPID(cmd.Process.Pid), cFuncs, "main")
	})
}

// TestRecordThroughLoadedLibrary records testdata/fixtures/nofp/callback.c
// as it loads a library and spends its time in its own code called back
// from it. Every leaf is in the program, listed before the library was
// loaded: only a caller outside the listed mappings, reached by unwind
// rows from the leaf, can have the process listed again. After the load,
// at least 95% of the samples reach main through the library's frame: 0%
// when only a leaf has the process listed again, 99.75-99.95% in four runs
// (three beside a CPU hog); the samples between the load and the
// library's tables cannot.
func TestRecordThroughLoadedLibrary(t *testing.T) {
	requireRoot(t)
	fx := buildFixtures(t)
	cmd := startFixture(t, fx["callback"], fx["nofp-plugin"], "60")
	reports := 0
	res := record(t, RecordOptions{PID: cmd.Process.Pid}, func(Progress) bool {
		if reports++; reports == 1 { // sampling: load the library now
			if err := cmd.Process.Signal(syscall.SIGUSR1); err != nil {
				t.Fatal(err)
			}
		}
		return reports == 1+int(testCPU/time.Second)
	})
	loaded := func(s *profile.Sample) bool { return byPID(cmd.Process.Pid)(s) && !holds(s, "before") }
	got, mainShare, total := shares(res.Profile, loaded, []string{"plugin_call"}, "main")
	t.Logf("%d samples after the load: %.2f%% through plugin_call, %.2f%% reach main", total, got[0], mainShare)
	if total == 0 || got[0] < 95 || mainShare < 95 {
		t.Errorf("after the load, %.2f%% of %d samples pass plugin_call and %.2f%% reach main, want ≥ 95%% each",
			got[0], total, mainShare)
		dumpTop(t, res.Profile, loaded, "main")
	}
}

// TestRecordLikePerfDWARF records the C fixture with flint, then with
// `perf record --call-graph dwarf`, which copies each sample's stack and
// unwinds it afterwards with the same tables: the paths through the
// fixture's functions take the same shares within 3 points.
func TestRecordLikePerfDWARF(t *testing.T) {
	requireRoot(t)
	fixture.NeedTools(t, "perf")
	fx := buildFixtures(t)
	cmd := startFixture(t, fx["nofp"], fx["nofp-plugin"], "60")
	p := recordFixture(t, RecordOptions{PID: cmd.Process.Pid})
	theirs, _ := startPerf(t, cmd.Process.Pid, 3*time.Second, testFreq)()
	compareShares(t, fixturePaths(flintStacks(p)), fixturePaths(theirs), nil)
}

// TestRecordRedisLikePerfDWARF records Debian's redis-server, built
// without frame pointers like the rest of the distribution, under a steady
// redis-benchmark load, with flint and at the same time with `perf record
// --call-graph dwarf`: at least 95% of flint's stacks reach main, and the
// 10 functions of redis-server with the most inclusive time by perf's
// account take the same share in flint's within 3 points, compared over
// the same leaves (sameLeaves). perf samples at 199 Hz: at 997 Hz its
// copying of 8 KiB a sample slows the load so much that the mix it
// measures is another (beforeSleep, the replies' write(), went from 51% to
// 67% of flint's samples with it running).
func TestRecordRedisLikePerfDWARF(t *testing.T) {
	requireRoot(t)
	fixture.NeedTools(t, "perf", "redis-server", "redis-benchmark")
	port := strconv.Itoa(freePort(t))
	server := exec.Command("redis-server", "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no")
	if err := server.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { server.Process.Kill(); server.Wait() })
	for deadline := time.Now().Add(10 * time.Second); ; {
		c, err := net.Dial("tcp", "127.0.0.1:"+port)
		if err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("redis-server does not answer on port %s: %v", port, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// One command for good: a mix that changes (-t get,set, or -l
	// reconnecting) is another workload from one second to the next.
	bench := exec.Command("redis-benchmark", "-p", port, "-q", "-c", "20", "-P", "4", "-t", "get", "-n", "1000000000")
	if err := bench.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bench.Process.Kill(); bench.Wait() })
	time.Sleep(time.Second) // past the connections' set-up

	const d = 15 * time.Second
	pid := server.Process.Pid
	perf := startPerf(t, pid, d+time.Second, 199)
	p := record(t, RecordOptions{PID: pid}, func(p Progress) bool { return p.Elapsed >= d }).Profile
	ours := flintStacks(p)
	theirs, dsos := perf()

	reachMain, total := int64(0), int64(0)
	for _, s := range ours {
		total += s.count
		if slices.Contains(s.frames, "main") {
			reachMain += s.count
		}
	}
	if total == 0 {
		t.Fatal("no samples of redis-server")
	}
	if share := 100 * float64(reachMain) / float64(total); share < 95 {
		t.Errorf("%.1f%% of %d stacks reach main, want ≥ 95%%", share, total)
	} else {
		t.Logf("%.1f%% of %d stacks reach main", share, total)
	}
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	if err != nil {
		t.Fatal(err)
	}
	own := map[string]bool{} // redis-server's named functions
	for name, dso := range dsos {
		if dso == exe && !strings.HasPrefix(name, "[") {
			own[name] = true
		}
	}
	ourShares, theirShares := sameLeaves(ours, theirs, own)
	var top []string
	for name := range own {
		top = append(top, name)
	}
	sort.Slice(top, func(i, j int) bool { return theirShares[top[i]] > theirShares[top[j]] })
	t.Logf("%d samples by flint, %d by perf", total, len(theirs))
	compareShares(t, ourShares, theirShares, top[:min(10, len(top))])
}

// sameLeaves returns the inclusive shares of functions in two profiles of
// one program as if both had sampled the same places: each profile's
// stacks are grouped by their deepest function of own (the anchor), and
// theirs is weighed by our share of each anchor. Unwinding decides what
// lies above an anchor, not how often a profiler lands below it: two
// profilers whose samples fall differently (timers firing late in code
// that masks interrupts, perf slowing what it samples) agree on these
// shares if and only if their stacks agree above each anchor.
func sameLeaves(ours, theirs []stackCount, own map[string]bool) (ourShares, theirShares map[string]float64) {
	type group struct {
		total int64
		holds map[string]int64 // stacks holding each function
	}
	groups := func(stacks []stackCount) map[string]*group {
		g := map[string]*group{}
		for _, s := range stacks {
			anchor := ""
			for _, f := range s.frames {
				if own[f] {
					anchor = f
				}
			}
			a := g[anchor]
			if a == nil {
				a = &group{holds: map[string]int64{}}
				g[anchor] = a
			}
			a.total += s.count
			seen := map[string]bool{}
			for _, f := range s.frames {
				if !seen[f] {
					seen[f] = true
					a.holds[f] += s.count
				}
			}
		}
		return g
	}
	og, tg := groups(ours), groups(theirs)
	var weight int64
	for anchor, a := range og {
		if tg[anchor] != nil {
			weight += a.total
		}
	}
	ourShares, theirShares = map[string]float64{}, map[string]float64{}
	for anchor, a := range og {
		b := tg[anchor]
		if b == nil {
			continue
		}
		w := 100 * float64(a.total) / float64(weight)
		for f, n := range a.holds {
			ourShares[f] += w * float64(n) / float64(a.total)
		}
		for f, n := range b.holds {
			theirShares[f] += w * float64(n) / float64(b.total)
		}
	}
	return ourShares, theirShares
}

// freePort returns a TCP port nothing listens on now.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// compareShares checks that flint's and perf's shares of keys (all keys
// either holds, when nil) are within tolerance of each other.
func compareShares(t *testing.T, ours, theirs map[string]float64, keys []string) {
	t.Helper()
	if keys == nil {
		for k := range ours {
			keys = append(keys, k)
		}
		for k := range theirs {
			if _, ok := ours[k]; !ok {
				keys = append(keys, k)
			}
		}
		sort.Slice(keys, func(i, j int) bool { return ours[keys[i]]+theirs[keys[i]] > ours[keys[j]]+theirs[keys[j]] })
	}
	for _, k := range keys {
		if ours[k] < 0.5 && theirs[k] < 0.5 {
			continue
		}
		t.Logf("flint %5.1f%%, perf %5.1f%%: %s", ours[k], theirs[k], k)
		if math.Abs(ours[k]-theirs[k]) > tolerance {
			t.Errorf("%s: flint %.1f%% of stacks, perf --call-graph dwarf %.1f%%", k, ours[k], theirs[k])
		}
	}
}

// stackCount is one stack, root first, and its samples.
type stackCount struct {
	frames []string
	count  int64
}

// flintStacks lists the user stacks of p's samples by function name.
func flintStacks(p *profile.Profile) []stackCount {
	var out []stackCount
	for _, s := range p.Samples {
		var frames []string
		for i := len(s.Stack) - 1; i >= 0; i-- {
			l := s.Stack[i]
			if l.Mapping != nil && l.Mapping.Kernel {
				continue
			}
			for j := len(l.Frames) - 1; j >= 0; j-- {
				frames = append(frames, l.Frames[j].Function)
			}
		}
		out = append(out, stackCount{frames, s.Count})
	}
	return out
}

// fixturePaths returns the share of stacks, in percent, per path of the
// fixture's own functions from main down.
func fixturePaths(stacks []stackCount) map[string]float64 {
	counts := map[string]int64{}
	var total int64
	for _, s := range stacks {
		var path []string
		for _, f := range s.frames {
			if nofpFuncs[f] && f != "spin" {
				path = append(path, f)
			}
		}
		counts[strings.Join(path, ";")] += s.count
		total += s.count
	}
	shares := map[string]float64{}
	for path, n := range counts {
		shares[path] = 100 * float64(n) / float64(total)
	}
	return shares
}

// startPerf starts recording every CPU with perf's DWARF unwinding for d
// at hz, sampling as flint does: a cpu-clock timer per CPU (not per task,
// which counts time in schedule() differently) with a fixed period (-F
// varies it, and perf script lists samples unweighted). The function it
// returns waits for perf and returns process pid's user stacks by function
// name, and the file each function is in.
func startPerf(t *testing.T, pid int, d time.Duration, hz int) func() ([]stackCount, map[string]string) {
	t.Helper()
	data := filepath.Join(t.TempDir(), "perf.data")
	rec := exec.Command("perf", "record", "-q", "-a", "-e", "cpu-clock", "-c", strconv.Itoa(int(time.Second)/hz),
		"--call-graph", "dwarf", "-o", data, "--", "sleep", fmt.Sprint(d.Seconds()))
	var out bytes.Buffer
	rec.Stdout, rec.Stderr = &out, &out
	if err := rec.Start(); err != nil {
		t.Fatal(err)
	}
	return func() ([]stackCount, map[string]string) {
		if err := rec.Wait(); err != nil {
			t.Fatalf("perf record: %v\n%s", err, out.Bytes())
		}
		script := exec.Command("perf", "script", "-i", data, "--pid", strconv.Itoa(pid), "--no-inline", "-F", "ip,sym,dso")
		script.Stderr = os.Stderr
		b, err := script.Output()
		if err != nil {
			t.Fatalf("perf script: %v", err)
		}
		return parsePerfScript(b)
	}
}

// parsePerfScript reads `perf script -F ip,sym,dso`: per sample, one line
// a frame, leaf first ("7f12 func_b (/usr/bin/x)"), then a blank line.
// Kernel frames are left out.
func parsePerfScript(out []byte) (stacks []stackCount, dsos map[string]string) {
	dsos = map[string]string{}
	var leafFirst []string
	flush := func() {
		if len(leafFirst) == 0 {
			return
		}
		frames := make([]string, len(leafFirst))
		for i, f := range leafFirst {
			frames[len(frames)-1-i] = f
		}
		stacks = append(stacks, stackCount{frames, 1})
		leafFirst = nil
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			flush()
			continue
		}
		addr, rest, _ := strings.Cut(line, " ")
		name, dso := rest, ""
		if i := strings.LastIndex(rest, " ("); i >= 0 && strings.HasSuffix(rest, ")") {
			name, dso = rest[:i], rest[i+2:len(rest)-1]
		}
		if dso == "[kernel.kallsyms]" || strings.HasPrefix(addr, "ffffffff") {
			continue
		}
		leafFirst = append(leafFirst, name)
		dsos[name] = dso
	}
	flush()
	return stacks, dsos
}

// TestRecordHostileEHFrame records copies of the C fixture whose .eh_frame
// was overwritten with random bytes, wholly, from its middle on, or in its
// rules only: the process runs as before (it never reads the section),
// flint parses what it can, walks what it parsed and never crashes, hangs
// or loses a sample.
func TestRecordHostileEHFrame(t *testing.T) {
	requireRoot(t)
	fixture.NeedTools(t, "objcopy")
	fx := buildFixtures(t)
	for _, tc := range []struct {
		name  string
		spoil func(section []byte, rng *rand.Rand)
	}{
		{"random", func(b []byte, rng *rand.Rand) { randomize(b, rng) }},
		{"half-random", func(b []byte, rng *rand.Rand) { randomize(b[len(b)/2:], rng) }},
		// Entries that still delimit and parse, whose rules are noise: the
		// walker follows whatever CFAs they give.
		{"random-rules", func(b []byte, rng *rand.Rand) {
			for off := 0; off+8 <= len(b); {
				n := int(binary.LittleEndian.Uint32(b[off:]))
				if n == 0 || off+4+n > len(b) {
					break
				}
				// An FDE (CIE pointer not 0): its instructions follow the
				// pcrel start, the range and a one-byte augmentation size.
				if binary.LittleEndian.Uint32(b[off+4:]) != 0 && n > 13 {
					randomize(b[off+17:off+4+n], rng)
				}
				off += 4 + n
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bin := hostileCopy(t, fx["nofp"], tc.spoil)
			cmd := startFixture(t, bin, fx["nofp-plugin"], "60")
			// recordFixture checks that every sample taken is in the profile.
			p := recordFixture(t, RecordOptions{PID: cmd.Process.Pid})
			got, mainShare, total := shares(p, byPID(cmd.Process.Pid), cFuncs, "main")
			t.Logf("%d samples: %v, %.1f%% reach main", total, got, mainShare)
		})
	}
}

// hostileCopy copies bin with its .eh_frame spoiled (seeded: the same
// each run).
func hostileCopy(t *testing.T, bin string, spoil func([]byte, *rand.Rand)) string {
	t.Helper()
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	data, err := f.Section(".eh_frame").Data()
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	spoil(data, rand.New(rand.NewPCG(1, 2)))
	dir := t.TempDir()
	section, out := filepath.Join(dir, "eh_frame"), filepath.Join(dir, "nofp-hostile")
	if err := os.WriteFile(section, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if b, err := exec.Command("objcopy", "--update-section", ".eh_frame="+section, bin, out).CombinedOutput(); err != nil {
		t.Fatalf("objcopy: %v\n%s", err, b)
	}
	return out
}

// TestRecordFirstSamplesWithoutFramePointers records the whole node at 99
// Hz while short processes of testdata/fixtures/brief.c, built without
// frame pointers, run one after another: about three samples each, the
// first taken before the process is listed. A first sample in user code
// is handed to the listing, which walks it with the rows it fills: at
// least 95% of the samples in the fixture's work reach main (99.4-100% in
// five runs, three beside a CPU hog). Walked by frame pointers, the first
// samples stop at work: 66.9% and 68.0% in two runs without the handing.
func TestRecordFirstSamplesWithoutFramePointers(t *testing.T) {
	requireRoot(t)
	if !sampler.ListsNewProcesses() {
		t.Skip("this kernel has no BPF task works (Linux 6.18): no process is listed")
	}
	fx := buildFixtures(t)
	const warmUp, runs = 5, 60 // the first runs teach flint the fixture's files
	pids := map[string]bool{}
	finished := make(chan error, 1)
	start := func() {
		go func() {
			for i := range warmUp + runs {
				cmd := exec.Command(fx["brief-nofp"])
				if err := cmd.Run(); err != nil && cmd.ProcessState == nil {
					finished <- err
					return
				}
				if i >= warmUp {
					pids[strconv.Itoa(cmd.Process.Pid)] = true
				}
			}
			finished <- nil
		}()
	}
	reports, ended := 0, false
	var runErr error
	res := record(t, RecordOptions{Frequency: 99}, func(Progress) bool {
		if reports++; reports == 1 { // sampling
			start()
		}
		select {
		case runErr = <-finished:
			ended = true
		default:
		}
		return ended
	})
	if reports > 0 && !ended { // the recording's time ran out first
		runErr = <-finished
	}
	if runErr != nil {
		t.Fatal(runErr)
	}
	inWork := func(s *profile.Sample) bool {
		if !pids[s.Labels[profile.LabelPID]] {
			return false
		}
		for _, l := range s.Stack {
			if l.Mapping == nil || !l.Mapping.Kernel {
				return len(l.Frames) > 0 && l.Frames[0].Function == "work"
			}
		}
		return false
	}
	_, mainShare, total := shares(res.Profile, inWork, nil, "main")
	st := res.Stats
	t.Logf("%d samples in work of %d runs: %.1f%% reach main; %d samples handed to listings, %d sent",
		total, runs, mainShare, st.SamplesHanded, st.SamplesListed)
	if total < runs || mainShare < 95 {
		t.Errorf("%.1f%% of %d samples in work reach main, want ≥ 95%% of at least %d", mainShare, total, runs)
		dumpTop(t, res.Profile, inWork, "main")
	}
}

func randomize(b []byte, rng *rand.Rand) {
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
}

// TestRecordQuietWithoutFramePointers records the whole node while a second
// process of the C fixture starts after the first was learned: it maps
// only files known by then, so the kernel announces it without waking
// flint and walks its stacks with the rows it was told of (from its first
// sample, handed to its listing), and at least 99% of its stacks reach
// main. It is held stopped until then, so that its first sample is in its
// own code and it is listed.
func TestRecordQuietWithoutFramePointers(t *testing.T) {
	requireRoot(t)
	if !sampler.ListsNewProcesses() {
		t.Skip("this kernel has no BPF task works (Linux 6.18): no process is announced quietly")
	}
	fx := buildFixtures(t)
	first := startFixture(t, fx["nofp"], fx["nofp-plugin"], "60")
	second := startFixture(t, fx["nofp"], fx["nofp-plugin"], "60")
	if err := second.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	reports := 0
	res := record(t, RecordOptions{}, func(Progress) bool {
		if reports++; reports == 2 { // the first fixture learned
			if err := second.Process.Signal(syscall.SIGCONT); err != nil {
				t.Fatal(err)
			}
		}
		return reports == 2+int(testCPU/time.Second)
	})
	if res.Stats.ProcsQuiet == 0 {
		t.Errorf("no process was announced quietly: %+v", res.Stats)
	}
	// The first's samples before its tables were built cannot reach main:
	// beside a CPU hog (yes > /dev/null) they took it to 96.02-99.00% in
	// four runs, the second staying at 99.64-99.75%. Only the second's,
	// walked with rows from its first listed sample, must.
	_, firstShare, firstTotal := shares(res.Profile, byPID(first.Process.Pid), cFuncs, "main")
	t.Logf("first, pid %d: %d samples, %.2f%% reach main", first.Process.Pid, firstTotal, firstShare)
	_, mainShare, total := shares(res.Profile, byPID(second.Process.Pid), cFuncs, "main")
	t.Logf("second, pid %d: %d samples, %.2f%% reach main", second.Process.Pid, total, mainShare)
	if total == 0 || mainShare < minMainShare {
		t.Errorf("pid %d: %.2f%% of %d samples reach main, want ≥ %.0f%%", second.Process.Pid, mainShare, total, minMainShare)
		dumpTop(t, res.Profile, byPID(second.Process.Pid), "main")
	}
}
