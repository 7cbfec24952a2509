package collect

import (
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/flint-dev/flint/internal/fixture"
	"github.com/flint-dev/flint/internal/proc"
	"github.com/flint-dev/flint/internal/profile"
	"github.com/flint-dev/flint/internal/python"
	"github.com/flint-dev/flint/internal/sampler"
	"github.com/flint-dev/flint/internal/symbol"
)

// TestPythonNames names the Python frames of two processes of one
// interpreter, the second found and read with what the first left: each
// frame is its code object's function, file and first line as CPython has
// them, and a frame of both processes is one location, in the profile as
// in the store.
func TestPythonNames(t *testing.T) {
	for _, py := range []string{"/root/.pyenv/versions/3.12.1/bin/python3.12", "/usr/bin/python3.11"} {
		t.Run(filepath.Base(py), func(t *testing.T) {
			sym := symbol.New()
			defer sym.Close()
			c := New(sym, "")
			c.SetPython(nopPython{})
			var samples []sampler.Sample
			var codes [][]fixture.PythonCode
			for i := range uint32(2) {
				pid, cs := fixture.PythonCodes(t, py)
				c.NewProc(uint32(pid), i+1)
				var stack []uint64
				for _, code := range cs {
					stack = append(stack, frameWord(code.Addr, 0))
				}
				samples = append(samples, sampler.Sample{PID: uint32(pid), TID: uint32(pid), Generation: i + 1, Comm: "python", Thread: "python", User: stack, Count: 1})
				codes = append(codes, cs)
			}
			c.ReadPython(samples)
			p := c.Profile(samples, Options{})
			if len(p.Samples) != 2 {
				t.Fatalf("%d samples, want 2", len(p.Samples))
			}
			for i, s := range p.Samples {
				if len(s.Stack) != len(codes[i]) {
					t.Fatalf("process %d: %d frames, want %d", i, len(s.Stack), len(codes[i]))
				}
				for j, l := range s.Stack {
					code := codes[i][j]
					want := code.Name
					if m := python.Module(code.File); m != "" {
						want = m + "." + code.Name
					}
					if f := l.Frames[0]; f.Function != want || f.File != code.File || f.StartLine != code.FirstLine {
						t.Errorf("process %d: %#x named %+v, want %s at %s from line %d", i, code.Addr, f, want, code.File, code.FirstLine)
					}
					if l != p.Samples[0].Stack[j] {
						t.Errorf("process %d: %s is another location than in process 0", i, want)
					}
				}
			}
		})
	}
}

// TestRecordQuietPython records the whole node while a second process of
// a CPython interpreter starts after the first was learned: the kernel
// announces it without waking flint, lists its interpreter from what the
// first taught, and its Python frames are named as the first's (at least
// 95% of its samples in the fixture's functions). It is held stopped until
// then, so that its first sample is in its own code and it is listed.
func TestRecordQuietPython(t *testing.T) {
	requireRoot(t)
	if !sampler.ListsNewProcesses() {
		t.Skip("this kernel has no BPF task works (Linux 6.18): no process is announced quietly")
	}
	const py = "/usr/bin/python3.11"
	first := fixture.Python(t, py, fixture.PythonOptions{})
	second := fixture.Python(t, py, fixture.PythonOptions{})
	if err := syscall.Kill(second, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	reports := 0
	res := record(t, RecordOptions{}, func(Progress) bool {
		if reports++; reports == 2 { // the first fixture learned
			if err := syscall.Kill(second, syscall.SIGCONT); err != nil {
				t.Fatal(err)
			}
		}
		return reports == 2+int(testCPU/time.Second)
	})
	if res.Stats.ProcsQuiet == 0 {
		t.Errorf("no process was announced quietly: %+v", res.Stats)
	}
	for _, pid := range []int{first, second} {
		var named, total int64
		for _, s := range res.Profile.Samples {
			if !byPID(pid)(s) {
				continue
			}
			total += s.Count
			if slices.ContainsFunc(s.Stack, func(l *profile.Location) bool {
				return strings.HasPrefix(l.Frames[0].Function, "busy.hot_")
			}) {
				named += s.Count
			}
		}
		share := 100 * float64(named) / float64(max(total, 1))
		t.Logf("pid %d: %d samples, %.1f%% in busy.hot_*", pid, total, share)
		if total == 0 || share < 95 {
			t.Errorf("pid %d: %.1f%% of %d samples in the fixture's Python functions, want ≥ 95%%", pid, share, total)
		}
	}
}

// TestPythonLibraryMappedLater learns a CPython process from a snapshot
// without its libpython, as one read at a first sample that came while
// the loader mapped its libraries: no interpreter then. Read again (its
// listing stale, or the kernel's relisting), the process has the kernel
// told to read its Python frames, once.
func TestPythonLibraryMappedLater(t *testing.T) {
	const py = "/root/.pyenv/versions/3.12.1/bin/python3.12"
	isLibpython := func(m proc.Mapping) bool { return strings.HasPrefix(filepath.Base(m.Path), "libpython") }
	for _, again := range []string{"stale", "relisted"} {
		t.Run(again, func(t *testing.T) {
			pid := fixture.Python(t, py, fixture.PythonOptions{})
			sym := symbol.New()
			defer sym.Close()
			c := New(sym, "")
			k := &pythonsTold{}
			c.SetPython(k)
			np := sampler.NewProc{PID: uint32(pid), Generation: 1}
			c.learn(np, func() (*proc.Process, error) {
				p, err := proc.Read(pid)
				if err != nil {
					return nil, err
				}
				if !slices.ContainsFunc(p.Mappings, isLibpython) {
					t.Skipf("%s maps no libpython (built without --enable-shared)", py)
				}
				p.Mappings = slices.DeleteFunc(p.Mappings, isLibpython)
				return p, nil
			})
			if len(k.told) != 0 {
				t.Fatalf("kernel told of %v before libpython was mapped", k.told)
			}
			switch again {
			case "stale":
				c.Refresh(np.PID, np.Generation)
			case "relisted":
				c.Announced(sampler.NewProc{PID: np.PID, Generation: np.Generation, Relisted: true})
			}
			c.Refresh(np.PID, np.Generation) // found already: not told again
			if !slices.Equal(k.told, []uint32{np.PID}) {
				t.Fatalf("kernel told of %v, want [%d] once", k.told, pid)
			}
		})
	}
}

// pythonsTold is a PythonKernel that keeps the PIDs it is told of.
type pythonsTold struct{ told []uint32 }

func (k *pythonsTold) SetPython(pid, _ uint32, _ *python.Interpreter) error {
	k.told = append(k.told, pid)
	return nil
}

func (*pythonsTold) DeletePython(uint32, bool) error { return nil }
