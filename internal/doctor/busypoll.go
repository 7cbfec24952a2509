package doctor

import (
	"fmt"
	"strings"
	"time"
)

// busy-poll: a thread that asks the kernel for events without waiting
// (epoll_wait, epoll_pwait, epoll_pwait2, poll, ppoll, select or pselect6
// with a zero timeout), gets none, and asks again at once, burning a CPU to
// learn that nothing happened.
//
// It fires on a thread whose zero-timeout calls of one of these syscalls
// returned nothing at least BusyPollRate times a second (1000: a thread
// waking every millisecond is not busy), when those were at least
// BusyPollEmptyShare of its calls of that syscall (90%: a loaded server
// that polls without waiting only while events keep coming gets events
// from most calls) and the thread used at least BusyPollThreadCPU (0.05
// CPU, from /proc: a spinning thread gets more than that even on a
// saturated machine). The Go runtime polls with a zero timeout itself (netpoll(0) in the
// scheduler, up to thousands of times a second): calls whose sampled user
// stacks are all runtime frames are its own and never fire.
func busyPoll(d *Data, t Thresholds) []Finding {
	sc := d.Syscalls
	if sc == nil || sc.Duration <= 0 {
		return nil
	}
	type threadCall struct {
		pid, tid int
		syscall  string
	}
	all := map[threadCall]uint64{}
	for _, c := range sc.Calls {
		all[threadCall{c.PID, c.TID, c.Syscall}] += c.Count
	}
	var out []Finding
	for _, c := range sc.Calls {
		if !c.ZeroTimeout || !isPoll(c.Syscall) {
			continue
		}
		secs := sc.Duration.Seconds()
		emptyRate := float64(c.Empty) / secs
		total := all[threadCall{c.PID, c.TID, c.Syscall}]
		emptyShare := float64(c.Empty) / float64(total)
		if emptyRate < t.BusyPollRate || emptyShare < t.BusyPollEmptyShare {
			continue
		}
		stack, runtimeShare := pollStack(c)
		if runtimeShare >= 0.5 {
			continue // the Go runtime's own netpoll
		}
		cpu, haveCPU := d.threadCPU(c.PID, c.TID)
		if haveCPU && cpu < t.BusyPollThreadCPU {
			continue
		}
		p := d.Processes[c.PID]
		f := Finding{
			ID: "busy-poll", PID: c.PID, Comm: d.Comm(c.PID), TID: c.TID, Thread: c.Thread,
			Summary: fmt.Sprintf("thread %d (%s) spins on %s with a zero timeout: %s calls that return nothing",
				c.TID, c.Thread, c.Syscall, rate(emptyRate)),
			Evidence: []Evidence{
				{Name: "empty_calls_per_second", Value: emptyRate, Unit: "1/s",
					Text: fmt.Sprintf("%s(timeout 0) returned no events %s", c.Syscall, rate(emptyRate))},
				{Name: "empty_share", Value: emptyShare, Unit: "ratio",
					Text: fmt.Sprintf("%s of the thread's %s %s calls returned nothing", pct(emptyShare), rate(float64(total)/secs), c.Syscall)},
				{Name: "mean_call_ns", Value: float64(c.Total.Nanoseconds()) / float64(max(c.Count, 1)), Unit: "ns",
					Text: fmt.Sprintf("each call took %s on average", (c.Total / time.Duration(max(c.Count, 1))).String())},
			},
			Fix: "Block in " + c.Syscall + " until there is work: pass a timeout of -1, or the time until the next timer " +
				"(even 1 ms stops the spin), instead of 0. If the loop must not block, back off (sleep, or block on the " +
				"next call) after a poll that found nothing.",
			Stack: stack,
		}
		f.Cost = emptyShare
		if haveCPU {
			f.Cost = cpu * emptyShare
			text := fmt.Sprintf("the thread used %.2f CPU", cpu)
			if d.Profile != nil {
				text += fmt.Sprintf(", %s of its samples inside %s", pct(d.threadShareIn(c.TID, c.Syscall)), c.Syscall)
			}
			f.Evidence = append(f.Evidence, Evidence{Name: "thread_cpu", Value: cpu, Unit: "CPU", Text: text})
		}
		f.setCaller(stack, p)
		f.Severity = severityOf(f.Cost, emptyShare)
		out = append(out, f)
	}
	return out
}

// pollSyscalls are the calls that wait for file descriptor events.
var pollSyscalls = []string{"epoll_wait", "epoll_pwait", "epoll_pwait2", "poll", "ppoll", "select", "pselect6"}

func isPoll(name string) bool {
	for _, p := range pollSyscalls {
		if p == name {
			return true
		}
	}
	return false
}

// pollStack returns the most frequent user stack of the call's empty
// results and the share of its sampled stacks made by the Go runtime alone.
func pollStack(c *Call) ([]Frame, float64) {
	var best *CallStack
	var total, runtimeOnly uint64
	for i := range c.Stacks {
		s := &c.Stacks[i]
		total += s.Count
		if isRuntimeStack(s.Frames) {
			runtimeOnly += s.Count
		}
		if s.Result == ResultEmpty && (best == nil || s.Count > best.Count) {
			best = s
		}
	}
	if total == 0 {
		return nil, 0
	}
	share := float64(runtimeOnly) / float64(total)
	if best == nil {
		best = &c.Stacks[0]
	}
	return best.Frames, share
}

// isRuntimeStack reports whether every named user frame belongs to the Go
// runtime (its scheduler's netpoll, sysmon).
func isRuntimeStack(frames []Frame) bool {
	named := 0
	for _, f := range frames {
		if f.Kernel || strings.HasPrefix(f.Function, "[") || strings.Contains(f.Function, "+0x") {
			continue
		}
		named++
		if !isRuntimeFunc(f.Function) {
			return false
		}
	}
	return named > 0
}

// threadShareIn is the share of tid's samples with a frame whose name
// contains name (a syscall's user wrapper and kernel implementation).
func (d *Data) threadShareIn(tid int, name string) float64 {
	var in, all int64
	for _, s := range d.index().byTID[tid] {
		all += s.Count
		for _, f := range sampleFrames(s) {
			if strings.Contains(f.Function, name) {
				in += s.Count
				break
			}
		}
	}
	if all == 0 {
		return 0
	}
	return float64(in) / float64(all)
}
