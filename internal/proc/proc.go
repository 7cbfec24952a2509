// Package proc tells who a process is: its name, executable, start time,
// cgroup (container, pod) and executable mappings, with handles on the
// mapped files taken while the process lives, so that a process that exits,
// lives in another mount namespace, or whose binary was deleted can still be
// named afterwards.
package proc

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/flint-dev/flint/internal/memo"
)

// ErrNoProcess reports a PID with no living process.
var ErrNoProcess = errors.New("no such process")

// Process is a snapshot of one process image.
type Process struct {
	PID int
	// NSPID is the PID inside the process's own PID namespace, which names
	// its JIT map /tmp/perf-NSPID.map.
	NSPID int
	// StartTime is when the process started, in clock ticks after boot; with
	// PID it identifies a process across PID reuse.
	StartTime uint64
	Comm      string
	Exe       string // path of the executable as the process sees it
	Cgroup    string // cgroup path, preferring the unified (v2) hierarchy
	Container string // container ID from the cgroup path, "" if none
	Pod       string // Kubernetes pod UID from the cgroup path, "" if none
	// Mappings are the executable mappings, sorted by address.
	Mappings []Mapping
}

// Mapping is one executable memory mapping.
type Mapping struct {
	Start, End, Offset uint64
	Dev, Inode         uint64
	// Path is the mapped file as the process sees it, or a kernel name such
	// as "[vdso]"; "" for anonymous memory (JIT code).
	Path string
	// Deleted is set when the file was removed after mapping.
	Deleted bool
}

// FileKey identifies a mapped file by device and inode.
type FileKey struct{ Dev, Inode uint64 }

// Key returns the mapped file's identity; zero for anonymous mappings.
func (m *Mapping) Key() FileKey { return FileKey{m.Dev, m.Inode} }

// Find returns the mapping containing addr, or nil.
func (p *Process) Find(addr uint64) *Mapping {
	lo, hi := 0, len(p.Mappings)
	for lo < hi {
		mid := (lo + hi) / 2
		switch m := &p.Mappings[mid]; {
		case addr < m.Start:
			hi = mid
		case addr >= m.End:
			lo = mid + 1
		default:
			return m
		}
	}
	return nil
}

// Root is the /proc directory flint reads; tests point it elsewhere.
var Root = "/proc"

// Read snapshots the process pid. It reads what must be captured before a
// short-lived process exits, and no more: the sampler calls it for every
// new process on the node.
func Read(pid int) (*Process, error) {
	return ReadKnown(pid, Known{})
}

// Known is what the BPF program that announced a process read of it,
// which ReadKnown need not read from /proc: under process churn, reading
// /proc/PID/stat was a tenth of the agent's CPU, and /proc/PID/exe a
// twentieth.
type Known struct {
	// Comm and StartTime (clock ticks after boot, as /proc/PID/stat has
	// it); an empty Comm reads both.
	Comm      string
	StartTime uint64
	// ExeText is an address in the executable's text: the mapping there
	// names the executable. 0 reads /proc/PID/exe.
	ExeText uint64
	// Mappings, when not nil, are the executable mappings as Read would
	// give them, which the caller has (the kernel listed them): it does
	// not read /proc/PID/maps.
	Mappings []Mapping
	// Cgroups, when not nil, are the process's, which the caller has: it
	// does not read /proc/PID/cgroup.
	Cgroups *Cgroups
}

// ReadKnown is Read for a process of which the caller knows k.
func ReadKnown(pid int, k Known) (*Process, error) {
	dir := Root + "/" + strconv.Itoa(pid)
	p := &Process{PID: pid, NSPID: pid, Comm: k.Comm, StartTime: k.StartTime}
	bp := buffers.Get().(*[]byte)
	defer buffers.Put(bp)
	var err error
	if k.Comm == "" {
		if p.Comm, p.StartTime, err = readStat(pid, *bp); err != nil {
			return nil, err
		}
	}
	if p.Mappings = k.Mappings; p.Mappings == nil {
		if p.Mappings, err = readMappings(dir, bp); err != nil {
			return nil, fmt.Errorf("read pid %d mappings: %w", pid, err)
		}
	}
	if m := p.Find(k.ExeText); m != nil && m.Inode != 0 && m.Path != "" {
		p.Exe = m.Path
	} else {
		// Best effort: a kernel thread has no exe, a process may be gone
		// by now.
		p.Exe, _ = os.Readlink(dir + "/exe")
		p.Exe = strings.TrimSuffix(p.Exe, " (deleted)")
	}
	// The namespace PID names the JIT map /tmp/perf-NSPID.map, read only
	// for anonymous executable memory.
	if hasAnonymousCode(p.Mappings) {
		if status, err := readFile(dir+"/status", *bp); err == nil {
			p.NSPID = ParseNSPID(status, pid)
		}
	}
	if k.Cgroups != nil {
		p.Cgroup, p.Container, p.Pod = k.Cgroups.Cgroup, k.Cgroups.Container, k.Cgroups.Pod
	} else if cg, err := readFile(dir+"/cgroup", *bp); err == nil {
		ci := cgroupOf(cg)
		p.Cgroup, p.Container, p.Pod = ci.Cgroup, ci.Container, ci.Pod
	}
	return p, nil
}

