package doctor

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flint-dev/flint/internal/proc"
)

// The fixtures are in testdata/fixtures/doctor-*: each reproduces a problem
// and, with a flag, its fix.
const fixtureDir = "../../testdata/fixtures"

// testDuration is how long each root test records. Rates and shares, not
// counts, are asserted, so a short run under load still decides.
const testDuration = 3 * time.Second

// testFrequency samples often enough for per-thread shares in 3 s.
const testFrequency = 499

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (CAP_BPF, CAP_PERFMON, CAP_SYS_ADMIN for tracefs) to trace; CI runs it as root")
	}
	if testing.Short() {
		t.Skip("records for seconds; skipped with -short")
	}
}

var (
	fixturesOnce sync.Once
	fixtures     map[string]string
	fixturesDir  string
	fixturesErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if fixturesDir != "" {
		os.RemoveAll(fixturesDir)
	}
	os.Exit(code)
}

// buildFixtures compiles every doctor fixture once per test run: C with
// frame pointers and line tables, Go as `go build` does, plus the Go
// variants the GOMAXPROCS reader must handle.
func buildFixtures(t testing.TB) map[string]string {
	t.Helper()
	fixturesOnce.Do(func() {
		dir, err := os.MkdirTemp("", "flint-doctor-fixtures-")
		if err != nil {
			fixturesErr = err
			return
		}
		fixturesDir = dir
		// Readable by the unprivileged helper of TestNoPermission.
		os.Chmod(dir, 0o755)
		cflags := []string{"-O1", "-g", "-fno-omit-frame-pointer", "-Wall"}
		builds := map[string][]string{
			"busypoll":     append([]string{"gcc"}, append(cflags, "-o", "OUT", fixtureDir+"/doctor-busypoll.c")...),
			"eagain":       append([]string{"gcc"}, append(cflags, "-pthread", "-o", "OUT", fixtureDir+"/doctor-eagain.c")...),
			"probe":        append([]string{"gcc"}, append(cflags, "-o", "OUT", fixtureDir+"/doctor-probe.c")...),
			"sleeppoll":    append([]string{"gcc"}, append(cflags, "-pthread", "-o", "OUT", fixtureDir+"/doctor-sleeppoll.c")...),
			"syscost":      {"gcc", "-O2", "-g", "-fno-omit-frame-pointer", "-o", "OUT", fixtureDir + "/doctor-syscost.c"},
			"debugprint":   {"go", "build", "-o", "OUT", fixtureDir + "/doctor-debugprint"},
			"gomaxprocs":   {"go", "build", "-o", "OUT", fixtureDir + "/doctor-gomaxprocs"},
			"alloc":        {"go", "build", "-o", "OUT", fixtureDir + "/doctor-alloc"},
			"mutex":        {"go", "build", "-o", "OUT", fixtureDir + "/doctor-mutex"},
			"gomaxprocs-s": {"go", "build", "-ldflags=-s -w", "-o", "OUT", fixtureDir + "/doctor-gomaxprocs"},
			"gomaxprocs-p": {"go", "build", "-buildmode=pie", "-o", "OUT", fixtureDir + "/doctor-gomaxprocs"},
			"gomaxprocs-ps": {"go", "build", "-buildmode=pie", "-ldflags=-s -w", "-o", "OUT",
				fixtureDir + "/doctor-gomaxprocs"},
		}
		fixtures = map[string]string{}
		var mu sync.Mutex
		var wg sync.WaitGroup
		for name, argv := range builds {
			wg.Go(func() {
				out := filepath.Join(dir, name)
				argv = slices.Clone(argv)
				argv[slices.Index(argv, "OUT")] = out
				b, err := exec.Command(argv[0], argv[1:]...).CombinedOutput()
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					fixturesErr = fmt.Errorf("build fixture %s: %v\n%s", name, err, b)
					return
				}
				fixtures[name] = out
			})
		}
		wg.Wait()
	})
	if fixturesErr != nil {
		if _, err := exec.LookPath("gcc"); err != nil {
			t.Skip("needs gcc to build the C fixtures (make deps installs it)")
		}
		t.Fatal(fixturesErr)
	}
	return fixtures
}

