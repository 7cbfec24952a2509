// Package collect turns raw samples into named profiles: it learns each
// process when the sampler first sees it, then names every stack with the
// process snapshot and binaries taken at that moment.
package collect

import (
	"encoding/binary"
	"errors"
	"reflect"
	"slices"
	"strconv"
	"sync"
	"time"
	"unsafe"

	"github.com/flint-dev/flint/internal/proc"
	"github.com/flint-dev/flint/internal/profile"
	"github.com/flint-dev/flint/internal/python"
	"github.com/flint-dev/flint/internal/sampler"
	"github.com/flint-dev/flint/internal/symbol"
)

// Collector knows the processes the sampler has seen and names samples.
type Collector struct {
	sym      *symbol.Symbolizer
	node     string
	namer    Namer
	unwinder Unwinder
	jit      func(pid int) // asks a JVM for its JIT map; nil: none

	mu      sync.Mutex
	procs   map[procKey]*procEntry
	files   map[proc.FileKey]*fileUse // files mapped by known processes, or lately (keepFileRounds)
	round   uint64                    // the last Forget's
	skipped uint64                    // processes not learned: maxProcs known
	// listed is what /proc calls the files the kernel listed (Announced),
	// of those in files; listedLearned counts the processes named from
	// such listings. cgroups are the cgroups of processes read from /proc,
	// by the kernel's key for them (sampler.NewProc.Cgroups).
	listed        map[sampler.KernelFile]proc.FileKey
	listedLearned uint64
	cgroups       map[uint64]proc.Cgroups
	quiet         *quietFiles // nil: every new process wakes the agent (SetQuiet)

	pyKernel      PythonKernel   // nil: Python frames are not read
	pyFinder      *python.Finder // its lock is taken after mu (Forget)
	pythons       map[procKey]*python.Process
	pyUnsupported uint64 // CPython processes of versions flint cannot read
	pyNote        string // why, for the first of them

	spare *builder // the last Profile's, cleared; nil while in use
}

// fileUse counts the mappings of a file by known processes, and keeps one
// copy of its path for all of them.
type fileUse struct {
	mappings int
	unmapped uint64 // the round mappings fell to 0
	path     string
	listedAs sampler.KernelFile // as the kernel lists it; zero: not matched yet
}

// maxProcs bounds the process images known at once. Exited processes are
// kept until their samples are named (Forget), so a burst of short-lived
// ones (thousands a second) would otherwise grow the agent without bound;
// a snapshot costs about 1-2 KB.
const maxProcs = 16384

type procEntry struct {
	p *proc.Process
	// lastUsed is the Forget round that last named a sample of p.
	lastUsed uint64
	// nextCheck is the first Forget round that may read /proc again to
	// tell whether p, not told to have exited, still runs.
	nextCheck uint64
	// exited: the sampler told of its end (Exited).
	exited bool
	// python: its CPython interpreter was found, one flint reads or not;
	// until then each new snapshot of it is looked at (pythonOf).
	python bool
}

// procKey is one process image: a PID and the sampler's generation for it.
type procKey struct{ pid, generation uint32 }

// New returns a Collector naming with sym; node labels every sample.
func New(sym *symbol.Symbolizer, node string) *Collector {
	return &Collector{sym: sym, node: node, procs: map[procKey]*procEntry{}, files: map[proc.FileKey]*fileUse{},
		listed: map[sampler.KernelFile]proc.FileKey{}, cgroups: map[uint64]proc.Cgroups{},
		pyFinder: python.NewFinder(sym), pythons: map[procKey]*python.Process{}}
}

// Namer names the pod and container a process runs in (namespace, pod,
// container labels) from the pod UID and container ID of its cgroup path,
// adding to labels what it knows. It must not block: windows wait on it.
// internal/kube's Client is one.
type Namer interface {
	AddNames(labels map[string]string, podUID, containerID string)
}

// SetNamer makes n name the pods and containers of samples; call it
// before the first Profile.
func (c *Collector) SetNamer(n Namer) { c.namer = n }

// SetJIT has the Collector call request, which must not block, for a JVM
// when it learns it and when its samples run JIT-compiled code, so that the
// JVM writes the map that names that code (jvm.Dumper; it bounds how
// often). Call before the first NewProc.
func (c *Collector) SetJIT(request func(pid int)) { c.jit = request }

// Unwinder walks the stacks of the processes it learns without frame
// pointers (unwind.Tables). Neither method may wait for more than its
// own work: a Kernel write, opening a file (Learn).
type Unwinder interface {
	Learn(p *proc.Process, generation uint32)
	// Forget drops a process image; exited says the process has exited.
	Forget(pid, generation uint32, exited bool)
}

