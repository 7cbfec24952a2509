package symbol

import (
	"bufio"
	"bytes"
	"debug/buildinfo"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"syscall"

	"github.com/flint-dev/flint/internal/proc"
)

// Symbolizer names the addresses of many processes. It parses each binary
// once (keyed by device and inode) and caches names per address.
// It is safe for concurrent use.
type Symbolizer struct {
	mu       sync.Mutex
	files    map[proc.FileKey]*file
	names    map[nameKey][]Frame
	round    uint64 // Trim rounds so far
	kernel   *KernelTable
	kernErr  error
	kernDone bool
	vdso     *Binary
	vdsoDone bool
	perfMaps map[*proc.Process]*PerfMap
	held     int // files with an open handle
	stats    Stats
}

// Stats count naming work, for overhead reports, and the inputs naming
// skipped.
type Stats struct {
	CacheHits, CacheMisses uint64
	BinariesParsed         int
	BinaryErrors           int
	// PerfMapsRejected counts JIT maps not read: not a regular file inside
	// the process's root (a symbolic link, a FIFO, a device), or unreadable.
	PerfMapsRejected uint64
	// PerfMapsTruncated counts JIT maps longer than 64 MiB, of which only
	// the end was read.
	PerfMapsTruncated uint64
	// FilesNotHeld counts mapped files Learn did not open because a process
	// maps more than maxLearn new files, or flint holds maxHeld already; a
	// sample in one opens it then, if its process still runs.
	FilesNotHeld uint64
}

// file is a mapped file: a handle taken while a process mapped it, parsed
// on first use.
type file struct {
	path    string
	handle  *os.File
	bin     *Binary
	err     error
	parsed  bool
	buildID *string // read on its own when asked before the tables
	goVer   *string // the Go version that built it, "" if not Go; read when asked
	used    uint64  // last Trim round that named an address in it
	opened  uint64  // the Trim round of the attempt to open it
}

// reopen reports whether file f should be opened (again): it is unknown,
// or opening it failed in an earlier round, most likely because the process
// it was opened through had exited; a live process of the binary may open
// it now. Within a round a failure stands, so a binary that cannot be
// opened costs one attempt a window, not one a sample. Callers hold s.mu.
func (s *Symbolizer) reopen(f *file) bool {
	return f == nil || f.handle == nil && f.opened < s.round
}

type nameKey struct {
	file proc.FileKey // zero for the kernel
	addr uint64
}

// New returns an empty Symbolizer.
func New() *Symbolizer {
	return &Symbolizer{
		files:    map[proc.FileKey]*file{},
		names:    map[nameKey][]Frame{},
		perfMaps: map[*proc.Process]*PerfMap{},
	}
}

// Learn takes a handle on each file p maps that is not known yet, so it can
// be named after p exits or the file is deleted. Call it when p is first
// seen. It opens at most maxLearn files for one process and holds at most
// maxHeld in all (Stats.FilesNotHeld counts the others): a process mapping
// ten thousand files costs ten thousand descriptors otherwise.
func (s *Symbolizer) Learn(p *proc.Process) {
	opened := 0
	for i := range p.Mappings {
		m := &p.Mappings[i]
		if m.Inode == 0 || m.Path == "" || m.Path[0] != '/' {
			continue
		}
		s.mu.Lock()
		known := !s.reopen(s.files[m.Key()])
		skip := !known && (opened >= maxLearn || s.held >= maxHeld)
		if skip {
			s.stats.FilesNotHeld++
		}
		s.mu.Unlock()
		if known || skip {
			continue
		}
		opened++
		f := &file{path: m.Path}
		f.handle, f.err = proc.Open(p.PID, m)
		s.mu.Lock()
		if s.reopen(s.files[m.Key()]) {
			f.used, f.opened = s.round, s.round
			s.add(m.Key(), f)
		} else if f.handle != nil {
			f.handle.Close()
		}
		s.mu.Unlock()
	}
}

// Bounds on the files Learn holds open: per process, and in all.
const maxLearn, maxHeld = 1024, 8192

// add records a file. Callers hold s.mu.
func (s *Symbolizer) add(k proc.FileKey, f *file) {
	s.files[k] = f
	if f.handle != nil {
		s.held++
	}
}

// drop forgets a file and closes its handle. Callers hold s.mu.
func (s *Symbolizer) drop(k proc.FileKey) {
	if f := s.files[k]; f != nil && f.handle != nil {
		f.handle.Close()
		s.held--
	}
	delete(s.files, k)
}

