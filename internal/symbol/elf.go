package symbol

import (
	"bytes"
	"cmp"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"sync"

	"github.com/ianlancetaylor/demangle"
)

// ELFTable names addresses from an ELF file's .symtab and .dynsym function
// symbols. It is safe for concurrent use.
//
// Names are kept as the symbol table spells them, in one string. C++ and
// Rust names are demangled by Lookup, the first time each function is asked
// for: demangling every name up front costs about 0.9 s for a 100 MB C++
// binary (node), while a profile touches a few thousand functions.
type ELFTable struct {
	// Entries [0, nfunc) are the functions Lookup answers with, sorted by
	// address, one per address; entries [nfunc, len) are every other named
	// symbol (aliases, objects), kept only for Symbol.
	addrs []uint64
	sizes []uint64 // functions: the extent Lookup uses; others: st_size
	names []elfName
	binds []uint8 // preferred binding first: see bindRank
	nfunc int
	blob  string

	byNameOnce sync.Once
	byName     []uint32 // indexes into the entries, sorted by name then bindRank

	mu        sync.Mutex
	demangled map[int]string // by function index; demangling takes ~10 us
}

// elfName is a name inside ELFTable.blob.
type elfName struct{ off, len uint32 }

// NewELFTable reads the function symbols of f's .symtab and .dynsym, merged
// and deduplicated. FUNC and IFUNC symbols name code; NOTYPE symbols in
// executable sections (hand-written assembly) are used only where no sized
// function covers their address. A symbol without a size covers up to the
// next function or the end of its section, whichever comes first.
//
// A file without symbols yields an empty table; a symbol section that cannot
// be read (truncated file, bad link) yields an error.
func NewELFTable(f *elf.File) (*ELFTable, error) {
	r := elfSymReader{f: f}
	// One table of each type: a hostile file could list the same large
	// section a thousand times.
	for _, typ := range []elf.SectionType{elf.SHT_SYMTAB, elf.SHT_DYNSYM} {
		i := slices.IndexFunc(f.Sections, func(s *elf.Section) bool { return s.Type == typ })
		if i < 0 {
			continue
		}
		if err := r.readSymbols(f.Sections[i]); err != nil {
			return nil, fmt.Errorf("read %s: %w", f.Sections[i].Name, err)
		}
	}
	return r.table(), nil
}

// Lookup returns the function containing addr as a single frame with no
// file or line, or nil when no function covers addr. C++ and Rust names are
// demangled without parameters, as perf shows them.
func (t *ELFTable) Lookup(addr uint64) []Frame {
	i, found := slices.BinarySearch(t.addrs[:t.nfunc], addr)
	if !found {
		i--
	}
	if i < 0 || addr-t.addrs[i] >= t.sizes[i] {
		return nil
	}
	return []Frame{{Function: t.functionName(i)}}
}

// functionName returns the name Lookup shows for function i.
func (t *ELFTable) functionName(i int) string {
	name := t.name(i)
	if !isMangled(name) {
		return name
	}
	t.mu.Lock()
	d, ok := t.demangled[i]
	t.mu.Unlock()
	if ok {
		return d
	}
	d = demangleName(name)
	t.mu.Lock()
	if t.demangled == nil {
		t.demangled = make(map[int]string)
	}
	t.demangled[i] = d
	t.mu.Unlock()
	return d
}

// Symbol returns the address and size of the symbol called name, spelled as
// the symbol table spells it (mangled for C++ and Rust, as `nm` prints it
// without -C). It knows functions, objects, TLS symbols (whose address is an
// offset in the TLS block) and NOTYPE symbols; for a function without a size
// it returns the extent Lookup uses. Among several symbols of that name a
// global one wins over a weak one, and a weak one over a local one.
func (t *ELFTable) Symbol(name string) (addr, size uint64, ok bool) {
	t.byNameOnce.Do(t.sortByName)
	i, found := slices.BinarySearchFunc(t.byName, name, func(e uint32, name string) int {
		return strings.Compare(t.name(int(e)), name)
	})
	if !found {
		return 0, 0, false
	}
	e := t.byName[i]
	return t.addrs[e], t.sizes[e], true
}

