package doctor

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/flint-dev/flint/internal/collect"
	"github.com/flint-dev/flint/internal/proc"
	"github.com/flint-dev/flint/internal/profile"
	"github.com/flint-dev/flint/internal/sampler"
	"github.com/flint-dev/flint/internal/symbol"
	"github.com/flint-dev/flint/internal/tracefs"
)

// Options configure a doctor run.
type Options struct {
	// PID examines one process; Container the processes of the container
	// whose ID starts with it; neither examines every process.
	PID       int
	Container string
	// Duration is how long to record; zero means 10 s.
	Duration time.Duration
	// Frequency is CPU samples per second per CPU; zero means 99.
	Frequency int
	// EverySyscall traces every syscall of PID (raw_syscalls) rather than
	// only those the detectors need, so syscall-errors sees them all. It
	// slows every syscall on the node while it runs (docs/BENCHMARKS.md);
	// it needs PID.
	EverySyscall bool
	// Thresholds decide when detectors fire; nil means DefaultThresholds.
	Thresholds *Thresholds
	// Progress, if set, is called about once a second while recording.
	Progress func(collect.Progress)
	// Loaded, if set, runs once the syscall tracer and the sampler are
	// loaded and attached; its error stops the run. flint doctor drops
	// capabilities there.
	Loaded func() error
}

// Run records the target processes for the duration (or until ctx ends),
// tracing the syscalls the detectors need, and analyses what it measured.
// It returns the findings worst first and the data they came from.
func Run(ctx context.Context, o Options) ([]Finding, *Data, error) {
	if o.Duration == 0 {
		o.Duration = 10 * time.Second
	}
	if o.Frequency == 0 {
		o.Frequency = 99
	}
	targets, err := targetPIDs(o)
	if err != nil {
		return nil, nil, err
	}
	e, err := Begin(ExamOptions{
		PID: o.PID, Container: o.Container, Targets: targets, EverySyscall: o.EverySyscall, Thresholds: o.Thresholds,
	})
	if err != nil {
		return nil, nil, err
	}
	defer e.Close()
	res, err := collect.Record(ctx, collect.RecordOptions{
		Frequency:    o.Frequency,
		Duration:     o.Duration,
		PID:          o.PID,
		Container:    o.Container,
		KernelStacks: true,
		UnwindMemory: sampler.DefaultUnwindMemory,
		Progress:     o.Progress,
		Loaded:       o.Loaded,
	})
	if err != nil {
		return nil, nil, err
	}
	return e.End(res.Profile, res.Warnings)
}

// ExamOptions configure an Examination.
type ExamOptions struct {
	// PID or Container name the processes asked about, as in Options; the
	// findings then note what could not be checked for them. Neither means
	// every process.
	PID       int
	Container string
	// Targets are the processes whose CPU time and context switches are
	// read at the start, so that the end has exact figures for them; other
	// processes active during the examination get figures estimated from
	// the profile.
	Targets []int
	// EverySyscall: see Options.
	EverySyscall bool
	// Thresholds decide when detectors fire; nil means DefaultThresholds.
	Thresholds *Thresholds
	// Symbolizer names the syscall tracer's stacks; nil means its own.
	// A caller that names samples too (the agent) shares its tables.
	Symbolizer *symbol.Symbolizer
	// Tracer, when set, is a tracer of every process (StartTracer with no
	// PID) that Begin restarts rather than loading one, and Close leaves
	// loaded: a caller examining again and again keeps one.
	Tracer *Tracer
}

// Examination measures over a span of time what the detectors need besides
// CPU samples: the traced syscalls, the CPU time and context switches of
// the targets, the uprobes on the node. The caller records CPU samples over
// the same span and hands their profile to End.
type Examination struct {
	o       ExamOptions
	facts   map[int]*Process // read at the start: the processes asked about
	before  map[int]usage
	tracer  *Tracer
	probes  *probeWatch
	locks   []*lockTrace
	notes   []string // what Begin could not set up
	started time.Time
}

