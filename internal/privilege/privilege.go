// Package privilege drops the Linux capabilities a flint command no longer
// needs once its BPF programs are loaded and attached, and sets
// no_new_privs, so that a bug in what follows (parsing other processes'
// binaries, serving HTTP) cannot do what root could. docs/SECURITY.md lists
// what each command keeps, and why.
//
// Capabilities belong to threads, not processes: Drop changes every thread
// of the process at once (syscall.AllThreadsSyscall), which Go refuses in a
// binary that links cgo, since cgo code may start threads Go does not know.
// flint needs no cgo; `make build` uses CGO_ENABLED=0, and Drop returns
// ErrCgo from a build with cgo.
//
//	// after loading and attaching:
//	kept, err := privilege.Drop(privilege.Agent)
package privilege

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Cap is a capability's number (linux/capability.h).
type Cap uint

// The capabilities flint keeps, and CAP_SETPCAP, which dropping the
// bounding set takes.
const (
	DACReadSearch     Cap = unix.CAP_DAC_READ_SEARCH    // read any file, search any directory
	SetPCap           Cap = unix.CAP_SETPCAP            // change the bounding set
	SysPtrace         Cap = unix.CAP_SYS_PTRACE         // /proc/PID/mem, environ, root, exe of any process
	SysAdmin          Cap = unix.CAP_SYS_ADMIN          // mount; list other programs' BPF links; BPF before 5.8
	Syslog            Cap = unix.CAP_SYSLOG             // kernel addresses in /proc/kallsyms
	Perfmon           Cap = unix.CAP_PERFMON            // perf_event_open: sampling events, tracepoints, uprobes (5.8)
	BPF               Cap = unix.CAP_BPF                // load programs, create maps (5.8)
	CheckpointRestore Cap = unix.CAP_CHECKPOINT_RESTORE // open /proc/PID/map_files/* (5.9)
	SetUID            Cap = unix.CAP_SETUID             // run a helper as another user
	SetGID            Cap = unix.CAP_SETGID             // run a helper in another group
)

// Set is a set of capabilities: bit n is capability n, as in the CapEff
// line of /proc/PID/status.
type Set uint64

// Of returns the set of caps.
func Of(caps ...Cap) Set {
	var s Set
	for _, c := range caps {
		s |= 1 << c
	}
	return s
}

// Has reports whether c is in s.
func (s Set) Has(c Cap) bool { return c < 64 && s&(1<<c) != 0 }

// String names the capabilities in s, "cap_bpf,cap_perfmon", or "none".
func (s Set) String() string {
	var names []string
	for c := Cap(0); c < 64; c++ {
		if s.Has(c) {
			names = append(names, c.String())
		}
	}
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ",")
}

// capNames are the capabilities flint names; others print as cap_N.
var capNames = map[Cap]string{
	DACReadSearch: "cap_dac_read_search", SetPCap: "cap_setpcap", SysPtrace: "cap_sys_ptrace",
	SysAdmin: "cap_sys_admin", Syslog: "cap_syslog", Perfmon: "cap_perfmon", BPF: "cap_bpf",
	CheckpointRestore: "cap_checkpoint_restore", SetUID: "cap_setuid", SetGID: "cap_setgid",
}

// String is the capability's name as capabilities(7) spells it, lower case.
func (c Cap) String() string {
	if n, ok := capNames[c]; ok {
		return n
	}
	return "cap_" + strconv.Itoa(int(c))
}

// What each command keeps once loaded; docs/SECURITY.md says why, and
// Kernel.Adjust adds what older kernels check instead. SysPtrace,
// DACReadSearch and CheckpointRestore read the processes being profiled and
// their binaries (/proc/PID/mem, environ, root, map_files: files of other
// users, mode 0400); Syslog reads kernel symbol addresses from
// /proc/kallsyms, which it opens when it first names a kernel frame. The
// agent keeps BPF and Perfmon to load and attach its syscall tracer at each
// examination; the doctor keeps SysAdmin to list other tools' BPF links and
// read their programs' statistics by ID (probe-overhead). The agent and
// record keep SetUID and SetGID to run the helper that asks a JVM for its
// JIT map as the JVM's user (internal/jvm), which the JVM requires; with
// SysPtrace they could act as any user already. Trace attaches every probe
// before it drops, and then reads only its own maps.
var (
	Agent  = Of(BPF, Perfmon, SysPtrace, DACReadSearch, CheckpointRestore, Syslog, SetUID, SetGID)
	Record = Of(SysPtrace, DACReadSearch, CheckpointRestore, Syslog, SetUID, SetGID)
	Doctor = Of(SysAdmin, SysPtrace, DACReadSearch, CheckpointRestore, Syslog)
	Trace  = Set(0)
)

