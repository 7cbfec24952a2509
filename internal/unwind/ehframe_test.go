package unwind

import (
	"cmp"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/flint-dev/flint/internal/fixture"
)

// Addresses the hand-built sections are parsed with.
const (
	ehAddr   = 0x5000
	textAddr = 0x1000
	gotAddr  = 0x2000
)

// builder writes a .eh_frame or .debug_frame section entry by entry.
type builder struct {
	debug bool
	b     []byte
}

// entry appends an entry with a 4-byte length, padded with DW_CFA_nop to
// 8 bytes as linkers do, and returns its offset.
func (w *builder) entry(body ...[]byte) int {
	off := len(w.b)
	all := cat(body...)
	for (4+len(all))%8 != 0 {
		all = append(all, cfaNop)
	}
	w.b = binary.LittleEndian.AppendUint32(w.b, uint32(len(all)))
	w.b = append(w.b, all...)
	return off
}

// x86CIE is what every x86-64 CIE starts with: CFA = RSP+8, return
// address at CFA-8.
var x86CIE = cat(defCFA(regRSP, 8), offset(16, 1))

// cie appends a CIE with code alignment 1, data alignment -8 and return
// address register 16. In .eh_frame, aug "zR" gets FDE encoding pcrel
// sdata4, as GCC writes.
func (w *builder) cie(aug string, ins ...[]byte) int {
	id := u32(0)
	if w.debug {
		id = u32(0xffffffff)
	}
	body := cat(id, []byte{1}, []byte(aug), []byte{0}, uleb(1), sleb(-8), []byte{16})
	if aug == "zR" || aug == "zRS" {
		body = cat(body, uleb(1), []byte{0x1b})
	}
	return w.entry(append([][]byte{body}, ins...)...)
}

// fde appends an FDE of CIE cie for [start, start+size): in .eh_frame
// with pcrel sdata4 addresses and no augmentation data, in .debug_frame
// with absolute 8-byte ones.
func (w *builder) fde(cie int, start, size uint64, ins ...[]byte) {
	off := len(w.b)
	var head []byte
	if w.debug {
		head = cat(u32(uint32(cie)), u64(start), u64(size))
	} else {
		pc := int64(start) - int64(ehAddr+off+8)
		head = cat(u32(uint32(off+4-cie)), u32(uint32(pc)), u32(uint32(size)), uleb(0))
	}
	w.entry(append([][]byte{head}, ins...)...)
}

func cat(bs ...[]byte) []byte {
	var all []byte
	for _, b := range bs {
		all = append(all, b...)
	}
	return all
}

func u16(v uint16) []byte { return binary.LittleEndian.AppendUint16(nil, v) }
func u32(v uint32) []byte { return binary.LittleEndian.AppendUint32(nil, v) }
func u64(v uint64) []byte { return binary.LittleEndian.AppendUint64(nil, v) }

func uleb(v uint64) []byte {
	var b []byte
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if v == 0 {
			return append(b, c)
		}
		b = append(b, c|0x80)
	}
}

func sleb(v int64) []byte {
	var b []byte
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if (v == 0 && c&0x40 == 0) || (v == -1 && c&0x40 != 0) {
			return append(b, c)
		}
		b = append(b, c|0x80)
	}
}

func defCFA(reg, off uint64) []byte  { return cat([]byte{cfaDefCFA}, uleb(reg), uleb(off)) }
func defCFAOffset(off uint64) []byte { return cat([]byte{cfaDefCFAOffset}, uleb(off)) }
func defCFARegister(reg uint64) []byte {
	return cat([]byte{cfaDefCFARegister}, uleb(reg))
}
func offset(reg uint8, factored uint64) []byte { return cat([]byte{cfaOffset | reg}, uleb(factored)) }
func adv(delta uint8) []byte                   { return []byte{cfaAdvanceLoc | delta} }
func restore(reg uint8) []byte                 { return []byte{cfaRestore | reg} }
func undefined(reg uint64) []byte              { return cat([]byte{cfaUndefined}, uleb(reg)) }
func defCFAExpr(expr []byte) []byte {
	return cat([]byte{cfaDefCFAExpression}, uleb(uint64(len(expr))), expr)
}

// pltExpr is the CFA expression of PLT entries with threshold n.
func pltExpr(n byte) []byte {
	return []byte{opBreg7, 8, opBreg16, 0, opLit15, opAnd, opLit0 + n, opGe, opLit3, opShl, opPlus}
}

var (
	remember = []byte{cfaRememberState}
	restoreS = []byte{cfaRestoreState}
)

// parseTest is hand-built CFI and the rows it must give.
type parseTest struct {
	name      string
	eh, debug []byte
	want      []Row
	stats     Stats  // Rows is filled in from want
	invalid   string // in Stats.FirstInvalid
}