// SetUnwinder hands u every process image the Collector knows and learns
// from now on.
func (c *Collector) SetUnwinder(u Unwinder) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.unwinder = u
	for k, e := range c.procs {
		u.Learn(e.p, k.generation)
	}
}

// NewProc snapshots a process seen for the first time, reading its name
// and start time from /proc (Announced, the sampler's OnNewProc callback,
// has them already). With maxProcs processes known it learns none (Stats
// counts them): their samples keep the names the kernel gave them, their
// frames are unknown.
func (c *Collector) NewProc(pid, generation uint32) {
	c.learn(sampler.NewProc{PID: pid, Generation: generation}, func() (*proc.Process, error) { return proc.Read(int(pid)) })
}

// Announced is NewProc for a process the sampler announced (its OnNewProc
// callback), with the name, start time and executable's text its BPF
// program read, which spares reading /proc/PID/stat and /proc/PID/exe.
// When the kernel listed the process, what processes read from /proc
// taught of its files and cgroups spares reading /proc/PID/maps and
// /proc/PID/cgroup: a process of files and cgroups seen before is named
// without reading /proc at all.
func (c *Collector) Announced(np sampler.NewProc) {
	if np.Relisted {
		c.relisted(np)
		return
	}
	known := proc.Known{Comm: np.Comm, StartTime: np.StartTime, ExeText: np.ExeText}
	c.mu.Lock()
	if np.Listed && len(c.procs) < maxProcs {
		if known.Mappings = c.named(np.Mappings); known.Mappings != nil {
			c.listedLearned++
		}
	}
	if cg, ok := c.cgroups[np.Cgroups]; ok && np.Cgroups != 0 {
		known.Cgroups = &cg
	}
	c.mu.Unlock()
	c.learn(np, func() (*proc.Process, error) { return proc.ReadKnown(int(np.PID), known) })
}

// named returns the mappings the kernel listed as /proc names them; nil
// unless it knows every one. A file's name and /proc identity come from
// a process that mapped it read from /proc (matchListed); anonymous code,
// a JIT's, is left to /proc, which also finds the namespace PID its map
// is named by. Callers hold mu.
func (c *Collector) named(listing []sampler.ListedMapping) []proc.Mapping {
	ms := make([]proc.Mapping, len(listing))
	for i, l := range listing {
		m := proc.Mapping{Start: l.Start, End: l.End, Offset: l.Offset, Deleted: l.Deleted}
		switch k, ok := c.listed[l.File]; {
		case l.VDSO:
			m.Path = "[vdso]"
		case l.File.Inode == 0 || !ok:
			return nil
		default:
			m.Dev, m.Inode, m.Path = k.Dev, k.Inode, c.files[k].path
		}
		ms[i] = m
	}
	return ms
}

// maxCgroups bounds the cgroups known by the kernel's key: more, and they
// are learned again.
const maxCgroups = 4096

// learn snapshots the process np with read and names its files from then
// on. What the kernel told of it (np's listing, cgroups) is matched to what
// read found, for the processes after it.
func (c *Collector) learn(np sampler.NewProc, read func() (*proc.Process, error)) {
	c.mu.Lock()
	full := len(c.procs) >= maxProcs
	if full {
		c.skipped++
	}
	c.mu.Unlock()
	if full {
		return
	}
	p, err := read()
	if err != nil {
		return // gone already: its samples keep their names from the kernel only
	}
	c.sym.Learn(p)
	k := procKey{np.PID, np.Generation}
	c.mu.Lock()
	c.learnTables(p, k.generation, np)
	c.procs[k] = &procEntry{p: p}
	c.countFiles(p.Mappings, 1)
	if np.Listed {
		c.matchListed(np.Mappings, p)
	}
	if _, ok := c.cgroups[np.Cgroups]; !ok && np.Cgroups != 0 && p.Cgroup != "" { // "": unread (gone), or the root
		c.learnCgroups(np.Cgroups, p.Cgroups())
	}
	c.mu.Unlock()
	in, _, err := c.pythonOf(k, p, np)
	if jvm := c.jvmOf(p); np.Listed && !jvm {
		c.tellQuiet(np.Mappings, in, err)
	}
}

// learnCgroups notes the cgroups the kernel's key names, and tells the
// kernel it knows them (SetQuiet). Callers hold mu.
func (c *Collector) learnCgroups(key uint64, cg proc.Cgroups) {
	if len(c.cgroups) >= maxCgroups {
		if c.quiet != nil {
			for k := range c.cgroups {
				_ = c.quiet.k.DeleteQuietCgroups(k) // not there: nothing to undo
			}
		}
		clear(c.cgroups)
	}
	c.cgroups[key] = cg
	if c.quiet != nil {
		_ = c.quiet.k.SetQuietCgroups(key) // full: its processes wake the agent
	}
}

