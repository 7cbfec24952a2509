// Package unwind turns an ELF file's call frame information (.eh_frame and
// .debug_frame) into compact rows a BPF stack walker can follow where code
// has no frame pointers.
package unwind

import (
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// CFAKind says how the walker finds the canonical frame address (CFA) at a PC.
type CFAKind uint8

const (
	CFAUndefined CFAKind = iota // no CFI covers this PC: the walker uses frame pointers here
	CFARSP                      // CFA = RSP + Offset
	CFARBP                      // CFA = RBP + Offset
	CFAPLT                      // CFA = RSP + 8, plus 8 more when (RIP & 15) >= Offset: the DWARF expression every PLT's FDE uses (Offset = its threshold, 11 in .plt, 10 in some .plt.sec variants: take the literal from the expression)
	CFASignal                   // a signal trampoline (FDE with 'S' augmentation, e.g. glibc __restore_rt): the caller's registers are in the ucontext at RSP
	CFAEnd                      // the return address is undefined (DW_CFA_undefined rip): the outermost frame (_start, clone3's thread start); the walk ends here, complete
)

// Row is the unwind rule from PC up to the next row's PC.
type Row struct {
	PC        uint64 // ELF virtual address (file address, not runtime address)
	CFAOffset int32
	RBPOffset int16 // the caller's RBP is saved at CFA + RBPOffset; 0: RBP still holds the caller's value
	CFA       CFAKind
}

// Stats counts what Parse met and could not express.
type Stats struct {
	FDEs int // FDE entries read from both sections, including the ones dropped
	Rows int // rows returned

	// Unsupported counts rows, before identical neighbours are merged,
	// whose rule no CFAKind expresses: a DW_CFA_def_cfa_expression other
	// than the PLT one, a CFA register other than RSP and RBP, RBP saved in
	// a register or by an expression, a return address rule other than
	// offset(-8). They are emitted as CFAUndefined.
	Unsupported int

	// Overlapping counts FDEs dropped because their range overlaps an FDE
	// read before them (.eh_frame is read before .debug_frame, so a
	// .debug_frame that repeats .eh_frame counts each FDE here).
	Overlapping int

	// Invalid counts FDEs dropped because they, or their CIE, could not be
	// read: an unknown instruction or pointer encoding, an operand past
	// the entry's end, a CIE pointer to no CIE. Their ranges get
	// CFAUndefined.
	Invalid int

	// FirstInvalid says why the first CIE or FDE that could not be read
	// was dropped, for logs; nil if none was.
	FirstInvalid error
}

var (
	// ErrNotSupported is returned for files other than 64-bit little-endian x86-64.
	ErrNotSupported = errors.New("unwind tables are built for x86-64 ELF64 only")
	// ErrNoCFI is returned for files with neither .eh_frame nor .debug_frame.
	ErrNoCFI = errors.New("no .eh_frame or .debug_frame")
)

const (
	// maxRows bounds the rows of one file, 128 MiB of them, when Parse
	// has no smaller limit, and its FDEs (192 MiB). libLLVM 19, 6 MB of
	// .eh_frame, has 1.2 million rows.
	maxRows = 8 << 20
	// maxSection bounds the bytes read for one section, also the
	// decompressed size of a compressed .debug_frame.
	maxSection = 256 << 20
	// maxCIEs bounds the CIEs of one section: linkers merge identical
	// CIEs, so glibc has 3 and libLLVM 1.
	maxCIEs = 1 << 20
	// maxDepth bounds DW_CFA_remember_state nesting; compilers nest one
	// or two deep.
	maxDepth = 32
)

// DWARF register numbers of x86-64 (System V psABI, figure 3.36).
const (
	regRBP = 6
	regRSP = 7
)

// Parse reads .eh_frame and .debug_frame (when present; some binaries have
// only .debug_frame) of f and returns rows sorted by PC, each PC once, with
// no two neighbours alike. Where FDEs overlap, the one read first wins,
// .eh_frame before .debug_frame. Every FDE's range ends with a CFAUndefined
// row unless the next FDE starts there, so a PC between FDEs or past the
// last one gets CFAUndefined, and a PC before the first row has no row.
//
// An FDE that cannot be read is dropped and counted in Stats.Invalid. Parse
// fails when a section cannot be read or its entries cannot be delimited
// (a length past the section's end), or with ErrTooManyRows when the file
// has more than limit rows (8 Mi when limit is not positive or larger),
// as soon as it has: a table larger than the walker's whole memory is never read into
// the agent's. It returns ErrNotSupported for files other than x86-64
// ELF64 and ErrNoCFI for files with neither section.
func Parse(f *elf.File, limit int) ([]Row, Stats, error) {
	if f.Class != elf.ELFCLASS64 || f.Data != elf.ELFDATA2LSB || f.Machine != elf.EM_X86_64 {
		return nil, Stats{}, fmt.Errorf("%v %v %v: %w", f.Machine, f.Class, f.Data, ErrNotSupported)
	}
	var secs []frameSection
	for _, name := range []string{".eh_frame", ".debug_frame"} {
		s := f.Section(name)
		if s == nil || s.Type == elf.SHT_NOBITS {
			continue
		}
		if s.Size > maxSection {
			return nil, Stats{}, fmt.Errorf("read %s: %d bytes, more than %d", name, s.Size, maxSection)
		}
		data, err := s.Data()
		if err != nil {
			return nil, Stats{}, fmt.Errorf("read %s: %w", name, err)
		}
		secs = append(secs, frameSection{name: name, data: data, addr: s.Addr, debug: name == ".debug_frame"})
	}
	if len(secs) == 0 {
		return nil, Stats{}, ErrNoCFI
	}
	var text, got uint64
	if s := f.Section(".text"); s != nil {
		text = s.Addr
	}
	if s := f.Section(".got"); s != nil {
		got = s.Addr
	}
	if limit <= 0 || limit > maxRows {
		limit = maxRows
	}
	return parse(secs, text, got, limit)
}

// frameSection is the contents of .eh_frame or .debug_frame.
type frameSection struct {
	name  string
	data  []byte
	addr  uint64 // pcrel pointers are relative to addr plus the field's offset
	debug bool   // .debug_frame: CIE ids are all ones, CIE pointers are section offsets
	base  uint32 // the bytes of the sections before this one
}

// parse turns the sections, .eh_frame first and each at most maxSection
// bytes, into at most limit rows. text and got are the addresses textrel
// and datarel pointers are relative to.
func parse(secs []frameSection, text, got uint64, limit int) ([]Row, Stats, error) {
	p := parser{secs: secs, text: text, got: got, cieAt: make(map[int]uint32), limit: limit}
	n := 0
	for i := range secs {
		secs[i].base = uint32(n)
		n += len(secs[i].data)
	}
	// In glibc, libstdc++, libpython and libLLVM an FDE takes 40 to 55
	// bytes of .eh_frame.
	p.fdes = make([]fde, 0, n/36)
	for i := range secs {
		if err := p.readSection(i); err != nil {
			return nil, Stats{}, err
		}
	}
	if err := p.buildRows(); err != nil {
		return nil, Stats{}, err
	}
	p.stats.Rows = len(p.rows)
	return p.rows, p.stats, nil
}

// parser holds what Parse builds: CIEs and FDEs of the first pass, rows of
// the second.
type parser struct {
	secs      []frameSection
	text, got uint64

	cies  []cie
	cieAt map[int]uint32 // section offset -> index in cies, for the section being read
	fdes  []fde
	rows  []Row
	limit int // of rows
	stats Stats

	stack [maxDepth]state // DW_CFA_remember_state, here to run without allocating
}

// cie is a Common Information Entry: what its FDEs share.
type cie struct {
	codeAlign uint64
	dataAlign int64
	ra        uint64 // return address register
	initial   state  // after the initial instructions: what DW_CFA_restore restores
	sec       uint8  // index in parser.secs
	fdeEnc    uint8  // DW_EH_PE_* of FDE addresses
	addrSize  uint8
	segSize   uint8 // .debug_frame version 4: segment selector bytes before an FDE's address
	augData   bool  // 'z': FDEs carry augmentation data after their range
	signal    bool  // 'S': FDEs describe signal trampolines
}

// fde is a Frame Description Entry read in the first pass.
type fde struct {
	start uint64
	size  uint32
	// The instructions, as offsets in the sections laid end to end:
	// unique, growing in reading order, and 32 bits as sections are at
	// most maxSection.
	insOff, insEnd uint32
	cie            uint32 // index in parser.cies
}

func (f *fde) end() uint64 { return f.start + uint64(f.size) }

// before orders FDEs by start, ties in reading order.
func (f *fde) before(g *fde) bool {
	return f.start < g.start || f.start == g.start && f.insOff < g.insOff
}

// sortFDEs sorts fdes with before. Linkers lay out .eh_frame in long
// ascending runs (glibc: 200 runs of 3700 FDEs; libLLVM: 670 of 118,000),
// so merging the runs bottom up takes a few passes over cheap
// comparisons: 5 (glibc) to 13 (libLLVM) times faster than slices.SortFunc.
func sortFDEs(fdes []fde) {
	bounds := []int{0} // where each run starts, then len(fdes)
	for i := 1; i < len(fdes); i++ {
		if fdes[i].before(&fdes[i-1]) {
			bounds = append(bounds, i)
		}
	}
	if len(bounds) == 1 {
		return
	}
	bounds = append(bounds, len(fdes))
	src, dst := fdes, make([]fde, len(fdes))
	for len(bounds) > 2 {
		// Runs i and i+1 merge into run k; k <= i, so bounds is
		// rewritten in place behind the reads.
		k := 0
		for i := 0; i+1 < len(bounds); i += 2 {
			lo, mid := bounds[i], bounds[i+1]
			hi := mid
			if i+2 < len(bounds) {
				hi = bounds[i+2]
			}
			merge(dst[lo:hi], src[lo:mid], src[mid:hi])
			bounds[k] = lo
			k++
		}
		bounds[k] = len(fdes)
		bounds = bounds[:k+1]
		src, dst = dst, src
	}
	if &src[0] != &fdes[0] {
		copy(fdes, src)
	}
}

// merge merges sorted a and b into dst, a's first on ties.
func merge(dst, a, b []fde) {
	i, j, k := 0, 0, 0
	for i < len(a) && j < len(b) {
		if b[j].before(&a[i]) {
			dst[k] = b[j]
			j++
		} else {
			dst[k] = a[i]
			i++
		}
		k++
	}
	k += copy(dst[k:], a[i:])
	copy(dst[k:], b[j:])
}

// readSection reads the CIEs and FDEs of section i.
func (p *parser) readSection(i int) error {
	s := &p.secs[i]
	clear(p.cieAt)
	for off := 0; off < len(s.data); {
		c := cursor{b: s.data, i: off}
		length := uint64(c.u32())
		offSize := 4
		if length == math.MaxUint32 {
			length, offSize = c.u64(), 8
		}
		if c.bad {
			return fmt.Errorf("parse %s entry at %#x: truncated length", s.name, off)
		}
		if length == 0 {
			// A terminator. Unwinders that find FDEs through
			// .eh_frame_hdr, and readelf, read on past it.
			off = c.i
			continue
		}
		if length > uint64(len(s.data)-c.i) {
			return fmt.Errorf("parse %s entry at %#x: length %#x runs past the section's end at %#x", s.name, off, length, len(s.data))
		}
		end := c.i + int(length)
		c.b = s.data[:end]
		idOff := c.i
		// .eh_frame keeps 4-byte ids in 64-bit entries (LSB 10.6.1.1).
		var id uint64
		if s.debug && offSize == 8 {
			id = c.u64()
		} else {
			id = uint64(c.u32())
		}
		switch {
		case c.bad:
			return fmt.Errorf("parse %s entry at %#x: truncated id", s.name, off)
		case !s.debug && id == 0, s.debug && (id == math.MaxUint32 || id == math.MaxUint64):
			if len(p.cieAt) == maxCIEs {
				return fmt.Errorf("parse %s entry at %#x: more than %d CIEs", s.name, off, maxCIEs)
			}
			// A CIE that cannot be read is left out: its FDEs
			// count as Invalid.
			ci, err := p.readCIE(s, &c)
			if err != nil {
				p.note("parse %s cie at %#x: %w", s.name, off, err)
				break
			}
			ci.sec = uint8(i)
			p.cieAt[off] = uint32(len(p.cies))
			p.cies = append(p.cies, ci)
		default:
			p.stats.FDEs++
			cieOff := int64(id) // .debug_frame: a section offset
			if !s.debug {
				cieOff = int64(idOff) - int64(id) // .eh_frame: back from the pointer itself
			}
			ci, ok := p.cieAt[int(cieOff)]
			if !ok {
				p.stats.Invalid++
				p.note("parse %s fde at %#x: no cie at %#x", s.name, off, cieOff)
				break
			}
			f, err := p.readFDE(s, &c, ci)
			switch {
			case err != nil:
				p.stats.Invalid++
				p.note("parse %s fde at %#x: %w", s.name, off, err)
			case f.size == 0:
			case len(p.fdes) == maxRows:
				return fmt.Errorf("parse %s fde at %#x: more than %d FDEs", s.name, off, maxRows)
			default:
				p.fdes = append(p.fdes, f)
			}
		}
		off = end
	}
	return nil
}

// readCIE reads a CIE's fields after its id and runs its initial instructions.
func (p *parser) readCIE(s *frameSection, c *cursor) (cie, error) {
	ci := cie{addrSize: 8}
	version := c.u8()
	if version != 1 && version != 3 && version != 4 {
		return ci, fmt.Errorf("version %d", version)
	}
	aug := c.cstring()
	if string(aug) == "eh" {
		c.skip(8) // GCC 2's exception table address
	}
	if version == 4 {
		ci.addrSize, ci.segSize = c.u8(), c.u8()
		if ci.addrSize != 4 && ci.addrSize != 8 {
			return ci, fmt.Errorf("address size %d", ci.addrSize)
		}
	}
	ci.codeAlign = c.uleb()
	ci.dataAlign = c.sleb()
	if version == 1 {
		ci.ra = uint64(c.u8())
	} else {
		ci.ra = c.uleb()
	}
	switch {
	case len(aug) > 0 && aug[0] == 'z':
		ci.augData = true
		n := c.uleb()
		if n > uint64(len(c.b)-c.i) {
			return ci, errors.New("augmentation data past the entry's end")
		}
		a := cursor{b: c.b[:c.i+int(n)], i: c.i}
	chars:
		for _, ch := range aug[1:] {
			switch ch {
			case 'L':
				a.u8() // LSDA encoding: FDEs' augmentation data is skipped whole
			case 'P':
				enc := a.u8()
				if _, ok := a.value(enc&0x0f, ci.addrSize); !ok {
					return ci, fmt.Errorf("personality pointer encoding %#x", enc)
				}
			case 'R':
				ci.fdeEnc = a.u8()
			case 'S':
				ci.signal = true
			default:
				// Unknown to us; the data length still tells
				// where the instructions start, as for libgcc.
				break chars
			}
		}
		if a.bad {
			return ci, errors.New("augmentation data past its length")
		}
		c.i += int(n)
	case len(aug) > 0 && string(aug) != "eh":
		return ci, fmt.Errorf("augmentation %q", aug)
	}
	if c.bad {
		return ci, errors.New("truncated")
	}
	if err := p.run(s, &ci, c, &ci.initial, 0, 0, false); err != nil {
		return ci, fmt.Errorf("initial instructions: %w", err)
	}
	return ci, nil
}

// readFDE reads an FDE's fields after its CIE pointer.
func (p *parser) readFDE(s *frameSection, c *cursor, ci uint32) (fde, error) {
	cp := &p.cies[ci]
	c.skip(uint64(cp.segSize))
	start, ok := p.pointer(s, c, cp.fdeEnc, cp.addrSize)
	if !ok {
		return fde{}, fmt.Errorf("address encoding %#x", cp.fdeEnc)
	}
	size, _ := c.value(cp.fdeEnc&0x0f, cp.addrSize) // pointer checked the format
	if cp.augData {
		c.skip(c.uleb())
	}
	switch {
	case c.bad:
		return fde{}, errors.New("truncated")
	case size > math.MaxUint32 || start+size < start:
		return fde{}, fmt.Errorf("range %#x at %#x", size, start)
	}
	return fde{start: start, size: uint32(size), insOff: s.base + uint32(c.i), insEnd: s.base + uint32(len(c.b)), cie: ci}, nil
}

// DW_EH_PE_* pointer encodings (LSB 10.5.1): a format in the low nibble,
// what the value is relative to in the high one.
const (
	peAbsptr  = 0x00
	peULEB128 = 0x01
	peUdata2  = 0x02
	peUdata4  = 0x03
	peUdata8  = 0x04
	peSigned  = 0x08 // absptr, signed
	peSLEB128 = 0x09
	peSdata2  = 0x0a
	peSdata4  = 0x0b
	peSdata8  = 0x0c

	pePCRel    = 0x10
	peTextRel  = 0x20
	peDataRel  = 0x30
	peIndirect = 0x80
)

// pointer reads an address encoded as enc. pcrel is relative to the
// field's own address; funcrel, aligned and indirect addresses are not
// resolved (no compiler writes them for FDE addresses).
func (p *parser) pointer(s *frameSection, c *cursor, enc, addrSize uint8) (uint64, bool) {
	at := s.addr + uint64(c.i)
	if enc&peIndirect != 0 { // DW_EH_PE_omit (0xff) too
		return 0, false
	}
	v, ok := c.value(enc&0x0f, addrSize)
	if !ok || c.bad {
		return 0, false
	}
	switch enc & 0x70 {
	case 0:
		return v, true
	case pePCRel:
		return v + at, true
	case peTextRel:
		return v + p.text, true
	case peDataRel:
		return v + p.got, true
	}
	return 0, false
}

// value reads a value of DW_EH_PE_* format format; false for no such
// format.
func (c *cursor) value(format, addrSize uint8) (uint64, bool) {
	switch format {
	case peAbsptr:
		return c.uint(addrSize), true
	case peSigned:
		if addrSize == 4 {
			return uint64(int64(int32(c.u32()))), true
		}
		return c.u64(), true
	case peULEB128:
		return c.uleb(), true
	case peUdata2:
		return uint64(c.u16()), true
	case peUdata4:
		return uint64(c.u32()), true
	case peUdata8, peSdata8:
		return c.u64(), true
	case peSLEB128:
		return uint64(c.sleb()), true
	case peSdata2:
		return uint64(int64(int16(c.u16()))), true
	case peSdata4:
		return uint64(int64(int32(c.u32()))), true
	}
	return 0, false
}

// buildRows sorts the FDEs, drops overlapping ones and runs the rest.
func (p *parser) buildRows() error {
	sortFDEs(p.fdes)
	kept := p.fdes[:0]
	for _, f := range p.fdes {
		if n := len(kept); n > 0 && f.start < kept[n-1].end() {
			// The one read later goes. Replacing the previous one
			// cannot overlap the one before it, which ends at or
			// before the previous one's start.
			p.stats.Overlapping++
			if f.insOff < kept[n-1].insOff {
				kept[n-1] = f
			}
			continue
		}
		kept = append(kept, f)
	}
	p.fdes = kept

	// A row, gap rows included, takes 3.2 to 3.7 bytes of instructions
	// in the files named above.
	n := 0
	for _, f := range p.fdes {
		n += int(f.insEnd-f.insOff) / 3
	}
	p.rows = make([]Row, 0, min(n, p.limit))
	var end uint64
	for i := range p.fdes {
		f := &p.fdes[i]
		if i > 0 && end != f.start && !p.add(end, Row{}) {
			return ErrTooManyRows
		}
		mark, unsupported := len(p.rows), p.stats.Unsupported
		err := p.runFDE(f)
		if err == ErrTooManyRows {
			return err
		}
		if err != nil {
			p.rows, p.stats.Unsupported = p.rows[:mark], unsupported
			p.stats.Invalid++
			p.note("parse %s fde for %#x..%#x: %w", p.secs[p.cies[f.cie].sec].name, f.start, f.end(), err)
			if !p.add(f.start, Row{}) {
				return ErrTooManyRows
			}
		}
		end = f.end()
	}
	if len(p.fdes) > 0 && !p.add(end, Row{}) {
		return ErrTooManyRows
	}
	return nil
}

// ErrTooManyRows reports a file with more rows than Parse's limit.
var ErrTooManyRows = errors.New("more rows than the unwind tables hold")

// note keeps the first CIE or FDE dropped, and why, in Stats.FirstInvalid.
func (p *parser) note(format string, args ...any) {
	if p.stats.FirstInvalid == nil {
		p.stats.FirstInvalid = fmt.Errorf(format, args...)
	}
}

// runFDE appends the rows of f.
func (p *parser) runFDE(f *fde) error {
	ci := &p.cies[f.cie]
	if ci.signal {
		if !p.add(f.start, Row{CFA: CFASignal}) {
			return ErrTooManyRows
		}
		return nil
	}
	s := &p.secs[ci.sec]
	c := cursor{b: s.data[:f.insEnd-s.base], i: int(f.insOff - s.base)}
	st := ci.initial
	return p.run(s, ci, &c, &st, f.start, f.end(), true)
}

// DW_CFA_* instructions (DWARF 5, 6.4.2, and GNU extensions).
const (
	cfaAdvanceLoc = 0x40 // high two bits; the low six are an operand
	cfaOffset     = 0x80
	cfaRestore    = 0xc0

	cfaNop                       = 0x00
	cfaSetLoc                    = 0x01
	cfaAdvanceLoc1               = 0x02
	cfaAdvanceLoc2               = 0x03
	cfaAdvanceLoc4               = 0x04
	cfaOffsetExtended            = 0x05
	cfaRestoreExtended           = 0x06
	cfaUndefined                 = 0x07
	cfaSameValue                 = 0x08
	cfaRegister                  = 0x09
	cfaRememberState             = 0x0a
	cfaRestoreState              = 0x0b
	cfaDefCFA                    = 0x0c
	cfaDefCFARegister            = 0x0d
	cfaDefCFAOffset              = 0x0e
	cfaDefCFAExpression          = 0x0f
	cfaExpression                = 0x10
	cfaOffsetExtendedSF          = 0x11
	cfaDefCFASF                  = 0x12
	cfaDefCFAOffsetSF            = 0x13
	cfaValOffset                 = 0x14
	cfaValOffsetSF               = 0x15
	cfaValExpression             = 0x16
	cfaGNUArgsSize               = 0x2e
	cfaGNUNegativeOffsetExtended = 0x2f
)

// state is the part of a CFA table row the walker uses.
type state struct {
	cfa    cfaRule
	cfaReg uint64
	cfaOff int64 // cfaPLTExpr: the threshold
	rbp    rule
	ra     rule
}

type cfaRule uint8

const (
	cfaUnset   cfaRule = iota
	cfaReg             // cfaReg + cfaOff
	cfaPLTExpr         // the PLT expression
	cfaExpr            // any other expression
)

// rule is a register's rule.
type rule struct {
	kind ruleKind
	off  int64 // ruleOffset: saved at CFA + off
}

type ruleKind uint8

const (
	ruleUnset ruleKind = iota
	ruleUndefined
	ruleSame
	ruleOffset
	ruleOther // register, expression, val_offset, val_expression
)

// run interprets the CFA instructions in c from state st. For an FDE it
// appends the rows from loc up to end; a CIE's initial instructions may
// not move the location.
func (p *parser) run(s *frameSection, ci *cie, c *cursor, st *state, loc, end uint64, isFDE bool) error {
	depth := 0
	for c.i < len(c.b) {
		op := c.u8()
		next, moved := loc, false
		switch op & 0xc0 {
		case cfaAdvanceLoc:
			next, moved = advance(loc, uint64(op&0x3f), ci.codeAlign, end), true
		case cfaOffset:
			ci.set(st, uint64(op&0x3f), rule{ruleOffset, int64(c.uleb()) * ci.dataAlign})
		case cfaRestore:
			ci.restore(st, uint64(op&0x3f))
		default:
			switch op {
			case cfaNop:
			case cfaSetLoc:
				v, ok := p.pointer(s, c, ci.fdeEnc, ci.addrSize)
				if !ok || v < loc {
					return fmt.Errorf("set_loc to %#x at %#x", v, loc)
				}
				next, moved = v, true
			case cfaAdvanceLoc1:
				next, moved = advance(loc, uint64(c.u8()), ci.codeAlign, end), true
			case cfaAdvanceLoc2:
				next, moved = advance(loc, uint64(c.u16()), ci.codeAlign, end), true
			case cfaAdvanceLoc4:
				next, moved = advance(loc, uint64(c.u32()), ci.codeAlign, end), true
			case cfaOffsetExtended:
				reg := c.uleb()
				ci.set(st, reg, rule{ruleOffset, int64(c.uleb()) * ci.dataAlign})
			case cfaOffsetExtendedSF:
				reg := c.uleb()
				ci.set(st, reg, rule{ruleOffset, c.sleb() * ci.dataAlign})
			case cfaGNUNegativeOffsetExtended:
				reg := c.uleb()
				ci.set(st, reg, rule{ruleOffset, -int64(c.uleb()) * ci.dataAlign})
			case cfaRestoreExtended:
				ci.restore(st, c.uleb())
			case cfaUndefined:
				ci.set(st, c.uleb(), rule{kind: ruleUndefined})
			case cfaSameValue:
				ci.set(st, c.uleb(), rule{kind: ruleSame})
			case cfaRegister:
				reg := c.uleb()
				c.uleb()
				ci.set(st, reg, rule{kind: ruleOther})
			case cfaValOffset:
				reg := c.uleb()
				c.uleb()
				ci.set(st, reg, rule{kind: ruleOther})
			case cfaValOffsetSF:
				reg := c.uleb()
				c.sleb()
				ci.set(st, reg, rule{kind: ruleOther})
			case cfaExpression, cfaValExpression:
				reg := c.uleb()
				c.skip(c.uleb())
				ci.set(st, reg, rule{kind: ruleOther})
			case cfaRememberState:
				if depth == maxDepth {
					return fmt.Errorf("remember_state nested more than %d deep", maxDepth)
				}
				// The CFA rule is saved too, as GCC, LLVM and
				// readelf do: compilers bracket epilogues with
				// remember/restore and expect the CFA back.
				p.stack[depth] = *st
				depth++
			case cfaRestoreState:
				if depth == 0 {
					return errors.New("restore_state without remember_state")
				}
				depth--
				*st = p.stack[depth]
			case cfaDefCFA:
				st.cfa, st.cfaReg = cfaReg, c.uleb()
				st.cfaOff = int64(c.uleb())
			case cfaDefCFASF:
				st.cfa, st.cfaReg = cfaReg, c.uleb()
				st.cfaOff = c.sleb() * ci.dataAlign
			case cfaDefCFARegister:
				st.cfa, st.cfaReg = cfaReg, c.uleb()
			case cfaDefCFAOffset, cfaDefCFAOffsetSF:
				if op == cfaDefCFAOffset {
					st.cfaOff = int64(c.uleb())
				} else {
					st.cfaOff = c.sleb() * ci.dataAlign
				}
				// DWARF allows a new offset only for a register CFA;
				// after an expression, cfaOff is the PLT threshold.
				if st.cfa == cfaPLTExpr {
					st.cfa = cfaExpr
				}
			case cfaDefCFAExpression:
				n := c.uleb()
				from := c.i
				c.skip(n)
				if c.bad {
					break
				}
				st.cfa = cfaExpr
				if threshold, ok := pltThreshold(c.b[from:c.i]); ok {
					st.cfa, st.cfaOff = cfaPLTExpr, threshold
				}
			case cfaGNUArgsSize:
				c.uleb()
			default:
				return fmt.Errorf("unknown instruction %#x at %#x", op, c.i-1)
			}
		}
		if c.bad {
			return errors.New("instruction past the entry's end")
		}
		if moved {
			if !isFDE {
				return errors.New("location moved in a CIE")
			}
			if next == loc {
				continue
			}
			if !p.flush(loc, st) {
				return ErrTooManyRows
			}
			if loc = next; loc >= end {
				return nil
			}
		}
	}
	if isFDE && !p.flush(loc, st) {
		return ErrTooManyRows
	}
	return nil
}

// advance returns loc moved by delta code alignment units, or end if that
// is at or past end. loc is below end.
func advance(loc, delta, align, end uint64) uint64 {
	if align == 1 { // x86-64 always; spares a division
		return loc + min(delta, end-loc)
	}
	if align != 0 && delta > (end-loc-1)/align {
		return end
	}
	return loc + delta*align
}

// set gives register reg rule r, if it is one of those tracked.
func (ci *cie) set(st *state, reg uint64, r rule) {
	if reg == regRBP {
		st.rbp = r
	}
	if reg == ci.ra {
		st.ra = r
	}
}

// restore gives register reg its rule after the CIE's initial instructions.
func (ci *cie) restore(st *state, reg uint64) {
	if reg == regRBP {
		st.rbp = ci.initial.rbp
	}
	if reg == ci.ra {
		st.ra = ci.initial.ra
	}
}

// DW_OP_* operations of the PLT expression.
const (
	opLit0   = 0x30
	opLit3   = 0x33
	opLit15  = 0x3f
	opLit31  = 0x4f
	opBreg7  = 0x77 // rsp
	opBreg16 = 0x80 // rip
	opAnd    = 0x1a
	opShl    = 0x24
	opPlus   = 0x22
	opGe     = 0x2a
)

// pltThreshold reports whether expr is the CFA expression of PLT entries,
// rsp + 8 + ((rip & 15) >= N) << 3, and returns N:
//
//	DW_OP_breg7 8; DW_OP_breg16 0; DW_OP_lit15; DW_OP_and; DW_OP_litN; DW_OP_ge; DW_OP_lit3; DW_OP_shl; DW_OP_plus
func pltThreshold(expr []byte) (int64, bool) {
	c := cursor{b: expr}
	if c.u8() != opBreg7 || c.sleb() != 8 || c.u8() != opBreg16 || c.sleb() != 0 ||
		c.u8() != opLit15 || c.u8() != opAnd {
		return 0, false
	}
	lit := c.u8()
	if lit < opLit0 || lit > opLit31 ||
		c.u8() != opGe || c.u8() != opLit3 || c.u8() != opShl || c.u8() != opPlus || c.bad || c.i != len(expr) {
		return 0, false
	}
	return int64(lit - opLit0), true
}

// flush adds the row of st at pc, counting it if unsupported. It returns
// false when there are too many rows.
func (p *parser) flush(pc uint64, st *state) bool {
	r, ok := st.row()
	if !ok {
		p.stats.Unsupported++
	}
	return p.add(pc, r)
}

// add appends r at pc unless it repeats the last row's rule. pc is above
// the last row's. It returns false when there are too many rows.
func (p *parser) add(pc uint64, r Row) bool {
	if n := len(p.rows); n > 0 {
		last := &p.rows[n-1]
		if last.CFA == r.CFA && last.CFAOffset == r.CFAOffset && last.RBPOffset == r.RBPOffset {
			return true
		}
	}
	if len(p.rows) == p.limit {
		return false
	}
	r.PC = pc
	p.rows = append(p.rows, r)
	return true
}

// row converts st to a Row, or to an undefined one and false when no
// CFAKind expresses it.
func (st *state) row() (Row, bool) {
	switch {
	case st.ra.kind == ruleUndefined:
		return Row{CFA: CFAEnd}, true
	case st.ra.kind != ruleOffset || st.ra.off != -8:
		return Row{}, false
	}
	var r Row
	switch {
	case st.cfa == cfaReg && st.cfaReg == regRSP:
		r.CFA = CFARSP
	case st.cfa == cfaReg && st.cfaReg == regRBP:
		r.CFA = CFARBP
	case st.cfa == cfaPLTExpr:
		r.CFA = CFAPLT
	default:
		return Row{}, false
	}
	if st.cfaOff < math.MinInt32 || st.cfaOff > math.MaxInt32 {
		return Row{}, false
	}
	r.CFAOffset = int32(st.cfaOff)
	switch st.rbp.kind {
	case ruleUnset, ruleSame:
	case ruleUndefined:
		// Nothing to restore; what RBP holds is as good as anything.
	case ruleOffset:
		// Offset 0 would read as "not saved"; compilers save RBP
		// below the return address, at CFA-16 or lower.
		if st.rbp.off == 0 || st.rbp.off < math.MinInt16 || st.rbp.off > math.MaxInt16 {
			return Row{}, false
		}
		r.RBPOffset = int16(st.rbp.off)
	default:
		return Row{}, false
	}
	return r, true
}

// cursor reads little-endian values from b at i. A read past the end
// returns zero, moves i to the end and sets bad, so loops over b end and
// callers check bad once per entry or instruction.
type cursor struct {
	b   []byte
	i   int
	bad bool
}

func (c *cursor) overrun() {
	c.i, c.bad = len(c.b), true
}

func (c *cursor) u8() uint8 {
	if c.i >= len(c.b) {
		c.overrun()
		return 0
	}
	v := c.b[c.i]
	c.i++
	return v
}

// zeros is what a read past the end gives.
var zeros [8]byte

// next returns the n bytes at i and moves past them, or n zero bytes
// past the end.
func (c *cursor) next(n int) []byte {
	if len(c.b)-c.i < n {
		c.overrun()
		return zeros[:n]
	}
	c.i += n
	return c.b[c.i-n : c.i]
}

func (c *cursor) u16() uint16 { return binary.LittleEndian.Uint16(c.next(2)) }
func (c *cursor) u32() uint32 { return binary.LittleEndian.Uint32(c.next(4)) }
func (c *cursor) u64() uint64 { return binary.LittleEndian.Uint64(c.next(8)) }

// uint reads an unsigned value of size 4 or 8.
func (c *cursor) uint(size uint8) uint64 {
	if size == 4 {
		return uint64(c.u32())
	}
	return c.u64()
}

func (c *cursor) uleb() uint64 {
	// Most operands are one byte.
	if c.i < len(c.b) && c.b[c.i] < 0x80 {
		v := c.b[c.i]
		c.i++
		return uint64(v)
	}
	return c.ulebLong()
}

// ulebLong reads a ULEB128 of any length; bits past 64 are dropped.
func (c *cursor) ulebLong() uint64 {
	var v uint64
	var shift uint
	for c.i < len(c.b) {
		b := c.b[c.i]
		c.i++
		if shift < 64 {
			v |= uint64(b&0x7f) << shift
		}
		shift += 7
		if b < 0x80 {
			return v
		}
	}
	c.overrun()
	return 0
}

// sleb reads an SLEB128 of any length; bits past 64 are dropped.
func (c *cursor) sleb() int64 {
	var v int64
	var shift uint
	for c.i < len(c.b) {
		b := c.b[c.i]
		c.i++
		if shift < 64 {
			v |= int64(b&0x7f) << shift
		}
		shift += 7
		if b < 0x80 {
			if shift < 64 && b&0x40 != 0 {
				v |= -1 << shift
			}
			return v
		}
	}
	c.overrun()
	return 0
}

func (c *cursor) skip(n uint64) {
	if n > uint64(len(c.b)-c.i) {
		c.overrun()
		return
	}
	c.i += int(n)
}

// cstring reads a NUL-terminated string, without the NUL.
func (c *cursor) cstring() []byte {
	for j := c.i; j < len(c.b); j++ {
		if c.b[j] == 0 {
			s := c.b[c.i:j]
			c.i = j + 1
			return s
		}
	}
	c.overrun()
	return nil
}
