package trace

import (
	"errors"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
)

func TestGlob(t *testing.T) {
	for _, tc := range []struct {
		pat, name string
		want      bool
	}{
		{"main.*", "main.main", true},
		{"main.*", "main.(*Server).handle", true},
		{"main.*", "mainx.f", false},
		{"*", "", true},
		{"database/sql.*Query*", "database/sql.(*DB).QueryContext", true},
		{"github.com/*/x.F", "github.com/a/b/x.F", true},
		{"time.No?", "time.Now", true},
		{"time.No?", "time.Nowx", false},
		{"a*b*c", "aXbYbZc", true},
		{"a*b*c", "aXbYbZ", false},
		{"main.Map[go.shape.int]", "main.Map[go.shape.int]", true},
	} {
		if got := glob(tc.pat, tc.name); got != tc.want {
			t.Errorf("glob(%q, %q) = %v, want %v", tc.pat, tc.name, got, tc.want)
		}
	}
}

func TestStripInstance(t *testing.T) {
	for in, want := range map[string]string{
		"main.Map[go.shape.int]":                  "main.Map",
		"main.(*T[go.shape.string]).M":            "main.(*T).M",
		"main.F[go.shape.[]int,go.shape.map[a]b]": "main.F",
		"time.Now": "time.Now",
	} {
		if got := stripInstance(in); got != want {
			t.Errorf("stripInstance(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestSuggest(t *testing.T) {
	names := []string{"main.handle", "main.(*Server).handle", "main.main", "time.Now", "time.now", "runtime.nanotime", "malloc", "calloc"}
	for _, tc := range []struct {
		pat  string
		want []string // a prefix of the suggestions
	}{
		{"main.handel", []string{"main.handle"}},
		{"time.NOW", []string{"time.Now", "time.now"}},
		{"handle", []string{"main.handle", "main.(*Server).handle"}},
		{"mallocc", []string{"malloc", "calloc"}},
	} {
		got := suggest(tc.pat, names, 5)
		if len(got) < len(tc.want) || !slices.Equal(got[:len(tc.want)], tc.want) {
			t.Errorf("suggest(%q) = %q, want it to start with %q", tc.pat, got, tc.want)
		}
	}
	if got := suggest("zzzzzzzz", names, 5); len(got) != 0 {
		t.Errorf("suggest(zzzzzzzz) = %q, want nothing", got)
	}
}

func TestScanCode(t *testing.T) {
	const base = 0x1000
	morestack := uint64(0x2000)
	code := []byte{
		0x49, 0x3b, 0x66, 0x10, // CMPQ SP, 16(R14)
		0x76, 0x09, // JBE +9 -> 0x100f
		0x55,             // PUSHQ BP
		0x48, 0x89, 0xe5, // MOVQ SP, BP
		0x5d,                         // POPQ BP
		0xc3,                         // RET            at 0x100b
		0x90,                         // NOP
		0x5d,                         // POPQ BP
		0xc3,                         // RET            at 0x100e
		0xe8, 0xec, 0x0f, 0x00, 0x00, // CALL 0x2000 (morestack) at 0x100f
		0xeb, 0xea, // JMP base
		0xcc, 0xcc, // INT3 padding
	}
	rets, growth, err := scanCode(code, base, []uint64{morestack})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(rets, []uint64{0x100b, 0x100e}) {
		t.Errorf("rets = %#x, want [0x100b 0x100e]", rets)
	}
	if !slices.Equal(growth, []uint64{0x100f}) {
		t.Errorf("morestack calls = %#x, want [0x100f]", growth)
	}
	for _, bad := range [][]byte{{0xc3, 0x06}, {0xc3, 0xe8, 0x00}} {
		if _, _, err := scanCode(bad, base, nil); err == nil {
			t.Errorf("% x: no error", bad)
		}
	}
}

func TestEmulated(t *testing.T) {
	for _, tc := range []struct {
		name string
		code []byte
		want bool
	}{
		{"push rbp", []byte{0x55, 0x48, 0x89, 0xe5}, true},
		{"push r12", []byte{0x41, 0x54}, true},
		{"call rel32", []byte{0xe8, 0, 0, 0, 0}, true},
		{"jne rel8", []byte{0x75, 0x02}, true},
		{"nop", []byte{0x90}, true},
		{"go stack check", []byte{0x49, 0x3b, 0x66, 0x10}, false},
		{"lea", []byte{0x8d, 0x04, 0x7f}, false},
		{"ret", []byte{0xc3}, false},
		{"endbr64", []byte{0xf3, 0x0f, 0x1e, 0xfa}, false},
		{"garbage", []byte{0x0f, 0xff}, false},
	} {
		if got := emulated(tc.code); got != tc.want {
			t.Errorf("%s: emulated = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func FuzzScanCode(f *testing.F) {
	f.Add([]byte{0x55, 0x48, 0x89, 0xe5, 0x5d, 0xc3, 0xcc})
	f.Add([]byte{0xe8, 0xec, 0x0f, 0x00, 0x00, 0xc3})
	f.Fuzz(func(t *testing.T, code []byte) {
		rets, growth, err := scanCode(code, 0x1000, []uint64{0x2000})
		if err != nil {
			return
		}
		for _, a := range append(rets, growth...) {
			if a < 0x1000 || a >= 0x1000+uint64(len(code)) {
				t.Fatalf("probe address %#x outside the code", a)
			}
		}
		emulated(code)
	})
}

func TestParseTimes(t *testing.T) {
	line := "4242 (a b) c) S 1 4242 4242 0 -1 4194304 100 0 0 0 150 50 0 0 20 0 3 0 98765 1000 10 18446744073709551615\n"
	pt, err := parseTimes([]byte(line))
	if err != nil {
		t.Fatal(err)
	}
	if pt.cpu != 2.0 || pt.start != 98765 {
		t.Errorf("parseTimes = %+v, want cpu 2.0 s, start 98765", pt)
	}
	for _, bad := range []string{"", "1 (x", "1 (x) S 1 2"} {
		if _, err := parseTimes([]byte(bad)); err == nil {
			t.Errorf("parseTimes(%q) gave no error", bad)
		}
	}
}

// fixtures are the test programs, built once per test binary.
var fixtures struct {
	once sync.Once
	dir  string
	bins map[string]string
	err  error
}

// fixture returns the path of a test program: go, go-stripped, go-pie
// (testdata/fixtures/trace-go) or c (testdata/fixtures/trace-c.c).
func fixture(t *testing.T, name string) string {
	t.Helper()
	fixtures.once.Do(func() {
		fixtures.dir, fixtures.err = os.MkdirTemp("", "flint-trace-fixtures")
		if fixtures.err != nil {
			return
		}
		src := "../../testdata/fixtures"
		fixtures.bins = map[string]string{}
		for name, argv := range map[string][]string{
			"go":          {"go", "build", "-o", "OUT", src + "/trace-go"},
			"go-stripped": {"go", "build", "-ldflags=-s -w", "-o", "OUT", src + "/trace-go"},
			"go-pie":      {"go", "build", "-buildmode=pie", "-o", "OUT", src + "/trace-go"},
			"c":           {"gcc", "-O1", "-fno-omit-frame-pointer", "-o", "OUT", src + "/trace-c.c"},
		} {
			out := filepath.Join(fixtures.dir, "trace-"+name)
			argv[slices.Index(argv, "OUT")] = out
			if b, err := exec.Command(argv[0], argv[1:]...).CombinedOutput(); err != nil {
				if argv[0] == "gcc" {
					continue // tests that need it skip
				}
				fixtures.err = errors.New(strings.Join(argv, " ") + ": " + err.Error() + "\n" + string(b))
				return
			}
			fixtures.bins[name] = out
		}
	})
	if fixtures.err != nil {
		t.Fatal(fixtures.err)
	}
	bin, ok := fixtures.bins[name]
	if !ok {
		t.Skip("needs gcc to build the C fixture (make deps installs it)")
	}
	return bin
}

func TestMain(m *testing.M) {
	code := m.Run()
	if fixtures.dir != "" {
		os.RemoveAll(fixtures.dir)
	}
	os.Exit(code)
}

func TestResolveGo(t *testing.T) {
	for _, variant := range []string{"go", "go-stripped", "go-pie"} {
		t.Run(variant, func(t *testing.T) {
			bin := fixture(t, variant)
			fns, err := Resolve(Target{Exe: bin}, []string{"time.Now", "main.grow", "main.w*"})
			if err != nil {
				t.Fatal(err)
			}
			names := map[string]Function{}
			for _, f := range fns {
				names[f.Name] = f
			}
			for _, want := range []string{"time.Now", "main.grow", "main.work"} {
				if _, ok := names[want]; !ok {
					t.Errorf("resolved %v, want %s among them", slices.Collect(maps.Keys(names)), want)
				}
			}
			data, err := os.ReadFile(bin)
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range fns {
				if f.Lang != Go || f.NoLatency != "" || len(f.Entries) != 1 || len(f.Returns) == 0 {
					t.Errorf("%s: %+v: want a Go function with one entry and RET probes", f.Name, f)
				}
				for _, off := range f.Returns {
					if data[off] != 0xc3 {
						t.Errorf("%s: return probe at file offset %#x is on byte %#x, not RET", f.Name, off, data[off])
					}
				}
				for _, off := range f.StackGrowth {
					if data[off] != 0xe8 {
						t.Errorf("%s: stack growth probe at %#x is on byte %#x, not CALL", f.Name, off, data[off])
					}
				}
			}
			if g := names["main.grow"]; len(g.StackGrowth) != 1 {
				t.Errorf("main.grow has %d morestack calls, want 1", len(g.StackGrowth))
			}
		})
	}
}

func TestResolveErrors(t *testing.T) {
	bin := fixture(t, "go")
	_, err := Resolve(Target{Exe: bin}, []string{"main.gorw"})
	if !errors.Is(err, ErrNoFunction) || !strings.Contains(err.Error(), "close matches: main.grow") {
		t.Errorf("unknown function: err = %v, want ErrNoFunction naming main.grow", err)
	}
	if _, err := Resolve(Target{Exe: "/etc/hostname"}, []string{"f"}); !errors.Is(err, ErrNotELF) {
		t.Errorf("text file: err = %v, want ErrNotELF", err)
	}
	if _, err := Resolve(Target{Exe: "/nonexistent"}, []string{"f"}); err == nil || !strings.Contains(err.Error(), "no such file") {
		t.Errorf("missing file: err = %v", err)
	}
	if _, err := Resolve(Target{PID: 1 << 30}, []string{"f"}); err == nil || !strings.Contains(err.Error(), "no such process") {
		t.Errorf("missing pid: err = %v", err)
	}
}

// TestResolveLibrary finds malloc in libc, both in a running process's
// mappings and through the executable's DT_NEEDED.
func TestResolveLibrary(t *testing.T) {
	bin := fixture(t, "c")
	fx := startFixture(t, bin, "calls", "1")
	defer fx.kill()
	for _, target := range []Target{{PID: fx.pid()}, {Exe: bin}} {
		fns, err := Resolve(target, []string{"malloc", "work"})
		if err != nil {
			t.Fatal(err)
		}
		var malloc, work *Function
		for i := range fns {
			switch fns[i].Name {
			case "malloc":
				malloc = &fns[i]
			case "work":
				work = &fns[i]
			}
		}
		if malloc == nil || !malloc.Library || !strings.HasPrefix(filepath.Base(malloc.Object), "libc.so") || malloc.Lang != C {
			t.Errorf("%+v: malloc = %+v, want a C function of libc", target, malloc)
		}
		if work == nil || work.Library || work.Lang != C {
			t.Errorf("%+v: work = %+v, want a C function of the executable", target, work)
		}
	}
}
