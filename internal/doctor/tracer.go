package doctor

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/rlimit"
	"golang.org/x/sys/unix"

	"github.com/flint-dev/flint/internal/collect"
	"github.com/flint-dev/flint/internal/proc"
	"github.com/flint-dev/flint/internal/profile"
	"github.com/flint-dev/flint/internal/sampler"
	"github.com/flint-dev/flint/internal/symbol"
	"github.com/flint-dev/flint/internal/tracefs"
)

// DoctorSyscalls are the syscalls flint doctor traces: the poll family
// (busy-poll), the sleeps (sleep-poll) and the writes that can go to stdout and stderr
// (hot-debug-output). Those missing on an architecture or kernel are
// skipped (epoll_pwait2 needs Linux 5.11; arm64 has no epoll_wait, poll or
// select).
var DoctorSyscalls = []string{
	"epoll_wait", "epoll_pwait", "epoll_pwait2", "poll", "ppoll", "select", "pselect6",
	"nanosleep", "clock_nanosleep", "write", "writev",
}

// TracerOptions configure a Tracer.
type TracerOptions struct {
	// PID restricts tracing to one process; 0 traces every process.
	PID int
	// Every traces every syscall through raw_syscalls, which slows every
	// syscall of every process while attached; it needs PID.
	Every bool
	// Syscalls are the syscalls traced through their own tracepoints when
	// Every is false; nil means DoctorSyscalls, and then only the writes
	// and writevs to stdout and stderr are counted.
	Syscalls []string
	// StackInterval is the least time between two user stacks of one
	// syscall taken on one CPU; zero means 100 µs. Each stack costs about a
	// microsecond.
	StackInterval time.Duration
	// MaxKeys bounds the distinct (thread, syscall, class) counters and the
	// distinct stacks held in the kernel; zero means 16384 (~5 MiB).
	MaxKeys int
	// Symbolizer names the stacks; nil means the tracer's own.
	Symbolizer *symbol.Symbolizer
}

// Tracer counts and times syscalls with BPF programs on their tracepoints.
type Tracer struct {
	opts    TracerOptions
	objs    syscallsObjects
	links   []link.Link
	start   time.Time
	stopped time.Time
	traced  []string
	skipped []string

	tracefs string
	sym     *symbol.Symbolizer
	ownSym  *symbol.Symbolizer // closed with the tracer; nil when shared
	node    string
	coll    *collect.Collector // replaced by Restart: guarded by mu

	mu      sync.Mutex
	known   map[int]bool   // processes snapshotted for naming
	comms   map[int]string // their names
	threads map[int]string

	// learning ends the learn loop of the current run; nil when stopped.
	learning chan struct{}
	learner  sync.WaitGroup
}

