package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/flint-dev/flint/internal/trace"
)

func TestParseTrace(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		wantErr string // substring; "" for success
		check   func(*TraceConfig) bool
	}{
		{args: []string{"-p", "4242", "main.(*Server).handle", "time.Now", "-d", "10s"}, check: func(c *TraceConfig) bool {
			return c.PID == 4242 && c.Duration == 10*time.Second && len(c.Functions) == 2 &&
				c.Functions[0] == "main.(*Server).handle" && c.MaxOverhead == 0.02 && !c.Latency
		}},
		{args: []string{"--exe", "/usr/bin/api", "--latency", "database/sql.(*DB).QueryContext"}, check: func(c *TraceConfig) bool {
			return c.Exe == "/usr/bin/api" && c.Latency && c.Duration == 0 && c.Functions[0] == "database/sql.(*DB).QueryContext"
		}},
		{args: []string{"-p", "777", "malloc", "free", "--json"}, check: func(c *TraceConfig) bool {
			return c.PID == 777 && c.JSON && len(c.Functions) == 2
		}},
		{args: []string{"-p", "1", "--max-overhead", "off", "f"}, check: func(c *TraceConfig) bool { return c.MaxOverhead == 0 }},
		{args: []string{"-p", "1", "--max-overhead", "0.5%", "f"}, check: func(c *TraceConfig) bool { return c.MaxOverhead == 0.005 }},
		{args: []string{"-p", "1", "--max-overhead=5", "f"}, check: func(c *TraceConfig) bool { return c.MaxOverhead == 0.05 }},
		{args: []string{"-p", "1", "--", "-weird-name", "g"}, check: func(c *TraceConfig) bool {
			return len(c.Functions) == 2 && c.Functions[0] == "-weird-name"
		}},
		{args: []string{"main.*"}, wantErr: "say what to trace"},
		{args: []string{"-p", "1", "--exe", "/bin/true", "f"}, wantErr: "exclude each other"},
		{args: []string{"-p", "-2", "f"}, wantErr: "not a PID"},
		{args: []string{"-p", "1"}, wantErr: "name the functions"},
		{args: []string{"-p", "1", "f", "-d", "-1s"}, wantErr: "duration must be"},
		{args: []string{"-p", "1", "f", "-d", "soon"}, wantErr: "bad duration"},
		{args: []string{"-p", "1", "f", "--max-overhead", "lots"}, wantErr: "bad overhead"},
		{args: []string{"-p", "1", "f", "--max-overhead", "0%"}, wantErr: "bad overhead"},
		{args: []string{"-p", "1", ""}, wantErr: "empty function name"},
		{args: []string{"-p", "1", "f", "--frobnicate"}, wantErr: "not defined"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			c, err := parseTrace(tc.args)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tc.wantErr)
				}
				var u usageError
				if !errors.As(err, &u) {
					t.Errorf("err %v is not a usage error (exit status 2)", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !tc.check(c) {
				t.Errorf("config %+v", c)
			}
		})
	}
}

// sampleTraceResult is a trace of time.Now in a busy loop, detached by the
// overhead guard, and a timed handler.
func sampleTraceResult() *trace.Result {
	h := &trace.Histogram{Counts: make([]uint64, trace.HistBuckets)}
	for i := 0; i < trace.HistBuckets; i++ {
		if lo, _ := trace.BucketBounds(i); lo >= 1100000 {
			h.Counts[i] = 90
			h.SumNs = 90 * lo
			break
		}
	}
	cost := trace.Cost{Hit: 4800 * time.Nanosecond, HitEmulated: 900 * time.Nanosecond, TimedCall: 9 * time.Microsecond,
		Floor: 4 * time.Microsecond, Rounds: 7}
	return &trace.Result{
		Target: trace.Target{PID: 4242}, Duration: 10 * time.Second, Cost: cost, Latency: true, MaxOverhead: 0.02,
		Functions: []trace.FunctionResult{
			{Function: trace.Function{Name: "main.(*Server).handle", Object: "/usr/bin/api", Lang: trace.Go},
				Probes: 3, Attached: 10 * time.Second, Calls: 90, Rate: 9, Returns: 90, Latency: h,
				CostPerCall: 9 * time.Microsecond, ProbeCPU: 9 * 9e-6},
			{Function: trace.Function{Name: "time.Now", Object: "/usr/bin/api", Lang: trace.Go},
				Probes: 2, Attached: 200 * time.Millisecond, Calls: 42000, Rate: 210000, CostPerCall: 4800 * time.Nanosecond,
				ProbeCPU: 1.008, Detached: &trace.Detach{Function: "time.Now", After: 200 * time.Millisecond, Rate: 210000,
					Cost: 4800 * time.Nanosecond, ProbeCPU: 1.008, Budget: 0.02}},
			{Function: trace.Function{Name: "malloc", Object: "/lib/x86_64-linux-gnu/libc.so.6", Library: true, Lang: trace.C},
				Probes: 1, Attached: 10 * time.Second},
		},
		Processes: []trace.ProcessResult{{PID: 4242, Comm: "api", Traced: 10 * time.Second, CPU: 0.5, ProbeCPU: 0.0212,
			Slowdown: trace.Slowdown(0.5, 0.0212), Calls: 42090}},
	}
}