func parseTests() []parseTest {
	var tests []parseTest
	add := func(name string, eh, debug *builder, stats Stats, want ...Row) {
		t := parseTest{name: name, want: want, stats: stats}
		if eh != nil {
			t.eh = eh.b
		}
		if debug != nil {
			t.debug = debug.b
		}
		tests = append(tests, t)
	}
	undef := func(pc uint64) Row { return Row{PC: pc} }
	rsp := func(pc uint64, off int32, rbp int16) Row {
		return Row{PC: pc, CFA: CFARSP, CFAOffset: off, RBPOffset: rbp}
	}

	{
		// push rbp; mov rbp, rsp; ...; pop rbp; ret
		w := &builder{}
		c := w.cie("zR", x86CIE)
		w.fde(c, 0x1000, 0x20,
			adv(1), defCFAOffset(16), offset(regRBP, 2),
			adv(3), defCFARegister(regRBP),
			adv(0x10), defCFA(regRSP, 8), restore(regRBP))
		add("frame pointer prologue and epilogue", w, nil, Stats{FDEs: 1},
			rsp(0x1000, 8, 0), rsp(0x1001, 16, -16),
			Row{PC: 0x1004, CFA: CFARBP, CFAOffset: 16, RBPOffset: -16},
			rsp(0x1014, 8, 0), undef(0x1020))
	}
	{
		// An epilogue in the middle: GCC brackets it with
		// remember_state/restore_state, and the CFA comes back too.
		w := &builder{}
		c := w.cie("zR", x86CIE)
		w.fde(c, 0x1000, 0x40,
			adv(1), defCFAOffset(16), offset(3, 2),
			adv(4), remember, defCFAOffset(8), restore(3),
			adv(1), restoreS,
			adv(5), remember, remember, defCFAOffset(24), adv(1), restoreS, adv(1), restoreS)
		add("remember and restore state", w, nil, Stats{FDEs: 1},
			rsp(0x1000, 8, 0), rsp(0x1001, 16, 0), rsp(0x1005, 8, 0), rsp(0x1006, 16, 0),
			rsp(0x100b, 24, 0), rsp(0x100c, 16, 0), undef(0x1040))
	}
	{
		w := &builder{}
		c := w.cie("zR", x86CIE)
		w.fde(c, 0x1020, 0x30, defCFAOffset(16), adv(6), defCFAOffset(24), adv(10), defCFAExpr(pltExpr(11)))
		w.fde(c, 0x1050, 0x10, defCFAExpr(pltExpr(10)))
		w.fde(c, 0x1060, 0x10, defCFAExpr(pltExpr(10)[:10]))                 // no DW_OP_plus
		w.fde(c, 0x1070, 0x10, defCFAExpr([]byte{opBreg7, 16}))              // rsp+16
		w.fde(c, 0x1080, 0x10, defCFAExpr(cat(pltExpr(11), []byte{cfaNop}))) // a byte after
		w.fde(c, 0x1090, 0x10, defCFAExpr([]byte{opBreg7, 0x88, 0, 0x80, 0x80, 0, opLit15, opAnd, opLit0 + 11, opGe, opLit3, opShl, opPlus}))
		// An offset for an expression CFA: no longer the PLT's.
		w.fde(c, 0x10a0, 0x10, defCFAExpr(pltExpr(11)), adv(4), defCFAOffset(16))
		add("PLT expression", w, nil, Stats{FDEs: 7, Unsupported: 4},
			rsp(0x1020, 16, 0), rsp(0x1026, 24, 0), Row{PC: 0x1030, CFA: CFAPLT, CFAOffset: 11},
			Row{PC: 0x1050, CFA: CFAPLT, CFAOffset: 10}, undef(0x1060),
			Row{PC: 0x1090, CFA: CFAPLT, CFAOffset: 11}, undef(0x10a4))
	}
	{
		// glibc's __restore_rt: the CIE says 'S', the FDE describes
		// the registers in the ucontext with expressions.
		w := &builder{}
		c := w.cie("zR", x86CIE)
		s := w.cie("zRS", defCFAExpr([]byte{opBreg7, 0xa0, 0x01, 0x06}))
		w.fde(c, 0x2000, 0xf, adv(4), defCFAOffset(16))
		w.fde(s, 0x200f, 0x9, cat([]byte{cfaExpression, regRBP, 2}, []byte{opBreg7, 0x78}))
		w.fde(c, 0x2018, 0x8)
		add("signal trampoline", w, nil, Stats{FDEs: 3},
			rsp(0x2000, 8, 0), rsp(0x2004, 16, 0), Row{PC: 0x200f, CFA: CFASignal}, rsp(0x2018, 8, 0), undef(0x2020))
	}
	{
		// _start and clone3: the return address is undefined, in the
		// CIE or after the first instruction.
		w := &builder{}
		c := w.cie("zR", defCFA(regRSP, 8), undefined(16))
		x := w.cie("zR", x86CIE)
		w.fde(c, 0x1000, 0x26)
		w.fde(x, 0x1030, 0x40, adv(0x20), undefined(16), adv(0x10), offset(16, 1))
		add("undefined return address", w, nil, Stats{FDEs: 2},
			Row{PC: 0x1000, CFA: CFAEnd}, undef(0x1026),
			rsp(0x1030, 8, 0), Row{PC: 0x1050, CFA: CFAEnd}, rsp(0x1060, 8, 0), undef(0x1070))
	}
	{
		// Adjacent FDEs share no gap row; identical neighbours merge;
		// FDEs out of order are sorted; a zero-length one is skipped.
		w := &builder{}
		c := w.cie("zR", x86CIE)
		w.fde(c, 0x1030, 0x10, adv(2), defCFAOffset(32))
		w.fde(c, 0x1000, 0x10, adv(1), defCFAOffset(16))
		w.fde(c, 0x1010, 0x10, adv(1), defCFAOffset(16))
		w.fde(c, 0x1020, 0)
		add("gaps and adjacent FDEs", w, nil, Stats{FDEs: 4},
			rsp(0x1000, 8, 0), rsp(0x1001, 16, 0), rsp(0x1010, 8, 0), rsp(0x1011, 16, 0),
			undef(0x1020), rsp(0x1030, 8, 0), rsp(0x1032, 32, 0), undef(0x1040))
	}
	{
		// .debug_frame alone (as gcc -fno-asynchronous-unwind-tables
		// -g writes): absolute addresses, CIE id 0xffffffff.
		d := &builder{debug: true}
		c := d.cie("", x86CIE)
		d.fde(c, 0x401000, 0x10, adv(4), defCFAOffset(48))
		add(".debug_frame", nil, d, Stats{FDEs: 1},
			rsp(0x401000, 8, 0), rsp(0x401004, 48, 0), undef(0x401010))
	}
	{
		// .eh_frame wins over .debug_frame, also over a .debug_frame
		// FDE that starts before it.
		w := &builder{}
		c := w.cie("zR", x86CIE)
		w.fde(c, 0x1010, 0x10, adv(1), defCFAOffset(16))
		w.fde(c, 0x1018, 0x10) // overlaps the one before
		d := &builder{debug: true}
		dc := d.cie("", x86CIE)
		d.fde(dc, 0x1000, 0x30, defCFAOffset(64))
		d.fde(dc, 0x1010, 0x10, defCFAOffset(64))
		d.fde(dc, 0x1040, 0x10, defCFAOffset(64))
		add("overlapping FDEs", w, d, Stats{FDEs: 5, Overlapping: 3},
			rsp(0x1010, 8, 0), rsp(0x1011, 16, 0), undef(0x1020), rsp(0x1040, 64, 0), undef(0x1050))
	}
	{
		w := &builder{}
		c := w.cie("zR", x86CIE)
		w.fde(c, 0x1000, 0x10, defCFA(10, 0))                                          // CFA in r10 (stack realignment)
		w.fde(c, 0x1010, 0x10, offset(16, 2))                                          // RA at CFA-16
		w.fde(c, 0x1020, 0x10, []byte{cfaRegister, regRBP, 3})                         // RBP in RBX
		w.fde(c, 0x1030, 0x10, []byte{cfaValOffset, regRBP, 2})                        // RBP = CFA-16
		w.fde(c, 0x1040, 0x10, cat([]byte{cfaDefCFAOffset}, uleb(1<<40)))              // offset beyond int32
		w.fde(c, 0x1050, 0x10, cat([]byte{cfaOffsetExtendedSF, regRBP}, sleb(-1<<20))) // offset beyond int16
		w.fde(c, 0x1060, 0x10, []byte{cfaSameValue, 16})
		add("unsupported rules", w, nil, Stats{FDEs: 7, Unsupported: 7}, undef(0x1000))
	}
	{
		w := &builder{}
		c := w.cie("zR", x86CIE)
		w.fde(c, 0x1000, 0x10, adv(1), []byte{0x3f})                                  // unknown instruction
		w.fde(c, 0x1010, 0x10, adv(1), restoreS)                                      // restore_state, nothing remembered
		w.fde(c, 0x1020, 0x10, adv(1), []byte{0, 0, 0, 0, cfaOffsetExtended, regRBP}) // operand missing at the entry's end
		w.fde(c, 0x1030, 0x10, adv(1), defCFAOffset(16))                              // fine
		w.fde(c+1, 0x1040, 0x10)                                                      // CIE pointer to no CIE
		w.fde(c, 0x1060, 0x10, adv(1), cat([]byte{cfaDefCFAExpression}, uleb(100)))   // expression past the end
		deep := []byte{}
		for range maxDepth + 1 {
			deep = append(deep, cfaRememberState)
		}
		w.fde(c, 0x1070, 0x10, deep)
		add("invalid FDEs", w, nil, Stats{FDEs: 7, Invalid: 6},
			undef(0x1000), rsp(0x1030, 8, 0), rsp(0x1031, 16, 0), undef(0x1040))
		tests[len(tests)-1].invalid = "parse .eh_frame fde at 0x78: no cie at 0x1"
	}
	{
		// Every way to move the location, and operands of each form;
		// in .debug_frame, where set_loc's address is absolute.
		d := &builder{debug: true}
		c := d.cie("", x86CIE)
		d.fde(c, 0x10000, 0x20000,
			cat([]byte{cfaAdvanceLoc1, 0x10}, defCFAOffset(16)),
			cat([]byte{cfaAdvanceLoc2}, u16(0x100), []byte{cfaDefCFAOffsetSF}, sleb(-3)),
			cat([]byte{cfaAdvanceLoc4}, u32(0x1000), []byte{cfaDefCFASF, regRBP}, sleb(-2), []byte{cfaOffsetExtended, regRBP, 2}),
			cat([]byte{cfaSetLoc}, u64(0x12000), []byte{cfaRestoreExtended, regRBP, cfaGNUArgsSize, 16}),
			cat(adv(1), []byte{cfaGNUNegativeOffsetExtended, regRBP, 3}),
			cat(adv(1), defCFA(regRSP, 8), []byte{cfaOffsetExtendedSF, regRBP}, sleb(2)),
			cat([]byte{cfaAdvanceLoc4}, u32(0x40000)), defCFAOffset(99)) // past the end: ignored
		d.fde(c, 0x30000, 0x10, adv(2), cat([]byte{cfaSetLoc}, u64(0x30001))) // set_loc backwards
		add("location and operand forms", nil, d, Stats{FDEs: 2, Invalid: 1},
			rsp(0x10000, 8, 0), rsp(0x10010, 16, 0), rsp(0x10110, 24, 0),
			Row{PC: 0x11110, CFA: CFARBP, CFAOffset: 16, RBPOffset: -16},
			Row{PC: 0x12000, CFA: CFARBP, CFAOffset: 16},
			Row{PC: 0x12001, CFA: CFARBP, CFAOffset: 16, RBPOffset: 24},
			rsp(0x12002, 8, -16), undef(0x30000))
		tests[len(tests)-1].invalid = "parse .debug_frame fde for 0x30000..0x30010: set_loc to 0x30001 at 0x30002"
	}
	{
		// 64-bit DWARF .debug_frame: lengths of 0xffffffff then 8
		// bytes, CIE id and pointer of 8 bytes; a CIE of version 4
		// with address and segment selector sizes.
		d := &builder{debug: true}
		cie64 := cat(u32(0xffffffff), u64(0), u64(0xffffffffffffffff), []byte{3, 0}, uleb(1), sleb(-8), uleb(16), x86CIE)
		binary.LittleEndian.PutUint64(cie64[4:], uint64(len(cie64)-12))
		d.b = append(d.b, cie64...)
		fde64 := cat(u32(0xffffffff), u64(0), u64(0), u64(0x2000), u64(0x10), adv(2), defCFAOffset(16))
		binary.LittleEndian.PutUint64(fde64[4:], uint64(len(fde64)-12))
		d.b = append(d.b, fde64...)
		d.b = append(d.b, 0, 0, 0, 0) // a terminator in the middle
		v4 := d.entry(u32(0xffffffff), []byte{4, 0, 8, 0}, uleb(1), sleb(-8), uleb(16), x86CIE)
		d.entry(u32(uint32(v4)), u64(0x2010), u64(0x10), adv(4), defCFAOffset(32))
		add("64-bit .debug_frame and CIE version 4", nil, d, Stats{FDEs: 2},
			rsp(0x2000, 8, 0), rsp(0x2002, 16, 0), rsp(0x2010, 8, 0), rsp(0x2014, 32, 0), undef(0x2020))
	}
	{
		// C++: "zPLR" with an indirect pcrel personality, FDEs with an
		// LSDA pointer; old GCC's "eh"; other FDE encodings.
		w := &builder{}
		zplr := w.entry(u32(0), []byte{1}, []byte("zPLR\x00"), uleb(1), sleb(-8), []byte{16},
			uleb(7), []byte{0x9b}, u32(0x1234), []byte{0x1b, 0x1b}, x86CIE)
		off := len(w.b)
		w.entry(u32(uint32(off+4-zplr)), u32(uint32(int64(0x3000)-int64(ehAddr+off+8))), u32(0x10), uleb(4), u32(0), adv(1), defCFAOffset(16))
		eh := w.entry(u32(0), []byte{1}, []byte("eh\x00"), u64(0xdead), uleb(1), sleb(-8), []byte{16}, x86CIE)
		off = len(w.b)
		w.entry(u32(uint32(off+4-eh)), u64(0x3010), u64(0x10), adv(2), defCFAOffset(16))
		for _, enc := range []struct {
			enc  byte
			addr []byte
			size []byte
		}{
			{0x04, u64(0x3020), u64(0x10)},            // udata8
			{0x02, u16(0x3030), u16(0x10)},            // udata2
			{0x01, uleb(0x3040), uleb(0x10)},          // uleb128
			{0x09, sleb(0x3050), sleb(0x10)},          // sleb128
			{0x0a, u16(0x3060), u16(0x10)},            // sdata2
			{0x0c, u64(0x3070), u64(0x10)},            // sdata8
			{0x23, u32(0x3080 - textAddr), u32(0x10)}, // textrel udata4
			{0x33, u32(0x3090 - gotAddr), u32(0x10)},  // datarel udata4
			{0x3b, u32(0x30a0 - gotAddr), u32(0x10)},  // datarel sdata4
			{0x08, u64(0x30b0), u64(0x10)},            // signed absptr
			{0x00, u64(0x30c0), u64(0x10)},            // absptr
			{0x50, u64(0x30d0), u64(0x10)},            // aligned: not resolved
			{0x93, u32(0x30e0), u32(0x10)},            // indirect: not resolved
			{0xff, nil, nil},                          // omitted: no address
			{0x05, u32(0x30f0), u32(0x10)},            // unknown format
		} {
			ci := w.entry(u32(0), []byte{1}, []byte("zR\x00"), uleb(1), sleb(-8), []byte{16}, uleb(1), []byte{enc.enc}, x86CIE)
			off := len(w.b)
			w.entry(u32(uint32(off+4-ci)), enc.addr, enc.size, uleb(0))
		}
		add("augmentations and pointer encodings", w, nil, Stats{FDEs: 17, Invalid: 4},
			rsp(0x3000, 8, 0), rsp(0x3001, 16, 0), rsp(0x3010, 8, 0), rsp(0x3012, 16, 0), rsp(0x3020, 8, 0), undef(0x30d0))
		tests[len(tests)-1].invalid = "address encoding 0x50"
	}
	return tests
}