// fixture is a running fixture process.
type fixture struct {
	cmd   *exec.Cmd
	pid   int
	ready []string // the words after "ready"
	stdin io.WriteCloser
	jobs  chan string // the lines "jobs N" it printed, N only
}

// startFixture runs argv (in cgroup dir, if not empty) with extra
// environment and waits for its "ready" line. Its stdout is drained so that
// printing never blocks it.
func startFixture(t *testing.T, cgroup string, env []string, argv ...string) *fixture {
	t.Helper()
	if cgroup != "" {
		// Join the cgroup before exec, so the Go runtime reads its quota at
		// start-up as it would in a container.
		argv = append([]string{"sh", "-c", `echo $$ > "$0/cgroup.procs" && exec "$@"`, cgroup}, argv...)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Env = slices.DeleteFunc(cmd.Env, func(kv string) bool {
		return strings.HasPrefix(kv, "GOMAXPROCS=") && !slices.Contains(env, kv)
	})
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	r := bufio.NewReader(stdout)
	line, err := r.ReadString('\n')
	f := strings.Fields(line)
	if err != nil || len(f) == 0 || f[0] != "ready" {
		t.Fatalf("fixture %v: got %q, %v before ready", argv, line, err)
	}
	fx := &fixture{cmd: cmd, pid: cmd.Process.Pid, ready: f[1:], stdin: stdin, jobs: make(chan string, 16)}
	go func() {
		for sc := bufio.NewScanner(r); sc.Scan(); {
			if n, ok := strings.CutPrefix(sc.Text(), "jobs "); ok {
				select {
				case fx.jobs <- n:
				default:
				}
			}
		}
	}()
	return fx
}

// work is what a fixture has done so far: the CPU it used, and the jobs it
// finished (fixtures that count them: doctor-gomaxprocs).
type work struct {
	cpu  time.Duration
	jobs int64
}

// workDone asks the fixture for its job count and reads its CPU time.
func (f *fixture) workDone(t *testing.T) work {
	t.Helper()
	fmt.Fprintln(f.stdin)
	var w work
	select {
	case n := <-f.jobs:
		w.jobs, _ = strconv.ParseInt(n, 10, 64)
	case <-time.After(10 * time.Second):
		t.Fatalf("pid %d did not say how many jobs it did", f.pid)
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", f.pid))
	if err != nil {
		t.Fatal(err)
	}
	// utime and stime, fields 14 and 15, counted after the command name.
	fields := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+2:]))
	utime, _ := strconv.ParseInt(fields[11], 10, 64)
	stime, _ := strconv.ParseInt(fields[12], 10, 64)
	w.cpu = time.Duration(utime+stime) * proc.ClockTick
	return w
}

// cpuPerJob is the CPU each job cost between two readings.
func cpuPerJob(t *testing.T, from, to work) time.Duration {
	t.Helper()
	if to.jobs <= from.jobs {
		t.Fatalf("no job done between %+v and %+v", from, to)
	}
	return (to.cpu - from.cpu) / time.Duration(to.jobs-from.jobs)
}

// cpuCgroup makes a cgroup v1 cpu cgroup limited to quota CPUs and removes
// it when the test ends.
func cpuCgroup(t *testing.T, quota float64) string {
	t.Helper()
	const root = "/sys/fs/cgroup/cpu"
	if _, err := os.Stat(filepath.Join(root, "cpu.cfs_quota_us")); err != nil {
		t.Skipf("needs the cgroup v1 cpu controller at %s to impose a CPU quota", root)
	}
	dir, err := os.MkdirTemp(root, "flint-doctor-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Move stragglers out, then remove it.
		if b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs")); err == nil {
			for _, pid := range strings.Fields(string(b)) {
				os.WriteFile(filepath.Join(root, "cgroup.procs"), []byte(pid), 0)
			}
		}
		for range 50 {
			if os.Remove(dir) == nil {
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
		t.Errorf("remove cgroup %s", dir)
	})
	const period = 100000
	write := func(file string, v int) {
		if err := os.WriteFile(filepath.Join(dir, file), []byte(strconv.Itoa(v)), 0); err != nil {
			t.Fatal(err)
		}
	}
	write("cpu.cfs_period_us", period)
	write("cpu.cfs_quota_us", int(quota*period))
	return dir
}