func TestTraceText(t *testing.T) {
	var b strings.Builder
	writeTraceText(&b, sampleTraceResult())
	out := b.String()
	squeeze := func(s string) string { return strings.Join(strings.Fields(s), " ") }
	for _, want := range []string{
		"pid 4242 (api), traced 10.0s",
		"main.(*Server).handle 90 9.0",
		"time.Now 42000 210000 detached after 0.2s: over budget",
		"malloc (libc.so.6)",
		"main.(*Server).handle: 90 timed calls, p50 1.",
		"|****************************************|",
		"a probe hit costs 4.80us on this machine (900ns where the kernel emulates",
		"time.Now: 210.0k calls/s x 4.80us = 101% of a CPU",
		"pid 4242 (api) used 0.50 CPU while traced, 4.2% of it in probes: it runs ~4.4% slower while traced",
		"Budget: 2.0% of a CPU",
	} {
		if !strings.Contains(squeeze(out), want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if d := detachLine(*sampleTraceResult().Functions[1].Detached); d != "detached time.Now after 0.2s: 210.0k calls/s x 4.80us = 101% of a CPU, over the 2.0% budget (--max-overhead off keeps it)" {
		t.Errorf("detach line %q", d)
	}
	for _, tc := range []struct {
		cpu, probe float64
		want       string
	}{
		{1, 0.99, ">10x slower"},
		{1, 0.8, "~5x slower"},
		{0, 0, "too little CPU time"},
	} {
		p := trace.ProcessResult{PID: 1, Comm: "x", Traced: time.Second, CPU: tc.cpu, ProbeCPU: tc.probe, Slowdown: trace.Slowdown(tc.cpu, tc.probe)}
		if got := slowdownLine(p); !strings.Contains(got, tc.want) {
			t.Errorf("slowdownLine(cpu %v, probe %v) = %q, want %q in it", tc.cpu, tc.probe, got, tc.want)
		}
	}
}

func TestTraceJSON(t *testing.T) {
	b, err := json.Marshal(traceJSON(sampleTraceResult()))
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		PID         int      `json:"pid"`
		ProbeHitNs  int64    `json:"probe_hit_ns"`
		MaxOverhead *float64 `json:"max_overhead"`
		Functions   []struct {
			Name      string  `json:"name"`
			Calls     uint64  `json:"calls"`
			CallsPerS float64 `json:"calls_per_s"`
			Latency   *struct {
				P50Ns   float64 `json:"p50_ns"`
				Buckets []struct {
					LowNs uint64 `json:"low_ns"`
					Count uint64 `json:"count"`
				} `json:"log2_buckets"`
			} `json:"latency"`
			Detached *struct {
				AfterS float64 `json:"after_s"`
			} `json:"detached"`
		} `json:"functions"`
		Processes []struct {
			Slowdown *float64 `json:"slowdown"`
		} `json:"processes"`
	}
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if got.PID != 4242 || got.ProbeHitNs != 4800 || got.MaxOverhead == nil || *got.MaxOverhead != 0.02 || len(got.Functions) != 3 {
		t.Fatalf("JSON %s", b)
	}
	f := got.Functions[0]
	if f.Latency == nil || f.Latency.P50Ns < 1.1e6 || f.Latency.P50Ns > 1.3e6 || len(f.Latency.Buckets) != 1 || f.Latency.Buckets[0].Count != 90 || f.Latency.Buckets[0].LowNs != 1<<20 {
		t.Errorf("latency %+v", f.Latency)
	}
	if got.Functions[1].Detached == nil || got.Functions[1].Detached.AfterS != 0.2 || got.Functions[2].Latency != nil {
		t.Errorf("functions %s", b)
	}
	if s := got.Processes[0].Slowdown; s == nil || math.Abs(*s-0.5/(0.5-0.0212)) > 1e-9 {
		t.Errorf("slowdown %v", s)
	}
	r := sampleTraceResult()
	r.Processes[0].Slowdown = math.Inf(1)
	r.MaxOverhead = 0
	if b, err := json.Marshal(traceJSON(r)); err != nil || !strings.Contains(string(b), `"slowdown":null`) || !strings.Contains(string(b), `"max_overhead":null`) {
		t.Errorf("unbounded slowdown, no budget: %s, %v", b, err)
	}
}

// buildTraceFixture compiles the Go fixture of flint trace.
func buildTraceFixture(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "trace-go")
	if out, err := exec.Command("go", "build", "-o", bin, "../../testdata/fixtures/trace-go").CombinedOutput(); err != nil {
		t.Fatalf("build fixture: %v\n%s", err, out)
	}
	return bin
}

