package trace

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/rlimit"
	"golang.org/x/sys/unix"

	"github.com/flint-dev/flint/internal/proc"
)

// Cookie flags, as bpf/trace.h defines them.
const (
	cookieGo          = 1 << 32
	cookieExeFilter   = 1 << 33
	cookieNoLatency   = 1 << 34
	cookieCalibration = 1 << 35
)

// ErrProcessExited reports that the traced process (-p) exited.
var ErrProcessExited = errors.New("process exited")

// Options configure a trace.
type Options struct {
	Target
	// Functions are names or globs (see Resolve).
	Functions []string
	// Latency times every call: return probes are attached too.
	Latency bool
	// Stacks counts calls (and, with Latency, their time) per calling user
	// stack, walked by frame pointers: FunctionResult.Stacks. A walk costs
	// about a microsecond a call more, which calibration includes.
	Stacks bool
	// MaxOverhead is the probe time the trace may cost, as a share of one
	// CPU summed over the traced processes (0.02: 2%); functions that cost
	// more are detached. Zero or less: no limit.
	MaxOverhead float64
	// Duration ends the trace; zero runs until the context is done or the
	// traced process (-p) exits.
	Duration time.Duration
	// Progress, if set, is called about every second from Run.
	Progress func(Progress)
	// OnDetach, if set, is called from Run when the overhead guard detaches
	// a function.
	OnDetach func(Detach)
}

// Progress is the state of a running trace.
type Progress struct {
	Elapsed time.Duration
	// Functions are in the order they were resolved; rates are over the
	// last interval.
	Functions []FunctionRate
	// ProbeCPU is the share of one CPU all probes took in the interval.
	ProbeCPU float64
}

// FunctionRate is one function's call rate over an interval.
type FunctionRate struct {
	Name     string
	Calls    uint64  // so far
	Rate     float64 // calls per second
	Detached bool
}

// Detach tells why the overhead guard detached a function.
type Detach struct {
	Function string        // Function.Display()
	After    time.Duration // since the probes were attached
	Rate     float64       // calls per second, over the interval that decided
	Cost     time.Duration // per call
	ProbeCPU float64       // Rate × Cost: the share of one CPU it took
	Budget   float64       // the --max-overhead it exceeded
}

// Tracer counts and times calls to functions with uprobes.
type Tracer struct {
	opts  Options
	funcs []Function
	objs  traceObjects
	cost  Cost
	ino   uint64 // --exe: the executable's inode

	links    [][]link.Link // per function index
	calib    []link.Link   // calibration probes, disabled after use
	closing  sync.WaitGroup
	mu       sync.Mutex // guards execs
	execs    map[string]*link.Executable
	attached time.Time
	detached []*Detach // per function index, when the guard detached it
	stopped  time.Time

	// The watcher of a -p process: exited is closed when it exits, after
	// exitTimes is read (from the zombie, if its parent has not reaped it).
	pidfd     int
	exited    chan struct{}
	stopOnce  sync.Once
	stopWait  chan struct{}
	exitTimes *procTimes
	exitTime  float64

	last    time.Time
	lastFns []uint64 // calls per function at last
	procs   map[uint32]*procState
}

type procState struct {
	comm     string
	base     procTimes // CPU and start at the start of its trace
	baseTime float64   // boot seconds at base
	last     procTimes // the latest reading
	lastTime float64
	probe    float64 // probe CPU seconds counted up to the latest reading
	exited   bool
}

// Start resolves the functions, loads the BPF program, measures what a
// probe costs here, and attaches the probes. The caller must Close the
// Tracer.
func Start(opts Options) (*Tracer, error) {
	if (opts.PID == 0) == (opts.Exe == "") {
		return nil, errors.New("trace one process (PID) or one executable (Exe)")
	}
	if len(opts.Functions) == 0 {
		return nil, errors.New("no function to trace")
	}
	if err := checkUprobes(); err != nil {
		return nil, err
	}
	t := &Tracer{opts: opts, execs: map[string]*link.Executable{}, pidfd: -1,
		procs: map[uint32]*procState{}}
	if opts.PID != 0 {
		if err := t.watch(opts.PID); err != nil {
			return nil, err
		}
	}
	fns, err := Resolve(opts.Target, opts.Functions)
	if err != nil {
		t.Close()
		return nil, err
	}
	t.funcs = fns
	t.links = make([][]link.Link, len(fns))
	t.detached = make([]*Detach, len(fns))
	if opts.Exe != "" {
		fi, err := os.Stat(opts.Exe)
		if err != nil {
			t.Close()
			return nil, err
		}
		t.ino = inodeOf(fi)
	}
	if err := t.load(); err != nil {
		t.Close()
		return nil, err
	}
	if t.cost, err = t.calibrate(); err != nil {
		t.Close()
		return nil, fmt.Errorf("measure probe cost: %w", err)
	}
	t.baseline()
	if err := t.attach(); err != nil {
		t.Close()
		return nil, err
	}
	return t, nil
}

