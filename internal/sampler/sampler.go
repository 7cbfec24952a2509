// Package sampler runs flint's CPU sampling BPF program: it loads it, attaches
// it to a cpu-clock perf event on every CPU, announces each new process so its
// mappings can be read while it lives, and drains aggregated stacks.
//
// Usage:
//
//	s, err := sampler.Start(sampler.Options{Frequency: 99, KernelStacks: true, OnNewProc: learn})
//	...
//	s.Stop()             // sampling ends
//	samples, err := s.Drain()
//	s.Close()
package sampler

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/rlimit"
	"golang.org/x/sys/unix"

	"github.com/flint-dev/flint/internal/proc"
	"github.com/flint-dev/flint/internal/python"
)

// MaxStackDepth is the deepest stack recorded, the kernel's default
// perf_event_max_stack.
const MaxStackDepth = 127

// Transfer is how samples move from the kernel to flint.
type Transfer string

// Transfers; docs/BENCHMARKS.md compares their cost.
const (
	// Aggregate counts samples per distinct stack in BPF hash maps,
	// drained with batch lookup-and-delete.
	Aggregate Transfer = "aggregate"
	// RingBuffer sends one record per sample through a BPF ring buffer and
	// counts in user space.
	RingBuffer Transfer = "ringbuf"
)

// Sentinel errors callers branch on.
var (
	ErrNoPermission = errors.New("need CAP_BPF and CAP_PERFMON (run as root)")
	ErrNotSupported = errors.New("kernel lacks BPF perf_event support (needs Linux 5.15+ with BTF)")
)

// Options configure a Sampler.
type Options struct {
	// Frequency is samples per second per CPU.
	Frequency int
	// PID restricts sampling to one process (thread group); 0 samples all.
	PID int
	// KernelStacks records kernel frames too.
	KernelStacks bool
	// Transfer picks the kernel-to-user path; zero means RingBuffer, the
	// cheaper here (docs/BENCHMARKS.md).
	Transfer Transfer
	// MaxStacks bounds distinct stacks (and distinct sample keys) held in
	// the kernel between drains; zero means 16384. Each costs ~1 KiB of
	// kernel memory, allocated at load.
	MaxStacks int
	// OnNewProc is called, from a goroutine of the sampler, the first time
	// a process (or a process image, after exec) is sampled. It should read
	// what it needs from /proc quickly: the process may be short-lived.
	OnNewProc func(NewProc)
	// UnwindRows is how many unwind rows (UnwindRowSize bytes each, kernel memory
	// allocated at load) the sampler holds for walking user stacks of code
	// built without frame pointers; 0 leaves every user stack to the
	// kernel's frame pointer walk. See SetUnwind.
	UnwindRows int
	// OnStale is called, from a goroutine of the sampler, when a process
	// with unwind mappings (SetUnwind) ran code outside them: it loaded a
	// library since. It is called once until SetUnwind lists the process
	// again; not when the process could list itself again, which
	// OnNewProc then hands over (NewProc.Relisted).
	OnStale func(pid, generation uint32)
	// OnExit is called, from a goroutine of the sampler or in Drain, when
	// a process it announced has exited, its last thread gone; not for
	// every one (a full ring loses some), and not at once: the kernel
	// tells of it without waking anyone.
	OnExit func(pid, generation uint32)
	// OnYoungPython is called, from a goroutine of the sampler, with the
	// Python frames (frame words, see package python) of a sample of a
	// CPython process (SetPython) started less than a second before,
	// when the copies of their code objects (OnPythonCopy, called
	// before) lack some that should be read while the process lives: a
	// short-lived one takes them with it when it exits. A sample whose
	// copies hold them all is not passed here: Drain returns it after
	// them. The frames are valid until it returns.
	OnYoungPython func(pid, generation uint32, frames []uint64)
	// OnPythonCopy is called with a code object that a sample of such a
	// process ran and that the sampler copied in the process's own
	// context, where reading is a copy and not a remote read: from Drain,
	// before the samples, or before OnYoungPython with the sample's
	// frames. The copy is valid until it returns.
	OnPythonCopy func(pid, generation uint32, c *python.Copy)
	// Paused loads and attaches without sampling until Resume.
	Paused bool
	// OffCPU, if set, loads what records where threads wait off the CPU
	// (SetOffCPU, DrainOffCPU).
	OffCPU *OffCPU
	// NoCPU, with OffCPU, takes no CPU samples.
	NoCPU bool
	// YoungSampleEvery, above 1, samples one tick in that many, at
	// random, of a process in its first second, each sample counting
	// that many times (Sample.Count): a short-lived process's samples are
	// the dearest to take and to name, and most of what it costs.
	YoungSampleEvery uint32
}

// Sample is one distinct (process image, thread, stacks) and how often it
// was seen. Samples with equal stacks share the stack's slice (until Trim
// forgets the stack), so its identity can key caches; do not modify it.
type Sample struct {
	PID, TID   uint32
	Generation uint32
	Comm       string   // process name
	Thread     string   // thread name
	User       []uint64 // user stack, leaf first
	Kernel     []uint64 // kernel stack, leaf first
	// StackLost is set when the sample's stack did not fit in the kernel's
	// stack map: the sample counts, its frames are unknown.
	StackLost bool
	// Count is the ticks it stands for: once each time it was seen,
	// YoungSampleEvery times for a sample of a process's first second.
	Count uint64
}