func TestParseSections(t *testing.T) {
	for _, tc := range parseTests() {
		t.Run(tc.name, func(t *testing.T) {
			rows, st, err := parseBytes(tc.eh, tc.debug)
			if err != nil {
				t.Fatal(err)
			}
			checkRows(t, rows, st)
			if !reflect.DeepEqual(rows, tc.want) {
				t.Errorf("rows:\n%s\nwant:\n%s", formatRows(rows), formatRows(tc.want))
			}
			if (tc.invalid == "") != (st.FirstInvalid == nil) || !strings.Contains(fmt.Sprint(st.FirstInvalid), tc.invalid) {
				t.Errorf("first invalid: %v, want %q", st.FirstInvalid, tc.invalid)
			}
			st.FirstInvalid = nil
			tc.stats.Rows = len(tc.want)
			if st != tc.stats {
				t.Errorf("stats %+v, want %+v", st, tc.stats)
			}
		})
	}
}

func TestSortFDEs(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{0, 1, 2, 3, 7, 100, 1000} {
		for _, runs := range []int{1, 2, 3, 10, n} {
			fdes := make([]fde, n)
			for i := range fdes {
				// Few distinct starts, so ties are common.
				fdes[i] = fde{start: uint64(rng.IntN(n/2 + 1)), insOff: uint32(i)}
			}
			// Sorted runs, as linkers write them.
			for i := 0; i < runs && n > 0; i++ {
				lo := i * n / runs
				hi := (i + 1) * n / runs
				slices.SortStableFunc(fdes[lo:hi], func(a, b fde) int { return cmp.Compare(a.start, b.start) })
			}
			want := slices.Clone(fdes)
			slices.SortStableFunc(want, func(a, b fde) int { return cmp.Compare(a.start, b.start) })
			sortFDEs(fdes)
			if !slices.Equal(fdes, want) {
				t.Errorf("%d FDEs in %d runs: sorted wrongly", n, runs)
			}
		}
	}
}

