package collect

import (
	"testing"
	"time"

	"github.com/flint-dev/flint/internal/proc"
	"github.com/flint-dev/flint/internal/python"
	"github.com/flint-dev/flint/internal/sampler"
	"github.com/flint-dev/flint/internal/symbol"
	"github.com/flint-dev/flint/internal/unwind"
)

// fakeQuiet is a QuietKernel that keeps what it is told.
type fakeQuiet struct {
	files   map[quietFileAt]sampler.QuietRows
	pythons map[quietFileAt]uint64 // _PyRuntime from the mapping's start
	cgroups map[uint64]bool
	listed  map[uint32][]unwind.Mapping
}

type quietFileAt struct {
	file   sampler.KernelFile
	offset uint64
}

func newFakeQuiet() *fakeQuiet {
	return &fakeQuiet{files: map[quietFileAt]sampler.QuietRows{}, pythons: map[quietFileAt]uint64{}, cgroups: map[uint64]bool{}, listed: map[uint32][]unwind.Mapping{}}
}

func (k *fakeQuiet) SetQuietFile(f sampler.KernelFile, offset uint64, r sampler.QuietRows) error {
	k.files[quietFileAt{f, offset}] = r
	return nil
}

func (k *fakeQuiet) DeleteQuietFile(f sampler.KernelFile, offset uint64) error {
	delete(k.files, quietFileAt{f, offset})
	delete(k.pythons, quietFileAt{f, offset})
	return nil
}

func (k *fakeQuiet) SetQuietPython(f sampler.KernelFile, offset, start uint64, in *python.Interpreter) error {
	k.pythons[quietFileAt{f, offset}] = in.Runtime - start
	return nil
}

func (k *fakeQuiet) SetQuietCgroups(key uint64) error      { k.cgroups[key] = true; return nil }
func (k *fakeQuiet) DeleteQuietCgroups(key uint64) error   { delete(k.cgroups, key); return nil }
func (k *fakeQuiet) WriteRows(uint32, []unwind.Row) error  { return nil }
func (k *fakeQuiet) DeleteUnwind(pid uint32, _ bool) error { delete(k.listed, pid); return nil }

func (k *fakeQuiet) SetUnwind(pid, _ uint32, ms []unwind.Mapping, _ bool) error {
	k.listed[pid] = ms
	return nil
}

