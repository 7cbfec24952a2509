package trace

import (
	"bufio"
	"context"
	"debug/elf"
	"debug/gosym"
	"errors"
	"io"
	"math"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/flint-dev/flint/internal/proc"
)

// requireRoot skips tests that attach uprobes when not root.
func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (CAP_BPF, CAP_PERFMON) to load BPF and attach uprobes; CI runs it as root")
	}
}

// running is a fixture process waiting for a line on stdin to start.
type running struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   *bufio.Reader
	done  chan error
}

func startFixture(t *testing.T, bin string, args ...string) *running {
	t.Helper()
	cmd := exec.Command(bin, args...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r := &running{cmd: cmd, stdin: stdin, out: bufio.NewReader(stdout), done: make(chan error, 1)}
	if line, err := r.out.ReadString('\n'); err != nil || line != "ready\n" {
		cmd.Process.Kill()
		t.Fatalf("%s: read %q, %v; want ready", bin, line, err)
	}
	return r
}

func (r *running) pid() int { return r.cmd.Process.Pid }

// go lets the fixture run, and reaps it when it exits.
func (r *running) run() {
	r.stdin.Write([]byte("go\n"))
	go func() {
		rest, _ := io.ReadAll(r.out)
		err := r.cmd.Wait()
		if err == nil && !strings.HasPrefix(string(rest), "done") {
			err = errors.New("fixture ended without printing done: " + string(rest))
		}
		r.done <- err
	}()
}

// kill ends a fixture that was never let run.
func (r *running) kill() {
	r.cmd.Process.Kill()
	r.cmd.Wait()
}

// traceFixture starts bin, traces it with opts, lets it run to its end and
// returns what the trace counted.
func traceFixture(t *testing.T, bin string, args []string, opts Options) *Result {
	t.Helper()
	fx := startFixture(t, bin, args...)
	opts.PID = fx.pid()
	tr, err := Start(opts)
	if err != nil {
		fx.kill()
		t.Fatal(err)
	}
	defer tr.Close()
	fx.run()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := tr.Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := <-fx.done; err != nil {
		t.Fatalf("traced fixture: %v", err)
	}
	if !res.Exited {
		t.Errorf("trace ended before the process exited")
	}
	return res
}

func function(t *testing.T, res *Result, name string) *FunctionResult {
	t.Helper()
	for i := range res.Functions {
		if res.Functions[i].Name == name {
			return &res.Functions[i]
		}
	}
	t.Fatalf("no result for %s", name)
	return nil
}

// within01 is true when got is within 0.1% of want: a signal landing on a
// probe (Go preempts goroutines with SIGURG) can make the kernel restart
// the probed instruction and run the probe twice.
func within01(got, want uint64) bool {
	return math.Abs(float64(got)-float64(want)) <= float64(want)/1000
}

// TestCountTimeNow counts exactly N calls of time.Now, in normal, stripped
// and PIE builds.
func TestCountTimeNow(t *testing.T) {
	requireRoot(t)
	const n = 100000
	for _, variant := range []string{"go", "go-stripped", "go-pie"} {
		t.Run(variant, func(t *testing.T) {
			res := traceFixture(t, fixture(t, variant), []string{"now", "100000"},
				Options{Functions: []string{"time.Now", "main.callNow"}})
			if f := function(t, res, "time.Now"); !within01(f.Calls, n) {
				t.Errorf("time.Now: %d calls, want %d ± 0.1%%", f.Calls, n)
			}
			if f := function(t, res, "main.callNow"); f.Calls != 1 {
				t.Errorf("main.callNow: %d calls, want 1", f.Calls)
			}
			if res.Cost.Hit <= 0 || res.Cost.HitEmulated <= 0 {
				t.Errorf("cost %+v: want positive figures", res.Cost)
			}
			if len(res.Processes) != 1 || res.Processes[0].PID == 0 || res.Processes[0].Calls < n {
				t.Errorf("processes %+v: want the fixture, with its calls", res.Processes)
			}
		})
	}
}

// TestGoLatency times a Go function that sleeps 1 ms, through its RET probes.
func TestGoLatency(t *testing.T) {
	requireRoot(t)
	res := traceFixture(t, fixture(t, "go"), []string{"sleep", "200"},
		Options{Functions: []string{"main.sleep1ms"}, Latency: true})
	f := function(t, res, "main.sleep1ms")
	if f.Calls != 200 || f.Returns != 200 || f.Unmatched != 0 || f.Lost != 0 {
		t.Errorf("main.sleep1ms: %d calls, %d returns, %d unmatched, %d lost; want 200, 200, 0, 0",
			f.Calls, f.Returns, f.Unmatched, f.Lost)
	}
	if p50 := time.Duration(f.Latency.Percentile(0.5)); p50 < time.Millisecond || p50 > 1500*time.Microsecond {
		t.Errorf("main.sleep1ms: p50 %v, want in [1ms, 1.5ms]", p50)
	}
}

// TestGoStacks counts and times calls per calling stack: every call of
// main.sleep1ms comes from main.main's loop, the caller the frame-pointer
// walk skips at a function's first instruction.
func TestGoStacks(t *testing.T) {
	requireRoot(t)
	bin := fixture(t, "go")
	res := traceFixture(t, bin, []string{"sleep", "200"},
		Options{Functions: []string{"main.sleep1ms"}, Latency: true, Stacks: true})
	f := function(t, res, "main.sleep1ms")
	if len(f.Stacks) == 0 {
		t.Fatal("no stacks")
	}
	table := goTable(t, bin)
	var calls uint64
	var took time.Duration
	for _, s := range f.Stacks {
		var names []string
		for i, pc := range s.PCs {
			if i > 0 {
				pc-- // a return address: the call is before it
			}
			if fn := table.PCToFunc(pc); fn != nil {
				names = append(names, fn.Name)
			}
		}
		t.Logf("%d calls, %v: %v", s.Calls, s.Time, names)
		if s.PID != res.Processes[0].PID || len(names) < 3 || names[0] != "main.sleep1ms" || names[1] != "main.main" {
			t.Errorf("stack %v of pid %d: want main.sleep1ms called by main.main, of the fixture", names, s.PID)
		}
		calls += s.Calls
		took += s.Time
	}
	if calls != 200 {
		t.Errorf("%d calls in stacks, want 200", calls)
	}
	if took < 200*time.Millisecond || took > 300*time.Millisecond {
		t.Errorf("calls took %v in stacks, want 200 of 1 ms and a little", took)
	}
}

// goTable is the Go symbol table of a non-PIE binary.
func goTable(t *testing.T, bin string) *gosym.Table {
	t.Helper()
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	pcln, err := f.Section(".gopclntab").Data()
	if err != nil {
		t.Fatal(err)
	}
	table, err := gosym.NewTable(nil, gosym.NewLineTable(pcln, f.Section(".text").Addr))
	if err != nil {
		t.Fatal(err)
	}
	return table
}

// TestGoStackGrowth traces a recursion deep enough that every goroutine's
// stack grows (and is copied) several times while return probes are
// attached: the program must not crash, every call must be counted once
// (morestack restarts a function from its entry) and matched with its
// return.
func TestGoStackGrowth(t *testing.T) {
	requireRoot(t)
	const goroutines, depth = 20, 2000
	res := traceFixture(t, fixture(t, "go"), []string{"grow", "20", "2000"},
		Options{Functions: []string{"main.grow", "main.work"}, Latency: true})
	for name, want := range map[string]uint64{"main.work": goroutines, "main.grow": goroutines * (depth + 1)} {
		f := function(t, res, name)
		if len(f.StackGrowth) == 0 {
			t.Errorf("%s: no stack growth probes", name)
		}
		if f.Calls != want || f.Returns != want || f.Unmatched != 0 || f.Lost != 0 {
			t.Errorf("%s: %d calls, %d returns, %d unmatched, %d lost; want %d, %d, 0, 0",
				name, f.Calls, f.Returns, f.Unmatched, f.Lost, want, want)
		}
		if f.Latency.Count() != want || f.Latency.Percentile(0.5) <= 0 {
			t.Errorf("%s: %d timed calls, p50 %v ns", name, f.Latency.Count(), f.Latency.Percentile(0.5))
		}
	}
	// work's call spans grow's: its median is at least grow's longest
	// (outermost) call's share.
	if w, g := function(t, res, "main.work"), function(t, res, "main.grow"); w.Latency.Percentile(0.5) < g.Latency.Percentile(0.5) {
		t.Errorf("main.work p50 %v ns < main.grow p50 %v ns", w.Latency.Percentile(0.5), g.Latency.Percentile(0.5))
	}
}

// TestC counts and times C functions with uretprobes, malloc in libc
// among them.
func TestC(t *testing.T) {
	requireRoot(t)
	bin := fixture(t, "c")
	res := traceFixture(t, bin, []string{"calls", "20000"},
		Options{Functions: []string{"work", "malloc", "free"}, Latency: true})
	if f := function(t, res, "work"); f.Calls != 20000 || f.Returns != 20000 || f.Latency.Count() != 20000 {
		t.Errorf("work: %d calls, %d timed; want 20000", f.Calls, f.Latency.Count())
	}
	for _, name := range []string{"malloc", "free"} {
		// stdio may allocate a few times too.
		if f := function(t, res, name); f.Calls < 20000 || f.Calls > 20050 || !f.Library {
			t.Errorf("%s: %d calls in %s; want 20000 (+ stdio's) in libc", name, f.Calls, f.Object)
		}
	}
	res = traceFixture(t, bin, []string{"sleep", "200"}, Options{Functions: []string{"sleep_1ms"}, Latency: true})
	f := function(t, res, "sleep_1ms")
	if f.Calls != 200 || f.Returns != 200 {
		t.Errorf("sleep_1ms: %d calls, %d returns; want 200", f.Calls, f.Returns)
	}
	if p50 := time.Duration(f.Latency.Percentile(0.5)); p50 < time.Millisecond || p50 > 1500*time.Microsecond {
		t.Errorf("sleep_1ms: p50 %v, want in [1ms, 1.5ms]", p50)
	}
}

// TestOverheadGuard traces time.Now in a loop that calls nothing else: the
// probe costs far more than the 2% budget and must be detached within the
// first check, and the program must carry on unharmed.
func TestOverheadGuard(t *testing.T) {
	requireRoot(t)
	var detached []Detach
	res := traceFixture(t, fixture(t, "go"), []string{"hot", "3"},
		Options{Functions: []string{"time.Now"}, MaxOverhead: 0.02, OnDetach: func(d Detach) { detached = append(detached, d) }})
	f := function(t, res, "time.Now")
	if f.Detached == nil || len(detached) != 1 || detached[0].Function != "time.Now" {
		t.Fatalf("time.Now not detached (callbacks %+v)", detached)
	}
	d := f.Detached
	if d.ProbeCPU <= 0.02 || d.Budget != 0.02 || d.Rate <= 0 {
		t.Errorf("detach %+v: want a probe share over the 0.02 budget", d)
	}
	// The first check is 200 ms after attaching; on a loaded machine the
	// fixture may not be running yet, so the next one (1 s) passes too.
	if d.After > 1500*time.Millisecond {
		t.Errorf("detached after %v, want within the first checks", d.After)
	}
	if f.Attached != d.After {
		t.Errorf("attached %v, detached after %v", f.Attached, d.After)
	}
}

// TestExe traces a binary rather than a process: processes started after
// the probes are attached are counted, each on its own.
func TestExe(t *testing.T) {
	requireRoot(t)
	bin := fixture(t, "go")
	tr, err := Start(Options{Target: Target{Exe: bin}, Functions: []string{"time.Now"}})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	for range 2 {
		cmd := exec.Command(bin, "now", "1000")
		cmd.Stdin = strings.NewReader("go\n")
		if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), "done") {
			t.Fatalf("fixture: %v: %s", err, out)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	res, err := tr.Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if f := function(t, res, "time.Now"); !within01(f.Calls, 2000) {
		t.Errorf("time.Now: %d calls, want 2000", f.Calls)
	}
	if len(res.Processes) != 2 {
		t.Errorf("processes %+v, want the two runs", res.Processes)
	}
	for _, p := range res.Processes {
		if p.Calls != 1000 || p.Comm != "trace-go" {
			t.Errorf("process %+v: want 1000 calls of trace-go", p)
		}
	}
}

// TestExeLibrary traces malloc in libc for one executable: its processes'
// calls count, not those of every other process on the machine.
func TestExeLibrary(t *testing.T) {
	requireRoot(t)
	bin := fixture(t, "c")
	tr, err := Start(Options{Target: Target{Exe: bin}, Functions: []string{"malloc"}})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	cmd := exec.Command(bin, "calls", "1000")
	cmd.Stdin = strings.NewReader("go\n")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("fixture: %v: %s", err, out)
	}
	// Other processes (this test's, the go tool's) call malloc meanwhile.
	time.Sleep(100 * time.Millisecond)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	res, err := tr.Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	f := function(t, res, "malloc")
	if f.Calls < 1000 || f.Calls > 1050 {
		t.Errorf("malloc: %d calls, want 1000 (+ stdio's)", f.Calls)
	}
	if len(res.Processes) != 1 || res.Processes[0].PID != cmd.Process.Pid {
		t.Errorf("processes %+v, want only the fixture (pid %d)", res.Processes, cmd.Process.Pid)
	}
}

