package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	pprofile "github.com/google/pprof/profile"

	"github.com/flint-dev/flint/internal/fixture"
	"github.com/flint-dev/flint/internal/selector"
	"github.com/flint-dev/flint/internal/store"
)

func TestParseAgent(t *testing.T) {
	c, err := parseAgent(strings.Fields("--data-dir /d --retention 2d12h --max-size 500MB --window 5s --frequency 49 --doctor-every 5m --young-sample 1"))
	if err != nil {
		t.Fatal(err)
	}
	if c.DataDir != "/d" || c.Retention != 60*time.Hour || c.MaxSize != 500e6 || c.Window != 5*time.Second || c.Frequency != 49 || c.DoctorEvery != 5*time.Minute || c.YoungSampleEvery != 1 {
		t.Errorf("config %+v", c.Options)
	}
	if c, _ := parseAgent(nil); c.YoungSampleEvery != 10 {
		t.Errorf("default --young-sample %d, want 10", c.YoungSampleEvery)
	}
	if c.OffCPU != nil {
		t.Errorf("off-CPU time recorded without --off-cpu: %+v", c.OffCPU)
	}
	c, err = parseAgent(strings.Fields("--off-cpu --off-cpu-min 5ms --off-cpu-sample 10"))
	if err != nil {
		t.Fatal(err)
	}
	if o := c.OffCPU; o == nil || o.Min != 5*time.Millisecond || o.SampleEvery != 10 {
		t.Errorf("--off-cpu --off-cpu-min 5ms --off-cpu-sample 10: %+v", o)
	}
	for _, bad := range []string{"--frequency 0", "--window 0s", "--retention -1h", "--retention 3x", "--max-size lots", "--max-size 10KB", "--data-dir=", "--doctor-every -1m", "extra",
		"--off-cpu --off-cpu-min 2m", "--off-cpu --off-cpu-sample 0", "--young-sample 0", "--young-sample 101", "--young-sample -1", "--young-sample 1e9"} {
		if _, err := parseAgent(strings.Fields(bad)); err == nil {
			t.Errorf("parseAgent(%q) succeeded", bad)
		}
	}
}

func TestParseAgentStore(t *testing.T) {
	t.Setenv("FLINT_STORE", "")
	c, err := parseAgent([]string{"--store", "clickhouse://ch.internal:8123/flint?user=flint&password_file=/run/secrets/ch", "--spool-max", "64MB"})
	if err != nil {
		t.Fatal(err)
	}
	if c.Store != "clickhouse://ch.internal:8123/flint?user=flint&password_file=/run/secrets/ch" || c.SpoolMax != 64e6 {
		t.Errorf("config %+v", c.Options)
	}
	if c, _ := parseAgent(nil); c.Store != "" || c.SpoolMax != 256<<20 {
		t.Errorf("defaults: store %q, spool max %d; want SQLite and 256MiB", c.Store, c.SpoolMax)
	}
	t.Setenv("FLINT_STORE", "clickhouse://ch:8123/flint?password=p")
	if c, _ := parseAgent(nil); c.Store != "clickhouse://ch:8123/flint?password=p" {
		t.Errorf("store %q, want $FLINT_STORE", c.Store)
	}
	if c, _ := parseAgent([]string{"--store", ""}); c.Store != "" {
		t.Errorf("--store '' kept %q, want SQLite", c.Store)
	}
	t.Setenv("FLINT_STORE", "")
	for _, tc := range []struct{ args, want string }{
		{"--store http://ch:8123/flint", `unknown scheme "http"`},
		{"--store clickhouse:///flint", "no host"},
		{"--store ://secret@", "not a URL"},
		{"--store ftp://user:secret@ch/flint", `unknown scheme "ftp"`},
		{"--spool-max 10KB", "below 1MB"},
		{"--spool-max 0", "below 1MB"},
		{"--spool-max lots", "bad size"},
	} {
		_, err := parseAgent(strings.Fields(tc.args))
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "secret") {
			t.Errorf("parseAgent(%q): %v, want an error with %q and no password", tc.args, err, tc.want)
		}
	}
}

