package unwind

import (
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/flint-dev/flint/internal/proc"
	"github.com/flint-dev/flint/internal/symbol"
)

// Kernel holds the tables the BPF walker reads: the sampler's maps.
type Kernel interface {
	// WriteRows stores rows at index first, their PCs as offsets from the
	// first row's.
	WriteRows(first uint32, rows []Row) error
	// SetUnwind lists the executable mappings of process pid's image;
	// partial says some were left out, so code outside ms is no news.
	SetUnwind(pid, generation uint32, ms []Mapping, partial bool) error
	// DeleteUnwind forgets process pid. exited says the process has
	// exited: the kernel took what it listed itself with it.
	DeleteUnwind(pid uint32, exited bool) error
}

// Mapping is one executable mapping of a process as the walker sees it.
type Mapping struct {
	Start, End uint64 // addresses in the process
	Base       uint64 // the address of the first row's PC
	First      uint32 // index of the first row
	Rows       uint32 // 0: no rows, frame pointers
	// The file mapped, and where in it: the rows of every mapping of it
	// at Offset are the same, Base as far from Start.
	File   proc.FileKey
	Offset uint64
}

// relistInterval is how often one process's mappings are listed again when
// it keeps running code outside them (more mappings than the walker
// holds, code mapped and unmapped in a loop).
const relistInterval = 5 * time.Second

// Options configure Tables.
type Options struct {
	// Rows is how many rows the Kernel holds.
	Rows int
	// MaxMappings is how many mappings of one process the Kernel lists.
	MaxMappings int
	// Open opens the file behind mapping m of process pid (proc.Open).
	Open func(pid int, m *proc.Mapping) (File, error)
}

// File is an opened binary (an *os.File) the builder reads a table from.
type File interface {
	io.ReaderAt
	io.Closer
}

// TableStats count what Tables hold and skipped.
type TableStats struct {
	Processes  int // processes walked with tables
	Binaries   int // binaries with rows loaded
	Building   int // tables being built or waiting to be
	RowsUsed   int // rows loaded, of Capacity
	Capacity   int
	Built      uint64 // tables built from CFI
	BuildTime  time.Duration
	NoCFI      uint64 // binaries without CFI (Go, stripped of it): frame pointers
	Malformed  uint64 // binaries whose CFI could not be read: frame pointers
	OverBudget uint64 // tables not loaded for want of room
	Unusable   uint64 // tables too large for the walker
	Dropped    uint64 // tables not asked for now: maxQueuedBuilds wait
	ListFailed uint64 // processes the Kernel would not list (its map full)
	// Rows Parse could not express and FDEs it could not read, in the
	// tables built: frame pointers there.
	UnsupportedRows, InvalidFDEs uint64
}

// Tables builds unwind rows for the binaries that sampled processes map,
// shares them between processes, and keeps the Kernel's copy current.
// Learn and Forget do their work at once, in the caller's goroutine: a
// hand-off to a goroutine of their own woke another thread for each,
// 5-20 us of CPU a new process (BenchmarkTablesLearn, docs/BENCHMARKS.md).
// One goroutine, the builder, reads the tables in the order they are
// asked, so that a process is listed at once with the tables that are
// ready and listed again as each of the others is built. Until a
// mapping's table is loaded, its stacks are walked with frame pointers.
type Tables struct {
	k      Kernel
	opts   Options
	builds chan build    // to the builder
	done   chan struct{} // closed when the builder returns

	// work serializes what changes the Kernel and what Tables hold:
	// Learn, Forget and relists in their callers' goroutines, each built
	// table in the builder's.
	work    sync.Mutex
	closed  bool
	waiting map[uint32]waiter // processes with tables being built
	flushes []chan<- struct{} // Flushes waiting for the builds to end

	// mu guards what Stats reads; it is changed under work too, and
	// never held over I/O. The builder counts what it reads under it.
	mu       sync.Mutex
	binaries map[proc.FileKey]*table
	procs    map[uint32]*listed
	free     []span // free rows, sorted by first, coalesced
	room     uint64 // bumped whenever rows may have become free
	stats    TableStats
}