// Functions returns the traced functions, in the order results list them.
func (t *Tracer) Functions() []Function { return t.funcs }

// Cost returns what a probe costs on this machine, as measured at Start.
func (t *Tracer) Cost() Cost { return t.cost }

// Probes is the number of uprobes and uretprobes attached at Start.
func (t *Tracer) Probes() int {
	n := 0
	for _, ls := range t.links {
		n += len(ls)
	}
	return n
}

func (t *Tracer) load() error {
	if err := rlimit.RemoveMemlock(); err != nil {
		return classify(fmt.Errorf("remove memlock limit: %w", err))
	}
	spec, err := loadTrace()
	if err != nil {
		return fmt.Errorf("load BPF object: %w", err)
	}
	consts := map[string]any{
		"target_tgid": uint32(t.opts.PID),
		"exe_ino":     t.ino,
		"latency":     t.opts.Latency,
		"stacks":      t.opts.Stacks,
	}
	for name, v := range consts {
		if err := spec.Variables[name].Set(v); err != nil {
			return fmt.Errorf("set %s: %w", name, err)
		}
	}
	// Id 0 is the calibration probe's; functions are 1..n.
	spec.Maps["enabled"].MaxEntries = uint32(len(t.funcs) + 1)
	if t.opts.Latency {
		spec.Maps["hists"].MaxEntries = uint32(len(t.funcs) + 1)
	}
	if t.opts.Stacks {
		spec.Maps["call_stacks"].MaxEntries = maxStacks
		spec.Maps["stack_counts"].MaxEntries = 4 * maxStacks
	}
	if err := spec.LoadAndAssign(&t.objs, nil); err != nil {
		return classify(fmt.Errorf("load BPF program: %w", err))
	}
	return nil
}

// probe is one uprobe or uretprobe to attach.
type probe struct {
	fn     int // index in funcs
	prog   *ebpf.Program
	off    uint64
	ret    bool // uretprobe
	cookie uint64
}

// attachWorkers bounds the probes attached at once: registering a uprobe
// takes ~10 ms here, mostly waiting, so a glob matching hundreds of
// functions attaches in parallel.
const attachWorkers = 16

// attach enables every function and puts its probes on: all return and
// stack-growth probes first, then the entries, so no entry is counted
// without its return being watched.
func (t *Tracer) attach() error {
	var returns, entries []probe
	for i := range t.funcs {
		r, e := t.probes(i)
		returns = append(returns, r...)
		entries = append(entries, e...)
		if err := t.setEnabled(i+1, true); err != nil {
			return err
		}
	}
	for _, ps := range [][]probe{returns, entries} {
		if err := t.attachAll(ps); err != nil {
			return err
		}
	}
	t.attached = time.Now()
	t.last = t.attached
	t.lastFns = make([]uint64, len(t.funcs))
	return nil
}

// probes lists function i's return and stack-growth probes, and its entry
// probes.
func (t *Tracer) probes(i int) (returns, entries []probe) {
	f := &t.funcs[i]
	cookie := uint64(i + 1)
	if f.Lang == Go {
		cookie |= cookieGo
	}
	if f.Library && t.opts.Exe != "" {
		cookie |= cookieExeFilter
	}
	timed := t.opts.Latency && f.NoLatency == ""
	if !timed {
		cookie |= cookieNoLatency
	}
	if timed && f.Lang == Go {
		for _, off := range f.Returns {
			returns = append(returns, probe{i, t.objs.OnReturn, off, false, cookie})
		}
	}
	if timed && f.Lang == C {
		for _, off := range f.Entries {
			returns = append(returns, probe{i, t.objs.OnReturn, off, true, cookie})
		}
	}
	for _, off := range f.StackGrowth {
		returns = append(returns, probe{i, t.objs.OnStackGrowth, off, false, cookie})
	}
	for _, off := range f.Entries {
		entries = append(entries, probe{i, t.objs.OnEntry, off, false, cookie})
	}
	return returns, entries
}

