package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"encoding/xml"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	pprofile "github.com/google/pprof/profile"

	"github.com/flint-dev/flint/internal/profile"
)

func TestParseRecord(t *testing.T) {
	for _, tc := range []struct {
		args    string
		wantErr string // substring; "" for success
		check   func(*RecordConfig) bool
	}{
		{args: "-p 42 -d 10s -o cpu.svg", check: func(c *RecordConfig) bool {
			return c.PID == 42 && c.Duration == 10*time.Second && c.Format == profile.FormatSVG && c.Frequency == 99
		}},
		{args: "-a -d 30 -F 997 -o node.pb.gz", check: func(c *RecordConfig) bool {
			return c.All && c.Duration == 30*time.Second && c.Frequency == 997 && c.Format == profile.FormatPprof
		}},
		{args: "--container 3F2A -o c.folded", check: func(c *RecordConfig) bool {
			return c.Container == "3f2a" && c.Format == profile.FormatFolded
		}},
		{args: "-a -o -", check: func(c *RecordConfig) bool { return c.Format == profile.FormatFolded }},
		{args: "-p 42 -o default.pgo", check: func(c *RecordConfig) bool { return c.Format == profile.FormatPprof }},
		{args: "-a -o - --format json", check: func(c *RecordConfig) bool { return c.Format == profile.FormatJSON }},
		{args: "-a -o x --format html --no-kernel", check: func(c *RecordConfig) bool { return c.Format == profile.FormatHTML && c.NoKernel }},
		{args: "-p 1 --no-python", check: func(c *RecordConfig) bool { return c.NoPython }},
		{args: "-p 1 --off-cpu", check: func(c *RecordConfig) bool {
			return c.kind() == profile.OffCPU && c.OffCPUMin == time.Millisecond && c.OffCPUSample == 1
		}},
		{args: "-a --wall --off-cpu-min 5ms --off-cpu-sample 10", check: func(c *RecordConfig) bool {
			return c.kind() == profile.Wall && c.OffCPUMin == 5*time.Millisecond && c.OffCPUSample == 10
		}},
		{args: "-p 1 --off-cpu --wall", wantErr: "exclude each other"},
		{args: "-p 1 --off-cpu --off-cpu-sample 0", wantErr: "--off-cpu-sample 0"},
		{args: "-p 1 --off-cpu --off-cpu-min -1s", wantErr: "--off-cpu-min"},
		{args: "", wantErr: "say what to record"},
		{args: "-p 1 -a", wantErr: "exclude each other"},
		{args: "-p -3", wantErr: "not a PID"},
		{args: "-p x", wantErr: "invalid value"},
		{args: "-a -F 0", wantErr: "between 1 and 10000 Hz"},
		{args: "-a -F 100001", wantErr: "between 1 and 10000 Hz"},
		{args: "-a -d 0", wantErr: "duration must be"},
		{args: "-a -d -1s", wantErr: "duration must be"},
		{args: "-a -d 25h", wantErr: "duration must be"},
		{args: "-a -d soon", wantErr: "bad duration"},
		{args: "-a -o out.weird", wantErr: "cannot tell the format"},
		{args: "-a --format xml", wantErr: "unknown format"},
		{args: "-a --transfer carrier-pigeon", wantErr: "--transfer"},
		{args: "--container xyz", wantErr: "hexadecimal"},
		{args: "-a stray", wantErr: "unexpected argument"},
	} {
		t.Run(tc.args, func(t *testing.T) {
			c, err := parseRecord(strings.Fields(tc.args))
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

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (CAP_BPF, CAP_PERFMON) to load BPF programs; CI runs it as root")
	}
}

// buildFlint compiles flint to path as make does, without cgo, so that it
// drops its capabilities (internal/privilege) and the tests see it work
// without them.
func buildFlint(t *testing.T, path string) {
	t.Helper()
	cmd := exec.Command("go", "build", "-o", path, ".")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build flint: %v\n%s", err, out)
	}
}

// build compiles flint and the C fixture into a temporary directory.
func build(t *testing.T) (flint, spin string) {
	t.Helper()
	dir := t.TempDir()
	flint, spin = filepath.Join(dir, "flint"), filepath.Join(dir, "spin")
	buildFlint(t, flint)
	if out, err := exec.Command("gcc", "-O1", "-fno-omit-frame-pointer", "-o", spin, "../../testdata/fixtures/spin.c").CombinedOutput(); err != nil {
		t.Fatalf("build fixture: %v\n%s", err, out)
	}
	return flint, spin
}

func startSpin(t *testing.T, spin string) int {
	t.Helper()
	// It spins until the test ends: on a loaded machine a test may take
	// minutes, and a fixture that exits first fails it.
	return startFixture(t, spin, "3600")
}

// recordPprof runs flint record with args, writing pprof, and returns the
// profile and what record said.
func recordPprof(t *testing.T, flint string, args ...string) (*pprofile.Profile, string) {
	t.Helper()
	out := filepath.Join(t.TempDir(), "profile.pb.gz")
	log, err := exec.Command(flint, append(append([]string{"record"}, args...), "-o", out)...).CombinedOutput()
	if err != nil {
		t.Fatalf("record %s: %v\n%s", strings.Join(args, " "), err, log)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	p, err := pprofile.ParseData(data)
	if err != nil {
		t.Fatal(err)
	}
	return p, string(log)
}

// startFixture starts a fixture, killed when the test ends, and returns
// its PID once it says "ready".
func startFixture(t *testing.T, path string, args ...string) int {
	t.Helper()
	cmd := exec.Command(path, args...)
	cmd.Dir = t.TempDir() // where what it writes (V8's isolate logs) goes
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	if line, _ := bufio.NewReader(out).ReadString('\n'); line != "ready\n" {
		t.Fatalf("fixture said %q", line)
	}
	return cmd.Process.Pid
}

var foldedLine = regexp.MustCompile(`^spin(;[^;]+)+ [0-9]+$`)

// TestRecordWritesEveryFormat runs the flint binary on a fixture and reads
// back each output format with an independent reader.
func TestRecordWritesEveryFormat(t *testing.T) {
	requireRoot(t)
	flint, spin := build(t)
	pid := strconv.Itoa(startSpin(t, spin))
	dir := t.TempDir()
	for _, tc := range []struct {
		file  string
		check func(t *testing.T, path string, data []byte)
	}{
		{"out.folded", func(t *testing.T, _ string, data []byte) {
			for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
				if !foldedLine.MatchString(line) {
					t.Errorf("not a folded line: %q", line)
				}
			}
		}},
		{"out.pb.gz", func(t *testing.T, path string, data []byte) {
			p, err := pprofile.ParseData(data)
			if err != nil {
				t.Fatal(err)
			}
			if err := p.CheckValid(); err != nil {
				t.Fatal(err)
			}
			if len(p.SampleType) != 2 || p.SampleType[0].Type != "samples" || p.SampleType[1].Unit != "nanoseconds" {
				t.Errorf("sample types %v", p.SampleType)
			}
			top, err := exec.Command("go", "tool", "pprof", "-top", path).CombinedOutput()
			if err != nil || !bytes.Contains(top, []byte("func_a")) {
				t.Errorf("go tool pprof -top: %v\n%s", err, top)
			}
		}},
		{"out.svg", func(t *testing.T, _ string, data []byte) {
			d := xml.NewDecoder(bytes.NewReader(data))
			for {
				if _, err := d.Token(); err == io.EOF {
					break
				} else if err != nil {
					t.Fatalf("SVG is not well-formed XML: %v", err)
				}
			}
			if !bytes.Contains(data, []byte("func_a")) {
				t.Error("SVG does not name func_a")
			}
		}},
		{"out.html", func(t *testing.T, _ string, data []byte) {
			if !bytes.Contains(data, []byte("func_a")) || !bytes.Contains(data, []byte("<canvas")) {
				t.Error("HTML lacks func_a or its canvas")
			}
		}},
		{"out.json", func(t *testing.T, _ string, data []byte) {
			var root profile.Node
			if err := json.Unmarshal(data, &root); err != nil {
				t.Fatal(err)
			}
			if root.Total == 0 || len(root.Children) == 0 || root.Children[0].Name != "spin" {
				t.Errorf("tree %+v", root)
			}
		}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			path := filepath.Join(dir, tc.file)
			out, err := exec.Command(flint, "record", "-p", pid, "-d", "1s", "-F", "499", "-o", path).CombinedOutput()
			if err != nil {
				t.Fatalf("flint: %v\n%s", err, out)
			}
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, path, data)
		})
	}
}