// Stats are per-CPU counters kept by the BPF program.
type Stats struct {
	Samples, UserStackErrors, KernelStackErrors uint64
	StacksFull, CountsFull, RingBufFull         uint64
	ProcEventsLost                              uint64
	// ProcsQuiet counts new processes announced without waking the
	// reader (SetQuietFile): read at the next Drain.
	ProcsQuiet uint64
	// User stacks walked with unwind tables; of those, walks that reached
	// the outermost frame, and walks cut short by unreadable memory.
	UnwindWalks, UnwindComplete, UnwindFaults uint64
	// UnwindStale counts processes found running code outside their
	// unwind mappings.
	UnwindStale uint64
	// PythonStacks counts samples whose Python frames were read;
	// PythonNoThread, samples of CPython processes whose thread state was
	// not found (a thread that never ran Python); PythonCodes, code objects
	// of young CPython processes the program copied (OnPythonCopy).
	PythonStacks, PythonNoThread, PythonCodes uint64
	// OffCPUSpans counts off-CPU spans recorded; OffCPUFull, those lost
	// to a full map.
	OffCPUSpans, OffCPUFull uint64
	// SamplesHanded counts first samples of new processes in user code
	// that the sampler handed to the process's listing, which walks the
	// stack with the tables it fills as the thread returns to user code;
	// SamplesListed, those it sent. A process that exits first never
	// returns: its handed sample is lost.
	SamplesHanded, SamplesListed uint64
	// YoungSkipped counts ticks of young processes not sampled
	// (Options.YoungSampleEvery).
	YoungSkipped uint64
	// TaskWorkTime is the time spent in the listings' task works, which
	// the kernel's BPF statistics do not count (ProgramStats adds it).
	TaskWorkTime time.Duration
	PerCPU       [][]uint64 // [cpu][stat]
}

// Dropped is the number of samples lost entirely.
func (s Stats) Dropped() uint64 { return s.CountsFull + s.RingBufFull + s.HandedLost() }

// HandedLost is the number of samples handed to a listing and not sent:
// lost, or still to come.
func (s Stats) HandedLost() uint64 { return s.SamplesHanded - min(s.SamplesListed, s.SamplesHanded) }

// Sampler samples stacks on every CPU.
type Sampler struct {
	opts     Options
	objs     profileObjects
	events   []int // perf event fds, one per CPU
	links    []link.Link
	tps      []link.Link
	sections *ebpf.Collection // the data sections' maps (load)
	offCPU   link.Link        // while recording off-CPU time
	offCPUOn bool             // SetOffCPU(true)
	running  bool             // between Resume and Stop
	procs    *ring
	stale    *ring
	young    *ring // python_young
	samples  *ring
	wg       sync.WaitGroup

	// drainSoon is DrainSoon's; drains counts the drains.
	drainSoon chan struct{}
	drains    atomic.Uint64

	// onYoung handles a python_young record, onProc a proc_events one: in
	// the reader a record woke, and in Drain.
	onYoung, onProc func([]byte)

	// Until the off-CPU program is loaded, what loadOffCPU loads it from.
	offCPUSpec *ebpf.CollectionSpec
	offCPUMaps map[string]*ebpf.Map

	// unwind_rows' memory, which WriteRows copies rows into.
	rows *ebpf.Memory

	// The program's unwind_epoch, moved after each WriteRows, and its
	// tables_epoch, moved after each SetPython and SetUnwind.
	rowsEpoch, tablesEpoch epoch

	// stacks caches stacks read from the kernel by hash, so each distinct
	// stack crosses once; Trim bounds it.
	stacks map[uint64]*cachedStack
	round  uint64

	ringCounts map[ringKey]uint64 // drainRing's scratch

	// SetUnwind's value, 4 KiB, under unwindMu: one for every new
	// process.
	unwindMu   sync.Mutex
	unwindProc profileUnwindProc

	// The processes whose unwind_procs and python_procs entries
	// SetUnwind and SetPython wrote: on_exit deletes an exited process's
	// entries, but one written after the exit outlives it.
	unwindWritten, pythonWritten writtenPIDs
}