// TestQuietFiles checks that the kernel is told of the files of a process
// that needs nothing more at once, with the rows the unwinder lists for
// them, and of a CPython's interpreter, not of a JVM's files; that rows
// overwritten are taken back, and that the files go when no known process
// maps them.
func TestQuietFiles(t *testing.T) {
	sym := symbol.New()
	defer sym.Close()
	c := New(sym, "")
	k := newFakeQuiet()
	c.SetQuiet(k)
	sleeper, read := startAsleep(t)
	listing := listingOf(read)
	np := sampler.NewProc{PID: uint32(sleeper.Process.Pid), Generation: 1, Comm: "sleep",
		ExeText: listing[0].Start, Listed: true, Mappings: listing, Cgroups: 0xc6}
	c.Announced(np)
	for _, l := range listing {
		f, offset := l.File, l.Offset
		if l.VDSO {
			f, offset = sampler.KernelFile{}, 0
		} else if f.Inode == 0 {
			continue
		}
		if _, ok := k.files[quietFileAt{f, offset}]; !ok {
			t.Errorf("mapping %+v: its file not told of", l)
		}
	}
	if read.Cgroup != "" && !k.cgroups[0xc6] {
		t.Errorf("cgroups key not told of: %v", k.cgroups)
	}

	// The unwinder lists rows for the executable: the kernel gets them,
	// until another table is written over them.
	exe := read.Find(listing[0].Start)
	at := quietFileAt{listing[0].File, listing[0].Offset}
	m := unwind.Mapping{Start: exe.Start, End: exe.End, Base: exe.Start + 0x40, First: 100, Rows: 50, File: exe.Key(), Offset: exe.Offset}
	if err := c.quiet.SetUnwind(np.PID, 1, []unwind.Mapping{m}, false); err != nil {
		t.Fatal(err)
	}
	if got, want := k.files[at], (sampler.QuietRows{BaseFromStart: 0x40, First: 100, Rows: 50}); got != want || len(k.listed[np.PID]) != 1 {
		t.Errorf("rows told %+v, want %+v; process listed %+v", got, want, k.listed[np.PID])
	}
	// A process the kernel filled alike, after the list last changed, is
	// not written again; one started before the change, or listed with
	// other rows, is; so is any other once it is learned.
	later := c.quiet.changed + time.Millisecond
	for _, tc := range []struct {
		name    string
		filled  bool
		started time.Duration
		rows    uint32
		written bool
	}{
		{"filled alike", true, later, 50, false},
		{"started before the list changed", true, c.quiet.changed, 50, true},
		{"not filled", false, later, 50, true},
		{"other rows", true, later, 60, true},
	} {
		other := m
		other.Rows = tc.rows
		np := sampler.NewProc{PID: 777, Generation: 2, TablesFilled: tc.filled, Started: tc.started}
		c.quiet.learnFilled(np, func() {
			if err := c.quiet.SetUnwind(777, 2, []unwind.Mapping{other}, false); err != nil {
				t.Fatal(err)
			}
		})
		if _, written := k.listed[777]; written != tc.written {
			t.Errorf("%s: written: %v, want %v", tc.name, written, tc.written)
		}
		delete(k.listed, 777)
	}
	if err := c.quiet.SetUnwind(777, 2, []unwind.Mapping{m}, false); err != nil || k.listed[777] == nil {
		t.Errorf("a process listed after it was learned not written (%v)", err)
	}
	if err := c.quiet.WriteRows(140, make([]unwind.Row, 20)); err != nil {
		t.Fatal(err)
	}
	if got := k.files[at]; got != (sampler.QuietRows{}) {
		t.Errorf("rows overwritten still told: %+v", got)
	}

	// A CPython process's files are told of after its interpreter, as far
	// from the mapping it was found by as in the process.
	interp := &python.Interpreter{Runtime: exe.Start + 0x1234, Mapping: *exe}
	c.tellQuiet(listing, interp, nil)
	if got, ok := k.pythons[at]; !ok || got != 0x1234 {
		t.Errorf("interpreter told at %+v: %#x (%v), want _PyRuntime %#x from the mapping's start", at, got, ok, 0x1234)
	}
	// The kernel lists a process of it in python_procs itself when it
	// filled its tables from the list as it is since the process started:
	// learnPython need not.
	later = c.quiet.changed + time.Millisecond
	elsewhere := *interp
	elsewhere.Mapping.Start += 0x1000
	for _, tc := range []struct {
		name    string
		filled  bool
		started time.Duration
		in      *python.Interpreter
		want    bool
	}{
		{"filled", true, later, interp, true},
		{"started before the list changed", true, c.quiet.changed, interp, false},
		{"not filled", false, later, interp, false},
		{"found by another mapping", true, later, &elsewhere, false},
	} {
		np := sampler.NewProc{PID: 778, Generation: 1, TablesFilled: tc.filled, Started: tc.started, Listed: true, Mappings: listing}
		if got := c.quiet.pythonFilled(np, tc.in); got != tc.want {
			t.Errorf("%s: python filled: %v, want %v", tc.name, got, tc.want)
		}
	}
	// Told again at another offset, the kernel keeps the first too, and
	// finds it first in this listing: not the interpreter told last.
	if !c.quiet.addPython(exe.Key(), listing[0].File, listing[0].Offset+0x1000, interp) {
		t.Fatal("interpreter not told again")
	}
	retold := sampler.NewProc{PID: 778, Generation: 1, TablesFilled: true, Started: c.quiet.changed + time.Millisecond, Listed: true, Mappings: listing}
	if c.quiet.pythonFilled(retold, interp) {
		t.Error("python filled by an interpreter told before at another offset")
	}

	// A JVM's files are not told of (its JIT map is asked for at once);
	// a plain process's are.
	for _, jvm := range []bool{true, false} {
		path, pid := "/opt/jdk/lib/server/libjvm.so", uint32(1<<22)
		if !jvm {
			path, pid = "/opt/lib/libplain.so", pid+1
		}
		p := &proc.Process{PID: int(pid), Mappings: []proc.Mapping{{Start: 0x10000, End: 0x20000, Dev: 5, Inode: uint64(pid), Path: path}}}
		l := sampler.ListedMapping{Start: 0x10000, End: 0x20000, File: sampler.KernelFile{Inode: uint64(pid), Dev: 9, Generation: 1}}
		c.learn(sampler.NewProc{PID: pid, Generation: 1, Listed: true, Mappings: []sampler.ListedMapping{l}},
			func() (*proc.Process, error) { return p, nil })
		if _, told := k.files[quietFileAt{l.File, 0}]; told == jvm {
			t.Errorf("%s: told of: %v", path, told)
		}
		c.mu.Lock()
		c.drop(procKey{pid, 1})
		c.mu.Unlock()
	}
	// A process whose interpreter is unknown, its file unread (the
	// process gone): its files are not told of, or the processes after it
	// would be quiet and their Python frames unread.
	c.SetPython(nopPython{})
	gone := &proc.Process{PID: 1 << 22, Mappings: []proc.Mapping{{Start: 0x10000, End: 0x20000, Dev: 5, Inode: 77, Path: "/opt/gone/bin/python3.11"}}}
	l := sampler.ListedMapping{Start: 0x10000, End: 0x20000, File: sampler.KernelFile{Inode: 77, Dev: 9, Generation: 1}}
	c.learn(sampler.NewProc{PID: 1 << 22, Generation: 1, Listed: true, Mappings: []sampler.ListedMapping{l}},
		func() (*proc.Process, error) { return gone, nil })
	if _, told := k.files[quietFileAt{l.File, 0}]; told {
		t.Error("the files of a process whose interpreter could not be read were told of")
	}
	c.mu.Lock()
	c.drop(procKey{1 << 22, 1})
	c.mu.Unlock()
	sleeper.Process.Kill()
	sleeper.Wait()
	for round := uint64(1); round <= forgetRounds+keepFileRounds; round++ {
		c.Forget(round)
	}
	// The vDSO is every process's, the same always.
	delete(k.files, quietFileAt{})
	if len(k.files) != 0 || len(k.pythons) != 0 || len(c.quiet.pythons) != 0 {
		t.Errorf("after every process exited, the kernel is still told of %d files and %d interpreters (%d known): %v",
			len(k.files), len(k.pythons), len(c.quiet.pythons), k.files)
	}
}