func (t *ELFTable) name(i int) string {
	n := t.names[i]
	return t.blob[n.off : n.off+n.len]
}

// sortByName builds the index Symbol searches. It runs on the first call
// only: probing by name is rare, and sorting 500k names costs tens of ms.
func (t *ELFTable) sortByName() {
	t.byName = make([]uint32, len(t.addrs))
	for i := range t.byName {
		t.byName[i] = uint32(i)
	}
	slices.SortFunc(t.byName, func(a, b uint32) int {
		if c := strings.Compare(t.name(int(a)), t.name(int(b))); c != 0 {
			return c
		}
		return cmp.Or(cmp.Compare(t.binds[a], t.binds[b]), cmp.Compare(t.addrs[a], t.addrs[b]))
	})
}

// maxDemangled bounds a demangled name (as a power of two: 16 KiB): hostile
// or template-heavy names can expand exponentially.
const maxDemangled = 14

// isMangled reports whether name looks like a C++ (Itanium ABI) or Rust
// (legacy or v0) mangled name.
func isMangled(name string) bool {
	return strings.HasPrefix(name, "_Z") || strings.HasPrefix(name, "_R")
}

// demangleName returns the C++ or Rust name without parameters, or name
// itself when it is not mangled (C, Go) or does not demangle.
func demangleName(name string) string {
	if !isMangled(name) {
		return name
	}
	return demangle.Filter(name, demangle.NoParams, demangle.NoEnclosingParams, demangle.MaxLength(maxDemangled))
}

// elfSym is a symbol read from a table, its name still in that table's
// string section. It is kept small: a big binary has 500k of them.
type elfSym struct {
	addr, size uint64
	rank       uint64 // see symRank
	nameOff    uint32 // in elfSymReader.strtabs[strtab]
	shndx      uint16
	strtab     uint8
}

const (
	symFunc  = iota // FUNC or IFUNC in an allocated section: code
	symLabel        // NOTYPE in an executable section: code if nothing better covers it
	symOther        // anything else with a name: found by Symbol only
)

// bindRank orders bindings by preference: a global name is the one callers
// know, a local one may be a static helper of the same name.
func bindRank(b elf.SymBind) uint8 {
	switch b {
	case elf.STB_GLOBAL:
		return 0
	case elf.STB_WEAK:
		return 1
	default:
		return 2
	}
}

type elfSymReader struct {
	f       *elf.File
	strtabs [][]byte
	syms    []elfSym
}

func (r *elfSymReader) name(s *elfSym) []byte {
	return r.strtabs[s.strtab][s.nameOff : s.nameOff+s.nameLen()]
}

// symRank packs what decides which of the names at one address Lookup
// shows, most significant first: code before data, sized before unsized,
// fewer leading underscores (malloc, not __libc_malloc), global before weak
// before local, the shorter name. One integer instead of five fields keeps
// sorting a big binary's symbols cheap.
func symRank(kind uint8, sized bool, name []byte, bind uint8) uint64 {
	r := uint64(kind) << 62
	if !sized {
		r |= 1 << 61
	}
	r |= uint64(min(leadingUnderscores(name), math.MaxUint8)) << 53
	r |= uint64(bind) << 51
	return r | uint64(len(name)) // at most 32 bits: string tables are
}

func (s *elfSym) kind() uint8     { return uint8(s.rank >> 62) }
func (s *elfSym) bind() uint8     { return uint8(s.rank>>51) & 3 }
func (s *elfSym) nameLen() uint32 { return uint32(s.rank) }