// ErrCgo: this binary links cgo, so Go cannot change every thread's
// capabilities, and Drop changed nothing.
var ErrCgo = errors.New("capabilities not dropped: this build of flint links cgo (build it with CGO_ENABLED=0, as make does)")

// Kernel is what decides which capabilities the running kernel checks.
type Kernel struct {
	// Last is the highest capability it knows
	// (/proc/sys/kernel/cap_last_cap): 40 since Linux 5.9.
	Last Cap
	// BPFCallsChecked: every bpf() call, even one on a map already open,
	// takes CAP_BPF. So it was before Linux 6.5 when unprivileged BPF is
	// disabled (kernel.unprivileged_bpf_disabled, on by default).
	BPFCallsChecked bool
}

// Running describes the running kernel.
func Running() (Kernel, error) {
	b, err := os.ReadFile("/proc/sys/kernel/cap_last_cap")
	if err != nil {
		return Kernel{}, fmt.Errorf("read the kernel's last capability: %w", err)
	}
	last, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 6)
	if err != nil {
		return Kernel{}, fmt.Errorf("read the kernel's last capability: %q: %w", b, err)
	}
	k := Kernel{Last: Cap(last)}
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return Kernel{}, fmt.Errorf("read the kernel's version: %w", err)
	}
	if olderThan(unix.ByteSliceToString(u.Release[:]), 6, 5) {
		b, err := os.ReadFile("/proc/sys/kernel/unprivileged_bpf_disabled")
		k.BPFCallsChecked = err != nil || strings.TrimSpace(string(b)) != "0"
	}
	return k, nil
}

// olderThan reports whether the kernel release ("6.1.0-18-amd64") is
// older than major.minor; an unreadable one counts as older.
func olderThan(release string, major, minor int) bool {
	var ma, mi int
	if n, _ := fmt.Sscanf(release, "%d.%d", &ma, &mi); n != 2 {
		return true
	}
	return ma < major || ma == major && mi < minor
}

// Adjust returns keep as k checks it: BPF added where every bpf() call
// checks it, and CAP_SYS_ADMIN standing in for CAP_BPF and CAP_PERFMON
// before Linux 5.8 and CAP_CHECKPOINT_RESTORE before 5.9, which such a
// kernel does not know.
func (k Kernel) Adjust(keep Set) Set {
	if k.BPFCallsChecked {
		keep |= Of(BPF)
	}
	for _, c := range []Cap{BPF, Perfmon, CheckpointRestore} {
		if keep.Has(c) && c > k.Last {
			keep |= Of(SysAdmin)
		}
	}
	return keep & (1<<(k.Last+1) - 1)
}

// Drop keeps only keep, as Kernel.Adjust adapts it to the running kernel, of the capabilities this
// process has: in every thread's effective and permitted sets and the
// bounding set (so that no program it runs gains more), with the
// inheritable and ambient sets emptied, and sets no_new_privs. It returns
// the capabilities kept. A process without CAP_SETPCAP (not root, given
// capabilities by setcap or systemd's AmbientCapabilities) cannot shrink
// its bounding set; no_new_privs then keeps what it runs from gaining.
func Drop(keep Set) (Set, error) {
	k, err := Running()
	if err != nil {
		return 0, err
	}
	keep = k.Adjust(keep)
	have, err := current()
	if err != nil {
		return 0, err
	}
	if have.permitted.Has(SetPCap) && have.effective.Has(SetPCap) {
		for c := Cap(0); c <= k.Last; c++ {
			if keep.Has(c) {
				continue
			}
			if err := allThreads(unix.SYS_PRCTL, unix.PR_CAPBSET_DROP, uintptr(c), 0, 0); err != nil {
				return 0, fmt.Errorf("drop %s from the bounding set: %w", c, err)
			}
		}
	}
	if err := allThreads(unix.SYS_PRCTL, unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0); err != nil &&
		!errors.Is(err, unix.EINVAL) { // EINVAL: before 4.3, no ambient set
		return 0, fmt.Errorf("clear the ambient capabilities: %w", err)
	}
	kept := keep & have.permitted
	capsetMu.Lock()
	defer capsetMu.Unlock()
	capset.hdr = unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	for i := range capset.data {
		capset.data[i] = unix.CapUserData{Effective: uint32(kept >> (32 * i)), Permitted: uint32(kept >> (32 * i))}
	}
	if err := allThreads(unix.SYS_CAPSET, uintptr(unsafe.Pointer(&capset.hdr)), uintptr(unsafe.Pointer(&capset.data[0])), 0, 0); err != nil {
		return 0, fmt.Errorf("set capabilities to %s: %w", kept, err)
	}
	if err := allThreads(unix.SYS_PRCTL, unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0); err != nil {
		return 0, fmt.Errorf("set no_new_privs: %w", err)
	}
	return kept, nil
}

