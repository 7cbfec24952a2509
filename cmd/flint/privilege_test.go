package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/flint-dev/flint/internal/privilege"
)

// TestCapabilitiesDropped runs each command that loads BPF and checks, in
// /proc, that every thread of it keeps only its documented capabilities
// (docs/SECURITY.md), bounding set included, with no_new_privs, while it
// goes on working: the agent examines windows (attaching its syscall
// tracer's tracepoints again each time), the others finish with success.
func TestCapabilitiesDropped(t *testing.T) {
	requireRoot(t)
	flint, spin := build(t)
	pid := strconv.Itoa(startSpin(t, spin))
	k, err := privilege.Running()
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	for _, tc := range []struct {
		name string
		args []string
		keep privilege.Set
	}{
		{"record", []string{"record", "-p", pid, "-d", "3s", "-o", filepath.Join(out, "cpu.folded")}, privilege.Record},
		{"doctor", []string{"doctor", "-p", pid, "-d", "3s"}, privilege.Doctor},
		{"trace", []string{"trace", "-p", pid, "-d", "3s", "func_a"}, privilege.Trace},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command(flint, tc.args...)
			var stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stderr, &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			checkDropped(t, cmd.Process.Pid, k.Adjust(tc.keep))
			if err := cmd.Wait(); err != nil {
				t.Errorf("flint %s after dropping capabilities: %v\n%s", tc.name, err, &stderr)
			}
			// Kernel frames are named after the drop: /proc/kallsyms shows
			// addresses only to CAP_SYSLOG when it is opened.
			if strings.Contains(stderr.String(), "kernel frames unnamed") && kallsymsShown(t) {
				t.Errorf("flint %s lost kernel symbols with its capabilities:\n%s", tc.name, &stderr)
			}
		})
	}
	t.Run("agent", func(t *testing.T) {
		a := startAgent(t, flint, t.TempDir(), "--window", "1s", "--doctor-every", "1s")
		checkDropped(t, a.cmd.Process.Pid, k.Adjust(privilege.Agent))
		// The second examination reattaches the tracer's tracepoints.
		waitMetric(t, a, "flint_doctor_examinations_total", 2)
		if failed := a.metric(t, "flint_doctor_examinations_failed_total"); failed > 0 {
			t.Errorf("%v examinations failed without the dropped capabilities; agent log:\n%s", failed, a.stderr)
		}
		if !strings.Contains(a.stderr.String(), "capabilities kept: "+k.Adjust(privilege.Agent).String()) {
			t.Errorf("the agent does not say what it kept:\n%s", a.stderr)
		}
	})
}

// checkDropped waits until every thread of pid has set no_new_privs, the
// last step of dropping (threads do it one after another), then checks
// every thread's capabilities.
func checkDropped(t *testing.T, pid int, want privilege.Set) {
	t.Helper()
	var statuses map[string]privilege.Status
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		statuses = threadStatuses(t, pid)
		done := len(statuses) > 0
		for _, st := range statuses {
			done = done && st.NoNewPrivs
		}
		if done {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the threads of pid %d did not all set no_new_privs in 30 s: %+v", pid, statuses)
		}
	}
	for task, st := range statuses {
		if st.Effective != want || st.Permitted != want || st.Bounding != want || st.Ambient != 0 {
			t.Errorf("%s: effective %s, permitted %s, bounding %s, ambient %s; want %s",
				task, st.Effective, st.Permitted, st.Bounding, st.Ambient, want)
		}
	}
}

// threadStatuses reads the capabilities of each thread of pid.
func threadStatuses(t *testing.T, pid int) map[string]privilege.Status {
	t.Helper()
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/status", pid))
	if len(tasks) == 0 {
		t.Fatalf("pid %d ended before dropping its capabilities", pid)
	}
	out := map[string]privilege.Status{}
	for _, task := range tasks {
		b, err := os.ReadFile(task)
		if err != nil {
			continue // the thread ended
		}
		st, err := privilege.ParseStatus(string(b))
		if err != nil {
			t.Fatalf("%s: %v", task, err)
		}
		out[task] = st
	}
	return out
}

// kallsymsShown reports whether /proc/kallsyms shows this (root) process
// real addresses.
func kallsymsShown(t *testing.T) bool {
	f, err := os.Open("/proc/kallsyms")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var addr string
	fmt.Fscan(f, &addr)
	return strings.Trim(addr, "0") != ""
}
