// Package collect turns raw samples into named profiles: it learns each
// process when the sampler first sees it, then names every stack with the
// process snapshot and binaries taken at that moment.
package collect

import (
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/flint-dev/flint/internal/proc"
	"github.com/flint-dev/flint/internal/profile"
	"github.com/flint-dev/flint/internal/sampler"
	"github.com/flint-dev/flint/internal/symbol"
)

// Collector accumulates samples and names them into profiles.
type Collector struct {
	sym *symbol.Symbolizer

	mu      sync.Mutex
	procs   map[procKey]*proc.Process
	samples []sampler.Sample
}

// procKey is one process image: a PID and the sampler's generation for it.
type procKey struct{ pid, generation uint32 }

// New returns a Collector naming with sym.
func New(sym *symbol.Symbolizer) *Collector {
	return &Collector{sym: sym, procs: map[procKey]*proc.Process{}}
}

// NewProc snapshots a process the sampler just saw for the first time; it
// is the sampler's OnNewProc callback.
func (c *Collector) NewProc(pid, generation uint32) {
	p, err := proc.Read(int(pid))
	if err != nil {
		return // gone already: its samples keep their names from the kernel only
	}
	c.sym.Learn(p)
	c.mu.Lock()
	c.procs[procKey{pid, generation}] = p
	c.mu.Unlock()
}

// Processes returns how many process images were seen.
func (c *Collector) Processes() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.procs)
}

// Add keeps drained samples until the next Profile.
func (c *Collector) Add(samples []sampler.Sample) {
	c.mu.Lock()
	c.samples = append(c.samples, samples...)
	c.mu.Unlock()
}

// Filter decides which processes a profile keeps; nil keeps all. A process
// flint never managed to read is passed as nil.
type Filter func(p *proc.Process) bool

// Profile names the samples added since the last call and returns them
// as a profile; period is the CPU time one sample stands for.
func (c *Collector) Profile(start time.Time, duration, period time.Duration, keep Filter) *profile.Profile {
	c.mu.Lock()
	samples := c.samples
	c.samples = nil
	c.mu.Unlock()

	b := builder{c: c, keep: keep,
		locs:      map[locKey]*profile.Location{},
		mappings:  map[*proc.Mapping]*profile.Mapping{},
		kernMaps:  map[string]*profile.Mapping{},
		merged:    map[string]*profile.Sample{},
		refreshed: map[procKey]bool{},
		ids:       map[*profile.Location]int{},
	}
	p := &profile.Profile{Start: start, Duration: duration, Period: period}
	for i := range samples {
		if s := b.sample(&samples[i]); s != nil && b.merge(s) {
			p.Samples = append(p.Samples, s)
		}
	}
	return p
}

type builder struct {
	c         *Collector
	keep      Filter
	locs      map[locKey]*profile.Location
	mappings  map[*proc.Mapping]*profile.Mapping
	kernMaps  map[string]*profile.Mapping
	merged    map[string]*profile.Sample
	refreshed map[procKey]bool
	ids       map[*profile.Location]int
	key       strings.Builder
}

// id numbers locations so a stack has a compact merge key.
func (b *builder) id(l *profile.Location) int {
	n, ok := b.ids[l]
	if !ok {
		n = len(b.ids)
		b.ids[l] = n
	}
	return n
}

type locKey struct {
	proc     *proc.Process // nil for kernel addresses
	addr     uint64
	isReturn bool
}

func (b *builder) process(k procKey) *proc.Process {
	b.c.mu.Lock()
	defer b.c.mu.Unlock()
	return b.c.procs[k]
}

func (b *builder) sample(s *sampler.Sample) *profile.Sample {
	k := procKey{s.PID, s.Generation}
	p := b.process(k)
	if b.keep != nil && !b.keep(p) {
		return nil
	}
	out := &profile.Sample{
		Count: int64(s.Count),
		Labels: map[string]string{
			profile.LabelComm:   s.Comm,
			profile.LabelThread: s.Thread,
			profile.LabelPID:    strconv.Itoa(int(s.PID)),
			profile.LabelTID:    strconv.Itoa(int(s.TID)),
		},
	}
	for i, addr := range s.Kernel {
		out.Stack = append(out.Stack, b.kernel(addr, i > 0))
	}
	for i, addr := range s.User {
		out.Stack = append(out.Stack, b.user(k, p, addr, i > 0))
	}
	if s.StackLost {
		out.Stack = append(out.Stack, lostStack)
	}
	return out
}

// lostStack stands for frames the kernel could not keep (stack map full):
// the sample still counts, under this name.
var lostStack = &profile.Location{Frames: []symbol.Frame{{Function: "[stack lost: stack map full]"}}}

func (b *builder) kernel(addr uint64, isReturn bool) *profile.Location {
	k := locKey{addr: addr, isReturn: isReturn}
	if l := b.locs[k]; l != nil {
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
	b.locs[k] = l
	return l
}

func (b *builder) user(k procKey, p *proc.Process, addr uint64, isReturn bool) *profile.Location {
	if p == nil {
		return &profile.Location{Address: addr, Frames: []symbol.Frame{{Function: "[unknown]"}}}
	}
	lk := locKey{proc: p, addr: addr, isReturn: isReturn}
	if l := b.locs[lk]; l != nil {
		return l
	}
	frames, m := b.c.sym.User(p, addr, isReturn)
	if m == nil && !b.refreshed[k] {
		// The address may be in a library loaded after the process was
		// first seen: re-read its mappings once.
		b.refreshed[k] = true
		if fresh, err := proc.Read(int(k.pid)); err == nil && fresh.StartTime == p.StartTime {
			b.c.sym.Learn(fresh)
			p.Mappings = fresh.Mappings
			frames, m = b.c.sym.User(p, addr, isReturn)
		}
	}
	l := &profile.Location{Address: addr, Frames: frames}
	if m != nil {
		pm := b.mappings[m]
		if pm == nil {
			pm = &profile.Mapping{Start: m.Start, Limit: m.End, Offset: m.Offset, File: m.Path, BuildID: b.c.sym.BuildID(m.Key())}
			b.mappings[m] = pm
		}
		l.Mapping = pm
	}
	b.locs[lk] = l
	return l
}

// merge folds s into an earlier sample with the same labels and stack,
// reporting whether s is new.
func (b *builder) merge(s *profile.Sample) bool {
	b.key.Reset()
	for _, name := range []string{profile.LabelPID, profile.LabelTID, profile.LabelComm, profile.LabelThread} {
		b.key.WriteString(s.Labels[name])
		b.key.WriteByte(0)
	}
	for _, l := range s.Stack {
		b.key.WriteString(strconv.Itoa(b.id(l)))
		b.key.WriteByte(',')
	}
	if prev := b.merged[b.key.String()]; prev != nil {
		prev.Count += s.Count
		return false
	}
	b.merged[b.key.String()] = s
	return true
}
