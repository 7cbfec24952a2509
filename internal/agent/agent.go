// Package agent is flint's always-on profiler: it samples every process,
// names each window of samples (10 s by default) and writes it to the
// store, serves the HTTP API, and measures what it costs itself.
package agent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"time"

	"github.com/flint-dev/flint/internal/collect"
	"github.com/flint-dev/flint/internal/doctor"
	"github.com/flint-dev/flint/internal/export"
	"github.com/flint-dev/flint/internal/jvm"
	"github.com/flint-dev/flint/internal/kube"
	"github.com/flint-dev/flint/internal/proc"
	"github.com/flint-dev/flint/internal/profile"
	"github.com/flint-dev/flint/internal/sampler"
	"github.com/flint-dev/flint/internal/selector"
	"github.com/flint-dev/flint/internal/server"
	"github.com/flint-dev/flint/internal/spool"
	"github.com/flint-dev/flint/internal/store"
	"github.com/flint-dev/flint/internal/symbol"
	"github.com/flint-dev/flint/internal/unwind"
)

// Options configure the agent.
type Options struct {
	// DataDir holds the store, or with Store set the spool; created if
	// missing.
	DataDir string
	// Store is the URL of a remote store (clickhouse://host:8123/db?…,
	// see store.OpenClickHouse) that windows go to through a spool in
	// DataDir; "" keeps them in the SQLite store in DataDir.
	Store string
	// SpoolMax bounds the spool in bytes (with Store set): beyond it the
	// oldest windows are dropped.
	SpoolMax int64
	// Frequency is samples per second per CPU.
	Frequency int
	// YoungSampleEvery, above 1, samples a process in its first second
	// at 1/YoungSampleEvery of Frequency, each sample counting that many
	// (sampler.Options.YoungSampleEvery).
	YoungSampleEvery uint32
	// Window is how much time one stored profile covers.
	Window time.Duration
	// Retention drops windows older than this; 0 keeps them forever.
	Retention time.Duration
	// MaxSize bounds the SQLite store in bytes; 0 means no bound.
	MaxSize int64
	// API is where the HTTP API listens; an empty Addr serves no API.
	API server.Endpoint
	// Token, when set, is required in the API's Authorization header; it
	// must be set to listen beyond loopback (server.Options.Token).
	Token string
	// AllowHosts are Host names answered without a token besides
	// loopback ones (server.Options.AllowHosts).
	AllowHosts []string
	// Node labels every sample; the host name when empty.
	Node string
	// Kubelet names the pods and containers of samples from the kubelet's
	// pod list; an empty URL does not (outside Kubernetes).
	Kubelet kube.Options
	// Transfer is the sampler's kernel-to-user path.
	Transfer sampler.Transfer
	// UnwindMemory is the kernel memory, in bytes, for the unwind tables
	// of code built without frame pointers; 0 walks frame pointers only.
	UnwindMemory int64
	// Exports are other targets every window is also sent to (an OTLP
	// collector, Pyroscope), each through a bounded queue of its own: a
	// target that is down or slow never holds up sampling or the store.
	Exports []export.Sender
	// ReceiveOTLP, when set, is the address where the agent takes OTLP
	// profiles over gRPC from other profilers (the OpenTelemetry eBPF
	// profiler, another flint), storing them like its own windows; it then
	// takes them over HTTP on the API too (POST /v1development/profiles).
	// Both ask for Token when it is set. "" receives none.
	ReceiveOTLP string
	// JVMMaps, if set, has JVMs write the maps that name their
	// JIT-compiled methods when the agent meets them and, at most once a
	// minute, while their compiled code is sampled; nil names Java methods
	// only from maps the JVMs write themselves.
	JVMMaps *jvm.Dumper
	// DoctorEvery is how often flint doctor's detectors examine a window
	// and store their findings; 0 never.
	DoctorEvery time.Duration
	// OffCPU, if set, records where threads wait off the CPU all the time
	// and stores each window's off-CPU time beside its CPU samples, with
	// the same labels (MaxStacks is the agent's). Nil records it only
	// while a /debug/pprof/block request runs, and stores none.
	OffCPU *sampler.OffCPU
	// Logf reports events worth an operator's attention; nil discards.
	Logf func(format string, args ...any)
	// Loaded, if set, runs once the BPF programs are loaded and attached,
	// before the first sample is read; its error stops the agent. flint
	// agent drops capabilities there.
	Loaded func() error
}