type job struct {
	pid        int
	generation uint32
	mappings   []proc.Mapping // a copy: the caller's may change
	relist     bool           // a listing put off (relistInterval)
}

// table is one binary's rows in the Kernel; rows == 0 when it has none.
type table struct {
	first, rows uint32
	base        uint64 // link-time PC of row offset 0
	layout      symbol.Layout
	refs        int // listed processes mapping it
	lastUse     time.Time
	building    bool   // asked of the builder: not built again, not evicted
	overBudget  bool   // no room when built: retried when room frees
	room        uint64 // Tables.room when it did not fit
}

// build is a table asked of the builder, and what it read.
type build struct {
	table  *table // touched under work only
	file   File
	rows   []Row
	layout symbol.Layout
	err    error
}

// waiter is a process waiting for tables being built: its latest job is
// done again as each of them is.
type waiter struct {
	job
	tables []*table
}

// listed is a process the Kernel lists.
type listed struct {
	generation uint32
	tables     []*table
	relisted   time.Time // when last listed again, zero if never
}

type span struct{ first, n uint32 }

// maxQueuedBuilds bounds the tables waiting for the builder; a file asked
// beyond it stays on frame pointers until a later listing asks again.
const maxQueuedBuilds = 4096

// New returns Tables loading into k; Close stops it.
func New(k Kernel, o Options) *Tables {
	t := &Tables{
		k: k, opts: o,
		builds:   make(chan build, maxQueuedBuilds),
		done:     make(chan struct{}),
		binaries: map[proc.FileKey]*table{},
		procs:    map[uint32]*listed{},
		free:     []span{{0, uint32(o.Rows)}},
		waiting:  map[uint32]waiter{},
	}
	t.stats.Capacity = o.Rows
	go t.build()
	return t
}

// Learn lists process p's image generation (0: whichever it is) in the
// Kernel with the tables of the binaries it maps that are ready, has the
// others built, and lists it again as each is. It returns once p is
// listed, without waiting for builds; it opens the files whose tables it
// asks for, while p lives. Learning a listed process again lists its
// mappings anew.
func (t *Tables) Learn(p *proc.Process, generation uint32) {
	t.do(job{pid: p.PID, generation: generation, mappings: append([]proc.Mapping(nil), p.Mappings...)})
}

// Forget stops walking process pid's image generation with tables;
// exited says the process has exited (Kernel.DeleteUnwind).
func (t *Tables) Forget(pid, generation uint32, exited bool) {
	t.work.Lock()
	defer t.work.Unlock()
	if !t.closed {
		t.forget(pid, generation, exited)
	}
}

// Flush waits until the tables being built are loaded and their processes
// listed again, or until Close; not after Close.
func (t *Tables) Flush() {
	t.work.Lock()
	t.mu.Lock()
	building := t.stats.Building > 0
	t.mu.Unlock()
	if t.closed || !building {
		t.work.Unlock()
		return
	}
	done := make(chan struct{})
	t.flushes = append(t.flushes, done)
	t.work.Unlock()
	<-done
}

// Close stops Tables without waiting for the tables being built: a build
// under way ends, unused; the Kernel keeps what it holds and is not
// written to after.
func (t *Tables) Close() {
	t.work.Lock()
	if t.closed {
		t.work.Unlock()
		return
	}
	t.closed = true
	close(t.builds)
	t.endFlushes()
	t.work.Unlock()
	<-t.done
}

// Stats returns the counters.
func (t *Tables) Stats() TableStats {
	t.mu.Lock()
	defer t.mu.Unlock()
	st := t.stats
	st.Processes = len(t.procs)
	for _, b := range t.binaries {
		if b.rows > 0 {
			st.Binaries++
			st.RowsUsed += int(b.rows)
		}
	}
	return st
}

