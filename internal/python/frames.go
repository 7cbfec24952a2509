package python

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"unicode/utf16"

	"github.com/flint-dev/flint/internal/memo"
	"github.com/flint-dev/flint/internal/proc"
	"github.com/flint-dev/flint/internal/symbol"
)

// The sampler's tagged frame words (bpf/profile.h, enum python_frame_bits).
const (
	markBit    = 63
	entryBit   = 62
	indexShift = 44
	indexBits  = 18
	codeAlign  = 3
)

// IsFrame reports whether a word of a sampled user stack is a Python
// frame rather than a native address.
func IsFrame(word uint64) bool { return word>>markBit != 0 }

// IsEntry reports whether Python frame word was the outermost frame of one
// call of the interpreter's eval loop: the native _PyEval_EvalFrameDefault
// frame that ran it stands for it and the frames after it up to here.
func IsEntry(word uint64) bool { return word>>entryBit&1 != 0 }

// decode splits a frame word into its code object's address and its
// instruction index.
func decode(word uint64) (code uint64, index uint32) {
	code = (word & (1<<indexShift - 1)) << codeAlign
	index = uint32(word >> indexShift & (1<<indexBits - 1))
	return code, index
}

// Bounds on what a code object's strings and line table may take: names
// are short, and a hostile process must not make flint read gigabytes.
const (
	maxName      = 1024
	maxFilename  = 4096
	maxLineTable = 1 << 20
)

// Process names the Python frames of one process. Safe for concurrent use.
type Process struct {
	interp *Interpreter
	mem    memory // /proc/PID/mem

	mu    sync.Mutex
	codes map[uint64]*code
	// scratch holds what reads of a code object use only until they
	// return: a code object's header, a string before it is copied.
	scratch [codeHeader]byte
}

// memory is a process's memory, its addresses the offsets.
type memory interface {
	io.ReaderAt
	io.Closer
}

// code is what flint knows of one code object; zero when it could not be
// read.
type code struct {
	function, file string
	firstLine      int
	lineTable      []byte

	// lines holds the lines found at instruction indexes: finding one
	// reads the table from its start (a module's runs to kilobytes), and
	// the same indexes come back sample after sample, and process after
	// process of a code object shared by content. Found lines were 4% of
	// the agent's CPU at ten python3 runs a second (docs/BENCHMARKS.md).
	mu    sync.Mutex
	lines map[uint32]int32
}

// maxLinesKept bounds the lines a code object keeps.
const maxLinesKept = 1024

// line returns the line of c at instruction index, for CPython 3.minor.
func (c *code) line(minor int, index uint32) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if l, ok := c.lines[index]; ok {
		return int(l)
	}
	l := Line(minor, c.lineTable, c.firstLine, index)
	if c.lines == nil {
		c.lines = map[uint32]int32{}
	}
	if len(c.lines) < maxLinesKept {
		c.lines[index] = int32(l)
	}
	return l
}

// unreadable stands for every code object that could not be read.
var unreadable = &code{}

// maxCodes bounds the code objects named per process; past it the cache
// starts over (a process generating code without end).
const maxCodes = 1 << 16

// Open returns a Process reading the memory of process pid, whose
// interpreter is in, and which started at startTime (proc.Process's; 0:
// unchecked). Its memory is opened on the first read: the sampler copies
// most code objects as it samples (RememberCopy), and a process whose
// were all copied is never read, even once it has exited.
func Open(pid int, startTime uint64, in *Interpreter) *Process {
	return &Process{interp: in, mem: &lazyMem{pid: pid, startTime: startTime}, codes: map[uint64]*code{}}
}

// lazyMem is /proc/PID/mem, opened on the first read: opening it has the
// kernel build /proc/PID on its first look, which a process whose code
// objects were all copied never pays.
type lazyMem struct {
	pid       int
	startTime uint64
	mem       procMem
	err       error // the open's, once tried
	tried     bool
}

func (l *lazyMem) ReadAt(b []byte, off int64) (int, error) {
	if !l.tried {
		l.tried = true
		l.mem, l.err = openProcess(l.pid, l.startTime)
	}
	if l.err != nil {
		return 0, l.err
	}
	return l.mem.ReadAt(b, off)
}

func (l *lazyMem) Close() error {
	if !l.tried || l.err != nil {
		return nil
	}
	return l.mem.Close()
}

