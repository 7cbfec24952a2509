package doctor

import (
	"math/bits"
	"testing"
	"time"
)

// TestSleepPoll runs a worker that sleeps 5 ms between looks for a job that
// comes every 200 ms (the bug), then one that waits on a condition
// variable for it (the fix).
func TestSleepPoll(t *testing.T) {
	requireRoot(t)
	fx := buildFixtures(t)

	bug := startFixture(t, "", nil, fx["sleeppoll"], "poll")
	findings, _ := doctorRun(t, bug.pid, Options{})
	logFindings(t, "poll", findings)
	f := byID(of(findings, bug.pid), "sleep-poll")
	if f == nil {
		t.Fatal("sleep-poll did not fire on a thread sleeping 5 ms between looks")
	}
	if f.Thread != "worker" {
		t.Errorf("thread %q, want the worker", f.Thread)
	}
	// 200 looks a second at most, each sleep 5 ms or more: on a busy
	// machine the thread waits for a CPU after its sleep too (10.6 ms
	// with both CPUs spinning, bench/twins.sh).
	if e, _ := evidence(f, "wakeups_per_second"); e.Value > 205 {
		t.Errorf("%.0f wake-ups a second, want 200 at most", e.Value)
	}
	if e, _ := evidence(f, "mean_sleep_ns"); e.Value < 5e6 {
		t.Errorf("mean sleep %.0f ns, want 5 ms or more", e.Value)
	}
	if e, _ := evidence(f, "asleep_share"); e.Value < 0.9 {
		t.Errorf("asleep %.3f of the recording, want nearly all", e.Value)
	}
	if f.Where == nil || f.Where.Function != "poll_for_jobs" || f.Where.Line == 0 {
		t.Errorf("where = %+v, want poll_for_jobs with a line", f.Where)
	}
	bug.cmd.Process.Kill()

	fixed := startFixture(t, "", nil, fx["sleeppoll"], "wait")
	findings, data := doctorRun(t, fixed.pid, Options{})
	logFindings(t, "wait", findings)
	logTwin(t, "wait", data, fixed.pid)
	if got := of(findings, fixed.pid); len(got) > 0 {
		t.Errorf("the worker waiting on a condition variable has findings: %+v", got)
	}
}

// TestSleepPollThresholds feeds the detector sleeps that are not a poll
// loop: the Go runtime's sysmon, a backoff, a slow tick, a producer that
// writes after each sleep, a ticker sleeping until deadlines.
func TestSleepPollThresholds(t *testing.T) {
	user := []Frame{{Function: "usleep"}, {Function: "wait_loop", File: "app.c", Line: 9}}
	sysmon := []Frame{{Function: "runtime.usleep"}, {Function: "runtime.sysmon"}, {Function: "runtime.newm.func1"}}
	// n calls of d each over 10 s.
	calls := func(n uint64, d time.Duration, stack []Frame) *Call {
		c := &Call{PID: 7, TID: 8, Syscall: "clock_nanosleep", Count: n, Total: time.Duration(n) * d,
			Stacks: []CallStack{{Count: 50, Result: ResultEmpty, Frames: stack}}}
		c.Latency[log2(d)] = n
		return c
	}
	backoff := calls(500, 10*time.Millisecond, user)
	backoff.Latency[log2(10*time.Millisecond)] = 250
	backoff.Latency[log2(40*time.Microsecond)] = 250
	ticker := calls(2000, 5*time.Millisecond, user)
	ticker.Deadline = true
	for _, tc := range []struct {
		name string
		call *Call
		io   int64
		want bool
	}{
		{"5 ms loop", calls(2000, 5*time.Millisecond, user), 10, true},
		{"sysmon", calls(2000, 5*time.Millisecond, sysmon), 0, false},
		{"slow tick", calls(100, 100*time.Millisecond, user), 0, false},
		{"mostly awake", calls(2000, time.Millisecond, user), 0, false},
		{"irregular", backoff, 0, false},
		{"producer", calls(2000, 5*time.Millisecond, user), 2000, false},
		{"deadline ticker", ticker, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			io := tc.io
			d := &Data{
				Duration:  10 * time.Second,
				Syscalls:  &Syscalls{Duration: 10 * time.Second, Calls: []*Call{tc.call}},
				Processes: map[int]*Process{7: {PID: 7, Comm: "app", ThreadIO: map[int]int64{8: io}}},
			}
			if got := byID(Analyze(d), "sleep-poll") != nil; got != tc.want {
				t.Errorf("fired = %v, want %v", got, tc.want)
			}
		})
	}
}

// log2 is the latency bucket of d (at least 1 ns).
func log2(d time.Duration) int { return bits.Len64(uint64(d)) - 1 }