// Start loads the BPF program and starts sampling on every online CPU.
func Start(opts Options) (*Sampler, error) {
	if opts.Transfer == "" {
		opts.Transfer = RingBuffer
	}
	if opts.MaxStacks == 0 {
		opts.MaxStacks = 16384
	}
	if opts.Frequency <= 0 {
		return nil, fmt.Errorf("frequency %d Hz: must be positive", opts.Frequency)
	}
	if err := rlimit.RemoveMemlock(); err != nil {
		return nil, classify(fmt.Errorf("remove memlock limit: %w", err))
	}
	spec, err := loadProfile()
	if err != nil {
		return nil, fmt.Errorf("load BPF object: %w", err)
	}
	consts := map[string]any{
		"target_tgid":   uint32(opts.PID),
		"kernel_stacks": opts.KernelStacks,
		"use_ringbuf":   opts.Transfer == RingBuffer,
		"unwind_tables": opts.UnwindRows > 0,
		"self_tgid":     uint32(os.Getpid()),
		"young_sample":  max(opts.YoungSampleEvery, 1),
	}
	if o := opts.OffCPU; o != nil {
		consts["off_cpu_min_ns"] = uint64(o.Min.Nanoseconds())
		consts["off_cpu_sample"] = uint32(max(o.SampleEvery, 1))
	}
	for name, v := range consts {
		if err := spec.Variables[name].Set(v); err != nil {
			return nil, fmt.Errorf("set %s: %w", name, err)
		}
	}
	if opts.Transfer == RingBuffer {
		// The hash maps are unused: keep them tiny.
		spec.Maps["stacks"].MaxEntries = 1
		spec.Maps["counts"].MaxEntries = 1
		spec.Maps["samples"].MaxEntries = ringSize(opts.Frequency, runtime.NumCPU())
	} else {
		spec.Maps["stacks"].MaxEntries = uint32(opts.MaxStacks)
		spec.Maps["counts"].MaxEntries = uint32(opts.MaxStacks)
		spec.Maps["samples"].MaxEntries = uint32(os.Getpagesize())
	}
	if o := opts.OffCPU; o != nil {
		n := uint32(opts.MaxStacks)
		if o.MaxStacks > 0 {
			n = uint32(o.MaxStacks)
		}
		spec.Maps["stacks"].MaxEntries = max(spec.Maps["stacks"].MaxEntries, n)
		spec.Maps["off_cpu_stacks"].MaxEntries = n
		spec.Maps["off_cpu"].MaxEntries = n
	} else {
		spec.Maps["off_cpu"].MaxEntries = 1
		spec.Maps["off_cpu_stacks"].MaxEntries = 1
		spec.Maps["off_cpu_spans"].MaxEntries = 1
	}
	if opts.UnwindRows > 0 {
		spec.Maps["unwind_rows"].MaxEntries = uint32(opts.UnwindRows)
	} else {
		spec.Maps["unwind_procs"].MaxEntries = 1
		spec.Maps["row_cache"].MaxEntries = 1
	}
	s := &Sampler{opts: opts, stacks: map[uint64]*cachedStack{}, ringCounts: map[ringKey]uint64{}, drainSoon: make(chan struct{}, 1)}
	if err := s.load(spec); err != nil {
		return nil, classify(fmt.Errorf("load BPF program: %w", err))
	}
	if opts.UnwindRows > 0 {
		var err error
		if s.rows, err = s.objs.UnwindRows.Memory(); err != nil {
			s.Close()
			return nil, fmt.Errorf("map the unwind rows: %w", err)
		}
	}
	if err := s.start(); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// load loads the maps and the programs of spec into s.objs, but for the
// off-CPU program: its verification is half an agent's start-up CPU
// (docs/BENCHMARKS.md, "Off-CPU time"), which a sampler never asked for
// off-CPU time need not spend. With Options.OffCPU, attachOffCPU loads
// it, the first time, over these maps (s.offCPUSpec).
func (s *Sampler) load(spec *ebpf.CollectionSpec) error {
	eager := spec.Copy()
	delete(eager.Programs, "on_switch")
	coll, err := ebpf.NewCollection(eager)
	if err != nil {
		return err
	}
	// The data sections' maps too: the program reads its constants and
	// counters from the ones loaded here.
	all := maps.Clone(coll.Maps)
	var objs struct {
		profileMaps
		profileVariables
		OnExec *ebpf.Program `ebpf:"on_exec"`
		OnFork *ebpf.Program `ebpf:"on_fork"`
		OnExit *ebpf.Program `ebpf:"on_exit"`
		Sample *ebpf.Program `ebpf:"sample"`
	}
	if err := coll.Assign(&objs); err != nil {
		coll.Close()
		return err
	}
	s.sections = coll // what Assign left: the data sections' maps
	s.objs.profileMaps, s.objs.profileVariables = objs.profileMaps, objs.profileVariables
	s.objs.OnExec, s.objs.OnFork, s.objs.OnExit, s.objs.Sample = objs.OnExec, objs.OnFork, objs.OnExit, objs.Sample
	if s.opts.OffCPU != nil {
		s.offCPUSpec, s.offCPUMaps = spec, all
	}
	return nil
}

// loadOffCPU loads the off-CPU program over the maps load loaded.
func (s *Sampler) loadOffCPU() error {
	var objs struct {
		OnSwitch *ebpf.Program `ebpf:"on_switch"`
	}
	if err := s.offCPUSpec.LoadAndAssign(&objs, &ebpf.CollectionOptions{MapReplacements: s.offCPUMaps}); err != nil {
		return err
	}
	s.objs.OnSwitch = objs.OnSwitch
	s.offCPUSpec, s.offCPUMaps = nil, nil
	return nil
}

// epoch is a counter of the program's that user space moves so that the
// program stops using what it cached under the earlier values. Moves are
// in order, so an epoch never returns to a value whose cache is outdated.
type epoch struct {
	mu sync.Mutex
	n  uint32
}

func (e *epoch) move(v *ebpf.Variable, after string) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.n++
	if err := v.Set(e.n); err != nil {
		return fmt.Errorf("%s: move its epoch: %w", after, err)
	}
	return nil
}