// openProcess opens the memory of process pid if it is the one that
// started at startTime: a file opened is that process's for good, and a
// PID reused since names another.
func openProcess(pid int, startTime uint64) (procMem, error) {
	path := fmt.Sprintf("%s/%d/mem", proc.Root, pid)
	m, err := openMem(path)
	if err != nil {
		return m, fmt.Errorf("read python process %d: %w", pid, &fs.PathError{Op: "open", Path: path, Err: err})
	}
	if startTime != 0 {
		if now, err := proc.StartTime(pid); err != nil || now != startTime {
			m.Close()
			return m, fmt.Errorf("read python process %d: gone, its PID reused", pid)
		}
	}
	return m, nil
}

// procMem is a process's memory, /proc/PID/mem open as a descriptor, read
// with raw system calls (proc.OpenRaw says why); not an os.File, which
// would check its mode with one more system call, and offer it to the
// network poller.
type procMem int

func openMem(path string) (procMem, error) {
	fd, err := proc.OpenRaw(path)
	return procMem(fd), err
}

// ReadAt reads len(b) bytes at address off, or up to the end of readable
// memory (io.EOF) or an unmapped page (EIO).
func (m procMem) ReadAt(b []byte, off int64) (int, error) {
	n, err := proc.PreadRaw(int(m), b, off)
	if err == nil && n < len(b) {
		err = io.EOF
	}
	return n, err
}

func (m procMem) Close() error { return proc.CloseRaw(int(m)) }

// Close releases the process's memory; safe to call twice.
func (p *Process) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.mem == nil {
		return nil
	}
	err := p.mem.Close()
	p.mem = nil
	return err
}

// Interpreter returns the interpreter p reads.
func (p *Process) Interpreter() *Interpreter { return p.interp }

// Frame names a Python frame word of a sampled stack: module.function
// with its file and the line it was at. A code object that cannot be read
// (gone, not a code object) is named "[python: unreadable code]".
func (p *Process) Frame(word uint64) symbol.Frame { return p.ID(word).Frame() }

// A FrameID is what names a Python frame: its code object and line. Equal
// IDs name equal frames, in one process or in any of an interpreter file's
// whose code objects it shares (static in its image, or alike in content):
// a key for the frames named so far that hashes no strings.
type FrameID struct {
	code *code
	line int
}

// ID returns the FrameID of frame word, as Frame reads it.
func (p *Process) ID(word uint64) FrameID {
	addr, index := decode(word)
	c := p.code(addr)
	if c.function == "" {
		return FrameID{code: unreadable}
	}
	if p.interp.Minor == 9 {
		index /= 2 // f_lasti counts bytes
	}
	return FrameID{code: c, line: c.line(p.interp.Minor, index)}
}

// Frame names the frame id stands for.
func (id FrameID) Frame() symbol.Frame {
	c := id.code
	if c == nil || c.function == "" {
		return symbol.Frame{Function: "[python: unreadable code]"}
	}
	return symbol.Frame{Function: c.function, File: c.file, StartLine: c.firstLine, Line: id.line}
}

// Remember reads the code object of frame word now, while its process
// runs, so that Frame names it after the process exits.
func (p *Process) Remember(word uint64) {
	addr, _ := decode(word)
	p.code(addr)
}

// A Copy is a code object and objects it names, copied from its process's
// memory by the sampler in the process's own context: there reading is a
// copy, where reading another process's memory pins every page read.
type Copy struct {
	Code    uint64   // the code object's address
	Objects []Object // its header, then its name, file and line table as copied
}

// An Object is bytes of a process's memory at Addr: a whole object, or
// the first bytes of one (its header).
type Object struct {
	Addr  uint64
	Data  []byte
	Whole bool
}

// RememberCopy reads the code object c copied, as Remember does, reading
// from the process only what c lacks. A code object of the heap copied
// whole is looked up by what it holds first: a module imported from a
// file has its code objects at other addresses in every process, alike in
// all processes of one interpreter file, which read each once
// (interpFile.shared).
func (p *Process) RememberCopy(c *Copy) {
	p.mu.Lock()
	defer p.mu.Unlock()
	mem := copied{c.Objects, p.mem}
	_, static := p.interp.image(c.Code)
	if static || p.interp.file == nil || p.codes[c.Code] != nil {
		p.lookup(c.Code, mem)
		return
	}
	buf := keys.Get().(*[]byte)
	defer keys.Put(buf)
	key, whole := p.content(c, (*buf)[:0])
	*buf = key
	if !whole {
		p.lookup(c.Code, mem)
		return
	}
	if shared := p.interp.file.sharedCode(key); shared != nil {
		p.remember(c.Code, shared)
		return
	}
	if read := p.lookup(c.Code, mem); read != unreadable {
		p.interp.file.share(key, read)
	}
}

