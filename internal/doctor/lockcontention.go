package doctor

import (
	"fmt"
	"maps"
	"slices"
	"time"
)

// lock-contention: goroutines of a Go program queueing for one sync.Mutex,
// typically held while slow work runs under it. They wait instead of
// running, so the program does less than its CPUs allow, and each request
// that needs the lock waits behind the others.
//
// It fires on a process whose goroutines spent, summed, at least
// LockWaitGoroutines seconds a second waiting in Lock's slow path (0.25: on
// average a quarter of a goroutine is always waiting). The evidence names the
// stack where most of the waiting happened and the one where holders
// released the lock to waiters: the end of the critical section to
// shorten. It needs the probes flint doctor puts on Go programs it is
// asked about (-p or --container; see LockWaits), not every process's.

func lockContention(d *Data, t Thresholds) []Finding {
	var out []Finding
	for _, pid := range slices.Sorted(maps.Keys(d.Locks)) {
		lw := d.Locks[pid]
		if lw.Traced <= 0 || len(lw.Waits) == 0 {
			continue
		}
		secs := lw.Traced.Seconds()
		var waited time.Duration
		var waits uint64
		for _, s := range lw.Waits {
			waited += s.Time
			waits += s.Calls
		}
		waiting := waited.Seconds() / secs
		if waiting < t.LockWaitGoroutines {
			continue
		}
		top := lw.Waits[0]
		p := d.Processes[pid]
		f := Finding{
			ID: "lock-contention", PID: pid, Comm: d.Comm(pid),
			Evidence: []Evidence{
				{Name: "waiting_goroutines", Value: waiting, Unit: "goroutines",
					Text: fmt.Sprintf("goroutines waited %.2f s a second for sync.Mutex locks: %.2f of them waiting at any moment", waiting, waiting)},
				{Name: "waits_per_second", Value: float64(waits) / secs, Unit: "1/s",
					Text: fmt.Sprintf("%s Lock calls found the mutex held, and waited %s each on average",
						rate(float64(waits)/secs), roundDuration(waited/time.Duration(waits)))},
			},
			Stack: top.Frames,
			Fix: "Hold the lock only to read or update the shared state, and do the slow work (rendering, I/O, " +
				"encoding, calls to other services) before Lock or after Unlock on a copy. If the state itself is " +
				"the bottleneck, split it (shard by key, one mutex per shard), or use sync.RWMutex for mostly-read data.",
		}
		site := "an unnamed frame"
		if w, ok := ownFrame(top.Frames, p); ok {
			f.Where = &w
			site = w.String()
		}
		topShare := top.Time.Seconds() / waited.Seconds()
		f.Evidence = append(f.Evidence, Evidence{Name: "top_wait_share", Value: topShare, Unit: "ratio",
			Text: fmt.Sprintf("%s of the waiting was at %s", pct(topShare), site)})
		f.Summary = fmt.Sprintf("goroutines queue for a sync.Mutex: %.1f of them waiting at any moment, most at %s", waiting, site)
		if len(lw.Releases) > 0 && lw.ReleasesTraced > 0 {
			holder := lw.Releases[0]
			f.Holder = holder.Frames
			where := "an unnamed frame"
			if w, ok := ownFrame(holder.Frames, p); ok {
				where = w.String()
			}
			released := float64(holder.Calls) / lw.ReleasesTraced.Seconds()
			f.Evidence = append(f.Evidence, Evidence{Name: "holder", Value: released, Unit: "1/s",
				Text: fmt.Sprintf("the holder released it to a waiter at %s, %s", where, rate(released))})
		}
		// What the contention burns is the spinning before a goroutine
		// parks; what it costs is the goroutines not running.
		f.Cost = d.cpuUnder(pid, isLockSlowPath)
		if f.Severity = severityOf(f.Cost, 0); f.Severity == Info {
			f.Severity = Warning
		}
		out = append(out, f)
	}
	return out
}

// cpuUnder is the CPU pid's samples with a frame that fn accepts stand for,
// in CPUs.
func (d *Data) cpuUnder(pid int, fn func(string) bool) float64 {
	x := d.index()
	var n int64
	for _, s := range x.byPID[pid] {
		if slices.ContainsFunc(sampleFrames(s), func(f Frame) bool { return fn(f.Function) }) {
			n += s.Count
		}
	}
	return float64(n) * x.perSample
}
