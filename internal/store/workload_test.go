package store

import (
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"time"

	"github.com/flint-dev/flint/internal/profile"
	"github.com/flint-dev/flint/internal/symbol"
)

// workload generates the agent's windows as the brief describes them: 10 s
// windows of ~1980 samples (2 CPUs × 99 Hz) over ~300 distinct
// (labels, stack) pairs: 50 processes of 5 executables, 6 stacks each of
// depth 20-40, drawn from 60 stacks per executable. Most of it repeats
// from window to window, with churn: 10 processes get a new pid every hour
// and 6 stack slots a new stack every 10 minutes. Locations and label maps
// are shared between windows, as the agent's collector shares them.
type workload struct {
	base      time.Time
	exes      []*profile.Mapping
	libc      *profile.Mapping
	kernel    *profile.Mapping
	userLocs  [][]*profile.Location // per executable
	libcLocs  []*profile.Location
	kernLocs  []*profile.Location
	stacks    map[[2]int][]*profile.Location // (slot, version)
	labelMaps map[[2]int]map[string]string   // (process, generation)
}

const (
	wlExes         = 5
	wlProcs        = 50
	wlStacksPerExe = 60
	wlStacksPerPid = 6
	wlSamples      = 1980
	wlWindow       = 10 * time.Second
	wlPeriod       = time.Second / 99
)

func newWorkload(base time.Time) *workload {
	w := &workload{
		base:      base,
		libc:      &profile.Mapping{Start: 0x7f0000000000, Limit: 0x7f0000200000, Offset: 0x28000, File: "/usr/lib/x86_64-linux-gnu/libc.so.6", BuildID: "6e3c087aca9b39549e4ba92c451f1e399b586e28"},
		kernel:    &profile.Mapping{File: "[kernel.kallsyms]", Kernel: true},
		stacks:    map[[2]int][]*profile.Location{},
		labelMaps: map[[2]int]map[string]string{},
	}
	rng := rand.New(rand.NewPCG(1, 1))
	for e := range wlExes {
		m := &profile.Mapping{Start: 0x400000, Limit: 0x1400000, File: fmt.Sprintf("/usr/local/bin/svc%d", e),
			BuildID: fmt.Sprintf("%040x", 0xabcdef0123+e)}
		w.exes = append(w.exes, m)
		var locs []*profile.Location
		for i := range 500 {
			l := &profile.Location{Address: 0x401000 + uint64(i)*0x48, Mapping: m}
			// A third of the addresses have inlined calls.
			for f := range 1 + rng.IntN(3)/2*(1+rng.IntN(2)) {
				l.Frames = append(l.Frames, symbol.Frame{
					Function: fmt.Sprintf("github.com/example/svc%d/pkg%d.(*Type%d).Method%d", e, i%23, (i+f)%7, i*3+f),
					File:     fmt.Sprintf("/src/svc%d/pkg%d/file%d.go", e, i%23, (i+f)%5),
					Line:     10 + rng.IntN(900),
				})
			}
			locs = append(locs, l)
		}
		w.userLocs = append(w.userLocs, locs)
	}
	for i := range 60 {
		w.libcLocs = append(w.libcLocs, &profile.Location{Address: 0x7f0000030000 + uint64(i)*0x90, Mapping: w.libc,
			Frames: []symbol.Frame{{Function: fmt.Sprintf("__libc_fn%d", i)}}})
	}
	for i := range 150 {
		w.kernLocs = append(w.kernLocs, &profile.Location{Address: 0xffffffff81000000 + uint64(i)*0x130, Mapping: w.kernel,
			Frames: []symbol.Frame{{Function: fmt.Sprintf("kernel_fn%d", i)}}})
	}
	return w
}

// stack returns stack slot s in version v: leaf first, kernel frames on
// some, then libc on some, then the executable's frames.
func (w *workload) stack(s, v int) []*profile.Location {
	if st, ok := w.stacks[[2]int{s, v}]; ok {
		return st
	}
	rng := rand.New(rand.NewPCG(uint64(s), uint64(v)))
	exe := s % wlExes
	depth := 20 + rng.IntN(21)
	var st []*profile.Location
	if rng.IntN(3) == 0 {
		for range 2 + rng.IntN(8) {
			st = append(st, w.kernLocs[rng.IntN(len(w.kernLocs))])
		}
	}
	if rng.IntN(2) == 0 {
		st = append(st, w.libcLocs[rng.IntN(len(w.libcLocs))])
	}
	user := w.userLocs[exe]
	for len(st) < depth-1 {
		st = append(st, user[rng.IntN(len(user))])
	}
	st = append(st, user[0]) // main.main-like root
	w.stacks[[2]int{s, v}] = st
	return st
}