// keys are buffers for content's keys.
var keys = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

// content appends to k what the code object c copied holds of what names
// it, as a key: its first line and its name's, file's and line table's
// data (not their headers: reference counts and cached hashes differ from
// process to process); false unless c holds all of them whole. Callers
// hold mu.
func (p *Process) content(c *Copy, k []byte) ([]byte, bool) {
	o := &p.interp.Offsets
	if len(c.Objects) != 1+3 || len(c.Objects[0].Data) < codeHeader {
		return nil, false
	}
	f, err := p.fieldsOf(c.Objects[0].Data)
	if err != nil {
		return nil, false
	}
	k = binary.LittleEndian.AppendUint32(k, uint32(f.firstLine))
	for i, at := range [...]uint64{f.name, f.file, f.table} {
		obj := c.Objects[1+i]
		if obj.Addr != at || !obj.Whole {
			return nil, false
		}
		var data []byte
		if i < 2 {
			l, err := strLayoutOf(obj.Data, o, maxFilename)
			if err != nil || l.data+l.size > uint64(len(obj.Data)) {
				return nil, false
			}
			data = obj.Data[l.data : l.data+l.size]
			k = append(k, l.tag())
		} else {
			n, err := bytesLength(obj.Data, maxLineTable)
			if err != nil || n > uint64(len(obj.Data)-bytesData) {
				return nil, false
			}
			data = obj.Data[bytesData : bytesData+n]
		}
		k = binary.AppendUvarint(k, uint64(len(data)))
		k = append(k, data...)
	}
	return k, true
}

// copied is a process's memory read from copies of its objects where they
// hold what is read, and from the process (mem, nil once closed)
// otherwise.
type copied struct {
	objects []Object
	mem     io.ReaderAt
}

func (c copied) ReadAt(b []byte, off int64) (int, error) {
	addr := uint64(off)
	for _, o := range c.objects {
		if addr < o.Addr || addr-o.Addr >= uint64(len(o.Data)) {
			continue
		}
		n := copy(b, o.Data[addr-o.Addr:])
		if n == len(b) {
			return n, nil
		}
		if o.Whole {
			return n, io.EOF // as at the end of readable memory: readObject's reads
		}
	}
	if c.mem == nil {
		return 0, os.ErrClosed
	}
	return c.mem.ReadAt(b, off)
}

func (p *Process) code(addr uint64) *code {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.lookup(addr, p.mem) // nil once closed
}

// lookup returns the code object at addr, read from mem the first time.
// Callers hold mu.
func (p *Process) lookup(addr uint64, mem io.ReaderAt) *code {
	// A code object in the interpreter's image is read once for all the
	// processes of the interpreter, and kept there only: most of a short
	// run's are (imports), and each process's map grew with them.
	link, static := p.interp.image(addr)
	if static {
		if c := p.interp.file.code(link); c != nil {
			return c
		}
	}
	if c := p.codes[addr]; c != nil {
		return c
	}
	c, err := p.readCode(mem, addr)
	switch {
	case err != nil:
		c = unreadable
	case static:
		p.interp.file.keep(link, c)
		return c
	}
	p.remember(addr, c)
	return c
}

// remember notes c as the code object at addr. Callers hold mu.
func (p *Process) remember(addr uint64, c *code) {
	if len(p.codes) >= maxCodes {
		clear(p.codes)
	}
	p.codes[addr] = c
}

var errNotCode = errors.New("not a code object")

// codeFields are what a code object's header says of what names it: where
// its name (qualified from 3.11), file and line table are, and its first
// line.
type codeFields struct {
	name, file, table uint64
	firstLine         int32
}