func TestParseAgentExport(t *testing.T) {
	c, err := parseAgent(strings.Fields("--export otlp://collector:4317 --export otlphttps://collector:4318 --export pyroscopes://u:secret@pyro.example/prefix --receive otlp"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range c.Exports {
		names = append(names, s.Name())
	}
	if got := strings.Join(names, " "); got != "otlp://collector:4317 otlphttps://collector:4318 pyroscopes://pyro.example/prefix" || c.ReceiveOTLP != "127.0.0.1:4317" {
		t.Errorf("exports %q, receive %q", got, c.ReceiveOTLP)
	}
	if c, _ := parseAgent(nil); len(c.Exports) != 0 || c.ReceiveOTLP != "" {
		t.Errorf("defaults export %d targets and receive on %q; want neither", len(c.Exports), c.ReceiveOTLP)
	}
	for _, tc := range []struct{ args, want string }{
		{"--export http://collector:4318", `want otlp://`},
		{"--export otlp://collector", "want otlp://HOST:PORT"},
		{"--export otlp://u:secret@collector:4317", "credentials"},
		{"--export pyroscope://", "no host"},
		{"--receive zipkin", "only protocol received is otlp"},
		{"--receive otlp --receive-listen 0.0.0.0:4317", "token"},
	} {
		_, err := parseAgent(strings.Fields(tc.args))
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "secret") {
			t.Errorf("parseAgent(%q): %v, want an error with %q and no password", tc.args, err, tc.want)
		}
	}
}

// freeAddr returns a loopback address with a port free right now.
func freeAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

type agentProc struct {
	cmd    *exec.Cmd
	addr   string
	dir    string
	stderr *bytes.Buffer
}

func startAgent(t *testing.T, flint, dir string, args ...string) *agentProc {
	t.Helper()
	return startAgentOn(t, flint, dir, freeAddr(t), args...)
}

// startAgentOn starts the agent with its API on addr and waits until it
// answers there. It samples every tick of every process (--young-sample
// 1, unless args say otherwise): the tests compare the samples of
// fixtures they start with the CPU those used, from their first tick,
// and one sample in ten of a fixture's first second would spread the
// count of 2 s of CPU at 499 Hz by 7% (one standard deviation);
// TestSamplerYoungSample checks such counts.
func startAgentOn(t *testing.T, flint, dir, addr string, args ...string) *agentProc {
	t.Helper()
	a := &agentProc{addr: addr, dir: dir, stderr: &bytes.Buffer{}}
	args = append([]string{"agent", "--data-dir", dir, "--listen", a.addr, "--young-sample", "1"}, args...)
	a.cmd = exec.Command(flint, args...)
	a.cmd.Stderr = a.stderr
	if err := a.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.cmd.Process.Kill(); a.cmd.Wait() })
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if resp, err := http.Get("http://" + a.addr + "/healthz"); err == nil {
			resp.Body.Close()
			return a
		}
		if time.Now().After(deadline) {
			t.Fatalf("agent did not come up: %s", a.stderr)
		}
	}
}

func (a *agentProc) get(t *testing.T, path string, q url.Values) []byte {
	t.Helper()
	resp, err := http.Get("http://" + a.addr + path + "?" + q.Encode())
	if err != nil {
		t.Fatalf("%v; the agent said: %s", err, a.stderr)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("GET %s: %d %s", path, resp.StatusCode, body)
	}
	return body
}

// metric reads one value from /metrics.
func (a *agentProc) metric(t *testing.T, name string) float64 {
	body := a.get(t, "/metrics", nil)
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + ` (\S+)$`).FindSubmatch(body)
	if m == nil {
		t.Fatalf("no %s in /metrics", name)
	}
	v, _ := strconv.ParseFloat(string(m[1]), 64)
	return v
}

// fixtureCPU is the CPU time the agent tests let the spin fixture use: 20
// turns of its 100 ms loop, enough for its split to show within 3 points.
// How long that takes depends on how busy the machine is.
const fixtureCPU = 2 * time.Second