// StartTracer mounts tracefs if needed, loads the tracer and attaches it.
func StartTracer(o TracerOptions) (*Tracer, error) {
	if o.Every && o.PID == 0 {
		return nil, errors.New("tracing every syscall needs a PID: it slows every syscall on the node")
	}
	if o.StackInterval == 0 {
		o.StackInterval = 100 * time.Microsecond
	}
	if o.MaxKeys == 0 {
		o.MaxKeys = 16384
	}
	doctorSet := o.Syscalls == nil
	if doctorSet {
		o.Syscalls = DoctorSyscalls
	}
	dir, err := tracefs.Mount()
	if err != nil {
		return nil, err
	}
	if !tracefs.HasSyscallEvents(dir) {
		return nil, fmt.Errorf("%s/events/syscalls missing: the kernel has no syscall tracepoints (CONFIG_FTRACE_SYSCALLS)", dir)
	}
	if err := rlimit.RemoveMemlock(); err != nil {
		return nil, classify(fmt.Errorf("remove memlock limit: %w", err))
	}
	spec, err := loadSyscalls()
	if err != nil {
		return nil, fmt.Errorf("load BPF object: %w", err)
	}
	consts := map[string]any{
		"target_tgid":       uint32(o.PID),
		"self_tgid":         uint32(os.Getpid()),
		"stdio_writes_only": doctorSet && !o.Every,
		"stack_interval_ns": uint64(o.StackInterval),
	}
	for _, name := range []string{"epoll_wait", "epoll_pwait", "epoll_pwait2", "poll", "ppoll", "select", "pselect6", "write", "writev", "clock_nanosleep"} {
		nr := int32(-1)
		if n, ok := syscallNumber(name); ok {
			nr = int32(n)
		}
		consts["nr_"+name] = nr
	}
	for name, v := range consts {
		if err := spec.Variables[name].Set(v); err != nil {
			return nil, fmt.Errorf("set %s: %w", name, err)
		}
	}
	spec.Maps["calls"].MaxEntries = uint32(o.MaxKeys)
	spec.Maps["stack_counts"].MaxEntries = uint32(o.MaxKeys)
	spec.Maps["stacks"].MaxEntries = uint32(max(o.MaxKeys/4, 256))

	t := &Tracer{opts: o, sym: o.Symbolizer, known: map[int]bool{}, comms: map[int]string{}, threads: map[int]string{}}
	if t.sym == nil {
		t.ownSym = symbol.New()
		t.sym = t.ownSym
	}
	t.node, _ = os.Hostname()
	t.coll = collect.New(t.sym, t.node)
	if err := spec.LoadAndAssign(&t.objs, nil); err != nil {
		if t.ownSym != nil {
			t.ownSym.Close()
		}
		return nil, classify(fmt.Errorf("load BPF program: %w", err))
	}
	t.tracefs = dir
	if err := t.begin(); err != nil {
		t.Close()
		return nil, err
	}
	return t, nil
}

// begin attaches the programs and starts counting.
func (t *Tracer) begin() error {
	var now unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &now); err != nil {
		return fmt.Errorf("read the clock: %w", err)
	}
	if err := t.objs.TracedSince.Set(uint64(now.Nano())); err != nil {
		return fmt.Errorf("start tracing: %w", err)
	}
	t.traced, t.skipped = nil, nil
	if err := t.attach(t.tracefs); err != nil {
		return err
	}
	if err := t.objs.Tracing.Set(true); err != nil {
		return fmt.Errorf("start tracing: %w", err)
	}
	t.start, t.stopped = time.Now(), time.Time{}
	t.learning = make(chan struct{})
	t.learner.Add(1)
	go t.learnLoop(t.learning)
	return nil
}

// Restart forgets what the tracer counted and traces again, from now: an
// agent examining a window a minute keeps one tracer loaded rather than
// loading it anew (which costs tens of milliseconds of CPU) each time.
func (t *Tracer) Restart() error {
	t.Stop()
	for _, m := range []*ebpf.Map{t.objs.Calls, t.objs.StackCounts, t.objs.Stacks} {
		if err := clearMap(m); err != nil {
			return err
		}
	}
	zeros := make([]uint64, ebpf.MustPossibleCPU())
	for i := range uint32(syscallsSyscallTracerStatTRACER_STAT_MAX) {
		if err := t.objs.Stats.Put(i, zeros); err != nil {
			return fmt.Errorf("reset tracer stats: %w", err)
		}
	}
	t.mu.Lock()
	t.known, t.comms, t.threads = map[int]bool{}, map[int]string{}, map[int]string{}
	t.coll = collect.New(t.sym, t.node)
	t.mu.Unlock()
	return t.begin()
}

func (t *Tracer) collector() *collect.Collector {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.coll
}

// clearMap deletes every entry of a hash map.
func clearMap(m *ebpf.Map) error {
	var keys [][]byte
	key := make([]byte, m.KeySize())
	var prev any // nil: from the first key
	for {
		next := make([]byte, m.KeySize())
		if err := m.NextKey(prev, &next); err != nil {
			if errors.Is(err, ebpf.ErrKeyNotExist) {
				break
			}
			return fmt.Errorf("clear %s: %w", m, err)
		}
		keys = append(keys, next)
		copy(key, next)
		prev = key
	}
	for _, k := range keys {
		if err := m.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("clear %s: %w", m, err)
		}
	}
	return nil
}