// Begin starts an examination: it reads the targets' counters and starts
// the syscall tracer. Close it when done, End or not.
func Begin(o ExamOptions) (*Examination, error) {
	if o.EverySyscall && o.PID == 0 {
		return nil, errors.New("tracing every syscall needs a PID: it slows every syscall on the node")
	}
	if o.Tracer != nil && (o.PID != 0 || o.EverySyscall) {
		return nil, errors.New("a reused tracer traces the doctor syscalls of every process: PID and EverySyscall need their own")
	}
	if o.PID != 0 {
		if _, err := proc.Read(o.PID); err != nil {
			return nil, err
		}
	}
	dir, err := tracefs.Mount()
	if err != nil {
		return nil, err
	}
	e := &Examination{o: o, facts: map[int]*Process{}, before: map[int]usage{}, started: time.Now()}
	// Facts first, while the targets surely live.
	if o.PID != 0 || o.Container != "" {
		for _, pid := range o.Targets {
			if p, err := readProcess(pid); err == nil {
				e.facts[pid] = p
			}
		}
	}
	e.probes = watchProbes(dir)
	if o.Tracer != nil {
		e.tracer, err = o.Tracer, o.Tracer.Restart()
	} else {
		e.tracer, err = StartTracer(TracerOptions{PID: o.PID, Every: o.EverySyscall, Symbolizer: o.Symbolizer})
	}
	if err != nil {
		e.probes.stop()
		return nil, err
	}
	e.traceLocks()
	for _, pid := range o.Targets {
		if u, err := readUsage(pid); err == nil {
			e.before[pid] = u
		}
	}
	return e, nil
}

// traceLocks puts the lock probes on the Go programs asked about.
func (e *Examination) traceLocks() {
	for _, pid := range slices.Sorted(maps.Keys(e.facts)) {
		p := e.facts[pid]
		if p.Go == nil {
			continue
		}
		lt, err := startLockTrace(pid)
		if err != nil {
			e.notes = append(e.notes, fmt.Sprintf("pid %d (%s): sync.Mutex waits not traced: %v", pid, p.Comm, err))
			continue
		}
		e.locks = append(e.locks, lt)
	}
}

// endLocks stops the lock probes and names what they counted.
func (e *Examination) endLocks(d *Data) {
	for _, lt := range e.locks {
		lw, err := lt.end(func(pid int, pcs []uint64) []Frame {
			e.tracer.learnProcess(pid, pid) // a process that made no traced syscall
			return e.tracer.name(pid, pid, pcs)
		})
		if err != nil {
			d.Notes = append(d.Notes, fmt.Sprintf("pid %d: sync.Mutex waits lost: %v", lt.pid, err))
			continue
		}
		if lw.Unstacked > 0 {
			d.Notes = append(d.Notes, fmt.Sprintf("pid %d: %d sync.Mutex calls counted without their stack", lt.pid, lw.Unstacked))
		}
		if d.Locks == nil {
			d.Locks = map[int]*LockWaits{}
		}
		d.Locks[lt.pid] = lw
	}
	e.locks = nil
}

// Close stops tracing and releases the examination (a reused tracer stays
// loaded); safe to call twice.
func (e *Examination) Close() error {
	if e.probes != nil {
		e.probes.stop()
		e.probes = nil
	}
	for _, lt := range e.locks {
		lt.cancel()
		<-lt.done
		lt.tracer.Close()
	}
	e.locks = nil
	if e.o.Tracer != nil {
		e.tracer.Stop()
		return nil
	}
	return e.tracer.Close()
}

