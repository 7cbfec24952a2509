package doctor

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// TestLockContention runs eight goroutines rendering items under one
// sync.Mutex (the bug), then rendering copies after Unlock (the fix).
func TestLockContention(t *testing.T) {
	requireRoot(t)
	fx := buildFixtures(t)

	bug := startFixture(t, "", nil, fx["mutex"])
	findings, data := doctorRun(t, bug.pid, Options{})
	logFindings(t, "under the lock", findings)
	logMeasured(t, "under the lock", data, bug.pid)
	f := byID(of(findings, bug.pid), "lock-contention")
	if f == nil {
		t.Fatal("lock-contention did not fire on eight goroutines rendering under one mutex")
	}
	bugWaiting, _ := evidence(f, "waiting_goroutines")
	bugProbes := data.Locks[bug.pid].ProbeCPU
	if f.Where == nil || f.Where.Function != "main.(*store).lookupLocked" || f.Where.Line == 0 {
		t.Errorf("where = %+v, want main.(*store).lookupLocked with a line", f.Where)
	}
	if !slices.ContainsFunc(f.Holder, func(fr Frame) bool { return fr.Function == "main.(*store).lookupLocked" }) {
		t.Errorf("holder stack %+v does not show main.(*store).lookupLocked", f.Holder)
	}
	if !strings.Contains(f.Fix, "Unlock") {
		t.Errorf("fix %q does not say to move the work out of the lock", f.Fix)
	}
	bug.cmd.Process.Kill()

	fixed := startFixture(t, "", nil, fx["mutex"], "-copy")
	findings, data = doctorRun(t, fixed.pid, Options{})
	logFindings(t, "after Unlock", findings)
	logTwin(t, "after Unlock", data, fixed.pid)
	if got := of(findings, fixed.pid); len(got) > 0 {
		t.Errorf("the program rendering after Unlock has findings: %+v", got)
	}
	lw := data.Locks[fixed.pid]
	if lw == nil {
		t.Fatalf("the fixed program's locks were not traced: notes %q", data.Notes)
	}
	var waited time.Duration
	for _, s := range lw.Waits {
		waited += s.Time
	}
	fixedWaiting := waited.Seconds() / lw.Traced.Seconds()
	t.Logf("goroutines waiting: %.3f under the lock, %.5f after Unlock; the probes cost %.4f CPU, %.4f",
		bugWaiting.Value, fixedWaiting, bugProbes, lw.ProbeCPU)
	if fixedWaiting > bugWaiting.Value/10 {
		t.Errorf("%.3f goroutines waiting after Unlock, %.3f before: want a tenth or less", fixedWaiting, bugWaiting.Value)
	}
}

// TestLockContentionThreshold feeds the detector waits below and above
// a quarter of a goroutine on average.
func TestLockContentionThreshold(t *testing.T) {
	where := []Frame{{Function: "internal/sync.(*Mutex).lockSlow"}, {Function: "main.handle", File: "main.go", Line: 20}}
	for _, tc := range []struct {
		waited time.Duration
		want   bool
	}{{2 * time.Second, false}, {3 * time.Second, true}} {
		d := &Data{
			Duration: 10 * time.Second,
			Locks: map[int]*LockWaits{7: {
				Waits: []LockStack{{Calls: 1000, Time: tc.waited, Frames: where}}, Traced: 10 * time.Second,
				Releases: []LockStack{{Calls: 900, Frames: where[1:]}}, ReleasesTraced: 10 * time.Second}},
			Processes: map[int]*Process{7: {PID: 7, Comm: "svc", Go: &GoInfo{Version: "go1.26.0"}}},
		}
		f := byID(Analyze(d), "lock-contention")
		if got := f != nil; got != tc.want {
			t.Errorf("%v waited in 10 s: fired = %v, want %v", tc.waited, got, tc.want)
		}
		if f != nil && (f.Where == nil || f.Where.Function != "main.handle" || len(f.Holder) != 1) {
			t.Errorf("finding %+v: want main.handle as where and the holder's stack", f)
		}
	}
}