// forgetLacks moves the program's tables_epoch, after a process was listed
// in python_procs or unwind_procs: each CPU may have cached that it was
// not.
func (s *Sampler) forgetLacks() error {
	return s.tablesEpoch.move(s.objs.TablesEpoch, "process listed")
}

// ringSize holds 4 s of samples (callers drain it half full) from every CPU
// at ~512 bytes a sample, within [256 KiB, 64 MiB] (a power of two). Pages of
// the ring count in flint's RSS once written, so it is no larger.
func ringSize(freq, cpus int) uint32 {
	want := uint64(freq) * uint64(cpus) * 4 * 512
	size := uint32(256 << 10)
	for uint64(size) < want && size < 64<<20 {
		size <<= 1
	}
	return size
}

func (s *Sampler) start() error {
	var err error
	if s.procs, err = openRing(s.objs.ProcEvents); err != nil {
		return fmt.Errorf("open process events: %w", err)
	}
	if s.stale, err = openRing(s.objs.StaleProcs); err != nil {
		return fmt.Errorf("open stale process events: %w", err)
	}
	if s.young, err = openRing(s.objs.PythonYoung); err != nil {
		return fmt.Errorf("open young Python process events: %w", err)
	}
	s.wg.Add(3)
	var listed []ListedMapping // the announcements' scratch, under s.procs.mu
	s.onProc = func(raw []byte) {
		var exit profileProcExit
		if len(raw) == int(unsafe.Sizeof(exit)) {
			if s.opts.OnExit != nil {
				s.opts.OnExit(binary.NativeEndian.Uint32(raw[unsafe.Offsetof(exit.Pid):]),
					binary.NativeEndian.Uint32(raw[unsafe.Offsetof(exit.Generation):]))
			}
			return
		}
		if p, ok := decodeNewProc(raw, listed[:0]); ok && s.opts.OnNewProc != nil {
			s.opts.OnNewProc(p)
			if p.Listed {
				listed = p.Mappings
			}
		}
	}
	go s.readRing(s.procs, s.onProc)
	go s.readRing(s.stale, func(raw []byte) {
		switch p, ok := decodeNewProc(raw, nil); {
		case ok && p.PID == 0: // ask_drain
			s.askDrain()
		case ok && s.opts.OnStale != nil:
			s.announced()
			s.opts.OnStale(p.PID, p.Generation)
		}
	})
	var frames []uint64 // the young records' scratch, under s.young.mu
	var copied python.Copy
	s.onYoung = func(raw []byte) {
		var ok bool
		var pid, gen uint32
		// Its process's announcement, committed before it, first: read
		// here, not once a wake-up, so that one committed meanwhile is.
		s.announced()
		switch pythonRecord(raw) {
		case profilePythonRecordPY_RECORD_STACK:
			if pid, gen, frames, ok = decodePythonStack(raw, frames[:0]); ok && s.opts.OnYoungPython != nil {
				s.opts.OnYoungPython(pid, gen, frames)
			}
		case profilePythonRecordPY_RECORD_CODE:
			if pid, gen, ok = decodePythonCode(raw, &copied); ok && s.opts.OnPythonCopy != nil {
				s.opts.OnPythonCopy(pid, gen, &copied)
			}
		}
	}
	go s.readRing(s.young, s.onYoung)
	if s.opts.Transfer == RingBuffer {
		if s.samples, err = openRing(s.objs.Samples); err != nil {
			return fmt.Errorf("open sample ring buffer: %w", err)
		}
		s.wg.Add(1)
		go s.waitHalfFull()
	}
	for _, tp := range []*ebpf.Program{s.objs.OnExec, s.objs.OnFork, s.objs.OnExit} {
		l, err := link.AttachTracing(link.TracingOptions{Program: tp})
		if err != nil {
			return classify(fmt.Errorf("attach %s: %w", tp, err))
		}
		s.tps = append(s.tps, l)
	}
	if !s.opts.NoCPU || s.opts.OffCPU == nil {
		cpus, err := onlineCPUs()
		if err != nil {
			return err
		}
		for _, cpu := range cpus {
			if err := s.attach(cpu); err != nil {
				return err
			}
		}
	}
	if s.opts.Paused {
		return nil
	}
	return s.Resume()
}

// Resume starts sampling after Start with Options.Paused, or Stop.
func (s *Sampler) Resume() error {
	for _, fd := range s.events {
		if err := unix.IoctlSetInt(fd, unix.PERF_EVENT_IOC_ENABLE, 0); err != nil {
			return fmt.Errorf("enable perf event: %w", err)
		}
	}
	s.running = true
	return s.attachOffCPU()
}

