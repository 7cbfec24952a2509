package doctor

import (
	"fmt"
	"slices"

	"golang.org/x/sys/unix"
)

// syscall-errors: a process retrying a syscall that keeps failing, like a
// read of a non-blocking descriptor spun on EAGAIN, or a lookup of a file
// that does not exist, each failure followed by the next attempt at once.
//
// It fires when one syscall of one process failed at least ErrorRate times
// a second (1000) and in at least ErrorShare of its calls (90%). A Go
// program reading non-blocking sockets sees EAGAIN in about half its reads
// by design (read, park until ready, read again), which stays below. It
// sees only the syscalls traced: flint doctor traces the poll family, the
// sleeps and stdout/stderr writes unless asked for every syscall of a PID (`flint
// doctor -p PID --every-syscall`, or `flint syscalls -p PID`).
func syscallErrors(d *Data, t Thresholds) []Finding {
	sc := d.Syscalls
	if sc == nil || sc.Duration <= 0 {
		return nil
	}
	type procCall struct {
		pid     int
		syscall string
	}
	type agg struct {
		calls, errors uint64
		errno         unix.Errno
		stacks        []CallStack
		threads       map[int]float64 // tid -> failing share of its calls
	}
	groups := map[procCall]*agg{}
	var order []procCall
	for _, c := range sc.Calls {
		k := procCall{c.PID, c.Syscall}
		g := groups[k]
		if g == nil {
			g = &agg{threads: map[int]float64{}}
			groups[k] = g
			order = append(order, k)
		}
		g.calls += c.Count
		g.errors += c.Errors
		if c.LastErrno != 0 {
			g.errno = c.LastErrno
		}
		g.stacks = append(g.stacks, c.Stacks...)
		if c.Count > 0 && c.Errors > 0 {
			g.threads[c.TID] = float64(c.Errors) / float64(c.Count)
		}
	}
	var out []Finding
	secs := sc.Duration.Seconds()
	for _, k := range order {
		g := groups[k]
		errRate := float64(g.errors) / secs
		share := float64(g.errors) / float64(g.calls)
		if errRate < t.ErrorRate || share < t.ErrorShare {
			continue
		}
		// The threads' CPU spent failing: their CPU times the share of
		// their calls that failed.
		var cost float64
		haveCPU := false
		for tid, s := range g.threads {
			if cpu, ok := d.threadCPU(k.pid, tid); ok {
				cost += cpu * s
				haveCPU = true
			}
		}
		errno := errnoName(g.errno)
		f := Finding{
			ID: "syscall-errors", PID: k.pid, Comm: d.Comm(k.pid),
			Summary: fmt.Sprintf("%s fails %s (%s), retried in a loop", k.syscall, rate(errRate), errno),
			Evidence: []Evidence{
				{Name: "errors_per_second", Value: errRate, Unit: "1/s",
					Text: fmt.Sprintf("%s failed %s, last with %s", k.syscall, rate(errRate), errno)},
				{Name: "error_share", Value: share, Unit: "ratio",
					Text: fmt.Sprintf("%s of its %s calls failed", pct(share), rate(float64(g.calls)/secs))},
			},
			Fix:  errnoFix(g.errno, k.syscall),
			Cost: cost,
		}
		if haveCPU {
			f.Evidence = append(f.Evidence, Evidence{Name: "failing_cpu", Value: cost, Unit: "CPU",
				Text: fmt.Sprintf("the threads making the failing calls used %.2f CPU on them", cost)})
		}
		slices.SortFunc(g.stacks, func(a, b CallStack) int { return int(b.Count) - int(a.Count) })
		for _, s := range g.stacks {
			if s.Result != ResultFailed {
				continue
			}
			f.Stack = s.Frames
			f.setCaller(s.Frames, d.Processes[k.pid])
			break
		}
		f.Severity = severityOf(f.Cost, f.Cost/max(d.processCPU(k.pid), 0.01))
		out = append(out, f)
	}
	return out
}

// errnoFix says what to do about a syscall failing in a loop with errno.
func errnoFix(errno unix.Errno, syscall string) string {
	switch errno {
	case unix.EAGAIN:
		return "The descriptor is non-blocking and not ready: wait for it (poll or epoll with a timeout, " +
			"or make it blocking) before calling " + syscall + " again, instead of retrying at once."
	case unix.EINTR:
		return "Signals interrupt the call: find what sends them (a timer signal, a profiler) or block them in this thread."
	case unix.ENOENT:
		return "The file does not exist: cache the negative result, or stop looking it up on every call."
	case unix.EBADF:
		return "The descriptor is closed: stop the loop when the call fails this way; it cannot succeed."
	}
	return "Handle the error instead of retrying at once: stop, back off, or wait for the condition that makes the call succeed."
}