// DefaultOptions are `flint agent` without flags.
func DefaultOptions() Options {
	return Options{
		DataDir:   "/var/lib/flint",
		Frequency: 99,
		// A short python3 run cost the agent and its BPF 0.54 ms
		// sampled at every tick, 0.09 ms at one in ten, side by side
		// (docs/BENCHMARKS.md). From its second second a process is
		// sampled at Frequency, as the doctor's windows and pprof's
		// parity with Go's own profiler ask.
		YoungSampleEvery: 10,
		Window:           10 * time.Second,
		Retention:        7 * 24 * time.Hour,
		MaxSize:          1 << 30,
		SpoolMax:         spool.DefaultOptions("").MaxBytes,
		API:              server.Endpoint{Addr: "127.0.0.1:7070"},
		Transfer:         sampler.RingBuffer,
		DoctorEvery:      time.Minute,
		UnwindMemory:     sampler.DefaultUnwindMemory,
	}
}

// The agent drains the samples from the kernel when a window ends, when
// a live profile starts or ends, and when the kernel asks
// (sampler.DrainSoon): the ring buffer is half full, or it sampled the
// Python frames of a process past its first second, whose code objects
// must be read while it lives (the sampler copies those of a CPython
// process under a second old as it samples it, and hands over at once
// the frames of a sample whose code objects it could not all copy, which
// may be gone in a second: OnYoungPython). Asked, it drains at most once
// every checkInterval: the ring holds seconds of samples, and draining
// every second cost the agent 22-27% more CPU (docs/BENCHMARKS.md). It
// wakes for nothing else between windows (a wake-up every second cost an
// idle agent half its CPU on a VM in a bad hour, docs/BENCHMARKS.md), but
// every checkInterval while it records off-CPU time (Options.OffCPU, or
// a live off-CPU profile), whose map holds offCPUStacks: seconds of
// waits.
const checkInterval = time.Second

// Agent is a running agent.
type Agent struct {
	o       Options
	local   store.Store  // the SQLite store; nil with Options.Store
	spool   *spool.Spool // with Options.Store: where windows go
	api     store.Reader // answers the API: local, or the remote store
	sampler *sampler.Sampler
	sym     *symbol.Symbolizer
	coll    *collect.Collector
	unwind  *unwind.Tables // nil with UnwindMemory 0
	exports []*export.Exporter
	receive *receiving        // nil without ReceiveOTLP
	self    map[string]string // the agent's own labels
	metrics metrics

	// Owned by the run loop.
	window      []sampler.Sample
	offWindow   []sampler.Sample // off-CPU time, with Options.OffCPU
	windowStart time.Time
	lastDrain   time.Time
	drainDue    time.Time // a drain asked for (zero: none), not to come sooner than a second after the last
	pythonCheck time.Time // a second after the last drain: the sampler asks for none sooner (zero: looked)
	round       uint64
	lastBPF     time.Duration
	exam        *doctor.Examination // of the current window, if examined
	lastExam    time.Time
	tracer      *doctor.Tracer // loaded at the first examination, kept

	liveMu  sync.Mutex
	live    []*liveRequest
	liveNew chan *liveRequest // to the run loop, which starts them
	// offCPULive counts live off-CPU profiles in progress; run loop only.
	offCPULive int
	loopDone   chan struct{} // closed when the run loop returns
}

