package trace

import (
	"cmp"
	"fmt"
	"slices"
	"time"
)

// Result is what a trace counted.
type Result struct {
	Target
	// Duration is how long the probes were attached.
	Duration time.Duration
	// Cost is what a probe costs on this machine, measured at Start.
	Cost    Cost
	Latency bool
	// MaxOverhead is the budget the trace ran under (0: none).
	MaxOverhead float64
	Functions   []FunctionResult
	// Processes are those that hit a probe (and, for -p, the process),
	// in PID order.
	Processes []ProcessResult
	// Exited is set when the traced process (-p) exited during the trace.
	Exited bool
	Errors Errors
}

// FunctionResult is one function's calls, summed over processes.
type FunctionResult struct {
	Function
	// Probes is how many uprobes and uretprobes it had.
	Probes int
	// Attached is how long its probes were attached (until the end, or
	// until the overhead guard detached them).
	Attached time.Duration
	Calls    uint64
	// Rate is Calls per second of Attached.
	Rate float64
	// Returns are the calls timed in Latency; Unmatched returns had no
	// entry (the call began before the probes were attached); Lost ones
	// had their entry time evicted from the bounded map.
	Returns, Unmatched, Lost uint64
	// Latency is nil unless calls were timed.
	Latency *Histogram
	// CostPerCall is the probe cost of one call; ProbeCPU is Rate ×
	// CostPerCall, the share of one CPU its probes took.
	CostPerCall time.Duration
	ProbeCPU    float64
	// Detached is set when the overhead guard detached the function.
	Detached *Detach
	// Stacks are where the calls came from, with Options.Stacks; most
	// calls first.
	Stacks []CallStack
}

// CallStack is the calls of a function from one user stack of one process.
type CallStack struct {
	PID int
	// PCs are the function's entry, then return addresses, leaf first;
	// empty beyond the caller when the stack could not be walked.
	PCs   []uint64
	Calls uint64
	// Time is the calls' time, with Options.Latency.
	Time time.Duration
}

// ProcessResult is one traced process and what tracing cost it.
type ProcessResult struct {
	PID  int
	Comm string
	// Traced is how long the process was followed: from the start of
	// the trace or of the process, to the end of either.
	Traced time.Duration
	// CPU is the process's CPU use while traced, in CPU seconds per
	// second (1 is one busy CPU); ProbeCPU the part of it in probes.
	CPU, ProbeCPU float64
	// Slowdown is Slowdown(CPU, ProbeCPU): +Inf when the probes took all
	// its CPU, 0 when it used none.
	Slowdown float64
	Calls    uint64
	Exited   bool
}

// Errors counts what the BPF program could not record.
type Errors struct {
	// CountsFull: hits lost because the (process, function) map was full.
	CountsFull uint64 `json:"counts_full"`
	// FramesFull, StartsFull: calls not timed because a map was full.
	FramesFull uint64 `json:"frames_full"`
	StartsFull uint64 `json:"starts_full"`
	// StacksFull: calls without a stack because the stack map was full;
	// StacksLost: calls counted without their walk (unreadable or full).
	StacksFull uint64 `json:"stacks_full,omitempty"`
	StacksLost uint64 `json:"stacks_lost,omitempty"`
	// Missed: probe hits the kernel did not run the program for, because
	// another BPF program was running on that CPU.
	Missed uint64 `json:"missed"`
}