// TestRecordErrorsAreOneLine checks bad input gets one line and a non-zero
// exit, and leaves no output file behind.
func TestRecordErrorsAreOneLine(t *testing.T) {
	requireRoot(t)
	flint, _ := build(t)
	dir := t.TempDir()
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"record", "-p", "999999999", "-o", filepath.Join(dir, "x.svg")}, 1, "no such process"},
		{[]string{"record", "-a", "-o", "/nonexistent/x.svg"}, 1, "cannot write output"},
		{[]string{"record", "-a", "-F", "0"}, 2, "frequency"},
		{[]string{"record", "-a", "-d", "soon"}, 2, "bad duration"},
		{[]string{"frobnicate"}, 2, "unknown command"},
	} {
		cmd := exec.Command(flint, tc.args...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		err := cmd.Run()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != tc.code {
			t.Errorf("%v: err %v, want exit status %d", tc.args, err, tc.code)
		}
		msg := stderr.String()
		if strings.Count(msg, "\n") != 1 || !strings.HasPrefix(msg, "flint: ") || !strings.Contains(msg, tc.want) {
			t.Errorf("%v: stderr %q, want one line with %q", tc.args, msg, tc.want)
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("failed runs left files: %v", entries)
	}
}

// TestRecordInterruptWritesOutput stops a recording with SIGINT and expects
// a complete output and exit status 0.
func TestRecordInterruptWritesOutput(t *testing.T) {
	requireRoot(t)
	flint, spin := build(t)
	pid := strconv.Itoa(startSpin(t, spin))
	path := filepath.Join(t.TempDir(), "out.folded")
	cmd := exec.Command(flint, "record", "-p", pid, "-d", "60s", "-F", "499", "-o", path)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond)
	cmd.Process.Signal(syscall.SIGINT)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("flint after SIGINT: %v", err)
	}
	data, err := os.ReadFile(path)
	if err != nil || !bytes.Contains(data, []byte("func_a")) {
		t.Fatalf("output after SIGINT: %v\n%s", err, data)
	}
}