// fieldsOf reads the code object header h, its first codeHeader bytes;
// errNotCode when its type is not the interpreter's PyCode_Type.
func (p *Process) fieldsOf(h []byte) (codeFields, error) {
	o := &p.interp.Offsets
	ptr := func(off uint16) uint64 { return binary.LittleEndian.Uint64(h[off:]) }
	if t := p.interp.CodeType; t != 0 && ptr(8) != t { // ob_type
		return codeFields{}, errNotCode
	}
	name := o.CodeName
	if o.CodeQualname != 0 {
		name = o.CodeQualname
	}
	return codeFields{name: ptr(name), file: ptr(o.CodeFilename), table: ptr(o.CodeLineTable),
		firstLine: int32(binary.LittleEndian.Uint32(h[o.CodeFirstLine:]))}, nil
}

// readCode reads the code object at addr from mem (nil: closed). Callers
// hold mu.
func (p *Process) readCode(mem io.ReaderAt, addr uint64) (*code, error) {
	if mem == nil {
		return nil, os.ErrClosed
	}
	h := p.scratch[:codeHeader]
	if err := read(mem, h, addr); err != nil {
		return nil, err
	}
	// Every field before the reads that reuse the scratch space.
	f, err := p.fieldsOf(h)
	if err != nil {
		return nil, err
	}
	nameAt, fileAt, tableAt, firstLine := f.name, f.file, f.table, int(f.firstLine)
	function, err := p.str(mem, nameAt, maxName)
	if err != nil {
		return nil, fmt.Errorf("code name: %w", err)
	}
	file, err := p.str(mem, fileAt, maxFilename)
	if err != nil {
		return nil, fmt.Errorf("code file: %w", err)
	}
	table, err := p.bytes(mem, tableAt, maxLineTable)
	if err != nil {
		return nil, fmt.Errorf("code line table: %w", err)
	}
	if m := modules.Get(file, Module); m != "" {
		function = m + "." + function
	}
	return &code{function: function, file: file, firstLine: firstLine, lineTable: table}, nil
}

func read(mem io.ReaderAt, b []byte, addr uint64) error {
	_, err := readAt(mem, b, addr)
	return err
}

// readAt reads b at addr, refusing addresses no object can be at.
func readAt(mem io.ReaderAt, b []byte, addr uint64) (int, error) {
	if addr == 0 || addr > 1<<63 {
		return 0, fmt.Errorf("address %#x", addr)
	}
	return mem.ReadAt(b, int64(addr))
}

