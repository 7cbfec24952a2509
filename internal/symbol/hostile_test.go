package symbol

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/flint-dev/flint/internal/proc"
)

// jitAddr is an address in the anonymous executable mapping of jitProcess,
// named by the perf map entries the tests write.
const jitAddr = 0x7f0000001010

// secretMap is a perf map naming jitAddr with a marker no name may show:
// it stands for a host file (/etc/shadow) a process points flint at.
const secretMap = "7f0000001000 100 SECRET-MARKER\n"

// jitProcess is process pid with JIT code at jitAddr.
func jitProcess(pid int) *proc.Process {
	return &proc.Process{PID: pid, NSPID: pid, Mappings: []proc.Mapping{{Start: 0x7f0000001000, End: 0x7f0000002000}}}
}

// nameJIT names jitAddr in pid's JIT code with a new Symbolizer, within
// the test's deadline: a FIFO must not block it.
func nameJIT(t *testing.T, pid int) (string, Stats) {
	t.Helper()
	s := New()
	defer s.Close()
	done := make(chan string, 1)
	go func() {
		frames, _ := s.User(jitProcess(pid), jitAddr, false)
		done <- frames[0].Function
	}()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	select {
	case name := <-done:
		if strings.Contains(name, "SECRET-MARKER") {
			t.Errorf("a name shows a file outside the process's own: %q", name)
		}
		return name, s.Stats()
	case <-ctx.Done():
		t.Fatal("naming JIT code hangs")
		return "", Stats{}
	}
}

// TestPerfMapHostile names JIT code whose perf map is hostile: a symbolic
// link to a file outside the process's root, a FIFO, a 2 GB file.
func TestPerfMapHostile(t *testing.T) {
	dir := t.TempDir()
	defer func(r string) { proc.Root = r }(proc.Root)
	proc.Root = dir
	secret := filepath.Join(dir, "shadow")
	if err := os.WriteFile(secret, []byte(secretMap), 0o600); err != nil {
		t.Fatal(err)
	}
	huge := func(tmp string, pid int) {
		f, err := os.Create(filepath.Join(tmp, fmt.Sprintf("perf-%d.map", pid)))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		// Sparse: 2 GB on paper, the entries at its end.
		if _, err := f.WriteAt([]byte("\n7f0000001000 100 newest\n"), 2<<30); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name      string
		make      func(tmp string, pid int)
		want      string
		rejected  uint64
		truncated uint64
	}{
		{"regular", func(tmp string, pid int) {
			os.WriteFile(filepath.Join(tmp, fmt.Sprintf("perf-%d.map", pid)), []byte("7f0000001000 100 jitted\n"), 0o644)
		}, "jitted", 0, 0},
		{"symbolic link out of the root", func(tmp string, pid int) {
			os.Symlink(secret, filepath.Join(tmp, fmt.Sprintf("perf-%d.map", pid)))
		}, "[anon]+0x10", 1, 0},
		{"FIFO", func(tmp string, pid int) {
			unix.Mkfifo(filepath.Join(tmp, fmt.Sprintf("perf-%d.map", pid)), 0o644)
		}, "[anon]+0x10", 1, 0},
		{"2 GB", huge, "newest", 0, 1},
		{"none", func(string, int) {}, "[anon]+0x10", 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pid := 4242
			tmp := filepath.Join(dir, fmt.Sprint(pid), "root", "tmp")
			os.RemoveAll(filepath.Dir(tmp))
			if err := os.MkdirAll(tmp, 0o755); err != nil {
				t.Fatal(err)
			}
			tc.make(tmp, pid)
			var before runtime.MemStats
			runtime.ReadMemStats(&before)
			name, st := nameJIT(t, pid)
			var after runtime.MemStats
			runtime.ReadMemStats(&after)
			if name != tc.want {
				t.Errorf("named %q, want %q", name, tc.want)
			}
			if st.PerfMapsRejected != tc.rejected || st.PerfMapsTruncated != tc.truncated {
				t.Errorf("%d perf maps rejected, %d truncated; want %d, %d", st.PerfMapsRejected, st.PerfMapsTruncated, tc.rejected, tc.truncated)
			}
			// Bounded: what naming allocated, whatever the file's size.
			if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 2*maxPerfMap {
				t.Errorf("naming allocated %d MB", alloc>>20)
			}
		})
	}
}

// TestPerfMapOtherMountNamespace reads JIT maps of processes in their own
// mount namespace, with their own /tmp: one regular, found there and not
// in the host's /tmp; one a symbolic link to a host file, not followed.
func TestPerfMapOtherMountNamespace(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to create a mount namespace (unshare -m)")
	}
	secret := filepath.Join(t.TempDir(), "shadow")
	if err := os.WriteFile(secret, []byte(secretMap), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, script, want string
		rejected           uint64
	}{
		{"regular", `echo '7f0000001000 100 inside' > /tmp/perf-$$.map`, "inside", 0},
		{"symbolic link to the host", `ln -s ` + secret + ` /tmp/perf-$$.map`, "[anon]+0x10", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, "unshare", "-m", "--propagation", "private", "sh", "-c",
				`mount -t tmpfs none /tmp && `+tc.script+` && echo ready && exec sleep 60`)
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Skipf("unshare: %v", err)
			}
			defer func() { cmd.Process.Kill(); cmd.Wait() }()
			if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "ready\n" {
				t.Fatalf("namespace set-up: %q, %v", line, err)
			}
			pid := cmd.Process.Pid
			if _, err := os.Stat(fmt.Sprintf("/tmp/perf-%d.map", pid)); err == nil {
				t.Fatalf("the map is in the host's /tmp too: the namespace is not private")
			}
			name, st := nameJIT(t, pid)
			if name != tc.want || st.PerfMapsRejected != tc.rejected {
				t.Errorf("named %q with %d maps rejected, want %q and %d", name, st.PerfMapsRejected, tc.want, tc.rejected)
			}
		})
	}
}