// capset holds capset's arguments where they stay put: allThreads takes
// addresses as integers, which do not keep what they point to in place,
// and a goroutine's stack moves when it grows (AllThreadsSyscall6 is Go
// code that may grow it). With the arguments on the stack, `flint record`
// failed once in CI with capset's EINVAL, which it gives for a header
// version it does not know: most likely the stack's old copy, reused.
var (
	capsetMu sync.Mutex
	capset   struct {
		hdr  unix.CapUserHeader
		data [2]unix.CapUserData
	}
)

// allThreads runs a syscall on every thread; the runtime panics if threads
// disagree, which they cannot: they all start with the same credentials and
// only Drop changes them. Its arguments are integers: one that is an
// address must name memory that does not move, a package variable
// (capset), never a local.
func allThreads(trap, a1, a2, a3, a4 uintptr) error {
	_, _, errno := syscall.AllThreadsSyscall6(trap, a1, a2, a3, a4, 0, 0)
	switch errno {
	case 0:
		return nil
	case syscall.ENOTSUP:
		return ErrCgo
	}
	return errno
}

// sets are one thread's effective and permitted capabilities.
type sets struct{ effective, permitted Set }

// current reads the calling thread's sets; every thread has the same.
func current() (sets, error) {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return sets{}, fmt.Errorf("read capabilities: %w", err)
	}
	join := func(lo, hi uint32) Set { return Set(lo) | Set(hi)<<32 }
	return sets{
		effective: join(data[0].Effective, data[1].Effective),
		permitted: join(data[0].Permitted, data[1].Permitted),
	}, nil
}

// Effective returns the capabilities this process has in effect.
func Effective() (Set, error) {
	s, err := current()
	return s.effective, err
}

// MissingToLoad names what of CAP_BPF and CAP_PERFMON, which loading and
// attaching BPF programs takes, have lacks; CAP_SYS_ADMIN stands in for
// both on kernels older than 5.8.
func MissingToLoad(have Set) []string {
	var missing []string
	if !have.Has(BPF) && !have.Has(SysAdmin) {
		missing = append(missing, "CAP_BPF")
	}
	if !have.Has(Perfmon) && !have.Has(SysAdmin) {
		missing = append(missing, "CAP_PERFMON")
	}
	return missing
}

// Status is a process's capabilities as /proc/PID/status shows them.
type Status struct {
	Effective, Permitted, Inheritable, Bounding, Ambient Set
	NoNewPrivs                                           bool
}

// ParseStatus reads the capability lines of a /proc/PID/status file; it
// fails if CapEff, CapPrm, CapBnd or NoNewPrivs is missing or unreadable.
func ParseStatus(status string) (Status, error) {
	var st Status
	fields := map[string]*Set{"CapEff": &st.Effective, "CapPrm": &st.Permitted, "CapInh": &st.Inheritable,
		"CapBnd": &st.Bounding, "CapAmb": &st.Ambient}
	seen := 0
	for line := range strings.Lines(status) {
		name, v, ok := strings.Cut(line, ":")
		v = strings.TrimSpace(v)
		if !ok {
			continue
		}
		if name == "NoNewPrivs" {
			st.NoNewPrivs = v == "1"
			seen++
			continue
		}
		p := fields[name]
		if p == nil {
			continue
		}
		n, err := strconv.ParseUint(v, 16, 64)
		if err != nil {
			return Status{}, fmt.Errorf("parse %s %q: %w", name, v, err)
		}
		*p = Set(n)
		if name != "CapInh" && name != "CapAmb" {
			seen++
		}
	}
	if seen != 4 {
		return Status{}, errors.New("parse status: want CapEff, CapPrm, CapBnd and NoNewPrivs")
	}
	return st, nil
}