// TestAgentProfileMatchesSplit runs the agent while the fixture spins and
// short-lived processes come and go, then checks the API's profile of the
// range: the known split, samples for all the CPU time each used,
// short-lived processes named after they exited, and what the agent itself
// cost.
func TestAgentProfileMatchesSplit(t *testing.T) {
	requireRoot(t)
	flint, spin := build(t)
	a := startAgent(t, flint, t.TempDir(), "--window", "2s", "--frequency", "499")
	from := time.Now()
	stolen := -fixture.Stolen(t) // from the machine's CPUs while the fixtures ran
	// Started once the agent samples, the fixture has all its life sampled.
	pid := startSpin(t, spin)
	// A name no other process has, not even this test's in another run
	// of the suite at the same time: the agent samples the whole machine.
	name := fmt.Sprintf("ashort%d", os.Getpid())
	short := filepath.Join(t.TempDir(), name)
	copyFile(t, spin, short)
	var shortCPU time.Duration
	for range 5 {
		cmd := exec.Command(short, "0.2")
		if err := cmd.Run(); err != nil {
			t.Fatal(err)
		}
		shortCPU += cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	}
	fixture.Start(t, pid).Await(t, fixtureCPU)
	freeze(t, pid)
	stolen += fixture.Stolen(t)
	cpu, err := fixture.CPU(pid)
	if err != nil {
		t.Fatal(err)
	}
	// Two more windows: the second began after the fixture stopped.
	waitMetric(t, a, "flint_windows_written_total", a.metric(t, "flint_windows_written_total")+2)
	q := url.Values{"from": {strconv.FormatInt(from.Unix()-1, 10)}, "to": {"now"}, "format": {"pprof"}}

	q.Set("selector", fmt.Sprintf(`{pid="%d"}`, pid))
	data := a.get(t, "/api/v1/profile", q)
	checkPprofSplit(t, data, []string{"func_a", "func_b", "func_c"}, []float64{50, 30, 20})
	p, err := pprofile.ParseData(data)
	if err != nil {
		t.Fatal(err)
	}
	fixture.CheckSamples(t, "the fixture", totalSamples(p), 499, cpu, stolen)

	q.Set("selector", fmt.Sprintf(`{comm=%q}`, name))
	p, err = pprofile.ParseData(a.get(t, "/api/v1/profile", q))
	if err != nil {
		t.Fatal(err)
	}
	named, total := funcSamples(p, "func_a"), totalSamples(p)
	fixture.CheckSamples(t, "5 short-lived processes", total, 499, shortCPU, stolen)
	if named < total/3 {
		t.Errorf("short-lived processes: %d samples, %d in func_a", total, named)
	}

	q.Set("selector", fmt.Sprintf(`{pid="%d"}`, a.cmd.Process.Pid))
	q.Set("format", "folded")
	if self := a.get(t, "/api/v1/profile", q); !bytes.Contains(self, []byte("[flint BPF programs]")) {
		t.Errorf("the agent's own cost is not stored under its labels:\n%s", self)
	}
}

// freeze stops the process pid with SIGSTOP and returns once it is
// stopped: its CPU time no longer grows.
func freeze(t *testing.T, pid int) {
	t.Helper()
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			t.Fatal(err)
		}
		// The state follows the command name in parentheses.
		if i := bytes.LastIndexByte(b, ')'); i > 0 && i+2 < len(b) && b[i+2] == 'T' {
			return
		}
	}
	t.Fatalf("pid %d did not stop", pid)
}

// TestAgentLiveProfile asks the agent for a live pprof profile of the
// fixture while its windows are long: the profile holds the known split,
// and only the samples of the requested seconds, not those the agent had
// not yet drained from the kernel when the request came.
func TestAgentLiveProfile(t *testing.T) {
	requireRoot(t)
	flint, spin := build(t)
	a := startAgent(t, flint, t.TempDir(), "--window", "1m", "--frequency", "499")
	pid := startSpin(t, spin)
	// Samples the profile must not hold: as many as it should hold, for
	// the profile asks for as long as this took.
	before := fixture.Start(t, pid).Await(t, fixtureCPU)
	seconds := max(2, int(math.Ceil(before.Seconds())))
	log := fixture.StartLog(t, pid)
	stolen := -fixture.Stolen(t)
	data := a.get(t, "/debug/pprof/profile", url.Values{"seconds": {strconv.Itoa(seconds)}, "pid": {strconv.Itoa(pid)}})
	stolen += fixture.Stolen(t)
	log.Stop()
	checkPprofSplit(t, data, []string{"func_a", "func_b", "func_c"}, []float64{50, 30, 20})
	p, err := pprofile.ParseData(data)
	if err != nil {
		t.Fatal(err)
	}
	// The profile says when it began and how long it lasted. It holds the
	// samples drained from the kernel between then and its end; a drain
	// takes milliseconds, a small part of the tolerance.
	start := time.Unix(0, p.TimeNanos)
	lo, hi := log.Between(t, start, start.Add(time.Duration(p.DurationNanos)))
	fixture.CheckSamplesBetween(t, "the live profile", totalSamples(p), 499, lo, hi, stolen)
}