// readSymbols appends the named, defined symbols of the symbol table s.
func (r *elfSymReader) readSymbols(s *elf.Section) error {
	var entSize uint64
	switch r.f.Class {
	case elf.ELFCLASS64:
		entSize = elf.Sym64Size
	case elf.ELFCLASS32:
		entSize = elf.Sym32Size
	default:
		return fmt.Errorf("unknown ELF class %v", r.f.Class)
	}
	if int(s.Link) >= len(r.f.Sections) || s.Link == 0 {
		return fmt.Errorf("string table index %d out of range", s.Link)
	}
	strSec := r.f.Sections[s.Link]
	if strSec.Type != elf.SHT_STRTAB {
		return fmt.Errorf("linked section %s is %v, not a string table", strSec.Name, strSec.Type)
	}
	data, err := readSectionData(s)
	if err != nil {
		return err
	}
	strtab, err := readSectionData(strSec)
	if err != nil {
		return fmt.Errorf("read %s: %w", strSec.Name, err)
	}
	if uint64(len(strtab)) > math.MaxUint32 {
		return fmt.Errorf("string table %s of %d bytes too large", strSec.Name, len(strtab))
	}
	tab := uint8(len(r.strtabs))
	r.strtabs = append(r.strtabs, strtab)

	bo := r.f.ByteOrder
	n := uint64(len(data)) / entSize
	r.syms = slices.Grow(r.syms, int(n))
	// Entry 0 is the reserved undefined symbol.
	for i := uint64(1); i < n; i++ {
		e := data[i*entSize : (i+1)*entSize]
		var (
			nameOff    uint32
			info       byte
			shndx      uint16
			addr, size uint64
		)
		if entSize == elf.Sym64Size {
			nameOff = bo.Uint32(e[0:4])
			info = e[4]
			shndx = bo.Uint16(e[6:8])
			addr = bo.Uint64(e[8:16])
			size = bo.Uint64(e[16:24])
		} else {
			nameOff = bo.Uint32(e[0:4])
			addr = uint64(bo.Uint32(e[4:8]))
			size = uint64(bo.Uint32(e[8:12]))
			info = e[12]
			shndx = bo.Uint16(e[14:16])
		}
		// Undefined (imports), absolute, common and extended-index symbols
		// name no address inside this file's sections.
		if shndx == uint16(elf.SHN_UNDEF) || shndx >= uint16(elf.SHN_LORESERVE) || int(shndx) >= len(r.f.Sections) {
			continue
		}
		name := symtabString(strtab, nameOff)
		// '$' starts ARM mapping symbols ($x, $d), which mark instruction
		// sets, not functions.
		if len(name) == 0 || name[0] == '$' {
			continue
		}
		sec := r.f.Sections[shndx]
		kind := uint8(symOther)
		switch elf.ST_TYPE(info) {
		case elf.STT_FUNC, elf.STT_GNU_IFUNC:
			if sec.Flags&elf.SHF_ALLOC != 0 {
				kind = symFunc
			}
		case elf.STT_NOTYPE:
			if sec.Flags&(elf.SHF_ALLOC|elf.SHF_EXECINSTR) == elf.SHF_ALLOC|elf.SHF_EXECINSTR && !bytes.HasPrefix(name, []byte(".L")) {
				kind = symLabel
			}
		case elf.STT_OBJECT, elf.STT_TLS, elf.STT_COMMON:
		default: // SECTION, FILE and processor-specific types
			continue
		}
		r.syms = append(r.syms, elfSym{
			addr:    addr,
			size:    size,
			rank:    symRank(kind, size > 0, name, bindRank(elf.ST_BIND(info))),
			nameOff: nameOff,
			shndx:   shndx,
			strtab:  tab,
		})
	}
	return nil
}

// compare orders symbols by address and, at one address, puts first the
// name Lookup shows (see symRank), then any name, to stay deterministic.
func (r *elfSymReader) compare(a, b *elfSym) int {
	if a.addr != b.addr {
		return cmp.Compare(a.addr, b.addr)
	}
	if a.rank != b.rank {
		return cmp.Compare(a.rank, b.rank)
	}
	return bytes.Compare(r.name(a), r.name(b))
}