// parseBytes parses raw section contents: .eh_frame at ehAddr.
func parseBytes(eh, debug []byte) ([]Row, Stats, error) {
	var secs []frameSection
	if eh != nil {
		secs = append(secs, frameSection{name: ".eh_frame", data: eh, addr: ehAddr})
	}
	if debug != nil {
		secs = append(secs, frameSection{name: ".debug_frame", data: debug, debug: true})
	}
	return parse(secs, textAddr, gotAddr, maxRows)
}

// checkRows checks what Parse guarantees of any input.
func checkRows(t *testing.T, rows []Row, st Stats) {
	t.Helper()
	if st.Rows != len(rows) {
		t.Errorf("Stats.Rows %d, %d rows", st.Rows, len(rows))
	}
	if st.Invalid+st.Overlapping > st.FDEs {
		t.Errorf("more FDEs dropped than read: %+v", st)
	}
	for i, r := range rows {
		if r.CFA > CFAEnd {
			t.Fatalf("row %d: kind %d", i, r.CFA)
		}
		if i == 0 {
			continue
		}
		p := rows[i-1]
		if r.PC <= p.PC {
			t.Fatalf("row %d at %#x after %#x", i, r.PC, p.PC)
		}
		if r.CFA == p.CFA && r.CFAOffset == p.CFAOffset && r.RBPOffset == p.RBPOffset {
			t.Fatalf("rows %d and %d alike: %+v", i-1, i, r)
		}
	}
}

