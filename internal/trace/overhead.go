package trace

import (
	"cmp"
	"math"
	"slices"
	"time"
)

// Cost is what probes cost on this machine, measured by Calibrate.
//
// A uprobe is a breakpoint: the hit traps into the kernel, which runs the
// BPF program and then either emulates the instruction the breakpoint
// replaced (branches, pushes such as a C function's `push %rbp`; Linux 6.12
// emulates pushes) or executes it out of line with a single-step trap, a
// second round trip. So a hit costs one of two amounts, told apart by the
// probed instruction.
type Cost struct {
	// Hit is a hit on a single-stepped instruction (a Go function's entry,
	// which is its stack check, and any RET), counting the call.
	Hit time.Duration
	// HitEmulated is a hit on an emulated instruction.
	HitEmulated time.Duration
	// TimedCall is one call of a Go function whose latency is measured:
	// the entry and RET hits and the BPF work of matching them.
	TimedCall time.Duration
	// Floor is the median latency measured for an empty Go function: part
	// of the probes' own time shows in every measured latency.
	Floor time.Duration
	// Rounds is how many timing rounds each figure is the median of.
	Rounds int
}

// PerCall is what one call of f costs under the trace: its entry hit, plus
// with latency its return, a RET hit (Go) or a uretprobe, which takes one
// trap and no single step and is counted as an emulated hit.
func (c Cost) PerCall(f *Function, latency bool) time.Duration {
	entry := c.Hit
	if f.EntryEmulated {
		entry = c.HitEmulated
	}
	if !latency || f.NoLatency != "" {
		return entry
	}
	if f.Lang == Go {
		return max(c.TimedCall-c.Hit, 0) + entry
	}
	return entry + c.HitEmulated
}

// Overhead, as flint defines it:
//
//   - The probe time of a function is calls × cost per call: CPU time
//     spent in the kernel on behalf of the traced process, added to its
//     own work. Per second of trace it is "CPU seconds per second", the
//     share of one CPU the probes keep busy.
//   - The budget (--max-overhead, 2% by default) bounds the probe time of
//     all traced functions in all traced processes together, as a share
//     of one CPU: 2% is 20 ms of probe time per second. It is checked
//     200 ms after attaching and then every second, on the rates of the
//     last interval; when over, the most expensive functions are detached
//     until the rest fits.
//   - The slowdown of a process is its CPU use while traced divided by the
//     CPU use its work needed: Slowdown(cpu, probe) = cpu / (cpu - probe).
//     A CPU-bound process does that much less work per second; a process
//     that mostly waits spends that much more CPU on the same work, and
//     each traced call takes the probe cost longer.

// Slowdown estimates how many times slower a process runs while traced,
// from its CPU use and its probe time over the same period (both in CPU
// seconds per second). It returns 0 when the process used no CPU, and
// +Inf when the probes account for all of it (then the estimate says only
// that the process does almost nothing but hit probes).
func Slowdown(cpu, probe float64) float64 {
	if cpu <= 0 {
		return 0
	}
	if probe >= cpu {
		return math.Inf(1)
	}
	return cpu / (cpu - probe)
}

// overBudget picks the functions to detach: those with the highest probe
// time (CPU s/s), until what stays attached is within budget. load maps
// function index to probe time; the result is sorted by decreasing load.
func overBudget(load map[int]float64, budget float64) []int {
	var total float64
	ids := make([]int, 0, len(load))
	for id, l := range load {
		total += l
		ids = append(ids, id)
	}
	if budget <= 0 || total <= budget {
		return nil
	}
	slices.SortFunc(ids, func(a, b int) int { return cmp.Or(cmp.Compare(load[b], load[a]), cmp.Compare(a, b)) })
	var out []int
	for _, id := range ids {
		if total <= budget {
			break
		}
		out = append(out, id)
		total -= load[id]
	}
	return out
}
