// Package tracefs finds the kernel's tracing file system, mounting it when
// it is not, and reads the few files flint uses from it: whether a trace
// event exists, and the uprobe events and their hit counts.
//
// Tracepoint attachment (cilium/ebpf's link.Tracepoint) looks tracefs up
// once per process and remembers a failure, so call Mount before the first
// attachment:
//
//	dir, err := tracefs.Mount()
//	...
//	link.Tracepoint("syscalls", "sys_enter_epoll_wait", prog, nil)
package tracefs

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Sentinel errors callers branch on.
var (
	// ErrNoPermission: tracefs is not mounted and this process may not
	// mount it.
	ErrNoPermission = errors.New("need CAP_SYS_ADMIN to mount tracefs (run as root)")
	// ErrNotSupported: the kernel has no tracefs (CONFIG_TRACING off).
	ErrNotSupported = errors.New("kernel has no tracefs (CONFIG_TRACING)")
)

// Default is where flint mounts tracefs when no tracing directory exists.
const Default = "/sys/kernel/tracing"

// candidates are the tracing directories, in the order the kernel and
// cilium/ebpf prefer them: tracefs, then its older place inside debugfs.
var candidates = []string{Default, "/sys/kernel/debug/tracing"}

// mount is unix.Mount; tests replace it.
var mount = unix.Mount

// Mount returns the tracing directory, mounting tracefs at Default
// (`mount -t tracefs nodev /sys/kernel/tracing`) if no tracing directory is
// mounted. Safe to call many times.
func Mount() (string, error) {
	return mountAt(candidates)
}

func mountAt(dirs []string) (string, error) {
	for _, dir := range dirs {
		if mounted(dir) {
			return dir, nil
		}
	}
	dir := dirs[0]
	if err := mount("nodev", dir, "tracefs", 0, ""); err != nil {
		switch {
		case errors.Is(err, unix.EPERM), errors.Is(err, unix.EACCES):
			return "", fmt.Errorf("tracefs is not mounted at %s: %w", dir, ErrNoPermission)
		case errors.Is(err, unix.ENODEV):
			return "", fmt.Errorf("tracefs is not mounted at %s: %w", dir, ErrNotSupported)
		case errors.Is(err, unix.ENOENT):
			return "", fmt.Errorf("tracefs is not mounted and %s does not exist (is sysfs mounted at /sys?)", dir)
		}
		return "", fmt.Errorf("mount -t tracefs nodev %s: %w", dir, err)
	}
	if !mounted(dir) {
		return "", fmt.Errorf("mounted tracefs at %s but it has no events directory", dir)
	}
	return dir, nil
}

// mounted reports whether dir holds a tracing file system: it has trace
// events.
func mounted(dir string) bool {
	fi, err := os.Stat(filepath.Join(dir, "events"))
	return err == nil && fi.IsDir()
}

// HasEvent reports whether the trace event group/name exists, e.g.
// ("syscalls", "sys_enter_epoll_pwait2"), which needs Linux 5.11.
func HasEvent(dir, group, name string) bool {
	_, err := os.Stat(filepath.Join(dir, "events", group, name, "id"))
	return err == nil
}

// HasSyscallEvents reports whether the kernel has per-syscall tracepoints
// (CONFIG_FTRACE_SYSCALLS).
func HasSyscallEvents(dir string) bool {
	fi, err := os.Stat(filepath.Join(dir, "events", "syscalls"))
	return err == nil && fi.IsDir()
}

// Uprobe is one uprobe trace event (made through uprobe_events, e.g. by
// `perf probe -x` or bcc) and how often it fired.
type Uprobe struct {
	Event  string // group/name, e.g. "uprobes/p_app_0x1234"
	Path   string // the probed file
	Offset uint64 // file offset of the probed instruction
	Return bool   // a uretprobe
	Hits   uint64 // since the event was made
}

// Uprobes lists the uprobe events under dir with their hit counts. No
// uprobe support in the kernel means none.
func Uprobes(dir string) ([]Uprobe, error) {
	events, err := os.Open(filepath.Join(dir, "uprobe_events"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read uprobe events: %w", err)
	}
	defer events.Close()
	probes, err := ParseUprobeEvents(events)
	if err != nil {
		return nil, err
	}
	if len(probes) == 0 {
		return nil, nil
	}
	prof, err := os.Open(filepath.Join(dir, "uprobe_profile"))
	if err != nil {
		return nil, fmt.Errorf("read uprobe hits: %w", err)
	}
	defer prof.Close()
	hits, err := ParseUprobeProfile(prof)
	if err != nil {
		return nil, err
	}
	for i := range probes {
		_, name, _ := strings.Cut(probes[i].Event, "/")
		probes[i].Hits = hits[name]
	}
	return probes, nil
}

// ParseUprobeEvents parses uprobe_events, one probe a line:
// "p:uprobes/p_app_0x1234 /usr/bin/app:0x0000000000001234 [args]".
// Lines it cannot read are skipped.
func ParseUprobeEvents(r io.Reader) ([]Uprobe, error) {
	var out []Uprobe
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 {
			continue
		}
		kind, event, ok := strings.Cut(f[0], ":")
		if !ok || (kind != "p" && kind != "r") {
			continue
		}
		i := strings.LastIndexByte(f[1], ':')
		if i < 0 {
			continue
		}
		// The offset may carry a reference counter: 0x1234(0x20).
		offText, _, _ := strings.Cut(f[1][i+1:], "(")
		off, err := strconv.ParseUint(strings.TrimPrefix(offText, "0x"), 16, 64)
		if err != nil {
			continue
		}
		out = append(out, Uprobe{Event: event, Path: f[1][:i], Offset: off, Return: kind == "r"})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read uprobe events: %w", err)
	}
	return out, nil
}

// ParseUprobeProfile parses uprobe_profile, "  PATH EVENT HITS" a line, into
// hits by event name (without its group). Lines it cannot read are skipped.
func ParseUprobeProfile(r io.Reader) (map[string]uint64, error) {
	hits := map[string]uint64{}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 3 {
			continue
		}
		n, err := strconv.ParseUint(f[len(f)-1], 10, 64)
		if err != nil {
			continue
		}
		hits[f[len(f)-2]] = n
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read uprobe hits: %w", err)
	}
	return hits, nil
}
