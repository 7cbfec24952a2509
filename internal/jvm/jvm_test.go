package jvm

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/flint-dev/flint/internal/fixture"
	"github.com/flint-dev/flint/internal/proc"
)

func TestPerfMap(t *testing.T) {
	pid := fixture.Java(t, fixture.JavaOptions{})
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	nspid := proc.ParseNSPID(status, pid)
	mapFile := fmt.Sprintf("/proc/%d/root/tmp/perf-%d.map", pid, nspid)
	t.Cleanup(func() { os.Remove(mapFile) })
	// Twice: the first starts the JVM's attach listener, the second finds
	// it open.
	for try := range 2 {
		if err := PerfMap(pid, nspid); err != nil {
			t.Fatalf("try %d: %v", try, err)
		}
	}
	b, err := os.ReadFile(mapFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Busy.a(long)", "Busy.b(long)", "Busy.c(long)", " Interpreter\n"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("the JVM's map has no %q", want)
		}
	}
	if _, err := os.Stat(fmt.Sprintf("/proc/%d/root/tmp/.attach_pid%d", pid, nspid)); err == nil {
		t.Error("the attach trigger file was left behind")
	}
}

// A JVM that refuses attaching is not signalled: it would print a thread
// dump into the service's output.
func TestPerfMapAttachDisabled(t *testing.T) {
	pid := fixture.Java(t, fixture.JavaOptions{Flags: []string{"-XX:+DisableAttachMechanism"}})
	err := PerfMap(pid, pid)
	if err == nil || !strings.Contains(err.Error(), "DisableAttachMechanism") {
		t.Errorf("error %v, want one naming -XX:+DisableAttachMechanism", err)
	}
}

// A process that does not catch SIGQUIT is never sent it: it would die.
func TestAttachSparesOtherProcesses(t *testing.T) {
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	pid := cmd.Process.Pid
	err := PerfMap(pid, pid)
	if err == nil || !strings.Contains(err.Error(), "does not handle SIGQUIT") {
		t.Errorf("error %v, want one saying the process does not handle SIGQUIT", err)
	}
	time.Sleep(100 * time.Millisecond)
	if err := syscall.Kill(pid, 0); err != nil {
		t.Errorf("the process is gone: %v", err)
	}
}

// TestDumper runs a helper that records its arguments: one run per JVM per
// interval, as the JVM's user, and a failing helper logged once per JVM.
func TestDumper(t *testing.T) {
	runs := filepath.Join(t.TempDir(), "runs")
	self := os.Getpid()
	var mu sync.Mutex
	var logged []string
	logf := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		logged = append(logged, fmt.Sprintf(format, args...))
	}
	d := NewDumper(Options{Helper: []string{"/bin/sh", "-c", `echo "$1 $2 $(id -u)" >> ` + runs, "sh"}, Every: time.Hour, Logf: logf})
	d.Request(self)
	d.Request(self) // within the hour: not again
	for deadline := time.Now().Add(10 * time.Second); d.Stats().Written == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no helper ran: %+v", d.Stats())
		}
	}
	d.Close()
	b, _ := os.ReadFile(runs)
	if want := fmt.Sprintf("%d %d %d\n", self, self, os.Geteuid()); string(b) != want {
		t.Errorf("helper runs %q, want one: %q", b, want)
	}

	failing := NewDumper(Options{Helper: []string{"/bin/sh", "-c", "echo no attach socket >&2; exit 1", "sh"}, Every: time.Nanosecond, Logf: logf})
	failing.Request(self)
	for deadline := time.Now().Add(10 * time.Second); failing.Stats().Failed < 1; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("stats %+v, want a failure", failing.Stats())
		}
	}
	failing.Request(self) // not again, however short Every is
	time.Sleep(200 * time.Millisecond)
	failing.Close()
	if st := failing.Stats(); st.Failed != 1 {
		t.Errorf("stats %+v: a JVM that failed was asked again", st)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(logged) != 1 || !strings.Contains(logged[0], "no attach socket") {
		t.Errorf("logged %q, want one line with the helper's reason", logged)
	}
}