// buffers hold what Read reads from /proc: one per concurrent Read, large
// enough that most files take one read system call.
var buffers = sync.Pool{New: func() any { b := make([]byte, 64<<10); return &b }}

// readFile reads a /proc file into buf (its contents are valid until buf
// is reused) with no more system calls than it takes: os.ReadFile adds
// two fstat calls to each file.
func readFile(path string, buf []byte) ([]byte, error) {
	fd, err := OpenRaw(path)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	defer CloseRaw(fd)
	return readAll(fd, path, buf)
}

// readAll reads fd to its end into buf, or as much as fits.
func readAll(fd int, path string, buf []byte) ([]byte, error) {
	n := 0
	for n < len(buf) {
		k, err := readRaw(fd, buf[n:])
		if err != nil {
			return nil, &fs.PathError{Op: "read", Path: path, Err: err}
		}
		if k == 0 {
			break
		}
		n += k
	}
	return buf[:n], nil
}

// readMappings lists the executable mappings in /proc/PID (dir), with
// PROCMAP_QUERY when the kernel has it. *bp may be replaced by a larger
// buffer for a process with very many mappings.
func readMappings(dir string, bp *[]byte) ([]Mapping, error) {
	path := dir + "/maps"
	fd, err := OpenRaw(path)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	defer CloseRaw(fd)
	ms, err := queryMaps(fd, (*bp)[:unix.PathMax])
	if !errors.Is(err, errNoQuery) {
		return ms, err
	}
	for {
		b, err := readAll(fd, path, *bp)
		if err != nil {
			return nil, err
		}
		if len(b) < len(*bp) {
			return ParseMaps(b), nil
		}
		// Larger than the buffer: read again from the start with twice
		// the room, so the maps are one consistent read.
		grown := make([]byte, 2*len(*bp))
		*bp = grown
		if _, err := unix.Seek(fd, 0, 0); err != nil {
			return nil, &fs.PathError{Op: "seek", Path: path, Err: err}
		}
	}
}

// hasAnonymousCode reports whether a mapping is executable memory backed
// by no file, other than the kernel's (vdso, vsyscall): code a JIT wrote.
func hasAnonymousCode(ms []Mapping) bool {
	for i := range ms {
		if ms[i].Inode == 0 && (ms[i].Path == "" || !strings.HasPrefix(ms[i].Path, "[v")) {
			return true
		}
	}
	return false
}

// ClockTick is USER_HZ, the unit of the times in /proc/stat and
// /proc/PID/stat: 100 a second on every Linux architecture flint runs on.
const ClockTick = 10 * time.Millisecond

// StartTime returns the start time of pid (clock ticks after boot): with
// the PID it names one process, whatever reuses the PID later.
func StartTime(pid int) (uint64, error) {
	var buf [1024]byte // stat is under 1 KiB: 52 numbers and a 16-byte name
	_, start, err := readStat(pid, buf[:])
	return start, err
}

func readStat(pid int, buf []byte) (comm string, start uint64, err error) {
	stat, err := readFile(Root+"/"+strconv.Itoa(pid)+"/stat", buf)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscallESRCH) {
			return "", 0, fmt.Errorf("pid %d: %w", pid, ErrNoProcess)
		}
		return "", 0, fmt.Errorf("read pid %d: %w", pid, err)
	}
	if comm, start, err = parseStat(stat); err != nil {
		return "", 0, fmt.Errorf("pid %d: %w", pid, err)
	}
	return comm, start, nil
}

