package collect

import (
	"bufio"
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	pprofile "github.com/google/pprof/profile"

	"github.com/flint-dev/flint/internal/profile"
	"github.com/flint-dev/flint/internal/sampler"
)

// The fixtures burn CPU 50/30/20 between three functions; see
// testdata/fixtures.
var (
	cFuncs  = []string{"func_a", "func_b", "func_c"}
	goFuncs = []string{"main.funcA", "main.funcB", "main.funcC"}
	split   = []float64{50, 30, 20}
)

const (
	testFreq     = 997
	testDuration = 3 * time.Second
	tolerance    = 3.0  // percentage points
	minMainShare = 99.0 // percent of samples whose stack reaches main
)

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (CAP_BPF, CAP_PERFMON) to load BPF programs; CI runs it as root")
	}
}

var (
	fixturesOnce sync.Once
	fixtures     map[string]string
	fixturesErr  error
)

// buildFixtures compiles every fixture variant once per test run.
func buildFixtures(t *testing.T) map[string]string {
	t.Helper()
	fixturesOnce.Do(func() {
		dir, err := os.MkdirTemp("", "flint-fixtures-")
		if err != nil {
			fixturesErr = err
			return
		}
		src := "../../testdata/fixtures"
		builds := map[string][]string{
			"c-nopie":     {"gcc", "-O1", "-fno-omit-frame-pointer", "-no-pie", "-o", "OUT", src + "/spin.c"},
			"c-pie":       {"gcc", "-O1", "-fno-omit-frame-pointer", "-fPIE", "-pie", "-o", "OUT", src + "/spin.c"},
			"go":          {"go", "build", "-o", "OUT", src + "/spin-go"},
			"go-stripped": {"go", "build", "-ldflags=-s -w", "-o", "OUT", src + "/spin-go"},
			"go-pie":      {"go", "build", "-buildmode=pie", "-o", "OUT", src + "/spin-go"},
		}
		fixtures = map[string]string{}
		for name, argv := range builds {
			out := filepath.Join(dir, name)
			argv = slices.Clone(argv)
			argv[slices.Index(argv, "OUT")] = out
			if b, err := exec.Command(argv[0], argv[1:]...).CombinedOutput(); err != nil {
				fixturesErr = fmt.Errorf("build fixture %s: %v\n%s", name, err, b)
				return
			}
			fixtures[name] = out
		}
	})
	if fixturesErr != nil {
		if _, err := exec.LookPath("gcc"); err != nil {
			t.Skip("needs gcc to build the C fixtures (make deps installs it)")
		}
		t.Fatal(fixturesErr)
	}
	return fixtures
}

// startFixture runs argv and waits until it prints "ready".
func startFixture(t *testing.T, argv ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || line != "ready\n" {
		t.Fatalf("fixture %v: got %q, %v before ready", argv, line, err)
	}
	return cmd
}