// attach opens a cpu-clock event on cpu firing Frequency times a second of
// CPU time and runs the program on each firing.
func (s *Sampler) attach(cpu int) error {
	attr := unix.PerfEventAttr{
		Type:   unix.PERF_TYPE_SOFTWARE,
		Config: unix.PERF_COUNT_SW_CPU_CLOCK,
		Size:   uint32(unsafe.Sizeof(unix.PerfEventAttr{})),
		// A fixed period in ns is exact for a clock and skips the
		// kernel's frequency re-estimation.
		Sample: uint64(time.Second) / uint64(s.opts.Frequency),
		Bits:   unix.PerfBitDisabled,
	}
	fd, err := unix.PerfEventOpen(&attr, -1, cpu, -1, unix.PERF_FLAG_FD_CLOEXEC)
	if err != nil {
		return classify(fmt.Errorf("open perf event on cpu %d: %w", cpu, err))
	}
	s.events = append(s.events, fd)
	l, err := link.AttachRawLink(link.RawLinkOptions{Target: fd, Program: s.objs.Sample, Attach: ebpf.AttachPerfEvent})
	if err != nil {
		return classify(fmt.Errorf("attach perf event on cpu %d: %w", cpu, err))
	}
	s.links = append(s.links, l)
	return nil
}

// readRing calls handle with each record r delivers until r.wait closes.
// It waits in Go's network poller, not in a system call of its own: a
// goroutine blocked in a system call keeps its P until the runtime's
// sysmon thread takes it back, and each time sysmon did, it went
// back to waking every 20 us. Under process churn that was 16% of the
// agent's CPU (docs/BENCHMARKS.md).
func (s *Sampler) readRing(r *ring, handle func([]byte)) {
	defer s.wg.Done()
	conn, err := r.wait.SyscallConn()
	if err != nil {
		return
	}
	ready := func(uintptr) bool { return r.ready() }
	for {
		if r.read(handle) != nil {
			return // not the kernel's layout: nothing more can be read
		}
		if conn.Read(ready) != nil {
			return // closed
		}
	}
}

// announced hands OnNewProc the announcements waiting unread: quiet ones
// (SetQuietFile) wake no reader, and must be known before what follows
// them, a stale process or a young Python sample.
func (s *Sampler) announced() {
	s.procs.read(s.onProc) // an error ended its reader too
}

// NewProc is a process the BPF program announced: its PID, the generation
// that tells images of one PID apart, and its name and start time as
// /proc/PID/stat gives them (Comm is "" when the program could not read
// them).
type NewProc struct {
	PID, Generation uint32
	Comm            string
	StartTime       uint64 // clock ticks after boot
	// ExeText is where the executable's text starts in the process; 0 for
	// a process without memory of its own (a kernel thread).
	ExeText uint64
	// Listed is set when the kernel listed every executable mapping of
	// the process, in address order, in Mappings (Linux 6.18 and later,
	// for a process first sampled in user code, or single-threaded):
	// /proc/PID/maps need not be read for files already known. Mappings
	// is valid only until OnNewProc returns.
	Listed   bool
	Mappings []ListedMapping
	// Cgroups names the cgroups the process is in, in every hierarchy,
	// when the kernel listed it: processes whose /proc/PID/cgroup is the
	// same have the same; 0 when unknown.
	Cgroups uint64
	// TablesFilled is set when the kernel listed the process for its
	// unwinder itself, with the rows SetQuietFile gave of each of its
	// files at the time (a quiet announcement).
	TablesFilled bool
	// Relisted is set when the process was announced before, and ran code
	// outside the mappings the unwinder was given (a library loaded
	// since): its mappings as they are now, listed or else to be read
	// from /proc, as OnStale would.
	Relisted bool
	// Started is when the process started, after boot (CLOCK_BOOTTIME).
	Started time.Duration
}

// ListedMapping is an executable mapping as the kernel listed it.
type ListedMapping struct {
	Start, End, Offset uint64
	File               KernelFile // zero: anonymous memory
	Deleted            bool       // the file was removed after mapping
	VDSO               bool       // the kernel's vDSO
}

// KernelFile is a mapped file as the kernel holds it. It is not the
// device and inode /proc shows when an overlay file system (a container's)
// stands between: callers match the two by address.
type KernelFile struct {
	Inode      uint64
	Dev        uint32 // the kernel's encoding
	Generation uint32 // the inode's, against inode numbers reused
}