// TestTraceCommand runs `flint trace -p PID time.Now --json` on the Go
// fixture calling time.Now 100,000 times.
func TestTraceCommand(t *testing.T) {
	requireRoot(t)
	flint, _ := build(t)
	fx := exec.Command(buildTraceFixture(t), "now", "100000")
	stdin, _ := fx.StdinPipe()
	stdout, _ := fx.StdoutPipe()
	if err := fx.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fx.Process.Kill(); fx.Wait() })
	fxOut := bufio.NewReader(stdout)
	if line, _ := fxOut.ReadString('\n'); line != "ready\n" {
		t.Fatalf("fixture said %q", line)
	}
	cmd := exec.Command(flint, "trace", "-p", strconv.Itoa(fx.Process.Pid), "--json", "--max-overhead", "off", "time.Now")
	var out strings.Builder
	cmd.Stdout = &out
	stderr, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	errOut := bufio.NewReader(stderr)
	if line, _ := errOut.ReadString('\n'); !strings.HasPrefix(line, "flint: tracing 1 function") {
		cmd.Process.Kill()
		t.Fatalf("flint said %q", line)
	}
	stdin.Write([]byte("go\n"))
	rest, _ := fxOut.ReadString('\n')
	if rest != "done\n" {
		t.Errorf("fixture said %q", rest)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("flint trace: %v", err)
	}
	var res struct {
		Exited    bool `json:"exited"`
		Functions []struct {
			Name  string `json:"name"`
			Calls uint64 `json:"calls"`
		} `json:"functions"`
	}
	if err := json.Unmarshal([]byte(out.String()), &res); err != nil {
		t.Fatalf("%v: %s", err, out.String())
	}
	if !res.Exited || len(res.Functions) != 1 || math.Abs(float64(res.Functions[0].Calls)-100000) > 100 {
		t.Errorf("result %+v: want 100000 calls of time.Now and the process exited", res)
	}
}

// TestTraceErrorsAreOneLine checks what a user sees when tracing cannot
// start.
func TestTraceErrorsAreOneLine(t *testing.T) {
	requireRoot(t)
	flint, _ := build(t)
	fixture := buildTraceFixture(t)
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"trace", "-p", "999999999", "f"}, 1, "flint: pid 999999999: no such process"},
		{[]string{"trace", "--exe", "/etc/hostname", "f"}, 1, "flint: /etc/hostname: not an ELF executable"},
		{[]string{"trace", "--exe", fixture, "main.gorw"}, 1, `flint: no such function "main.gorw" in ` + fixture + "; close matches: main.grow"},
		{[]string{"trace", "-p", "1"}, 2, "flint: name the functions to trace"},
	} {
		cmd := exec.Command(flint, tc.args...)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		err := cmd.Run()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != tc.code {
			t.Errorf("%v: %v, want exit status %d", tc.args, err, tc.code)
		}
		if got := stderr.String(); !strings.HasPrefix(got, tc.want) || strings.Count(got, "\n") != 1 {
			t.Errorf("%v: stderr %q, want one line starting %q", tc.args, got, tc.want)
		}
	}
	// Without privileges: as nobody, with no capabilities.
	if setpriv, err := exec.LookPath("setpriv"); err == nil {
		os.Chmod(filepath.Dir(flint), 0o755)
		cmd := exec.Command(setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all", flint, "trace", "-p", "1", "f")
		out, err := cmd.CombinedOutput()
		if err == nil || !strings.Contains(string(out), "need CAP_BPF and CAP_PERFMON (or CAP_SYS_ADMIN)") {
			t.Errorf("as nobody: %v: %s", err, out)
		}
	}
}