func (t *Tracer) attachAll(ps []probe) error {
	links := make([]link.Link, len(ps))
	errs := make([]error, len(ps))
	work := make(chan int)
	var wg sync.WaitGroup
	for range min(attachWorkers, len(ps)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range work {
				links[j], errs[j] = t.attachProbe(&ps[j])
			}
		}()
	}
	for j := range ps {
		work <- j
	}
	close(work)
	wg.Wait()
	for j, l := range links {
		if l != nil {
			t.links[ps[j].fn] = append(t.links[ps[j].fn], l)
		}
	}
	return errors.Join(errs...)
}

func (t *Tracer) attachProbe(p *probe) (link.Link, error) {
	f := &t.funcs[p.fn]
	t.mu.Lock()
	ex, err := t.executable(f.path)
	t.mu.Unlock()
	if err != nil {
		return nil, err
	}
	o := &link.UprobeOptions{Address: p.off, PID: t.opts.PID, Cookie: p.cookie}
	var l link.Link
	if p.ret {
		l, err = ex.Uretprobe("", p.prog, o)
	} else {
		l, err = ex.Uprobe("", p.prog, o)
	}
	if err != nil {
		return nil, t.attachError(fmt.Errorf("attach %s at %s+%#x: %w", f.Display(), f.Object, p.off, err))
	}
	return l, nil
}

// setEnabled turns counting of function id on or off in the BPF program.
func (t *Tracer) setEnabled(id int, on bool) error {
	v := uint32(0)
	if on {
		v = 1
	}
	if err := t.objs.Enabled.Update(uint32(id), v, ebpf.UpdateAny); err != nil {
		return fmt.Errorf("enable function %d: %w", id, err)
	}
	return nil
}

func (t *Tracer) executable(path string) (*link.Executable, error) {
	if ex, ok := t.execs[path]; ok {
		return ex, nil
	}
	ex, err := link.OpenExecutable(path)
	if err != nil {
		return nil, t.attachError(fmt.Errorf("open %s: %w", path, err))
	}
	t.execs[path] = ex
	return ex, nil
}

// attachError names the likely cause of a failed attach: privileges, or a
// -p process that exited meanwhile (its /proc paths are gone).
func (t *Tracer) attachError(err error) error {
	if t.opts.PID != 0 && errors.Is(err, fs.ErrNotExist) {
		select {
		case <-t.exited:
			return fmt.Errorf("pid %d: %w", t.opts.PID, ErrProcessExited)
		default:
		}
		if _, serr := os.Stat(fmt.Sprintf("%s/%d", proc.Root, t.opts.PID)); serr != nil {
			return fmt.Errorf("pid %d: %w", t.opts.PID, ErrProcessExited)
		}
	}
	return classify(err)
}

// detach stops counting function i at once and closes its probes in the
// background (each close waits for an RCU grace period); Close waits for
// them.
func (t *Tracer) detach(i int) {
	t.setEnabled(i+1, false)
	t.closeLinks(t.links[i])
	t.links[i] = nil
}

func (t *Tracer) closeLinks(ls []link.Link) {
	for _, l := range ls {
		t.closing.Add(1)
		go func() {
			defer t.closing.Done()
			l.Close()
		}()
	}
}

// watch opens a pidfd on pid, which becomes readable when it exits.
func (t *Tracer) watch(pid int) error {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		if errors.Is(err, unix.ESRCH) {
			return fmt.Errorf("pid %d: %w", pid, proc.ErrNoProcess)
		}
		return classify(fmt.Errorf("watch pid %d: %w", pid, err))
	}
	t.pidfd = fd
	t.exited = make(chan struct{})
	t.stopWait = make(chan struct{})
	go func() {
		defer close(t.exited)
		pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		for {
			select {
			case <-t.stopWait:
				return
			default:
			}
			n, err := unix.Poll(pfd, 100)
			if err != nil && !errors.Is(err, unix.EINTR) {
				return
			}
			if n > 0 {
				if pt, err := readTimes(pid); err == nil {
					t.exitTimes, t.exitTime = &pt, bootSeconds()
				}
				return
			}
		}
	}()
	return nil
}

// baseline records the CPU time of the processes already running the
// target, so their CPU use while traced can be told.
func (t *Tracer) baseline() {
	var pids []int
	if t.opts.PID != 0 {
		pids = []int{t.opts.PID}
	} else {
		pids = processesRunning(t.ino)
	}
	now := bootSeconds()
	for _, pid := range pids {
		if pt, err := readTimes(pid); err == nil {
			t.procs[uint32(pid)] = &procState{comm: readComm(pid), base: pt, baseTime: now, last: pt, lastTime: now}
		}
	}
}

