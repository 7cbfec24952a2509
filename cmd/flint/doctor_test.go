package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestParseDoctor(t *testing.T) {
	for _, tc := range []struct {
		args    string
		wantErr string // substring; "" for success
		check   func(*DoctorConfig) bool
	}{
		{args: "-p 42 -d 10s", check: func(c *DoctorConfig) bool { return c.PID == 42 && c.Duration == 10*time.Second && c.Frequency == 99 }},
		{args: "-a --json -d 5", check: func(c *DoctorConfig) bool { return c.All && c.JSON && c.Duration == 5*time.Second }},
		{args: "--container 3F2A", check: func(c *DoctorConfig) bool { return c.Container == "3f2a" }},
		{args: "-p 7 --every-syscall -F 499", check: func(c *DoctorConfig) bool { return c.EverySyscall && c.Frequency == 499 }},
		{args: "", wantErr: "say what to examine"},
		{args: "-p 1 -a", wantErr: "exclude each other"},
		{args: "-p -3", wantErr: "not a PID"},
		{args: "-a -d 0", wantErr: "duration must be"},
		{args: "-a -F 0", wantErr: "frequency must be"},
		{args: "-a --every-syscall", wantErr: "--every-syscall needs -p"},
		{args: "--container xyz", wantErr: "hexadecimal"},
		{args: "-a stray", wantErr: "unexpected argument"},
	} {
		t.Run(tc.args, func(t *testing.T) {
			c, err := parseDoctor(strings.Fields(tc.args))
			checkParse(t, err, tc.wantErr, func() bool { return tc.check(c) })
		})
	}
}

func TestParseSyscalls(t *testing.T) {
	for _, tc := range []struct {
		args    string
		wantErr string
		check   func(*SyscallsConfig) bool
	}{
		{args: "-p 42", check: func(c *SyscallsConfig) bool { return c.PID == 42 && c.Syscalls == nil && c.Top == 20 && c.Stacks == 3 }},
		{args: "-a -s epoll_wait,read -n 5 --stacks 0 --json", check: func(c *SyscallsConfig) bool {
			return c.All && strings.Join(c.Syscalls, " ") == "epoll_wait read" && c.Top == 5 && c.Stacks == 0 && c.JSON
		}},
		{args: "-a", wantErr: "name the syscalls with -s"},
		{args: "--container ab", wantErr: "name the syscalls with -s"},
		{args: "-p 1 -s epoll_wait,frobnicate", wantErr: "-s frobnicate: no such syscall"},
		{args: "-p 1 -n 0", wantErr: "at least one row"},
		{args: "-p 1 -a", wantErr: "exclude each other"},
	} {
		t.Run(tc.args, func(t *testing.T) {
			c, err := parseSyscalls(strings.Fields(tc.args))
			checkParse(t, err, tc.wantErr, func() bool { return tc.check(c) })
		})
	}
}

