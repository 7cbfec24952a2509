package collect

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/flint-dev/flint/internal/jvm"
	"github.com/flint-dev/flint/internal/proc"
	"github.com/flint-dev/flint/internal/profile"
	"github.com/flint-dev/flint/internal/sampler"
	"github.com/flint-dev/flint/internal/symbol"
)

// RecordOptions configure a one-shot recording.
type RecordOptions struct {
	Frequency int           // samples per second per CPU
	Duration  time.Duration // until then, or until ctx ends
	PID       int           // one process; 0 for all
	// Container keeps only processes whose container ID starts with it.
	Container    string
	KernelStacks bool
	Transfer     sampler.Transfer
	// UnwindMemory is the kernel memory, in bytes, for the unwind tables
	// of code built without frame pointers; 0 walks frame pointers only.
	UnwindMemory int64
	// JVMMaps, if set, has the JVMs recorded write the maps that name their
	// compiled code: when first sampled, and again before naming.
	JVMMaps *jvm.Dumper
	// NoPython leaves CPython processes to native frames, their Python
	// frames unread.
	NoPython bool
	// Kind is the profile to record: CPU time, time off the CPU (OffCPU
	// says at what cost), or both (Wall).
	Kind   profile.Kind
	OffCPU *sampler.OffCPU
	// Progress, if set, is called about once a second.
	Progress func(Progress)
	// Loaded, if set, runs once the sampler is loaded and attached, before
	// the first sample is read; its error stops the recording. The
	// commands drop capabilities there.
	Loaded func() error
}

// Progress is the state of a running recording.
type Progress struct {
	Elapsed, Duration time.Duration
	Samples           uint64 // taken by the kernel so far
	Processes         int
	Dropped           uint64 // lost entirely
	StacksLost        uint64 // counted, frames unknown
}

// Result is a finished recording.
type Result struct {
	Profile *profile.Profile
	Stats   sampler.Stats
	Naming  symbol.Stats
	// Warnings say what could not be done fully, one line each.
	Warnings []string
}

// Record samples for the given duration, or until ctx is done, and returns
// the named profile. Stopping early still returns what was taken.
func Record(ctx context.Context, o RecordOptions) (*Result, error) {
	var target *proc.Process
	if o.PID != 0 {
		var err error
		if target, err = proc.Read(o.PID); err != nil {
			return nil, err
		}
	}
	if o.Container != "" {
		if err := containerRunning(o.Container); err != nil {
			return nil, err
		}
	}
	sym := symbol.New()
	defer sym.Close()
	node, _ := os.Hostname()
	c := New(sym, node)
	if o.JVMMaps != nil {
		c.SetJIT(o.JVMMaps.Request)
	}
	var offCPU *sampler.OffCPU
	if o.Kind != profile.CPU {
		offCPU = cmp.Or(o.OffCPU, &sampler.OffCPU{Min: sampler.DefaultOffCPUMin})
	}
	s, err := sampler.Start(sampler.Options{
		Frequency:     o.Frequency,
		PID:           o.PID,
		KernelStacks:  o.KernelStacks,
		Transfer:      o.Transfer,
		MaxStacks:     stackCapacity(o.Frequency, o.Duration),
		OnNewProc:     c.Announced,
		UnwindRows:    UnwindRows(o.UnwindMemory),
		OnStale:       c.Refresh,
		OnYoungPython: c.RememberPython,
		OnPythonCopy:  c.RememberCopy,
		Paused:        true,
		OffCPU:        offCPU,
		NoCPU:         o.Kind == profile.OffCPU,
	})
	if err != nil {
		return nil, err
	}
	defer s.Close()
	if offCPU != nil {
		if err := s.SetOffCPU(true); err != nil {
			return nil, err
		}
	}
	if !o.NoPython {
		c.SetPython(s)
		if target != nil {
			c.LearnPython(target)
		}
	}
	c.SetQuiet(s)
	if t := StartUnwind(c, s); t != nil {
		defer t.Close()
		if target != nil {
			// Its tables before its first sample, not a few
			// milliseconds after.
			t.Learn(target, 0)
			t.Flush()
		}
	}
	if err := s.Resume(); err != nil {
		return nil, err
	}
	if o.Loaded != nil {
		if err := o.Loaded(); err != nil {
			return nil, err
		}
	}

	var samples, offSamples []sampler.Sample
	drain := func() error {
		batch, err := s.Drain()
		c.ReadPython(batch)
		samples = append(samples, batch...)
		if err != nil {
			return err
		}
		batch, err = s.DrainOffCPU()
		c.ReadPython(batch)
		offSamples = append(offSamples, batch...)
		return err
	}
	start := time.Now()
	timer := time.NewTimer(o.Duration)
	defer timer.Stop()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	report := func() {
		if o.Progress == nil {
			return
		}
		st, _ := s.Stats()
		o.Progress(Progress{Elapsed: time.Since(start), Duration: o.Duration, Samples: st.Samples,
			Processes: c.Processes(), Dropped: st.Dropped(), StacksLost: st.StacksFull})
	}
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case <-timer.C:
			break loop
		case <-tick.C:
			// The ring holds a few seconds, the off-CPU map is sized for
			// seconds, and Python code objects must be read while their
			// process lives: drain as we go.
			if o.Transfer == sampler.RingBuffer || offCPU != nil || s.PythonToRead() {
				if err := drain(); err != nil {
					return nil, err
				}
			}
			report()
		}
	}
	s.Stop()
	elapsed := time.Since(start)
	report()
	if err := drain(); err != nil {
		return nil, err
	}
	st, err := s.Stats()
	if err != nil {
		return nil, err
	}
	// Code the JVMs compiled since their maps were written.
	for _, pid := range c.jvms() {
		o.JVMMaps.Now(pid)
	}
	var keep Filter
	if o.Container != "" {
		keep = func(l map[string]string) bool { return strings.HasPrefix(l[profile.LabelContainerID], o.Container) }
	}
	period := time.Second / time.Duration(o.Frequency)
	opts := Options{Start: start, Duration: elapsed, Period: period, Keep: keep, ThreadIDs: true}
	var prof *profile.Profile
	if offCPU == nil {
		prof = c.Profile(samples, opts)
	} else {
		opts.Period = time.Nanosecond
		prof = c.Profile(timeSamples(samples, period, offSamples), opts)
		TimeProfile(prof, o.Kind)
		prof.Comments = append(prof.Comments, offCPUComment(offCPU))
	}
	res := &Result{Profile: prof, Stats: st}
	res.Naming = sym.Stats()
	res.Warnings = warnings(st, sym, o.KernelStacks)
	if cs := c.Stats(); cs.PythonUnsupported > 0 {
		res.Warnings = append(res.Warnings, fmt.Sprintf("Python frames unread in %d processes, native frames only: %s", cs.PythonUnsupported, cs.PythonNote))
	}
	return res, nil
}