// Run traces until the duration passes, ctx is done or the traced process
// exits, then detaches every probe and returns what was counted. It checks
// the overhead budget 200 ms after attaching and then every second. When
// the process exits, the result has Exited set and err is nil.
func (t *Tracer) Run(ctx context.Context) (*Result, error) {
	var deadline <-chan time.Time
	if t.opts.Duration > 0 {
		timer := time.NewTimer(t.opts.Duration - time.Since(t.attached))
		defer timer.Stop()
		deadline = timer.C
	}
	first := time.NewTimer(200 * time.Millisecond)
	defer first.Stop()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	exited := false
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case <-deadline:
			break loop
		case <-t.exited:
			exited = true
			break loop
		case <-first.C:
			if err := t.poll(false); err != nil {
				return nil, err
			}
		case <-tick.C:
			if err := t.poll(true); err != nil {
				return nil, err
			}
		}
	}
	t.stopped = time.Now()
	for i := range t.funcs {
		if t.links[i] != nil {
			t.detach(i)
		}
	}
	calls, _, err := t.readCounts()
	if err != nil {
		return nil, err
	}
	t.refreshProcs(calls)
	if p := t.procs[uint32(t.opts.PID)]; exited && p != nil && t.exitTimes != nil && t.exitTimes.start == p.base.start {
		// Every hit of the dead process is counted: pair them with its
		// CPU time at exit.
		p.last, p.lastTime, p.probe = *t.exitTimes, t.exitTime, t.probeTime(calls, uint32(t.opts.PID))
	}
	res, err := t.result()
	if err != nil {
		return nil, err
	}
	res.Exited = exited
	return res, nil
}

// poll reads the counts, enforces the budget and reports progress.
func (t *Tracer) poll(progress bool) error {
	now := time.Now()
	calls, _, err := t.readCounts()
	if err != nil {
		return err
	}
	dt := now.Sub(t.last).Seconds()
	fnCalls := make([]uint64, len(t.funcs))
	for k, c := range calls {
		if k.Func > 0 && int(k.Func) <= len(t.funcs) {
			fnCalls[k.Func-1] += c.Calls
		}
	}
	load := map[int]float64{}
	var total float64
	rates := make([]FunctionRate, len(t.funcs))
	for i := range t.funcs {
		rate := 0.0
		if dt > 0 {
			rate = float64(fnCalls[i]-t.lastFns[i]) / dt
		}
		rates[i] = FunctionRate{Name: t.funcs[i].Display(), Calls: fnCalls[i], Rate: rate, Detached: t.detached[i] != nil}
		if t.links[i] != nil {
			l := rate * t.cost.PerCall(&t.funcs[i], t.opts.Latency).Seconds()
			load[i] = l
			total += l
		}
	}
	for _, i := range overBudget(load, t.opts.MaxOverhead) {
		t.detach(i)
		d := &Detach{Function: t.funcs[i].Display(), After: now.Sub(t.attached), Rate: rates[i].Rate,
			Cost: t.cost.PerCall(&t.funcs[i], t.opts.Latency), ProbeCPU: load[i], Budget: t.opts.MaxOverhead}
		t.detached[i] = d
		rates[i].Detached = true
		if t.opts.OnDetach != nil {
			t.opts.OnDetach(*d)
		}
	}
	t.last, t.lastFns = now, fnCalls
	t.refreshProcs(calls)
	if progress && t.opts.Progress != nil {
		t.opts.Progress(Progress{Elapsed: now.Sub(t.attached), Functions: rates, ProbeCPU: total})
	}
	return nil
}

// refreshProcs reads the CPU time of every process that hit a probe, and
// notes the probe time its calls so far cost, to compare like with like.
func (t *Tracer) refreshProcs(calls map[traceCallKey]traceCallCounts) {
	for k := range calls {
		if k.Func == 0 {
			continue
		}
		p, ok := t.procs[k.Tgid]
		if !ok {
			p = t.newProc(int(k.Tgid))
			t.procs[k.Tgid] = p
		}
		if p.comm == "" {
			p.comm = commString(calls[k].Comm)
		}
	}
	now := bootSeconds()
	for pid, p := range t.procs {
		if p.exited {
			continue
		}
		pt, err := readTimes(int(pid))
		if err != nil || pt.start != p.base.start {
			p.exited = true
			continue
		}
		p.last, p.lastTime, p.probe = pt, now, t.probeTime(calls, pid)
	}
}

// probeTime is the CPU time, in seconds, the probe hits of process pid cost.
func (t *Tracer) probeTime(calls map[traceCallKey]traceCallCounts, pid uint32) float64 {
	var d time.Duration
	for k, c := range calls {
		if k.Tgid == pid && k.Func > 0 && int(k.Func) <= len(t.funcs) {
			d += time.Duration(c.Calls) * t.cost.PerCall(&t.funcs[k.Func-1], t.opts.Latency)
		}
	}
	return d.Seconds()
}