func record(t *testing.T, o RecordOptions) *profile.Profile {
	t.Helper()
	if o.Frequency == 0 {
		o.Frequency = testFreq
	}
	if o.Duration == 0 {
		o.Duration = testDuration
	}
	o.KernelStacks = true
	res, err := Record(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range res.Warnings {
		t.Logf("warning: %s", w)
	}
	return res.Profile
}

// shares returns, over the samples keep selects, the percentage whose stack
// holds each of funcs and the percentage that reaches mainFunc.
func shares(p *profile.Profile, keep func(*profile.Sample) bool, funcs []string, mainFunc string) (got []float64, mainShare float64, total int64) {
	counts := make([]int64, len(funcs))
	var reachMain int64
	for _, s := range p.Samples {
		if !keep(s) {
			continue
		}
		total += s.Count
		seen := map[string]bool{}
		for _, l := range s.Stack {
			for _, f := range l.Frames {
				seen[f.Function] = true
			}
		}
		for i, fn := range funcs {
			if seen[fn] {
				counts[i] += s.Count
			}
		}
		if seen[mainFunc] {
			reachMain += s.Count
		}
	}
	if total == 0 {
		return make([]float64, len(funcs)), 0, 0
	}
	for _, c := range counts {
		got = append(got, 100*float64(c)/float64(total))
	}
	return got, 100 * float64(reachMain) / float64(total), total
}

func checkSplit(t *testing.T, p *profile.Profile, keep func(*profile.Sample) bool, funcs []string, mainFunc string) {
	t.Helper()
	got, mainShare, total := shares(p, keep, funcs, mainFunc)
	t.Logf("%d samples: %s %.1f%%, %s %.1f%%, %s %.1f%%; %.2f%% reach %s",
		total, funcs[0], got[0], funcs[1], got[1], funcs[2], got[2], mainShare, mainFunc)
	// 3 s at 997 Hz is ~3000 samples of a busy thread; allow for a loaded CI.
	if total < 1000 {
		t.Fatalf("only %d samples of the fixture", total)
	}
	for i := range funcs {
		if math.Abs(got[i]-split[i]) > tolerance {
			t.Errorf("%s: %.1f%% of samples, want %.0f%% ± %.0f", funcs[i], got[i], split[i], tolerance)
		}
	}
	if mainShare < minMainShare {
		t.Errorf("%.2f%% of samples reach %s, want ≥ %.0f%%", mainShare, mainFunc, minMainShare)
		dumpTop(t, p, keep, mainFunc)
	}
}

// dumpTop logs the most common stacks that miss mainFunc, to debug unwinding.
func dumpTop(t *testing.T, p *profile.Profile, keep func(*profile.Sample) bool, mainFunc string) {
	for _, line := range p.Folded() {
		t.Log(line)
	}
}

func byPID(pid int) func(*profile.Sample) bool {
	want := strconv.Itoa(pid)
	return func(s *profile.Sample) bool { return s.Labels[profile.LabelPID] == want }
}

// TestRecordKnownSplit records each fixture variant by PID and checks the
// CPU split and that stacks are unwound to main.
func TestRecordKnownSplit(t *testing.T) {
	requireRoot(t)
	fx := buildFixtures(t)
	for _, tc := range []struct {
		fixture  string
		funcs    []string
		mainFunc string
	}{
		{"c-nopie", cFuncs, "main"},
		{"c-pie", cFuncs, "main"},
		{"go", goFuncs, "main.main"},
		{"go-stripped", goFuncs, "main.main"},
		{"go-pie", goFuncs, "main.main"},
	} {
		t.Run(tc.fixture, func(t *testing.T) {
			cmd := startFixture(t, append([]string{fx[tc.fixture]}, argDuration(tc.fixture, 30)...)...)
			p := record(t, RecordOptions{PID: cmd.Process.Pid})
			checkSplit(t, p, byPID(cmd.Process.Pid), tc.funcs, tc.mainFunc)
		})
	}
}

// argDuration is the command line asking a fixture to run for seconds.
func argDuration(fixture string, seconds float64) []string {
	s := strconv.FormatFloat(seconds, 'f', -1, 64)
	if fixture[:2] == "go" {
		return []string{"-d", s}
	}
	return []string{s}
}

// TestRecordGoInlinedFrames checks that the work mix, inlined into burn, is
// its own frame with file and line.
func TestRecordGoInlinedFrames(t *testing.T) {
	requireRoot(t)
	fx := buildFixtures(t)
	cmd := startFixture(t, fx["go-stripped"], "-d", "30")
	p := record(t, RecordOptions{PID: cmd.Process.Pid, Duration: time.Second})
	var total, inlined int64
	for _, s := range p.Samples {
		total += s.Count
		for _, l := range s.Stack {
			if len(l.Frames) >= 2 && l.Frames[0].Function == "main.mix" && l.Frames[1].Function == "main.burn" {
				if filepath.Base(l.Frames[0].File) != "main.go" || l.Frames[0].Line == 0 {
					t.Errorf("inlined frame without file:line: %+v", l.Frames[0])
				}
				inlined += s.Count
				break
			}
		}
	}
	// mix is nearly all of burn's work.
	if inlined < total/2 {
		t.Errorf("%d of %d samples show main.mix inlined into main.burn", inlined, total)
	}
}

// TestRecordAgainstGoProfiler compares flint's split with Go's own CPU
// profile of the same run.
func TestRecordAgainstGoProfiler(t *testing.T) {
	requireRoot(t)
	fx := buildFixtures(t)
	goProf := filepath.Join(t.TempDir(), "go.pprof")
	cmd := startFixture(t, fx["go"], "-d", "3.5", "-cpuprofile", goProf, "-rate", "500")
	p := record(t, RecordOptions{PID: cmd.Process.Pid})
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	ours, _, _ := shares(p, byPID(cmd.Process.Pid), goFuncs, "main.main")
	f, err := os.Open(goProf)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	gp, err := pprofile.Parse(f)
	if err != nil {
		t.Fatal(err)
	}
	theirs := goShares(gp, goFuncs)
	t.Logf("flint %v, Go's profiler %v", ours, theirs)
	for i, fn := range goFuncs {
		if math.Abs(ours[i]-theirs[i]) > tolerance {
			t.Errorf("%s: flint %.1f%%, Go's profiler %.1f%%", fn, ours[i], theirs[i])
		}
	}
}

func goShares(p *pprofile.Profile, funcs []string) []float64 {
	counts := make([]int64, len(funcs))
	var total int64
	for _, s := range p.Sample {
		total += s.Value[0]
		seen := map[string]bool{}
		for _, l := range s.Location {
			for _, line := range l.Line {
				seen[line.Function.Name] = true
			}
		}
		for i, fn := range funcs {
			if seen[fn] {
				counts[i] += s.Value[0]
			}
		}
	}
	out := make([]float64, len(funcs))
	for i, c := range counts {
		out[i] = 100 * float64(c) / float64(max(total, 1))
	}
	return out
}

// TestRecordOtherMountNamespace names a process whose binary exists only in
// its own mount namespace, as in a container.
func TestRecordOtherMountNamespace(t *testing.T) {
	requireRoot(t)
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Skip("needs unshare (util-linux)")
	}
	fx := buildFixtures(t)
	dir := t.TempDir()
	script := fmt.Sprintf("mount -t tmpfs flint-test %[1]s && cp %[2]s %[1]s/spin-ns && exec %[1]s/spin-ns 30", dir, fx["c-pie"])
	cmd := startFixture(t, "unshare", "--mount", "--propagation", "private", "sh", "-c", script)
	if _, err := os.Stat(filepath.Join(dir, "spin-ns")); err == nil {
		t.Fatal("the binary is visible outside its mount namespace: the test proves nothing")
	}
	p := record(t, RecordOptions{PID: cmd.Process.Pid})
	checkSplit(t, p, byPID(cmd.Process.Pid), cFuncs, "main")
}

