package doctor

import (
	"cmp"
	"context"
	"slices"
	"strings"
	"time"

	"github.com/flint-dev/flint/internal/trace"
)

// LockWaits is what the goroutines of one Go process waited for sync.Mutex
// during the recording. A goroutine parked on a mutex leaves its thread to
// other goroutines, so no thread-level profile shows the wait: it is timed
// with uprobes on the mutex's slow paths, which run only under contention.
// Lock's slow path runs from the moment a goroutine finds the mutex held
// until it owns it (spinning, then parked); Unlock's runs when the holder
// releases a mutex that goroutines wait for.
type LockWaits struct {
	// Waits are where goroutines waited to lock, most time first, over
	// Traced, the time Lock's probes were attached (until the end, or
	// until the overhead guard detached them).
	Waits  []LockStack
	Traced time.Duration
	// Releases are where holders unlocked with waiters, most calls first,
	// over ReleasesTraced.
	Releases       []LockStack
	ReleasesTraced time.Duration
	// Unstacked counts the calls whose stack was lost (a full map).
	Unstacked uint64
	// ProbeCPU is what the probes cost the process, in CPUs (estimated
	// from the calls and the probe cost measured on this machine).
	ProbeCPU float64
}

// LockStack is the calls from one stack.
type LockStack struct {
	Calls  uint64
	Time   time.Duration // in the slow path
	Frames []Frame       // leaf first
}

// lockSlowPath and unlockSlowPath end the names of sync.Mutex's slow
// paths: in internal/sync from Go 1.24, in sync before.
const (
	lockSlowPath   = "sync.(*Mutex).lockSlow"
	unlockSlowPath = "sync.(*Mutex).unlockSlow"
)

// mutexSlowPaths are the trace's globs for them (nothing else in the
// runtime or the standard library matches).
var mutexSlowPaths = []string{"*" + lockSlowPath, "*" + unlockSlowPath}

// isLockSlowPath reports whether fn is Lock's slow path, in either package.
func isLockSlowPath(fn string) bool { return strings.HasSuffix(fn, lockSlowPath) }

// lockTraceBudget bounds what the lock probes may cost a process: a share
// of one CPU, past which they are detached (and the figures cover the time
// they were attached).
const lockTraceBudget = 0.05

// lockTrace times one Go process's mutex waits while an examination runs.
type lockTrace struct {
	pid    int
	tracer *trace.Tracer
	cancel context.CancelFunc
	done   chan lockTraceResult
}

type lockTraceResult struct {
	res *trace.Result
	err error
}

// startLockTrace attaches the probes to pid's mutex slow paths and runs
// them until end.
func startLockTrace(pid int) (*lockTrace, error) {
	tr, err := trace.Start(trace.Options{Target: trace.Target{PID: pid}, Functions: mutexSlowPaths,
		Latency: true, Stacks: true, MaxOverhead: lockTraceBudget})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	lt := &lockTrace{pid: pid, tracer: tr, cancel: cancel, done: make(chan lockTraceResult, 1)}
	go func() {
		res, err := tr.Run(ctx)
		lt.done <- lockTraceResult{res, err}
	}()
	return lt, nil
}

// end stops the probes and names what they counted.
func (lt *lockTrace) end(name func(pid int, pcs []uint64) []Frame) (*LockWaits, error) {
	lt.cancel()
	r := <-lt.done
	lt.tracer.Close()
	if r.err != nil {
		return nil, r.err
	}
	lw := &LockWaits{}
	for _, f := range r.res.Functions {
		stacks, traced := &lw.Releases, &lw.ReleasesTraced
		if isLockSlowPath(f.Name) {
			stacks, traced = &lw.Waits, &lw.Traced
		}
		*traced = f.Attached
		lw.ProbeCPU += f.ProbeCPU
		for _, s := range f.Stacks {
			*stacks = append(*stacks, LockStack{Calls: s.Calls, Time: s.Time, Frames: name(s.PID, s.PCs)})
		}
	}
	slices.SortStableFunc(lw.Waits, func(a, b LockStack) int { return cmp.Compare(b.Time, a.Time) })
	lw.Unstacked = r.res.Errors.StacksFull + r.res.Errors.StacksLost
	return lw, nil
}