// newProc starts following a process first seen hitting a probe (--exe).
// One that started after the probes were attached is followed from its
// start; an older one from now.
func (t *Tracer) newProc(pid int) *procState {
	p := &procState{comm: readComm(pid)}
	pt, err := readTimes(pid)
	if err != nil {
		p.exited = true
		return p
	}
	now := bootSeconds()
	started := float64(pt.start) * proc.ClockTick.Seconds()
	attached := now - time.Since(t.attached).Seconds()
	if started >= attached {
		p.base, p.baseTime = procTimes{start: pt.start}, started
	} else {
		p.base, p.baseTime = pt, now
	}
	p.last, p.lastTime = pt, now
	return p
}

// readCounts sums the per-CPU counters of every (process, function).
func (t *Tracer) readCounts() (map[traceCallKey]traceCallCounts, Errors, error) {
	out := map[traceCallKey]traceCallCounts{}
	var k traceCallKey
	var perCPU []traceCallCounts
	it := t.objs.Counts.Iterate()
	for it.Next(&k, &perCPU) {
		var sum traceCallCounts
		for _, c := range perCPU {
			sum.Calls += c.Calls
			sum.Returns += c.Returns
			sum.Unmatched += c.Unmatched
			sum.Lost += c.Lost
			if c.Comm[0] != 0 {
				sum.Comm = c.Comm
			}
		}
		out[k] = sum
	}
	if err := it.Err(); err != nil {
		return nil, Errors{}, fmt.Errorf("read counts: %w", err)
	}
	var e Errors
	for i := range uint32(traceTraceErrorTRACE_ERR_MAX) {
		var vals []uint64
		if err := t.objs.Errors.Lookup(i, &vals); err != nil {
			return nil, e, fmt.Errorf("read error counters: %w", err)
		}
		var n uint64
		for _, v := range vals {
			n += v
		}
		switch traceTraceError(i) {
		case traceTraceErrorTRACE_ERR_COUNTS_FULL:
			e.CountsFull = n
		case traceTraceErrorTRACE_ERR_FRAMES_FULL:
			e.FramesFull = n
		case traceTraceErrorTRACE_ERR_STARTS_FULL:
			e.StartsFull = n
		case traceTraceErrorTRACE_ERR_STACKS_FULL:
			e.StacksFull = n
		case traceTraceErrorTRACE_ERR_STACK_LOST:
			e.StacksLost = n
		}
	}
	for _, p := range []*ebpf.Program{t.objs.OnEntry, t.objs.OnReturn, t.objs.OnStackGrowth} {
		if st, err := p.Stats(); err == nil {
			e.Missed += st.RecursionMisses
		}
	}
	return out, e, nil
}

func (t *Tracer) histogram(fn int) (*Histogram, error) {
	var perCPU []traceLatencyHist
	if err := t.objs.Hists.Lookup(uint32(fn), &perCPU); err != nil {
		return nil, fmt.Errorf("read latency of function %d: %w", fn, err)
	}
	h := &Histogram{Counts: make([]uint64, HistBuckets)}
	for i := range perCPU {
		h.add(&perCPU[i])
	}
	return h, nil
}

// Close detaches every probe and releases the BPF objects; safe to call
// twice.
func (t *Tracer) Close() error {
	for i := range t.links {
		if t.links[i] != nil {
			t.detach(i)
		}
	}
	t.closeLinks(t.calib)
	t.calib = nil
	t.closing.Wait()
	if t.stopWait != nil {
		t.stopOnce.Do(func() { close(t.stopWait) })
		<-t.exited
	}
	if t.pidfd >= 0 {
		unix.Close(t.pidfd)
		t.pidfd = -1
	}
	return t.objs.Close()
}

// classify maps permission failures to ErrNoPermission.
func classify(err error) error {
	if errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) {
		return fmt.Errorf("%w: %v", ErrNoPermission, err)
	}
	return err
}

// sortedPIDs lists the processes seen, in PID order.
func (t *Tracer) sortedPIDs() []uint32 {
	pids := make([]uint32, 0, len(t.procs))
	for pid := range t.procs {
		pids = append(pids, pid)
	}
	slices.Sort(pids)
	return pids
}

func commString(c [16]int8) string {
	b := make([]byte, 0, len(c))
	for _, ch := range c {
		if ch == 0 {
			break
		}
		b = append(b, byte(ch))
	}
	return string(b)
}
