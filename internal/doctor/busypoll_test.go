package doctor

import (
	"net"
	"strings"
	"testing"
	"time"
)

// TestBusyPoll runs the epoll server of the field report with a zero
// timeout (the bug), with 1 ms (the fix), and with 1 ms under a steady
// stream of client messages (a loaded, healthy server).
func TestBusyPoll(t *testing.T) {
	requireRoot(t)
	fx := buildFixtures(t)

	bug := startFixture(t, "", nil, fx["busypoll"], "0")
	findings, data := doctorRun(t, bug.pid, Options{})
	logFindings(t, "timeout 0", findings)
	f := byID(of(findings, bug.pid), "busy-poll")
	if f == nil {
		t.Fatal("busy-poll did not fire on epoll_wait with a zero timeout")
	}
	if e, _ := evidence(f, "empty_calls_per_second"); e.Value < 10*DefaultThresholds().BusyPollRate {
		t.Errorf("empty calls %.0f/s: a spinning thread makes far more", e.Value)
	}
	if e, _ := evidence(f, "empty_share"); e.Value < 0.99 {
		t.Errorf("empty share %.3f, want ~1: no client ever connects", e.Value)
	}
	if f.Where == nil || f.Where.Function != "serve_loop" || !strings.HasSuffix(f.Where.File, "doctor-busypoll.c") || f.Where.Line == 0 {
		t.Errorf("where = %+v, want serve_loop in doctor-busypoll.c with a line", f.Where)
	}
	if !strings.Contains(f.Fix, "timeout") {
		t.Errorf("fix %q does not mention the timeout", f.Fix)
	}
	bugCPU := processCPU(t, data, bug.pid)
	bug.cmd.Process.Kill()

	fixed := startFixture(t, "", nil, fx["busypoll"], "1")
	findings, data = doctorRun(t, fixed.pid, Options{})
	logFindings(t, "timeout 1ms", findings)
	logTwin(t, "timeout 1ms", data, fixed.pid)
	if got := of(findings, fixed.pid); len(got) > 0 {
		t.Errorf("the fixed server has findings: %+v", got)
	}
	fixedCPU := processCPU(t, data, fixed.pid)
	t.Logf("CPU: %.3f with timeout 0, %.3f with 1 ms", bugCPU, fixedCPU)
	if fixedCPU > bugCPU/3 {
		t.Errorf("CPU %.3f with the fix, %.3f without: want it to drop at least threefold", fixedCPU, bugCPU)
	}

	// Loaded and healthy: epoll_wait returns events most of the time.
	port := fixed.ready[0]
	stop := make(chan struct{})
	defer close(stop)
	go echoClient(t, "127.0.0.1:"+port, stop)
	findings, data = doctorRun(t, fixed.pid, Options{})
	logFindings(t, "loaded", findings)
	logTwin(t, "loaded", data, fixed.pid)
	if got := of(findings, fixed.pid); len(got) > 0 {
		t.Errorf("the loaded server has findings: %+v", got)
	}
}

// echoClient sends a message and reads the echo back, in a loop, until
// stop: thousands of events a second for the server.
func echoClient(t *testing.T, addr string, stop <-chan struct{}) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Error(err)
		return
	}
	defer c.Close()
	buf := make([]byte, 64)
	for {
		select {
		case <-stop:
			return
		default:
		}
		c.SetDeadline(time.Now().Add(time.Second))
		if _, err := c.Write(buf); err != nil {
			return
		}
		if _, err := c.Read(buf); err != nil {
			return
		}
	}
}

// TestBusyPollIgnoresGoRuntime feeds the detector the Go scheduler's own
// zero-timeout epoll_pwait calls, at a rate far above the threshold.
func TestBusyPollIgnoresGoRuntime(t *testing.T) {
	runtimeStack := []Frame{
		{Function: "internal/runtime/syscall/linux.Syscall6"},
		{Function: "runtime.netpoll"},
		{Function: "runtime.findRunnable"},
		{Function: "runtime.schedule"},
		{Function: "runtime.park_m"},
		{Function: "runtime.mcall"},
	}
	userStack := []Frame{
		{Function: "syscall.Syscall6"},
		{Function: "golang.org/x/sys/unix.EpollWait"},
		{Function: "main.loop", File: "main.go", Line: 12},
		{Function: "main.main", File: "main.go", Line: 30},
	}
	for _, tc := range []struct {
		name  string
		stack []Frame
		want  bool
	}{
		{"runtime netpoll", runtimeStack, false},
		{"user loop", userStack, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := &Data{
				Duration: 10 * time.Second,
				Syscalls: &Syscalls{Duration: 10 * time.Second, Calls: []*Call{{
					PID: 7, TID: 8, Syscall: "epoll_pwait", ZeroTimeout: true, Count: 1e6, Empty: 1e6,
					Stacks: []CallStack{{Count: 500, Result: ResultEmpty, Frames: tc.stack}},
				}}},
				Processes: map[int]*Process{7: {PID: 7, Comm: "svc", Go: &GoInfo{Version: "go1.26.0"}}},
			}
			got := byID(Analyze(d), "busy-poll") != nil
			if got != tc.want {
				t.Errorf("fired = %v, want %v", got, tc.want)
			}
		})
	}
}
