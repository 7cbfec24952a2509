package symbol

import (
	"debug/elf"
	"encoding/binary"
	"encoding/hex"
	"io"
)

// Note types and owners of the build IDs BuildID reads.
const (
	noteGNUBuildID = 3 // NT_GNU_BUILD_ID, owner "GNU"
	noteGoBuildID  = 4 // owner "Go", in .note.go.buildid
)

// maxNotes bounds how many bytes of notes BuildID reads in all: build ID
// notes are tens of bytes, and a hostile file may list a large note section
// many times over.
const maxNotes = 1 << 20

// BuildID returns f's GNU build ID in lowercase hex (as `readelf -n` and
// `file` print it) or, when f has none, its Go build ID as `go tool buildid`
// prints it. It returns "" when f has neither. It looks in the PT_NOTE
// segments first and then in the note sections, so it works on stripped
// files and on files without program headers (separate debug files).
func BuildID(f *elf.File) string {
	var goID string
	budget := uint64(maxNotes)
	found := func(r io.ReaderAt, size, align uint64) string {
		if size > budget {
			return ""
		}
		budget -= size
		data, err := readChecked(r, size)
		if err != nil {
			return ""
		}
		id, isGo := findBuildID(data, f.ByteOrder, align)
		if isGo {
			if goID == "" {
				goID = id
			}
			return ""
		}
		return id
	}
	for _, p := range f.Progs {
		if p.Type != elf.PT_NOTE {
			continue
		}
		if id := found(p, p.Filesz, p.Align); id != "" {
			return id
		}
	}
	for _, s := range f.Sections {
		if s.Type != elf.SHT_NOTE || s.Flags&elf.SHF_COMPRESSED != 0 {
			continue
		}
		if id := found(s, s.Size, s.Addralign); id != "" {
			return id
		}
	}
	return goID
}

// findBuildID walks the notes in data and returns the first GNU build ID in
// hex, or else the first Go build ID with isGo set. align is the alignment
// of the segment or section: 8-aligned note segments (.note.gnu.property)
// align descriptors and notes to 8 bytes, all others to 4.
func findBuildID(data []byte, bo binary.ByteOrder, align uint64) (id string, isGo bool) {
	pad := uint64(4)
	if align == 8 {
		pad = 8
	}
	var goID string
	// Offsets are from the start of data, which is aligned: padding aligns
	// the descriptor and the next note there, not the sizes.
	off := uint64(0)
	size := uint64(len(data))
	for off+12 <= size {
		nameSize := uint64(bo.Uint32(data[off:]))
		descSize := uint64(bo.Uint32(data[off+4:]))
		typ := bo.Uint32(data[off+8:])
		nameOff := off + 12
		descOff := noteAlign(nameOff+nameSize, pad)
		// Sizes are 32-bit, so these sums cannot overflow. The last note
		// may omit its trailing padding.
		if descOff+descSize > size {
			break
		}
		name := data[nameOff : nameOff+nameSize]
		desc := data[descOff : descOff+descSize]
		switch {
		case typ == noteGNUBuildID && string(name) == "GNU\x00" && descSize > 0:
			return hex.EncodeToString(desc), false
		case typ == noteGoBuildID && string(name) == "Go\x00\x00" && goID == "":
			goID = string(trimNUL(desc))
		}
		off = noteAlign(descOff+descSize, pad)
	}
	if goID != "" {
		return goID, true
	}
	return "", false
}

func noteAlign(n, a uint64) uint64 { return (n + a - 1) &^ (a - 1) }

// trimNUL cuts b at its first NUL: the Go linker pads the ID with zeros.
func trimNUL(b []byte) []byte {
	for i, c := range b {
		if c == 0 {
			return b[:i]
		}
	}
	return b
}