func TestStartErrors(t *testing.T) {
	requireRoot(t)
	if _, err := Start(Options{Target: Target{PID: 1 << 30}, Functions: []string{"f"}}); !errors.Is(err, proc.ErrNoProcess) {
		t.Errorf("missing pid: %v, want ErrNoProcess", err)
	}
	if _, err := Start(Options{Target: Target{Exe: "/etc/hostname"}, Functions: []string{"f"}}); !errors.Is(err, ErrNotELF) {
		t.Errorf("text file: %v, want ErrNotELF", err)
	}
}

// TestOtherMountNamespace traces a process whose binary exists only in its
// own mount namespace (a container's view): flint reaches it through
// /proc/PID/map_files.
func TestOtherMountNamespace(t *testing.T) {
	requireRoot(t)
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Skip("needs unshare (util-linux)")
	}
	bin := fixture(t, "go")
	dir := t.TempDir()
	script := "mount -t tmpfs flint-trace-test " + dir + " && cp " + bin + " " + dir + "/trace-ns && exec " + dir + "/trace-ns now 5000"
	fx := startFixture(t, unshare, "-m", "--propagation", "private", "sh", "-c", script)
	if _, err := os.Stat(dir + "/trace-ns"); err == nil {
		fx.kill()
		t.Skip("the mount is visible here: no private mount namespace")
	}
	tr, err := Start(Options{Target: Target{PID: fx.pid()}, Functions: []string{"time.Now"}, Latency: true})
	if err != nil {
		fx.kill()
		t.Fatal(err)
	}
	defer tr.Close()
	fx.run()
	res, err := tr.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := <-fx.done; err != nil {
		t.Fatal(err)
	}
	if f := function(t, res, "time.Now"); !within01(f.Calls, 5000) || f.Object != dir+"/trace-ns" {
		t.Errorf("time.Now: %d calls in %s, want 5000 in %s/trace-ns", f.Calls, f.Object, dir)
	}
}
