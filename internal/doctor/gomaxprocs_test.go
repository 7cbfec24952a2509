package doctor

import (
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// TestGOMAXPROCSQuota runs the goroutine-heavy fixture in a cgroup limited
// to one CPU: with GOMAXPROCS=8 (the bug), without the override (Go 1.25+
// follows the quota: its minimum, 2) and with GOMAXPROCS=1 (matched: the
// fix). The fix is judged by the CPU each job costs, not the CPU of the
// run: on a busy machine the fixture gets less CPU than its fixed load
// wants and does fewer jobs, whatever its GOMAXPROCS.
func TestGOMAXPROCSQuota(t *testing.T) {
	requireRoot(t)
	fx := buildFixtures(t)
	cg := cpuCgroup(t, 1)

	bug := startFixture(t, cg, []string{"GOMAXPROCS=8"}, fx["gomaxprocs"])
	before := bug.workDone(t)
	findings, _ := doctorRun(t, bug.pid, Options{})
	bugJob := cpuPerJob(t, before, bug.workDone(t))
	logFindings(t, "GOMAXPROCS=8", of(findings, bug.pid))
	f := byID(of(findings, bug.pid), "gomaxprocs-quota")
	if f == nil {
		t.Fatal("gomaxprocs-quota did not fire on GOMAXPROCS=8 in a 1-CPU cgroup")
	}
	if e, _ := evidence(f, "gomaxprocs"); e.Value != 8 {
		t.Errorf("GOMAXPROCS evidence %v, want 8", e.Value)
	}
	if e, _ := evidence(f, "cpu_limit"); e.Value != 1 {
		t.Errorf("CPU limit evidence %v, want 1", e.Value)
	}
	if e, _ := evidence(f, "reason"); !strings.Contains(e.Text, "GOMAXPROCS=8 is set in its environment") {
		t.Errorf("reason %q does not name the environment variable", e.Text)
	}
	for _, name := range []string{"scheduler_gc_share", "context_switches_per_second"} {
		if _, ok := evidence(f, name); !ok {
			t.Errorf("no %s evidence", name)
		}
	}
	bug.cmd.Process.Kill()

	twin := startFixture(t, cg, nil, fx["gomaxprocs"])
	if twin.ready[0] != "2" {
		t.Errorf("without the override the runtime chose GOMAXPROCS %s, want 2 (Go 1.25+: the quota, at least 2)", twin.ready[0])
	}
	findings, data := doctorRun(t, twin.pid, Options{})
	logFindings(t, "default", of(findings, twin.pid))
	logTwin(t, "default", data, twin.pid)
	// Go's own choice is not the user's bug. Its floor of 2 is still above
	// the quota, and the runtime's share of this scheduler-heavy fixture
	// then sits near the go-runtime-overhead threshold, under load or not
	// (41-48% in 10 runs on a quiet machine, 32-45% in 20 under load,
	// bench/twins.sh, idle time not counted): that finding may or may not
	// fire, and is true either way. Nothing else may.
	for _, f := range of(findings, twin.pid) {
		if f.ID != "go-runtime-overhead" {
			t.Errorf("the runtime's default GOMAXPROCS has a %s finding: %s", f.ID, f.Summary)
		}
	}
	twin.cmd.Process.Kill()

	fixed := startFixture(t, cg, []string{"GOMAXPROCS=1"}, fx["gomaxprocs"])
	before = fixed.workDone(t)
	findings, data = doctorRun(t, fixed.pid, Options{})
	fixedJob := cpuPerJob(t, before, fixed.workDone(t))
	logFindings(t, "GOMAXPROCS=1", of(findings, fixed.pid))
	logTwin(t, "GOMAXPROCS=1", data, fixed.pid)
	if got := of(findings, fixed.pid); len(got) > 0 {
		t.Errorf("GOMAXPROCS matched to the quota has findings: %+v", got)
	}
	t.Logf("CPU per job: %s with GOMAXPROCS=8, %s with GOMAXPROCS=1", bugJob, fixedJob)
	// Seven CI runs (2026-11-26) measured drops of 19-44%: the bound is
	// half the smallest, so that it tells a fix from none, not a good run
	// from a worse one.
	if fixedJob > bugJob*9/10 {
		t.Errorf("CPU per job %s with GOMAXPROCS matched, %s with 8: want a drop of at least 10%%", fixedJob, bugJob)
	}
}

// TestReadGOMAXPROCS reads GOMAXPROCS from the memory of plain, stripped,
// PIE and stripped PIE builds, and finds no Go in a C program.
func TestReadGOMAXPROCS(t *testing.T) {
	requireRoot(t)
	fx := buildFixtures(t)
	for _, tc := range []struct{ build, from string }{
		{"gomaxprocs", "symbol"},
		{"gomaxprocs-s", "decoded"},
		{"gomaxprocs-p", "symbol"},
		{"gomaxprocs-ps", "decoded"},
	} {
		t.Run(tc.build, func(t *testing.T) {
			p := startFixture(t, "", []string{"GOMAXPROCS=3"}, fx[tc.build], "-workers", "1")
			g, notes := readGoInfo(p.pid)
			if g == nil {
				t.Fatalf("no Go info; notes %v", notes)
			}
			if g.GOMAXPROCS != 3 || !strings.HasPrefix(g.GOMAXPROCSFrom, tc.from) {
				t.Errorf("GOMAXPROCS %d (%s), want 3 (%s…); notes %v", g.GOMAXPROCS, g.GOMAXPROCSFrom, tc.from, notes)
			}
			if g.Env["GOMAXPROCS"] != "3" || !strings.HasPrefix(g.Version, "go1.") || g.ModulePath != "github.com/flint-dev/flint" {
				t.Errorf("go info %+v", g)
			}
		})
	}
	t.Run("not go", func(t *testing.T) {
		p := startFixture(t, "", nil, fx["busypoll"], "1")
		if g, notes := readGoInfo(p.pid); g != nil || len(notes) > 0 {
			t.Errorf("a C program: got %+v, %v", g, notes)
		}
	})
}

func TestExpectedGOMAXPROCS(t *testing.T) {
	for _, tc := range []struct {
		quota float64
		cpus  int
		want  int
	}{
		{quota: 1, cpus: 2, want: 2},    // Go's floor
		{quota: 0.5, cpus: 64, want: 2}, // floor again
		{quota: 2.5, cpus: 64, want: 3}, // rounded up
		{quota: 8, cpus: 4, want: 4},    // affinity tighter
		{quota: 0, cpus: 6, want: 6},    // no quota
		{quota: 3, cpus: 0, want: 3},    // affinity unknown
	} {
		if got := expectedGOMAXPROCS(&CPULimit{Quota: tc.quota, CPUs: tc.cpus}); got != tc.want {
			t.Errorf("quota %v, %d CPUs: got %d, want %d", tc.quota, tc.cpus, got, tc.want)
		}
	}
}

func TestGOMAXPROCSReason(t *testing.T) {
	limit := &CPULimit{Quota: 2, LeafQuota: 2, CPUs: 16}
	for _, tc := range []struct {
		name string
		go_  GoInfo
		lim  *CPULimit
		want string
	}{
		{"env", GoInfo{Version: "go1.26.0", Env: map[string]string{"GOMAXPROCS": "16"}}, limit, "GOMAXPROCS=16 is set"},
		{"old go", GoInfo{Version: "go1.24.5"}, limit, "ignores the CPU quota (Go 1.25 reads it)"},
		{"go.mod", GoInfo{Version: "go1.25.1", DefaultGODEBUG: "asynctimerchan=1,containermaxprocs=0,updatemaxprocs=0"}, limit, "go.mod says go 1.24 or older"},
		{"godebug env", GoInfo{Version: "go1.26.0", Env: map[string]string{"GODEBUG": "containermaxprocs=0"}}, limit, "GODEBUG=containermaxprocs=0"},
		{"parent cgroup", GoInfo{Version: "go1.26.0"}, &CPULimit{Quota: 2, QuotaCgroup: "/kubepods", CPUs: 16}, "parent cgroup /kubepods"},
		{"automaxprocs", GoInfo{Version: "go1.26.0", Automaxprocs: true}, limit, "automaxprocs"},
		{"call", GoInfo{Version: "go1.26.0"}, limit, "calls runtime.GOMAXPROCS"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := tc.go_
			reason, fix := gomaxprocsReason(&Process{Go: &g, Limit: tc.lim}, 2)
			if !strings.Contains(reason, tc.want) || !strings.Contains(fix, "GOMAXPROCS=2") {
				t.Errorf("reason %q, fix %q; want %q and GOMAXPROCS=2", reason, fix, tc.want)
			}
		})
	}
}