// Run runs the agent until ctx ends, then writes the current window and
// returns nil; errors are failures to start.
func Run(ctx context.Context, o Options) error {
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
	if o.Node == "" {
		o.Node, _ = os.Hostname()
	}
	// Its work is one loop and the odd query: two Ps serve it. A fixed
	// count also keeps its garbage collector from starting a worker per
	// CPU on a large node, and stops the runtime re-reading the cgroup's
	// CPU limit every second. GOMAXPROCS in the environment still wins.
	if os.Getenv("GOMAXPROCS") == "" {
		runtime.GOMAXPROCS(min(runtime.NumCPU(), 2))
	}
	if err := sampler.CheckPrivileges(); err != nil {
		return err
	}
	// Listening before Loaded drops the capabilities: a port below 1024
	// takes one the agent does not keep.
	var listener *server.Listener
	if o.API.Addr != "" {
		var err error
		if listener, err = server.Listen(o.API, o.Token); err != nil {
			return err
		}
		defer listener.Close() // served, Shutdown has closed it already
	}
	a := &Agent{o: o, sym: symbol.New(), liveNew: make(chan *liveRequest), loopDone: make(chan struct{})}
	closeStore, err := a.openStore()
	if err != nil {
		return err
	}
	defer closeStore()
	if o.ReceiveOTLP != "" {
		if a.receive, err = a.listenReceive(); err != nil {
			return err
		}
		defer a.receive.stop() // before the store closes
	}
	defer a.sym.Close()
	a.coll = collect.New(a.sym, o.Node)
	if o.JVMMaps != nil {
		a.coll.SetJIT(o.JVMMaps.Request)
	}
	for _, s := range o.Exports {
		e := export.New(s, export.Options{Logf: o.Logf})
		a.exports = append(a.exports, e)
		defer e.Close(exportDrainTimeout)
	}
	if o.Kubelet.URL != "" {
		if o.Kubelet.Logf == nil {
			o.Kubelet.Logf = o.Logf
		}
		kc, err := kube.New(o.Kubelet)
		if err != nil {
			return err
		}
		a.coll.SetNamer(kc)
		go kc.Run(ctx)
	}
	stats, err := sampler.EnableStats()
	if err != nil {
		return err
	}
	defer stats.Close()
	a.sampler, err = sampler.Start(sampler.Options{
		Frequency:        o.Frequency,
		YoungSampleEvery: o.YoungSampleEvery,
		KernelStacks:     true,
		Transfer:         o.Transfer,
		MaxStacks:        stacksPerWindow(o.Frequency, o.Window),
		OnNewProc:        a.coll.Announced,
		UnwindRows:       collect.UnwindRows(o.UnwindMemory),
		OnStale:          a.coll.Refresh,
		OnExit:           a.coll.Exited,
		OnYoungPython:    a.coll.RememberPython,
		OnPythonCopy:     a.coll.RememberCopy,
		OffCPU:           offCPUOptions(o.OffCPU),
	})
	if err != nil {
		return err
	}
	defer a.sampler.Close()
	if o.OffCPU != nil {
		if err := a.sampler.SetOffCPU(true); err != nil {
			return err
		}
	}
	a.coll.SetPython(a.sampler)
	a.coll.SetQuiet(a.sampler)
	if a.unwind = collect.StartUnwind(a.coll, a.sampler); a.unwind != nil {
		defer a.unwind.Close()
	}
	if o.Loaded != nil {
		if err := o.Loaded(); err != nil {
			return err
		}
	}
	a.self = a.ownLabels()
	where := o.DataDir
	if o.Store != "" {
		where = fmt.Sprintf("%s through the spool in %s", store.URLName(o.Store), filepath.Join(o.DataDir, "spool"))
	}
	o.Logf("agent sampling every process at %d Hz, %s windows, data in %s", o.Frequency, o.Window, where)

	var api *server.Running
	if listener != nil {
		opts := server.Options{
			Store: a.api, Live: a, Metrics: a.writeMetrics, Token: o.Token, AllowHosts: o.AllowHosts, Node: o.Node,
		}
		if a.receive != nil {
			opts.Receive = a.receive.otlp
		}
		api = listener.Serve(opts)
		o.Logf("serving the API on %s", api.URL())
	}
	if a.receive != nil {
		a.receive.start()
		o.Logf("receiving OTLP profiles over gRPC on %s and over HTTP on the API", a.receive.ln.Addr())
	}
	a.loop(ctx)
	o.Logf("agent stopping; last window written: %d windows, %d samples in all", a.metrics.windowsWritten.Load(), a.metrics.samplesWritten.Load())
	if api != nil {
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		api.Shutdown(shutdown)
	}
	return nil
}