// End stops the examination and analyses it with prof, the CPU profile of
// the same span (with pid and tid labels; nil if none), and notes, what
// its recording could not do. It returns the findings worst first and the
// data they came from.
func (e *Examination) End(prof *profile.Profile, notes []string) ([]Finding, *Data, error) {
	o := e.o
	sc, err := e.tracer.Read()
	if err != nil {
		return nil, nil, err
	}
	d := &Data{Start: e.started, Duration: sc.Duration, Profile: prof, Processes: e.facts}
	if prof != nil {
		d.Start, d.Duration = prof.Start, prof.Duration
	}
	d.Notes = append(d.Notes, e.notes...)
	d.Notes = append(d.Notes, notes...)
	d.Notes = append(d.Notes, sc.Warnings...)
	e.endLocks(d)
	if len(sc.Skipped) > 0 {
		d.Notes = append(d.Notes, "no tracepoint for "+strings.Join(sc.Skipped, ", ")+": not traced")
	}
	if o.Container != "" {
		sc.Calls = slices.DeleteFunc(sc.Calls, func(c *Call) bool { return !slices.Contains(o.Targets, c.PID) })
	}
	d.Syscalls = sc
	var probeNotes []string
	d.Probes, probeNotes = e.probes.finish(d.Duration)
	e.probes = nil
	d.Notes = append(d.Notes, probeNotes...)

	// Facts about every other process that did something worth a look.
	for _, pid := range activePIDs(d) {
		if _, ok := d.Processes[pid]; ok {
			continue
		}
		if p, err := readProcess(pid); err == nil {
			d.Processes[pid] = p
		}
	}
	explicit := o.PID != 0 || o.Container != ""
	for _, pid := range slices.Sorted(maps.Keys(d.Processes)) {
		p := d.Processes[pid]
		finishProcess(p, e.before[pid], d.Duration)
		if explicit {
			if p.Exited {
				d.Notes = append(d.Notes, fmt.Sprintf("pid %d (%s) exited during the recording: its rates are averaged over the whole recording, longer than it ran", pid, p.Comm))
			}
			if p.Go == nil && !slices.ContainsFunc(p.Notes, isGoCheckNote) {
				d.Notes = append(d.Notes, fmt.Sprintf("pid %d (%s) is not a Go program: Go checks (gomaxprocs-quota, go-runtime-overhead) skipped", pid, p.Comm))
			}
		}
		d.Notes = append(d.Notes, p.Notes...)
	}
	if o.PID != 0 && d.Processes[o.PID] == nil {
		d.Notes = append(d.Notes, fmt.Sprintf("pid %d exited before flint could read its facts", o.PID))
	}
	t := DefaultThresholds()
	if o.Thresholds != nil {
		t = *o.Thresholds
	}
	return AnalyzeWith(d, t), d, nil
}

func isGoCheckNote(n string) bool { return strings.Contains(n, "Go checks skipped") }

