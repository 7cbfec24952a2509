package sampler

import (
	"debug/elf"
	"errors"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/flint-dev/flint/internal/proc"
	"github.com/flint-dev/flint/internal/unwind"
)

// TestRowsRewrittenAreUsed walks testdata/fixtures/spin.c with its own
// unwind rows, then rewrites them in place with rows that end every walk
// at the caller of the spinning function: the walker, which keeps the rows
// it found for return addresses (row_cache), must use the new ones. The
// fixture is kept on one CPU, whose cache the first walks fill.
func TestRowsRewrittenAreUsed(t *testing.T) {
	f := startPinnedSpin(t)
	if err := f.s.WriteRows(0, f.rows); err != nil {
		t.Fatal(err)
	}
	f.list(t)
	before := f.depths(t)
	var deep uint64
	for n, c := range before {
		if n >= 3 { // the function, main, libc's caller of main
			deep += c
		}
	}
	if deep < 20 {
		t.Fatalf("stack depths of the spinning functions with their own rows: %v; want 20 or more samples 3 deep or more", before)
	}

	if err := f.s.WriteRows(0, f.endingRows()); err != nil {
		t.Fatal(err)
	}
	if after := f.depths(t); !allTwoDeep(after) {
		t.Errorf("stack depths of the spinning functions after their callers' rows ended walks: %v; want 20 or more, all 2 (main's old row used: deeper)", after)
	}
}

// TestListedAfterSampled lists the spin fixture for unwinding only after
// its CPU has sampled it a while unlisted: the program, which caches per
// CPU that a process has no unwind mappings, must walk it by its rows from
// then on. The rows end every walk at the spinning function's caller, so
// a walk by them is 2 deep where the frame pointer walk is deeper.
func TestListedAfterSampled(t *testing.T) {
	f := startPinnedSpin(t)
	if err := f.s.WriteRows(0, f.endingRows()); err != nil {
		t.Fatal(err)
	}
	before := f.depths(t)
	if sum(before) < 20 || before[2] != 0 {
		t.Fatalf("stack depths of the spinning functions unlisted: %v; want 20 or more, none 2 (frame pointers: deeper)", before)
	}
	f.list(t)
	if after := f.depths(t); !allTwoDeep(after) {
		t.Errorf("stack depths of the spinning functions once listed: %v; want 20 or more, all 2 (the CPU's cache still says unlisted: deeper)", after)
	}
}

// pinnedSpin is testdata/fixtures/spin.c running on CPU 0, and a sampler
// of it with room for its unwind rows.
type pinnedSpin struct {
	s      *Sampler
	pid    int
	rows   []unwind.Row
	leaves func(uint64) bool // in a spinning function
	text   unwind.Mapping
}

func startPinnedSpin(t *testing.T) *pinnedSpin {
	requireBPF(t)
	bin := filepath.Join(t.TempDir(), "spin")
	out, err := exec.Command("gcc", "-O1", "-fno-omit-frame-pointer", "-no-pie", "-o", bin,
		"../../testdata/fixtures/spin.c").CombinedOutput()
	if err != nil {
		t.Skipf("needs gcc (apt-get install gcc): %v: %s", err, out)
	}
	rows, leaves := spinRows(t, bin)

	cmd := exec.Command(bin)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	var cpu0 unix.CPUSet
	cpu0.Set(0)
	if err := unix.SchedSetaffinity(cmd.Process.Pid, &cpu0); err != nil {
		t.Fatal(err)
	}
	start, end := textMapping(t, cmd.Process.Pid, bin)

	s, err := Start(Options{Frequency: 997, PID: cmd.Process.Pid, Transfer: RingBuffer, UnwindRows: 1024})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	text := unwind.Mapping{Start: start, End: end, Base: rows[0].PC, First: 0, Rows: uint32(len(rows))}
	return &pinnedSpin{s: s, pid: cmd.Process.Pid, rows: rows, leaves: leaves, text: text}
}

// list makes the sampler walk the fixture with the rows at index 0.
func (f *pinnedSpin) list(t *testing.T) {
	if err := f.s.SetUnwind(uint32(f.pid), 0, []unwind.Mapping{f.text}, false); err != nil {
		t.Fatal(err)
	}
}

// endingRows returns the fixture's rows but where the spinning functions
// are: every other ends the walk, main's included.
func (f *pinnedSpin) endingRows() []unwind.Row {
	ends := make([]unwind.Row, len(f.rows))
	for i, r := range f.rows {
		ends[i] = r
		if !f.leaves(r.PC) {
			ends[i] = unwind.Row{PC: r.PC, CFA: unwind.CFAEnd}
		}
	}
	return ends
}

