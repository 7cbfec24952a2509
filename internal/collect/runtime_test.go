package collect

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/flint-dev/flint/internal/proc"
	"github.com/flint-dev/flint/internal/profile"
	"github.com/flint-dev/flint/internal/sampler"
	"github.com/flint-dev/flint/internal/symbol"
)

// startMapping starts a command, killed when the test ends, and waits until
// it maps a file whose base name starts with prefix (its runtime is loaded).
func startMapping(t *testing.T, prefix string, name string, args ...string) int {
	t.Helper()
	path, err := exec.LookPath(name)
	if err != nil {
		t.Skipf("%s is not installed", name)
	}
	cmd := exec.Command(path, args...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if p, err := proc.Read(cmd.Process.Pid); err == nil {
			for _, m := range p.Mappings {
				if strings.HasPrefix(filepath.Base(m.Path), prefix) {
					return cmd.Process.Pid
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not map %s* in 30 s", name, prefix)
		}
	}
}

// TestRuntimeLabel checks the runtime label of real processes: this test
// (Go), sleep (native), Python, a JVM and Node.js, those installed.
func TestRuntimeLabel(t *testing.T) {
	javaSource := filepath.Join(t.TempDir(), "Sleep.java")
	if err := os.WriteFile(javaSource, []byte("class Sleep { public static void main(String[] a) throws Exception { Thread.sleep(60000); } }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	goRelease := runtime.Version()
	if parts := strings.SplitN(goRelease, ".", 3); len(parts) == 3 {
		goRelease = parts[0] + "." + parts[1]
	}
	for _, tc := range []struct {
		name  string
		start func(t *testing.T) int
		want  string
	}{
		{"go", func(*testing.T) int { return os.Getpid() }, goRelease},
		{"native", func(t *testing.T) int { return startMapping(t, "sleep", "sleep", "60") }, "native"},
		{"debian python", func(t *testing.T) int {
			return startMapping(t, "python3.11", "/usr/bin/python3.11", "-c", "import time; time.sleep(60)")
		}, "python3.11"},
		{"jvm", func(t *testing.T) int { return startMapping(t, "libjvm.so", "java", "-Xshare:off", javaSource) }, "jvm"},
		{"node", func(t *testing.T) int { return startMapping(t, "node", "node", "-e", "setTimeout(() => {}, 60000)") }, "node"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pid := uint32(tc.start(t))
			sym := symbol.New()
			defer sym.Close()
			c := New(sym, "")
			c.NewProc(pid, 1)
			p := c.Profile([]sampler.Sample{{PID: pid, TID: pid, Generation: 1, Comm: "x", Thread: "x", Count: 1}}, Options{})
			if got := p.Samples[0].Labels[profile.LabelRuntime]; got != tc.want {
				t.Errorf("runtime %q, want %q", got, tc.want)
			}
		})
	}
}

// TestJVMLibraryMappedLater checks that a JVM first read before its loader
// mapped libjvm.so (its first sample at exec) has its JIT map asked for at
// its first sample in JIT code, where its mappings are read again. The
// JVM: a python3 mapping anonymous code and a library of that name.
func TestJVMLibraryMappedLater(t *testing.T) {
	dir := t.TempDir()
	lib, ready := filepath.Join(dir, jvmLibrary), filepath.Join(dir, "ready")
	script := `import ctypes, mmap, shutil, sys, time
code = mmap.mmap(-1, 4096, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS,
                 prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
shutil.copy(next(l.split()[-1] for l in open("/proc/self/maps") if "/libm.so" in l), sys.argv[1])
ctypes.CDLL(sys.argv[1])
open(sys.argv[2], "w").close()
time.sleep(60)`
	pid := startMapping(t, jvmLibrary, "python3", "-c", script, lib, ready)
	// Its maps read while the loader still changes them may lack a
	// mapping: read them once it is done.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, err := os.Stat(ready); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the library not loaded after 10 s")
		}
	}
	isCode := func(m proc.Mapping) bool { return m.Path == "" && m.Inode == 0 }
	p, err := proc.Read(pid)
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(p.Mappings, isCode)
	if i < 0 {
		t.Fatalf("no anonymous code mapped: %+v", p.Mappings)
	}
	code := p.Mappings[i].Start
	// As read at exec: neither the library nor the code there yet.
	p.Mappings = slices.DeleteFunc(p.Mappings, func(m proc.Mapping) bool { return isCode(m) || filepath.Base(m.Path) == jvmLibrary })
	sym := symbol.New()
	defer sym.Close()
	c := New(sym, "")
	var asked []int
	c.SetJIT(func(pid int) { asked = append(asked, pid) })
	c.learn(sampler.NewProc{PID: uint32(pid), Generation: 1}, func() (*proc.Process, error) { return p, nil })
	if len(asked) != 0 {
		t.Fatalf("JIT map asked for %v before libjvm.so was mapped", asked)
	}
	c.Profile([]sampler.Sample{{PID: uint32(pid), TID: uint32(pid), Generation: 1, Comm: "java", Thread: "java", User: []uint64{code + 16}, Count: 1}}, Options{})
	if !slices.Equal(asked, []int{pid}) {
		t.Errorf("JIT map asked for %v at the first sample in JIT code, want [%d]", asked, pid)
	}
}

func TestGoRelease(t *testing.T) {
	for v, want := range map[string]string{"go1.26.0": "go1.26", "go1.21.13": "go1.21", "devel go1.27-abc": "devel go1.27-abc", "go1.26": "go1.26"} {
		if got := goRelease(v); got != want {
			t.Errorf("goRelease(%q) = %q, want %q", v, got, want)
		}
	}
}
