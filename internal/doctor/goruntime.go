package doctor

import (
	"fmt"
	"slices"
	"strings"
)

// go-runtime-overhead: a Go program whose CPU goes mostly to its runtime
// (garbage collection, the scheduler, allocation, stack growth) rather than
// to its own work.
//
// Each sample of a Go process is classified by the innermost runtime frame
// of the run of runtime frames at its leaf (kernel frames skipped) that
// appears in runtimeClasses below. A sample whose leaf is user code, or a
// runtime helper the user called directly (memmove), is the program's own
// work. So GC assists inside mallocgc count as GC, and the wake-ups a
// channel send triggers count as scheduler.
//
// The runtime's waiting for work is not counted as its overhead: a thread
// parking because nothing is runnable (stopm), the network poller's wait
// (netpoll) and sysmon, the monitor thread. They cost the most in a lightly
// loaded server, where they are the price of going idle between requests
// and no change to the program's work lowers them (a Go HTTP server at 300
// requests/s, 0.11-0.13 CPU on a VM where system calls are dear, spent
// 22-25% of its samples there and 19-33% in the rest of the runtime,
// docs/BENCHMARKS.md). The finding shows that share as evidence.
//
// It fires when GC + scheduler + allocation + stack growth reach
// RuntimeShare of the process's samples (50%: a busy, allocation-heavy but
// healthy Go service measures 20-40%; above half, the runtime costs more
// than the work) and the process used at least RuntimeMinCPU (0.1 CPU;
// shares of an idle process are noise). The finding names the frames that
// call into the allocator most, which is where allocation can be cut.
func goRuntimeOverhead(d *Data, t Thresholds) []Finding {
	var out []Finding
	x := d.index()
	for pid := range x.byPID {
		p := d.Processes[pid]
		if p == nil || p.Go == nil {
			continue
		}
		cpu := d.processCPU(pid)
		if cpu < t.RuntimeMinCPU || x.samples[pid] < minSamples {
			continue
		}
		b := runtimeBreakdown(d, pid)
		share := b.overhead()
		if share < t.RuntimeShare {
			continue
		}
		f := Finding{
			ID: "go-runtime-overhead", PID: pid, Comm: d.Comm(pid),
			Summary: fmt.Sprintf("the Go runtime takes %s of %s's CPU (GC %s, scheduler %s, allocation %s, stack growth %s)",
				pct(share), d.Comm(pid), pct(b.share(classGC)), pct(b.share(classScheduler)), pct(b.share(classAlloc)), pct(b.share(classStack))),
			Cost: share * cpu,
		}
		for _, c := range []runtimeClass{classGC, classScheduler, classAlloc, classStack} {
			f.Evidence = append(f.Evidence, Evidence{Name: strings.ReplaceAll(string(c), " ", "_") + "_share", Value: b.share(c), Unit: "ratio",
				Text: fmt.Sprintf("%s: %s of its CPU samples", c, pct(b.share(c)))})
		}
		f.Evidence = append(f.Evidence, Evidence{Name: "idle_share", Value: b.share(classIdle), Unit: "ratio",
			Text: fmt.Sprintf("waiting for work (parked threads, the network poller, sysmon): %s of its CPU samples, not counted above", pct(b.share(classIdle)))})
		f.Evidence = append(f.Evidence, Evidence{Name: "process_cpu", Value: cpu, Unit: "CPU",
			Text: fmt.Sprintf("the process used %.2f CPU (%s)", cpu, p.Go.Version)})
		callers := b.topAllocators(3)
		for i, a := range callers {
			text := fmt.Sprintf("allocates %s of its CPU: %s", pct(a.share), a.caller)
			if a.own != (Frame{}) && a.own != a.caller {
				text += ", from " + a.own.String()
			}
			f.Evidence = append(f.Evidence, Evidence{Name: fmt.Sprintf("allocator_%d", i+1), Value: a.share, Unit: "ratio", Text: text})
		}
		if len(callers) > 0 {
			w := callers[0].own
			if w == (Frame{}) {
				w = callers[0].caller
			}
			f.Where = &w
		}
		gcAlloc := b.share(classGC) + b.share(classAlloc)
		switch {
		case gcAlloc >= b.share(classScheduler) && gcAlloc >= b.share(classStack):
			f.Fix = "Allocate less on the hot path: reuse buffers and objects (sync.Pool, a slice kept across calls), " +
				"preallocate slices and maps to their final size, avoid building strings and boxing values into interfaces " +
				"in loops; start with the allocating frames above. To trade memory for GC CPU meanwhile, raise GOGC or set GOMEMLIMIT."
		case b.share(classScheduler) >= b.share(classStack):
			f.Fix = "Hand off work between goroutines less often: batch many small tasks per goroutine or channel message, " +
				"keep a worker pool instead of a goroutine per tiny task, and check that GOMAXPROCS does not exceed the CPUs the process may use."
		default:
			f.Fix = "Goroutines grow their stacks repeatedly: reuse long-lived worker goroutines (their stacks stay grown) " +
				"and avoid deep recursion or large stack frames on freshly started goroutines."
		}
		f.Severity = severityOf(f.Cost, share)
		out = append(out, f)
	}
	return out
}