// Stats returns the naming counters.
func (s *Symbolizer) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stats
}

// User names addr in process p. A return address (every user frame but
// the leaf) is named by the call instruction before it. The frames are never
// empty: an address that cannot be named becomes "module+0xoffset", or
// "[unknown]" when no module covers it.
func (s *Symbolizer) User(p *proc.Process, addr uint64, isReturn bool) ([]Frame, *proc.Mapping) {
	lookup := addr
	if isReturn && lookup > 0 {
		lookup--
	}
	m := p.Find(lookup)
	if m == nil {
		return unknown, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case m.Path == "[vdso]":
		return s.named(nameKey{file: proc.FileKey{Inode: ^uint64(0)}, addr: lookup - m.Start}, func() ([]Frame, bool) {
			return s.lookupVDSO(lookup - m.Start), true
		}), m
	case m.Inode == 0:
		// Anonymous executable memory: JIT code, named by the perf map
		// the runtime writes. Not cached: the JIT reuses addresses.
		if frames := s.perfMap(p).Lookup(lookup); frames != nil {
			return frames, m
		}
		return []Frame{{Function: fmt.Sprintf("%s+0x%x", moduleName(m), lookup-m.Start)}}, m
	}
	fileOffset := lookup - m.Start + m.Offset
	if f := s.files[m.Key()]; f != nil {
		f.used = s.round // a cached name keeps its file too
	}
	return s.named(nameKey{file: m.Key(), addr: fileOffset}, func() ([]Frame, bool) {
		return s.lookupFile(p, m, fileOffset)
	}), m
}

var unknown = []Frame{{Function: "[unknown]"}}

// named returns the frames at k, from the cache or from lookup, which
// says whether its answer may be cached.
func (s *Symbolizer) named(k nameKey, lookup func() ([]Frame, bool)) []Frame {
	if frames, ok := s.names[k]; ok {
		s.stats.CacheHits++
		return frames
	}
	s.stats.CacheMisses++
	frames, cache := lookup()
	if cache {
		s.names[k] = frames
	}
	return frames
}

// lookupFile names an address of m's file; the answer may be cached unless
// the file could not be opened (another process may open it later).
func (s *Symbolizer) lookupFile(p *proc.Process, m *proc.Mapping, fileOffset uint64) ([]Frame, bool) {
	if s.reopen(s.files[m.Key()]) {
		// Mapped after the process was first seen (dlopen), or its
		// earlier open failed: open it now.
		f := &file{path: m.Path, used: s.round, opened: s.round}
		f.handle, f.err = proc.Open(p.PID, m)
		s.add(m.Key(), f)
	}
	cache := s.files[m.Key()].handle != nil
	addr := fileOffset
	if bin := s.binary(m.Key()); bin != nil {
		if a, ok := bin.Addr(fileOffset); ok {
			addr = a
			if frames := bin.Lookup(a); frames != nil {
				return frames, cache
			}
			// Unnamed code is named by its function's start.
			if start, ok := bin.FuncStart(a); ok {
				addr = start
			}
		}
	}
	return []Frame{{Function: fmt.Sprintf("%s+0x%x", moduleName(m), addr)}}, cache
}

// binary returns the parsed binary of a learned file, parsing it on first
// use; nil when it cannot be read. Callers hold s.mu.
func (s *Symbolizer) binary(k proc.FileKey) *Binary {
	f := s.files[k]
	if f == nil {
		return nil
	}
	f.used = s.round
	if !f.parsed {
		f.parsed = true
		if f.err == nil {
			f.bin, f.err = OpenBinary(f.handle)
			s.stats.BinariesParsed++
		}
		if f.err != nil {
			s.stats.BinaryErrors++
		}
	}
	return f.bin
}

// Bias returns how far a process loaded mapping m from the addresses its
// binary was linked at: the runtime address minus the link-time address,
// the same for every address in m. A process-independent address is the
// runtime address minus it. ok is false when m's binary cannot be read, or
// for memory no file backs other than the vDSO.
func (s *Symbolizer) Bias(m *proc.Mapping) (bias uint64, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var bin *Binary
	switch {
	case m.Path == "[vdso]":
		bin = s.vdsoBinary()
	case m.Inode != 0:
		bin = s.binary(m.Key())
	}
	if bin == nil {
		return 0, false
	}
	return bin.segments.Bias(m)
}

