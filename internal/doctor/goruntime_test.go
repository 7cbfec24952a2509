package doctor

import (
	"strings"
	"testing"
)

// TestGoRuntimeOverhead runs the parser that allocates a fresh record per
// line (the bug) and the one that reuses it (the fix). The parser uses
// about 0.17 CPU: twice testDuration gives the detector its 200 samples
// (minSamples) with a margin of two, where testDuration's margin of 1.3
// failed 2 runs in 20 under load (bench/twins.sh).
func TestGoRuntimeOverhead(t *testing.T) {
	requireRoot(t)
	fx := buildFixtures(t)
	o := Options{Duration: 2 * testDuration}

	bug := startFixture(t, "", nil, fx["alloc"])
	findings, data := doctorRun(t, bug.pid, o)
	logFindings(t, "allocating", of(findings, bug.pid))
	f := byID(of(findings, bug.pid), "go-runtime-overhead")
	if f == nil {
		logMeasured(t, "measured", data, bug.pid)
		t.Fatalf("go-runtime-overhead did not fire on the allocating parser (%d samples of it)", data.index().samples[bug.pid])
	}
	gc, _ := evidence(f, "gc_share")
	alloc, _ := evidence(f, "allocation_share")
	if gc.Value+alloc.Value < DefaultThresholds().RuntimeShare/2 {
		t.Errorf("GC %.2f + allocation %.2f: the fixture's overhead is allocation", gc.Value, alloc.Value)
	}
	top, ok := evidence(f, "allocator_1")
	if !ok || !strings.Contains(top.Text, "main.parseAlloc") {
		t.Errorf("top allocator %q does not name main.parseAlloc", top.Text)
	}
	if f.Where == nil || f.Where.Function != "main.parseAlloc" || !strings.HasSuffix(f.Where.File, "doctor-alloc/main.go") {
		t.Errorf("where = %+v, want main.parseAlloc", f.Where)
	}
	bugCPU := processCPU(t, data, bug.pid)
	bug.cmd.Process.Kill()

	fixed := startFixture(t, "", nil, fx["alloc"], "-reuse")
	findings, data = doctorRun(t, fixed.pid, o)
	logFindings(t, "reusing", of(findings, fixed.pid))
	logTwin(t, "reusing", data, fixed.pid)
	if got := of(findings, fixed.pid); len(got) > 0 {
		t.Errorf("the reusing parser has findings: %+v", got)
	}
	fixedCPU := processCPU(t, data, fixed.pid)
	t.Logf("CPU for the same records: %.3f allocating, %.3f reusing", bugCPU, fixedCPU)
	if fixedCPU > bugCPU/2 {
		t.Errorf("CPU %.3f reusing, %.3f allocating: want it at least halved", fixedCPU, bugCPU)
	}
}

func TestClassifyStack(t *testing.T) {
	k := func(fn string) Frame { return Frame{Function: fn, Kernel: true} }
	u := func(fn string) Frame { return Frame{Function: fn} }
	for _, tc := range []struct {
		name   string
		stack  []Frame // leaf first
		class  runtimeClass
		caller int
	}{
		{"user code", []Frame{u("main.work"), u("main.main"), u("runtime.main")}, classNone, 0},
		{"memmove from user", []Frame{u("runtime.memmove"), u("bytes.(*Buffer).Write"), u("main.f")}, classNone, 1},
		{"allocation", []Frame{u("runtime.nextFreeFast"), u("runtime.mallocgc"), u("runtime.newobject"), u("main.parse")}, classAlloc, 3},
		{"assist is GC", []Frame{u("runtime.scanobject"), u("runtime.gcDrainN"), u("runtime.gcAssistAlloc1"), u("runtime.gcAssistAlloc"), u("runtime.mallocgc"), u("main.f")}, classGC, 5},
		{"mark worker", []Frame{k("clear_page_erms"), u("runtime.(*gcWork).tryGet"), u("runtime.gcDrain"), u("runtime.gcBgMarkWorker.func2"), u("runtime.systemstack")}, classGC, 5},
		{"parking is idle", []Frame{k("futex_wait"), u("internal/runtime/syscall/linux.Syscall6"), u("runtime.futex"), u("runtime.futexsleep"), u("runtime.notesleep"), u("runtime.mPark"), u("runtime.stopm"), u("runtime.findRunnable"), u("runtime.schedule"), u("runtime.park_m"), u("runtime.mcall")}, classIdle, 11},
		{"network wait is idle", []Frame{k("do_epoll_wait"), u("internal/runtime/syscall/linux.Syscall6"), u("runtime.netpoll"), u("runtime.findRunnable"), u("runtime.schedule"), u("runtime.park_m"), u("runtime.mcall")}, classIdle, 7},
		{"sysmon is idle", []Frame{k("hrtimer_nanosleep"), u("runtime.usleep"), u("runtime.sysmon"), u("runtime.mstart1"), u("runtime.mstart0"), u("runtime.mstart")}, classIdle, 6},
		{"stealing is scheduler", []Frame{u("runtime.runqgrab"), u("runtime.runqsteal"), u("runtime.stealWork"), u("runtime.findRunnable"), u("runtime.schedule"), u("runtime.park_m"), u("runtime.mcall")}, classScheduler, 7},
		{"blocking on I/O is scheduler", []Frame{u("runtime.netpollblock"), u("internal/poll.runtime_pollWait"), u("internal/poll.(*FD).Read")}, classScheduler, 1},
		{"channel wake", []Frame{u("runtime.futexwakeup"), u("runtime.notewakeup"), u("runtime.startm"), u("runtime.wakep"), u("runtime.ready"), u("runtime.send"), u("runtime.chansend"), u("runtime.chansend1"), u("main.produce")}, classScheduler, 8},
		{"stack growth", []Frame{u("runtime.memmove"), u("runtime.copystack"), u("runtime.newstack"), u("runtime.morestack"), u("main.recurse")}, classStack, 4},
		{"preempted via morestack", []Frame{u("runtime.schedule"), u("runtime.goschedImpl"), u("runtime.gopreempt_m"), u("runtime.newstack"), u("runtime.morestack"), u("main.loop")}, classScheduler, 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			class, caller := classifyStack(tc.stack)
			if class != tc.class || caller != tc.caller {
				t.Errorf("got %q, caller %d; want %q, %d", class, caller, tc.class, tc.caller)
			}
		})
	}
}
