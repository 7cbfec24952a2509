package doctor

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestIdle examines idle processes, one by one and with the whole machine:
// a C epoll server blocked in epoll_wait, a Go HTTP server nobody calls.
// The machine is shared with other tests, so only findings about these
// processes (and this test) count.
func TestIdle(t *testing.T) {
	requireRoot(t)
	fx := buildFixtures(t)
	c := startFixture(t, "", nil, fx["busypoll"], "-1")
	g := startFixture(t, "", nil, fx["debugprint"])
	mine := []int{c.pid, g.pid, os.Getpid()}
	for _, pid := range mine[:2] {
		findings, _ := doctorRun(t, pid, Options{})
		if got := of(findings, pid); len(got) > 0 {
			t.Errorf("idle pid %d has findings: %+v", pid, got)
		}
	}
	findings, data := doctorRun(t, 0, Options{})
	logFindings(t, "every process", findings)
	for _, f := range findings {
		if slices.Contains(mine, f.PID) {
			t.Errorf("idle process %d: %s", f.PID, f.Summary)
		}
	}
	if data.Processes[g.pid] != nil {
		t.Errorf("facts read for idle pid %d: -a reads only active processes", g.pid)
	}
}

// TestProcessExits kills the examined process in the middle of the run.
func TestProcessExits(t *testing.T) {
	requireRoot(t)
	fx := buildFixtures(t)
	p := startFixture(t, "", nil, fx["busypoll"], "0")
	time.AfterFunc(time.Second, func() { p.cmd.Process.Kill() })
	findings, data := doctorRun(t, p.pid, Options{})
	logFindings(t, "exits", findings)
	notes := strings.Join(data.Notes, "\n")
	for _, want := range []string{"exited during the recording", "is not a Go program"} {
		if !strings.Contains(notes, want) {
			t.Errorf("notes %q lack %q", notes, want)
		}
	}
	// What it did before exiting was measured.
	if data.Syscalls == nil || len(data.Syscalls.Calls) == 0 {
		t.Error("no calls counted before the exit")
	}
}

// TestNoPermission reads a root Go process's facts as an unprivileged user:
// notes say what could not be read and why, and nothing fails.
func TestNoPermission(t *testing.T) {
	requireRoot(t)
	fx := buildFixtures(t)
	g := startFixture(t, "", nil, fx["gomaxprocs"], "-workers", "1")

	// The test binary, where user nobody can run it.
	dir, err := os.MkdirTemp("", "flint-doctor-nobody-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	os.Chmod(dir, 0o755)
	bin := filepath.Join(dir, "doctor.test")
	self, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, self, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-test.run=^TestHelperReadProcess$", "-test.v")
	cmd.Env = append(os.Environ(), "FLINT_DOCTOR_HELPER_PID="+strconv.Itoa(g.pid))
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("helper: %v\n%s", err, out)
	}
	var p Process
	line := string(out)
	i := strings.Index(line, "FACTS ")
	if i < 0 {
		t.Fatalf("helper said %s", out)
	}
	if err := json.Unmarshal([]byte(strings.SplitN(line[i+6:], "\n", 2)[0]), &p); err != nil {
		t.Fatal(err)
	}
	notes := strings.Join(p.Notes, "\n")
	t.Logf("notes as nobody:\n%s", notes)
	if p.Go != nil || !strings.Contains(notes, "permission denied") || !strings.Contains(notes, "CAP_SYS_PTRACE") {
		t.Errorf("facts %+v: want no Go facts and a note on the permission needed", p)
	}
}

// TestHelperReadProcess is TestNoPermission's unprivileged half.
func TestHelperReadProcess(t *testing.T) {
	pid, _ := strconv.Atoi(os.Getenv("FLINT_DOCTOR_HELPER_PID"))
	if pid == 0 {
		t.Skip("run by TestNoPermission")
	}
	p, err := readProcess(pid)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(p)
	t.Logf("FACTS %s", b)
}

func TestRunRejectsBadPID(t *testing.T) {
	requireRoot(t)
	if _, _, err := Run(t.Context(), Options{PID: 1 << 30, Duration: time.Second}); err == nil || !strings.Contains(err.Error(), "no such process") {
		t.Errorf("err = %v, want no such process", err)
	}
	if _, _, err := Run(t.Context(), Options{EverySyscall: true}); err == nil {
		t.Error("tracing every syscall of every process was accepted")
	}
}

// TestFindingsOrder checks that findings come worst first.
func TestFindingsOrder(t *testing.T) {
	fs := []Finding{{ID: "a", Severity: Info, Cost: 0.9}, {ID: "b", Severity: Critical, Cost: 0.6}, {ID: "c", Severity: Critical, Cost: 2}, {ID: "d", Severity: Warning}}
	slices.SortStableFunc(fs, Worse)
	var ids []string
	for _, f := range fs {
		ids = append(ids, f.ID)
	}
	if got := strings.Join(ids, ""); got != "cbda" {
		t.Errorf("order %s, want cbda", got)
	}
}

func TestSeverity(t *testing.T) {
	for _, tc := range []struct {
		cost, share float64
		want        Severity
	}{{0.6, 0, Critical}, {0.2, 0, Warning}, {0.01, 0.5, Warning}, {0.01, 0.1, Info}} {
		if got := severityOf(tc.cost, tc.share); got != tc.want {
			t.Errorf("severityOf(%v, %v) = %s, want %s", tc.cost, tc.share, got, tc.want)
		}
	}
}

func TestOwnFrame(t *testing.T) {
	goProc := &Process{PID: 1, Exe: "/bin/svc", Go: &GoInfo{ModulePath: "example.com/svc"}}
	cProc := &Process{PID: 1, Exe: "/bin/server"}
	for _, tc := range []struct {
		name  string
		stack []Frame
		p     *Process
		want  string
	}{
		{"main package", []Frame{{Function: "fmt.Println"}, {Function: "main.handle"}}, goProc, "main.handle"},
		{"module package", []Frame{{Function: "net/http.(*conn).serve"}, {Function: "example.com/svc/internal/api.(*S).Get"}}, goProc, "example.com/svc/internal/api.(*S).Get"},
		{"dependency is not own", []Frame{{Function: "github.com/lib/pq.(*conn).recv"}, {Function: "example.com/svc.run"}}, goProc, "example.com/svc.run"},
		{"kernel is not own", []Frame{{Function: "main.x", Kernel: true}, {Function: "main.y"}}, goProc, "main.y"},
		{"C executable", []Frame{{Function: "epoll_wait", Module: "/lib/libc.so.6"}, {Function: "serve_loop", Module: "/bin/server"}}, cProc, "serve_loop"},
		{"none", []Frame{{Function: "runtime.goexit"}}, goProc, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, _ := ownFrame(tc.stack, tc.p)
			if f.Function != tc.want {
				t.Errorf("got %q, want %q", f.Function, tc.want)
			}
		})
	}
}

func TestGoPackage(t *testing.T) {
	for fn, want := range map[string]string{
		"main.main": "main", "net/http.(*conn).serve": "net/http", "github.com/a/b.F": "github.com/a/b",
		"github.com/a/b.(*T).M.func1": "github.com/a/b", "runtime.mallocgc": "runtime", "nodot": "",
	} {
		if got := goPackage(fn); got != want {
			t.Errorf("goPackage(%q) = %q, want %q", fn, got, want)
		}
	}
}
