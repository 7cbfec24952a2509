// Package python names the Python frames the sampler reads from CPython
// 3.9-3.13 processes (docs/PYTHON.md): it finds a process's interpreter and
// the offsets of its version, which the sampler follows to the sampled
// thread's frames, and names the code objects those frames ran, with the
// line each was at, by reading the process's memory.
package python

import (
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/flint-dev/flint/internal/proc"
	"github.com/flint-dev/flint/internal/symbol"
)

// fileVersion matches the executable or library of a CPython interpreter
// (python3.11, libpython3.12.so.1.0, python3.11d, python3.13t), capturing
// its version and whether it is a free-threaded build.
var fileVersion = regexp.MustCompile(`^(?:lib)?python(\d+(?:\.\d+)?)[dmu]*(t?)[dmu]*(?:$|\.so)`)

// FileVersion returns the Python version a file's name says it runs
// ("3.11", "3.13t" for a free-threaded build), "" for other files.
func FileVersion(path string) string {
	base := filepath.Base(path)
	if !strings.HasPrefix(strings.TrimPrefix(base, "lib"), "python") {
		return "" // most files, extension modules (_json.cpython-311-...) too: no regular expression run
	}
	if m := fileVersion.FindStringSubmatch(base); m != nil {
		return m[1] + m[2]
	}
	return ""
}

// ErrVersion is returned for a CPython version flint has no offsets for.
var ErrVersion = errors.New("CPython version not supported (3.9-3.13 are, without free threading)")

// ErrUnread is returned for a process whose interpreter is unknown: a file
// of it that may hold one could not be read (the process gone, say).
var ErrUnread = errors.New("a file that may hold a CPython interpreter could not be read")

// Interpreter is a CPython interpreter in one process.
type Interpreter struct {
	Minor   int    // the interpreter is CPython 3.Minor
	Runtime uint64 // address of _PyRuntime in the process
	// CodeType is the address of PyCode_Type, the type of every code
	// object; 0 when unknown (nothing is checked then).
	CodeType uint64
	Offsets  Offsets
	// Mapping is the executable mapping of the interpreter's file it was
	// found by (Find); every address above is as far from its start in
	// every process that maps the file there alike.
	Mapping proc.Mapping

	// file is the file the interpreter is in, shared by every process of
	// it; nil for an Interpreter made otherwise than by Find (nothing
	// shared). bias is how far this process loaded it from its link-time
	// addresses.
	file *interpFile
	bias uint64
}

// interpFile is a file holding a CPython interpreter (the executable, or
// libpython when built shared) as all processes mapping it share it, at
// link-time addresses. Safe for concurrent use.
type interpFile struct {
	minor             int
	offsets           Offsets
	runtime, codeType uint64 // _PyRuntime, PyCode_Type (0: unknown)
	layout            symbol.Layout
	lo, hi            uint64 // the file's image (Layout.Span)

	mu sync.Mutex
	// id tells this file's codes apart from any other file's, and from
	// those it kept before starting over (ImageID).
	id uint32
	// codes are the code objects read in the image, by link-time
	// address. In 3.11 and 3.12 the code objects of the modules frozen
	// into the interpreter (importlib's, os's, codecs'...) are static
	// there ("deep-frozen"; 3.13 makes them on the heap again,
	// python/cpython#108716): the same in every process, never freed,
	// their names and line tables never changed. Every import runs
	// through them.
	codes map[uint64]*code
	// shared are code objects of the heap by what names them
	// (Process.content): a module's imported from a .py or .pyc file,
	// alike in every process that imports it.
	shared map[string]*code
}

// maxShared bounds the heap code objects kept per interpreter file by
// content; past it the cache starts over.
const maxShared = 1 << 13

// sharedCode returns the code object of content key; nil if none was
// shared.
func (b *interpFile) sharedCode(key []byte) *code {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.shared[string(key)]
}

// share records c, read from a process, as the code object of content
// key.
func (b *interpFile) share(key []byte, c *code) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.shared) >= maxShared || b.shared == nil {
		b.shared = map[string]*code{}
	}
	b.shared[string(key)] = c
}

// maxStatic bounds the code objects kept per interpreter file; past it
// the cache starts over. The images of 3.11 and 3.12 hold under a
// thousand that functions run.
const maxStatic = 1 << 12

// interpreter returns the interpreter of a process that loaded b at bias.
func (b *interpFile) interpreter(bias uint64) *Interpreter {
	in := &Interpreter{Minor: b.minor, Runtime: b.runtime + bias, Offsets: b.offsets, file: b, bias: bias}
	if b.codeType != 0 {
		in.CodeType = b.codeType + bias
	}
	return in
}

// imageIDs numbers the interpreter files' sets of kept code objects.
var imageIDs atomic.Uint32

// ImageID identifies the static code objects of the interpreter's file
// that user space keeps: it changes when they are forgotten. The sampler
// copies a static code object for the first young process of an ID only.
func (in *Interpreter) ImageID() uint32 {
	if in.file == nil {
		return 0
	}
	in.file.mu.Lock()
	defer in.file.mu.Unlock()
	return in.file.id
}

// Image returns where the interpreter's file lies in the process: the
// code objects there are static, read once for all its processes; 0, 0
// when unknown.
func (in *Interpreter) Image() (start, end uint64) {
	if in.file == nil {
		return 0, 0
	}
	return in.file.lo + in.bias, in.file.hi + in.bias
}

