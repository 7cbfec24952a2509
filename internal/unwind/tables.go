package unwind

import (
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"sync"
	"time"

	"github.com/flint-dev/flint/internal/proc"
	"github.com/flint-dev/flint/internal/symbol"
)

// Kernel holds the tables the BPF walker reads: the sampler's maps.
type Kernel interface {
	// WriteRows stores rows at index first, their PCs as offsets from base.
	WriteRows(first uint32, rows []Row, base uint64) error
	// SetUnwind lists the executable mappings of process pid's image.
	SetUnwind(pid, generation uint32, ms []Mapping) error
	// DeleteUnwind forgets process pid.
	DeleteUnwind(pid uint32) error
}

// Mapping is one executable mapping of a process as the walker sees it.
type Mapping struct {
	Start, End uint64 // addresses in the process
	Base       uint64 // the address row PC offsets start from
	First      uint32 // index of the first row
	Rows       uint32 // 0: no rows, frame pointers
}

// maxTableRows is the largest table the walker's binary search covers
// (bpf/profile.bpf.c ROW_SEARCH_STEPS).
const maxTableRows = 1 << 24

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
	Open func(pid int, m *proc.Mapping) (*os.File, error)
}

// TableStats count what Tables hold and skipped.
type TableStats struct {
	Processes  int // processes walked with tables
	Binaries   int // binaries with rows loaded
	RowsUsed   int // rows loaded, of Capacity
	Capacity   int
	Built      uint64 // tables built from CFI
	BuildTime  time.Duration
	NoCFI      uint64 // binaries without CFI (Go, stripped of it): frame pointers
	Malformed  uint64 // binaries whose CFI could not be read: frame pointers
	OverBudget uint64 // tables not loaded for want of room
	Unusable   uint64 // tables too large for the walker
	Dropped    uint64 // processes not listed: the queue was full
}

// Tables builds unwind rows for the binaries that sampled processes map,
// shares them between processes, and keeps the Kernel's copy current.
// Tables are built by one goroutine in the order processes are learned;
// until a process's are loaded, its stacks are walked with frame pointers.
type Tables struct {
	k    Kernel
	opts Options
	jobs chan job
	done chan struct{}

	mu       sync.Mutex
	binaries map[proc.FileKey]*table
	procs    map[uint32]*listed
	free     []span // free rows, sorted by first, coalesced
	stats    TableStats
	closed   bool
}

type job struct {
	pid        int
	generation uint32
	mappings   []proc.Mapping // a copy: the caller's may change
	forget     bool
	flushed    chan struct{} // closed once the jobs before it are done
}

// table is one binary's rows in the Kernel; rows == 0 when it has none.
type table struct {
	first, rows uint32
	base        uint64 // link-time PC of row offset 0
	layout      symbol.Layout
	refs        int // listed processes mapping it
	lastUse     time.Time
	overBudget  bool // no room when built: retried when room frees
}

// listed is a process the Kernel lists.
type listed struct {
	generation uint32
	tables     []*table
	relisted   time.Time // when last listed again, zero if never
}

type span struct{ first, n uint32 }

// New returns Tables loading into k; Close stops it.
func New(k Kernel, o Options) *Tables {
	t := &Tables{
		k: k, opts: o,
		jobs:     make(chan job, 4096),
		done:     make(chan struct{}),
		binaries: map[proc.FileKey]*table{},
		procs:    map[uint32]*listed{},
		free:     []span{{0, uint32(o.Rows)}},
	}
	t.stats.Capacity = o.Rows
	go t.run()
	return t
}

// Learn lists process p's image generation (0: whichever it is) in the
// Kernel, building the tables of the binaries it maps that have none yet. It does not wait:
// a busy queue drops the process (counted), whose stacks stay on frame
// pointers. Learning a listed process again lists its mappings anew.
func (t *Tables) Learn(p *proc.Process, generation uint32) {
	t.send(job{pid: p.PID, generation: generation, mappings: append([]proc.Mapping(nil), p.Mappings...)})
}

// Forget stops walking process pid's image generation with tables.
func (t *Tables) Forget(pid, generation uint32) {
	t.send(job{pid: int(pid), generation: generation, forget: true})
}

func (t *Tables) send(j job) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return
	}
	select {
	case t.jobs <- j:
	default:
		t.stats.Dropped++
	}
}

// Flush waits until what was asked before it is done; not after Close.
func (t *Tables) Flush() {
	done := make(chan struct{})
	t.jobs <- job{flushed: done}
	<-done
}