func checkPprofSplit(t *testing.T, data []byte, funcs []string, want []float64) {
	t.Helper()
	p, err := pprofile.ParseData(data)
	if err != nil {
		t.Fatal(err)
	}
	checkSplit(t, p, funcs, want)
}

// checkSplit checks that funcs take the want shares of p's samples,
// within 3 points.
func checkSplit(t *testing.T, p *pprofile.Profile, funcs []string, want []float64) {
	t.Helper()
	// Callers check the count against the fixture's CPU time.
	total := totalSamples(p)
	if total == 0 {
		t.Fatal("no samples")
	}
	for i, fn := range funcs {
		share := 100 * float64(funcSamples(p, fn)) / float64(total)
		t.Logf("%s: %.1f%% of %d samples", fn, share, total)
		if math.Abs(share-want[i]) > 3 {
			t.Errorf("%s: %.1f%%, want %.0f%% ± 3", fn, share, want[i])
		}
	}
}

func totalSamples(p *pprofile.Profile) int64 {
	var n int64
	for _, s := range p.Sample {
		n += s.Value[0]
	}
	return n
}

func funcSamples(p *pprofile.Profile, fn string) int64 {
	return samplesWith(p, func(line pprofile.Line) bool { return line.Function.Name == fn })
}

// samplesWith counts the samples of p with a frame that has.
func samplesWith(p *pprofile.Profile, has func(pprofile.Line) bool) int64 {
	var n int64
	for _, s := range p.Sample {
		if hasFrame(s, has) {
			n += s.Value[0]
		}
	}
	return n
}

