package symbol

import (
	"bufio"
	"cmp"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
)

// PerfMap names JIT-compiled code from a perf map file (/tmp/perf-PID.map,
// written by V8, the JVM with perf-map-agent, .NET, LuaJIT, Python 3.12 and
// others). It is safe for concurrent use.
type PerfMap struct {
	starts []uint64 // sorted; segments are disjoint
	segs   []perfSeg
	blob   string
}

type perfSeg struct {
	end     uint64
	nameOff uint32
	nameLen uint32
}

// ReadPerfMap parses perf map lines "START SIZE NAME": START and SIZE in hex
// (an 0x prefix is allowed), NAME the rest of the line, spaces included.
// Malformed and empty entries are skipped. JITs reuse memory and append to
// the file, so where entries overlap the later line wins.
func ReadPerfMap(r io.Reader) (*PerfMap, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	var (
		blob    strings.Builder
		entries []perfEntry
		err     error
	)
	for err == nil {
		var line []byte
		line, err = br.ReadSlice('\n')
		if err == bufio.ErrBufferFull {
			// A name of 64 KiB is not a symbol; skip the whole line.
			for err == bufio.ErrBufferFull {
				_, err = br.ReadSlice('\n')
			}
			continue
		}
		if err != nil && err != io.EOF {
			return nil, fmt.Errorf("read perf map: %w", err)
		}
		start, size, name, ok := parsePerfMapLine(line)
		if !ok || uint64(blob.Len())+uint64(len(name)) > math.MaxUint32 {
			continue
		}
		if blob.Cap()-blob.Len() < len(name) {
			blob.Grow(len(name)) // doubles, where Write would grow by 1.25
		}
		if len(entries) == cap(entries) {
			entries = slices.Grow(entries, max(len(entries), 1024))
		}
		entries = append(entries, perfEntry{
			start:   start,
			end:     start + size,
			seq:     len(entries),
			nameOff: uint32(blob.Len()),
			nameLen: uint32(len(name)),
		})
		blob.Write(name)
	}
	m := &PerfMap{blob: blob.String()}
	m.resolveOverlaps(entries)
	// Keep no more than the map needs: the string pins the builder's whole
	// capacity, and segments may have left entries' names unused.
	if m.used() < blob.Cap()*3/4 {
		m.compact()
	}
	if cap(m.segs) > len(m.segs)*9/8 {
		m.starts, m.segs = slices.Clone(m.starts), slices.Clone(m.segs)
	}
	return m, nil
}

// Lookup returns the JIT function containing the absolute address addr as a
// single frame, or nil when no entry covers it.
func (m *PerfMap) Lookup(addr uint64) []Frame {
	i, found := slices.BinarySearch(m.starts, addr)
	if !found {
		i--
	}
	if i < 0 || addr >= m.segs[i].end {
		return nil
	}
	s := m.segs[i]
	return []Frame{{Function: m.blob[s.nameOff : s.nameOff+s.nameLen]}}
}

// resolveOverlaps cuts the entries into disjoint segments, each named by the
// latest entry covering it: a sweep over every start and end with a heap of
// the entries covering the current point, latest on top.
func (m *PerfMap) resolveOverlaps(entries []perfEntry) {
	bounds := make([]uint64, 0, 2*len(entries))
	for _, e := range entries {
		bounds = append(bounds, e.start, e.end)
	}
	slices.Sort(bounds)
	bounds = slices.Compact(bounds)
	slices.SortFunc(entries, func(a, b perfEntry) int { return cmp.Compare(a.start, b.start) })

	var live perfHeap
	m.starts = make([]uint64, 0, len(entries))
	m.segs = make([]perfSeg, 0, len(entries))
	next := 0
	for k := 0; k+1 < len(bounds); k++ {
		b := bounds[k]
		for next < len(entries) && entries[next].start <= b {
			live.push(entries[next])
			next++
		}
		// Entries below the top may have ended too; they are dropped when
		// they reach the top.
		for len(live) > 0 && live[0].end <= b {
			live.pop()
		}
		if len(live) == 0 {
			continue
		}
		top := live[0]
		if n := len(m.starts); n > 0 && m.segs[n-1].end == b && m.segs[n-1].nameOff == top.nameOff && m.segs[n-1].nameLen == top.nameLen {
			m.segs[n-1].end = bounds[k+1]
			continue
		}
		m.starts = append(m.starts, b)
		m.segs = append(m.segs, perfSeg{end: bounds[k+1], nameOff: top.nameOff, nameLen: top.nameLen})
	}
}