// openStore opens the SQLite store in DataDir, or with Options.Store the
// spool in front of the remote store; the function it returns closes them.
func (a *Agent) openStore() (closeStore func(), err error) {
	if a.o.Store == "" {
		so := store.DefaultOptions()
		so.Retention, so.MaxSize = a.o.Retention, a.o.MaxSize
		so.Logf = a.o.Logf
		st, err := store.Open(a.o.DataDir, so)
		if err != nil {
			return nil, err
		}
		a.local, a.api = st, st
		return func() { st.Close() }, nil
	}
	sp, remote, err := openSpool(a.o, spoolOptions(a.o))
	if err != nil {
		return nil, err
	}
	a.api, a.spool = remote, sp
	return func() {
		a.drainSpool()
		sp.Close()
		remote.Close()
	}, nil
}

// spoolDrainTimeout is how long a stopping agent waits for the store to
// take the windows still in the spool; they are sent at the next start
// otherwise.
const spoolDrainTimeout = 5 * time.Second

// drainSpool gives the store the windows left, unless it is failing: then
// waiting would only delay the stop.
func (a *Agent) drainSpool() {
	ctx, cancel := context.WithTimeout(context.Background(), spoolDrainTimeout)
	defer cancel()
	if a.spool.Stats().Outage || a.spool.Drain(ctx) != nil {
		a.o.Logf("%d windows wait in the spool for the next start", a.spool.Stats().Windows)
	}
}

// exportDrainTimeout is how long a stopping agent waits for export targets
// to take the windows queued for them.
const exportDrainTimeout = 5 * time.Second

// stacksPerWindow sizes the kernel stack maps: distinct stacks in a window
// cannot outnumber its samples; a 2x margin covers the round Trim keeps.
func stacksPerWindow(freq int, window time.Duration) int {
	n := 2 * int(float64(freq)*window.Seconds()) * runtime.NumCPU()
	return min(max(n, 4096), 65536)
}

func (a *Agent) loop(ctx context.Context) {
	defer close(a.loopDone)
	liveEnds := time.NewTimer(time.Hour) // armed while live profiles run
	liveEnds.Stop()
	a.windowStart = time.Now()
	check := time.NewTimer(a.nextCheck(a.windowStart))
	defer check.Stop()
	for {
		select {
		case r := <-a.liveNew:
			// Samples taken so far belong to earlier requests only.
			now := time.Now()
			a.drain(now)
			if r.kind == profile.OffCPU {
				if err := a.offCPUStarted(); err != nil {
					a.offCPUEnded()
					r.err = err
					close(r.done)
					continue
				}
				// From when the off-CPU program is attached: the
				// first time, it is loaded first.
				now = time.Now()
			}
			r.start, r.until = now, now.Add(r.duration)
			a.liveMu.Lock()
			a.live = append(a.live, r)
			a.liveMu.Unlock()
			a.armLiveEnds(liveEnds, now)
		case now := <-liveEnds.C:
			a.drain(now)
			a.armLiveEnds(liveEnds, now)
		case <-ctx.Done():
			a.drain(time.Now())
			a.flush(time.Now())
			if a.exam != nil {
				a.exam.Close()
			}
			if a.tracer != nil {
				a.tracer.Close()
			}
			a.endLive()
			return
		case <-a.sampler.DrainSoon():
			now := time.Now()
			if due := a.lastDrain.Add(checkInterval); now.Before(due) {
				a.drainDue = due
			} else {
				a.drain(now)
			}
		case now := <-check.C:
			windowDue := now.Sub(a.windowStart) >= a.o.Window
			if !now.Before(a.pythonCheck) {
				a.pythonCheck = time.Time{}
			}
			if windowDue || a.recordsOffCPU() || !a.drainDue.IsZero() || a.sampler.PythonToRead() {
				a.drain(now)
			}
			if windowDue {
				a.flush(now)
			}
		}
		check.Reset(a.nextCheck(time.Now()))
	}
}

