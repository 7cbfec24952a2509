package trace

import (
	"errors"
	"fmt"
	"os"
	"reflect"
	"runtime"
	"slices"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/flint-dev/flint/internal/proc"
)

// Calibration: flint puts the same probes it is about to attach on a
// function of its own, calibrationTarget, and times a loop calling it with
// and without them. The difference per call is what a probe hit costs on
// this machine, with this kernel and this BPF program: the breakpoint trap,
// the kernel's uprobe dispatch, the program and its map updates. The loop
// runs calibrationCalls calls per round and calibrationRounds rounds of
// each kind on one locked thread, timed with that thread's CPU clock: the
// cost is CPU time, which other processes competing for the CPU do not
// inflate as they would wall-clock time. Each figure is the median round.
const (
	calibrationCalls  = 2000
	calibrationRounds = 7
)

// calibrationTarget is the function probed during calibration: a leaf Go
// function with one RET, like the short functions whose probes cost most
// relative to their work.
//
//go:noinline
func calibrationTarget(x uint64) uint64 {
	return (x ^ x>>29) * 0x9e3779b97f4a7c15
}

// calibrationRound returns the CPU time of calibrationCalls calls of fn on
// this (locked) thread.
func calibrationRound(fn func(uint64) uint64) time.Duration {
	var s uint64
	start := threadCPU()
	for i := range uint64(calibrationCalls) {
		s += fn(i)
	}
	d := threadCPU() - start
	runtime.KeepAlive(s)
	return d
}

func threadCPU() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		// Linux has had thread CPU clocks since 2.6.12; wall time is
		// second best.
		return time.Duration(time.Now().UnixNano())
	}
	return time.Duration(ts.Nano())
}

func medianRound(fn func(uint64) uint64) time.Duration {
	rounds := make([]time.Duration, calibrationRounds)
	for i := range rounds {
		rounds[i] = calibrationRound(fn)
	}
	slices.Sort(rounds)
	return rounds[len(rounds)/2]
}

// calibrate measures Cost with the tracer's loaded program: a single-stepped
// entry probe (on calibrationTarget), an emulated one (on calibrationPush),
// and, when the trace times calls, entry and RET probes together.
func (t *Tracer) calibrate() (Cost, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()

	self, err := selfObject()
	if err != nil {
		return Cost{}, err
	}
	defer self.close()
	stepped, err := selfFunction(self, reflect.ValueOf(calibrationTarget).Pointer())
	if err != nil {
		return Cost{}, err
	}
	emulated, err := selfFunction(self, calibrationPushAddr())
	if err != nil {
		return Cost{}, err
	}
	ex, err := link.OpenExecutable("/proc/self/exe")
	if err != nil {
		return Cost{}, err
	}
	// The calibration probes stay attached, disabled, until Close: closing
	// one waits for an RCU grace period, and flint never calls the
	// calibration functions again.
	var links []link.Link
	defer func() { t.calib = append(t.calib, links...) }()
	if err := t.setEnabled(0, true); err != nil {
		return Cost{}, err
	}
	attach := func(prog *ebpf.Program, offs ...uint64) error {
		for _, off := range offs {
			l, err := ex.Uprobe("", prog, &link.UprobeOptions{Address: off, PID: os.Getpid(),
				Cookie: cookieGo | cookieCalibration})
			if err != nil {
				return classify(fmt.Errorf("attach calibration probe: %w", err))
			}
			links = append(links, l)
		}
		return nil
	}
	perCall := func(probed, base time.Duration) time.Duration {
		return max((probed-base)/calibrationCalls, time.Nanosecond)
	}

	calibrationRound(calibrationTarget) // warm up caches and branch predictors
	calibrationRound(calibrationPush)
	baseStepped, baseEmulated := medianRound(calibrationTarget), medianRound(calibrationPush)
	c := Cost{Rounds: calibrationRounds}
	if err := attach(t.objs.OnEntry, stepped.Entries...); err != nil {
		return Cost{}, err
	}
	c.Hit = perCall(medianRound(calibrationTarget), baseStepped)
	if err := attach(t.objs.OnEntry, emulated.Entries...); err != nil {
		return Cost{}, err
	}
	c.HitEmulated = perCall(medianRound(calibrationPush), baseEmulated)
	want := uint64(2 * calibrationCalls * calibrationRounds)
	if t.opts.Latency {
		if len(stepped.Returns) == 0 {
			return Cost{}, errors.New("calibration function has no RET")
		}
		if err := attach(t.objs.OnReturn, stepped.Returns...); err != nil {
			return Cost{}, err
		}
		c.TimedCall = max(perCall(medianRound(calibrationTarget), baseStepped), c.Hit)
		want += calibrationCalls * calibrationRounds
		h, err := t.histogram(0)
		if err != nil {
			return Cost{}, err
		}
		c.Floor = time.Duration(h.Percentile(0.5))
	}
	if err := t.setEnabled(0, false); err != nil {
		return Cost{}, err
	}

	// The probes must have fired on every call, or the figures are wrong.
	key := traceCallKey{Tgid: uint32(os.Getpid()), Func: 0}
	var perCPU []traceCallCounts
	if err := t.objs.Counts.Lookup(key, &perCPU); err != nil {
		return Cost{}, fmt.Errorf("calibration probe never fired: %w", err)
	}
	var calls uint64
	for _, v := range perCPU {
		calls += v.Calls
	}
	if calls < want {
		return Cost{}, fmt.Errorf("calibration probes fired %d times for %d calls", calls, want)
	}
	if err := t.objs.Counts.Delete(key); err != nil {
		return Cost{}, fmt.Errorf("reset calibration counts: %w", err)
	}
	return c, nil
}

func selfObject() (*object, error) {
	f, err := os.Open("/proc/self/exe")
	if err != nil {
		return nil, err
	}
	o, err := newObject(f, "/proc/self/exe", "/proc/self/exe", false)
	if err != nil {
		f.Close()
		return nil, err
	}
	return o, nil
}

// selfFunction resolves one of flint's own functions, given the address of
// its first instruction, to probe locations in /proc/self/exe.
func selfFunction(self *object, pc uintptr) (*Function, error) {
	p, err := proc.Read(os.Getpid())
	if err != nil {
		return nil, err
	}
	m := p.Find(uint64(pc))
	if m == nil {
		return nil, fmt.Errorf("calibration function at %#x is not mapped", pc)
	}
	off := uint64(pc) - m.Start + m.Offset
	for _, fn := range self.goAll {
		if e, err := fileOffset(self.elf, fn.Entry); err == nil && e == off {
			g, err := goFunction(self, fn)
			return &g, err
		}
	}
	return nil, fmt.Errorf("calibration function not found in /proc/self/exe at offset %#x", off)
}