// endFlushes ends the Flushes waiting. Callers hold work.
func (t *Tables) endFlushes() {
	for _, f := range t.flushes {
		close(f)
	}
	t.flushes = nil
}

// build is the builder: it reads the tables asked for, one at a time (a
// burst of new binaries takes one CPU), and loads each, until Close. It
// writes a table's rows without holding work: a large table takes
// milliseconds, and Learn, which a process being learned calls, would
// wait for them.
func (t *Tables) build() {
	defer close(t.done)
	for b := range t.builds {
		t.work.Lock()
		closed := t.closed
		t.work.Unlock()
		if closed {
			b.file.Close() // asked before Close: not read
			continue
		}
		b.rows, b.layout, b.err = t.parse(b.file)
		b.file.Close()
		t.work.Lock()
		s, placed := t.place(b)
		t.work.Unlock()
		written := placed && t.k.WriteRows(s.first, b.rows) == nil
		t.work.Lock()
		if !t.closed {
			t.built(b, s, placed, written)
		}
		t.work.Unlock()
	}
}

// place finds room for a built table's rows, evicting the least recently
// used tables no listed process maps when there is none; false when it has
// no rows, or none fit, or Tables is closed. Until built, the table stays
// building: no listing uses it, and it is not evicted. Callers hold work.
func (t *Tables) place(r build) (span, bool) {
	if t.closed || r.err != nil || len(r.rows) == 0 {
		return span{}, false
	}
	n := uint32(len(r.rows))
	t.mu.Lock()
	defer t.mu.Unlock()
	first, ok := t.alloc(n)
	for !ok && t.evict() {
		first, ok = t.alloc(n)
	}
	if !ok {
		r.table.overBudget, r.table.room = true, t.room
		t.stats.OverBudget++
	}
	return span{first, n}, ok
}

// built takes a table the builder read, its rows in s if placed and
// written (else s is freed), and lists again the processes waiting for it,
// at once: relistInterval bounds Learn's relists only. Callers hold work.
func (t *Tables) built(r build, s span, placed, written bool) {
	b := r.table
	b.layout, b.building = r.layout, false
	t.mu.Lock()
	t.stats.Building--
	switch err, rows := r.err, r.rows; {
	case errors.Is(err, ErrNoCFI), err == nil && len(rows) == 0:
		t.stats.NoCFI++
	case errors.Is(err, ErrTooManyRows), err == nil && rows[len(rows)-1].PC-rows[0].PC > 1<<32-1:
		t.stats.Unusable++
	case err != nil:
		t.stats.Malformed++
	}
	switch {
	case written:
		b.first, b.rows, b.base, b.overBudget = s.first, s.n, r.rows[0].PC, false
	case placed:
		t.freeSpan(s)
	}
	building := t.stats.Building
	t.mu.Unlock()
	var due []job
	for _, w := range t.waiting {
		if slices.Contains(w.tables, b) {
			due = append(due, w.job)
		}
	}
	for _, j := range due {
		var relisted time.Time
		if l := t.procs[uint32(j.pid)]; l != nil && l.generation == j.generation {
			relisted = l.relisted
		}
		t.list(j, relisted)
	}
	if building == 0 {
		t.endFlushes()
	}
}

// do lists j's process, unless it was listed less than relistInterval
// ago: then once that has passed.
func (t *Tables) do(j job) {
	t.work.Lock()
	defer t.work.Unlock()
	switch l := t.procs[uint32(j.pid)]; {
	case t.closed:
	case l != nil && l.generation == j.generation:
		// Listed again: at most every relistInterval.
		if wait := relistInterval - time.Since(l.relisted); wait > 0 {
			j.relist = true
			time.AfterFunc(wait, func() { t.do(j) })
			return
		}
		t.list(j, time.Now())
	case j.relist:
		// Put off, and since forgotten or replaced: nothing to do.
	default:
		t.list(j, time.Time{})
	}
}