// nextCheck is how long the loop may sleep from now: until the window
// ends, a drain asked for is due, a second after the last drain (Python
// sampled in that second asks for no drain: sampler.DrainSoon), or,
// while it records off-CPU time, checkInterval.
func (a *Agent) nextCheck(now time.Time) time.Duration {
	next := a.windowStart.Add(a.o.Window)
	if a.recordsOffCPU() && now.Add(checkInterval).Before(next) {
		next = now.Add(checkInterval)
	}
	for _, t := range []time.Time{a.drainDue, a.pythonCheck} {
		if !t.IsZero() && t.Before(next) {
			next = t
		}
	}
	return max(next.Sub(now), 0)
}

// recordsOffCPU reports whether the off-CPU program is attached: always
// with Options.OffCPU, else while live off-CPU profiles run.
func (a *Agent) recordsOffCPU() bool { return a.o.OffCPU != nil || a.offCPULive > 0 }

// drain moves samples from the kernel into the current window and to live
// profiles, and off-CPU time into the current window (with
// Options.OffCPU) and to live off-CPU profiles.
func (a *Agent) drain(now time.Time) {
	// From the clock's now, not the caller's: the sampler asks for no
	// drain 0.9 s from its own reading, which follows.
	a.lastDrain, a.drainDue, a.pythonCheck = now, time.Time{}, time.Now().Add(checkInterval)
	batch, err := a.sampler.Drain()
	if err != nil {
		a.o.Logf("drain samples: %v", err)
	}
	a.coll.ReadPython(batch)
	a.window = append(a.window, batch...)
	var off []sampler.Sample
	if a.recordsOffCPU() {
		if off, err = a.sampler.DrainOffCPU(); err != nil {
			a.o.Logf("drain off-CPU time: %v", err)
		}
		a.coll.ReadPython(off)
		if a.o.OffCPU != nil {
			a.offWindow = append(a.offWindow, off...)
		}
	}
	a.feedLive(batch, off, now)
}

// flush names the current window and writes it, with the findings of its
// examination, to the store or the spool, and with Options.OffCPU its
// off-CPU time as a window of its own, with the same start and labels. A
// write that fails (disk full, store unwritable) drops the window, counts
// it and is logged; sampling goes on and later windows are written when
// they can be.
func (a *Agent) flush(now time.Time) {
	a.round++
	o := collect.Options{Start: a.windowStart, Duration: now.Sub(a.windowStart), Period: a.period(), Round: a.round}
	p := a.coll.Profile(a.window, o)
	a.addSelfCost(p)
	var findings []store.Finding
	if a.exam != nil {
		findings = a.endExamination(a.window, p)
	}
	var off *profile.Profile
	if a.o.OffCPU != nil {
		o.Period = time.Nanosecond
		off = a.coll.Profile(a.offWindow, o)
		collect.TimeProfile(off, profile.OffCPU)
	}
	a.window, a.offWindow = emptied(a.window), emptied(a.offWindow)
	a.windowStart = now

	a.writeWindow(p, findings)
	if off != nil {
		a.writeWindow(off, nil)
	}
	for _, e := range a.exports {
		e.Put(p) // the export formats carry CPU samples
	}
	a.coll.Forget(a.round)
	a.sym.Trim(a.coll.Maps)
	if err := a.sampler.Trim(); err != nil {
		a.o.Logf("%v", err)
	}
	a.beginExamination(p, time.Now())
}

// maxKeptSamples bounds the room of a window's samples kept for the next
// window (16384 samples, under 2 MB).
const maxKeptSamples = 1 << 14

// emptied returns samples emptied for the next window, keeping their room
// unless a burst made it large: growing it anew each window was a third of
// what draining samples allocated.
func emptied(samples []sampler.Sample) []sampler.Sample {
	if cap(samples) > maxKeptSamples {
		return nil
	}
	clear(samples) // their stacks and names
	return samples[:0]
}

