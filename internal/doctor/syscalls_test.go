package doctor

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestSyscallErrors runs the consumer that spins on read() of an empty
// non-blocking pipe (the bug) and the one that polls for readiness first
// (the fix), tracing every syscall of each.
func TestSyscallErrors(t *testing.T) {
	requireRoot(t)
	fx := buildFixtures(t)

	bug := startFixture(t, "", nil, fx["eagain"], "spin")
	findings, data := doctorRun(t, bug.pid, Options{EverySyscall: true})
	logFindings(t, "spin", of(findings, bug.pid))
	f := byID(of(findings, bug.pid), "syscall-errors")
	if f == nil {
		t.Fatal("syscall-errors did not fire on read() spinning on EAGAIN")
	}
	if !strings.Contains(f.Summary, "read fails") || !strings.Contains(f.Summary, "EAGAIN") {
		t.Errorf("summary %q", f.Summary)
	}
	if e, _ := evidence(f, "error_share"); e.Value < 0.99 {
		t.Errorf("error share %.3f: the producer writes once a millisecond", e.Value)
	}
	if f.Where == nil || f.Where.Function != "consume" || !strings.HasSuffix(f.Where.File, "doctor-eagain.c") || f.Where.Line == 0 {
		t.Errorf("where = %+v, want consume in doctor-eagain.c", f.Where)
	}
	if !strings.Contains(f.Fix, "poll") {
		t.Errorf("fix %q does not say to wait for readiness", f.Fix)
	}
	bugCPU := processCPU(t, data, bug.pid)
	bug.cmd.Process.Kill()

	fixed := startFixture(t, "", nil, fx["eagain"], "wait")
	findings, data = doctorRun(t, fixed.pid, Options{EverySyscall: true})
	logFindings(t, "wait", of(findings, fixed.pid))
	logTwin(t, "wait", data, fixed.pid)
	if got := of(findings, fixed.pid); len(got) > 0 {
		t.Errorf("the waiting consumer has findings: %+v", got)
	}
	fixedCPU := processCPU(t, data, fixed.pid)
	t.Logf("CPU: %.3f spinning, %.3f waiting", bugCPU, fixedCPU)
	if fixedCPU > bugCPU/3 {
		t.Errorf("CPU %.3f waiting, %.3f spinning: want a threefold drop", fixedCPU, bugCPU)
	}
}

// TestTraceSyscalls checks the syscall table of `flint syscalls` against a
// consumer whose calls are known: a read per millisecond that succeeds,
// after a poll that waits for it.
func TestTraceSyscalls(t *testing.T) {
	requireRoot(t)
	fx := buildFixtures(t)
	w := startFixture(t, "", nil, fx["eagain"], "wait")
	d, err := TraceSyscalls(context.Background(), SyscallOptions{PID: w.pid, Duration: testDuration})
	if err != nil {
		t.Fatal(err)
	}
	rows := d.Syscalls.Table(d.Comm, 3)
	row := func(name string) *Row {
		i := slices.IndexFunc(rows, func(r Row) bool { return r.Syscall == name && r.PID == w.pid })
		if i < 0 {
			t.Fatalf("no %s row in %+v", name, rows)
		}
		return &rows[i]
	}
	for _, name := range []string{"read", "poll", "write", "clock_nanosleep"} {
		r := row(name)
		t.Logf("%s: %d calls, %.0f/s, %d errors, total %s, p50 %s, p99 %s", name, r.Calls, r.Rate, r.Errors, r.Total, r.P50, r.P99)
		// The producer writes once a millisecond; the machine is shared, so
		// allow it to fall far behind, but not to vanish.
		if r.Rate < 200 || r.Rate > 1100 {
			t.Errorf("%s at %.0f/s, want about 1000/s", name, r.Rate)
		}
		if r.Errors != 0 {
			t.Errorf("%s failed %d times", name, r.Errors)
		}
		if len(r.Stacks) == 0 || r.Stacks[0].Share <= 0 {
			t.Errorf("%s has no stacks", name)
		}
	}
	// poll waits for the producer (~1 ms); read finds the byte at once.
	if p, r := row("poll"), row("read"); p.P50 < 100*time.Microsecond || r.P50 > 100*time.Microsecond {
		t.Errorf("p50: poll %s, read %s; want poll to wait and read not", p.P50, r.P50)
	}
	if r := row("read"); !slices.ContainsFunc(r.Stacks[0].Frames, func(f Frame) bool { return f.Function == "consume" }) {
		t.Errorf("read's stack %+v does not reach consume", r.Stacks[0].Frames)
	}
	if d.Processes[w.pid] == nil || d.Comm(w.pid) != "eagain" {
		t.Errorf("process facts %+v", d.Processes[w.pid])
	}
}

