package jvm

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/flint-dev/flint/internal/proc"
)

// Options configure a Dumper.
type Options struct {
	// Helper is the command that runs PerfMap for one JVM as the JVM's
	// user: Helper plus the PID and its namespace PID (flint runs itself,
	// `flint jvm-perfmap PID NSPID`).
	Helper []string
	// Every is the least time between two maps of one JVM: a JVM compiles
	// code as long as it runs, so the map is asked for again while its JIT
	// code is sampled, at most this often. Zero means one minute.
	Every time.Duration
	// Logf reports the failure for a JVM, after which it is not asked
	// again; nil discards.
	Logf func(format string, args ...any)
}

// Stats count what a Dumper did.
type Stats struct {
	Written, Failed, Skipped int64
}

// Dumper has JVMs write their perf maps, one JVM at a time, each at most
// once per Options.Every.
type Dumper struct {
	o        Options
	requests chan int
	mu       sync.Mutex
	last     map[int]time.Time // by host PID: when its map was last asked for
	failed   map[int]bool      // failed once: logged, not asked again
	stop     context.CancelFunc
	done     chan struct{}

	written, failedN, skipped atomic.Int64
}

// maxTracked bounds the JVMs a Dumper remembers; past it, it starts over.
const maxTracked = 4096

// NewDumper starts a Dumper.
func NewDumper(o Options) *Dumper {
	if o.Every <= 0 {
		o.Every = time.Minute
	}
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
	ctx, cancel := context.WithCancel(context.Background())
	d := &Dumper{o: o, requests: make(chan int, 16), last: map[int]time.Time{}, failed: map[int]bool{}, stop: cancel, done: make(chan struct{})}
	go d.run(ctx)
	return d
}

// Request asks for pid's map unless it was asked for less than Every ago;
// it never blocks (a request finding the queue full is skipped and
// counted). A nil Dumper does nothing.
func (d *Dumper) Request(pid int) {
	if d == nil {
		return
	}
	now := time.Now()
	d.mu.Lock()
	// A JVM that failed once is not asked again: each try costs it a
	// signal, and one that takes it for a thread dump prints one.
	if t, ok := d.last[pid]; ok && now.Sub(t) < d.o.Every || d.failed[pid] {
		d.mu.Unlock()
		return
	}
	if len(d.last) >= maxTracked {
		clear(d.last)
	}
	d.last[pid] = now
	d.mu.Unlock()
	select {
	case d.requests <- pid:
	default:
		d.skipped.Add(1)
	}
}

// Now has JVM pid write its map and waits until it has, however recently
// it was asked: a recording's last look before it names what it sampled.
// Its failure is logged and counted as a Request's is. Safe on nil.
func (d *Dumper) Now(pid int) {
	if d == nil {
		return
	}
	d.mu.Lock()
	d.last[pid] = time.Now()
	failed := d.failed[pid]
	d.mu.Unlock()
	if !failed {
		d.finish(pid, d.dump(context.Background(), pid))
	}
}

// Stats returns the counters.
func (d *Dumper) Stats() Stats {
	return Stats{Written: d.written.Load(), Failed: d.failedN.Load(), Skipped: d.skipped.Load()}
}

// Close stops the Dumper, ending a helper still running; safe on nil.
func (d *Dumper) Close() {
	if d == nil {
		return
	}
	d.stop()
	<-d.done
}

func (d *Dumper) run(ctx context.Context) {
	defer close(d.done)
	for {
		select {
		case <-ctx.Done():
			return
		case pid := <-d.requests:
			d.finish(pid, d.dump(ctx, pid))
		}
	}
}

// finish counts a helper's run for pid, and logs its failure once.
func (d *Dumper) finish(pid int, err error) {
	if err == nil {
		d.written.Add(1)
		return
	}
	d.failedN.Add(1)
	d.mu.Lock()
	first := !d.failed[pid]
	if len(d.failed) >= maxTracked {
		clear(d.failed)
	}
	d.failed[pid] = true
	d.mu.Unlock()
	if first {
		d.o.Logf("JIT map of JVM pid %d: %v (its Java methods stay unnamed)", pid, err)
	}
}

// dump runs the helper for pid as the JVM's user and group.
func (d *Dumper) dump(ctx context.Context, pid int) error {
	status, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return err
	}
	uid, gid, err := owner(status)
	if err != nil {
		return fmt.Errorf("pid %d: %w", pid, err)
	}
	nspid := proc.ParseNSPID(status, pid)
	ctx, cancel := context.WithTimeout(ctx, 2*attachTimeout)
	defer cancel()
	args := append(d.o.Helper[1:len(d.o.Helper):len(d.o.Helper)], strconv.Itoa(pid), strconv.Itoa(nspid))
	cmd := exec.CommandContext(ctx, d.o.Helper[0], args...)
	// The JVM's credentials, without supplementary groups: setgroups
	// would need CAP_SETGID even for a JVM of flint's own user.
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: gid, NoSetGroups: true}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%v: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}

// owner returns the effective user and group in a /proc/PID/status.
func owner(status []byte) (uid, gid uint32, err error) {
	field := func(name string) (uint32, error) {
		for line := range strings.Lines(string(status)) {
			if rest, ok := strings.CutPrefix(line, name+":"); ok {
				f := strings.Fields(rest)
				if len(f) >= 2 {
					v, err := strconv.ParseUint(f[1], 10, 32) // real, effective, saved, fs
					return uint32(v), err
				}
			}
		}
		return 0, fmt.Errorf("no %s in its status", name)
	}
	if uid, err = field("Uid"); err != nil {
		return 0, 0, err
	}
	gid, err = field("Gid")
	return uid, gid, err
}
