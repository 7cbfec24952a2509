package python

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/flint-dev/flint/internal/symbol"
)

func TestModule(t *testing.T) {
	for file, want := range map[string]string{
		"/tmp/busy.py":                                        "busy",
		"/usr/lib/python3.11/json/encoder.py":                 "json.encoder",
		"/usr/lib/python3.11/json/__init__.py":                "json",
		"/usr/local/lib/python3.12/threading.py":              "threading",
		"/usr/lib/python3/dist-packages/requests/api.py":      "requests.api",
		"/srv/venv/lib/python3.12/site-packages/flask/app.py": "flask.app",
		"/srv/app/pkg/__init__.py":                            "pkg",
		"<frozen importlib._bootstrap>":                       "importlib._bootstrap",
		"<string>":                                            "",
	} {
		if got := Module(file); got != want {
			t.Errorf("Module(%q) = %q, want %q", file, got, want)
		}
	}
}

// image is a fake process's memory: its offsets are its addresses.
type image struct{ *bytes.Reader }

func (image) Close() error { return nil }

func fakeProcess(t testing.TB, mem []byte) *Process {
	p := &Process{interp: &Interpreter{Minor: 12, Offsets: versions[12]}, mem: image{bytes.NewReader(mem)}, codes: map[uint64]*code{}}
	t.Cleanup(func() { p.Close() })
	return p
}

// codeImage lays out a 3.12 code object at 0x100 named qualname, of file,
// with its strings and line table after it.
func codeImage(qualname, file string, table []byte) []byte {
	o := versions[12]
	img := make([]byte, 0x1000)
	put := func(at int, v uint64) { binary.LittleEndian.PutUint64(img[at:], v) }
	str := func(at int, s string) uint64 {
		put(at+lengthOff, uint64(len(s)))
		binary.LittleEndian.PutUint32(img[at+stateOffset:], 1<<2|1<<5|1<<6) // 1-byte, compact, ascii
		copy(img[at+int(o.ASCIISize):], s)
		return uint64(at)
	}
	const code = 0x100
	put(code+int(o.CodeQualname), str(0x400, qualname))
	put(code+int(o.CodeFilename), str(0x600, file))
	binary.LittleEndian.PutUint32(img[code+int(o.CodeFirstLine):], 10)
	put(0x800+bytesSize, uint64(len(table)))
	copy(img[0x800+bytesData:], table)
	put(code+int(o.CodeLineTable), 0x800)
	return img
}

// word is the sampler's frame word for the code object at addr, at index.
func word(addr uint64, index uint32) uint64 {
	return 1<<markBit | uint64(index)<<indexShift | addr>>codeAlign
}

func TestFrame(t *testing.T) {
	// Two entries of one code unit each: line 10+1, then 10+2.
	table := []byte{0x80 | locOneLine1<<3, 0, 0, 0x80 | locOneLine1<<3, 0, 0}
	p := fakeProcess(t, codeImage("Server.handle", "/srv/app/server.py", table))
	f := p.Frame(word(0x100, 1))
	if f.Function != "server.Server.handle" || f.File != "/srv/app/server.py" || f.Line != 12 || f.StartLine != 10 {
		t.Errorf("Frame = %+v, want server.Server.handle at /srv/app/server.py:12 from line 10", f)
	}
	if f := p.Frame(word(0x200, 0)); f.Function != "[python: unreadable code]" {
		t.Errorf("Frame of no code object = %+v", f)
	}
	p.Close()
	if f := p.Frame(word(0x108, 0)); f.Function != "[python: unreadable code]" {
		t.Errorf("Frame of a closed process = %+v", f)
	}
}

// FuzzFrame names frames of hostile memory: never a panic, and names are
// valid text of bounded length.
func FuzzFrame(f *testing.F) {
	f.Add(codeImage("f", "/a.py", []byte{0x80 | locOneLine1<<3, 0, 0}), uint64(0x100), uint32(0))
	f.Add(make([]byte, 64), uint64(8), uint32(3))
	f.Fuzz(func(t *testing.T, mem []byte, addr uint64, index uint32) {
		p := fakeProcess(t, mem)
		fr := p.Frame(word(addr&(1<<(indexShift+codeAlign)-1), index&(1<<indexBits-1)))
		if !utf8.ValidString(fr.Function) || len(fr.Function) > 4*(maxName+maxFilename)+1 {
			t.Fatalf("Frame named %q", fr.Function)
		}
	})
}

