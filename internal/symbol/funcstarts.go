package symbol

import (
	"debug/elf"
	"encoding/binary"
	"slices"
)

// funcStarts are where a binary's functions start, as its unwind
// information lists them: the search table of .eh_frame_hdr, one entry per
// FDE, which the linker writes for every function with call frame
// information (x86-64 compilers emit it for all of them by default). They
// name the code no symbol covers (the static functions of a stripped
// binary: most of libc's internals on Debian) by the function, not the
// instruction: "libc.so.6+0x97a80" then stands for one function, however
// many of its instructions samples land on, in a flame graph and in the
// store alike.
type funcStarts []uint64 // sorted, link-time addresses

// readFuncStarts reads the search table of s, a file's .eh_frame_hdr; nil
// when s is nil or not in the one encoding linkers write (32-bit offsets
// from the section's start).
func readFuncStarts(s *elf.Section) funcStarts {
	if s == nil || s.Addr == 0 {
		return nil
	}
	data, err := readSectionData(s)
	if err != nil || len(data) < 4 || data[0] != 1 {
		return nil
	}
	const (
		omit     = 0xff
		udata4   = 0x03
		sdata4   = 0x0b
		datarel4 = 0x30 | sdata4 // DW_EH_PE_datarel | DW_EH_PE_sdata4
	)
	ptrEnc, countEnc, tableEnc := data[1], data[2], data[3]
	off := 4
	switch ptrEnc & 0x0f { // the pointer to .eh_frame: skipped
	case udata4, sdata4:
		off += 4
	case 0x04, 0x0c: // udata8, sdata8
		off += 8
	default:
		if ptrEnc != omit {
			return nil
		}
	}
	if countEnc != udata4 || tableEnc != datarel4 || off+4 > len(data) {
		return nil
	}
	n := uint64(binary.LittleEndian.Uint32(data[off:]))
	table := data[off+4:]
	n = min(n, uint64(len(table)/8)) // a hostile count reads no further
	starts := make(funcStarts, 0, n)
	for i := range n {
		rel := int32(binary.LittleEndian.Uint32(table[8*i:]))
		starts = append(starts, s.Addr+uint64(int64(rel)))
	}
	// The table is sorted for the unwinder's binary search; a file that
	// lies about it must not mislead this one.
	if !slices.IsSorted(starts) {
		slices.Sort(starts)
	}
	return slices.Compact(starts)
}

// find returns the start of the function containing addr: the last start
// at or before it. Code after a function's end and before the next one's
// start (padding, or hand-written code without call frame information) is
// counted to the function before it.
func (fs funcStarts) find(addr uint64) (uint64, bool) {
	i, found := slices.BinarySearch(fs, addr)
	if found {
		return addr, true
	}
	if i == 0 {
		return 0, false
	}
	return fs[i-1], true
}