func checkParse(t *testing.T, err error, wantErr string, ok func() bool) {
	t.Helper()
	if wantErr != "" {
		if err == nil || !strings.Contains(err.Error(), wantErr) {
			t.Fatalf("err = %v, want one containing %q", err, wantErr)
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
	if !ok() {
		t.Error("config not as expected")
	}
}

// buildDoctorTools compiles flint and the busy-poll fixture.
func buildDoctorTools(t *testing.T) (flint, busypoll string) {
	t.Helper()
	dir := t.TempDir()
	flint, busypoll = filepath.Join(dir, "flint"), filepath.Join(dir, "busypoll")
	buildFlint(t, flint)
	if out, err := exec.Command("gcc", "-O1", "-g", "-fno-omit-frame-pointer", "-o", busypoll,
		"../../testdata/fixtures/doctor-busypoll.c").CombinedOutput(); err != nil {
		t.Fatalf("build fixture: %v\n%s", err, out)
	}
	return flint, busypoll
}

func startBusyPoll(t *testing.T, bin, timeout string) int {
	t.Helper()
	cmd := exec.Command(bin, timeout)
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	if line, _ := bufio.NewReader(out).ReadString('\n'); !strings.HasPrefix(line, "ready ") {
		t.Fatalf("fixture said %q", line)
	}
	return cmd.Process.Pid
}

// TestDoctorCommand runs flint doctor and flint syscalls on the busy-poll
// fixture and reads their text and JSON output.
func TestDoctorCommand(t *testing.T) {
	requireRoot(t)
	flint, busypoll := buildDoctorTools(t)
	pid := strconv.Itoa(startBusyPoll(t, busypoll, "0"))

	out, err := exec.Command(flint, "doctor", "-p", pid, "-d", "2s").Output()
	if err != nil {
		t.Fatalf("flint doctor: %v\n%s", err, out)
	}
	text := string(out)
	t.Logf("flint doctor:\n%s", text)
	for _, want := range []string{"1. [", "busy-poll: pid " + pid, "evidence:", "epoll_wait(timeout 0) returned no events",
		"serve_loop (", "doctor-busypoll.c:", "fix: Block in epoll_wait", "is not a Go program"} {
		if !strings.Contains(text, want) {
			t.Errorf("output lacks %q", want)
		}
	}

	out, err = exec.Command(flint, "doctor", "-p", pid, "-d", "2s", "--json").Output()
	if err != nil {
		t.Fatalf("flint doctor --json: %v", err)
	}
	var findings []map[string]any
	if err := json.Unmarshal(out, &findings); err != nil {
		t.Fatalf("--json output: %v\n%s", err, out)
	}
	found := false
	for _, f := range findings {
		for _, key := range []string{"id", "pid", "comm", "severity", "summary", "evidence", "fix"} {
			if _, ok := f[key]; !ok {
				t.Errorf("finding lacks %q: %v", key, f)
			}
		}
		if f["id"] == "busy-poll" && strconv.Itoa(int(f["pid"].(float64))) == pid {
			found = true
		}
	}
	if !found {
		t.Errorf("no busy-poll finding in %s", out)
	}

	out, err = exec.Command(flint, "syscalls", "-p", pid, "-d", "2s").Output()
	if err != nil {
		t.Fatalf("flint syscalls: %v\n%s", err, out)
	}
	text = string(out)
	t.Logf("flint syscalls:\n%s", text)
	for _, want := range []string{"flint syscalls: every syscall", "SYSCALL", "P99", "epoll_wait", "epoll_wait by pid " + pid,
		"serve_loop", "busy-poll"} {
		if !strings.Contains(text, want) {
			t.Errorf("syscalls output lacks %q", want)
		}
	}
}

// TestDoctorErrors checks the one-line errors of bad targets.
func TestDoctorErrors(t *testing.T) {
	requireRoot(t)
	flint, _ := buildDoctorTools(t)
	for _, tc := range []struct {
		args []string
		want string
		code int
	}{
		{[]string{"doctor", "-p", "999999999"}, "flint: pid 999999999: no such process\n", 1},
		{[]string{"syscalls", "-a"}, "name the syscalls with -s", 2},
		{[]string{"doctor"}, "say what to examine", 2},
	} {
		cmd := exec.Command(flint, tc.args...)
		out, err := cmd.CombinedOutput()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != tc.code || !strings.Contains(string(out), tc.want) ||
			strings.Count(string(out), "\n") != 1 {
			t.Errorf("flint %v: %v, %q; want exit %d and one line with %q", tc.args, err, out, tc.code, tc.want)
		}
	}
}

// TestDoctorMountsTracefs runs flint doctor in private mount namespaces
// without tracefs at /sys/kernel/tracing: with nothing mounted (flint mounts
// tracefs) and with only debugfs mounted, whose tracing directory the
// kernel automounts (flint uses it). Whatever the host has mounted, each
// namespace starts from nothing, so the test decides the same everywhere.
func TestDoctorMountsTracefs(t *testing.T) {
	requireRoot(t)
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Skip("needs unshare(1) (util-linux) for a private mount namespace")
	}
	flint, busypoll := buildDoctorTools(t)
	pid := strconv.Itoa(startBusyPoll(t, busypoll, "1"))
	hostBefore := tracingMounts(t)
	// Unmount every tracing directory and debugfs, then check that none is
	// left: the automount inside debugfs would otherwise answer.
	const bare = `umount -R /sys/kernel/debug 2>/dev/null; umount /sys/kernel/tracing 2>/dev/null
for d in /sys/kernel/tracing /sys/kernel/debug/tracing; do
	test -e $d/events && { echo "$d still mounted"; exit 3; }
done
`
	for _, tc := range []struct{ name, setup, after string }{
		{
			name:  "nothing mounted",
			after: `test -e /sys/kernel/tracing/events || { echo "flint did not mount tracefs"; exit 4; }`,
		},
		{
			name:  "debugfs only",
			setup: `mount -t debugfs nodev /sys/kernel/debug || exit 5`,
			after: `test -e /sys/kernel/tracing/events -o -e /sys/kernel/debug/tracing/events || { echo "no tracefs after the run"; exit 4; }`,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			script := bare + tc.setup + `
"$0" doctor -p "$1" -d 1s || exit
` + tc.after
			out, err := exec.Command("unshare", "--mount", "--propagation", "private", "sh", "-c", script, flint, pid).CombinedOutput()
			if err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			// The report is about the fixture; node-wide findings about
			// other engineers' processes may follow.
			if !strings.Contains(string(out), "flint doctor: pid "+pid+" (busypoll)") {
				t.Errorf("output %s", out)
			}
		})
	}
	if after := tracingMounts(t); !slices.Equal(after, hostBefore) {
		t.Errorf("the host's tracing mounts changed: %q, were %q", after, hostBefore)
	}
}

// tracingMounts lists this mount namespace's debugfs and tracefs mounts.
func tracingMounts(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for line := range strings.Lines(string(b)) {
		if f := strings.Fields(line); len(f) > 2 && (f[2] == "tracefs" || f[2] == "debugfs") {
			out = append(out, f[1]+" "+f[2])
		}
	}
	return out
}
