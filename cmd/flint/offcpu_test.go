package main

import (
	"bufio"
	"fmt"
	"math"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	pprofile "github.com/google/pprof/profile"

	"github.com/flint-dev/flint/internal/server"
	"github.com/flint-dev/flint/internal/store/chtest"
)

// blockedFixture is a program whose waiting thread spends about 60% of its
// time asleep in sleep (nanosleep) and 40% blocked in block, and says how
// long exactly (startBlocked).
type blockedFixture struct {
	name, path   string
	waiter       string // a function only the waiting thread runs
	sleep, block string
	reason       string // in the kernel's frame where block waits
	threads      int    // all its threads, which never run for long; 0: unknown
}

// blockedFixtures builds testdata/fixtures/offcpu.c (block: a mutex the
// other thread holds) and testdata/fixtures/offcpu-go (block: a pipe
// another goroutine writes).
func blockedFixtures(t *testing.T) []blockedFixture {
	dir := t.TempDir()
	c, goFixture := filepath.Join(dir, "offcpu"), filepath.Join(dir, "offcpu-go")
	if out, err := exec.Command("gcc", "-O1", "-fno-omit-frame-pointer", "-pthread", "-o", c, "../../testdata/fixtures/offcpu.c").CombinedOutput(); err != nil {
		t.Fatalf("build fixture: %v\n%s", err, out)
	}
	if out, err := exec.Command("go", "build", "-o", goFixture, "../../testdata/fixtures/offcpu-go").CombinedOutput(); err != nil {
		t.Fatalf("build fixture: %v\n%s", err, out)
	}
	return []blockedFixture{
		{"c", c, "main", "sleepy", "contended", "futex", 2},
		{"go", goFixture, "main.main", "main.sleepy", "main.waitPipe", "pipe_read", 0},
	}
}

// TestRecordOffCPU records the blocked-time fixtures: the waiting thread's
// split within 5 points of what the fixture measured, its blocked time within 10% of the recording's
// length, the kernel's reason at the leaf, and with --wall all of the C
// fixture's threads' time within 10% of threads × length.
func TestRecordOffCPU(t *testing.T) {
	requireRoot(t)
	flint, _ := build(t)
	for _, fx := range blockedFixtures(t) {
		t.Run(fx.name, func(t *testing.T) {
			pid, spent := startBlocked(t, fx.path)
			before := spent()
			p := recordTime(t, flint, pid, "--off-cpu")
			checkBlocked(t, fx, p, spent().minus(before), time.Duration(p.DurationNanos), 0.9)
			if fx.threads == 0 {
				return // the Go runtime's threads come and go
			}
			p = recordTime(t, flint, pid, "--wall")
			if p.SampleType[0].Type != "wall" {
				t.Errorf("sample type %v, want wall/nanoseconds", p.SampleType[0])
			}
			var total int64
			for _, s := range p.Sample {
				total += s.Value[0]
			}
			want := int64(fx.threads) * p.DurationNanos
			if d := math.Abs(float64(total)/float64(want) - 1); d > 0.1 {
				t.Errorf("--wall: %s on and off the CPU for %d threads in %s, want within 10%% of %s",
					time.Duration(total), fx.threads, time.Duration(p.DurationNanos), time.Duration(want))
			}
		})
	}
}

// TestAgentBlockProfile asks the agent for /debug/pprof/block of each
// blocked-time fixture, as go tool pprof would.
func TestAgentBlockProfile(t *testing.T) {
	requireRoot(t)
	flint, _ := build(t)
	fixtures := blockedFixtures(t)
	a := startAgent(t, flint, t.TempDir())
	for _, fx := range fixtures {
		t.Run(fx.name, func(t *testing.T) {
			pid, spent := startBlocked(t, fx.path)
			before := spent()
			q := url.Values{"seconds": {"3"}, "pid": {strconv.Itoa(pid)}}
			p, err := pprofile.ParseData(a.get(t, "/debug/pprof/block", q))
			if err != nil {
				t.Fatal(err)
			}
			checkBlocked(t, fx, p, spent().minus(before), time.Duration(p.DurationNanos), 0.9)
			for _, s := range p.Sample {
				if got := s.NumLabel["pid"]; len(got) != 1 || got[0] != int64(pid) {
					t.Fatalf("a sample of pid %v, want only %d", got, pid)
				}
			}
		})
	}
	if n := a.metric(t, "flint_off_cpu_spans_total"); n == 0 {
		t.Error("flint_off_cpu_spans_total is 0")
	}
	stopAgent(t, a)
}

// TestAgentStoredOffCPU runs the agent with --off-cpu while each
// blocked-time fixture runs, a live /debug/pprof/block request in the
// middle, and reads the stored off-CPU profile of the fixture's life with
// flint query --type off-cpu: its split, and its waiting thread's time
// within 10% of the fixture's life. The CPU profile of the same range
// stays CPU samples: no off-CPU nanoseconds in it.
func TestAgentStoredOffCPU(t *testing.T) {
	requireRoot(t)
	flint, _ := build(t)
	fixtures := blockedFixtures(t)
	const window = 2 * time.Second
	a := startAgent(t, flint, t.TempDir(), "--off-cpu", "--window", window.String())
	checkStoredOffCPU(t, flint, fixtures, a, window, &server.Client{URL: "http://" + a.addr}, false)
	stopAgent(t, a)
}

