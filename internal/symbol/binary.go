package symbol

import (
	"debug/elf"
	"fmt"
	"io"

	"github.com/flint-dev/flint/internal/proc"
)

// Binary is the naming data of one executable or shared library, parsed
// once and shared by every process that maps it.
type Binary struct {
	BuildID  string
	segments Layout
	goTable  *GoTable // nil unless a Go binary
	// elf names what the Go table does not (cgo, assembly without
	// pclntab entries) and everything in other binaries. In a Go binary it
	// is read on the first address the Go table misses: the symbol table
	// of a large Go binary costs megabytes and mostly repeats the pclntab.
	elf     *ELFTable
	elfFile *elf.File
	elfDone bool
	// starts name what elf does not; read on the first such address
	// (most binaries' symbols cover all their sampled code).
	starts     funcStarts
	startsFrom *elf.Section // .eh_frame_hdr until starts are read
	startsDone bool
}

// segment is a PT_LOAD program header: file bytes [off, off+size) are
// mapped at virtual address vaddr.
type segment struct {
	off, vaddr, size uint64
	exec             bool
}

// Layout is where an ELF file's loadable segments go: what a mapping of
// the file needs to tell its load bias (Bias).
type Layout []segment

// Segments returns the layout of f.
func Segments(f *elf.File) Layout {
	var l Layout
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD && p.Filesz > 0 {
			l = append(l, segment{off: p.Off, vaddr: p.Vaddr, size: p.Filesz, exec: p.Flags&elf.PF_X != 0})
		}
	}
	return l
}

// OpenBinary parses the ELF file r. The tables may read r lazily, so r must
// stay open as long as the Binary is used.
func OpenBinary(r io.ReaderAt) (*Binary, error) {
	f, err := elf.NewFile(r)
	if err != nil {
		return nil, fmt.Errorf("read ELF: %w", err)
	}
	b := &Binary{BuildID: BuildID(f), segments: Segments(f)}
	// A damaged pclntab (an error other than ErrNotGo) leaves the ELF
	// symbols to do what they can.
	b.goTable, _ = OpenGo(f)
	b.elfFile = f
	if b.goTable == nil {
		b.loadELF()
	}
	return b, nil
}

// Addr converts an offset in the file to the virtual address the binary's
// program headers give it, which is what symbol tables use. This is how an
// address in a process (minus mapping start, plus mapping offset) is named
// whatever the load bias: PIE executables, shared libraries, ASLR.
func (b *Binary) Addr(fileOffset uint64) (uint64, bool) {
	for _, s := range b.segments {
		if fileOffset >= s.off && fileOffset-s.off < s.size {
			return s.vaddr + (fileOffset - s.off), true
		}
	}
	return 0, false
}

// Bias returns how far mapping m of the file was loaded from where the
// binary was linked: the mapping's start minus the virtual address its
// first byte has in the segment it maps. A page may hold the end of one
// segment and the start of the next (lld packs them), so the executable
// segment the mapping overlaps is the one, as Addr finds for any address
// of code.
func (l Layout) Bias(m *proc.Mapping) (uint64, bool) {
	start, off, size := m.Start, m.Offset, m.End-m.Start
	var found *segment
	for i := range l {
		s := &l[i]
		if off < s.off+s.size && s.off < off+size && (found == nil || s.exec && !found.exec) {
			found = s
		}
	}
	if found == nil {
		return 0, false
	}
	return start - (found.vaddr + off - found.off), true
}

// Span returns the link-time addresses [lo, hi) the file's bytes are
// loaded at: from its lowest PT_LOAD's start to its highest one's last
// byte from the file (a zero-filled tail, .bss, is left out). A runtime
// address minus a mapping's Bias that falls inside is in the file's image:
// the same static object in every process that maps the file.
func (l Layout) Span() (lo, hi uint64) {
	for i, s := range l {
		if i == 0 || s.vaddr < lo {
			lo = s.vaddr
		}
		hi = max(hi, s.vaddr+s.size)
	}
	return lo, hi
}

// Lookup names the virtual address addr; nil when no table covers it.
func (b *Binary) Lookup(addr uint64) []Frame {
	if b.goTable != nil {
		if frames := b.goTable.Lookup(addr); frames != nil {
			return frames
		}
	}
	if b.loadELF(); b.elf != nil {
		return b.elf.Lookup(addr)
	}
	return nil
}

// FuncStart returns the start of the function containing the virtual
// address addr by the binary's unwind information (funcStarts), for code
// that Lookup cannot name.
func (b *Binary) FuncStart(addr uint64) (uint64, bool) {
	if b.loadELF(); !b.startsDone {
		b.startsDone = true
		b.starts = readFuncStarts(b.startsFrom)
		b.startsFrom = nil
	}
	return b.starts.find(addr)
}

// Symbol returns the link-time address of the ELF symbol called name, as
// ELFTable.Symbol finds it.
func (b *Binary) Symbol(name string) (uint64, bool) {
	if b.loadELF(); b.elf == nil {
		return 0, false
	}
	addr, _, ok := b.elf.Symbol(name)
	return addr, ok
}

func (b *Binary) loadELF() {
	if b.elfDone {
		return
	}
	b.elfDone = true
	b.elf, _ = NewELFTable(b.elfFile)
	b.startsFrom = b.elfFile.Section(".eh_frame_hdr")
	b.elfFile = nil
}