// hasFrame reports whether a frame of s has.
func hasFrame(s *pprofile.Sample, has func(pprofile.Line) bool) bool {
	return slices.ContainsFunc(s.Location, func(l *pprofile.Location) bool { return slices.ContainsFunc(l.Line, has) })
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

// stored counts the samples of the last hour in a store that sel selects.
func stored(t *testing.T, dir, sel string) (samples int64) {
	t.Helper()
	st, err := store.Open(dir, store.DefaultOptions())
	if err != nil {
		t.Fatalf("open store after the agent: %v", err)
	}
	defer st.Close()
	s, err := selector.Parse(sel)
	if err != nil {
		t.Fatal(err)
	}
	p, err := st.Profile(context.Background(), store.Query{From: time.Now().Add(-time.Hour), To: time.Now().Add(time.Minute), Selector: s})
	if err != nil {
		t.Fatal(err)
	}
	return p.Total()
}

// TestAgentSIGTERMFlushes stops the agent in the middle of a long window:
// the partial window is written, with a sample for every 1/499 s the
// fixture ran, and the exit status is 0.
func TestAgentSIGTERMFlushes(t *testing.T) {
	requireRoot(t)
	flint, spin := build(t)
	dir := t.TempDir()
	a := startAgent(t, flint, dir, "--window", "1h", "--frequency", "499")
	stolen := -fixture.Stolen(t) // from the machine's CPUs while the fixture ran
	pid := startSpin(t, spin)
	fixture.Start(t, pid).Await(t, fixtureCPU)
	freeze(t, pid)
	stolen += fixture.Stolen(t)
	cpu, err := fixture.CPU(pid)
	if err != nil {
		t.Fatal(err)
	}
	a.cmd.Process.Signal(syscall.SIGTERM)
	if err := a.cmd.Wait(); err != nil {
		t.Fatalf("agent after SIGTERM: %v\n%s", err, a.stderr)
	}
	fixture.CheckSamples(t, "stored after SIGTERM", stored(t, dir, fmt.Sprintf(`{pid="%d"}`, pid)), 499, cpu, stolen)
}

// TestAgentSecondRefused starts two agents on one data directory.
func TestAgentSecondRefused(t *testing.T) {
	requireRoot(t)
	flint, _ := build(t)
	dir := t.TempDir()
	startAgent(t, flint, dir)
	out, err := exec.Command(flint, "agent", "--data-dir", dir, "--listen", freeAddr(t)).CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || !strings.Contains(string(out), "another flint agent") || strings.Count(string(out), "\n") != 1 {
		t.Errorf("second agent: %v, %q", err, out)
	}
}

// TestAgentKilledKeepsStore kills the agent with SIGKILL at random moments,
// repeatedly; each time the store must open and keep at least the samples
// it held before.
func TestAgentKilledKeepsStore(t *testing.T) {
	requireRoot(t)
	flint, spin := build(t)
	startSpin(t, spin)
	dir := t.TempDir()
	var before int64
	for i := range 6 {
		a := startAgent(t, flint, dir, "--window", "1s")
		time.Sleep(time.Duration(1200+rand.IntN(1500)) * time.Millisecond)
		a.cmd.Process.Kill()
		a.cmd.Wait()
		after := stored(t, dir, "")
		t.Logf("kill %d: %d samples stored", i, after)
		if after < before {
			t.Fatalf("kill %d: %d samples stored, fewer than the %d before", i, after, before)
		}
		before = after
	}
	if before == 0 {
		t.Error("no window was ever stored")
	}
}

// TestAgentProcessStorm starts 20,000 short-lived processes under the
// agent, as fast as four goroutines can: the agent answers throughout,
// names and stores them, stays within a memory bound, and forgets them
// once they are gone. It samples them as the agent does by default, one
// tick in ten.
func TestAgentProcessStorm(t *testing.T) {
	requireRoot(t)
	if testing.Short() {
		t.Skip("starts 20,000 processes")
	}
	flint, _ := build(t)
	dir := t.TempDir()
	a := startAgent(t, flint, dir, "--window", "2s", "--frequency", "499", "--young-sample", "10")
	const storm, workers = 20000, 4
	begin := time.Now()
	var wg sync.WaitGroup
	var failed atomic.Int64
	for w := range workers {
		wg.Go(func() {
			for i := w; i < storm; i += workers {
				if exec.Command("/bin/true").Run() != nil {
					failed.Add(1)
				}
			}
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	client := &http.Client{Timeout: 10 * time.Second}
	for storming := true; storming; {
		select {
		case <-done:
			storming = false
		case <-time.After(time.Second):
		}
		resp, err := client.Get("http://" + a.addr + "/healthz")
		if err != nil {
			t.Fatalf("the agent stopped answering during the storm: %v\n%s", err, a.stderr)
		}
		resp.Body.Close()
	}
	if n := failed.Load(); n > 0 {
		t.Fatalf("%d of %d processes failed to run", n, storm)
	}
	if a.metric(t, "flint_samples_young_skipped_total") == 0 {
		t.Error("no tick of the storm's processes skipped with --young-sample 10")
	}
	learned := a.metric(t, "flint_processes")
	t.Logf("%d processes in %s; the agent knew %.0f at the end", storm, time.Since(begin).Round(time.Millisecond), learned)
	// Each known process is forgotten two windows after it exits.
	waitFor(t, a, 30*time.Second, "the agent to forget the exited processes", func() bool {
		return a.metric(t, "flint_processes") < 500
	})
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", a.cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	var peakKB int64
	if m := regexp.MustCompile(`(?m)^VmHWM:\s+(\d+) kB`).FindSubmatch(status); m != nil {
		peakKB, _ = strconv.ParseInt(string(m[1]), 10, 64)
	}
	t.Logf("agent peak RSS %d MB", peakKB>>10)
	if peakKB == 0 || peakKB > 300<<10 {
		t.Errorf("agent peak RSS %d kB, want some and at most 300 MB", peakKB)
	}
	stopAgent(t, a)
	if n := stored(t, dir, `{comm="true"}`); n == 0 {
		t.Error("no sample of the storm's processes stored")
	}
}

// TestAgentListensBelow1024 serves the API on a port below 1024: the agent
// listens before it drops the capabilities such a port needs.
func TestAgentListensBelow1024(t *testing.T) {
	requireRoot(t)
	flint, _ := build(t)
	var addr string
	for port := 1023; port > 900 && addr == ""; port-- {
		if ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port)); err == nil {
			addr = ln.Addr().String()
			ln.Close()
		}
	}
	if addr == "" {
		t.Fatal("no free port between 901 and 1023")
	}
	// Fails the test unless the agent answers on addr.
	startAgentOn(t, flint, t.TempDir(), addr, "--window", "1s")
}

// TestAgentDiskFull fills the agent's file system: windows are dropped and
// counted while it is full, and written again once space returns.
func TestAgentDiskFull(t *testing.T) {
	requireRoot(t)
	flint, spin := build(t)
	startSpin(t, spin)
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=8m", "flint-test", dir).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a small tmpfs: %v %s", err, out)
	}
	// Registered before the agent's cleanup, so it runs after the agent is gone.
	t.Cleanup(func() { exec.Command("umount", dir).Run() })
	a := startAgent(t, flint, dir, "--window", "1s")
	waitMetric(t, a, "flint_windows_written_total", 1)
	filler := filepath.Join(dir, "filler")
	exec.Command("dd", "if=/dev/zero", "of="+filler, "bs=1M", "count=16").Run() // fills it; dd's error is expected
	waitMetric(t, a, "flint_windows_dropped_total", 2)
	os.Remove(filler)
	written := a.metric(t, "flint_windows_written_total")
	waitMetric(t, a, "flint_windows_written_total", written+2)
	if !strings.Contains(a.stderr.String(), "windows are dropped") {
		t.Errorf("the agent did not log the failing writes:\n%s", a.stderr)
	}
}