// readObject reads the object at addr into the scratch space, its header
// of at least need bytes and as much after it as fits: a string or bytes
// object holds its data right after its header, and most of those a code
// object names fit, which spares a second read of each (every read is a
// system call). It returns what it read, need bytes or more. Callers hold
// mu.
func (p *Process) readObject(mem io.ReaderAt, addr uint64, need int) ([]byte, error) {
	n, err := readAt(mem, p.scratch[:], addr)
	if n < need {
		if err == nil {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	return p.scratch[:n], nil // short of the end of readable memory: what is there
}

// String kinds and flags in PyASCIIObject.state: kind in bits 2-4, compact
// bit 5, ascii bit 6, in every version read.
const (
	stateOffset = 32
	lengthOff   = 16 // ob_refcnt, ob_type, then the length
)

// strHead is how much of a str object strLayoutOf reads.
const strHead = stateOffset + 4

// strLayout is where a compact str object holds its characters: size
// bytes from data, kind bytes each (1: Latin-1, or ASCII if ascii; 2:
// UCS-2; 4: UCS-4).
type strLayout struct {
	data, size uint64
	kind       int
	ascii      bool
}

// tag tells apart strings of equal bytes and another kind.
func (l strLayout) tag() byte {
	if l.ascii {
		return 0
	}
	return byte(l.kind)
}

// strLayoutOf reads the layout of the str object whose first strHead
// bytes h holds: a compact one of at most max characters.
func strLayoutOf(h []byte, o *Offsets, max int) (strLayout, error) {
	if len(h) < strHead {
		return strLayout{}, io.ErrUnexpectedEOF
	}
	n := binary.LittleEndian.Uint64(h[lengthOff:])
	state := binary.LittleEndian.Uint32(h[stateOffset:])
	kind, compact, ascii := int(state>>2&7), state>>5&1 != 0, state>>6&1 != 0
	if !compact || n > uint64(max) || (kind != 1 && kind != 2 && kind != 4) {
		return strLayout{}, fmt.Errorf("not a compact string of at most %d characters", max)
	}
	l := strLayout{data: uint64(o.CompactSize), size: n * uint64(kind), kind: kind, ascii: ascii}
	if ascii {
		l.data = uint64(o.ASCIISize)
	}
	return l, nil
}

// str reads the str object at addr: a compact one, as code objects hold.
// Callers hold mu.
func (p *Process) str(mem io.ReaderAt, addr uint64, max int) (string, error) {
	h, err := p.readObject(mem, addr, strHead)
	if err != nil {
		return "", err
	}
	l, err := strLayoutOf(h, &p.interp.Offsets, max)
	if err != nil {
		return "", fmt.Errorf("str at %#x: %w", addr, err)
	}
	b := h[min(l.data, uint64(len(h))):] // copied into the string below
	if l.size <= uint64(len(b)) {
		b = b[:l.size]
	} else {
		b = make([]byte, l.size)
		if err := read(mem, b, addr+l.data); err != nil {
			return "", err
		}
	}
	n := l.size / uint64(l.kind)
	switch l.kind {
	case 1:
		if l.ascii {
			return string(b), nil
		}
		r := make([]rune, n)
		for i, c := range b {
			r[i] = rune(c) // Latin-1
		}
		return string(r), nil
	case 2:
		u := make([]uint16, n)
		for i := range u {
			u[i] = binary.LittleEndian.Uint16(b[2*i:])
		}
		return string(utf16.Decode(u)), nil
	default:
		r := make([]rune, n)
		for i := range r {
			r[i] = rune(binary.LittleEndian.Uint32(b[4*i:]))
		}
		return string(r), nil
	}
}

// Bytes objects: ob_size at 16, the bytes at 32, in every version read.
const (
	bytesSize = 16
	bytesData = 32
)

// bytesLength reads the length of the bytes object whose first bytesData
// bytes h holds: at most max.
func bytesLength(h []byte, max int) (uint64, error) {
	if len(h) < bytesData {
		return 0, io.ErrUnexpectedEOF
	}
	n := binary.LittleEndian.Uint64(h[bytesSize:])
	if n > uint64(max) {
		return 0, fmt.Errorf("%d bytes, at most %d", n, max)
	}
	return n, nil
}

// bytes reads the bytes object at addr. Callers hold mu.
func (p *Process) bytes(mem io.ReaderAt, addr uint64, max int) ([]byte, error) {
	h, err := p.readObject(mem, addr, bytesData)
	if err != nil {
		return nil, err
	}
	n, err := bytesLength(h, max)
	if err != nil {
		return nil, fmt.Errorf("bytes at %#x: %w", addr, err)
	}
	b := make([]byte, n)
	if n <= uint64(len(h)-bytesData) {
		copy(b, h[bytesData:])
		return b, nil
	}
	return b, read(mem, b, addr+bytesData)
}

// Module names the module a file holds as Python tracebacks would show
// it: its path under the directory of sys.path it was found in (the
// standard library's lib/python3.X, a site-packages or dist-packages) with
// dots for slashes, or else the file's name; the package's for
// __init__.py; the frozen module's for "<frozen importlib._bootstrap>";
// "" for code that is not from a file ("<string>", "<stdin>").
func Module(file string) string {
	if rest, ok := strings.CutPrefix(file, "<frozen "); ok {
		return strings.TrimSuffix(rest, ">")
	}
	if strings.HasPrefix(file, "<") {
		return ""
	}
	rel := filepath.Base(file)
	if m := sysPathDir.FindAllStringIndex(file, -1); m != nil {
		rel = strings.TrimPrefix(file[m[len(m)-1][1]:], "/")
	} else if filepath.Base(file) == "__init__.py" {
		rel = filepath.Join(filepath.Base(filepath.Dir(file)), "__init__.py")
	}
	rel = strings.TrimSuffix(strings.TrimSuffix(rel, ".py"), "/__init__")
	return strings.ReplaceAll(rel, "/", ".")
}

// modules caches Module by file for every process: the processes of an
// interpreter run the same files, and the regular expression was a
// quarter of the CPU reading a code object took.
var modules = memo.Strings[string]{Max: 4096}

// sysPathDir matches the directories of sys.path whose files' module
// names are their paths below them.
// (Matches end before the slash after them, where the next may start.)
var sysPathDir = regexp.MustCompile(`/(?:lib/python3(?:\.[0-9]+)?|site-packages|dist-packages)\b`)