// decodeNewProc decodes a process announcement, at the offsets of the
// generated type: binary.Decode's reflection was 3% of the agent's CPU
// under process churn. A listed announcement's mappings are appended to
// scratch, which p.Mappings then is.
func decodeNewProc(raw []byte, scratch []ListedMapping) (p NewProc, ok bool) {
	var ev profileListedProc
	if len(raw) < int(unsafe.Sizeof(ev.Proc)) {
		return NewProc{}, false
	}
	p = NewProc{
		PID:        binary.NativeEndian.Uint32(raw[unsafe.Offsetof(ev.Proc.Pid):]),
		Generation: binary.NativeEndian.Uint32(raw[unsafe.Offsetof(ev.Proc.Generation):]),
		Started:    time.Duration(binary.NativeEndian.Uint64(raw[unsafe.Offsetof(ev.Proc.StartBoottime):])),
		ExeText:    binary.NativeEndian.Uint64(raw[unsafe.Offsetof(ev.Proc.StartCode):]),
	}
	p.StartTime = uint64(p.Started / proc.ClockTick)
	comm := raw[unsafe.Offsetof(ev.Proc.Comm):][:len(ev.Proc.Comm)]
	if n := bytes.IndexByte(comm, 0); n >= 0 {
		comm = comm[:n]
	}
	p.Comm = string(comm)
	if len(raw) < int(unsafe.Offsetof(ev.Mappings)) {
		return p, true // unlisted
	}
	p.Cgroups = binary.NativeEndian.Uint64(raw[unsafe.Offsetof(ev.Cgroups):])
	n := int(binary.NativeEndian.Uint32(raw[unsafe.Offsetof(ev.Len):]))
	size := int(unsafe.Sizeof(ev.Mappings[0]))
	if n > len(ev.Mappings) || len(raw) < int(unsafe.Offsetof(ev.Mappings))+n*size {
		return NewProc{}, false
	}
	flags := profileListingFlags(binary.NativeEndian.Uint32(raw[unsafe.Offsetof(ev.Flags):]))
	p.Relisted = flags&profileListingFlagsLISTING_RELISTED != 0
	if flags&profileListingFlagsLISTING_COMPLETE == 0 {
		return p, true // more mappings than the record holds, or none listed
	}
	p.TablesFilled = flags&profileListingFlagsLISTING_TABLES_FILLED != 0
	for i := range n {
		r := raw[int(unsafe.Offsetof(ev.Mappings))+i*size:]
		flags := profileListedMappingFlags(binary.NativeEndian.Uint32(r[unsafe.Offsetof(ev.Mappings[0].Flags):]))
		scratch = append(scratch, ListedMapping{
			Start:  binary.NativeEndian.Uint64(r[unsafe.Offsetof(ev.Mappings[0].Start):]),
			End:    binary.NativeEndian.Uint64(r[unsafe.Offsetof(ev.Mappings[0].End):]),
			Offset: binary.NativeEndian.Uint64(r[unsafe.Offsetof(ev.Mappings[0].Offset):]),
			File: KernelFile{
				Inode:      binary.NativeEndian.Uint64(r[unsafe.Offsetof(ev.Mappings[0].Inode):]),
				Dev:        binary.NativeEndian.Uint32(r[unsafe.Offsetof(ev.Mappings[0].Dev):]),
				Generation: binary.NativeEndian.Uint32(r[unsafe.Offsetof(ev.Mappings[0].InodeGeneration):]),
			},
			Deleted: flags&profileListedMappingFlagsLISTED_DELETED != 0,
			VDSO:    flags&profileListedMappingFlagsLISTED_VDSO != 0,
		})
	}
	p.Listed, p.Mappings = true, scratch
	return p, true
}

// pythonRecord returns the kind of a python_young record; an impossible
// one for a record too short to say.
func pythonRecord(raw []byte) profilePythonRecord {
	var ev profilePythonStack
	at := unsafe.Offsetof(ev.Record)
	if len(raw) < int(at)+4 {
		return ^profilePythonRecord(0)
	}
	return profilePythonRecord(binary.NativeEndian.Uint32(raw[at:]))
}

// decodePythonCode decodes a python_young record of a copied code object
// into c, whose objects' data then point into raw.
func decodePythonCode(raw []byte, c *python.Copy) (pid, generation uint32, ok bool) {
	var ev profilePythonCode
	objects := int(unsafe.Offsetof(ev.Objects))
	at := int(unsafe.Offsetof(ev.ObjectsData)) // the objects copied, back to back
	if len(raw) < at {
		return 0, 0, false
	}
	c.Code = binary.NativeEndian.Uint64(raw[unsafe.Offsetof(ev.Addr):])
	c.Objects = append(c.Objects[:0], python.Object{Addr: c.Code,
		Data: raw[unsafe.Offsetof(ev.Header):][:len(ev.Header)]})
	rooms := [...]profilePythonRoom{profilePythonRoomPY_STR_MAX, profilePythonRoomPY_STR_MAX, profilePythonRoomPY_TABLE_MAX} // name, file, table
	for i, room := range rooms {
		o := raw[objects+i*int(unsafe.Sizeof(ev.Objects[0])):]
		addr, n := binary.NativeEndian.Uint64(o), int(binary.NativeEndian.Uint32(o[8:]))
		if n == 0 {
			continue // not copied
		}
		if n > int(room) || len(raw) < at+n {
			return 0, 0, false
		}
		c.Objects = append(c.Objects, python.Object{Addr: addr, Data: raw[at : at+n],
			Whole: binary.NativeEndian.Uint32(o[12:]) != 0})
		at += n
	}
	return binary.NativeEndian.Uint32(raw[unsafe.Offsetof(ev.Pid):]),
		binary.NativeEndian.Uint32(raw[unsafe.Offsetof(ev.Generation):]), true
}

