package doctor

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"
)

// TestHotDebugOutput serves the same paced requests from the order service
// with the leftover fmt.Println of each order (the bug) and without it (the
// fix).
func TestHotDebugOutput(t *testing.T) {
	requireRoot(t)
	fx := buildFixtures(t)
	run := func(args ...string) ([]Finding, *Data, int) {
		srv := startFixture(t, "", nil, append([]string{fx["debugprint"]}, args...)...)
		stop := make(chan struct{})
		done := make(chan int)
		go func() { done <- orderClient(t, "127.0.0.1:"+srv.ready[0], 300, stop) }()
		findings, data := doctorRun(t, srv.pid, Options{})
		close(stop)
		if n := <-done; n == 0 {
			t.Error("no request answered")
		}
		srv.cmd.Process.Kill()
		return of(findings, srv.pid), data, srv.pid
	}

	findings, data, pid := run("-print")
	logFindings(t, "printing", findings)
	f := byID(findings, "hot-debug-output")
	if f == nil {
		t.Fatal("hot-debug-output did not fire on fmt.Println of every order")
	}
	if f.Where == nil || f.Where.Function != "main.handleOrder" || !strings.HasSuffix(f.Where.File, "doctor-debugprint/main.go") ||
		f.Where.Line != printLine(t) {
		t.Errorf("where = %+v, want main.handleOrder at the fmt.Println (line %d)", f.Where, printLine(t))
	}
	if e, _ := evidence(f, "print_share"); e.Value < 0.2 || !strings.Contains(e.Text, "fmt.Println") {
		t.Errorf("print share evidence %+v", e)
	}
	if e, ok := evidence(f, "stdio_writes_per_second"); !ok || e.Value < 10 {
		t.Errorf("stdout writes %+v: every request prints", e)
	}
	if byID(findings, "busy-poll") != nil {
		t.Error("busy-poll fired on the Go runtime's netpoll")
	}
	bugCPU := processCPU(t, data, pid)

	findings, data, pid = run()
	logFindings(t, "quiet", findings)
	logTwin(t, "quiet", data, pid)
	if len(findings) > 0 {
		t.Errorf("the service without the print has findings: %+v", findings)
	}
	fixedCPU := processCPU(t, data, pid)
	t.Logf("CPU for the same requests: %.3f printing, %.3f without", bugCPU, fixedCPU)
	if fixedCPU > bugCPU/2 {
		t.Errorf("CPU %.3f without the print, %.3f with: want it at least halved", fixedCPU, bugCPU)
	}
}

// orderClient asks for orders at a fixed rate (a bounded loop: it stops at
// stop) and returns how many it got.
func orderClient(t *testing.T, addr string, perSecond int, stop <-chan struct{}) int {
	tick := time.NewTicker(time.Second / time.Duration(perSecond))
	defer tick.Stop()
	c := &http.Client{Timeout: 5 * time.Second}
	n := 0
	for {
		select {
		case <-stop:
			return n
		case <-tick.C:
		}
		resp, err := c.Get(fmt.Sprintf("http://%s/order?id=%d", addr, n))
		if err != nil {
			t.Error(err)
			return n
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		n++
	}
}

// printLine finds the fixture's fmt.Println line.
func printLine(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile(fixtureDir + "/doctor-debugprint/main.go")
	if err != nil {
		t.Fatal(err)
	}
	for i, line := range strings.Split(string(b), "\n") {
		if strings.Contains(line, "fmt.Println(\"order:\"") {
			return i + 1
		}
	}
	t.Fatal("no fmt.Println in the fixture")
	return 0
}

// TestPrintingNotJSON checks that a handler that prints and also encodes its
// JSON response is charged only for the print.
func TestPrintingNotJSON(t *testing.T) {
	own := func(line int) Frame {
		return Frame{Function: "main.handle", File: "/src/main.go", Line: line, Module: "/bin/svc"}
	}
	stack := func(leaf string, caller Frame) []*sampleSpec {
		return []*sampleSpec{{frames: []Frame{{Function: leaf}, caller, {Function: "net/http.HandlerFunc.ServeHTTP"}}, count: 100}}
	}
	d := &Data{
		Duration: 10 * time.Second,
		Syscalls: &Syscalls{Duration: 10 * time.Second, Calls: []*Call{{
			PID: 5, TID: 5, Syscall: "write", Stdout: true, Count: 100, Bytes: 10000,
			Stacks: []CallStack{{Count: 10, Frames: []Frame{{Function: "os.(*File).Write"}, {Function: "fmt.Fprintln"}, own(10)}}},
		}}},
		Processes: map[int]*Process{5: {PID: 5, Comm: "svc", CPU: 5 * time.Second, Go: &GoInfo{Version: "go1.26.0"}}},
	}
	// Formatting called from the printing line counts; JSON encoding of
	// the response, from another line of the same function, does not.
	var specs []*sampleSpec
	specs = append(specs, stack("fmt.(*pp).printValue", own(10))...)
	specs = append(specs, stack("encoding/json.(*encodeState).marshal", own(20))...)
	specs = append(specs, stack("main.compute", Frame{Function: "main.serve"})...)
	specs[2].count = 200
	d.Profile = buildProfile(d.Duration, 99, 5, specs)
	w := stdioWrites(d)[5]
	got := printing(d, 5, w)
	if got.share != 0.25 || got.where.Line != 10 {
		t.Errorf("print share %.2f at line %d; want 0.25 at line 10", got.share, got.where.Line)
	}
}
