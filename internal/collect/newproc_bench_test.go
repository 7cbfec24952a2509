package collect

import (
	"bufio"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/flint-dev/flint/internal/fixture"
	"github.com/flint-dev/flint/internal/proc"
	"github.com/flint-dev/flint/internal/python"
	"github.com/flint-dev/flint/internal/sampler"
	"github.com/flint-dev/flint/internal/store"
	"github.com/flint-dev/flint/internal/symbol"
)

// startMapper starts a long-lived process that maps many shared libraries,
// as a new process on a busy node does: python3 when installed (through
// whatever shims lead to it), else sleep. It returns once the process runs
// its final executable.
func startMapper(b *testing.B) int {
	b.Helper()
	argv := []string{"sleep", "600"}
	if _, err := exec.LookPath("python3"); err == nil {
		argv = []string{"python3", "-c", "import time, math, zlib, bz2, lzma, random; time.sleep(600)"}
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	pid := cmd.Process.Pid
	// A shim execs the real binary under the same PID: wait for its
	// mappings to settle (the last library it loads).
	for range 200 {
		exe, _ := os.Readlink("/proc/" + itoa(pid) + "/exe")
		maps, _ := os.ReadFile("/proc/" + itoa(pid) + "/maps")
		base := filepath.Base(exe)
		if strings.HasPrefix(base, strings.TrimSuffix(argv[0], "3")) &&
			(argv[0] == "sleep" || strings.Contains(string(maps), "lzma")) {
			return pid
		}
		time.Sleep(10 * time.Millisecond)
	}
	b.Fatalf("%s did not start", argv[0])
	return 0
}

func itoa(n int) string { return strconv.Itoa(n) }

// startSleepers starts n sleep processes and returns their PIDs, not
// looked up in /proc, and a function that kills them (at the end at the
// latest): each holds a descriptor of this process while it lives.
func startSleepers(b *testing.B, n int) ([]int, func()) {
	b.Helper()
	pids := make([]int, n)
	cmds := make([]*exec.Cmd, n)
	stop := func() {
		for _, cmd := range cmds {
			if cmd != nil {
				cmd.Process.Kill()
				cmd.Wait()
			}
		}
		clear(cmds)
	}
	b.Cleanup(stop)
	for i := range pids {
		cmds[i] = exec.Command("sleep", "600")
		if err := cmds[i].Start(); err != nil {
			b.Fatal(err)
		}
		pids[i] = cmds[i].Process.Pid
	}
	time.Sleep(100 * time.Millisecond) // past exec: sleep's own mappings
	return pids, stop
}

// cpuTime is the CPU time this process has used. On a shared machine the
// wall time per operation counts the time other work held the CPU; the
// CPU time per operation is what the agent would spend.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// reportCPU reports the CPU time per operation since start.
func reportCPU(b *testing.B, start time.Duration) {
	b.ReportMetric(float64(cpuTime()-start)/float64(b.N), "cpu-ns/op")
}

// BenchmarkNewProc measures what the agent spends when the sampler
// announces a new process: warm is the common case on a node, a new
// process of a binary whose files the agent already knows (a script run
// again, a worker forked); cold is the first process of its binaries.
func BenchmarkNewProc(b *testing.B) {
	pid := startMapper(b)
	p, err := proc.Read(pid)
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("pid %d: %s, %d executable mappings", pid, p.Exe, len(p.Mappings))
	// Each process image learned is forgotten, as the agent forgets
	// those that exited: a benchmark of more than maxProcs images would
	// otherwise time the Collector refusing them.
	b.Run("warm", func(b *testing.B) {
		sym := symbol.New()
		defer sym.Close()
		c := New(sym, "")
		c.NewProc(uint32(pid), 0)
		gen := uint32(1)
		cpu := cpuTime()
		for b.Loop() {
			c.NewProc(uint32(pid), gen)
			c.forget(procKey{uint32(pid), gen})
			gen++
		}
		reportCPU(b, cpu)
	})
	// As the sampler announces it: its name, start time and executable
	// known; with the kernel's listing of its mappings and key of its
	// cgroups, both known by then (listed: no /proc read), or without
	// (unlisted: /proc/PID/maps and cgroup read).
	for _, listed := range []bool{false, true} {
		b.Run(map[bool]string{false: "announced-unlisted", true: "announced-listed"}[listed], func(b *testing.B) {
			sym := symbol.New()
			defer sym.Close()
			c := New(sym, "")
			np := sampler.NewProc{PID: uint32(pid), Comm: p.Comm, StartTime: p.StartTime, Listed: true, Mappings: listingOf(p)}
			for _, m := range p.Mappings {
				if m.Path == p.Exe {
					np.ExeText = m.Start
				}
			}
			np.Cgroups = 0xc6
			c.Announced(np) // read from /proc: its files and cgroups matched
			if !listed {
				np.Listed, np.Cgroups = false, 0
			}
			gen := uint32(1)
			cpu := cpuTime()
			for b.Loop() {
				np.Generation = gen
				c.Announced(np)
				c.forget(procKey{uint32(pid), gen})
				gen++
			}
			reportCPU(b, cpu)
			if got := c.Stats().ProcessesListed; listed != (got > 0) {
				b.Fatalf("%d processes named from listings", got)
			}
		})
	}
	// sleep processes, each learned once as the agent learns a new one
	// (new-pid), or one of them again and again as warm does (same-pid):
	// the kernel builds /proc/PID's entries on the first look only. The
	// processes start outside the measured CPU time, at most maxSleepers
	// at once; sleep's files are known after the first.
	const maxSleepers = 500
	for _, run := range []struct {
		name  string
		fresh bool
	}{{"sleep-same-pid", false}, {"sleep-new-pid", true}} {
		fresh := run.fresh
		b.Run(run.name, func(b *testing.B) {
			sym := symbol.New()
			defer sym.Close()
			c := New(sym, "")
			first, _ := startSleepers(b, 1)
			c.NewProc(uint32(first[0]), 0)
			var cpu time.Duration
			gen := uint32(1)
			b.ResetTimer()
			for done := 0; done < b.N; {
				batch := b.N - done
				pid, stop := func(int) int { return first[0] }, func() {}
				if fresh {
					batch = min(batch, maxSleepers)
					b.StopTimer()
					pids, stopPids := startSleepers(b, batch)
					b.StartTimer()
					pid, stop = func(i int) int { return pids[i] }, stopPids
				}
				cpu0 := cpuTime()
				for i := range batch {
					k := procKey{uint32(pid(i)), gen}
					c.NewProc(k.pid, k.generation)
					c.forget(k)
					gen++
				}
				cpu += cpuTime() - cpu0
				stop()
				done += batch
			}
			b.ReportMetric(float64(cpu)/float64(b.N), "cpu-ns/op")
		})
	}
	b.Run("cold", func(b *testing.B) {
		cpu := cpuTime()
		for b.Loop() {
			sym := symbol.New()
			New(sym, "").NewProc(uint32(pid), 1)
			sym.Close()
		}
		reportCPU(b, cpu)
	})
}

// BenchmarkNewProcStored measures what a new process costs the agent from
// its announcement to its window in the store, per new process: NewProc,
// naming its samples (Profile), writing the window to SQLite, and the
// agent's end-of-window Forget and Trim. Each window holds batch new
// python3 processes (started and stopped outside the measured CPU time),
// each with three samples whose stacks run through the same code at its
// own ASLR addresses, as a script started again and again does. The first
// window is not measured: by then the agent knows python3's files.
//
//	go test -run '^$' -bench NewProcStored -benchtime 20x ./internal/collect/
func BenchmarkNewProcStored(b *testing.B) {
	py, err := exec.LookPath("python3")
	if err != nil {
		b.Skip("needs python3")
	}
	if out, err := exec.Command(py, "-c", "import sys; print(sys.executable)").Output(); err == nil {
		py = strings.TrimSpace(string(out)) // past shims: the interpreter itself
	}
	st, err := store.Open(b.TempDir(), store.DefaultOptions())
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	sym := symbol.New()
	defer sym.Close()
	c := New(sym, "node")
	const batch = 20
	var (
		gen, round uint32
		cpu        time.Duration
		windows    int
		start      = time.Now()
	)
	window := func(measure bool) {
		var cmds []*exec.Cmd
		var outs []io.Reader
		for range batch {
			cmd := exec.Command(py, "-c", "import sys, json, decimal; sys.stdout.write('ready\\n'); sys.stdout.flush(); sys.stdin.read()")
			stdin, _ := cmd.StdinPipe()
			out, _ := cmd.StdoutPipe()
			if err := cmd.Start(); err != nil {
				b.Fatal(err)
			}
			defer func() { stdin.Close(); cmd.Wait() }()
			cmds, outs = append(cmds, cmd), append(outs, out)
		}
		for _, out := range outs {
			if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "ready\n" {
				b.Fatalf("python3: %q, %v", line, err)
			}
		}
		var samples []sampler.Sample
		for i, cmd := range cmds {
			samples = append(samples, stacksIn(b, cmd.Process.Pid, gen+uint32(i)+1)...)
		}
		cpu0 := cpuTime()
		for _, cmd := range cmds {
			gen++
			c.NewProc(uint32(cmd.Process.Pid), gen)
		}
		round++
		p := c.Profile(samples, Options{Start: start.Add(time.Duration(round) * 10 * time.Second), Duration: 10 * time.Second, Period: 10 * time.Millisecond, Round: uint64(round)})
		if err := st.Write(context.Background(), p); err != nil {
			b.Fatal(err)
		}
		c.Forget(uint64(round))
		sym.Trim(c.Maps)
		if measure {
			cpu += cpuTime() - cpu0
			windows++
		}
	}
	window(false)
	for b.Loop() {
		window(true)
	}
	b.ReportMetric(float64(cpu)/float64(windows*batch), "cpu-ns/newproc")
}

// stacksIn returns three samples of process pid whose stacks are twenty
// addresses at fixed offsets into its largest executable file mapping
// (the interpreter's code), so every process runs "the same code".
func stacksIn(b *testing.B, pid int, gen uint32) []sampler.Sample {
	p, err := proc.Read(pid)
	if err != nil {
		b.Fatal(err)
	}
	var text *proc.Mapping
	for i := range p.Mappings {
		if m := &p.Mappings[i]; m.Inode != 0 && (text == nil || m.End-m.Start > text.End-text.Start) {
			text = m
		}
	}
	var out []sampler.Sample
	for s := range uint64(3) {
		var stack []uint64
		for i := range uint64(20) {
			stack = append(stack, text.Start+((s*20+i)*7919*16)%(text.End-text.Start))
		}
		out = append(out, sampler.Sample{PID: uint32(pid), TID: uint32(pid), Generation: gen, Comm: "python3", Thread: "python3", User: stack, Count: 1})
	}
	return out
}

// BenchmarkLearnPython measures what a new python3 process costs the agent
// for its Python frames, past NewProc: finding its interpreter and telling
// the sampler (learnPython), reading the code objects its samples' Python
// frames ran (ReadPython), and forgetting it; "learn" leaves out the
// reading. Every operation is a new image of one live python3 process, as
// a script run again and again is: the agent knows the interpreter's files
// already. Its six samples of twelve Python frames each name 34 code
// objects of a short run's imports (fixture.PythonCodes): 28 of modules
// frozen into the interpreter (importlib's, os's, codecs'), six made at
// run time.
//
//	go test -run '^$' -bench LearnPython -count 3 ./internal/collect/
func BenchmarkLearnPython(b *testing.B) {
	py, err := exec.LookPath("python3")
	if err != nil {
		b.Skip("needs python3")
	}
	pid, codes := fixture.PythonCodes(b, py)
	p, err := proc.Read(pid)
	if err != nil {
		b.Fatal(err)
	}
	var samples []sampler.Sample
	for i := range 6 {
		var stack []uint64
		for j := range 12 {
			stack = append(stack, frameWord(codes[(i*5+j)%len(codes)].Addr, uint32(j)))
		}
		samples = append(samples, sampler.Sample{PID: uint32(pid), TID: uint32(pid), Comm: "python3", Thread: "python3", User: stack, Count: 1})
	}
	for _, read := range []bool{false, true} {
		name := "learn"
		if read {
			name = "learn+read"
		}
		b.Run(name, func(b *testing.B) {
			sym := symbol.New()
			defer sym.Close()
			c := New(sym, "")
			c.SetPython(nopPython{})
			c.NewProc(uint32(pid), 0)
			if c.python(procKey{pid: uint32(pid)}) == nil {
				b.Fatalf("no interpreter found in %s (pid %d)", p.Exe, pid)
			}
			gen := uint32(1)
			cpu := cpuTime()
			for b.Loop() {
				k := procKey{uint32(pid), gen}
				if _, err := c.learnPython(k, p, sampler.NewProc{}); err != nil {
					b.Fatal(err)
				}
				if read {
					for i := range samples {
						samples[i].Generation = gen
					}
					c.ReadPython(samples)
				}
				c.mu.Lock()
				c.forgetPython(k, false)
				c.mu.Unlock()
				gen++
			}
			reportCPU(b, cpu)
		})
	}
}

// nopPython is a sampler that reads no Python frames.
type nopPython struct{}

func (nopPython) SetPython(uint32, uint32, *python.Interpreter) error { return nil }
func (nopPython) DeletePython(uint32, bool) error                     { return nil }

// forget drops process image k, as the agent's Forget does once it has
// exited.
func (c *Collector) forget(k procKey) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.drop(k)
}