// TestFleetOffCPU sends off-CPU time the way a fleet does: the agent's
// windows through its spool to ClickHouse, read back by `flint server`.
func TestFleetOffCPU(t *testing.T) {
	requireRoot(t)
	srv := chtest.Start(t)
	flint, _ := build(t)
	fixtures := blockedFixtures(t)
	const window = 2 * time.Second
	a := startAgent(t, flint, t.TempDir(), "--off-cpu", "--window", window.String(), "--store", srv.DSN("fleet"), "--node", "n1")
	waitSent(t, a, 1) // the schema made
	fleet := &server.Client{URL: "http://" + freeAddr(t)}
	startServer(t, "--store", srv.DSN("fleet", "user="+chtest.Reader, "password="+chtest.Password), "--listen", strings.TrimPrefix(fleet.URL, "http://"))
	waitHealthy(t, []*server.Client{fleet})
	checkStoredOffCPU(t, flint, fixtures, a, window, fleet, true)
	stopAgent(t, a)
}

// checkStoredOffCPU runs each fixture beside agent a, whose windows last
// window, and checks what stored says of its blocked and CPU time: the
// agent's own API, or with remote a server over the store the agent
// sends its windows to.
func checkStoredOffCPU(t *testing.T, flint string, fixtures []blockedFixture, a *agentProc, window time.Duration, stored *server.Client, remote bool) {
	for _, fx := range fixtures {
		t.Run(fx.name, func(t *testing.T) {
			from := time.Now().Add(-window) // the window the fixture starts in
			pid, spent := startBlocked(t, fx.path)
			started := time.Now()
			time.Sleep(2 * time.Second)
			// A live request in the middle leaves the program attached.
			live, err := pprofile.ParseData(a.get(t, "/debug/pprof/block", url.Values{"seconds": {"2"}, "pid": {strconv.Itoa(pid)}}))
			if err != nil {
				t.Fatal(err)
			}
			if len(live.Sample) == 0 {
				t.Error("live /debug/pprof/block of the fixture is empty")
			}
			time.Sleep(3 * time.Second)
			total := spent()
			life := time.Since(started)
			syscall.Kill(pid, syscall.SIGKILL)
			time.Sleep(window + time.Second) // its last window written
			if remote {
				waitFor(t, a, time.Minute, "the spool to empty", func() bool { return a.metric(t, "flint_spool_windows") == 0 })
			}
			to := time.Now()

			sel := fmt.Sprintf(`{pid="%d"}`, pid)
			out := filepath.Join(t.TempDir(), "off.pb.gz")
			args := []string{"query", "--server", stored.URL, "--type", "off-cpu", "--selector", sel,
				"--from", strconv.FormatInt(from.Unix(), 10), "--to", strconv.FormatInt(to.Unix()+1, 10), "-o", out}
			if msg, err := exec.Command(flint, args...).CombinedOutput(); err != nil {
				t.Fatalf("flint %s: %v\n%s", strings.Join(args, " "), err, msg)
			}
			f, err := os.Open(out)
			if err != nil {
				t.Fatal(err)
			}
			p, err := pprofile.Parse(f)
			f.Close()
			if err != nil {
				t.Fatal(err)
			}
			// The agent lists the fixture at once with the tables that
			// are ready (libc's), but the fixture's own table is built in
			// turn, after any large binary's started before it: in a CI
			// run beside other packages' tests (ClickHouse servers, JVMs
			// starting), the C fixture's waits in libc lost their caller
			// for 79% of its life. So no share of walked stacks is asked.
			checkBlocked(t, fx, p, total, life, 0)

			q := url.Values{"format": {"pprof"}, "selector": {sel},
				"from": {strconv.FormatInt(from.Unix(), 10)}, "to": {strconv.FormatInt(to.Unix()+1, 10)}}
			cpu, err := pprofile.ParseData([]byte(fetch(t, stored, "/api/v1/profile", q)))
			if err != nil {
				t.Fatal(err)
			}
			var samples int64
			for _, s := range cpu.Sample {
				samples += s.Value[0]
			}
			// The fixture hardly runs: its CPU samples stand for a small
			// part of its life; one off-CPU nanosecond counted as a
			// sample would be billions.
			if cpu.SampleType[0].Type != "samples" || time.Duration(samples*cpu.Period) > life/4 {
				t.Errorf("CPU profile of the fixture: %d %s of %s, want CPU samples of less than a quarter of its life %s",
					samples, cpu.SampleType[0].Type, time.Duration(cpu.Period), life)
			}
		})
	}
}