// TestRecordDeletedBinary names a process whose binary was deleted after it
// started.
func TestRecordDeletedBinary(t *testing.T) {
	requireRoot(t)
	fx := buildFixtures(t)
	for _, name := range []string{"c-pie", "go-stripped"} {
		t.Run(name, func(t *testing.T) {
			bin := filepath.Join(t.TempDir(), "doomed")
			copyFile(t, fx[name], bin)
			cmd := startFixture(t, append([]string{bin}, argDuration(name, 30)...)...)
			if err := os.Remove(bin); err != nil {
				t.Fatal(err)
			}
			p := record(t, RecordOptions{PID: cmd.Process.Pid})
			funcs, mainFunc := cFuncs, "main"
			if name[:2] == "go" {
				funcs, mainFunc = goFuncs, "main.main"
			}
			checkSplit(t, p, byPID(cmd.Process.Pid), funcs, mainFunc)
		})
	}
}

// TestRecordShortLivedProcesses records the whole machine while processes
// living 0.4 s come and go: each is named though it exits before the end.
func TestRecordShortLivedProcesses(t *testing.T) {
	requireRoot(t)
	fx := buildFixtures(t)
	bin := filepath.Join(t.TempDir(), "spinshort")
	copyFile(t, fx["c-pie"], bin)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int)
	go func() {
		n := 0
		defer func() { done <- n }()
		for ctx.Err() == nil {
			if err := exec.CommandContext(ctx, bin, "0.4").Run(); err == nil {
				n++
			}
		}
	}()
	p := record(t, RecordOptions{})
	cancel()
	runs := <-done
	t.Logf("%d short-lived processes ran", runs)
	if runs < 3 {
		t.Fatalf("only %d short-lived processes ran", runs)
	}
	checkSplit(t, p, func(s *profile.Sample) bool { return s.Labels[profile.LabelComm] == "spinshort" }, cFuncs, "main")
}

// TestRecordAggregate checks the in-kernel aggregation transfer gives the
// same result as the default ring buffer.
func TestRecordAggregate(t *testing.T) {
	requireRoot(t)
	fx := buildFixtures(t)
	cmd := startFixture(t, fx["go"], "-d", "30")
	p := record(t, RecordOptions{PID: cmd.Process.Pid, Transfer: sampler.Aggregate})
	checkSplit(t, p, byPID(cmd.Process.Pid), goFuncs, "main.main")
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o755); err != nil {
		t.Fatal(err)
	}
}