func (t *Tracer) attach(dir string) error {
	pairs := [][2]string{}
	if t.opts.Every {
		pairs = append(pairs, [2]string{"raw_syscalls", "sys_enter"})
		t.traced = []string{"all"}
	} else {
		for _, name := range t.opts.Syscalls {
			if !tracefs.HasEvent(dir, "syscalls", "sys_enter_"+name) {
				t.skipped = append(t.skipped, name)
				continue
			}
			pairs = append(pairs, [2]string{"syscalls", "sys_enter_" + name})
			t.traced = append(t.traced, name)
		}
		if len(pairs) == 0 {
			return fmt.Errorf("no tracepoints for %s under %s/events/syscalls", strings.Join(t.opts.Syscalls, ", "), dir)
		}
	}
	// Exits first, so that no call is entered without its exit being seen.
	for _, enter := range [2]bool{false, true} {
		for _, p := range pairs {
			group, name, prog := p[0], p[1], t.objs.SysEnter
			if !enter {
				name, prog = strings.Replace(name, "sys_enter", "sys_exit", 1), t.objs.SysExit
			}
			l, err := link.Tracepoint(group, name, prog, nil)
			if err != nil {
				return classify(fmt.Errorf("attach %s/%s: %w", group, name, err))
			}
			t.links = append(t.links, l)
		}
	}
	return nil
}

// learnLoop snapshots each process that made a traced call, once a second
// while tracing, so that its stacks can be named even if it exits before
// the end.
func (t *Tracer) learnLoop(done <-chan struct{}) {
	defer t.learner.Done()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-done:
			return
		case <-tick.C:
			t.learn()
		}
	}
}

func (t *Tracer) learn() {
	var key syscallsCallKey
	var val syscallsCallStats
	it := t.objs.Calls.Iterate()
	for it.Next(&key, &val) {
		t.learnProcess(int(key.Pid), int(key.Tid))
	}
}

func (t *Tracer) learnProcess(pid, tid int) {
	t.mu.Lock()
	_, knownThread := t.threads[tid]
	seen := t.known[pid]
	t.known[pid] = true
	t.mu.Unlock()
	if !seen {
		t.collector().NewProc(uint32(pid), 0)
		comm := readComm(fmt.Sprintf("%s/%d/comm", proc.Root, pid))
		t.mu.Lock()
		t.comms[pid] = comm
		t.mu.Unlock()
	}
	if !knownThread {
		name := readComm(fmt.Sprintf("%s/%d/task/%d/comm", proc.Root, pid, tid))
		t.mu.Lock()
		t.threads[tid] = name
		t.mu.Unlock()
	}
}

// RunTime is how long the tracer's programs have run, counted while kernel
// BPF statistics are enabled (sampler.EnableStats).
func (t *Tracer) RunTime() (time.Duration, error) {
	var total time.Duration
	for _, p := range []*ebpf.Program{t.objs.SysEnter, t.objs.SysExit} {
		st, err := p.Stats()
		if err != nil {
			return 0, fmt.Errorf("read tracer program stats: %w", err)
		}
		total += st.Runtime
	}
	return total, nil
}

// Stop detaches the programs: tracing ends, counts stay readable.
// Safe to call twice.
func (t *Tracer) Stop() {
	if t.learning != nil {
		close(t.learning)
		t.learner.Wait()
		t.learning = nil
	}
	if t.stopped.IsZero() && !t.start.IsZero() {
		t.objs.Tracing.Set(false)
		t.stopped = time.Now()
	}
	for _, l := range t.links {
		l.Close()
	}
	t.links = nil
}

// Close stops tracing and releases everything; safe to call twice.
func (t *Tracer) Close() error {
	t.Stop()
	if t.ownSym != nil {
		t.ownSym.Close()
		t.ownSym = nil
	}
	return t.objs.Close()
}

