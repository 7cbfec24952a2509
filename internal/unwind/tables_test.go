package unwind

import (
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/flint-dev/flint/internal/fixture"
	"github.com/flint-dev/flint/internal/proc"
)

// fakeKernel records what Tables writes.
type fakeKernel struct {
	writes int // WriteRows calls
	rows   map[uint32]Row
	procs  map[uint32][]Mapping
	gens   map[uint32]uint32
	listed chan listing // when not nil, gets every listing
}

type listing struct {
	pid uint32
	ms  []Mapping
}

func newFakeKernel() *fakeKernel {
	return &fakeKernel{rows: map[uint32]Row{}, procs: map[uint32][]Mapping{}, gens: map[uint32]uint32{}}
}

func (k *fakeKernel) WriteRows(first uint32, rows []Row) error {
	k.writes++
	base := rows[0].PC
	for i, r := range rows {
		r.PC -= base
		k.rows[first+uint32(i)] = r
	}
	return nil
}

func (k *fakeKernel) SetUnwind(pid, generation uint32, ms []Mapping, partial bool) error {
	k.procs[pid], k.gens[pid] = ms, generation
	if k.listed != nil {
		k.listed <- listing{pid, ms}
	}
	return nil
}

// next returns the mappings of pid's next listing, failing the test if
// none comes in 10 s: a listing waiting for a build that does not end.
func (k *fakeKernel) next(t *testing.T, pid uint32) []Mapping {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case l := <-k.listed:
			if l.pid == pid {
				return l.ms
			}
		case <-timeout:
			t.Fatalf("process %d not listed", pid)
		}
	}
}

func (k *fakeKernel) DeleteUnwind(pid uint32, _ bool) error {
	delete(k.procs, pid)
	return nil
}

// Files with CFI on any Debian machine, and one without (a text file).
const (
	libc       = "/usr/lib/x86_64-linux-gnu/libc.so.6"
	libm       = "/usr/lib/x86_64-linux-gnu/libm.so.6"
	withoutCFI = "tables.go"
)

