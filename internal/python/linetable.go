package python

// Line returns the source line of the instruction at index lasti (in code
// units: 2-byte _Py_CODEUNITs, counted from the start of the bytecode) of a
// code object of CPython 3.minor, from its line table (co_lnotab in 3.9,
// co_linetable from 3.10) and co_firstlineno; 0 when the table gives none.
//
// It follows PyCode_Addr2Line, which frames use for f_lineno, on any bytes:
// the table comes from another process, so work is bounded by its length.
// Where CPython reads past the table, it reads the NUL that ends every bytes
// object, and so does Line; lines are C ints, which wrap on overflow. A
// hostile table can give any int32, negative too.
func Line(minor int, table []byte, firstLine int, lasti uint32) int {
	switch minor {
	case 9:
		return int(lnotabLine(table, int32(firstLine), 2*uint64(lasti)))
	case 10:
		return int(linetableLine(table, int32(firstLine), 2*uint64(lasti)))
	case 11, 12, 13:
		return int(locationLine(table, int32(firstLine), uint64(lasti)))
	}
	return 0
}

// lnotabLine reads a 3.9 co_lnotab (Objects/lnotab_notes.txt): pairs of
// unsigned byte-offset increment and signed line increment. Like 3.9's
// PyCode_Addr2Line it ignores an odd last byte, and past the table the last
// line holds, so it never returns 0 for a valid firstLine.
func lnotabLine(table []byte, line int32, off uint64) int32 {
	var addr uint64
	for i := 0; i+1 < len(table); i += 2 {
		addr += uint64(table[i])
		if addr > off {
			break
		}
		line += int32(int8(table[i+1]))
	}
	return line
}

// lnotabNone is the line delta with which a 3.10 co_linetable entry says
// its instructions have no line.
const lnotabNone = -128

// linetableLine reads a 3.10 co_linetable (PEP 626): pairs of unsigned
// range length in bytes and signed line delta, from which
// _PyCode_CheckLineNumber takes the first range that ends past off.
// Empty ranges only move the line, as long deltas are split across them.
func linetableLine(table []byte, line int32, off uint64) int32 {
	var end uint64
	for i := 0; i < len(table); i += 2 {
		end += uint64(table[i])
		var delta int32
		if i+1 < len(table) {
			delta = int32(int8(table[i+1]))
		}
		if delta != lnotabNone {
			line += delta
		}
		if off < end {
			if delta == lnotabNone {
				return 0
			}
			return line
		}
	}
	return 0
}

// Location entry kinds (_PyCodeLocationInfoKind) that move the line.
const (
	locOneLine1  = 11
	locOneLine2  = 12
	locNoColumns = 13
	locLong      = 14
)

// locationLine reads a 3.11+ co_linetable (Objects/locations.md): entries
// of a first byte holding bit 7, a kind in bits 3-6 and a length in code
// units less one in bits 0-2, followed by bytes without bit 7.
func locationLine(table []byte, line int32, lasti uint64) int32 {
	var end uint64
	for i := 0; i < len(table); {
		b := table[i]
		switch kind := b >> 3 & 15; kind {
		case locOneLine1, locOneLine2:
			line += int32(kind) - 10
		case locNoColumns, locLong:
			line += signedVarint(table[i+1:])
		}
		end += uint64(b&7) + 1
		if lasti < end {
			// CPython's is_no_line_marker: kind 15 (no location), and bit 7,
			// which only a hostile first byte lacks.
			if b>>3 == 0x1f {
				return 0
			}
			return line
		}
		for i++; i < len(table) && table[i]&0x80 == 0; i++ {
		}
	}
	return 0
}

// signedVarint decodes scan_signed_varint's encoding: 6-bit chunks, least
// significant first, bit 6 set on all but the last, then the sign in bit 0.
// Like CPython it reads on into the next entry; a seventh chunk would shift
// past CPython's 32-bit unsigned int, undefined behaviour, so it ends there,
// which also keeps the walk linear in the table's length.
func signedVarint(p []byte) int32 {
	var v uint32
	for i := 0; i < len(p) && i < 6; i++ {
		v |= uint32(p[i]&63) << (6 * i)
		if p[i]&64 == 0 {
			break
		}
	}
	if v&1 != 0 {
		return -int32(v >> 1)
	}
	return int32(v >> 1)
}
