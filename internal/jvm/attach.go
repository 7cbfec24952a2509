// Package jvm gets JIT symbol maps from running HotSpot JVMs (OpenJDK 17
// and later) without restarting them: it asks the JVM, over its attach
// mechanism, to run the diagnostic command Compiler.perfmap, which writes
// /tmp/perf-PID.map, the file flint reads to name JIT-compiled Java methods
// (internal/symbol). This is what `jcmd PID Compiler.perfmap` does, done
// without the JDK's tools, which a JRE-only container lacks.
package jvm

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// attachTimeout bounds the wait for a JVM to open its attach socket after
// SIGQUIT, and the command's answer.
const attachTimeout = 10 * time.Second

// PerfMap asks the JVM pid, whose PID in its own namespace is nspid, to
// write its perf map. It must run as the JVM's user (or root): the JVM
// checks its peer's credentials, and the files it creates and the signal it
// sends need them. Paths go through /proc/PID/root, so it works for a JVM
// in another mount namespace (a container) as well.
func PerfMap(pid, nspid int) error {
	return Command(pid, nspid, "jcmd", "Compiler.perfmap")
}

// Command runs an attach command (at most three arguments) in the JVM and
// returns an error unless it succeeded.
func Command(pid, nspid int, args ...string) error {
	if len(args) == 0 || len(args) > 4 {
		return fmt.Errorf("attach to pid %d: want a command and up to three arguments", pid)
	}
	root := fmt.Sprintf("/proc/%d/root/tmp", pid)
	sock := fmt.Sprintf("%s/.java_pid%d", root, nspid)
	if err := startListener(pid, root, sock, nspid); err != nil {
		return err
	}
	conn, err := net.DialTimeout("unix", sock, attachTimeout)
	if err != nil {
		return fmt.Errorf("attach to pid %d: %w", pid, err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(attachTimeout))
	// Protocol 1: the version, the command and three arguments, each
	// NUL-terminated; the answer is the result code on a line, then text.
	var req bytes.Buffer
	req.WriteString("1\x00")
	for i := range 4 {
		if i < len(args) {
			req.WriteString(args[i])
		}
		req.WriteByte(0)
	}
	if _, err := conn.Write(req.Bytes()); err != nil {
		return fmt.Errorf("attach to pid %d: %w", pid, err)
	}
	answer, err := io.ReadAll(io.LimitReader(conn, 64<<10))
	if err != nil {
		return fmt.Errorf("attach to pid %d: read the answer: %w", pid, err)
	}
	code, text, _ := strings.Cut(string(answer), "\n")
	if code != "0" {
		return fmt.Errorf("attach to pid %d: %s failed (code %q): %.200s", pid, strings.Join(args, " "), code, strings.TrimSpace(text))
	}
	// jcmd's own result is text too: HotSpot answers 0 for an unknown
	// diagnostic command, with the reason in the output.
	if strings.Contains(text, "Unknown diagnostic command") || strings.HasPrefix(strings.TrimSpace(text), "java.lang.") {
		return fmt.Errorf("attach to pid %d: %s: %.200s", pid, strings.Join(args, " "), strings.TrimSpace(text))
	}
	return nil
}

// startListener makes the JVM open its attach socket, unless it is open:
// a file .attach_pidNSPID in its /tmp, then SIGQUIT, which the JVM takes as
// the request while that file exists (without it, SIGQUIT prints a thread
// dump).
func startListener(pid int, root, sock string, nspid int) error {
	if isSocket(sock) {
		return nil
	}
	// SIGQUIT kills a process that does not catch it: a program that maps
	// libjvm.so without starting a VM, a VM that left the signal alone.
	if caught, err := catchesQuit(pid); err != nil {
		return fmt.Errorf("attach to pid %d: %w", pid, err)
	} else if !caught {
		return fmt.Errorf("attach to pid %d: it does not handle SIGQUIT: not signalled", pid)
	}
	// Such a JVM takes SIGQUIT as a request for a thread dump, which would
	// land in the service's output.
	if cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); err == nil && bytes.Contains(cmdline, []byte("-XX:+DisableAttachMechanism\x00")) {
		return fmt.Errorf("attach to pid %d: started with -XX:+DisableAttachMechanism: not signalled", pid)
	}
	trigger := fmt.Sprintf("%s/.attach_pid%d", root, nspid)
	f, err := os.OpenFile(trigger, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("attach to pid %d: %w", pid, err)
	}
	if err == nil {
		f.Close()
		defer os.Remove(trigger)
	}
	if err := syscall.Kill(pid, syscall.SIGQUIT); err != nil {
		return fmt.Errorf("attach to pid %d: signal it: %w", pid, err)
	}
	for wait, deadline := time.Millisecond, time.Now().Add(attachTimeout); !isSocket(sock); wait = min(2*wait, 200*time.Millisecond) {
		if time.Now().After(deadline) {
			return fmt.Errorf("attach to pid %d: no attach socket %d s after SIGQUIT (a JVM started with -XX:+DisableAttachMechanism, or not a HotSpot JVM)", pid, int(attachTimeout.Seconds()))
		}
		time.Sleep(wait)
	}
	return nil
}

// catchesQuit reports whether process pid has a handler for SIGQUIT, from
// the mask of caught signals in /proc/PID/status.
func catchesQuit(pid int) (bool, error) {
	status, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return false, err
	}
	for line := range strings.Lines(string(status)) {
		if rest, ok := strings.CutPrefix(line, "SigCgt:"); ok {
			mask, err := strconv.ParseUint(strings.TrimSpace(rest), 16, 64)
			if err != nil {
				return false, fmt.Errorf("SigCgt %q: %w", strings.TrimSpace(rest), err)
			}
			return mask&(1<<(syscall.SIGQUIT-1)) != 0, nil
		}
	}
	return false, fmt.Errorf("no SigCgt in /proc/%d/status", pid)
}

func isSocket(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode()&os.ModeSocket != 0
}