// Read stops tracing if it still runs and returns what was counted, with
// stacks named.
func (t *Tracer) Read() (*Syscalls, error) {
	t.Stop()
	out := &Syscalls{Duration: t.stopped.Sub(t.start), Every: t.opts.Every, Traced: t.traced, Skipped: t.skipped}
	calls := map[syscallsCallKey]*Call{}
	var key syscallsCallKey
	var val syscallsCallStats
	it := t.objs.Calls.Iterate()
	for it.Next(&key, &val) {
		t.learnProcess(int(key.Pid), int(key.Tid))
		c := &Call{
			PID: int(key.Pid), TID: int(key.Tid), Nr: key.Nr, Syscall: syscallName(key.Nr),
			ZeroTimeout: key.Flags&callZeroTimeout != 0,
			Stdout:      key.Flags&callStdout != 0,
			Stderr:      key.Flags&callStderr != 0,
			Deadline:    key.Flags&callDeadline != 0,
			Count:       val.Calls, Errors: val.Errors, Empty: val.Empty, Bytes: val.Bytes,
			Total:     time.Duration(val.TotalNs),
			LastErrno: unix.Errno(val.LastError),
			Latency:   val.Latency,
		}
		t.mu.Lock()
		c.Thread = t.threads[c.TID]
		t.mu.Unlock()
		calls[key] = c
		out.Calls = append(out.Calls, c)
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("read syscall counts: %w", err)
	}
	if err := t.readStacks(calls); err != nil {
		return nil, err
	}
	for _, c := range out.Calls {
		slices.SortFunc(c.Stacks, func(a, b CallStack) int { return int(b.Count) - int(a.Count) })
	}
	slices.SortFunc(out.Calls, func(a, b *Call) int {
		if a.PID != b.PID {
			return a.PID - b.PID
		}
		if a.TID != b.TID {
			return a.TID - b.TID
		}
		return strings.Compare(a.Syscall, b.Syscall)
	})
	st, err := t.stats()
	if err != nil {
		return nil, err
	}
	out.Warnings = st
	t.mu.Lock()
	out.Comms = maps.Clone(t.comms)
	t.mu.Unlock()
	return out, nil
}

func (t *Tracer) readStacks(calls map[syscallsCallKey]*Call) error {
	type stackRef struct {
		call   *Call
		result CallResult
		count  uint64
		hash   uint64
	}
	var refs []stackRef
	var key syscallsCallStackKey
	var n uint64
	it := t.objs.StackCounts.Iterate()
	for it.Next(&key, &n) {
		argFlags := key.Flags & (callZeroTimeout | callStdout | callStderr | callDeadline)
		c := calls[syscallsCallKey{Pid: key.Pid, Tid: key.Tid, Nr: key.Nr, Flags: argFlags}]
		if c == nil {
			continue // its counter was lost (map full): counted in the warnings
		}
		result := ResultOK
		switch {
		case key.Flags&callFailed != 0:
			result = ResultFailed
		case key.Flags&callEmpty != 0:
			result = ResultEmpty
		}
		refs = append(refs, stackRef{call: c, result: result, count: n, hash: key.Stack})
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("read syscall stacks: %w", err)
	}
	// Name each distinct (process, stack) once.
	type named struct {
		pid  int
		hash uint64
	}
	names := map[named][]Frame{}
	for _, r := range refs {
		k := named{r.call.PID, r.hash}
		frames, ok := names[k]
		if !ok {
			var st syscallsUserStack
			if err := t.objs.Stacks.Lookup(r.hash, &st); err == nil {
				frames = t.name(r.call.PID, r.call.TID, st.Ips[:min(int(st.Len), len(st.Ips))])
			}
			names[k] = frames
		}
		if frames == nil {
			continue
		}
		r.call.Stacks = append(r.call.Stacks, CallStack{Count: r.count, Result: r.result, Frames: frames})
	}
	return nil
}