func (w *workload) labels(p, gen int) map[string]string {
	if l, ok := w.labelMaps[[2]int{p, gen}]; ok {
		return l
	}
	exe := p % wlExes
	pid := 1000 + p + 100*gen
	l := map[string]string{
		"pid":        strconv.Itoa(pid),
		"start_time": strconv.Itoa(1_000_000 + pid*37),
		"comm":       fmt.Sprintf("svc%d", exe),
		"thread":     fmt.Sprintf("worker-%d", p%3),
		"exe":        w.exes[exe].File,
		"build_id":   w.exes[exe].BuildID,
		"cgroup":     fmt.Sprintf("/kubepods/pod%d/ctr%d", p/2, p),
		"container":  "",
		"pod":        "",
		"node":       "node-1",
	}
	if p%4 != 0 { // some processes run outside containers
		l["container"] = fmt.Sprintf("%012x", 0xc0ffee+p)
		l["pod"] = fmt.Sprintf("svc%d-%d", exe, p/2)
	}
	w.labelMaps[[2]int{p, gen}] = l
	return l
}

// window returns window i, starting at base + i·10 s.
func (w *workload) window(i int) *profile.Profile {
	p := &profile.Profile{Start: w.base.Add(time.Duration(i) * wlWindow), Duration: wlWindow, Period: wlPeriod}
	rng := rand.New(rand.NewPCG(uint64(i), 7))
	type pair struct {
		labels map[string]string
		stack  []*profile.Location
	}
	var pairs []pair
	for proc := range wlProcs {
		gen := 0
		if proc < 10 {
			gen = (i + proc*36) / 360
		}
		l := w.labels(proc, gen)
		exe := proc % wlExes
		for k := range wlStacksPerPid {
			local := (proc*7 + k*3) % wlStacksPerExe
			slot := exe + wlExes*local
			v := 0
			if slot%50 == 0 {
				v = i / 60
			}
			pairs = append(pairs, pair{l, w.stack(slot, v)})
		}
	}
	// Skewed counts: a few hot pairs, a long tail; shuffled per window.
	weights := make([]float64, len(pairs))
	var sum float64
	for k := range weights {
		weights[k] = 1 / math.Pow(float64(k+1), 0.8) * (0.5 + rng.Float64())
		sum += weights[k]
	}
	left := wlSamples
	for k, pr := range pairs {
		n := int(math.Round(weights[k] / sum * wlSamples))
		n = min(n, left)
		if k == len(pairs)-1 {
			n = left
		}
		left -= n
		if n == 0 {
			continue
		}
		p.Samples = append(p.Samples, &profile.Sample{Stack: pr.stack, Count: int64(n), Labels: pr.labels})
	}
	return p
}

// canonical flattens samples to "labels|stack" → count, merging equal
// ones, so profiles built from different objects compare by content.
func canonical(samples []*profile.Sample) map[string]int64 {
	out := map[string]int64{}
	locs := map[*profile.Location]string{} // the same locations recur
	var b []byte
	for _, s := range samples {
		b = b[:0]
		for _, k := range slices.Sorted(maps.Keys(s.Labels)) {
			b = strconv.AppendQuote(append(b, k...), s.Labels[k])
			b = append(b, ',')
		}
		b = append(b, '|')
		for _, l := range s.Stack {
			ls, ok := locs[l]
			if !ok {
				ls = fmt.Sprintf("%#x", l.Address)
				if m := l.Mapping; m != nil {
					ls += fmt.Sprintf("@%s[%#x-%#x+%#x,%s,%v]", m.File, m.Start, m.Limit, m.Offset, m.BuildID, m.Kernel)
				}
				for _, f := range l.Frames {
					ls += fmt.Sprintf("(%s %s:%d)", f.Function, f.File, f.Line)
				}
				locs[l] = ls
			}
			b = append(append(b, ls...), ';')
		}
		out[string(b)] += s.Count
	}
	return out
}

// agentLike returns p as the agent's collector hands windows over: new
// Location and Mapping objects and a new label map per sample each window,
// sharing only the symbolizer's cached frame slices.
func agentLike(p *profile.Profile) *profile.Profile {
	locs := map[*profile.Location]*profile.Location{}
	mappings := map[*profile.Mapping]*profile.Mapping{}
	out := *p
	out.Samples = make([]*profile.Sample, len(p.Samples))
	for i, s := range p.Samples {
		stack := make([]*profile.Location, len(s.Stack))
		for j, l := range s.Stack {
			nl := locs[l]
			if nl == nil {
				c := *l
				if l.Mapping != nil {
					m := mappings[l.Mapping]
					if m == nil {
						mc := *l.Mapping
						m = &mc
						mappings[l.Mapping] = m
					}
					c.Mapping = m
				}
				nl = &c
				locs[l] = nl
			}
			stack[j] = nl
		}
		out.Samples[i] = &profile.Sample{Stack: stack, Count: s.Count, Labels: maps.Clone(s.Labels)}
	}
	return &out
}