// decodePythonStack decodes a python_young record of a sample's frames,
// appending them to frames.
func decodePythonStack(raw []byte, frames []uint64) (pid, generation uint32, _ []uint64, ok bool) {
	var ev profilePythonStack
	head := int(unsafe.Offsetof(ev.Frames))
	if len(raw) < head {
		return 0, 0, frames, false
	}
	n := int(binary.NativeEndian.Uint32(raw[unsafe.Offsetof(ev.N):]))
	if n > len(ev.Frames) || len(raw) < head+8*n {
		return 0, 0, frames, false
	}
	for i := range n {
		frames = append(frames, binary.NativeEndian.Uint64(raw[head+8*i:]))
	}
	return binary.NativeEndian.Uint32(raw[unsafe.Offsetof(ev.Pid):]),
		binary.NativeEndian.Uint32(raw[unsafe.Offsetof(ev.Generation):]), frames, true
}

// Stop stops sampling; samples taken so far stay available to Drain.
// Safe to call twice.
func (s *Sampler) Stop() {
	for _, fd := range s.events {
		unix.IoctlSetInt(fd, unix.PERF_EVENT_IOC_DISABLE, 0)
	}
	s.running = false
	s.detachOffCPU()
}

// Close detaches and releases everything; safe to call twice.
func (s *Sampler) Close() error {
	s.Stop()
	for _, l := range append(s.links, s.tps...) {
		l.Close()
	}
	s.links, s.tps = nil, nil
	for _, fd := range s.events {
		unix.Close(fd)
	}
	s.events = nil
	// readRing reads the rings' shared pages: it ends, its wait closed,
	// before they are unmapped.
	rings := []*ring{s.procs, s.stale, s.young, s.samples}
	for _, r := range rings {
		if r != nil {
			r.wait.Close()
		}
	}
	s.wg.Wait()
	for _, r := range rings {
		if r != nil {
			r.close()
		}
	}
	s.procs, s.stale, s.young, s.samples = nil, nil, nil, nil
	if s.sections != nil {
		s.sections.Close()
	}
	return s.objs.Close()
}

// DrainSoon receives when the kernel asks for a drain before the window
// ends: the sample ring buffer is half full (in ring buffer mode; the
// aggregate mode's maps are sized for a whole window), or the program
// sampled Python code of a process past its first second (PythonToRead)
// 0.9 s or more after the last Drain: callers look at PythonToRead a
// second after each Drain. Nothing else wakes an agent that is idle
// between windows.
func (s *Sampler) DrainSoon() <-chan struct{} { return s.drainSoon }

func (s *Sampler) askDrain() {
	select {
	case s.drainSoon <- struct{}{}:
	default: // one asked already
	}
}

// halfFull is how full the sample ring buffer is when the program wakes
// its reader.
const halfFull = 0.5

// waitHalfFull asks for a drain each time the program finds the sample
// ring buffer half full, once between drains: until the next drain each
// sample wakes it again.
func (s *Sampler) waitHalfFull() {
	defer s.wg.Done()
	conn, err := s.samples.wait.SyscallConn()
	if err != nil {
		return
	}
	asked := ^uint64(0) // the drains counted when it last asked
	ready := func(uintptr) bool { return s.samples.backlog() >= halfFull && s.drains.Load() != asked }
	for conn.Read(ready) == nil {
		asked = s.drains.Load()
		s.askDrain()
	}
}

// PythonToRead reports whether, since the last Drain, the program sampled
// Python code of processes past their first second: their code objects
// are read from the process as their samples are drained
// (collect.Collector.ReadPython), so drain soon, while it lives. Younger
// processes' samples bring copies of theirs and need no hurry. A flag
// that cannot be read asks for a drain.
func (s *Sampler) PythonToRead() bool {
	var sampled uint32
	return s.objs.OldPythonSampled.Get(&sampled) != nil || sampled != 0
}

// Stats reads the BPF program's counters.
func (s *Sampler) Stats() (Stats, error) {
	var st Stats
	for i := range uint32(profileSamplerStatSTAT_MAX) {
		perCPU, err := s.stat(i)
		if err != nil {
			return st, err
		}
		for cpu, v := range perCPU {
			for len(st.PerCPU) <= cpu {
				st.PerCPU = append(st.PerCPU, make([]uint64, profileSamplerStatSTAT_MAX))
			}
			st.PerCPU[cpu][i] = v
		}
	}
	for _, c := range st.PerCPU {
		st.Samples += c[profileSamplerStatSTAT_SAMPLES]
		st.UserStackErrors += c[profileSamplerStatSTAT_USER_STACK_ERR]
		st.KernelStackErrors += c[profileSamplerStatSTAT_KERNEL_STACK_ERR]
		st.StacksFull += c[profileSamplerStatSTAT_STACKS_FULL]
		st.CountsFull += c[profileSamplerStatSTAT_COUNTS_FULL]
		st.RingBufFull += c[profileSamplerStatSTAT_RINGBUF_FULL]
		st.ProcEventsLost += c[profileSamplerStatSTAT_PROC_EVENTS_LOST]
		st.ProcsQuiet += c[profileSamplerStatSTAT_PROCS_QUIET]
		st.UnwindWalks += c[profileSamplerStatSTAT_UNWIND_WALKS]
		st.UnwindComplete += c[profileSamplerStatSTAT_UNWIND_COMPLETE]
		st.UnwindFaults += c[profileSamplerStatSTAT_UNWIND_FAULTS]
		st.UnwindStale += c[profileSamplerStatSTAT_UNWIND_STALE]
		st.PythonStacks += c[profileSamplerStatSTAT_PYTHON_STACKS]
		st.PythonNoThread += c[profileSamplerStatSTAT_PYTHON_NO_THREAD]
		st.PythonCodes += c[profileSamplerStatSTAT_PYTHON_CODES]
		st.OffCPUSpans += c[profileSamplerStatSTAT_OFF_CPU_SPANS]
		st.OffCPUFull += c[profileSamplerStatSTAT_OFF_CPU_FULL]
		st.SamplesHanded += c[profileSamplerStatSTAT_SAMPLES_HANDED]
		st.SamplesListed += c[profileSamplerStatSTAT_SAMPLES_LISTED]
		st.YoungSkipped += c[profileSamplerStatSTAT_YOUNG_SKIPPED]
		st.TaskWorkTime += time.Duration(c[profileSamplerStatSTAT_TASK_WORK_NS])
	}
	return st, nil
}