// Layout returns the layout of mapping m's file, where its segments are
// loaded (for Layout.Bias and Layout.Span); false when the file cannot be
// read. m's file must be learned.
func (s *Symbolizer) Layout(m *proc.Mapping) (Layout, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	bin := s.binary(m.Key())
	if bin == nil {
		return nil, false
	}
	return slices.Clone(bin.segments), true
}

// Symbol returns the address the symbol called name (as Binary.Symbol
// spells it) of mapping m's file has in m's process: its link-time address
// plus m's load bias. m's file must be learned.
func (s *Symbolizer) Symbol(m *proc.Mapping, name string) (uint64, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	bin := s.binary(m.Key())
	if bin == nil {
		return 0, false
	}
	addr, ok := bin.Symbol(name)
	if !ok {
		return 0, false
	}
	bias, ok := bin.segments.Bias(m)
	return addr + bias, ok
}

// BuildID returns the build ID of a learned file, "" if unknown. It reads
// only the notes unless the file's tables are parsed already.
func (s *Symbolizer) BuildID(k proc.FileKey) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	f := s.files[k]
	switch {
	case f == nil:
		return ""
	case f.bin != nil:
		return f.bin.BuildID
	case f.buildID == nil:
		id := ""
		if f.handle != nil {
			if e, err := elf.NewFile(f.handle); err == nil {
				id = BuildID(e)
			}
		}
		f.buildID = &id
	}
	return *f.buildID
}

// GoVersion returns the Go release that built a learned file ("go1.26.0"),
// "" if it is not a Go binary or unknown. It reads the build information
// once per file.
func (s *Symbolizer) GoVersion(k proc.FileKey) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	f := s.files[k]
	if f == nil {
		return ""
	}
	if f.goVer == nil {
		v := ""
		if f.handle != nil {
			if bi, err := buildinfo.Read(f.handle); err == nil {
				v = bi.GoVersion
			}
		}
		f.goVer = &v
	}
	return *f.goVer
}

// maxNames bounds the address cache; past it the cache starts over.
const maxNames = 1 << 20

// Trim releases the files no address was named in for the last rounds, so
// a long-running caller does not keep every binary it ever saw (on a build
// machine, a new one every few seconds). A file that mapped reports a live
// process still maps is kept longer: a process that runs now and then (the
// agent itself, a daemon) would otherwise have its binary parsed anew each
// time. A released file is opened again when next needed. The agent calls
// it once a window; mapped may be nil.
func (s *Symbolizer) Trim(mapped func(proc.FileKey) bool) {
	const keepRounds, keepMappedRounds = 3, 30
	s.mu.Lock()
	defer s.mu.Unlock()
	s.round++
	dropped := map[proc.FileKey]bool{}
	for k, f := range s.files {
		if f.used+keepRounds > s.round ||
			f.used+keepMappedRounds > s.round && mapped != nil && mapped(k) {
			continue
		}
		s.drop(k)
		dropped[k] = true
	}
	if len(dropped) > 0 {
		for nk := range s.names {
			if dropped[nk.file] {
				delete(s.names, nk)
			}
		}
	}
	if len(s.names) > maxNames {
		s.names = map[nameKey][]Frame{}
	}
	s.perfMaps = map[*proc.Process]*PerfMap{} // JIT maps change: read anew
}

// moduleName is the short name of a mapping for unnamed frames.
func moduleName(m *proc.Mapping) string {
	if m.Path == "" {
		return "[anon]"
	}
	return filepath.Base(m.Path)
}

func (s *Symbolizer) lookupVDSO(offset uint64) []Frame {
	if vdso := s.vdsoBinary(); vdso != nil {
		if a, ok := vdso.Addr(offset); ok {
			if frames := vdso.Lookup(a); frames != nil {
				return frames
			}
		}
	}
	return []Frame{{Function: fmt.Sprintf("[vdso]+0x%x", offset)}}
}

// vdsoBinary returns flint's own vDSO image, read once; nil if unreadable.
// Callers hold s.mu.
func (s *Symbolizer) vdsoBinary() *Binary {
	if !s.vdsoDone {
		s.vdsoDone = true
		s.vdso, _ = readOwnVDSO()
	}
	return s.vdso
}