func formatRows(rows []Row) string {
	s := ""
	for _, r := range rows {
		s += fmt.Sprintf("  %#x %d %d %d\n", r.PC, r.CFA, r.CFAOffset, r.RBPOffset)
	}
	return s
}

func TestParseErrors(t *testing.T) {
	w := &builder{}
	c := w.cie("zR", x86CIE)
	w.fde(c, 0x1000, 0x10)
	good := w.b
	tests := []struct {
		name string
		eh   []byte
	}{
		{"length past the end", good[:len(good)-1]},
		{"truncated length", append(slices.Clone(good), 1, 0)},
		{"64-bit length past the end", cat(good, u32(0xffffffff), u64(1<<40))},
		{"truncated id", cat(good, u32(2), []byte{0, 0})},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if rows, _, err := parseBytes(tc.eh, nil); err == nil {
				t.Errorf("no error; rows %v", rows)
			}
		})
	}

	for _, tc := range []struct {
		name string
		f    *elf.File
		want error
	}{
		{"arm64", &elf.File{FileHeader: elf.FileHeader{Class: elf.ELFCLASS64, Data: elf.ELFDATA2LSB, Machine: elf.EM_AARCH64}}, ErrNotSupported},
		{"x32", &elf.File{FileHeader: elf.FileHeader{Class: elf.ELFCLASS32, Data: elf.ELFDATA2LSB, Machine: elf.EM_X86_64}}, ErrNotSupported},
		{"no sections", &elf.File{FileHeader: elf.FileHeader{Class: elf.ELFCLASS64, Data: elf.ELFDATA2LSB, Machine: elf.EM_X86_64}}, ErrNoCFI},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, _, err := Parse(tc.f, 0); !errors.Is(err, tc.want) {
				t.Errorf("error %v, want %v", err, tc.want)
			}
		})
	}
}

