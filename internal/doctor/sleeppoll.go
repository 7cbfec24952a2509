package doctor

import (
	"fmt"
	"time"
)

// sleep-poll: a thread that waits for work by sleeping a fixed interval and
// looking again (`while (!ready) usleep(5000);`) instead of blocking until
// the work is there. It wakes whether or not there is work, and each piece
// of work waits for the next look: half an interval on average.
//
// It fires on a thread whose nanosleep or clock_nanosleep calls (usleep,
// nanosleep, std::this_thread::sleep_for, Python's time.sleep) return at
// least SleepPollRate times a second (20: a look every 50 ms or more
// often), hold it asleep for at least SleepPollShare of the recording
// (50%: sleeping is how it waits) and last about the same each time: at
// least SleepPollRegular of them (90%) in the commonest power-of-two range
// of durations or its two neighbours: a thread that backs off spreads
// wider. A thread that does something between sleeps is pacing work, not
// looking for it: it must make at most SleepPollIO read or write syscalls
// per wake-up (0.1, from /proc/PID/task/TID/io: a producer writing what it
// made makes one), and sleep for a time, not until a deadline
// (clock_nanosleep with TIMER_ABSTIME is a ticker's). Without the thread's
// counters from the start of the recording it does not fire: flint doctor
// reads them for the processes asked about (all, with -a), the agent for
// those that used CPU in its last window. The Go runtime's
// sysmon thread sleeps in a loop by design: calls whose sampled user
// stacks are all runtime frames never fire. Go's time.Sleep parks a
// goroutine rather than a thread and is not seen here.

// sleepSyscalls are the calls that wait for a time to pass.
var sleepSyscalls = []string{"nanosleep", "clock_nanosleep"}

func sleepPoll(d *Data, t Thresholds) []Finding {
	sc := d.Syscalls
	if sc == nil || sc.Duration <= 0 {
		return nil
	}
	secs := sc.Duration.Seconds()
	var out []Finding
	for _, c := range sc.Calls {
		if !isSleep(c.Syscall) || c.Deadline || c.Count == 0 {
			continue
		}
		wakeRate := float64(c.Count) / secs
		asleep := c.Total.Seconds() / secs
		from, to, regular := commonRange(c.Latency[:])
		if wakeRate < t.SleepPollRate || asleep < t.SleepPollShare || regular < t.SleepPollRegular {
			continue
		}
		p := d.Processes[c.PID]
		io, knownIO := p.threadIO(c.TID)
		if !knownIO || float64(io) > t.SleepPollIO*float64(c.Count) {
			continue
		}
		stack, runtimeShare := pollStack(c)
		if runtimeShare >= 0.5 {
			continue // the Go runtime's sysmon
		}
		mean := c.Total / time.Duration(c.Count)
		f := Finding{
			ID: "sleep-poll", PID: c.PID, Comm: d.Comm(c.PID), TID: c.TID, Thread: c.Thread,
			Summary: fmt.Sprintf("thread %d (%s) polls: it sleeps %s and looks again, %s, instead of waiting for work",
				c.TID, c.Thread, roundDuration(mean), rate(wakeRate)),
			Evidence: []Evidence{
				{Name: "wakeups_per_second", Value: wakeRate, Unit: "1/s",
					Text: fmt.Sprintf("%s returned %s", c.Syscall, rate(wakeRate))},
				{Name: "asleep_share", Value: asleep, Unit: "ratio",
					Text: fmt.Sprintf("the thread slept %s of the recording in %s", pct(asleep), c.Syscall)},
				{Name: "mean_sleep_ns", Value: float64(mean.Nanoseconds()), Unit: "ns",
					Text: fmt.Sprintf("each sleep lasted %s on average: work that arrives waits %s on average for the next look",
						roundDuration(mean), roundDuration(mean/2))},
				{Name: "regular_share", Value: regular, Unit: "ratio",
					Text: fmt.Sprintf("%s of the sleeps lasted between %s and %s", pct(regular), roundDuration(from), roundDuration(to))},
				{Name: "io_per_wakeup", Value: float64(io) / float64(c.Count), Unit: "1/wake-up",
					Text: fmt.Sprintf("it made %d read or write syscalls in %d wake-ups: it looks and sleeps again", io, c.Count)},
			},
			Fix: "Block until there is work instead of sleeping and looking again: wait on a condition variable, semaphore, " +
				"eventfd or pipe that the producer signals (a channel in Go, queue.get() in Python), keeping a timeout " +
				"only for real deadlines. Work then starts at once, and the thread wakes only when there is some.",
			Stack: stack,
		}
		cpu, haveCPU := d.threadCPU(c.PID, c.TID)
		if haveCPU {
			f.Cost = cpu
			text := fmt.Sprintf("the thread used %.3f CPU", cpu)
			if cpu > 0 {
				text += fmt.Sprintf(", %s per wake-up", roundDuration(time.Duration(cpu/wakeRate*1e9)))
			}
			f.Evidence = append(f.Evidence, Evidence{Name: "thread_cpu", Value: cpu, Unit: "CPU", Text: text})
		}
		f.setCaller(stack, p)
		f.Severity = severityOf(f.Cost, 0)
		out = append(out, f)
	}
	return out
}

func isSleep(name string) bool {
	for _, s := range sleepSyscalls {
		if s == name {
			return true
		}
	}
	return false
}

// commonRange finds the commonest bucket of a log2 latency histogram and
// returns the range it and its two neighbours cover, [from, to), and the
// share of the calls in it.
func commonRange(hist []uint64) (from, to time.Duration, share float64) {
	var total uint64
	best := 0
	for b, n := range hist {
		total += n
		if n > hist[best] {
			best = b
		}
	}
	if total == 0 {
		return 0, 0, 0
	}
	lo, hi := max(best-1, 0), min(best+1, len(hist)-1)
	var in uint64
	for b := lo; b <= hi; b++ {
		in += hist[b]
	}
	return time.Duration(1) << lo, time.Duration(1) << (hi + 1), float64(in) / float64(total)
}

// roundDuration keeps three significant digits: 5.07ms, not 5.071234ms.
func roundDuration(d time.Duration) time.Duration {
	for unit := time.Duration(1); unit < time.Hour; unit *= 10 {
		if d < 1000*unit {
			return d.Round(unit)
		}
	}
	return d.Round(time.Second)
}

// threadIO is the read and write syscalls of thread tid during the
// recording; ok is false when unknown.
func (p *Process) threadIO(tid int) (n int64, ok bool) {
	if p == nil {
		return 0, false
	}
	n, ok = p.ThreadIO[tid]
	return n, ok
}
