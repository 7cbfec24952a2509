package symbol

import (
	"debug/dwarf"
	"debug/elf"
	"errors"
	"path/filepath"
	"sort"
	"sync"
)

// The Symbolizer names C and C++ frames from ELF symbols alone, without
// file and line: a binary's DWARF line table can hold millions of rows,
// too many to keep for every binary on a node. SourceLine reads it for the
// few frames that deserve a line, such as the one a doctor finding blames.

// maxLineTables bounds the line tables kept; past it the cache starts over.
const maxLineTables = 16

// lineTables caches line tables by binary path; nil when it has none.
var lineTables = struct {
	sync.Mutex
	m map[string]*lineTable
}{m: map[string]*lineTable{}}

// lineTable maps virtual addresses to source lines, sorted by address.
type lineTable struct {
	rows     []lineRow
	segments []elf.ProgHeader
}

type lineRow struct {
	addr uint64
	file string
	line int
	end  bool // end of a sequence: no line from here
}

// SourceLine names the source line of a file offset in the binary at path;
// ok is false when the binary has no DWARF line table covering it.
func SourceLine(path string, fileOffset uint64) (file string, line int, ok bool) {
	lineTables.Lock()
	t, seen := lineTables.m[path]
	if !seen {
		if len(lineTables.m) >= maxLineTables {
			clear(lineTables.m)
		}
		t, _ = readLineTable(path)
		lineTables.m[path] = t
	}
	lineTables.Unlock()
	if t == nil {
		return "", 0, false
	}
	addr, ok := t.vaddr(fileOffset)
	if !ok {
		return "", 0, false
	}
	i := sort.Search(len(t.rows), func(i int) bool { return t.rows[i].addr > addr }) - 1
	if i < 0 || t.rows[i].end || t.rows[i].line == 0 {
		return "", 0, false
	}
	return t.rows[i].file, t.rows[i].line, true
}

func (t *lineTable) vaddr(off uint64) (uint64, bool) {
	for _, p := range t.segments {
		if off >= p.Off && off-p.Off < p.Filesz {
			return p.Vaddr + off - p.Off, true
		}
	}
	return 0, false
}

func readLineTable(path string) (*lineTable, error) {
	f, err := elf.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if f.Section(".debug_line") == nil {
		return nil, errors.New("no DWARF line table")
	}
	d, err := f.DWARF()
	if err != nil {
		return nil, err
	}
	t := &lineTable{}
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD {
			t.segments = append(t.segments, p.ProgHeader)
		}
	}
	r := d.Reader()
	for {
		cu, err := r.Next()
		if err != nil || cu == nil {
			break
		}
		if cu.Tag != dwarf.TagCompileUnit {
			r.SkipChildren()
			continue
		}
		compDir, _ := cu.Val(dwarf.AttrCompDir).(string)
		lr, err := d.LineReader(cu)
		if err == nil && lr != nil {
			var e dwarf.LineEntry
			for lr.Next(&e) == nil {
				name := ""
				if e.File != nil {
					name = e.File.Name
					if !filepath.IsAbs(name) && compDir != "" {
						name = filepath.Join(compDir, name)
					}
				}
				t.rows = append(t.rows, lineRow{addr: e.Address, file: name, line: e.Line, end: e.EndSequence})
			}
		}
		r.SkipChildren()
	}
	sort.SliceStable(t.rows, func(i, j int) bool { return t.rows[i].addr < t.rows[j].addr })
	return t, nil
}