// Close stops the builder once it has done what it was asked; the Kernel
// keeps what it holds.
func (t *Tables) Close() {
	t.mu.Lock()
	t.closed = true
	close(t.jobs)
	t.mu.Unlock()
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

func (t *Tables) run() {
	defer close(t.done)
	for j := range t.jobs {
		if j.flushed != nil {
			close(j.flushed)
			continue
		}
		if j.forget {
			t.forget(uint32(j.pid), j.generation)
			continue
		}
		relist := false
		if l := t.procs[uint32(j.pid)]; l != nil && l.generation == j.generation {
			relist = true
			if wait := relistInterval - time.Since(l.relisted); wait > 0 {
				time.AfterFunc(wait, func() { t.send(j) })
				continue
			}
		}
		t.list(j, relist)
	}
}

// list builds what j's mappings need and lists its process in the Kernel,
// again if relist; a process none of whose mappings has rows is left to
// frame pointers.
func (t *Tables) list(j job, relist bool) {
	pid, generation := uint32(j.pid), j.generation
	var ms []Mapping
	var used []*table
	for i := range j.mappings {
		if len(ms) == t.opts.MaxMappings {
			break // the rest: frame pointers
		}
		m := &j.mappings[i]
		e := Mapping{Start: m.Start, End: m.End}
		if b := t.tableOf(j.pid, m); b != nil && b.rows > 0 {
			if bias, ok := b.layout.Bias(m); ok {
				e.Base, e.First, e.Rows = bias+b.base, b.first, b.rows
				used = append(used, b)
			}
		}
		ms = append(ms, e)
	}
	if len(used) == 0 {
		t.forget(pid, 0)
		return
	}
	if err := t.k.SetUnwind(pid, generation, ms); err != nil {
		return // the process keeps frame pointers
	}
	t.release(pid)
	t.mu.Lock()
	for _, b := range used {
		b.refs++
	}
	l := &listed{generation: generation, tables: used}
	if relist {
		l.relisted = time.Now()
	}
	t.procs[pid] = l
	t.mu.Unlock()
}

// forget unlists pid if its listed image is generation (any, for 0).
func (t *Tables) forget(pid, generation uint32) {
	l := t.procs[pid]
	if l == nil || generation != 0 && l.generation != generation {
		return
	}
	t.k.DeleteUnwind(pid)
	t.release(pid)
}

// release drops pid's references to its tables.
func (t *Tables) release(pid uint32) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if l := t.procs[pid]; l != nil {
		for _, b := range l.tables {
			b.refs--
		}
		delete(t.procs, pid)
	}
}

// tableOf returns the rows of the file behind m, building them the first
// time; nil when the file cannot be opened (it may be tried again).
func (t *Tables) tableOf(pid int, m *proc.Mapping) *table {
	vdso := m.Path == "[vdso]"
	if m.Inode == 0 && !vdso {
		return nil // anonymous memory: frame pointers
	}
	k := m.Key() // zero for the vDSO, the same in every process
	t.mu.Lock()
	b := t.binaries[k]
	t.mu.Unlock()
	if b != nil && !b.overBudget {
		b.lastUse = time.Now()
		return b
	}
	var r io.ReaderAt
	if vdso {
		image, err := symbol.VDSOImage()
		if err != nil {
			return nil
		}
		r = bytes.NewReader(image)
	} else {
		f, err := t.opts.Open(pid, m)
		if err != nil {
			return nil
		}
		defer f.Close()
		r = f
	}
	b = &table{lastUse: time.Now()}
	rows, err := t.parse(r, b)
	t.mu.Lock()
	defer t.mu.Unlock()
	t.binaries[k] = b
	switch {
	case errors.Is(err, ErrNoCFI), err == nil && len(rows) == 0:
		t.stats.NoCFI++
	case err != nil:
		t.stats.Malformed++
	case len(rows) > maxTableRows || rows[len(rows)-1].PC-rows[0].PC > 1<<32-1:
		t.stats.Unusable++
	default:
		t.load(b, rows)
	}
	return b
}

// parse reads the rows of the ELF file f, and its layout into b.
func (t *Tables) parse(f io.ReaderAt, b *table) ([]Row, error) {
	start := time.Now()
	ef, err := elf.NewFile(f)
	if err != nil {
		return nil, fmt.Errorf("read ELF: %w", err)
	}
	b.layout = symbol.Segments(ef)
	var rows []Row
	if isGo(ef) {
		err = fmt.Errorf("a Go program: %w", ErrNoCFI)
	} else {
		rows, _, err = Parse(ef)
	}
	t.mu.Lock()
	t.stats.Built++
	t.stats.BuildTime += time.Since(start)
	t.mu.Unlock()
	return rows, err
}

// load places rows in the Kernel, evicting the least recently used tables
// no listed process maps when there is no room. Callers hold mu.
func (t *Tables) load(b *table, rows []Row) {
	n := uint32(len(rows))
	first, ok := t.alloc(n)
	for !ok && t.evict() {
		first, ok = t.alloc(n)
	}
	if !ok {
		b.overBudget = true
		t.stats.OverBudget++
		return
	}
	if err := t.k.WriteRows(first, rows, rows[0].PC); err != nil {
		t.freeSpan(span{first, n})
		return
	}
	b.first, b.rows, b.base, b.overBudget = first, n, rows[0].PC, false
}

// isGo reports a Go program. Go code keeps frame pointers, which the
// kernel walks for less, and its .debug_frame would take table memory for
// every Go function on the node: Go processes are not listed. (C code a
// cgo program links in has .eh_frame rows but runs mostly in libraries,
// which get theirs.)
func isGo(f *elf.File) bool {
	return f.Section(".go.buildinfo") != nil || f.Section(".gopclntab") != nil || f.Section(".note.go.buildid") != nil
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

// alloc takes n rows from the first free span that holds them.
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
func (t *Tables) freeSpan(s span) {
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