// parseStat reads comm and start time from /proc/PID/stat. comm is in
// parentheses and may itself contain ") ", so fields are counted from the
// last ')'.
func parseStat(b []byte) (comm string, start uint64, err error) {
	open, close := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
	if open < 0 || close < open {
		return "", 0, errors.New("malformed stat")
	}
	comm = string(b[open+1 : close])
	fields := strings.Fields(string(b[close+1:]))
	// Field 22 (starttime) is the 20th after comm.
	if len(fields) < 20 {
		return "", 0, errors.New("malformed stat: too few fields")
	}
	start, err = strconv.ParseUint(fields[19], 10, 64)
	if err != nil {
		return "", 0, fmt.Errorf("malformed stat start time: %w", err)
	}
	return comm, start, nil
}

// ParseNSPID returns a process's PID in its own PID namespace from its
// /proc/PID/status (the last field of NSpid); pid itself on kernels before
// 4.1, which have no NSpid, and for a malformed line.
func ParseNSPID(status []byte, pid int) int {
	for line := range strings.Lines(string(status)) {
		if rest, ok := strings.CutPrefix(line, "NSpid:"); ok {
			f := strings.Fields(rest)
			if len(f) > 0 {
				if n, err := strconv.Atoi(f[len(f)-1]); err == nil {
					return n
				}
			}
		}
	}
	return pid
}

// Cgroups is what a /proc/PID/cgroup file says: a Process's Cgroup,
// Container and Pod.
type Cgroups struct{ Cgroup, Container, Pod string }

// Cgroups returns p's cgroup, container and pod.
func (p *Process) Cgroups() Cgroups { return Cgroups{p.Cgroup, p.Container, p.Pod} }

// cgroups memoises cgroupOf: a node's new processes share a few cgroups,
// and parsing one takes regular expressions. The snapshots then share the
// strings too.
var cgroups = memo.Strings[Cgroups]{Max: 4096}

// cgroupOf parses the contents of a /proc/PID/cgroup file, once per
// distinct contents. Safe for concurrent use.
func cgroupOf(b []byte) Cgroups {
	return cgroups.GetBytes(b, func(s string) Cgroups {
		ci := Cgroups{Cgroup: parseCgroup(s)}
		ci.Container, ci.Pod = ParseContainer(s)
		return ci
	})
}

// parseCgroup picks the unified hierarchy's path if the process has one
// beyond the root, else the first v1 hierarchy with a non-root path.
func parseCgroup(file string) string {
	var v1 string
	for line := range strings.Lines(file) {
		_, rest, _ := strings.Cut(strings.TrimRight(line, "\n"), ":")
		controllers, path, _ := strings.Cut(rest, ":")
		if controllers == "" && path != "/" {
			return path
		}
		if v1 == "" && path != "/" && path != "" {
			v1 = path
		}
	}
	if v1 == "" {
		return "/"
	}
	return v1
}

// ParseMaps parses /proc/PID/maps, keeping executable mappings.
func ParseMaps(b []byte) []Mapping {
	var out []Mapping
	for line := range strings.Lines(string(b)) {
		// start-end perms offset dev inode [path]
		f := strings.SplitN(strings.TrimRight(line, "\n"), " ", 6)
		if len(f) < 5 || len(f[1]) < 3 || f[1][2] != 'x' {
			continue
		}
		lo, hi, ok := strings.Cut(f[0], "-")
		if !ok {
			continue
		}
		var m Mapping
		var err1, err2, err3, err4 error
		m.Start, err1 = strconv.ParseUint(lo, 16, 64)
		m.End, err2 = strconv.ParseUint(hi, 16, 64)
		m.Offset, err3 = strconv.ParseUint(f[2], 16, 64)
		m.Inode, err4 = strconv.ParseUint(f[4], 10, 64)
		if err1 != nil || err2 != nil || err3 != nil || err4 != nil || m.End <= m.Start {
			continue
		}
		if major, minor, ok := strings.Cut(f[3], ":"); ok {
			ma, _ := strconv.ParseUint(major, 16, 64)
			mi, _ := strconv.ParseUint(minor, 16, 64)
			m.Dev = ma<<20 | mi
		}
		if len(f) == 6 {
			m.Path = strings.TrimLeft(f[5], " ")
			if p, ok := strings.CutSuffix(m.Path, " (deleted)"); ok {
				m.Path, m.Deleted = p, true
			}
			// A copy: a substring would keep the whole maps text alive
			// as long as the snapshot.
			m.Path = strings.Clone(m.Path)
		}
		out = append(out, m)
	}
	return out
}