// frameWord is the sampler's word for a Python frame running the code
// object at addr, at instruction index (bpf/profile.h, enum
// python_frame_bits).
func frameWord(addr uint64, index uint32) uint64 {
	return 1<<63 | uint64(index)<<44 | addr>>3
}

// BenchmarkProfileNewProcs measures what naming a window's samples
// (Profile) allocates for new python3 processes of a known interpreter:
// each operation is a window of 20 new images of one live python3, each
// with three samples of twenty native frames at its own addresses (as
// stacksIn) and the same twelve Python frames. Garbage collection costs
// the agent in proportion to these bytes.
//
//	go test -run '^$' -bench ProfileNewProcs -benchtime 50x ./internal/collect/
func BenchmarkProfileNewProcs(b *testing.B) {
	py, err := exec.LookPath("python3")
	if err != nil {
		b.Skip("needs python3")
	}
	pid, codes := fixture.PythonCodes(b, py)
	sym := symbol.New()
	defer sym.Close()
	c := New(sym, "node")
	c.SetPython(nopPython{})
	const batch = 20
	gen := uint32(0)
	window := func() []sampler.Sample {
		c.mu.Lock()
		for k := range c.procs {
			c.drop(k)
		}
		c.mu.Unlock()
		var samples []sampler.Sample
		for range batch {
			gen++
			c.NewProc(uint32(pid), gen)
			for _, s := range stacksIn(b, pid, gen) {
				for j := range 12 {
					s.User = append(s.User, frameWord(codes[j%len(codes)].Addr, uint32(j)))
				}
				samples = append(samples, s)
			}
		}
		c.ReadPython(samples)
		return samples
	}
	c.Profile(window(), Options{}) // the interpreter's addresses named
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		samples := window()
		b.StartTimer()
		c.Profile(samples, Options{})
	}
}

// BenchmarkForgetQuiet measures a window's Forget on a node of quiet
// processes: 200 live ones that no sample names, known past their first
// look in /proc.
//
//	go test -run '^$' -bench ForgetQuiet ./internal/collect/
func BenchmarkForgetQuiet(b *testing.B) {
	sym := symbol.New()
	defer sym.Close()
	c := New(sym, "")
	for range 200 {
		child, _ := startSleep(b)
		c.NewProc(uint32(child.Process.Pid), 1)
	}
	round := uint64(1)
	for ; round <= forgetRounds; round++ {
		c.Forget(round)
	}
	start := cpuTime()
	for b.Loop() {
		c.Forget(round)
		round++
	}
	reportCPU(b, start)
	if c.Processes() != 200 {
		b.Fatalf("%d processes known, want the 200 that run", c.Processes())
	}
}