// spentTimes are the nanoseconds a blocked-time fixture says it spent in
// its two functions.
type spentTimes struct{ sleep, block int64 }

func (a spentTimes) minus(b spentTimes) spentTimes {
	return spentTimes{a.sleep - b.sleep, a.block - b.block}
}

// startBlocked starts a blocked-time fixture and returns its PID and what
// it last said it spent.
func startBlocked(t *testing.T, path string) (int, func() spentTimes) {
	t.Helper()
	cmd := exec.Command(path)
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	lines := bufio.NewScanner(out)
	if !lines.Scan() || lines.Text() != "ready" {
		t.Fatalf("fixture said %q", lines.Text())
	}
	var mu sync.Mutex
	var last spentTimes
	go func() {
		for lines.Scan() {
			var s spentTimes
			if _, err := fmt.Sscan(lines.Text(), &s.sleep, &s.block); err == nil {
				mu.Lock()
				last = s
				mu.Unlock()
			}
		}
	}()
	return cmd.Process.Pid, func() spentTimes {
		time.Sleep(150 * time.Millisecond) // a line newer than now
		mu.Lock()
		defer mu.Unlock()
		return last
	}
}

// checkBlocked checks an off-CPU profile of fx over length, in which the
// fixture says it spent spent in its functions. Of the waiting thread's
// blocked time, at least the share walked must have stacks through one of
// them (a wait in libc walked with frame pointers only skips its caller);
// their split is judged on those stacks.
func checkBlocked(t *testing.T, fx blockedFixture, p *pprofile.Profile, spent spentTimes, length time.Duration, walked float64) {
	t.Helper()
	if p.SampleType[0].Type != "off_cpu" || p.SampleType[0].Unit != "nanoseconds" {
		t.Errorf("sample type %v, want off_cpu/nanoseconds", p.SampleType[0])
	}
	var waiter, sleep, block, asleep, reason int64
	for _, s := range p.Sample {
		if !hasFunc(s, fx.waiter) {
			continue
		}
		waiter += s.Value[0]
		switch {
		case hasFunc(s, fx.sleep):
			sleep += s.Value[0]
			if s.Location[0].Line[0].Function.Name == "do_nanosleep" {
				asleep += s.Value[0]
			}
		case hasFunc(s, fx.block):
			block += s.Value[0]
			if strings.Contains(s.Location[0].Line[0].Function.Name, fx.reason) {
				reason += s.Value[0]
			}
		}
	}
	t.Logf("waiting thread: %s blocked of %s; %s %s, %s %s; the fixture says %s and %s", time.Duration(waiter), length,
		fx.sleep, time.Duration(sleep), fx.block, time.Duration(block), time.Duration(spent.sleep), time.Duration(spent.block))
	if d := math.Abs(float64(waiter)/float64(length) - 1); d > 0.1 {
		t.Errorf("the waiting thread blocked %s of %s, want within 10%%", time.Duration(waiter), length)
	}
	if sleep+block == 0 || float64(sleep+block) < walked*float64(waiter) {
		t.Errorf("%s of the waiting thread's %s blocked have stacks through %s or %s, want %.0f%% and some",
			time.Duration(sleep+block), time.Duration(waiter), fx.sleep, fx.block, 100*walked)
	}
	for _, share := range []struct {
		name       string
		ns, wantNS int64
	}{{fx.sleep, sleep, spent.sleep}, {fx.block, block, spent.block}} {
		got, want := 100*float64(share.ns)/float64(sleep+block), 100*float64(share.wantNS)/float64(spent.sleep+spent.block)
		if math.Abs(got-want) > 5 {
			t.Errorf("%s: %.1f%% of the waiting thread's blocked time in %s or %s, the fixture says %.1f%%; want within 5 points", share.name, got, fx.sleep, fx.block, want)
		}
	}
	// Not all: a thread may also be preempted on its way back to user
	// space (exit_to_user_mode_loop), Go's threads by its signals.
	if asleep < sleep*9/10 {
		t.Errorf("%s of %s in %s waits in do_nanosleep at the leaf, want 90%%", time.Duration(asleep), time.Duration(sleep), fx.sleep)
	}
	if reason < block*9/10 {
		t.Errorf("%s of %s in %s waits in %s at the leaf, want 90%%", time.Duration(reason), time.Duration(block), fx.block, fx.reason)
	}
}

// recordTime records process pid for 3 s with flag (--off-cpu, --wall)
// and returns the pprof profile.
func recordTime(t *testing.T, flint string, pid int, flag string) *pprofile.Profile {
	t.Helper()
	p, log := recordPprof(t, flint, "-p", strconv.Itoa(pid), flag, "-d", "3s")
	t.Logf("record %s said: %s", flag, log)
	return p
}

// hasFunc reports whether a sample's stack holds function fn.
func hasFunc(s *pprofile.Sample, fn string) bool {
	for _, l := range s.Location {
		for _, line := range l.Line {
			if line.Function.Name == fn {
				return true
			}
		}
	}
	return false
}