// timeSamples returns the samples of a time profile: off, in nanoseconds,
// after cpu, each count converted from samples of period to nanoseconds.
func timeSamples(cpu []sampler.Sample, period time.Duration, off []sampler.Sample) []sampler.Sample {
	out := make([]sampler.Sample, 0, len(cpu)+len(off))
	for _, s := range cpu {
		s.Count *= uint64(period.Nanoseconds())
		out = append(out, s)
	}
	return append(out, off...)
}

// TimeProfile makes p, named from off-CPU samples (and CPU samples
// converted to nanoseconds) with a period of 1 ns, a profile of kind.
func TimeProfile(p *profile.Profile, kind profile.Kind) {
	p.Kind = kind
	trimScheduler(p)
}

// trimScheduler drops the frames of the scheduler and of flint's own
// program, which lead every off-CPU kernel stack: the stack ends where the
// thread chose to wait (futex_wait, do_nanosleep, do_epoll_wait).
func trimScheduler(p *profile.Profile) {
	for _, s := range p.Samples {
		for len(s.Stack) > 0 && isScheduler(s.Stack[0]) {
			s.Stack = s.Stack[1:]
		}
	}
}

func isScheduler(l *profile.Location) bool {
	if l.Mapping == nil || !l.Mapping.Kernel {
		return false
	}
	name := l.Frames[len(l.Frames)-1].Function
	return name == "__schedule" || name == "schedule" || strings.HasPrefix(name, "bpf_prog_") ||
		strings.HasPrefix(name, "bpf_trace_run") || strings.HasPrefix(name, "__bpf_trace_") || strings.HasPrefix(name, "__traceiter_")
}

// offCPUComment says what an off-CPU recording left out.
func offCPUComment(o *sampler.OffCPU) string {
	s := fmt.Sprintf("off-CPU: spans shorter than %s not recorded", o.Min)
	if o.SampleEvery > 1 {
		s += fmt.Sprintf("; one span in %d recorded, counted %d times", o.SampleEvery, o.SampleEvery)
	}
	return s
}

// stackCapacity sizes the kernel's stack maps for one sample per expected
// tick on every CPU (distinct stacks cannot outnumber samples), within
// [2048, 65536] entries (~1 KiB each).
func stackCapacity(freq int, d time.Duration) int {
	n := int(float64(freq) * d.Seconds() * float64(runtime.NumCPU()))
	return min(max(n, 2048), 65536)
}

func warnings(st sampler.Stats, sym *symbol.Symbolizer, kernel bool) []string {
	var w []string
	add := func(n uint64, what string) {
		if n > 0 {
			w = append(w, fmt.Sprintf("%d %s", n, what))
		}
	}
	add(st.CountsFull, "samples dropped: sample map full")
	add(st.RingBufFull, "samples dropped: ring buffer full")
	add(st.StacksFull, "stacks lost: stack map full (samples kept as [stack lost])")
	add(st.UserStackErrors, "user stacks unreadable")
	add(st.KernelStackErrors, "kernel stacks unreadable")
	add(st.ProcEventsLost, "new-process notifications lost: some processes may be unnamed")
	if err := sym.KernelError(); err != nil && kernel {
		w = append(w, "kernel frames unnamed: "+err.Error())
	}
	return w
}

// containerRunning checks that some process runs in a container whose ID
// starts with prefix.
func containerRunning(prefix string) error {
	entries, err := os.ReadDir(proc.Root)
	if err != nil {
		return fmt.Errorf("list processes: %w", err)
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cg, err := os.ReadFile(fmt.Sprintf("%s/%d/cgroup", proc.Root, pid))
		if err != nil {
			continue
		}
		if id, _ := proc.ParseContainer(string(cg)); strings.HasPrefix(id, prefix) {
			return nil
		}
	}
	return fmt.Errorf("no running container with ID %s…", prefix)
}