// tellQuiet tells the kernel of the files of listing that are matched, a
// process that needed nothing more at once, or only its interpreter in
// (nil: none), which it is told of first (SetQuiet); in and pyErr are
// what python.Finder.Find said of the process. Of a process whose
// interpreter could not be read (python.ErrUnread), nothing: its files
// would make the processes after it quiet, their Python frames unread.
func (c *Collector) tellQuiet(listing []sampler.ListedMapping, in *python.Interpreter, pyErr error) {
	if errors.Is(pyErr, python.ErrUnread) {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.quiet == nil {
		return
	}
	if in != nil {
		i := slices.IndexFunc(listing, func(l sampler.ListedMapping) bool { return l.Start == in.Mapping.Start })
		if i < 0 || !c.quiet.addPython(in.Mapping.Key(), listing[i].File, listing[i].Offset, in) {
			return
		}
	}
	for _, l := range listing {
		if l.VDSO {
			c.quiet.add(proc.FileKey{}, sampler.KernelFile{}, 0)
		} else if k, ok := c.listed[l.File]; ok {
			c.quiet.add(k, l.File, l.Offset)
		}
	}
}

// matchListed notes what /proc calls each file the kernel listed of p and
// has not been matched yet, pairing the mappings by address: with an
// overlay file system (a container's) the kernel holds another inode than
// the one /proc shows. Callers hold mu, with p's files counted.
func (c *Collector) matchListed(listing []sampler.ListedMapping, p *proc.Process) {
	for _, l := range listing {
		if _, ok := c.listed[l.File]; ok || l.File.Inode == 0 {
			continue
		}
		m := p.Find(l.Start)
		if m == nil || m.Start != l.Start || m.End != l.End || m.Inode == 0 {
			continue
		}
		k := m.Key()
		c.listed[l.File] = k
		c.files[k].listedAs = l.File
	}
}

// Refresh reads the mappings of a known process image again, after it
// ran code outside them (a library loaded since it was learned); it is the
// sampler's OnStale callback.
func (c *Collector) Refresh(pid, generation uint32) {
	k := procKey{pid, generation}
	if p := c.entry(k); p != nil {
		c.readAgain(k, p)
	}
}

// readAgain is reread, and learns the runtimes the process runs (its
// interpreter, a JVM) from what it maps now: a process read as its loader
// mapped its libraries may have lacked them.
func (c *Collector) readAgain(k procKey, p *proc.Process) *proc.Process {
	fresh := c.reread(k, p)
	if fresh != nil {
		c.pythonOf(k, fresh, sampler.NewProc{})
		c.jvmOf(fresh)
	}
	return fresh
}

// relisted is Refresh for a process the kernel listed again: its files
// named from the listing when all are known, which spares reading
// /proc, else read from /proc and matched to the listing, for the
// processes after it.
func (c *Collector) relisted(np sampler.NewProc) {
	k := procKey{np.PID, np.Generation}
	c.mu.Lock()
	e := c.procs[k]
	var named []proc.Mapping
	if e != nil && np.Listed {
		named = c.named(np.Mappings)
	}
	c.mu.Unlock()
	if e == nil {
		return // not learned: nothing to refresh
	}
	p := e.p
	if named == nil {
		if p = c.reread(k, p); p == nil {
			return
		}
		if np.Listed {
			c.mu.Lock()
			c.matchListed(np.Mappings, p)
			c.mu.Unlock()
		}
	} else {
		next := *p
		next.Mappings = named
		c.sym.Learn(&next)
		p = c.replace(k, p, &next, np)
	}
	if p == nil {
		return
	}
	in, looked, err := c.pythonOf(k, p, np)
	if jvm := c.jvmOf(p); !np.Listed || jvm {
		return
	}
	if !looked {
		in, err = c.pyFinder.Find(p)
	}
	c.tellQuiet(np.Mappings, in, err)
}

// reread replaces the snapshot p of process image k by one with the
// process's current mappings and returns it; nil when the process is gone.
// Profiles being built keep the snapshot they hold.
func (c *Collector) reread(k procKey, p *proc.Process) *proc.Process {
	fresh, err := proc.Read(int(k.pid))
	if err != nil || fresh.StartTime != p.StartTime {
		return nil
	}
	c.sym.Learn(fresh)
	// JIT code may be what is new; Read learns the namespace PID that
	// names its map only once there is some.
	next := *p
	next.Mappings, next.NSPID = fresh.Mappings, fresh.NSPID
	return c.replace(k, p, &next, sampler.NewProc{})
}

// replace makes next the snapshot of process image k in place of p, and
// returns it; the one there if p was replaced already, nil if k is
// forgotten. np is what the kernel said of next (its tables filled).
func (c *Collector) replace(k procKey, p, next *proc.Process, np sampler.NewProc) *proc.Process {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.procs[k]
	if e == nil {
		return nil
	}
	if e.p != p {
		return e.p // read again already
	}
	c.learnTables(next, k.generation, np)
	// The new snapshot's files first: a file only this process maps must
	// not drop to none between, which would forget what its listing taught
	// (the later processes of a short-lived binary then unnamed).
	c.countFiles(next.Mappings, 1)
	c.countFiles(p.Mappings, -1)
	e.p = next
	return next
}

// learnTables hands the unwinder process image p, of which the kernel said
// np. Callers hold mu.
func (c *Collector) learnTables(p *proc.Process, generation uint32, np sampler.NewProc) {
	switch {
	case c.unwinder != nil && c.quiet != nil:
		c.quiet.learnFilled(np, func() { c.unwinder.Learn(p, generation) })
	case c.unwinder != nil:
		c.unwinder.Learn(p, generation)
	}
}

// countFiles adds delta to the mappings counted per file; adding, it makes
// mappings share their file's path. Callers hold mu.
func (c *Collector) countFiles(mappings []proc.Mapping, delta int) {
	for i := range mappings {
		m := &mappings[i]
		if m.Inode == 0 {
			continue
		}
		k := m.Key()
		u := c.files[k]
		if u == nil {
			u = &fileUse{path: m.Path}
			c.files[k] = u
		} else if delta > 0 && m.Path == u.path {
			m.Path = u.path
		}
		if u.mappings += delta; u.mappings <= 0 {
			u.mappings, u.unmapped = 0, c.round
		}
	}
}

// keepFileRounds is how many Forget rounds a file stays known after the
// last process mapping it is forgotten: a program run every few minutes
// (a cron job, a health check's shell) finds its files known, is
// announced without waking the agent and named from symbols already read.
// The window that learned python3's files anew cost the agent 24-31 ms,
// against 4.3 for the windows after it (docs/BENCHMARKS.md). The
// symbolizer and the Python Finder keep a file while Maps reports it;
// the symbolizer's open handle meanwhile keeps the inode from naming
// another file, and the kernel's keys hold its generation.
const keepFileRounds = 30

// forgetFiles forgets the files no process has mapped for keepFileRounds.
// Callers hold mu.
func (c *Collector) forgetFiles() {
	for k, u := range c.files {
		if u.mappings > 0 || u.unmapped+keepFileRounds > c.round {
			continue
		}
		delete(c.files, k)
		if c.listed[u.listedAs] == k {
			delete(c.listed, u.listedAs)
		}
		if c.quiet != nil {
			c.quiet.forget(k)
		}
	}
}

// Stats count what the Collector holds and skipped.
type Stats struct {
	// ProcessesSkipped counts new processes not learned because maxProcs
	// were known.
	ProcessesSkipped uint64
	// Files is the files known processes map, and those they mapped in
	// the last keepFileRounds rounds.
	Files int
	// PythonProcesses is the CPython processes whose Python frames are
	// read; PythonUnsupported counts those of versions flint cannot read
	// (their stacks stay native), PythonNote says why for the first.
	PythonProcesses   int
	PythonUnsupported uint64
	PythonNote        string
	// ProcessesListed counts new processes named from the kernel's listing
	// of their mappings, without reading /proc/PID/maps.
	ProcessesListed uint64
}

// Stats returns the Collector's counters.
func (c *Collector) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return Stats{ProcessesSkipped: c.skipped, Files: len(c.files),
		PythonProcesses: len(c.pythons), PythonUnsupported: c.pyUnsupported, PythonNote: c.pyNote,
		ProcessesListed: c.listedLearned}
}

