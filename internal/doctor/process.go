package doctor

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/flint-dev/flint/internal/proc"
)

// usage is a process's counters at one moment.
type usage struct {
	at          time.Time
	start       uint64 // start time: tells a reused PID apart
	cpu         time.Duration
	threads     map[int]time.Duration // CPU by thread
	threadIO    map[int]int64         // read and write syscalls by thread
	ctxSwitches int64                 // of all threads; -1 when unknown
}

// readUsage reads pid's start time, CPU time (in all, and by thread), read
// and write syscalls by thread, and context switches.
func readUsage(pid int) (usage, error) {
	stat, err := os.ReadFile(fmt.Sprintf("%s/%d/stat", proc.Root, pid))
	if err != nil {
		return usage{}, noProcess(pid, err)
	}
	start, cpu, err := parseStat(stat)
	if err != nil {
		return usage{}, fmt.Errorf("pid %d: %w", pid, err)
	}
	if state := stat[bytes.LastIndexByte(stat, ')')+2]; state == 'Z' || state == 'X' {
		// Exited; its parent has not reaped it yet.
		return usage{}, fmt.Errorf("pid %d: %w", pid, proc.ErrNoProcess)
	}
	u := usage{at: time.Now(), start: start, cpu: cpu, threads: map[int]time.Duration{}, threadIO: map[int]int64{}, ctxSwitches: -1}
	tasks, err := os.ReadDir(fmt.Sprintf("%s/%d/task", proc.Root, pid))
	if err != nil {
		return u, nil
	}
	u.ctxSwitches = 0
	for _, t := range tasks {
		dir := fmt.Sprintf("%s/%d/task/%s/", proc.Root, pid, t.Name())
		tid, _ := strconv.Atoi(t.Name())
		if b, err := os.ReadFile(dir + "stat"); err == nil {
			if _, cpu, err := parseStat(b); err == nil {
				u.threads[tid] = cpu
			}
		}
		if b, err := os.ReadFile(dir + "io"); err == nil {
			r, _ := statusField(b, "syscr")
			w, _ := statusField(b, "syscw")
			nr, err1 := strconv.ParseInt(r, 10, 64)
			nw, err2 := strconv.ParseInt(w, 10, 64)
			if err1 == nil && err2 == nil {
				u.threadIO[tid] = nr + nw
			}
		}
		b, err := os.ReadFile(dir + "status")
		if err != nil {
			continue // the thread ended meanwhile
		}
		vol, _ := statusField(b, "voluntary_ctxt_switches")
		invol, _ := statusField(b, "nonvoluntary_ctxt_switches")
		v, _ := strconv.ParseInt(vol, 10, 64)
		iv, _ := strconv.ParseInt(invol, 10, 64)
		u.ctxSwitches += v + iv
	}
	return u, nil
}

// parseStat reads the start time and CPU time (user + system) from a
// process's or thread's stat file.
func parseStat(b []byte) (start uint64, cpu time.Duration, err error) {
	f, err := statFields(b)
	if err != nil {
		return 0, 0, err
	}
	// Fields counted from 1 as proc(5) does; f[0] is field 3 (state).
	utime, err1 := strconv.ParseUint(f[14-3], 10, 64)
	stime, err2 := strconv.ParseUint(f[15-3], 10, 64)
	start, err3 := strconv.ParseUint(f[22-3], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil {
		return 0, 0, errors.New("malformed stat: bad times")
	}
	return start, time.Duration(utime+stime) * proc.ClockTick, nil
}

// statFields splits /proc/PID/stat after the command name, which is in
// parentheses and may itself contain spaces and ')'.
func statFields(b []byte) ([]string, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return nil, errors.New("malformed stat")
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 {
		return nil, errors.New("malformed stat: too few fields")
	}
	return f, nil
}

// statusField returns the value of a "Name:\tvalue" line of a status file.
func statusField(status []byte, name string) (string, bool) {
	for line := range strings.Lines(string(status)) {
		if rest, ok := strings.CutPrefix(line, name+":"); ok {
			return strings.TrimSpace(rest), true
		}
	}
	return "", false
}

// noProcess maps a vanished /proc entry to proc.ErrNoProcess.
func noProcess(pid int, err error) error {
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("pid %d: %w", pid, proc.ErrNoProcess)
	}
	return fmt.Errorf("read pid %d: %w", pid, err)
}

// readProcess gathers the facts about pid that do not change during a
// recording: names, threads, where stdout goes, Go build and runtime facts
// and CPU limits. What cannot be read becomes a note.
func readProcess(pid int) (*Process, error) {
	u, err := readUsage(pid)
	if err != nil {
		return nil, err
	}
	dir := fmt.Sprintf("%s/%d", proc.Root, pid)
	p := &Process{PID: pid, StartTime: u.start, CtxSwitches: -1}
	p.Comm = readComm(dir + "/comm")
	if status, err := os.ReadFile(dir + "/status"); err == nil {
		n, _ := statusField(status, "Threads")
		p.Threads, _ = strconv.Atoi(n)
	}
	exe, err := os.Readlink(dir + "/exe")
	switch {
	case err == nil:
		p.Exe = strings.TrimSuffix(exe, " (deleted)")
	case errors.Is(err, fs.ErrPermission):
		p.Notes = append(p.Notes, fmt.Sprintf("cannot read the executable of pid %d: permission denied (needs CAP_SYS_PTRACE): Go checks skipped", pid))
	}
	p.Stdout, _ = os.Readlink(dir + "/fd/1")
	p.Stderr, _ = os.Readlink(dir + "/fd/2")
	if p.Exe != "" {
		g, notes := readGoInfo(pid)
		p.Go = g
		p.Notes = append(p.Notes, notes...)
	}
	lim, err := readCPULimit(pid)
	if err != nil {
		p.Notes = append(p.Notes, fmt.Sprintf("CPU limit of pid %d unknown: %v", pid, err))
	} else {
		p.Limit = lim
	}
	return p, nil
}

// listPIDs returns the PIDs of every process.
func listPIDs() ([]int, error) {
	entries, err := os.ReadDir(proc.Root)
	if err != nil {
		return nil, fmt.Errorf("list processes: %w", err)
	}
	var pids []int
	for _, e := range entries {
		if pid, err := strconv.Atoi(e.Name()); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

// readEnv returns the values of names in pid's initial environment; an
// unset name is absent from the map.
func readEnv(pid int, names ...string) (map[string]string, error) {
	b, err := os.ReadFile(filepath.Join(proc.Root, strconv.Itoa(pid), "environ"))
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, kv := range bytes.Split(b, []byte{0}) {
		k, v, ok := bytes.Cut(kv, []byte{'='})
		if !ok {
			continue
		}
		for _, n := range names {
			if string(k) == n {
				out[n] = string(v)
			}
		}
	}
	return out, nil
}