// readOwnVDSO parses flint's own vDSO: the kernel maps the same image into
// every process.
func readOwnVDSO() (*Binary, error) {
	image, err := VDSOImage()
	if err != nil {
		return nil, err
	}
	return OpenBinary(bytes.NewReader(image))
}

// VDSOImage returns a copy of flint's own vDSO, the ELF image the kernel
// maps into every process as [vdso].
func VDSOImage() ([]byte, error) {
	self, err := proc.Read(os.Getpid())
	if err != nil {
		return nil, err
	}
	for _, m := range self.Mappings {
		if m.Path != "[vdso]" {
			continue
		}
		mem, err := os.Open("/proc/self/mem")
		if err != nil {
			return nil, fmt.Errorf("read vdso: %w", err)
		}
		defer mem.Close()
		image := make([]byte, m.End-m.Start)
		if _, err := mem.ReadAt(image, int64(m.Start)); err != nil {
			return nil, fmt.Errorf("read vdso: %w", err)
		}
		return image, nil
	}
	return nil, fmt.Errorf("no vdso mapped")
}

// maxPerfMap is the most of a JIT map read, from its end: a JIT appends
// its newest code there, and a map of a long-lived JIT grows without end.
const maxPerfMap = 64 << 20

// perfMap reads the JIT symbol map of p once; an empty map if it has none.
// The map is /tmp/perf-NSPID.map as p sees it (proc.OpenInRoot): flint
// never reads the host's /tmp for it, nor follows a link out of it.
func (s *Symbolizer) perfMap(p *proc.Process) *PerfMap {
	if pm, ok := s.perfMaps[p]; ok {
		return pm
	}
	pm := &PerfMap{}
	s.perfMaps[p] = pm
	f, err := proc.OpenInRoot(p.PID, fmt.Sprintf("/tmp/perf-%d.map", p.NSPID))
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, syscall.ESRCH) {
			s.stats.PerfMapsRejected++ // a link, a FIFO, a device
		}
		return pm
	}
	defer f.Close()
	r, truncated, err := tail(f, maxPerfMap)
	if err != nil {
		s.stats.PerfMapsRejected++
		return pm
	}
	if truncated {
		s.stats.PerfMapsTruncated++
	}
	if read, err := ReadPerfMap(r); err == nil {
		s.perfMaps[p] = read
		return read
	}
	s.stats.PerfMapsRejected++
	return pm
}

// tail returns a reader of the last max bytes of f, from the first whole
// line in them; truncated reports that f was longer.
func tail(f *os.File, max int64) (r io.Reader, truncated bool, err error) {
	fi, err := f.Stat()
	if err != nil {
		return nil, false, err
	}
	if fi.Size() <= max {
		return io.LimitReader(f, max), false, nil // it may grow meanwhile
	}
	br := bufio.NewReaderSize(io.NewSectionReader(f, fi.Size()-max, max), 64<<10)
	for {
		_, err := br.ReadSlice('\n')
		if err == nil || err == io.EOF {
			break
		}
		if err != bufio.ErrBufferFull {
			return nil, true, err
		}
	}
	return br, true, nil
}

// Kernel names a kernel address from /proc/kallsyms; module is "" for the
// kernel image or the module's name.
func (s *Symbolizer) Kernel(addr uint64, isReturn bool) (frames []Frame, module string) {
	if isReturn && addr > 0 {
		addr--
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.kernDone {
		s.kernDone = true
		s.kernel, s.kernErr = loadKallsyms()
	}
	if s.kernel != nil {
		if f, mod, ok := s.kernel.Lookup(addr); ok {
			k := nameKey{addr: addr}
			if frames, ok := s.names[k]; ok {
				s.stats.CacheHits++
				return frames, mod
			}
			s.stats.CacheMisses++
			frames = []Frame{f}
			s.names[k] = frames
			return frames, mod
		}
	}
	return []Frame{{Function: fmt.Sprintf("[kernel]+0x%x", addr)}}, ""
}

// KernelError reports why kernel frames cannot be named, if they cannot.
func (s *Symbolizer) KernelError() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.kernErr
}

func loadKallsyms() (*KernelTable, error) {
	f, err := os.Open("/proc/kallsyms")
	if err != nil {
		return nil, fmt.Errorf("read kernel symbols: %w", err)
	}
	defer f.Close()
	return ReadKallsyms(bufio.NewReaderSize(f, 1<<16))
}

// Close releases the file handles.
func (s *Symbolizer) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k := range s.files {
		s.drop(k)
	}
	return nil
}