// TestParseLimit parses glibc with a limit of its rows and of one fewer:
// the first gives the same rows as no limit, the second ErrTooManyRows.
func TestParseLimit(t *testing.T) {
	f, err := elf.Open("/lib/x86_64-linux-gnu/libc.so.6")
	if err != nil {
		t.Skip(err)
	}
	defer f.Close()
	all, _, err := Parse(f, 0)
	if err != nil {
		t.Fatal(err)
	}
	if rows, _, err := Parse(f, len(all)); err != nil || !slices.Equal(rows, all) {
		t.Errorf("limit %d: %d rows, %v; want the same rows", len(all), len(rows), err)
	}
	if rows, _, err := Parse(f, len(all)-1); !errors.Is(err, ErrTooManyRows) || rows != nil {
		t.Errorf("limit %d: %d rows, %v; want ErrTooManyRows", len(all)-1, len(rows), err)
	}
}

func FuzzParse(f *testing.F) {
	for _, tc := range parseTests() {
		f.Add(tc.eh, tc.debug)
	}
	// The first whole entries of glibc's .eh_frame, PLT and all.
	if ef, err := elf.Open("/lib/x86_64-linux-gnu/libc.so.6"); err == nil {
		if s := ef.Section(".eh_frame"); s != nil {
			if b, err := s.Data(); err == nil {
				n := 0
				for n < 4096 && n+4 <= len(b) && n+4+int(binary.LittleEndian.Uint32(b[n:])) <= len(b) {
					n += 4 + int(binary.LittleEndian.Uint32(b[n:]))
				}
				f.Add(b[:n], []byte(nil))
			}
		}
		ef.Close()
	}
	f.Fuzz(func(t *testing.T, eh, debug []byte) {
		rows, st, err := parseBytes(eh, debug)
		if err == nil {
			checkRows(t, rows, st)
		}
	})
}

// refFDE is an FDE as readelf --debug-dump=frames-interp shows it.
type refFDE struct {
	start, end uint64
	signal     bool  // its CIE's augmentation has 'S'
	rows       []ref // by LOC, as printed; for an FDE without a table, its CIE's last row
}

// ref is one row of readelf's table, in Row's terms.
type ref struct {
	loc uint64
	row Row
	exp bool // the CFA is an expression: CFAPLT, or CFAUndefined if it is not the PLT one
}

// readelfFrames runs readelf on path and returns the FDEs of every frame
// section it shows.
func readelfFrames(t *testing.T, path string) []refFDE {
	t.Helper()
	out, err := exec.Command("readelf", "--wide", "--debug-dump=no-follow-links,frames-interp", path).Output()
	if err != nil {
		t.Fatalf("readelf %s: %v", path, err)
	}
	var (
		fdes    []refFDE
		cieLast map[string]ref // by CIE offset, in the section being read
		cieSig  map[string]bool
		cie     string // the CIE whose table is being read, or "" for an FDE
		cols    []string
	)
	for line := range strings.Lines(string(out)) {
		f := strings.Fields(line)
		switch {
		case len(f) == 0:
		case strings.HasPrefix(line, "Contents of the "):
			cieLast, cieSig, cie = map[string]ref{}, map[string]bool{}, ""
		case len(f) >= 5 && f[3] == "CIE":
			cie, cols = f[0], nil
			cieSig[cie] = strings.Contains(f[4], "S")
		case len(f) >= 6 && f[3] == "FDE":
			var start, end uint64
			if _, err := fmt.Sscanf(f[5], "pc=%x..%x", &start, &end); err != nil {
				t.Fatalf("readelf line %q: %v", line, err)
			}
			c := strings.TrimPrefix(f[4], "cie=")
			r := refFDE{start: start, end: end, signal: cieSig[c]}
			if last, ok := cieLast[c]; ok {
				last.loc = start
				r.rows = []ref{last}
			}
			fdes = append(fdes, r)
			cie, cols = "", nil
		case f[0] == "LOC":
			cols = f[1:]
		case len(f[0]) == 16 && cols != nil:
			// A register rule is "r9 (r9)": one value.
			f = slices.DeleteFunc(f, func(v string) bool { return strings.HasPrefix(v, "(") })
			if len(f) != 1+len(cols) {
				t.Fatalf("readelf row %q under %q", line, cols)
			}
			loc, err := strconv.ParseUint(f[0], 16, 64)
			if err != nil {
				t.Fatalf("readelf row %q: %v", line, err)
			}
			r := refRow(cols, f[1:])
			r.loc = loc
			if cie != "" {
				cieLast[cie] = r
				break
			}
			// The FDE's first row, at its start, replaces its CIE's.
			fd := &fdes[len(fdes)-1]
			fd.rows = append(fd.rows, r)
		}
	}
	return fdes
}

// refRow converts a readelf table row: vals under the columns cols
// ("CFA", registers, "ra").
func refRow(cols, vals []string) ref {
	ra, rbp := "", "u"
	for i, c := range cols {
		switch c {
		case "ra":
			ra = vals[i]
		case "rbp":
			rbp = vals[i]
		}
	}
	switch {
	case ra == "u":
		return ref{row: Row{CFA: CFAEnd}}
	case ra != "c-8":
		return ref{}
	}
	var r ref
	if rbp != "u" && rbp != "s" {
		off, err := strconv.ParseInt(strings.TrimPrefix(rbp, "c"), 10, 16)
		if !strings.HasPrefix(rbp, "c") || err != nil {
			return ref{}
		}
		r.row.RBPOffset = int16(off)
	}
	cfa := vals[0]
	if cfa == "exp" {
		r.exp = true
		return r
	}
	i := strings.IndexAny(cfa, "+-")
	if i < 0 {
		return ref{}
	}
	off, err := strconv.ParseInt(cfa[i:], 10, 32)
	if err != nil {
		return ref{}
	}
	switch cfa[:i] {
	case "rsp":
		r.row.CFA = CFARSP
	case "rbp":
		r.row.CFA = CFARBP
	default:
		return ref{}
	}
	r.row.CFAOffset = int32(off)
	return r
}