// depths returns how many samples of the spinning functions, over 300 ms,
// had each user stack depth.
func (f *pinnedSpin) depths(t *testing.T) map[int]uint64 {
	if _, err := f.s.Drain(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	samples, err := f.s.Drain()
	if err != nil {
		t.Fatal(err)
	}
	d := map[int]uint64{}
	for _, smp := range samples {
		if len(smp.User) > 0 && f.leaves(smp.User[0]) {
			d[len(smp.User)] += smp.Count
		}
	}
	return d
}

// allTwoDeep reports 20 samples or more by depth d, all of them 2 deep.
func allTwoDeep(d map[int]uint64) bool {
	return sum(d) >= 20 && d[2] == sum(d)
}

// sum returns how many samples d counts, by depth.
func sum(d map[int]uint64) uint64 {
	var n uint64
	for _, c := range d {
		n += c
	}
	return n
}

// spinRows returns the unwind rows of the spin fixture at bin, and whether
// an address is in one of its functions that spin (func_a, func_b,
// func_c).
func spinRows(t *testing.T, bin string) ([]unwind.Row, func(uint64) bool) {
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rows, _, err := unwind.Parse(f, 0)
	if err != nil || len(rows) == 0 {
		t.Fatalf("unwind rows of %s: %d, %v", bin, len(rows), err)
	}
	syms, err := f.Symbols()
	if err != nil {
		t.Fatal(err)
	}
	var ranges [][2]uint64
	for _, s := range syms {
		if strings.HasPrefix(s.Name, "func_") && s.Size > 0 {
			ranges = append(ranges, [2]uint64{s.Value, s.Value + s.Size})
		}
	}
	if len(ranges) != 3 {
		t.Fatalf("%s: functions func_*: %v, want 3", bin, ranges)
	}
	return rows, func(pc uint64) bool {
		for _, r := range ranges {
			if pc >= r[0] && pc < r[1] {
				return true
			}
		}
		return false
	}
}

// textMapping returns where process pid maps bin's code.
func textMapping(t *testing.T, pid int, bin string) (start, end uint64) {
	for range 100 { // until the process has exec'd
		p, err := proc.Read(pid)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range p.Mappings {
			if m.Path == bin {
				return m.Start, m.End
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("process %d never mapped %s", pid, bin)
	return 0, 0
}

// BenchmarkSetUnwind measures listing a new process's unwind mappings (20,
// as many as a python3 run maps executable) and forgetting it: once for
// each new process on the node.
//
//	sudo go test -run '^$' -bench SetUnwind -benchmem ./internal/sampler/
func BenchmarkSetUnwind(b *testing.B) {
	requireBPF(b)
	s, err := Start(Options{Frequency: 1, Paused: true, UnwindRows: 1024})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	ms := make([]unwind.Mapping, 20)
	for i := range ms {
		start := uint64(0x7f0000000000 + i<<24)
		ms[i] = unwind.Mapping{Start: start, End: start + 1<<20, Base: start, First: uint32(i) * 50, Rows: 50}
	}
	pid := uint32(1 << 22) // above any PID the kernel gives
	for b.Loop() {
		if err := s.SetUnwind(pid, 1, ms, false); err != nil {
			b.Fatal(err)
		}
		if err := s.DeleteUnwind(pid, false); err != nil {
			b.Fatal(err)
		}
	}
}

// TestExitTakesEntries checks that a process's end takes its unwind and
// Python entries with it in the kernel, and that the sampler tells of it:
// two spinning shells, both announced; one listed by SetUnwind, the
// other's entries written as the kernel fills them (not by SetUnwind),
// both killed. An entry SetUnwind writes after the exit is still deleted
// by DeleteUnwind of an exited process.
func TestExitTakesEntries(t *testing.T) {
	requireBPF(t)
	announced := make(chan NewProc, 1024)
	exited := make(chan [2]uint32, 1024)
	s, err := Start(Options{Frequency: 997, UnwindRows: 64,
		OnNewProc: func(p NewProc) { p.Mappings = nil; announced <- p },
		OnExit:    func(pid, gen uint32) { exited <- [2]uint32{pid, gen} }})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	pids := spinningShells(t, 2)
	gens := map[uint32]uint32{}
	for deadline := time.Now().Add(10 * time.Second); len(gens) < 2 && time.Now().Before(deadline); {
		select {
		case p := <-announced:
			if slices.Contains(pids, p.PID) {
				gens[p.PID] = p.Generation
			}
		case <-time.After(100 * time.Millisecond):
			s.Drain() // quiet announcements wait for a drain
		}
	}
	if len(gens) < 2 {
		t.Fatalf("shells %v announced as %v", pids, gens)
	}
	ms := []unwind.Mapping{{Start: 0x10000, End: 0x20000, Base: 0x10000, Rows: 1}}
	if err := s.SetUnwind(pids[0], gens[pids[0]], ms, false); err != nil {
		t.Fatal(err)
	}
	var kernels profileUnwindProc // as fill_tables writes it
	kernels.Generation, kernels.Len = gens[pids[1]], 1
	if err := putRaw(s.objs.UnwindProcs, unsafe.Pointer(&pids[1]), unsafe.Pointer(&kernels)); err != nil {
		t.Fatal(err)
	}
	if err := putRaw(s.objs.PythonProcs, unsafe.Pointer(&pids[1]), unsafe.Pointer(&profilePythonProc{Generation: gens[pids[1]]})); err != nil {
		t.Fatal(err)
	}
	for _, pid := range pids {
		// Killed and waited for, not reaped: spinningShells' cleanup does.
		if err := unix.Kill(int(pid), unix.SIGKILL); err != nil {
			t.Fatal(err)
		}
		var info unix.Siginfo
		if err := unix.Waitid(unix.P_PID, int(pid), &info, unix.WEXITED|unix.WNOWAIT, nil); err != nil {
			t.Fatal(err)
		}
	}
	var got profileUnwindProc
	var py profilePythonProc
	for _, pid := range pids {
		if err := s.objs.UnwindProcs.Lookup(pid, &got); !errors.Is(err, ebpf.ErrKeyNotExist) {
			t.Errorf("shell %d's unwind entry after its exit: %v", pid, err)
		}
	}
	if err := s.objs.PythonProcs.Lookup(pids[1], &py); !errors.Is(err, ebpf.ErrKeyNotExist) {
		t.Errorf("shell %d's Python entry after its exit: %v", pids[1], err)
	}
	if _, err := s.Drain(); err != nil {
		t.Fatal(err)
	}
	told := map[uint32]uint32{}
	for _, e := range drainChan(exited) {
		told[e[0]] = e[1]
	}
	for _, pid := range pids {
		if g, ok := told[pid]; !ok || g != gens[pid] {
			t.Errorf("shell %d (generation %d) exited, told: %v", pid, gens[pid], told)
		}
	}
	// Written after the exit: deleted all the same.
	if err := s.SetUnwind(pids[0], gens[pids[0]], ms, false); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteUnwind(pids[0], true); err != nil {
		t.Fatal(err)
	}
	if err := s.objs.UnwindProcs.Lookup(pids[0], &got); !errors.Is(err, ebpf.ErrKeyNotExist) {
		t.Errorf("an entry written after the exit outlives DeleteUnwind: %v", err)
	}
}

// BenchmarkWriteRows measures writing a binary's unwind rows to the
// kernel, a table of 50,000 (libc has 28,273, python3 64,575:
// docs/BENCHMARKS.md): once for each binary the agent learns.
//
//	sudo go test -run '^$' -bench WriteRows ./internal/sampler/
func BenchmarkWriteRows(b *testing.B) {
	requireBPF(b)
	const n = 50_000
	s, err := Start(Options{Frequency: 1, Paused: true, UnwindRows: 2 * n})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	rows := make([]unwind.Row, n)
	for i := range rows {
		rows[i] = unwind.Row{PC: 0x1000 + uint64(i)*16, CFA: unwind.CFARSP, CFAOffset: 8 + int32(i%64)*8}
	}
	for b.Loop() {
		if err := s.WriteRows(n, rows); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/row")
}

// TestWriteRowsLookup checks that rows copied into unwind_rows' memory are
// the rows the kernel's lookup returns, and that writes stop at the
// sampler's capacity.
func TestWriteRowsLookup(t *testing.T) {
	requireBPF(t)
	s, err := Start(Options{Frequency: 1, Paused: true, UnwindRows: 64})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	rows := []unwind.Row{
		{PC: 0x4000, CFA: unwind.CFARSP, CFAOffset: 8},
		{PC: 0x4004, CFA: unwind.CFARBP, CFAOffset: 16, RBPOffset: -16},
		{PC: 0x4100, CFA: unwind.CFAEnd},
	}
	if err := s.WriteRows(61, rows); err != nil {
		t.Fatal(err)
	}
	for i, r := range rows {
		var got profileUnwindRow
		if err := s.objs.UnwindRows.Lookup(uint32(61+i), &got); err != nil {
			t.Fatal(err)
		}
		want := profileUnwindRow{Pc: uint32(r.PC - rows[0].PC), CfaOffset: r.CFAOffset, RbpOffset: r.RBPOffset, Cfa: uint8(r.CFA)}
		if got != want {
			t.Errorf("row %d: kernel has %+v, want %+v", 61+i, got, want)
		}
	}
	if err := s.WriteRows(62, rows); err == nil {
		t.Error("rows 62 to 65 of 64 written")
	}
}