// TestRememberCopy names a code object from the sampler's copy of it: its
// header and name copied whole, its file's header only, its line table
// whole. Only the file is read from the process, and the name is the one
// a read of the process alone gives.
func TestRememberCopy(t *testing.T) {
	table := []byte{0x80 | locOneLine1<<3, 0, 0, 0x80 | locOneLine1<<3, 0, 0}
	img := codeImage("Server.handle", "/srv/app/server.py", table)
	o := versions[12]
	object := func(addr, size int, whole bool) Object {
		return Object{Addr: uint64(addr), Data: img[addr : addr+size], Whole: whole}
	}
	c := &Copy{Code: 0x100, Objects: []Object{
		object(0x100, codeHeader, false),
		object(0x400, int(o.ASCIISize)+len("Server.handle"), true),
		object(0x600, 48, false),
		object(0x800, bytesData+len(table), true),
	}}
	mem := &countedMemory{memory: image{bytes.NewReader(img)}}
	p := &Process{interp: &Interpreter{Minor: 12, Offsets: o}, mem: mem, codes: map[uint64]*code{}}
	p.RememberCopy(c)
	if mem.reads != 1 {
		t.Errorf("%d reads of the process, want 1 (the file)", mem.reads)
	}
	want := fakeProcess(t, img).Frame(word(0x100, 1))
	if got := p.Frame(word(0x100, 1)); got != want || got.Function != "server.Server.handle" {
		t.Errorf("Frame from the copy = %+v, from the process %+v", got, want)
	}

	// A closed process: what the copy lacks cannot be read.
	p = &Process{interp: &Interpreter{Minor: 12, Offsets: o}, codes: map[uint64]*code{}}
	p.RememberCopy(c)
	if f := p.Frame(word(0x100, 1)); f.Function != "[python: unreadable code]" {
		t.Errorf("Frame of a closed process's partial copy = %+v", f)
	}
	c.Objects[2] = object(0x600, int(o.ASCIISize)+len("/srv/app/server.py"), true)
	p = &Process{interp: &Interpreter{Minor: 12, Offsets: o}, codes: map[uint64]*code{}}
	p.RememberCopy(c)
	if f := p.Frame(word(0x100, 1)); f != want {
		t.Errorf("Frame of a closed process's whole copy = %+v, want %+v", f, want)
	}
}

// TestRememberCopyShared names the code objects that processes of one
// interpreter file copied whole alike once: the second process's copy,
// whose strings differ in their headers only, reads nothing and names
// its frames as the first; a copy of other content, or a partial one, is
// read for itself.
func TestRememberCopyShared(t *testing.T) {
	o := versions[12]
	file := &interpFile{minor: 12, offsets: o}
	table := []byte{0x80 | locOneLine1<<3, 0, 0, 0x80 | locOneLine1<<3, 0, 0}
	copyOf := func(img []byte, fileWhole bool) *Copy {
		fileSize := int(o.ASCIISize) + len("/srv/app/server.py")
		if !fileWhole {
			fileSize = 48
		}
		return &Copy{Code: 0x100, Objects: []Object{
			{Addr: 0x100, Data: img[0x100 : 0x100+codeHeader]},
			{Addr: 0x400, Data: img[0x400 : 0x400+int(o.ASCIISize)+len("Server.handle")], Whole: true},
			{Addr: 0x600, Data: img[0x600 : 0x600+fileSize], Whole: fileWhole},
			{Addr: 0x800, Data: img[0x800 : 0x800+bytesData+len(table)], Whole: true},
		}}
	}
	process := func(mem memory) *Process {
		return &Process{interp: file.interpreter(0), mem: mem, codes: map[uint64]*code{}}
	}

	img := codeImage("Server.handle", "/srv/app/server.py", table)
	mem := &countedMemory{memory: image{bytes.NewReader(img)}}
	first := process(mem)
	first.RememberCopy(copyOf(img, true))
	want := first.Frame(word(0x100, 1))
	if want.Function != "server.Server.handle" || want.Line != 12 || mem.reads != 0 {
		t.Fatalf("Frame from a whole copy = %+v, after %d reads of the process", want, mem.reads)
	}

	// Another process: reference counts and cached hashes differ.
	other := slices.Clone(img)
	for _, at := range []int{0x400, 0x600, 0x800} {
		other[at]++        // ob_refcnt
		other[at+3*8] ^= 1 // a str's hash, a bytes object's
	}
	second := process(nil) // closed: nothing can be read
	second.RememberCopy(copyOf(other, true))
	if got := second.Frame(word(0x100, 1)); got != want || second.codes[0x100] != first.codes[0x100] {
		t.Errorf("Frame from an alike copy = %+v (shared: %v), want %+v", got, second.codes[0x100] == first.codes[0x100], want)
	}

	// Another line table: read for itself.
	changed := codeImage("Server.handle", "/srv/app/server.py", []byte{0x80 | locOneLine1<<3, 0, 0, 0x80 | locOneLine2<<3, 0, 0})
	third := process(nil)
	third.RememberCopy(copyOf(changed, true))
	if got := third.Frame(word(0x100, 1)); got.Function != want.Function || got.Line != 13 {
		t.Errorf("Frame from a copy of another line table = %+v, want line 13", got)
	}

	// A partial copy is read from its process, never shared.
	fourth := process(nil)
	fourth.RememberCopy(copyOf(other, false))
	if got := fourth.Frame(word(0x100, 1)); got.Function != "[python: unreadable code]" {
		t.Errorf("Frame from a partial copy of a closed process = %+v", got)
	}
}