// used returns how many bytes of names the segments refer to.
func (m *PerfMap) used() int {
	n := 0
	for _, s := range m.segs {
		n += int(s.nameLen)
	}
	return n
}

// compact copies the names still in use into a right-sized string: a
// long-running JIT leaves many overwritten names behind.
func (m *PerfMap) compact() {
	var blob strings.Builder
	blob.Grow(m.used())
	moved := make(map[uint32]uint32) // an entry cut in two keeps one copy
	for i, s := range m.segs {
		off, ok := moved[s.nameOff]
		if !ok {
			off = uint32(blob.Len())
			moved[s.nameOff] = off
			blob.WriteString(m.blob[s.nameOff : s.nameOff+s.nameLen])
		}
		m.segs[i].nameOff = off
	}
	m.blob = blob.String()
}

// parsePerfMapLine splits "START SIZE NAME\n". Entries that are empty or
// wrap around the address space are not valid.
func parsePerfMapLine(line []byte) (start, size uint64, name []byte, ok bool) {
	rest := trimLineEnd(line)
	start, rest, ok = parseHexField(rest)
	if !ok {
		return 0, 0, nil, false
	}
	size, rest, ok = parseHexField(rest)
	if !ok || size == 0 || start+size < start {
		return 0, 0, nil, false
	}
	for len(rest) > 0 && (rest[0] == ' ' || rest[0] == '\t') {
		rest = rest[1:]
	}
	if len(rest) == 0 {
		return 0, 0, nil, false
	}
	return start, size, rest, true
}

// parseHexField parses a hex number (optionally 0x-prefixed) after optional
// blanks and requires a blank after it.
func parseHexField(b []byte) (n uint64, rest []byte, ok bool) {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t') {
		b = b[1:]
	}
	if len(b) >= 2 && b[0] == '0' && (b[1] == 'x' || b[1] == 'X') {
		b = b[2:]
	}
	i := 0
	for ; i < len(b); i++ {
		d, valid := hexValue(b[i])
		if !valid {
			break
		}
		if n>>60 != 0 {
			return 0, nil, false // more than 64 bits
		}
		n = n<<4 | uint64(d)
	}
	if i == 0 || i == len(b) || (b[i] != ' ' && b[i] != '\t') {
		return 0, nil, false
	}
	return n, b[i:], true
}

// perfEntry is one line of a perf map, its name in the blob.
type perfEntry struct {
	start, end uint64
	seq        int // line order: later lines win
	nameOff    uint32
	nameLen    uint32
}

// perfHeap is a max-heap of entries by line order. It is written out, not
// container/heap, which boxes every entry it is given.
type perfHeap []perfEntry

func (h *perfHeap) push(e perfEntry) {
	*h = append(*h, e)
	q := *h
	for i := len(q) - 1; i > 0; {
		p := (i - 1) / 2
		if q[p].seq >= q[i].seq {
			break
		}
		q[p], q[i] = q[i], q[p]
		i = p
	}
}

func (h *perfHeap) pop() {
	q := *h
	n := len(q) - 1
	q[0] = q[n]
	q = q[:n]
	for i := 0; ; {
		c := 2*i + 1
		if c >= n {
			break
		}
		if c+1 < n && q[c+1].seq > q[c].seq {
			c++
		}
		if q[i].seq >= q[c].seq {
			break
		}
		q[i], q[c] = q[c], q[i]
		i = c
	}
	*h = q
}