// minSamples is the fewest samples of a process for shares of its CPU to
// mean something (a 95% interval of about ±7 points at 50%).
const minSamples = 200

// runtimeClass is what the Go runtime was doing in a sample.
type runtimeClass string

const (
	classNone      runtimeClass = ""
	classGC        runtimeClass = "gc"
	classScheduler runtimeClass = "scheduler"
	classAlloc     runtimeClass = "allocation"
	classStack     runtimeClass = "stack growth"
	classIdle      runtimeClass = "idle"
)

// idleFuncs are where the runtime waits for work: a sample with one of them
// among its runtime frames is idle, whatever runs inside (futex, epoll).
var idleFuncs = []string{"runtime.stopm", "runtime.netpoll", "runtime.sysmon"}

// runtimeClasses classify runtime functions by name prefix, checked
// against the runtimes of Go 1.21 through 1.26 (findRunnable was
// findrunnable before 1.21; the mallocgc variants appeared in 1.24; the
// span-scanning functions belong to the Green Tea collector, default from
// 1.26). An entry ending in "(" or "." matches a method set or a package.
var runtimeClasses = []struct {
	prefix string
	class  runtimeClass
}{
	// Garbage collection: marking, assists, sweeping, scavenging, barriers.
	{"runtime.gcBgMarkWorker", classGC},
	{"runtime.gcDrain", classGC},
	{"runtime.gcAssistAlloc", classGC},
	{"runtime.gcMark", classGC},
	{"runtime.gcStart", classGC},
	{"runtime.gcSweep", classGC},
	{"runtime.gcWriteBarrier", classGC},
	{"runtime.gcFlushBgCredit", classGC},
	{"runtime.gcResetMarkState", classGC},
	{"runtime.markroot", classGC},
	{"runtime.scanobject", classGC},
	{"runtime.scanblock", classGC},
	{"runtime.scanstack", classGC},
	{"runtime.scanframeworker", classGC},
	{"runtime.scanSpan", classGC},
	{"runtime.scanObjectsSmall", classGC},
	{"runtime.greyobject", classGC},
	{"runtime.findObject", classGC},
	{"runtime.wbBufFlush", classGC},
	{"runtime.bgsweep", classGC},
	{"runtime.sweepone", classGC},
	{"runtime.bgscavenge", classGC},
	{"runtime.(*gcWork).", classGC},
	{"runtime.(*gcControllerState).", classGC},
	{"runtime.(*sweepLocked).", classGC},
	{"runtime.(*scavengerState).", classGC},
	{"runtime.(*spanQueue).", classGC},
	{"runtime.(*mspan).sweep", classGC},

	// Allocation.
	{"runtime.mallocgc", classAlloc},
	{"runtime.newobject", classAlloc},
	{"runtime.newarray", classAlloc},
	{"runtime.makeslice", classAlloc},
	{"runtime.growslice", classAlloc},
	{"runtime.makemap", classAlloc},
	{"runtime.rawstring", classAlloc},
	{"runtime.rawbyteslice", classAlloc},
	{"runtime.rawruneslice", classAlloc},
	{"runtime.nextFreeFast", classAlloc},
	{"runtime.heapSetType", classAlloc},
	{"runtime.(*mcache).", classAlloc},
	{"runtime.(*mcentral).", classAlloc},
	{"runtime.(*mheap).", classAlloc},

	// Stack growth.
	{"runtime.morestack", classStack},
	{"runtime.newstack", classStack},
	{"runtime.copystack", classStack},
	{"runtime.adjustframe", classStack},
	{"runtime.adjustpointers", classStack},
	{"runtime.stackalloc", classStack},
	{"runtime.stackfree", classStack},
	{"runtime.stackcacherefill", classStack},
	{"runtime.shrinkstack", classStack},

	// The scheduler: finding work, parking and waking threads and
	// goroutines, timers and the network poller it runs.
	{"runtime.schedule", classScheduler},
	{"runtime.findRunnable", classScheduler},
	{"runtime.findrunnable", classScheduler},
	{"runtime.stealWork", classScheduler},
	{"runtime.runqsteal", classScheduler},
	{"runtime.runqgrab", classScheduler},
	{"runtime.runqget", classScheduler},
	{"runtime.runqput", classScheduler},
	{"runtime.globrunq", classScheduler},
	{"runtime.park_m", classScheduler},
	{"runtime.goschedImpl", classScheduler},
	{"runtime.gosched_m", classScheduler},
	{"runtime.gopreempt_m", classScheduler},
	{"runtime.goexit0", classScheduler},
	{"runtime.mcall", classScheduler},
	{"runtime.execute", classScheduler},
	{"runtime.gogo", classScheduler},
	{"runtime.ready", classScheduler},
	{"runtime.goready", classScheduler},
	{"runtime.wakep", classScheduler},
	{"runtime.startm", classScheduler},
	{"runtime.handoffp", classScheduler},
	{"runtime.resetspinning", classScheduler},
	{"runtime.newproc", classScheduler},
	{"runtime.gfget", classScheduler},
	{"runtime.gfput", classScheduler},
	{"runtime.notesleep", classScheduler},
	{"runtime.notewakeup", classScheduler},
	{"runtime.futexsleep", classScheduler},
	{"runtime.futexwakeup", classScheduler},
	{"runtime.mPark", classScheduler},
	{"runtime.checkTimers", classScheduler},
	{"runtime.netpoll", classScheduler},
	{"runtime.retake", classScheduler},
	{"runtime.preemptone", classScheduler},
	{"runtime.usleep", classScheduler},
	{"runtime.osyield", classScheduler},
	{"runtime.mstart", classScheduler},
	{"runtime.acquirep", classScheduler},
	{"runtime.releasep", classScheduler},
	{"runtime.pidle", classScheduler},
	{"runtime.(*timers).", classScheduler},
}