// countedMemory counts the reads of a process's memory.
type countedMemory struct {
	memory
	reads int
}

func (m *countedMemory) ReadAt(b []byte, off int64) (int, error) {
	m.reads++
	return m.memory.ReadAt(b, off)
}

// TestStaticCodeShared names the code objects of a short run's imports
// in two processes of each interpreter: those in the interpreter's image
// (3.11's and 3.12's frozen modules) are read and kept once for both,
// the others in each; every name is what CPython says and what a read of
// the process alone gives.
func TestStaticCodeShared(t *testing.T) {
	for _, py := range interpreters {
		if py.err != nil {
			continue
		}
		t.Run(py.name, func(t *testing.T) {
			sym := symbol.New()
			defer sym.Close()
			f := NewFinder(sym)
			for i := range 2 {
				p, codes := learnCodes(t, sym, py.path)
				in, err := f.Find(p)
				if err != nil || in == nil {
					t.Fatalf("Find: %v, %v", in, err)
				}
				pp := Open(p.PID, p.StartTime, in)
				defer pp.Close()
				mem := &countedMemory{memory: pp.mem}
				pp.mem = mem
				alone := Open(p.PID, p.StartTime, &Interpreter{Minor: in.Minor, Runtime: in.Runtime, CodeType: in.CodeType, Offsets: in.Offsets})
				defer alone.Close()
				image := imageOf(t, p.PID, in)
				var static, frozen, own int
				for _, c := range codes {
					inImage := image(c.Addr)
					if !inImage {
						own++
					}
					if strings.HasPrefix(c.File, "<frozen ") {
						frozen++
						if inImage {
							static++
						}
					}
					want := c.Name
					if m := Module(c.File); m != "" {
						want = m + "." + c.Name
					}
					reads := mem.reads
					for index := range uint32(3) {
						w := word(c.Addr, index)
						got := pp.Frame(w)
						if got.Function != want || got.File != c.File || got.StartLine != c.FirstLine {
							t.Errorf("process %d: %#x named %+v, want %s at %s from line %d", i, c.Addr, got, want, c.File, c.FirstLine)
						}
						if a := alone.Frame(w); got != a {
							t.Errorf("process %d: %#x named %+v, alone %+v", i, c.Addr, got, a)
						}
					}
					if n := mem.reads - reads; (i == 1 && inImage) != (n == 0) {
						t.Errorf("process %d: %s (in the image: %v) took %d reads", i, want, inImage, n)
					}
				}
				if len(pp.codes) != own {
					t.Errorf("process %d keeps %d code objects, want the %d not in the image", i, len(pp.codes), own)
				}
				if want := map[bool]int{true: frozen}[in.Minor == 11 || in.Minor == 12]; static != want {
					t.Errorf("process %d: %d of %d frozen code objects in the interpreter's image, want %d", i, static, frozen, want)
				}
			}
		})
	}
}