// mapping returns an executable mapping of path at start.
func mapping(t testing.TB, path string, start uint64) proc.Mapping {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Skipf("needs %s: %v", path, err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	return proc.Mapping{Start: start, End: start + 0x100000, Dev: st.Dev, Inode: st.Ino, Path: path}
}

func newTables(k Kernel, rows int) *Tables {
	return New(k, Options{
		Rows:        rows,
		MaxMappings: 128,
		Open:        func(pid int, m *proc.Mapping) (File, error) { return os.Open(m.Path) },
	})
}

// gated is a file whose reads wait until gate is closed: a build as long
// as a test wants.
type gated struct {
	*os.File
	gate <-chan struct{}
}

func (f gated) ReadAt(p []byte, off int64) (int, error) {
	<-f.gate
	return f.File.ReadAt(p, off)
}

// newGatedTables returns Tables listing into k, which sends its listings
// on k.listed, and whose builds of path wait until open is called; libc's
// table is loaded already (process 1 maps it).
func newGatedTables(t *testing.T, k *fakeKernel, path string) (tb *Tables, open func()) {
	k.listed = make(chan listing, 64)
	gate := make(chan struct{})
	open = sync.OnceFunc(func() { close(gate) })
	tb = New(k, Options{
		Rows:        1 << 22,
		MaxMappings: 128,
		Open: func(pid int, m *proc.Mapping) (File, error) {
			f, err := os.Open(m.Path)
			if err != nil || m.Path != path {
				return f, err
			}
			return gated{f, gate}, nil
		},
	})
	t.Cleanup(func() {
		open()
		tb.Close()
	})
	tb.Learn(&proc.Process{PID: 1, Mappings: []proc.Mapping{mapping(t, libc, 0x1000000)}}, 1)
	tb.Flush()
	if ms := k.next(t, 1); ms[0].Rows == 0 {
		t.Fatalf("process 1 listed %+v, want libc's rows", ms)
	}
	return tb, open
}

// checkRefs checks that each table is pinned once by each process listed
// with it: no reference leaked, none dropped twice.
func checkRefs(t *testing.T, tb *Tables) {
	t.Helper()
	tb.mu.Lock()
	defer tb.mu.Unlock()
	refs := map[*table]int{}
	for _, l := range tb.procs {
		for _, b := range l.tables {
			refs[b]++
		}
	}
	for k, b := range tb.binaries {
		if b.refs != refs[b] {
			t.Errorf("table of %v: %d references, listed with %d processes", k, b.refs, refs[b])
		}
	}
}

// TestTablesShareFiles checks that processes mapping one file share its
// rows, built once, and that each is listed with every executable mapping.
func TestTablesShareFiles(t *testing.T) {
	k := newFakeKernel()
	tb := newTables(k, 1<<22)
	a := &proc.Process{PID: 10, Mappings: []proc.Mapping{mapping(t, libc, 0x7f0000000000), {Start: 0x7f1000000000, End: 0x7f1000001000}}}
	b := &proc.Process{PID: 11, Mappings: []proc.Mapping{mapping(t, libc, 0x7f2000000000)}}
	tb.Learn(a, 1)
	tb.Learn(b, 1)
	tb.Flush()
	tb.Close()
	st := tb.Stats()
	if st.Built != 1 || st.Binaries != 1 || st.Processes != 2 {
		t.Fatalf("built %d tables, %d loaded, %d processes listed; want 1, 1, 2", st.Built, st.Binaries, st.Processes)
	}
	ma, mb := k.procs[10], k.procs[11]
	if len(ma) != 2 || len(mb) != 1 {
		t.Fatalf("listed mappings: %d and %d, want 2 and 1", len(ma), len(mb))
	}
	if ma[0].First != mb[0].First || ma[0].Rows != mb[0].Rows || ma[0].Rows == 0 {
		t.Errorf("the processes' libc rows differ: %+v, %+v", ma[0], mb[0])
	}
	if ma[1].Rows != 0 {
		t.Errorf("anonymous memory got rows: %+v", ma[1])
	}
	if ma[0].Base-ma[0].Start != mb[0].Base-mb[0].Start {
		t.Errorf("bases differ from the mapping start: %+v, %+v", ma[0], mb[0])
	}
	if int(st.RowsUsed) != len(k.rows) {
		t.Errorf("%d rows used, %d written", st.RowsUsed, len(k.rows))
	}
}

// TestTablesBudget checks the row budget: a table that does not fit is
// skipped and counted; one that fits after the tables of processes gone
// are evicted takes their room.
func TestTablesBudget(t *testing.T) {
	k := newFakeKernel()
	tb := newTables(k, 1<<22)
	tb.Learn(&proc.Process{PID: 1, Mappings: []proc.Mapping{mapping(t, libm, 0x1000000)}}, 1)
	tb.Flush()
	tb.Close()
	libmRows := tb.Stats().RowsUsed
	tb = newTables(newFakeKernel(), 1<<22)
	tb.Learn(&proc.Process{PID: 1, Mappings: []proc.Mapping{mapping(t, libc, 0x1000000)}}, 1)
	tb.Flush()
	tb.Close()
	libcRows := tb.Stats().RowsUsed
	if libmRows == 0 || libcRows == 0 {
		t.Fatalf("rows: libm %d, libc %d", libmRows, libcRows)
	}

	// Room for the larger of the two only.
	k = newFakeKernel()
	tb = newTables(k, max(libmRows, libcRows))
	tb.Learn(&proc.Process{PID: 1, Mappings: []proc.Mapping{mapping(t, libm, 0x1000000)}}, 1)
	tb.Flush() // PID 1 listed with libm's rows before libc's table is built
	tb.Learn(&proc.Process{PID: 2, Mappings: []proc.Mapping{mapping(t, libc, 0x1000000)}}, 1)
	tb.Flush()
	// PID 1 exits: its libm table may go for libc's.
	tb.Forget(1, 1, false)
	tb.Learn(&proc.Process{PID: 3, Mappings: []proc.Mapping{mapping(t, libc, 0x2000000)}}, 1)
	tb.Flush()
	tb.Close()
	st := tb.Stats()
	if st.OverBudget != 1 {
		t.Errorf("%d tables over budget, want 1 (libc while libm was in use)", st.OverBudget)
	}
	if _, ok := k.procs[2]; ok {
		t.Errorf("process 2 listed without its only table")
	}
	if m := k.procs[3]; len(m) != 1 || m[0].Rows != uint32(libcRows) {
		t.Errorf("process 3: %+v, want libc's %d rows after libm's were evicted", m, libcRows)
	}
	if _, ok := k.procs[1]; ok {
		t.Errorf("process 1 still listed after Forget")
	}
}

// TestTablesEmptyCFI checks that a file whose .eh_frame holds no entry
// lists nothing.
func TestTablesEmptyCFI(t *testing.T) {
	fixture.NeedTools(t, "objcopy")
	dir := t.TempDir()
	empty, bin := filepath.Join(dir, "empty"), filepath.Join(dir, "bin")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("objcopy", "--remove-section=.eh_frame", "--remove-section=.eh_frame_hdr",
		"--add-section=.eh_frame="+empty, libm, bin).CombinedOutput()
	if err != nil {
		t.Fatalf("objcopy: %v\n%s", err, out)
	}
	k := newFakeKernel()
	tb := newTables(k, 1<<22)
	tb.Learn(&proc.Process{PID: 7, Mappings: []proc.Mapping{mapping(t, bin, 0x1000000)}}, 1)
	tb.Flush()
	tb.Close()
	if k.procs[7] != nil || tb.Stats().NoCFI != 1 {
		t.Errorf("listed %+v, %d files without CFI; want nothing listed, 1", k.procs[7], tb.Stats().NoCFI)
	}
}

// TestTablesGoProgram checks that a Go program is left to frame pointers
// though its .debug_frame has rows.
func TestTablesGoProgram(t *testing.T) {
	fixture.NeedTools(t, "go")
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte("package main\n\nfunc main() {}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module hello\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "build", "-o", "hello", ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=", "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	bin := filepath.Join(dir, "hello")
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.Section(".debug_frame") == nil {
		t.Fatal("the Go program has no .debug_frame: the test checks nothing")
	}
	k := newFakeKernel()
	tb := newTables(k, 1<<22)
	tb.Learn(&proc.Process{PID: 8, Mappings: []proc.Mapping{mapping(t, bin, 0x1000000)}}, 1)
	tb.Flush()
	tb.Close()
	if k.procs[8] != nil || tb.Stats().NoCFI != 1 {
		t.Errorf("listed %+v, %d files without CFI; want nothing listed, 1", k.procs[8], tb.Stats().NoCFI)
	}
}

// TestTablesGenerations checks that forgetting an old image of a PID
// leaves the new one listed, and that a file without CFI lists nothing.
func TestTablesGenerations(t *testing.T) {
	k := newFakeKernel()
	tb := newTables(k, 1<<22)
	tb.Learn(&proc.Process{PID: 5, Mappings: []proc.Mapping{mapping(t, libc, 0x1000000)}}, 1)
	tb.Learn(&proc.Process{PID: 5, Mappings: []proc.Mapping{mapping(t, libc, 0x3000000)}}, 2)
	tb.Forget(5, 1, false)
	tb.Learn(&proc.Process{PID: 6, Mappings: []proc.Mapping{mapping(t, withoutCFI, 0x1000000)}}, 1)
	tb.Flush()
	tb.Close()
	if k.gens[5] != 2 || k.procs[5] == nil || k.procs[5][0].Start != 0x3000000 {
		t.Errorf("PID 5: generation %d, %+v; want generation 2 at 0x3000000", k.gens[5], k.procs[5])
	}
	if k.procs[6] != nil {
		t.Errorf("a process mapping no file with CFI was listed: %+v", k.procs[6])
	}
	if st := tb.Stats(); st.Malformed != 1 {
		t.Errorf("%d files counted malformed, want 1 (a text file)", st.Malformed)
	}
}

// TestTablesPinWhileListing checks that building one mapping's table does
// not evict the table of another mapping of the same process, and that a
// table that did not fit is not read again while no room freed.
func TestTablesPinWhileListing(t *testing.T) {
	k := newFakeKernel()
	tb := newTables(k, 1<<22)
	tb.Learn(&proc.Process{PID: 1, Mappings: []proc.Mapping{mapping(t, libc, 0x1000000)}}, 1)
	tb.Flush()
	tb.Close()
	libcRows := tb.Stats().RowsUsed

	// Room for libc's rows only: libm fits first, then libc must not take
	// its place, since the process being listed maps both.
	k = newFakeKernel()
	tb = newTables(k, libcRows)
	p := &proc.Process{PID: 2, Mappings: []proc.Mapping{mapping(t, libm, 0x1000000), mapping(t, libc, 0x3000000)}}
	tb.Learn(p, 1)
	tb.Learn(&proc.Process{PID: 3, Mappings: []proc.Mapping{mapping(t, libc, 0x3000000)}}, 1)
	tb.Flush()
	tb.Close()
	st := tb.Stats()
	ms := k.procs[2]
	if len(ms) != 2 || ms[0].Rows == 0 || ms[1].Rows != 0 {
		t.Fatalf("process 2 listed %+v; want libm's rows and none for libc", ms)
	}
	if k.writes != 1 || st.Binaries != 1 {
		t.Errorf("%d tables written, %d loaded; want libm's alone, its rows not overwritten", k.writes, st.Binaries)
	}
	if st.Built != 2 || st.OverBudget != 1 {
		t.Errorf("built %d tables, %d over budget; want 2 and 1: libc is not read again for process 3", st.Built, st.OverBudget)
	}
}

// TestTablesVDSOOnly checks that a process whose only file with rows is the
// vDSO, as a Go program's, is left to the kernel's frame pointer walk.
func TestTablesVDSOOnly(t *testing.T) {
	self, err := proc.Read(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	var vdso *proc.Mapping
	for i := range self.Mappings {
		if self.Mappings[i].Path == "[vdso]" {
			vdso = &self.Mappings[i]
		}
	}
	if vdso == nil {
		t.Skip("no vDSO mapped")
	}
	k := newFakeKernel()
	tb := newTables(k, 1<<22)
	tb.Learn(&proc.Process{PID: 9, Mappings: []proc.Mapping{*vdso, {Start: 0x1000, End: 0x2000}}}, 1)
	tb.Learn(&proc.Process{PID: 10, Mappings: []proc.Mapping{*vdso, mapping(t, libm, 0x1000000)}}, 1)
	tb.Flush()
	tb.Close()
	if k.procs[9] != nil {
		t.Errorf("a process with rows for the vDSO only was listed: %+v", k.procs[9])
	}
	if ms := k.procs[10]; len(ms) != 2 || ms[0].Rows == 0 && ms[1].Rows == 0 {
		t.Errorf("process 10 listed %+v; want the vDSO's and libm's rows", ms)
	}
}

// TestTablesListWhileBuilding checks that a process learned while a table
// is being built is listed at once with the tables that are ready, and
// again with the new table's rows once it is built.
func TestTablesListWhileBuilding(t *testing.T) {
	k := newFakeKernel()
	tb, open := newGatedTables(t, k, libm)
	tb.Learn(&proc.Process{PID: 2, Mappings: []proc.Mapping{mapping(t, libm, 0x1000000)}}, 1)
	tb.Learn(&proc.Process{PID: 3, Mappings: []proc.Mapping{mapping(t, libc, 0x1000000), mapping(t, libm, 0x3000000)}}, 1)
	if ms := k.next(t, 3); len(ms) != 2 || ms[0].Rows == 0 || ms[1].Rows != 0 {
		t.Fatalf("process 3 listed %+v while libm's table is built; want libc's rows and none for libm", ms)
	}
	open()
	tb.Flush()
	if ms := k.procs[3]; len(ms) != 2 || ms[0].Rows == 0 || ms[1].Rows == 0 {
		t.Errorf("process 3 listed %+v once libm's table is built; want libc's and libm's rows", ms)
	}
	if ms := k.procs[2]; len(ms) != 1 || ms[0].Rows == 0 {
		t.Errorf("process 2 listed %+v; want libm's rows", ms)
	}
	checkRefs(t, tb)
}

// TestTablesForgetWhileBuilding checks that processes forgotten while a
// table they map is being built, listed with their other tables or not
// listed, are not listed once it is built.
func TestTablesForgetWhileBuilding(t *testing.T) {
	k := newFakeKernel()
	tb, open := newGatedTables(t, k, libm)
	tb.Learn(&proc.Process{PID: 2, Mappings: []proc.Mapping{mapping(t, libc, 0x1000000), mapping(t, libm, 0x3000000)}}, 1)
	tb.Learn(&proc.Process{PID: 3, Mappings: []proc.Mapping{mapping(t, libm, 0x3000000)}}, 1)
	k.next(t, 2)
	tb.Forget(2, 1, false)
	tb.Forget(3, 1, false)
	// Listed after the Forgets are done, libm's table still being built.
	tb.Learn(&proc.Process{PID: 4, Mappings: []proc.Mapping{mapping(t, libc, 0x1000000)}}, 1)
	k.next(t, 4)
	open()
	tb.Flush()
	if k.procs[2] != nil || k.procs[3] != nil {
		t.Errorf("forgotten processes listed once libm's table is built: %+v, %+v", k.procs[2], k.procs[3])
	}
	if st := tb.Stats(); st.Binaries != 2 || st.Processes != 2 {
		t.Errorf("%d tables loaded, %d processes listed; want libc's and libm's, processes 1 and 4", st.Binaries, st.Processes)
	}
	checkRefs(t, tb)
}

// TestTablesShareWhileBuilding checks that a file two processes map while
// its table is being built is built once, and both are listed with its
// rows.
func TestTablesShareWhileBuilding(t *testing.T) {
	k := newFakeKernel()
	tb, open := newGatedTables(t, k, libm)
	built := tb.Stats().Built
	tb.Learn(&proc.Process{PID: 2, Mappings: []proc.Mapping{mapping(t, libm, 0x1000000)}}, 1)
	tb.Learn(&proc.Process{PID: 3, Mappings: []proc.Mapping{mapping(t, libm, 0x3000000)}}, 1)
	tb.Learn(&proc.Process{PID: 4, Mappings: []proc.Mapping{mapping(t, libc, 0x1000000)}}, 1)
	k.next(t, 4) // processes 2 and 3 learned
	if st := tb.Stats(); st.Building != 1 || st.Processes != 2 {
		t.Errorf("%d tables being built, %d processes listed; want libm's, processes 1 and 4", st.Building, st.Processes)
	}
	open()
	tb.Flush()
	if st := tb.Stats(); st.Built-built != 1 || st.Building != 0 {
		t.Errorf("%d tables built for libm, %d being built; want 1, 0", st.Built-built, st.Building)
	}
	m2, m3 := k.procs[2], k.procs[3]
	if len(m2) != 1 || len(m3) != 1 || m2[0].Rows == 0 || m2[0].First != m3[0].First || m2[0].Rows != m3[0].Rows {
		t.Errorf("processes 2 and 3 listed %+v and %+v; want libm's rows, the same", m2, m3)
	}
	checkRefs(t, tb)
}

// slowWrites is a kernel whose row writes wait until release is closed,
// telling writing when one starts.
type slowWrites struct {
	*fakeKernel
	writing chan struct{}
	release chan struct{}
}

func (k slowWrites) WriteRows(first uint32, rows []Row) error {
	k.writing <- struct{}{}
	<-k.release
	return k.fakeKernel.WriteRows(first, rows)
}

// TestTablesListWhileWriting checks that a process is listed while another
// table's rows are being written, and the process waiting for that table
// once they are.
func TestTablesListWhileWriting(t *testing.T) {
	k := slowWrites{newFakeKernel(), make(chan struct{}, 1), make(chan struct{})}
	k.listed = make(chan listing, 64)
	tb := newTables(k, 1<<22)
	defer tb.Close()
	release := sync.OnceFunc(func() { close(k.release) })
	defer release() // before Close, which waits for the builder
	tb.Learn(&proc.Process{PID: 1, Mappings: []proc.Mapping{mapping(t, libm, 0x1000000)}}, 1)
	<-k.writing // libm's rows
	done := make(chan struct{})
	go func() {
		defer close(done)
		// libc's table is asked for, not written yet: listed without rows.
		tb.Learn(&proc.Process{PID: 2, Mappings: []proc.Mapping{mapping(t, libc, 0x1000000)}}, 1)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Learn waited for another table's rows to be written")
	}
	release()
	tb.Flush()
	if ms := k.procs[1]; len(ms) != 1 || ms[0].Rows == 0 {
		t.Errorf("process 1 listed %+v once libm's rows are written; want them", ms)
	}
	checkRefs(t, tb)
}