// name names a user stack of pid with the collector, as flint record does.
func (t *Tracer) name(pid, tid int, ips []uint64) []Frame {
	s := sampler.Sample{PID: uint32(pid), TID: uint32(tid), User: ips, Count: 1}
	p := t.collector().Profile([]sampler.Sample{s}, collect.Options{})
	if len(p.Samples) == 0 {
		return nil
	}
	return framesOf(p.Samples[0].Stack)
}

// stats turns the BPF program's loss counters into warnings.
func (t *Tracer) stats() ([]string, error) {
	var sum [syscallsSyscallTracerStatTRACER_STAT_MAX]uint64
	for i := range uint32(syscallsSyscallTracerStatTRACER_STAT_MAX) {
		var perCPU []uint64
		if err := t.objs.Stats.Lookup(i, &perCPU); err != nil {
			return nil, fmt.Errorf("read tracer stats: %w", err)
		}
		for _, v := range perCPU {
			sum[i] += v
		}
	}
	var w []string
	add := func(s syscallsSyscallTracerStat, what string) {
		if n := sum[s]; n > 0 {
			w = append(w, fmt.Sprintf("%d %s", n, what))
		}
	}
	add(syscallsSyscallTracerStatTRACER_STATS_FULL, "syscalls lost: counter map full")
	add(syscallsSyscallTracerStatTRACER_INFLIGHT_FULL, "syscalls lost: in-flight map full")
	add(syscallsSyscallTracerStatTRACER_STACKS_FULL, "syscall stacks lost: stack map full")
	add(syscallsSyscallTracerStatTRACER_STACK_COUNTS_FULL, "syscall stacks lost: stack count map full")
	add(syscallsSyscallTracerStatTRACER_STACK_ERR, "syscall user stacks unreadable")
	return w, nil
}

// framesOf flattens a profile stack into frames, leaf first, inlined
// callees before their callers.
func framesOf(stack []*profile.Location) []Frame {
	var out []Frame
	for i, loc := range stack {
		module, kernel := "", false
		var off uint64
		if m := loc.Mapping; m != nil {
			module, kernel = m.File, m.Kernel
			if addr := loc.Address; !kernel && addr >= m.Start {
				if i > 0 && addr > m.Start {
					addr-- // a return address: the call is before it
				}
				off = addr - m.Start + m.Offset
			}
		}
		for _, f := range loc.Frames {
			out = append(out, Frame{Function: f.Function, File: f.File, Line: f.Line, Module: module, Kernel: kernel, fileOffset: off})
		}
	}
	return out
}

func readComm(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// Call flags, from bpf/syscalls.h.
const (
	callZeroTimeout = uint32(syscallsCallFlagCALL_ZERO_TIMEOUT)
	callDeadline    = uint32(syscallsCallFlagCALL_DEADLINE)
	callStdout      = uint32(syscallsCallFlagCALL_STDOUT)
	callStderr      = uint32(syscallsCallFlagCALL_STDERR)
	callFailed      = uint32(syscallsCallFlagCALL_FAILED)
	callEmpty       = uint32(syscallsCallFlagCALL_EMPTY)
)

func syscallName(nr uint32) string {
	if n, ok := syscallNames[nr]; ok {
		return n
	}
	return "syscall_" + strconv.Itoa(int(nr))
}

func syscallNumber(name string) (uint32, bool) {
	for nr, n := range syscallNames {
		if n == name {
			return nr, true
		}
	}
	return 0, false
}

// classify maps permission and support failures to the sampler's sentinel
// errors, which say what to do.
func classify(err error) error {
	switch {
	case errors.Is(err, unix.EPERM), errors.Is(err, unix.EACCES):
		return fmt.Errorf("%w: %v", sampler.ErrNoPermission, err)
	case errors.Is(err, ebpf.ErrNotSupported):
		return fmt.Errorf("%w: %v", sampler.ErrNotSupported, err)
	}
	return err
}