// writeWindow writes p and its findings, counts it, and logs the first of
// a run of failures and the recovery.
func (a *Agent) writeWindow(p *profile.Profile, findings []store.Finding) {
	err := a.write(p, findings)
	a.metrics.record(p, err)
	switch {
	case err != nil && a.metrics.failing() == 1:
		a.o.Logf("write window: %v (sampling goes on; windows are dropped until writes succeed)", err)
	case err == nil && a.metrics.recovered():
		a.o.Logf("writing windows again after %d dropped", a.metrics.windowsDropped.Load())
	}
}

// write puts a window and its findings into the spool, or writes them to
// the SQLite store: the findings first, each in its own transaction.
func (a *Agent) write(p *profile.Profile, findings []store.Finding) error {
	if a.spool != nil {
		err := a.spool.Put(p, findings)
		switch {
		case err == nil:
			a.metrics.findings.Add(int64(len(findings)))
		case len(findings) > 0:
			a.metrics.examinationsFailed.Add(1) // flush logs err
		}
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), a.o.Window)
	defer cancel()
	if len(findings) > 0 {
		a.countFindings(findings, a.local.WriteFindings(ctx, findings))
	}
	return a.local.Write(ctx, p)
}

func (a *Agent) period() time.Duration { return time.Second / time.Duration(a.o.Frequency) }

// addSelfCost adds the run time of flint's BPF programs in this window (the
// sampler's, and the doctor's syscall tracer's) as samples of the agent's
// own process: that time is spent in interrupts and other processes'
// syscalls, where sampling cannot see it. The agent's user-space CPU is
// sampled like any process's, under the same labels.
func (a *Agent) addSelfCost(p *profile.Profile) {
	total, _, err := a.sampler.ProgramStats()
	if err != nil {
		return
	}
	if a.tracer != nil {
		if t, err := a.tracer.RunTime(); err == nil {
			total += t
		}
	}
	a.metrics.bpfRunTime.Store(int64(total))
	// Whole samples only; the remainder counts in the next window.
	if n := (total - a.lastBPF) / a.period(); n > 0 {
		a.lastBPF += n * a.period()
		p.Samples = append(p.Samples, &profile.Sample{Count: int64(n), Labels: a.self, Stack: []*profile.Location{bpfLocation}})
	}
}

// bpfLocation names the time flint's BPF programs ran.
var bpfLocation = &profile.Location{Frames: []symbol.Frame{{Function: "[flint BPF programs]"}}}

func (a *Agent) ownLabels() map[string]string {
	l := map[string]string{
		profile.LabelPID:    strconv.Itoa(os.Getpid()),
		profile.LabelNode:   a.o.Node,
		profile.LabelThread: "[bpf]",
	}
	if p, err := proc.Read(os.Getpid()); err == nil {
		l[profile.LabelComm] = p.Comm
		l[profile.LabelStartTime] = strconv.FormatUint(p.StartTime, 10)
		l[profile.LabelExe] = p.Exe
		if p.Cgroup != "" {
			l[profile.LabelCgroup] = p.Cgroup
		}
	}
	return l
}

// offCPUStacks bounds the distinct stacks off-CPU time takes between two
// drains (a second apart while off-CPU time is recorded): 4 MiB of kernel
// memory.
const offCPUStacks = 4096

// offCPUOptions is what the sampler loads for off-CPU time: the agent's
// options with offCPUStacks, or without them the defaults, for live
// /debug/pprof/block requests.
func offCPUOptions(o *sampler.OffCPU) *sampler.OffCPU {
	out := sampler.OffCPU{Min: sampler.DefaultOffCPUMin}
	if o != nil {
		out = *o
	}
	out.MaxStacks = offCPUStacks
	return &out
}