// refCounts is what comparing Parse with readelf found.
type refCounts struct {
	rows, plt, signal, end, gaps int // rows compared; of them CFAPLT, CFASignal, CFAEnd; gap rows
	expUndefined                 int // expressions other than the PLT one
	overlapping                  int // FDEs not compared
	mismatches                   int
}

// compareReadelf checks that, at every LOC readelf shows, the row Parse
// returns for path has the same rule, and that Parse returns no rows at
// PCs readelf does not show except the ends of FDEs.
func compareReadelf(t *testing.T, path string) refCounts {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rows, st, err := Parse(f, 0)
	if err != nil {
		t.Fatalf("Parse(%s): %v", path, err)
	}
	checkRows(t, rows, st)
	fdes := readelfFrames(t, path)
	fdes = slices.DeleteFunc(fdes, func(f refFDE) bool { return f.start == f.end })
	slices.SortStableFunc(fdes, func(a, b refFDE) int { return cmp.Compare(a.start, b.start) })

	// FDEs whose ranges overlap, which Parse drops, are not compared.
	overlap := make([]bool, len(fdes))
	for i, maxAt := 1, 0; i < len(fdes); i++ {
		if fdes[i].start < fdes[maxAt].end {
			overlap[i], overlap[maxAt] = true, true
		}
		if fdes[i].end > fdes[maxAt].end {
			maxAt = i
		}
	}
	var n refCounts
	at := func(pc uint64) Row {
		i, found := slices.BinarySearchFunc(rows, pc, func(r Row, pc uint64) int { return cmp.Compare(r.PC, pc) })
		if !found {
			i--
		}
		if i < 0 {
			return Row{}
		}
		r := rows[i]
		r.PC = 0
		return r
	}
	mismatch := func(format string, args ...any) {
		if n.mismatches++; n.mismatches <= 20 {
			t.Errorf("%s: "+format, append([]any{path}, args...)...)
		}
	}
	shown := make(map[uint64]bool) // PCs where Parse may start a row
	for i, fd := range fdes {
		shown[fd.start], shown[fd.end] = true, true
		for _, r := range fd.rows {
			shown[r.loc] = true
		}
		if overlap[i] {
			n.overlapping++
			continue
		}
		if fd.signal {
			if got := at(fd.start); got.CFA != CFASignal {
				mismatch("signal FDE %#x..%#x: row %+v", fd.start, fd.end, got)
			}
			n.rows++
			n.signal++
			continue
		}
		for j, r := range fd.rows {
			if r.loc < fd.start || r.loc >= fd.end || j+1 < len(fd.rows) && fd.rows[j+1].loc == r.loc {
				continue // outside the FDE, or not the last row at its LOC
			}
			got := at(r.loc)
			n.rows++
			switch {
			case r.exp && got.CFA == CFAPLT && got.RBPOffset == r.row.RBPOffset:
				n.plt++
			case r.exp && got == (Row{}):
				n.expUndefined++
			case r.exp:
				mismatch("%#x (FDE %#x..%#x): CFA by expression, row %+v", r.loc, fd.start, fd.end, got)
			case got != r.row:
				mismatch("%#x (FDE %#x..%#x): row %+v, readelf %+v", r.loc, fd.start, fd.end, got, r.row)
			case got.CFA == CFAEnd:
				n.end++
			}
		}
		if i+1 == len(fdes) || fdes[i+1].start > fd.end {
			n.gaps++
			if got := at(fd.end); got != (Row{}) {
				mismatch("end %#x of FDE %#x..%#x: row %+v", fd.end, fd.start, fd.end, got)
			}
		}
	}
	for _, r := range rows {
		if !shown[r.PC] {
			mismatch("row at %#x, where readelf shows none", r.PC)
		}
	}
	t.Logf("%s: %d rows agree with readelf (%d CFAPLT, %d CFASignal, %d CFAEnd; %d expressions other than PLT's left undefined), %d gap rows; %d overlapping FDEs not compared; %d mismatches; %+v",
		path, n.rows-n.mismatches, n.plt, n.signal, n.end, n.expUndefined, n.gaps, n.overlapping, n.mismatches, st)
	return n
}

// systemFiles are binaries of the kinds the agent meets, where installed.
func systemFiles() []string {
	files := []string{
		"/lib/x86_64-linux-gnu/libc.so.6",
		"/usr/lib/x86_64-linux-gnu/libstdc++.so.6",
		"/usr/bin/python3",
		"/usr/lib/x86_64-linux-gnu/libLLVM.so.19.1", // a large C++ library
	}
	// pyenv's builds: the interpreter is in libpython, the executable
	// a small main.
	libs, _ := filepath.Glob("/root/.pyenv/versions/*/lib/libpython*.so.1.0")
	exes, _ := filepath.Glob("/root/.pyenv/versions/*/bin/python[23].[0-9]*")
	exes = slices.DeleteFunc(exes, func(path string) bool { return strings.Contains(filepath.Base(path), "-") })
	files = append(append(files, libs...), exes...)
	return slices.DeleteFunc(files, func(path string) bool {
		_, err := os.Stat(path)
		return err != nil
	})
}