// table chooses, per address, the function Lookup answers with, bounds
// zero-size functions and copies the names into one string.
func (r *elfSymReader) table() *ELFTable {
	syms := r.syms
	slices.SortFunc(syms, func(a, b elfSym) int { return r.compare(&a, &b) })
	// The same symbol usually appears in both .symtab and .dynsym.
	syms = slices.CompactFunc(syms, func(a, b elfSym) bool {
		return a.addr == b.addr && a.rank == b.rank && bytes.Equal(r.name(&a), r.name(&b))
	})

	funcs := make([]int, 0, len(syms))
	var (
		coveredTo uint64 // end of the sized functions seen so far
		lastAddr  uint64
		haveLast  bool
	)
	for i, s := range syms {
		kind := s.kind()
		if kind == symOther || (haveLast && s.addr == lastAddr) {
			continue
		}
		if kind == symLabel && s.addr < coveredTo {
			continue // a label inside a function, e.g. a loop in assembly
		}
		if kind == symFunc && s.size > 0 {
			coveredTo = max(coveredTo, addrAdd(s.addr, s.size))
		}
		funcs = append(funcs, i)
		lastAddr, haveLast = s.addr, true
	}

	var blobSize uint64
	for _, s := range syms {
		blobSize += uint64(s.nameLen())
	}
	if blobSize > math.MaxUint32 {
		// Offsets are 32-bit; no real binary has 4 GiB of symbol names.
		return &ELFTable{}
	}
	t := &ELFTable{
		addrs: make([]uint64, 0, len(syms)),
		sizes: make([]uint64, 0, len(syms)),
		names: make([]elfName, 0, len(syms)),
		binds: make([]uint8, 0, len(syms)),
		nfunc: len(funcs),
	}
	var blob strings.Builder
	blob.Grow(int(blobSize))
	add := func(s *elfSym, size uint64) {
		t.addrs = append(t.addrs, s.addr)
		t.sizes = append(t.sizes, size)
		t.binds = append(t.binds, s.bind())
		t.names = append(t.names, elfName{uint32(blob.Len()), s.nameLen()})
		blob.Write(r.name(s))
	}
	inTable := make([]bool, len(syms))
	for j, i := range funcs {
		s := &syms[i]
		inTable[i] = true
		size := s.size
		if size == 0 {
			sec := r.f.Sections[s.shndx]
			end := addrAdd(sec.Addr, sec.Size)
			if j+1 < len(funcs) {
				end = min(end, syms[funcs[j+1]].addr)
			}
			if end > s.addr {
				size = end - s.addr
			}
		}
		add(s, size)
	}
	for i := range syms {
		if !inTable[i] {
			add(&syms[i], syms[i].size)
		}
	}
	t.blob = blob.String()
	return t
}

// readSectionData reads an uncompressed section.
func readSectionData(s *elf.Section) ([]byte, error) {
	if s.Type == elf.SHT_NOBITS {
		return nil, errors.New("section has no data in the file")
	}
	if s.Flags&elf.SHF_COMPRESSED != 0 {
		return nil, errors.New("compressed symbol sections are not supported")
	}
	data, err := readChecked(s, s.Size)
	if err != nil {
		return nil, fmt.Errorf("section at offset %d: %w", s.Offset, err)
	}
	return data, nil
}

// readChecked reads size bytes of a section or segment after checking that
// the file really holds its last byte, so a hostile size cannot make us
// allocate more than the file's own size.
func readChecked(r io.ReaderAt, size uint64) ([]byte, error) {
	if size == 0 {
		return nil, nil
	}
	if size > math.MaxInt64 {
		return nil, fmt.Errorf("size %d too large", size)
	}
	var last [1]byte
	if _, err := r.ReadAt(last[:], int64(size-1)); err != nil {
		return nil, fmt.Errorf("%d bytes extend past the end of the file", size)
	}
	data := make([]byte, size)
	if _, err := r.ReadAt(data, 0); err != nil {
		return nil, err
	}
	return data, nil
}

// symtabString returns the NUL-terminated string at off in tab, or nil when off
// is out of range.
func symtabString(tab []byte, off uint32) []byte {
	if uint64(off) >= uint64(len(tab)) {
		return nil
	}
	s := tab[off:]
	if i := bytes.IndexByte(s, 0); i >= 0 {
		s = s[:i]
	}
	return s
}

func leadingUnderscores(name []byte) int {
	n := 0
	for n < len(name) && name[n] == '_' {
		n++
	}
	return n
}

// addrAdd returns a+b, or the largest address if that overflows.
func addrAdd(a, b uint64) uint64 {
	if a+b < a {
		return ^uint64(0)
	}
	return a + b
}