// list lists j's process in the Kernel with the tables of its mappings
// that are ready, and has the missing ones built: a mapping whose table
// is being built gets no rows until it is, and the process waits for it.
// relisted is when Learn last listed it again (zero if never). A process
// none of whose files has rows, the vDSO aside (every process maps it), is
// left to the kernel's frame pointer walk.
func (t *Tables) list(j job, relisted time.Time) {
	pid, generation := uint32(j.pid), j.generation
	n := min(len(j.mappings), t.opts.MaxMappings)
	ms, used := make([]Mapping, 0, n), make([]*table, 0, n) // one allocation each, not a growing slice's
	var building []*table
	for i := range j.mappings {
		if len(ms) == t.opts.MaxMappings {
			break // the rest: frame pointers
		}
		m := &j.mappings[i]
		e := Mapping{Start: m.Start, End: m.End, File: m.Key(), Offset: m.Offset}
		switch b := t.tableOf(j.pid, m); {
		case b == nil:
		case b.building:
			building = append(building, b)
		case b.rows > 0:
			if bias, ok := b.layout.Bias(m); ok {
				e.Base, e.First, e.Rows = bias+b.base, b.first, b.rows
				// Pinned now: loading another table may evict
				// unpinned ones.
				t.mu.Lock()
				b.refs++
				t.mu.Unlock()
				used = append(used, b)
			}
		}
		ms = append(ms, e)
	}
	if len(building) > 0 {
		t.waiting[pid] = waiter{j, building} // replaces an older job's
	} else {
		delete(t.waiting, pid)
	}
	vdsoOnly := len(used) == 1 && used[0] == t.binaries[proc.FileKey{}]
	if len(used) == 0 || vdsoOnly {
		t.unpin(used)
		t.unlist(pid, false)
		return
	}
	if err := t.k.SetUnwind(pid, generation, ms, len(ms) < len(j.mappings)); err != nil {
		t.unpin(used)
		t.mu.Lock()
		t.stats.ListFailed++
		t.mu.Unlock()
		return // the process keeps frame pointers
	}
	t.release(pid)
	l := &listed{generation: generation, tables: used, relisted: relisted}
	t.mu.Lock()
	t.procs[pid] = l
	t.mu.Unlock()
}

// unpin drops a reference to each of tables.
func (t *Tables) unpin(tables []*table) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, b := range tables {
		if b.refs--; b.refs == 0 {
			t.room++
		}
	}
}

// forget unlists pid and stops waiting for its tables, if its image is
// generation (any, for 0): a table built later does not list it again.
func (t *Tables) forget(pid, generation uint32, exited bool) {
	if w, ok := t.waiting[pid]; ok && (generation == 0 || w.generation == generation) {
		delete(t.waiting, pid)
	}
	if l := t.procs[pid]; l != nil && (generation == 0 || l.generation == generation) {
		t.unlist(pid, exited)
	}
}

// unlist removes pid from the Kernel, if listed; exited as Forget's.
func (t *Tables) unlist(pid uint32, exited bool) {
	if t.procs[pid] == nil {
		return
	}
	t.k.DeleteUnwind(pid, exited)
	t.release(pid)
}

// release drops pid's references to its tables.
func (t *Tables) release(pid uint32) {
	l := t.procs[pid]
	if l == nil {
		return
	}
	t.unpin(l.tables)
	t.mu.Lock()
	delete(t.procs, pid)
	t.mu.Unlock()
}

