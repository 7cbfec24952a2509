package python

import (
	"debug/elf"
	"errors"
	"testing"

	"github.com/flint-dev/flint/internal/fixture"
	"github.com/flint-dev/flint/internal/proc"
	"github.com/flint-dev/flint/internal/symbol"
)

func TestFileVersion(t *testing.T) {
	for path, want := range map[string]string{
		"/usr/bin/python3.11":                            "3.11",
		"/usr/lib/x86_64-linux-gnu/libpython3.12.so.1.0": "3.12",
		"/usr/local/bin/python3.11d":                     "3.11",
		"/usr/bin/python3.13t":                           "3.13t",
		"/usr/lib/libpython3.13t.so.1.0":                 "3.13t",
		"/usr/bin/python2.7":                             "2.7",
		"/usr/bin/python3":                               "3",
		"/usr/bin/python3.11-config":                     "",
		"/usr/lib/python3.11/lib-dynload/_json.cpython-311-x86_64-linux-gnu.so": "",
		"/usr/bin/pythonista":          "",
		"/usr/lib/libpython-helper.so": "",
		"/usr/bin/mypython3.11":        "",
	} {
		if got := FileVersion(path); got != want {
			t.Errorf("FileVersion(%q) = %q, want %q", path, got, want)
		}
	}
}

func TestMinorOf(t *testing.T) {
	for v, want := range map[string]int{"3.9": 9, "3.13": 13, "3.13t": -1, "3": -1, "2.7": -1} {
		got, ok := minorOf(v)
		if !ok {
			got = -1
		}
		if got != want {
			t.Errorf("minorOf(%q) = %d, want %d", v, got, want)
		}
	}
}

// interpreters are the interpreters the tests of real processes run:
// pyenv's builds (libpython shared), Debian's (a non-PIE executable) and
// 3.8, which flint cannot read.
var interpreters = []struct {
	name string
	path string
	err  error // what Find returns
}{
	{"3.8", "/root/.pyenv/versions/3.8.18/bin/python3.8", ErrVersion},
	{"3.9", "/root/.pyenv/versions/3.9.18/bin/python3.9", nil},
	{"3.10", "/root/.pyenv/versions/3.10.13/bin/python3.10", nil},
	{"3.11", "/root/.pyenv/versions/3.11.7/bin/python3.11", nil},
	{"3.12", "/root/.pyenv/versions/3.12.1/bin/python3.12", nil},
	{"3.13", "/root/.pyenv/versions/3.13.0/bin/python3.13", nil},
	{"debian 3.11", "/usr/bin/python3.11", nil},
}

// countedSymbols counts what a Finder asks of the files.
type countedSymbols struct {
	Symbols
	calls int
}

func (c *countedSymbols) Symbol(m *proc.Mapping, name string) (uint64, bool) {
	c.calls++
	return c.Symbols.Symbol(m, name)
}

func (c *countedSymbols) Layout(m *proc.Mapping) (symbol.Layout, bool) {
	c.calls++
	return c.Symbols.Layout(m)
}

// shutSymbols cannot read any file while shut; open, every file is laid
// out as layout and has no symbols.
type shutSymbols struct {
	shut   bool
	layout symbol.Layout
}

func (s *shutSymbols) Symbol(*proc.Mapping, string) (uint64, bool) { return 0, false }

func (s *shutSymbols) Layout(*proc.Mapping) (symbol.Layout, bool) { return s.layout, !s.shut }

// TestFinderUnread finds nothing of a process whose python-named file
// cannot be read, and says so (ErrUnread), then looks at the file again:
// read, it holds no interpreter.
func TestFinderUnread(t *testing.T) {
	exe, err := elf.Open("/proc/self/exe")
	if err != nil {
		t.Fatal(err)
	}
	defer exe.Close()
	syms := &shutSymbols{shut: true, layout: symbol.Segments(exe)}
	f := NewFinder(syms)
	p := &proc.Process{PID: 1 << 22, Mappings: []proc.Mapping{{Start: 0x400000, End: 0x500000, Dev: 1, Inode: 5, Path: "/usr/bin/python3.11"}}}
	if in, err := f.Find(p); in != nil || !errors.Is(err, ErrUnread) {
		t.Errorf("Find with the file unreadable = %v, %v; want ErrUnread", in, err)
	}
	syms.shut = false
	if in, err := f.Find(p); in != nil || err != nil {
		t.Errorf("Find with the file read = %v, %v; want none", in, err)
	}
}

// learnCodes starts fixture.PythonCodes under python, has sym learn it
// and returns it and its code objects.
func learnCodes(t *testing.T, sym *symbol.Symbolizer, python string) (*proc.Process, []fixture.PythonCode) {
	t.Helper()
	pid, codes := fixture.PythonCodes(t, python)
	p, err := proc.Read(pid)
	if err != nil {
		t.Fatal(err)
	}
	sym.Learn(p)
	return p, codes
}

// TestFinder finds the interpreter of two processes of each interpreter:
// the second's costs no look-up in its files, and both get the addresses
// of their own process (ASLR), those its mapping's symbols have.
func TestFinder(t *testing.T) {
	for _, py := range interpreters {
		t.Run(py.name, func(t *testing.T) {
			sym := symbol.New()
			defer sym.Close()
			counted := &countedSymbols{Symbols: sym}
			f := NewFinder(counted)
			var calls []int
			for range 2 {
				p, _ := learnCodes(t, sym, py.path)
				in, err := f.Find(p)
				calls = append(calls, counted.calls)
				if !errors.Is(err, py.err) {
					t.Fatalf("Find: %v, want %v", err, py.err)
				}
				if err != nil {
					continue
				}
				var want uint64
				for i := range p.Mappings {
					if addr, ok := sym.Symbol(&p.Mappings[i], "_PyRuntime"); ok {
						want = addr
						break
					}
				}
				if in == nil || in.Runtime != want || in.CodeType == 0 {
					t.Fatalf("Find = %+v, want _PyRuntime at %#x and PyCode_Type", in, want)
				}
			}
			if calls[0] == 0 || calls[1] != calls[0] {
				t.Errorf("look-ups in the files: %d for the first process, %d more for the second, want some then none", calls[0], calls[1]-calls[0])
			}
			// A file is kept as long as keep reports it (the agent's
			// collector: for five minutes after the last process that
			// mapped it, so a script run now and then keeps its
			// interpreter), and forgotten at the first Trim after.
			for range 30 {
				f.Trim(func(proc.FileKey) bool { return true })
			}
			p, _ := learnCodes(t, sym, py.path)
			f.Find(p)
			if counted.calls != calls[1] {
				t.Errorf("%d look-ups in the files after 30 Trims that kept them, want none", counted.calls-calls[1])
			}
			f.Trim(func(proc.FileKey) bool { return false })
			f.Find(p)
			if counted.calls == calls[1] {
				t.Error("no look-up in the files after a Trim that dropped them")
			}
		})
	}
}