// mapperEnv makes the test binary a process that maps many files
// executable (TestHelperMapper) instead of running tests.
const mapperEnv = "FLINT_TEST_MAP_FILES"

// TestHelperMapper is not a test: run with mapperEnv set to a directory,
// it maps every file in it executable, says "ready" and waits for its
// standard input to close.
func TestHelperMapper(t *testing.T) {
	dir := os.Getenv(mapperEnv)
	if dir == "" {
		t.Skip("a helper process, not a test")
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		f, err := os.Open(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		fi, err := f.Stat()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := unix.Mmap(int(f.Fd()), 0, int(fi.Size()), unix.PROT_READ|unix.PROT_EXEC, unix.MAP_PRIVATE); err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	fmt.Println("ready")
	bufio.NewReader(os.Stdin).ReadString('\n')
	os.Exit(0)
}

// startMapper starts TestHelperMapper on the files in dir and returns its
// snapshot once they are mapped; it ends with the test.
func startMapper(t *testing.T, dir string) *proc.Process {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestHelperMapper$")
	cmd.Env = append(os.Environ(), mapperEnv+"="+dir)
	stdin, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stdin.Close(); cmd.Wait(); cancel() })
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "ready\n" {
		t.Fatalf("mapper: %q, %v", line, err)
	}
	p, err := proc.Read(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestBinaryChangedWhileMapped names addresses in a binary a process maps
// while the file is truncated, or rewritten with other bytes: flint does
// not crash, names what it still can, and never names from the new bytes
// as if they were the old binary's.
func TestBinaryChangedWhileMapped(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	self, err := proc.Read(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	// Two of this binary's functions, as file offsets.
	var text *proc.Mapping
	for i := range self.Mappings {
		if self.Mappings[i].Path == exe {
			text = &self.Mappings[i]
		}
	}
	if text == nil {
		t.Fatalf("no executable mapping of %s", exe)
	}
	pc, want := ownPC()
	first := pc - text.Start + text.Offset
	second := uint64(reflect.ValueOf(TestLearnManyFiles).Pointer()) - text.Start + text.Offset
	b, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		change func(path string) error
	}{
		{"truncated", func(path string) error { return os.Truncate(path, 4096) }},
		{"rewritten", func(path string) error {
			junk := make([]byte, len(b))
			for i := range junk {
				junk[i] = byte(i * 7)
			}
			f, err := os.OpenFile(path, os.O_WRONLY, 0)
			if err != nil {
				return err
			}
			defer f.Close()
			_, err = f.WriteAt(junk, 0)
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "copy")
			if err := os.WriteFile(path, b, 0o755); err != nil {
				t.Fatal(err)
			}
			p := startMapper(t, dir)
			m := &p.Mappings[len(p.Mappings)-1]
			for i := range p.Mappings {
				if p.Mappings[i].Path == path {
					m = &p.Mappings[i]
				}
			}
			if m.Path != path {
				t.Fatalf("the mapper does not map %s: %+v", path, p.Mappings)
			}
			s := New()
			defer s.Close()
			s.Learn(p)
			frames, _ := s.User(p, m.Start+first-m.Offset, false)
			if frames[len(frames)-1].Function != want {
				t.Fatalf("before the change: named %+v, want %s", frames, want)
			}
			if err := tc.change(path); err != nil {
				t.Fatal(err)
			}
			frames, _ = s.User(p, m.Start+second-m.Offset, false)
			if len(frames) == 0 {
				t.Error("no frames after the change")
			}
			// A fresh start parses the changed file.
			fresh := New()
			defer fresh.Close()
			fresh.Learn(p)
			frames, _ = fresh.User(p, m.Start+first-m.Offset, false)
			if f := frames[0].Function; f != "copy+0x"+strconv.FormatUint(first, 16) {
				t.Errorf("named %q in the changed file, want its offset", f)
			}
		})
	}
}

// TestLearnManyFiles learns a process that maps 10,000 files: flint holds
// at most maxLearn of them open, counts the rest, and still names an
// address in one it did not hold while the process runs.
func TestLearnManyFiles(t *testing.T) {
	const files = 10000
	dir := t.TempDir()
	page := make([]byte, 4096)
	for i := range files {
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("lib%05d.so", i)), page, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	p := startMapper(t, dir)
	var last *proc.Mapping
	for i := range p.Mappings {
		if strings.HasPrefix(filepath.Base(p.Mappings[i].Path), "lib") {
			last = &p.Mappings[i]
		}
	}
	if last == nil || len(p.Mappings) < files {
		t.Fatalf("%d executable mappings, want over %d", len(p.Mappings), files)
	}
	fds := func() int { e, _ := os.ReadDir("/proc/self/fd"); return len(e) }
	s := New()
	defer s.Close()
	before := fds()
	s.Learn(p)
	if held := fds() - before; held > maxLearn {
		t.Errorf("%d files held open, want at most %d", held, maxLearn)
	}
	if st := s.Stats(); st.FilesNotHeld < files-maxLearn {
		t.Errorf("%d files counted not held, want at least %d", st.FilesNotHeld, files-maxLearn)
	}
	frames, m := s.User(p, last.Start+0x10, false)
	if m != last || !strings.HasPrefix(frames[0].Function, filepath.Base(last.Path)+"+0x") {
		t.Errorf("an address in %s named %+v in %+v", last.Path, frames, m)
	}
}