// doctorRun records pid with the default thresholds.
func doctorRun(t *testing.T, pid int, o Options) ([]Finding, *Data) {
	t.Helper()
	o.PID = pid
	if o.Duration == 0 {
		o.Duration = testDuration
	}
	if o.Frequency == 0 {
		o.Frequency = testFrequency
	}
	findings, data, err := Run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range data.Notes {
		t.Logf("note: %s", n)
	}
	return findings, data
}

// of keeps the findings about pid: other engineers' processes share the
// machine, and node-wide detectors see them.
func of(findings []Finding, pid int) []Finding {
	return slices.DeleteFunc(slices.Clone(findings), func(f Finding) bool { return f.PID != pid })
}

func byID(findings []Finding, id string) *Finding {
	for i := range findings {
		if findings[i].ID == id {
			return &findings[i]
		}
	}
	return nil
}

func evidence(f *Finding, name string) (Evidence, bool) {
	for _, e := range f.Evidence {
		if e.Name == name {
			return e, true
		}
	}
	return Evidence{}, false
}

func logFindings(t *testing.T, label string, findings []Finding) {
	t.Helper()
	for _, f := range findings {
		t.Logf("%s: [%s] %s pid %d: %s", label, f.Severity, f.ID, f.PID, f.Summary)
		for _, e := range f.Evidence {
			t.Logf("%s:     %s", label, e.Text)
		}
	}
}

// logTwin logs, for a healthy twin, every value the detectors compare with
// their thresholds: run with zero thresholds, each detector reports what it
// measured (the thresholds are tiny, not zero: zero would also fire on
// what was never seen). The margins noted in DefaultThresholds come from
// these lines, the worst of 20 runs under load (bench/twins.sh).
func logTwin(t *testing.T, label string, d *Data, pid int) {
	t.Helper()
	logMeasured(t, "twin "+label, d, pid)
}

// logMeasured logs what logTwin does, under another prefix.
func logMeasured(t *testing.T, prefix string, d *Data, pid int) {
	t.Helper()
	const tiny = 1e-9
	all := Thresholds{
		BusyPollRate: tiny, BusyPollEmptyShare: tiny, BusyPollThreadCPU: tiny,
		SleepPollRate: tiny, SleepPollShare: tiny, SleepPollRegular: tiny, SleepPollIO: 1e9,
		LockWaitGoroutines: tiny,
		ErrorRate:          tiny, ErrorShare: tiny,
		GOMAXPROCSMinCPU: tiny,
		RuntimeShare:     tiny, RuntimeMinCPU: tiny,
		PrintShare: tiny, PrintMinCPU: tiny, StdioWriteRate: tiny, StdioWriteBytes: tiny, StdioWriteMinCPU: tiny,
		UprobeHitCost: time.Nanosecond, ProbeCost: tiny,
	}
	judged := false
	for _, f := range of(AnalyzeWith(d, all), pid) {
		var values []string
		if f.ID == "go-runtime-overhead" { // the sum the threshold applies to
			values = append(values, fmt.Sprintf("runtime_share=%.4g", runtimeBreakdown(d, pid).overhead()))
			judged = true
		}
		for _, e := range f.Evidence {
			if e.Unit != "" {
				values = append(values, fmt.Sprintf("%s=%.4g", e.Name, e.Value))
			}
		}
		t.Logf("%s: %s %s", prefix, f.ID, strings.Join(values, " "))
	}
	// A Go process with too few samples (or CPU) to be judged: its shares
	// still, which count in a run where it has enough.
	if p := d.Processes[pid]; !judged && p != nil && p.Go != nil {
		b := runtimeBreakdown(d, pid)
		t.Logf("%s: go-runtime-overhead unjudged_samples=%d unjudged_runtime_share=%.4g unjudged_idle_share=%.4g",
			prefix, b.total, b.overhead(), b.share(classIdle))
	}
}

// processCPU is the CPU pid used during a run, from /proc: what the tests
// compare before and after a fix. Zero is a measurement too: /proc counts
// in 10 ms ticks, and a fixed server may use less than one in a run.
func processCPU(t *testing.T, d *Data, pid int) float64 {
	t.Helper()
	p := d.Processes[pid]
	if p == nil {
		t.Fatalf("no facts read about pid %d", pid)
	}
	return p.CPU.Seconds() / d.Duration.Seconds()
}