// Maps reports whether a known process maps the file; it tells
// symbol.Symbolizer.Trim which binaries are still in use.
func (c *Collector) Maps(k proc.FileKey) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.files[k] != nil
}

// Processes returns how many process images are known.
func (c *Collector) Processes() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.procs)
}

// forgetRounds is how many Forget rounds a process that no sample named
// survives after it exits.
const forgetRounds = 2

// recheckRounds is how many Forget rounds a process found running, not
// sampled since, waits before /proc is read again for it. The sampler
// tells of exits (Exited); /proc answers for the few it could not (its
// ring full), so a node's quiet long-lived processes, most of them,
// cost a read each every five minutes, not every window.
const recheckRounds = 30

// Forget drops processes that exited and were not named in the last
// rounds (those the sampler did not tell of, once /proc says so; see
// recheckRounds), and the CPython interpreters that no process has
// mapped for many rounds (python.Finder.Trim); the agent calls it once a
// window.
// Profiles already built keep their names.
func (c *Collector) Forget(round uint64) {
	c.mu.Lock()
	c.round = round
	var stale []procKey
	for k, e := range c.procs {
		switch {
		case e.lastUsed+forgetRounds > round:
		case e.exited:
			c.drop(k)
		case round >= e.nextCheck:
			stale = append(stale, k)
		}
	}
	c.mu.Unlock()
	// The images of one PID (before and after an exec) share its process:
	// its start time is read once.
	starts := map[uint32]startTime{}
	for _, k := range stale {
		st, ok := starts[k.pid]
		if !ok {
			st.ticks, st.err = proc.StartTime(int(k.pid))
			starts[k.pid] = st
		}
		c.mu.Lock()
		if e := c.procs[k]; st.err == nil && e != nil && st.ticks == e.p.StartTime {
			e.nextCheck = round + recheckRounds // still runs under its PID
		} else {
			c.drop(k)
		}
		c.mu.Unlock()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.forgetFiles()
	c.pyFinder.Trim(func(k proc.FileKey) bool { return c.files[k] != nil })
}

// drop forgets process image k. Callers hold mu.
func (c *Collector) drop(k procKey) {
	e := c.procs[k]
	if e == nil {
		return
	}
	c.countFiles(e.p.Mappings, -1)
	delete(c.procs, k)
	if c.unwinder != nil {
		c.unwinder.Forget(k.pid, k.generation, e.exited)
	}
	c.forgetPython(k, e.exited)
}

// Exited notes that process image (pid, generation) has exited (the
// sampler's OnExit): Forget drops it without reading /proc, and the
// kernel entries it listed itself went with it.
func (c *Collector) Exited(pid, generation uint32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e := c.procs[procKey{pid, generation}]; e != nil {
		e.exited = true
	}
}

func (c *Collector) entry(k procKey) *proc.Process {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e := c.procs[k]; e != nil {
		return e.p
	}
	return nil
}

// startTime is what proc.StartTime read of a PID.
type startTime struct {
	ticks uint64
	err   error
}

// Filter decides from a sample's labels whether a profile keeps it; nil
// keeps all.
type Filter func(labels map[string]string) bool

// Options describe the profile Profile builds.
type Options struct {
	Start    time.Time
	Duration time.Duration
	Period   time.Duration // CPU time one sample stands for
	Keep     Filter
	// Round marks the processes named as in use, for Forget.
	Round uint64
	// ThreadIDs adds the tid label. A one-shot recording wants it; the
	// agent does not: a label set per thread would multiply what it stores,
	// and the thread name says what a thread is for.
	ThreadIDs bool
}

// Profile names samples and returns them as a profile.
func (c *Collector) Profile(samples []sampler.Sample, o Options) *profile.Profile {
	b := c.builder()
	defer c.keepBuilder(b)
	b.round, b.threadIDs = o.Round, o.ThreadIDs
	p := &profile.Profile{Start: o.Start, Duration: o.Duration, Period: o.Period}
	for i := range samples {
		labels := b.labelsOf(&samples[i])
		if o.Keep != nil && !o.Keep(labels) {
			continue
		}
		stack := b.stack(&samples[i])
		k := mergeKey{labels: reflect.ValueOf(labels).UnsafePointer(), stack: stack.id}
		if prev := b.merged[k]; prev != nil {
			prev.Count += int64(samples[i].Count)
			continue
		}
		s := &profile.Sample{Count: int64(samples[i].Count), Labels: labels, Stack: stack.locs}
		b.merged[k] = s
		p.Samples = append(p.Samples, s)
	}
	return p
}

// builder returns the builder the last Profile kept, or a new one when
// none is spare (Profiles run at once).
func (c *Collector) builder() *builder {
	c.mu.Lock()
	b := c.spare
	c.spare = nil
	c.mu.Unlock()
	if b != nil {
		return b
	}
	return &builder{c: c,
		kernLocs:  addrLocs{{}, {}},
		procLocs:  map[procLoc]*profile.Location{},
		pyLocs:    map[symbol.Frame]*profile.Location{},
		pyIDs:     map[python.FrameID]*profile.Location{},
		mappings:  map[*proc.Mapping]*mappingBias{},
		linked:    map[linkedKey]*linkedMapping{},
		kernMaps:  map[string]*profile.Mapping{},
		stacks:    map[stackKey]namedStack{},
		stackIDs:  map[string]int{},
		merged:    map[mergeKey]*profile.Sample{},
		refreshed: map[procKey]bool{},
		jitAsked:  map[procKey]bool{},
		labelSets: map[labelSetKey]map[string]string{},
	}
}

// maxSpareLocations bounds the locations of a builder kept for the next
// Profile: a burst's window should not hold its maps' room for good.
const maxSpareLocations = 1 << 16

// keepBuilder clears b and keeps it for the next Profile: cleared maps
// keep their room, so windows alike in size name their samples without
// growing maps anew, most of what naming a window allocated.
func (c *Collector) keepBuilder(b *builder) {
	if len(b.procLocs)+len(b.kernLocs[0])+len(b.kernLocs[1]) > maxSpareLocations {
		return
	}
	clear(b.kernLocs[0])
	clear(b.kernLocs[1])
	clear(b.procLocs)
	clear(b.pyLocs)
	clear(b.pyIDs)
	clear(b.mappings)
	clear(b.linked)
	clear(b.kernMaps)
	clear(b.stacks)
	clear(b.stackIDs)
	clear(b.merged)
	clear(b.refreshed)
	clear(b.jitAsked)
	clear(b.labelSets)
	b.lastLinked = lastLinked{}
	c.mu.Lock()
	c.spare = b
	c.mu.Unlock()
}

type builder struct {
	c          *Collector
	round      uint64
	threadIDs  bool
	kernLocs   addrLocs                           // the kernel's
	procLocs   map[procLoc]*profile.Location      // of user code not linked (linkedMapping.locs)
	pyLocs     map[symbol.Frame]*profile.Location // Python frames by what names them
	pyIDs      map[python.FrameID]*profile.Location
	mappings   map[*proc.Mapping]*mappingBias
	linked     map[linkedKey]*linkedMapping // shared by the processes of a binary
	kernMaps   map[string]*profile.Mapping
	stacks     map[stackKey]namedStack
	stackIDs   map[string]int // a stack's location pointers -> its id
	merged     map[mergeKey]*profile.Sample
	refreshed  map[procKey]bool
	jitAsked   map[procKey]bool // JVMs whose JIT map this Profile asked for
	labelSets  map[labelSetKey]map[string]string
	key        []byte // a stack's location pointers, scratch
	lastLinked lastLinked
}

// addrLocs holds locations by address, return addresses (named by the
// byte before) in [1]. Naming a window looks a location up for every
// frame, and Go's maps of integer keys take a faster path than those of
// struct keys (docs/BENCHMARKS.md).
type addrLocs [2]map[uint64]*profile.Location

func (a *addrLocs) at(addr uint64, isReturn bool) *profile.Location {
	return a[b2i(isReturn)][addr]
}

func (a *addrLocs) put(addr uint64, isReturn bool, l *profile.Location) {
	a[b2i(isReturn)][addr] = l
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// procLoc identifies a location of user code that is not at a binary's
// link-time address by the process it was sampled in and its address
// there.
type procLoc struct {
	proc     *proc.Process
	addr     uint64
	isReturn bool
}

// process returns the snapshot of a process image and marks it in use.
func (b *builder) process(k procKey) *proc.Process {
	b.c.mu.Lock()
	defer b.c.mu.Unlock()
	e := b.c.procs[k]
	if e == nil {
		return nil
	}
	e.lastUsed = b.round
	return e.p
}

// labelSetKey identifies the samples that share a label set.
type labelSetKey struct {
	pid, generation, tid uint32
	comm, thread         string
}

// labelsOf returns the label set of a sample, built once per distinct
// (process image, thread, names) in a Profile call: the set is the same for
// all of them, and building it reads the process table and build IDs.
func (b *builder) labelsOf(s *sampler.Sample) map[string]string {
	k := labelSetKey{pid: s.PID, generation: s.Generation, comm: s.Comm, thread: s.Thread}
	if b.threadIDs {
		k.tid = s.TID
	}
	if l, ok := b.labelSets[k]; ok {
		return l
	}
	l := b.labels(s)
	b.labelSets[k] = l
	return l
}

// labels describes who ran: the sample's own IDs and names, and what the
// process snapshot adds (empty labels are left out).
func (b *builder) labels(s *sampler.Sample) map[string]string {
	// Sized for a process's labels, which most sets have: growing the map
	// to them cost as much again.
	l := make(map[string]string, 12)
	l[profile.LabelComm] = s.Comm
	l[profile.LabelThread] = s.Thread
	l[profile.LabelPID] = strconv.Itoa(int(s.PID))
	if b.threadIDs {
		l[profile.LabelTID] = strconv.Itoa(int(s.TID))
	}
	if b.c.node != "" {
		l[profile.LabelNode] = b.c.node
	}
	p := b.process(procKey{s.PID, s.Generation})
	if p == nil {
		return l
	}
	l[profile.LabelStartTime] = strconv.FormatUint(p.StartTime, 10)
	for _, kv := range [...]struct{ name, v string }{
		{profile.LabelExe, p.Exe},
		{profile.LabelBuildID, b.exeBuildID(p)},
		{profile.LabelCgroup, p.Cgroup},
		{profile.LabelContainerID, p.Container},
		{profile.LabelPodUID, p.Pod},
		{profile.LabelRuntime, b.c.runtimeOf(p)},
	} {
		if kv.v != "" {
			l[kv.name] = kv.v
		}
	}
	if b.c.namer != nil {
		b.c.namer.AddNames(l, p.Pod, p.Container)
	}
	return l
}

// exeBuildID returns the build ID of the mapping that holds p's executable.
func (b *builder) exeBuildID(p *proc.Process) string {
	for i := range p.Mappings {
		if m := &p.Mappings[i]; m.Path == p.Exe {
			return b.c.sym.BuildID(m.Key())
		}
	}
	return ""
}

// stackKey identifies a sample's stacks by the sampler's slices: it hands
// out one slice per distinct stack, so a window's repeats of a stack are
// named once.
type stackKey struct {
	proc           procKey
	user, kernel   *uint64
	nUser, nKernel int
	lost           bool
}

// namedStack is a named stack and its id, equal for equal stacks.
type namedStack struct {
	locs []*profile.Location
	id   int
}

// mergeKey identifies samples to merge: label sets are made once per
// distinct set (labelsOf), so the map's identity stands for its contents.
type mergeKey struct {
	labels unsafe.Pointer
	stack  int
}

// stack names a sample's stacks, leaf first: kernel frames, then user.
func (b *builder) stack(s *sampler.Sample) namedStack {
	k := stackKey{
		proc: procKey{s.PID, s.Generation},
		user: unsafe.SliceData(s.User), nUser: len(s.User),
		kernel: unsafe.SliceData(s.Kernel), nKernel: len(s.Kernel),
		lost: s.StackLost,
	}
	if st, ok := b.stacks[k]; ok {
		return st
	}
	p := b.process(k.proc)
	locs := make([]*profile.Location, 0, len(s.Kernel)+len(s.User)+1)
	for i, addr := range s.Kernel {
		locs = append(locs, b.kernel(addr, i > 0))
	}
	locs = b.userFrames(locs, k.proc, p, s.User)
	if s.StackLost {
		locs = append(locs, lostStack)
	}
	// Equal stacks in distinct slices get one id from their locations:
	// one pointer each for the builder's life (its maps hold them).
	b.key = b.key[:0]
	for _, l := range locs {
		b.key = binary.LittleEndian.AppendUint64(b.key, uint64(uintptr(unsafe.Pointer(l))))
	}
	id, ok := b.stackIDs[string(b.key)]
	if !ok {
		id = len(b.stackIDs)
		b.stackIDs[string(b.key)] = id
	}
	st := namedStack{locs: locs, id: id}
	b.stacks[k] = st
	return st
}

// lostStack stands for frames the kernel could not keep (stack map full):
// the sample still counts, under this name.
var lostStack = &profile.Location{Frames: []symbol.Frame{{Function: "[stack lost: stack map full]"}}}

func (b *builder) kernel(addr uint64, isReturn bool) *profile.Location {
	if l := b.kernLocs.at(addr, isReturn); l != nil {
		return l
	}
	frames, module := b.c.sym.Kernel(addr, isReturn)
	if module == "" {
		module = "[kernel.kallsyms]"
	} else {
		module = "[" + module + "]"
	}
	m := b.kernMaps[module]
	if m == nil {
		m = &profile.Mapping{File: module, Kernel: true}
		b.kernMaps[module] = m
	}
	l := &profile.Location{Address: addr, Mapping: m, Frames: frames}
	b.kernLocs.put(addr, isReturn, l)
	return l
}

func (b *builder) user(k procKey, p *proc.Process, addr uint64, isReturn bool) *profile.Location {
	if p == nil {
		return &profile.Location{Address: addr, Frames: []symbol.Frame{{Function: "[unknown]"}}}
	}
	// A location in a binary read at link time is kept by that address
	// with the binary's mapping, not by process: a short-lived process of
	// a known binary then adds no entries.
	linked := b.linkedOf(p, addr, isReturn)
	if linked != nil {
		if l := linked.shared.locs.at(addr-linked.bias, isReturn); l != nil {
			return l
		}
	} else if l := b.procLocs[procLoc{p, addr, isReturn}]; l != nil {
		return l
	}
	frames, m := b.c.sym.User(p, addr, isReturn)
	if m == nil && !b.refreshed[k] {
		// The address may be in a library loaded after the process was
		// first seen: re-read its mappings once.
		b.refreshed[k] = true
		if fresh := b.c.readAgain(k, p); fresh != nil {
			frames, m = b.c.sym.User(fresh, addr, isReturn)
		}
	}
	if m != nil && m.Inode == 0 && m.Path == "" && b.c.jit != nil && !b.jitAsked[k] {
		// JIT code: its map may lack it, or be older than it.
		b.jitAsked[k] = true
		b.c.jvmOf(p)
	}
	l := &profile.Location{Address: addr, Frames: frames}
	if m != nil {
		pm := b.mappingOf(m)
		l.Mapping = pm.Mapping
		if pm.shared != nil {
			// Processes of one binary share its locations.
			l.Address = addr - pm.bias
			if shared := pm.shared.locs.at(l.Address, isReturn); shared != nil {
				l = shared
			} else {
				pm.shared.locs.put(l.Address, isReturn, l)
			}
		}
	}
	// A linked location went in with its mapping above: linkedOf and the
	// symbolizer find the same mapping of p.
	if linked == nil {
		b.procLocs[procLoc{p, addr, isReturn}] = l
	}
	return l
}

// linkedOf returns the profile mapping of the mapping of p that holds
// addr when its binary can be read at link-time addresses; nil otherwise.
func (b *builder) linkedOf(p *proc.Process, addr uint64, isReturn bool) *mappingBias {
	lookup := addr
	if isReturn && lookup > 0 {
		lookup--
	}
	// A stack's frames run mostly in a few mappings, one after another.
	if last := b.lastLinked; last.p == p && last.m != nil && lookup >= last.m.Start && lookup < last.m.End {
		return last.pm
	}
	m := p.Find(lookup)
	if m == nil || m.Inode == 0 && m.Path != "[vdso]" {
		return nil
	}
	pm := b.mappingOf(m)
	if pm.shared == nil {
		return nil
	}
	b.lastLinked = lastLinked{p, m, pm}
	return pm
}

// lastLinked is the mapping linkedOf found last, of process p.
type lastLinked struct {
	p  *proc.Process
	m  *proc.Mapping
	pm *mappingBias
}

// mappingOf returns the profile mapping of m, made once per Profile.
func (b *builder) mappingOf(m *proc.Mapping) *mappingBias {
	pm := b.mappings[m]
	if pm == nil {
		pm = b.mapping(m)
		b.mappings[m] = pm
	}
	return pm
}

// mapping describes a mapping for profiles, at the addresses its binary
// was linked at when it can be read: every process running the binary
// then gets the same mapping and locations, wherever ASLR put it, so a
// new process of a known binary adds no mappings, locations or stacks to
// the store, only its labels. Tools that name addresses (pprof, addr2line)
// take link-time addresses as they are.
func (b *builder) mapping(m *proc.Mapping) *mappingBias {
	bias, linked := b.c.sym.Bias(m) // else runtime addresses, per process
	pm := profile.Mapping{Start: m.Start - bias, Limit: m.End - bias, Offset: m.Offset, File: m.Path, BuildID: b.c.sym.BuildID(m.Key())}
	if !linked {
		return &mappingBias{Mapping: &pm}
	}
	// The file's identity too: a binary rebuilt in place under one path,
	// with no build ID, is another binary.
	k := linkedKey{m.Key(), pm}
	shared := b.linked[k]
	if shared == nil {
		shared = &linkedMapping{Mapping: pm, locs: addrLocs{{}, {}}}
		b.linked[k] = shared
	}
	return &mappingBias{Mapping: &shared.Mapping, bias: bias, shared: shared}
}

// linkedMapping is the profile mapping of a binary at its link-time
// addresses, shared by its processes, and its locations by those
// addresses.
type linkedMapping struct {
	profile.Mapping
	locs addrLocs
}

type linkedKey struct {
	file proc.FileKey
	profile.Mapping
}

// mappingBias is a profile mapping and, when it is a binary's at its
// link-time addresses (shared), how far the process loaded it from there.
type mappingBias struct {
	*profile.Mapping
	bias   uint64
	shared *linkedMapping
}