func TestSyscallErrorsThreshold(t *testing.T) {
	call := func(errors uint64) *Call {
		return &Call{PID: 3, TID: 3, Syscall: "read", Count: 100000, Errors: errors, LastErrno: unix.EAGAIN}
	}
	for _, tc := range []struct {
		name   string
		errors uint64
		want   bool
	}{
		// A Go server reads, parks on EAGAIN, is woken, reads: half fail.
		{"go netpoller", 50000, false},
		{"retry loop", 99900, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := &Data{Duration: 10 * time.Second, Processes: map[int]*Process{},
				Syscalls: &Syscalls{Duration: 10 * time.Second, Calls: []*Call{call(tc.errors)}}}
			if got := byID(Analyze(d), "syscall-errors") != nil; got != tc.want {
				t.Errorf("fired = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestQuantile(t *testing.T) {
	var h [LatencyBuckets]uint64
	h[10] = 100 // [1024, 2048) ns
	if got := Quantile(h[:], 0.5); got < 1024 || got > 2048 {
		t.Errorf("p50 %v outside its bucket", got)
	}
	h[20] = 1 // one slow call
	if got := Quantile(h[:], 0.99); got >= 2048 {
		t.Errorf("p99 %v: 100 of 101 calls are fast", got)
	}
	if got := Quantile(h[:], 1); got < 1<<20 {
		t.Errorf("p100 %v: the slow call is ~1 ms", got)
	}
	if got := Quantile(make([]uint64, LatencyBuckets), 0.5); got != 0 {
		t.Errorf("empty histogram: %v", got)
	}
}

func TestTable(t *testing.T) {
	stack := func(fn string, n uint64) CallStack {
		return CallStack{Count: n, Result: ResultOK, Frames: []Frame{{Function: fn}}}
	}
	s := &Syscalls{Duration: 2 * time.Second, Calls: []*Call{
		{PID: 1, TID: 1, Syscall: "read", Count: 10, Errors: 2, LastErrno: unix.EAGAIN, Total: time.Millisecond, Stacks: []CallStack{stack("a", 3)}},
		{PID: 1, TID: 2, Syscall: "read", Count: 30, Total: 3 * time.Millisecond, Stacks: []CallStack{stack("b", 9), stack("a", 1)}},
		{PID: 1, TID: 2, Syscall: "write", Count: 5, Total: 10 * time.Millisecond},
		{PID: 2, TID: 2, Syscall: "read", Count: 1, Total: time.Microsecond},
	}}
	rows := s.Table(func(pid int) string { return map[int]string{1: "one", 2: "two"}[pid] }, 1)
	if len(rows) != 3 || rows[0].Syscall != "write" || rows[1].Syscall != "read" || rows[1].PID != 1 {
		t.Fatalf("rows %+v: want write, read of pid 1, read of pid 2 (most time first)", rows)
	}
	r := rows[1]
	if r.Calls != 40 || r.Rate != 20 || r.Errors != 2 || r.Errno != "EAGAIN" || r.Comm != "one" || r.Total != 4*time.Millisecond {
		t.Errorf("read row %+v", r)
	}
	if len(r.Stacks) != 1 || r.Stacks[0].Frames[0].Function != "b" || r.Stacks[0].Share != 9.0/13 {
		t.Errorf("stacks %+v: want b at 9/13", r.Stacks)
	}
}

// TestTracerRestart reuses one tracer, as the agent does: after Restart it
// counts only the calls made since, named anew.
func TestTracerRestart(t *testing.T) {
	requireRoot(t)
	fx := buildFixtures(t)
	tr, err := StartTracer(TracerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	polls := func(sc *Syscalls, pid int) (n uint64) {
		for _, c := range sc.Calls {
			if c.PID == pid && c.Syscall == "epoll_wait" {
				n += c.Count
			}
		}
		return n
	}
	first := startFixture(t, "", nil, fx["busypoll"], "0")
	time.Sleep(300 * time.Millisecond)
	sc, err := tr.Read()
	if err != nil {
		t.Fatal(err)
	}
	if polls(sc, first.pid) < 1000 {
		t.Fatalf("first run: %d epoll_waits of the spinning fixture", polls(sc, first.pid))
	}
	first.cmd.Process.Kill()
	first.cmd.Wait()

	if err := tr.Restart(); err != nil {
		t.Fatal(err)
	}
	second := startFixture(t, "", nil, fx["busypoll"], "0")
	time.Sleep(300 * time.Millisecond)
	sc, err = tr.Read()
	if err != nil {
		t.Fatal(err)
	}
	if n := polls(sc, first.pid); n > 0 {
		t.Errorf("after Restart: %d calls of the first run's process", n)
	}
	if polls(sc, second.pid) < 1000 || sc.Comms[second.pid] != "busypoll" {
		t.Errorf("second run: %d epoll_waits of the new fixture, named %q", polls(sc, second.pid), sc.Comms[second.pid])
	}
	if sc.Duration > 2*time.Second {
		t.Errorf("second run lasted %s: it must count from Restart", sc.Duration)
	}
}