func TestOlderThan(t *testing.T) {
	for v, want := range map[string]bool{
		"go1.24.5": true, "go1.25.0": false, "go1.25rc1": false, "go1.9": true, "go1.26.8": false,
		"go2.0": false, "devel +abc": false, "": false,
	} {
		if got := olderThan(v, 1, 25); got != want {
			t.Errorf("olderThan(%q, 1.25) = %v", v, got)
		}
	}
}

// TestFirstGlobalLoad32 decodes hand-assembled amd64 code shaped like
// runtime.GOMAXPROCS: a stack check, an address taken with LEA (not a
// load), a call, then the 32-bit load of the global.
func TestFirstGlobalLoad32(t *testing.T) {
	code := []byte{
		0x49, 0x3b, 0x66, 0x10, // cmp rsp, [r14+0x10]
		0x48, 0x8d, 0x05, 0x10, 0x00, 0x00, 0x00, // lea rax, [rip+0x10]
		0xe8, 0x00, 0x00, 0x00, 0x00, // call
		0x8b, 0x0d, 0x20, 0x30, 0x00, 0x00, // mov ecx, [rip+0x3020]
		0xc3, // ret
	}
	const pc = 0x401000
	got, ok := firstGlobalLoad32(code, pc)
	if want := uint64(pc + 22 + 0x3020); !ok || got != want {
		t.Errorf("got %#x, %v; want %#x", got, ok, want)
	}
	// Go 1.26: movsxd rcx, dword [rip+0x1b5f14]
	movsxd := slices.Concat(code[:16], []byte{0x48, 0x63, 0x0d, 0x14, 0x5f, 0x1b, 0x00}, []byte{0xc3})
	if got, ok := firstGlobalLoad32(movsxd, pc); !ok || got != pc+23+0x1b5f14 {
		t.Errorf("movsxd: got %#x, %v", got, ok)
	}
	if _, ok := firstGlobalLoad32(code[:16], pc); ok {
		t.Error("found a load in code without one")
	}
	if _, ok := firstGlobalLoad32([]byte{0xc3, 0x8b, 0x0d, 0, 0, 0, 0}, pc); ok {
		t.Error("looked past RET")
	}
}