// image returns the link-time address of addr, and whether addr lies in
// the image of the interpreter's file, where an object is static.
func (in *Interpreter) image(addr uint64) (uint64, bool) {
	if in.file == nil {
		return 0, false
	}
	link := addr - in.bias
	return link, link >= in.file.lo && link < in.file.hi
}

// code returns the code object read at link-time address link; nil if none
// was.
func (b *interpFile) code(link uint64) *code {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.codes[link]
}

// keep records the code object read at link-time address link.
func (b *interpFile) keep(link uint64, c *code) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.codes) >= maxStatic {
		b.codes = nil
		b.id = imageIDs.Add(1)
	}
	if b.codes == nil {
		b.codes = map[uint64]*code{}
	}
	b.codes[link] = c
}

// Symbols reads the mapped files of processes, as symbol.Symbolizer does;
// a mapping's file must be learned.
type Symbols interface {
	// Symbol returns where m's process has the symbol name of m's file.
	Symbol(m *proc.Mapping, name string) (uint64, bool)
	// Layout returns where m's file loads its segments; false when the
	// file cannot be read.
	Layout(m *proc.Mapping) (symbol.Layout, bool)
}

// Finder finds the CPython interpreters of processes. It looks at each
// mapped file once (by device and inode): a process of an interpreter it
// knows costs a map look-up for each mapping whose path says python, and
// the processes of one interpreter share the code objects of its image.
// Safe for concurrent use.
type Finder struct {
	sym Symbols

	mu    sync.Mutex
	files map[proc.FileKey]*found // in and err set once
}

// found is what a mapped file is: an interpreter (in), one of a version
// flint cannot read (err), or neither.
type found struct {
	in  *interpFile
	err error
}

// maxFiles bounds the files a Finder knows; past it it starts over. Every
// interpreter installed maps its own dozens of extension modules
// (lib-dynload/_json.cpython-311-x86_64-linux-gnu.so), all named python.
const maxFiles = 4096

// NewFinder returns a Finder reading files with sym.
func NewFinder(sym Symbols) *Finder {
	return &Finder{sym: sym, files: map[proc.FileKey]*found{}}
}

// Find returns the CPython interpreter of p: the mapped file whose name
// says CPython that defines _PyRuntime (the executable, or libpython when
// built shared). It returns nil, nil for a process without one,
// ErrVersion for one of another version, and ErrUnread when a file that
// may hold one cannot be read: it is looked at again in the next process
// that maps it.
func (f *Finder) Find(p *proc.Process) (*Interpreter, error) {
	var err error
	for i := range p.Mappings {
		m := &p.Mappings[i]
		if m.Inode == 0 || !strings.Contains(m.Path, "python") {
			continue // most files: not even a look-up
		}
		f.mu.Lock()
		known := f.files[m.Key()]
		f.mu.Unlock()
		if known == nil {
			looked, ok := f.look(m)
			if !ok {
				err = ErrUnread
				continue
			}
			f.mu.Lock()
			// Another process's may have come in meanwhile.
			if known = f.files[m.Key()]; known == nil {
				if len(f.files) >= maxFiles {
					clear(f.files)
				}
				known = &looked
				f.files[m.Key()] = known
			}
			f.mu.Unlock()
		}
		if known.err != nil {
			return nil, known.err
		}
		if known.in == nil {
			continue
		}
		if bias, ok := known.in.layout.Bias(m); ok {
			in := known.in.interpreter(bias)
			in.Mapping = *m
			return in, nil
		}
	}
	return nil, err
}

// look tells what m's file is; false when it cannot be read now.
func (f *Finder) look(m *proc.Mapping) (found, bool) {
	v := FileVersion(m.Path)
	if v == "" {
		return found{}, true
	}
	layout, ok := f.sym.Layout(m)
	if !ok {
		return found{}, false
	}
	bias, ok := layout.Bias(m)
	if !ok {
		return found{}, false
	}
	runtime, ok := f.sym.Symbol(m, "_PyRuntime")
	if !ok {
		return found{}, true
	}
	minor, ok := minorOf(v)
	o, known := versions[minor]
	if !ok || !known {
		return found{err: fmt.Errorf("python%s in %s: %w", v, m.Path, ErrVersion)}, true
	}
	b := &interpFile{minor: minor, offsets: o, runtime: runtime - bias, layout: layout, id: imageIDs.Add(1)}
	if t, ok := f.sym.Symbol(m, "PyCode_Type"); ok {
		b.codeType = t - bias
	}
	b.lo, b.hi = layout.Span()
	return found{in: b}, true
}

// Trim forgets the files keep does not report, so that the Finder holds
// the interpreters in use only, and a file deleted whose inode is reused
// is looked at anew. The agent calls it once a window with keep reporting
// the files its collector knows: those of its processes, and for five
// minutes those they mapped (collect's keepFileRounds), so that a script
// run now and then (cron, a periodic check) keeps its interpreter and
// the code objects of its image.
func (f *Finder) Trim(keep func(proc.FileKey) bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	maps.DeleteFunc(f.files, func(k proc.FileKey, _ *found) bool { return !keep(k) })
}

// minorOf returns the minor version of "3.minor".
func minorOf(v string) (int, bool) {
	if len(v) < 3 || v[:2] != "3." {
		return 0, false
	}
	n, err := strconv.Atoi(v[2:])
	return n, err == nil
}