func (t *Tracer) result() (*Result, error) {
	calls, errs, err := t.readCounts()
	if err != nil {
		return nil, err
	}
	res := &Result{Target: t.opts.Target, Duration: t.stopped.Sub(t.attached), Cost: t.cost,
		Latency: t.opts.Latency, MaxOverhead: t.opts.MaxOverhead, Errors: errs}
	for i := range t.funcs {
		f := &t.funcs[i]
		fr := FunctionResult{Function: *f, Attached: res.Duration, Detached: t.detached[i],
			CostPerCall: t.cost.PerCall(f, t.opts.Latency)}
		fr.Probes = len(f.Entries) + len(f.StackGrowth)
		if t.opts.Latency && f.NoLatency == "" {
			if f.Lang == Go {
				fr.Probes += len(f.Returns)
			} else {
				fr.Probes += len(f.Entries)
			}
		}
		if fr.Detached != nil {
			fr.Attached = fr.Detached.After
		}
		for k, c := range calls {
			if int(k.Func) == i+1 {
				fr.Calls += c.Calls
				fr.Returns += c.Returns
				fr.Unmatched += c.Unmatched
				fr.Lost += c.Lost
			}
		}
		if s := fr.Attached.Seconds(); s > 0 {
			fr.Rate = float64(fr.Calls) / s
			fr.ProbeCPU = fr.Rate * fr.CostPerCall.Seconds()
		}
		if t.opts.Latency && f.NoLatency == "" {
			if fr.Latency, err = t.histogram(i + 1); err != nil {
				return nil, err
			}
		}
		res.Functions = append(res.Functions, fr)
	}
	if t.opts.Stacks {
		if err := t.readStacks(res.Functions); err != nil {
			return nil, err
		}
	}
	for _, pid := range t.sortedPIDs() {
		p := t.procs[pid]
		pr := ProcessResult{PID: int(pid), Comm: p.comm, Exited: p.exited}
		for k, c := range calls {
			if k.Tgid == pid && k.Func > 0 {
				pr.Calls += c.Calls
			}
		}
		if secs := p.lastTime - p.baseTime; secs > 0 {
			pr.Traced = time.Duration(secs * float64(time.Second))
			pr.CPU = (p.last.cpu - p.base.cpu) / secs
			pr.ProbeCPU = p.probe / secs
			pr.Slowdown = Slowdown(pr.CPU, pr.ProbeCPU)
		}
		res.Processes = append(res.Processes, pr)
	}
	slices.SortStableFunc(res.Processes, func(a, b ProcessResult) int { return cmp.Compare(a.PID, b.PID) })
	return res, nil
}

// maxStacks bounds the distinct stacks a trace keeps (1 KiB each);
// stackDepth is TRACE_STACK_DEPTH of bpf/trace.h.
const (
	maxStacks  = 4096
	stackDepth = 127
)

// readStacks adds to each function the stacks its calls came from.
func (t *Tracer) readStacks(fns []FunctionResult) error {
	var k traceStackKey
	var v traceStackCalls
	walks := map[int32][]uint64{}
	it := t.objs.StackCounts.Iterate()
	for it.Next(&k, &v) {
		if k.Func == 0 || int(k.Func) > len(fns) {
			continue // calibration
		}
		walk, ok := walks[k.Stack]
		if !ok && k.Stack >= 0 {
			var ips [stackDepth]uint64
			if err := t.objs.CallStacks.Lookup(uint32(k.Stack), &ips); err == nil {
				walk = ips[:]
				for len(walk) > 0 && walk[len(walk)-1] == 0 {
					walk = walk[:len(walk)-1]
				}
			}
			walks[k.Stack] = walk
		}
		// The walk's first PC is the entry; the caller's comes next.
		pcs := []uint64{}
		if len(walk) > 0 {
			pcs = append(pcs, walk[0])
		}
		if k.Caller != 0 {
			pcs = append(pcs, k.Caller)
		}
		if len(walk) > 1 {
			pcs = append(pcs, walk[1:]...)
		}
		f := &fns[k.Func-1]
		f.Stacks = append(f.Stacks, CallStack{PID: int(k.Tgid), PCs: pcs, Calls: v.Calls, Time: time.Duration(v.Ns)})
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("read stacks: %w", err)
	}
	for i := range fns {
		slices.SortFunc(fns[i].Stacks, func(a, b CallStack) int { return cmp.Compare(b.Calls, a.Calls) })
	}
	return nil
}