func TestParseMapping(t *testing.T) {
	m, ok := parseMapping("55d0c9a00000-55d0c9b00000 r-xp 00001000 fd:01 1234567 /usr/bin/app")
	if !ok || m.start != 0x55d0c9a00000 || m.offset != 0x1000 || m.inode != 1234567 || m.major != 0xfd || m.minor != 1 {
		t.Errorf("got %+v, %v", m, ok)
	}
	for _, bad := range []string{"", "x-y r-xp 0 fd:01 1", "1000-2000 r-xp 0 fd:01 0 [anon]", "1000-2000 r-xp zz fd:01 9 /x"} {
		if _, ok := parseMapping(bad); ok {
			t.Errorf("parsed %q", bad)
		}
	}
}

func FuzzParseMapping(f *testing.F) {
	f.Add("55d0c9a00000-55d0c9b00000 r-xp 00001000 fd:01 1234567 /usr/bin/app")
	f.Fuzz(func(t *testing.T, s string) { parseMapping(s) })
}

func TestTrimFloat(t *testing.T) {
	for f, want := range map[float64]string{1: "1", 1.5: "1.5", 0.254: "0.25", 2.999: "3"} {
		if got := trimFloat(f); got != want {
			t.Errorf("trimFloat(%v) = %q, want %q", f, got, want)
		}
	}
}

// TestGoFileRemembersNotGo checks that an executable found not to be Go is
// read once: the agent examines every short-lived process of such a binary.
func TestGoFileRemembersNotGo(t *testing.T) {
	exe, err := exec.LookPath("true")
	if err != nil {
		t.Skip("no true(1) to read")
	}
	open := func() *os.File {
		f, err := os.Open(exe)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		return f
	}
	first := readGoFile(open())
	if first.bi != nil {
		t.Fatalf("%s read as Go %s", exe, first.bi.GoVersion)
	}
	if again := readGoFile(open()); again != first {
		t.Errorf("%s read again, not remembered", exe)
	}
}