func TestParseReadelf(t *testing.T) {
	fixture.NeedTools(t, "readelf")
	files := systemFiles()
	if len(files) == 0 {
		t.Skip("none of the system libraries compared is installed")
	}
	for _, path := range files {
		t.Run(filepath.Base(path), func(t *testing.T) {
			if testing.Short() && strings.Contains(path, "LLVM") {
				t.Skip("a large library: not in -short")
			}
			if n := compareReadelf(t, path); n.rows == 0 {
				t.Errorf("%s: no rows compared", path)
			}
		})
	}
}

// fixtureC is compiled without frame pointers: rec and leaf keep the CFA
// in RSP, vla's variable-length array makes it keep the CFA in RBP, and
// the calls through the PLT give the PLT's expression.
const fixtureC = `#include <string.h>
__attribute__((noinline)) long leaf(long x) { return x * 3 + 1; }
__attribute__((noinline)) long vla(int n) {
	char buf[n];
	memset(buf, n, n);
	long s = 0;
	for (int i = 0; i < n; i++) s += buf[i] * leaf(i);
	return s;
}
__attribute__((noinline)) long rec(long n) { return n <= 1 ? 1 : n * rec(n - 1) + leaf(n); }
int main(int argc, char **argv) { return (int)(vla(argc + 16) + rec(argc * 5) + strlen(argv[0])) & 0x7f; }
`

func TestParseFixture(t *testing.T) {
	fixture.NeedTools(t, "gcc", "readelf", "objcopy")
	dir := t.TempDir()
	src := filepath.Join(dir, "fixture.c")
	if err := os.WriteFile(src, []byte(fixtureC), 0o644); err != nil {
		t.Fatal(err)
	}
	run := func(name string, args ...string) {
		t.Helper()
		if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
			t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
		}
	}
	bin := func(name string) string { return filepath.Join(dir, name) }
	run("gcc", "-O2", "-fomit-frame-pointer", "-o", bin("eh"), src)
	// Without asynchronous unwind tables, gcc describes the program's
	// functions in .debug_frame; the C runtime's stay in .eh_frame.
	run("gcc", "-O2", "-fomit-frame-pointer", "-g", "-fno-asynchronous-unwind-tables", "-o", bin("both"), src)
	run("gcc", "-O2", "-fomit-frame-pointer", "-g", "-gz=zlib", "-fno-asynchronous-unwind-tables", "-o", bin("compressed"), src)
	run("objcopy", "--remove-section=.eh_frame", "--remove-section=.eh_frame_hdr", bin("both"), bin("debug"))
	for _, tc := range []struct {
		name     string
		sections []string
	}{
		{"eh", []string{".eh_frame"}},
		{"both", []string{".eh_frame", ".debug_frame"}},
		{"compressed", []string{".eh_frame", ".debug_frame"}},
		{"debug", []string{".debug_frame"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, err := elf.Open(bin(tc.name))
			if err != nil {
				t.Fatal(err)
			}
			for _, name := range []string{".eh_frame", ".debug_frame"} {
				if has := f.Section(name) != nil; has != slices.Contains(tc.sections, name) {
					t.Fatalf("%s in the fixture: %v, want %v", name, has, !has)
				}
			}
			if tc.name == "compressed" && f.Section(".debug_frame").Flags&elf.SHF_COMPRESSED == 0 {
				t.Fatal("-gz=zlib left .debug_frame uncompressed: the case checks nothing \"both\" does not")
			}
			f.Close()
			n := compareReadelf(t, bin(tc.name))
			if n.rows < 10 {
				t.Errorf("%d rows compared, want 10 or more", n.rows)
			}
			if tc.name == "eh" && (n.plt == 0 || n.end == 0) {
				t.Errorf("no PLT or no outermost frame (_start): %+v", n)
			}
		})
	}
}

// BenchmarkParse parses the CFI of system libraries, reporting throughput
// in MB of .eh_frame and .debug_frame per second, and CPU time (garbage
// collection included) and bytes allocated per MB. Reading the sections
// from the page cache is included, as it is in the agent.
func BenchmarkParse(b *testing.B) {
	for _, path := range systemFiles() {
		if strings.Contains(path, "pyenv") && !strings.HasSuffix(path, "libpython3.13.so.1.0") {
			continue // one libpython is enough
		}
		f, err := elf.Open(path)
		if err != nil {
			b.Fatal(err)
		}
		size := 0
		for _, name := range []string{".eh_frame", ".debug_frame"} {
			if s := f.Section(name); s != nil {
				size += int(s.Size)
			}
		}
		b.Run(filepath.Base(path), func(b *testing.B) {
			b.SetBytes(int64(size))
			b.ReportAllocs()
			var st Stats
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			start, _ := fixture.CPU(os.Getpid()) // wall time means little on a shared machine
			n := 0
			for b.Loop() {
				if _, st, err = Parse(f, 0); err != nil {
					b.Fatal(err)
				}
				n++
			}
			end, _ := fixture.CPU(os.Getpid())
			cpu := end - start
			runtime.ReadMemStats(&after)
			mb := float64(n) * float64(size) / 1e6
			b.ReportMetric(float64(cpu.Milliseconds())/mb, "cpu-ms/MB")
			b.ReportMetric(float64(after.TotalAlloc-before.TotalAlloc)/mb, "alloc-B/MB")
			b.ReportMetric(float64(st.Rows), "rows")
		})
		f.Close()
	}
}