// tableOf returns the table of the file behind m, asking the builder for
// it the first time (and for an over-budget one once room may have
// freed); nil when the file cannot be opened (it may be tried again). The
// file is opened here, while the process that maps it lives.
func (t *Tables) tableOf(pid int, m *proc.Mapping) *table {
	vdso := m.Path == "[vdso]"
	if m.Inode == 0 && !vdso {
		return nil // anonymous memory: frame pointers
	}
	k := m.Key() // zero for the vDSO, the same in every process
	b := t.binaries[k]
	if b != nil && (!b.overBudget || b.room == t.room) {
		b.lastUse = time.Now()
		return b
	}
	var f File
	if vdso {
		image, err := symbol.VDSOImage()
		if err != nil {
			return nil
		}
		f = memFile{bytes.NewReader(image)}
	} else {
		var err error
		if f, err = t.opts.Open(pid, m); err != nil {
			return nil
		}
	}
	b = &table{lastUse: time.Now(), building: true}
	select {
	case t.builds <- build{table: b, file: f}:
	default:
		f.Close()
		t.mu.Lock()
		t.stats.Dropped++
		t.mu.Unlock()
		return nil
	}
	t.mu.Lock()
	t.binaries[k] = b
	t.stats.Building++
	t.mu.Unlock()
	return b
}

// memFile is a File in memory.
type memFile struct{ *bytes.Reader }

func (memFile) Close() error { return nil }

// parse reads the rows and the layout of the ELF file f.
func (t *Tables) parse(f io.ReaderAt) ([]Row, symbol.Layout, error) {
	start := time.Now()
	ef, err := elf.NewFile(f)
	if err != nil {
		return nil, nil, fmt.Errorf("read ELF: %w", err)
	}
	layout := symbol.Segments(ef)
	// Go code keeps frame pointers, which the kernel walks for less, and
	// a Go program's .debug_frame would take table memory for every Go
	// function on the node. (C code linked in by cgo runs mostly in
	// libraries, which get their tables.)
	if symbol.IsGo(ef) {
		return nil, layout, fmt.Errorf("a Go program: %w", ErrNoCFI)
	}
	rows, st, err := Parse(ef, t.opts.Rows)
	t.mu.Lock()
	t.stats.Built++
	t.stats.BuildTime += time.Since(start)
	t.stats.UnsupportedRows += uint64(st.Unsupported)
	t.stats.InvalidFDEs += uint64(st.Invalid)
	t.mu.Unlock()
	return rows, layout, err
}

// evict frees the least recently used table no listed process maps;
// false when there is none. Callers hold mu.
func (t *Tables) evict() bool {
	var victim proc.FileKey
	var oldest *table
	for k, b := range t.binaries {
		if b.rows > 0 && b.refs == 0 && (oldest == nil || b.lastUse.Before(oldest.lastUse)) {
			victim, oldest = k, b
		}
	}
	if oldest == nil {
		return false
	}
	t.freeSpan(span{oldest.first, oldest.rows})
	delete(t.binaries, victim)
	return true
}

// alloc takes n rows from the first free span that holds them. Callers
// hold mu.
func (t *Tables) alloc(n uint32) (uint32, bool) {
	for i, s := range t.free {
		if s.n >= n {
			t.free[i] = span{s.first + n, s.n - n}
			if t.free[i].n == 0 {
				t.free = append(t.free[:i], t.free[i+1:]...)
			}
			return s.first, true
		}
	}
	return 0, false
}

// freeSpan returns s to the free list, merging it with its neighbours.
// Callers hold mu.
func (t *Tables) freeSpan(s span) {
	t.room++
	i := sort.Search(len(t.free), func(i int) bool { return t.free[i].first > s.first })
	t.free = append(t.free, span{})
	copy(t.free[i+1:], t.free[i:])
	t.free[i] = s
	if i+1 < len(t.free) && s.first+s.n == t.free[i+1].first {
		t.free[i].n += t.free[i+1].n
		t.free = append(t.free[:i+1], t.free[i+2:]...)
	}
	if i > 0 && t.free[i-1].first+t.free[i-1].n == t.free[i].first {
		t.free[i-1].n += t.free[i].n
		t.free = append(t.free[:i], t.free[i+1:]...)
	}
}