// TestStaticCodeChecked shares only code objects: an object of the image
// that is not one (its ob_type not PyCode_Type) is read by every process.
func TestStaticCodeChecked(t *testing.T) {
	const codeType = 0xc0de
	img := codeImage("f", "/a.py", nil)
	binary.LittleEndian.PutUint64(img[0x100+8:], codeType) // ob_type
	file := &interpFile{lo: 0, hi: uint64(len(img))}
	var mems []*countedMemory
	for i := range 2 {
		p := fakeProcess(t, img)
		p.interp = &Interpreter{Minor: 12, Offsets: versions[12], CodeType: codeType, file: file}
		mems = append(mems, &countedMemory{memory: p.mem})
		p.mem = mems[i]
		if f := p.Frame(word(0x100, 0)); f.Function != "a.f" {
			t.Errorf("process %d: code object named %+v", i, f)
		}
		if f := p.Frame(word(0x200, 0)); f.Function != "[python: unreadable code]" {
			t.Errorf("process %d: no code object named %+v", i, f)
		}
	}
	// One read tells the other object's type.
	if mems[0].reads <= 1 || mems[1].reads != 1 {
		t.Errorf("reads: %d in the first process, %d in the second; want the code object's and 1, then 1", mems[0].reads, mems[1].reads)
	}
}

// imageOf returns whether an address of process pid lies in a mapping of
// the file its interpreter in is in (where PyCode_Type is), by
// /proc/PID/maps.
func imageOf(t *testing.T, pid int, in *Interpreter) func(addr uint64) bool {
	t.Helper()
	maps, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		t.Fatal(err)
	}
	type mapping struct {
		lo, hi uint64
		path   string
	}
	var all []mapping
	for line := range strings.Lines(string(maps)) {
		var m mapping
		if _, err := fmt.Sscanf(line, "%x-%x %s %s %s %s %s", &m.lo, &m.hi, new(string), new(string), new(string), new(string), &m.path); err == nil {
			all = append(all, m)
		}
	}
	path := ""
	for _, m := range all {
		if m.lo <= in.CodeType && in.CodeType < m.hi {
			path = m.path
		}
	}
	if path == "" {
		t.Fatalf("no file mapped at PyCode_Type (%#x) in pid %d", in.CodeType, pid)
	}
	return func(addr uint64) bool {
		for _, m := range all {
			if m.path == path && m.lo <= addr && addr < m.hi {
				return true
			}
		}
		return false
	}
}

// TestCodeReads counts the reads of a code object: one for its header and
// one for each string and its line table, whose data come with their
// headers when they fit; one more for a string that does not; an object
// at the end of readable memory is read in full.
func TestCodeReads(t *testing.T) {
	short := []byte{0x80 | locOneLine1<<3, 0, 0}
	long := "/srv/app/" + strings.Repeat("d/", 150) + "server.py"
	for _, tc := range []struct {
		name, file string
		tableAt    int // 0: codeImage's
		reads      int
	}{
		{"short", "/srv/app/server.py", 0, 4},
		{"long file name", long, 0, 5},
		{"table at the end", "/srv/app/server.py", 0x1000 - bytesData - len(short), 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			img := codeImage("Server.handle", tc.file, short)
			if tc.tableAt != 0 {
				binary.LittleEndian.PutUint64(img[tc.tableAt+bytesSize:], uint64(len(short)))
				copy(img[tc.tableAt+bytesData:], short)
				binary.LittleEndian.PutUint64(img[0x100+int(versions[12].CodeLineTable):], uint64(tc.tableAt))
			}
			p := fakeProcess(t, img)
			m := &countedMemory{memory: p.mem}
			p.mem = m
			f := p.Frame(word(0x100, 0))
			if f.Function != "server.Server.handle" || f.File != tc.file || f.Line != 11 {
				t.Errorf("named %+v", f)
			}
			if m.reads != tc.reads {
				t.Errorf("%d reads, want %d", m.reads, tc.reads)
			}
		})
	}
}

// TestCodeAllocs bounds what reading a code object allocates: its names,
// line table and record; and a read that fails nothing, as reads of a
// process that has exited do.
func TestCodeAllocs(t *testing.T) {
	table := []byte{0x80 | locOneLine1<<3, 0, 0}
	p := fakeProcess(t, codeImage("Server.handle", "/srv/app/server.py", table))
	for _, tc := range []struct {
		name string
		addr uint64
		max  float64
	}{
		{"readable", 0x100, 5},
		{"unreadable", 0x2000, 0}, // past the process's memory
	} {
		t.Run(tc.name, func(t *testing.T) {
			allocs := testing.AllocsPerRun(100, func() {
				delete(p.codes, tc.addr)
				p.Remember(word(tc.addr, 0))
			})
			if allocs > tc.max {
				t.Errorf("%v allocations a code object, want at most %v", allocs, tc.max)
			}
		})
	}
}
