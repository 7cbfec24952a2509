package python

import (
	"bytes"
	"encoding/binary"
	"testing"
	"unicode/utf8"
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