// TestAgentFindings runs the agent's doctor every window while the busy-poll
// fixture and its healthy twin run, and reads the findings from the API.
func TestAgentFindings(t *testing.T) {
	requireRoot(t)
	flint, busypoll := buildDoctorTools(t)
	bad, twin := startBusyPoll(t, busypoll, "0"), startBusyPoll(t, busypoll, "1")
	from := time.Now()
	a := startAgent(t, flint, t.TempDir(), "--window", "2s", "--doctor-every", "1s")
	waitMetric(t, a, "flint_doctor_examinations_total", 2)

	type finding struct {
		ID       string            `json:"id"`
		PID      int               `json:"pid"`
		Comm     string            `json:"comm"`
		Severity string            `json:"severity"`
		Summary  string            `json:"summary"`
		Evidence []json.RawMessage `json:"evidence"`
		Fix      string            `json:"fix"`
		Time     time.Time         `json:"time"`
		Labels   map[string]string `json:"labels"`
	}
	findings := func(selector string) []finding {
		q := url.Values{"from": {strconv.FormatInt(from.Unix()-1, 10)}, "to": {"now"}, "selector": {selector}}
		var resp struct{ Findings []finding }
		if err := json.Unmarshal(a.get(t, "/api/v1/findings", q), &resp); err != nil {
			t.Fatal(err)
		}
		return resp.Findings
	}
	got := findings(`{comm="busypoll"}`)
	var busy int
	for _, f := range got {
		if f.PID == twin {
			t.Errorf("finding on the healthy twin: %+v", f)
		}
		if f.ID != "busy-poll" || f.PID != bad {
			continue
		}
		busy++
		if f.Labels["pid"] != strconv.Itoa(bad) || f.Labels["comm"] != "busypoll" || f.Labels["node"] == "" {
			t.Errorf("finding labels %v: want the process's labels", f.Labels)
		}
		if f.Time.Before(from.Add(-time.Second)) || f.Summary == "" || f.Fix == "" || len(f.Evidence) == 0 || f.Severity == "" {
			t.Errorf("incomplete finding %+v", f)
		}
	}
	if busy == 0 {
		t.Fatalf("no busy-poll finding for pid %d among %+v; agent log:\n%s", bad, got, a.stderr)
	}
	if other := findings(fmt.Sprintf(`{pid="%d"}`, twin)); len(other) > 0 {
		t.Errorf("findings for the twin: %+v", other)
	}
	resp, err := http.Get("http://" + a.addr + "/api/v1/findings?selector=" + url.QueryEscape(`{comm=~"(}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("bad selector: status %d, want 400", resp.StatusCode)
	}
}

func waitMetric(t *testing.T, a *agentProc, name string, atLeast float64) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for a.metric(t, name) < atLeast {
		if time.Now().After(deadline) {
			t.Fatalf("%s stayed below %v; agent log:\n%s", name, atLeast, a.stderr)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