// ProgramStats returns the BPF programs' total run time and runs, the
// off-CPU program's included when it is loaded, counted while kernel BPF
// statistics are enabled (see EnableStats), and the time of the
// listings' task works, which those statistics miss, always counted.
func (s *Sampler) ProgramStats() (runTime time.Duration, runs uint64, err error) {
	progs := []*ebpf.Program{s.objs.Sample, s.objs.OnExec, s.objs.OnFork, s.objs.OnExit}
	if s.objs.OnSwitch != nil { // with Options.OffCPU
		progs = append(progs, s.objs.OnSwitch)
	}
	for _, p := range progs {
		st, err := p.Stats()
		if err != nil {
			return 0, 0, fmt.Errorf("read program stats: %w", err)
		}
		runTime += st.Runtime
		runs += st.RunCount
	}
	// One counter, not Stats' every one: this is read once a window.
	perCPU, err := s.stat(uint32(profileSamplerStatSTAT_TASK_WORK_NS))
	if err != nil {
		return 0, 0, err
	}
	for _, ns := range perCPU {
		runTime += time.Duration(ns)
	}
	return runTime, runs, nil
}

// stat returns counter i of the BPF program's stats, a value a CPU.
func (s *Sampler) stat(i uint32) ([]uint64, error) {
	var perCPU []uint64
	if err := s.objs.Stats.Lookup(i, &perCPU); err != nil {
		return nil, fmt.Errorf("read stats: %w", err)
	}
	return perCPU, nil
}

// EnableStats turns on the kernel's BPF run time accounting until the
// returned closer is closed (it costs every BPF program ~20 ns a run).
func EnableStats() (io.Closer, error) {
	c, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
	if errors.Is(err, unix.EPERM) {
		return nil, fmt.Errorf("enable BPF statistics: %w (needs CAP_SYS_ADMIN)", err)
	}
	if err != nil {
		return nil, fmt.Errorf("enable BPF statistics: %w", err)
	}
	return c, nil
}

func onlineCPUs() ([]int, error) {
	b, err := os.ReadFile("/sys/devices/system/cpu/online")
	if err != nil {
		return nil, fmt.Errorf("list online cpus: %w", err)
	}
	return parseCPUList(strings.TrimSpace(string(b)))
}

// parseCPUList parses the kernel's CPU list format, e.g. "0-3,6".
func parseCPUList(s string) ([]int, error) {
	var cpus []int
	for _, part := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil {
			return nil, fmt.Errorf("parse cpu list %q: %w", s, err)
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil || b < a {
				return nil, fmt.Errorf("parse cpu list %q: bad range %q", s, part)
			}
		}
		for c := a; c <= b; c++ {
			cpus = append(cpus, c)
		}
	}
	return cpus, nil
}

// classify maps permission and support failures to sentinel errors.
func classify(err error) error {
	var verifier *ebpf.VerifierError
	switch {
	case errors.As(err, &verifier):
		return err // the verifier refused the program: a flint bug, not privileges
	case errors.Is(err, unix.EPERM), errors.Is(err, unix.EACCES):
		return fmt.Errorf("%w: %v", ErrNoPermission, err)
	case errors.Is(err, ebpf.ErrNotSupported):
		return fmt.Errorf("%w: %v", ErrNotSupported, err)
	}
	return err
}

// putRaw is m.Put of key and value, which must have the map's sizes, as a
// raw system call, for a process being learned: one the runtime sees wakes
// its sysmon (internal/proc/raw.go says why that matters). A hash map
// update waits for nothing.
func putRaw(m *ebpf.Map, key, value unsafe.Pointer) error {
	// union bpf_attr for BPF_MAP_*_ELEM; pointers kept as pointers, for
	// the garbage collector and stack moves.
	attr := struct {
		fd         uint32
		_          uint32
		key, value unsafe.Pointer
		flags      uint64
	}{fd: uint32(m.FD()), key: key, value: value}
	_, _, errno := unix.RawSyscall(unix.SYS_BPF, unix.BPF_MAP_UPDATE_ELEM, uintptr(unsafe.Pointer(&attr)), unsafe.Sizeof(attr))
	if errno != 0 {
		return fmt.Errorf("update %v: %w", m, errno)
	}
	return nil
}