// classifyFunc returns the class of one runtime function.
func classifyFunc(fn string) runtimeClass {
	for _, c := range runtimeClasses {
		if strings.HasPrefix(fn, c.prefix) {
			return c.class
		}
	}
	return classNone
}

// isRuntimeFunc reports whether fn is part of the Go runtime.
func isRuntimeFunc(fn string) bool {
	return strings.HasPrefix(fn, "runtime.") || strings.HasPrefix(fn, "internal/runtime/")
}

// classifyStack classifies a sample (frames leaf first) and returns, for an
// allocation or GC assist, the index of the first frame outside the
// runtime: the caller into the allocator.
func classifyStack(frames []Frame) (runtimeClass, int) {
	i := 0
	for i < len(frames) && frames[i].Kernel {
		i++
	}
	class, idle := classNone, false
	for ; i < len(frames) && isRuntimeFunc(frames[i].Function); i++ {
		if class == classNone {
			class = classifyFunc(frames[i].Function)
		}
		idle = idle || slices.Contains(idleFuncs, frames[i].Function)
	}
	if idle {
		class = classIdle
	}
	return class, i
}

// breakdown is a Go process's samples by runtime class.
type breakdown struct {
	total      int64
	classes    map[runtimeClass]int64
	allocators map[Frame]*allocator
}

type allocator struct {
	caller, own Frame
	samples     int64
	share       float64
}

func runtimeBreakdown(d *Data, pid int) *breakdown {
	b := &breakdown{classes: map[runtimeClass]int64{}, allocators: map[Frame]*allocator{}}
	p := d.Processes[pid]
	for _, s := range d.index().byPID[pid] {
		frames := sampleFrames(s)
		class, caller := classifyStack(frames)
		b.total += s.Count
		b.classes[class] += s.Count
		if class != classAlloc && !(class == classGC && mallocIn(frames[:caller])) {
			continue
		}
		if caller >= len(frames) {
			continue
		}
		c := frames[caller]
		c.Module, c.Kernel, c.fileOffset = "", false, 0 // one entry per source line
		a := b.allocators[c]
		if a == nil {
			a = &allocator{caller: c}
			a.own, _ = ownFrame(frames[caller:], p)
			a.own.Module = ""
			b.allocators[c] = a
		}
		a.samples += s.Count
	}
	return b
}

func mallocIn(frames []Frame) bool {
	return slices.ContainsFunc(frames, func(f Frame) bool { return classifyFunc(f.Function) == classAlloc })
}

func (b *breakdown) share(c runtimeClass) float64 {
	if b.total == 0 {
		return 0
	}
	return float64(b.classes[c]) / float64(b.total)
}

// overhead is the runtime's share of the process's samples.
func (b *breakdown) overhead() float64 {
	return b.share(classGC) + b.share(classScheduler) + b.share(classAlloc) + b.share(classStack)
}

// topAllocators returns the n frames whose allocations cost most.
func (b *breakdown) topAllocators(n int) []allocator {
	var out []allocator
	for _, a := range b.allocators {
		a.share = float64(a.samples) / float64(b.total)
		out = append(out, *a)
	}
	slices.SortFunc(out, func(x, y allocator) int {
		if x.samples != y.samples {
			return int(y.samples - x.samples)
		}
		return strings.Compare(x.caller.Function, y.caller.Function)
	})
	return out[:min(n, len(out))]
}