// targetPIDs lists the processes asked about: the one PID, those of the
// container, or every process.
func targetPIDs(o Options) ([]int, error) {
	if o.PID != 0 {
		return []int{o.PID}, nil
	}
	pids, err := listPIDs()
	if err != nil {
		return nil, err
	}
	if o.Container == "" {
		return pids, nil
	}
	var out []int
	for _, pid := range pids {
		if p, err := proc.Read(pid); err == nil && strings.HasPrefix(p.Container, o.Container) {
			out = append(out, pid)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no running container with ID %s…", o.Container)
	}
	return out, nil
}

// minActiveCPU is the CPU a process must use for flint to read its facts
// when examining every process: below it no detector can fire.
const minActiveCPU = 0.01

// ActivePIDs lists the processes of p that used enough CPU for a detector
// to fire on them.
func ActivePIDs(p *profile.Profile) []int { return activePIDs(&Data{Profile: p}) }

// activePIDs lists the processes that used CPU or made traced calls.
func activePIDs(d *Data) []int {
	seen := map[int]bool{}
	x := d.index()
	for pid, n := range x.samples {
		if float64(n)*x.perSample >= minActiveCPU {
			seen[pid] = true
		}
	}
	if d.Syscalls != nil {
		for _, c := range d.Syscalls.Calls {
			seen[c.PID] = true
		}
	}
	delete(seen, 0)
	return slices.Sorted(maps.Keys(seen))
}

// finishProcess adds what p did during the recording, from its counters
// now and before (when they were read): CPU time and context switches,
// scaled to a recording of d (the readings span a little more). It marks a
// process that is gone as exited.
func finishProcess(p *Process, before usage, d time.Duration) {
	after, err := readUsage(p.PID)
	if err != nil || after.start != p.StartTime {
		p.Exited = true
		return
	}
	if before.start == p.StartTime && after.at.After(before.at) {
		scale := toRecording[time.Duration](d, after.at.Sub(before.at))
		p.CPU = scale(after.cpu - before.cpu)
		if before.ctxSwitches >= 0 && after.ctxSwitches >= 0 {
			p.CtxSwitches = int64(scale(time.Duration(after.ctxSwitches - before.ctxSwitches)))
		}
		p.ThreadCPU = map[int]time.Duration{}
		for tid, cpu := range after.threads {
			p.ThreadCPU[tid] = scale(cpu - before.threads[tid])
		}
		p.ThreadIO = map[int]int64{}
		for tid, n := range after.threadIO {
			p.ThreadIO[tid] = int64(scale(time.Duration(n - before.threadIO[tid])))
		}
	}
	if l := p.Limit; l != nil && l.startPeriods >= 0 {
		if per, thr, err := l.throttling(); err == nil {
			l.Periods, l.Throttled = per-l.startPeriods, thr-l.startThrottled
		}
	}
}

// toRecording scales a count read over span to a recording of d: counters
// are read around a recording, so their readings span more than it (by
// seconds on a loaded machine, where loading the tracer takes them).
func toRecording[T ~int64 | ~uint64](d, span time.Duration) func(T) T {
	r := 1.0
	if d > 0 && span > 0 {
		r = d.Seconds() / span.Seconds()
	}
	return func(n T) T { return T(math.Round(float64(n) * r)) }
}

// SyscallOptions configure TraceSyscalls.
type SyscallOptions struct {
	// PID traces one process; Container the processes of the container
	// whose ID starts with it; neither traces every process.
	PID       int
	Container string
	// Duration is how long to trace; zero means 10 s.
	Duration time.Duration
	// Syscalls are traced through their own tracepoints; none traces
	// every syscall of PID through raw_syscalls, which slows every syscall
	// on the node while it runs (and needs PID).
	Syscalls []string
}

// TraceSyscalls counts and times syscalls for the duration (or until ctx
// ends) and returns them with the facts of the processes that made them;
// Data.Profile is nil.
func TraceSyscalls(ctx context.Context, o SyscallOptions) (*Data, error) {
	if o.Duration == 0 {
		o.Duration = 10 * time.Second
	}
	if o.PID != 0 {
		if _, err := proc.Read(o.PID); err != nil {
			return nil, err
		}
	}
	targets, err := targetPIDs(Options{PID: o.PID, Container: o.Container})
	if err != nil {
		return nil, err
	}
	d := &Data{Start: time.Now(), Processes: map[int]*Process{}}
	before := map[int]usage{}
	if o.PID != 0 {
		if p, err := readProcess(o.PID); err == nil {
			d.Processes[o.PID] = p
		}
		before[o.PID], _ = readUsage(o.PID)
	}
	tr, err := StartTracer(TracerOptions{PID: o.PID, Every: len(o.Syscalls) == 0, Syscalls: o.Syscalls})
	if err != nil {
		return nil, err
	}
	defer tr.Close()
	timer := time.NewTimer(o.Duration)
	defer timer.Stop()
	select {
	case <-ctx.Done():
	case <-timer.C:
	}
	sc, err := tr.Read()
	if err != nil {
		return nil, err
	}
	if o.Container != "" {
		sc.Calls = slices.DeleteFunc(sc.Calls, func(c *Call) bool { return !slices.Contains(targets, c.PID) })
	}
	d.Syscalls, d.Duration = sc, sc.Duration
	d.Notes = append(d.Notes, sc.Warnings...)
	if len(sc.Skipped) > 0 {
		d.Notes = append(d.Notes, "no tracepoint for "+strings.Join(sc.Skipped, ", ")+": not traced")
	}
	for _, pid := range activePIDs(d) {
		if d.Processes[pid] == nil {
			if p, err := readProcess(pid); err == nil {
				d.Processes[pid] = p
			} else {
				d.Processes[pid] = &Process{PID: pid, Comm: sc.Comms[pid], Exited: true, CtxSwitches: -1}
			}
		}
	}
	if p := d.Processes[o.PID]; p != nil {
		finishProcess(p, before[o.PID], d.Duration)
		if p.Exited {
			d.Notes = append(d.Notes, fmt.Sprintf("pid %d (%s) exited during the recording: its rates are averaged over the whole recording, longer than it ran", p.PID, p.Comm))
		}
	}
	return d, nil
}

// KnownSyscall reports whether name is a syscall of this architecture.
func KnownSyscall(name string) bool {
	_, ok := syscallNumber(name)
	return ok
}