// liveRequest is a /debug/pprof/profile or /debug/pprof/block in progress.
type liveRequest struct {
	kind     profile.Kind // CPU or OffCPU
	keep     selector.Selector
	duration time.Duration
	start    time.Time // set by the run loop
	until    time.Time
	samples  []sampler.Sample
	done     chan *profile.Profile // closed without one: err, or the agent stops
	err      error
}

// Profile records for d and returns the profile of kind of the processes
// sel matches; it implements server.LiveProfiler.
func (a *Agent) Profile(ctx context.Context, kind profile.Kind, d time.Duration, sel selector.Selector) (*profile.Profile, error) {
	if kind != profile.CPU && kind != profile.OffCPU {
		return nil, fmt.Errorf("live profiles are CPU or off-CPU, not kind %d", kind)
	}
	r := &liveRequest{kind: kind, keep: sel, duration: d, done: make(chan *profile.Profile, 1)}
	select {
	case a.liveNew <- r:
	case <-a.loopDone:
		return nil, errors.New("agent is stopping")
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	select {
	case p := <-r.done:
		if r.err != nil {
			return nil, r.err
		}
		if p == nil {
			return nil, errors.New("agent is stopping")
		}
		return p, nil
	case <-ctx.Done():
		a.liveMu.Lock()
		for i, x := range a.live {
			switch {
			case x != r:
				continue
			case r.kind == profile.OffCPU:
				// Ended by the run loop, which drains each second while
				// off-CPU time is recorded: it counts them.
				r.until = time.Now()
			default:
				a.live = append(a.live[:i], a.live[i+1:]...)
			}
			break
		}
		a.liveMu.Unlock()
		return nil, ctx.Err()
	}
}

// armLiveEnds sets t to fire when the first live profile in progress ends.
func (a *Agent) armLiveEnds(t *time.Timer, now time.Time) {
	a.liveMu.Lock()
	defer a.liveMu.Unlock()
	if len(a.live) == 0 {
		t.Stop()
		return
	}
	first := a.live[0].until
	for _, r := range a.live[1:] {
		if r.until.Before(first) {
			first = r.until
		}
	}
	t.Reset(first.Sub(now))
}

func (a *Agent) feedLive(batch, off []sampler.Sample, now time.Time) {
	a.liveMu.Lock()
	var finished []*liveRequest
	kept := a.live[:0]
	for _, r := range a.live {
		if r.kind == profile.OffCPU {
			r.samples = append(r.samples, off...)
		} else {
			r.samples = append(r.samples, batch...)
		}
		if now.Before(r.until) {
			kept = append(kept, r)
		} else {
			finished = append(finished, r)
		}
	}
	a.live = kept
	a.liveMu.Unlock()
	for _, r := range finished {
		o := collect.Options{Start: r.start, Duration: now.Sub(r.start), Period: a.period(), Round: a.round, Keep: r.keep.Matches, ThreadIDs: true}
		if r.kind == profile.OffCPU {
			a.offCPUEnded()
			o.Period = time.Nanosecond
		}
		p := a.coll.Profile(r.samples, o)
		if r.kind == profile.OffCPU {
			collect.TimeProfile(p, profile.OffCPU)
		}
		r.done <- p
	}
}

// offCPUStarted and offCPUEnded count the live off-CPU profiles in
// progress: without Options.OffCPU, the sampler records off-CPU time while
// there are any. Called by the run loop only.
func (a *Agent) offCPUStarted() error {
	a.offCPULive++
	if a.offCPULive == 1 && a.o.OffCPU == nil {
		return a.sampler.SetOffCPU(true)
	}
	return nil
}

func (a *Agent) offCPUEnded() {
	a.offCPULive--
	if a.offCPULive == 0 && a.o.OffCPU == nil {
		a.sampler.SetOffCPU(false)
		// What the last drain left behind belongs to no one.
		if _, err := a.sampler.DrainOffCPU(); err != nil {
			a.o.Logf("drain off-CPU time: %v", err)
		}
	}
}

func (a *Agent) endLive() {
	a.liveMu.Lock()
	defer a.liveMu.Unlock()
	for _, r := range a.live {
		close(r.done)
	}
	a.live = nil
}
