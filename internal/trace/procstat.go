package trace

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/flint-dev/flint/internal/proc"
)

// procTimes is a process's CPU use and start time from /proc/PID/stat.
type procTimes struct {
	cpu   float64 // user + system CPU seconds of all its threads
	start uint64  // start time, clock ticks after boot: with the PID, who it is
}

func readTimes(pid int) (procTimes, error) {
	b, err := os.ReadFile(fmt.Sprintf("%s/%d/stat", proc.Root, pid))
	if err != nil {
		return procTimes{}, err
	}
	return parseTimes(b)
}

// parseTimes reads utime, stime (fields 14, 15) and starttime (22) of a
// /proc/PID/stat line. comm (field 2) may hold spaces and parentheses, so
// fields are counted from the last ')'.
func parseTimes(b []byte) (procTimes, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return procTimes{}, errors.New("malformed stat")
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 {
		return procTimes{}, errors.New("malformed stat: too few fields")
	}
	var v [3]uint64
	for j, k := range []int{11, 12, 19} { // fields 14, 15, 22 counted after comm
		n, err := strconv.ParseUint(f[k], 10, 64)
		if err != nil {
			return procTimes{}, fmt.Errorf("malformed stat: %w", err)
		}
		v[j] = n
	}
	return procTimes{cpu: float64(v[0]+v[1]) * proc.ClockTick.Seconds(), start: v[2]}, nil
}

// bootSeconds is the time since boot on the clock /proc start times use.
func bootSeconds() float64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		return 0
	}
	return float64(ts.Sec) + float64(ts.Nsec)/1e9
}

func readComm(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("%s/%d/comm", proc.Root, pid))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// processesRunning lists the processes whose executable is the file with
// inode ino (--exe: those already running when the trace starts).
func processesRunning(ino uint64) []int {
	ents, err := os.ReadDir(proc.Root)
	if err != nil {
		return nil
	}
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		fi, err := os.Stat(fmt.Sprintf("%s/%d/exe", proc.Root, pid))
		if err == nil && sameInode(fi, ino) {
			pids = append(pids, pid)
		}
	}
	return pids
}
