package profile

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/flint-dev/flint/internal/symbol"
)

// The binary codec below carries stacks and whole windows without any
// outside dictionary: a stack encoded by AppendStack names its own
// functions, files and mappings, so a store can keep it by hash, and a
// window encoded by MarshalBinary can be spooled to disk and sent later.
// The byte layout is documented in docs/STORE.md ("Self-contained
// encodings"). Decoders take untrusted input: every count is checked
// against the bytes left before anything is allocated for it, and they
// never panic (FuzzCodec).

// Format bytes: the first byte of each encoding. A decoder refuses other
// values, so a format change gets a new byte rather than a silent misread.
// Format 2 adds each frame's start line; decoders read format 1 as well
// (start lines 0), which older agents wrote to spools and stores. Profile
// format 3 adds the profile's Kind; formats 1 and 2 read as CPU.
const (
	stackFormat   = 2
	profileFormat = 3
)

// ErrCorrupt reports bytes that are not a valid encoding.
var ErrCorrupt = errors.New("corrupt encoding")

// Mapping flags of the stack encoding.
const (
	noMapping     = 0
	userMapping   = 1
	kernelMapping = 2
)

// AppendStack appends the self-contained encoding of stack to b: a format
// byte, then each location with its address, mapping and frames. Equal
// stacks (same addresses, mappings and frames) encode to equal bytes, so
// a hash of the bytes identifies the stack.
func AppendStack(b []byte, stack []*Location) []byte {
	b = append(b, stackFormat)
	b = binary.AppendUvarint(b, uint64(len(stack)))
	for _, l := range stack {
		b = binary.AppendUvarint(b, l.Address)
		switch m := l.Mapping; {
		case m == nil:
			b = append(b, noMapping)
		default:
			if m.Kernel {
				b = append(b, kernelMapping)
			} else {
				b = append(b, userMapping)
			}
			b = binary.AppendUvarint(b, m.Start)
			b = binary.AppendUvarint(b, m.Limit)
			b = binary.AppendUvarint(b, m.Offset)
			b = appendString(b, m.File)
			b = appendString(b, m.BuildID)
		}
		b = appendFrames(b, l.Frames, appendString)
	}
	return b
}

// appendFrames appends a count and the frames, their strings as putString
// writes them: inline in a stack, as string indexes in a window.
func appendFrames(b []byte, frames []symbol.Frame, putString func([]byte, string) []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(frames)))
	for _, f := range frames {
		b = putString(b, f.Function)
		b = putString(b, f.File)
		b = binary.AppendVarint(b, int64(f.Line))
		b = binary.AppendVarint(b, int64(f.StartLine))
	}
	return b
}

// frames reads what appendFrames wrote, strings by str; format 1 has no
// start lines.
func (d *decoder) frames(format byte, str func() string) []symbol.Frame {
	var frames []symbol.Frame
	for range d.count(3) { // function, file, line: a byte each at least
		f := symbol.Frame{Function: str(), File: str(), Line: d.int()}
		if format > 1 {
			f.StartLine = d.int()
		}
		frames = append(frames, f)
	}
	return frames
}

// DecodeStack decodes an AppendStack encoding. Every location gets its
// own Location and Mapping.
func DecodeStack(b []byte) ([]*Location, error) {
	d := decoder{b: b}
	format := d.byte()
	if format != 1 && format != stackFormat {
		return nil, d.fail(fmt.Errorf("%w: stack format %d, want 1 to %d", ErrCorrupt, format, stackFormat))
	}
	// A location takes at least 3 bytes (address, flag, frame count).
	n := d.count(3)
	var stack []*Location // nil when empty, as for the other slices
	for range n {
		l := &Location{Address: d.uvarint()}
		switch flag := d.byte(); flag {
		case noMapping:
		case userMapping, kernelMapping:
			l.Mapping = &Mapping{Start: d.uvarint(), Limit: d.uvarint(), Offset: d.uvarint(),
				File: d.string(), BuildID: d.string(), Kernel: flag == kernelMapping}
		default:
			d.setErr(fmt.Errorf("%w: mapping flag %d", ErrCorrupt, flag))
		}
		l.Frames = d.frames(format, d.string)
		if d.err != nil {
			return nil, d.err
		}
		stack = append(stack, l)
	}
	if err := d.end(); err != nil {
		return nil, err
	}
	return stack, nil
}

// MarshalBinary encodes the whole window: start, duration, period and
// every sample with its count, full label set and stack. Strings, mappings,
// locations and label sets are written once each and referred to by index,
// so a window costs about what its distinct content does. Locations are
// told apart by pointer and mappings by value; the order of samples is
// kept.
func (p *Profile) MarshalBinary() ([]byte, error) {
	e := encoder{strings: map[string]uint64{}, mappings: map[Mapping]uint64{},
		locations: map[*Location]uint64{}, labelSets: map[string]uint64{}}
	type encSample struct {
		count  int64
		labels uint64
		stack  []uint64
	}
	samples := make([]encSample, len(p.Samples))
	var names []string
	for i, s := range p.Samples {
		if s == nil {
			return nil, fmt.Errorf("encode profile: sample %d is nil", i)
		}
		es := encSample{count: s.Count, stack: make([]uint64, len(s.Stack))}
		es.labels, names = e.labelSet(s.Labels, names)
		for j, l := range s.Stack {
			if l == nil {
				return nil, fmt.Errorf("encode profile: sample %d has a nil location", i)
			}
			es.stack[j] = e.location(l)
		}
		samples[i] = es
	}

	b := []byte{profileFormat}
	b = binary.AppendVarint(b, p.Start.Unix())
	b = binary.AppendUvarint(b, uint64(p.Start.Nanosecond()))
	b = binary.AppendVarint(b, int64(p.Duration))
	b = binary.AppendVarint(b, int64(p.Period))
	b = append(b, byte(p.Kind))
	b = binary.AppendUvarint(b, uint64(len(e.stringList)))
	for _, s := range e.stringList {
		b = appendString(b, s)
	}
	b = binary.AppendUvarint(b, uint64(len(e.mappingList)))
	for _, m := range e.mappingList {
		b = binary.AppendUvarint(b, m.Start)
		b = binary.AppendUvarint(b, m.Limit)
		b = binary.AppendUvarint(b, m.Offset)
		b = binary.AppendUvarint(b, e.str(m.File))
		b = binary.AppendUvarint(b, e.str(m.BuildID))
		if m.Kernel {
			b = append(b, 1)
		} else {
			b = append(b, 0)
		}
	}
	b = binary.AppendUvarint(b, uint64(len(e.locationList)))
	for _, l := range e.locationList {
		b = binary.AppendUvarint(b, l.Address)
		m := uint64(0) // 0: no mapping, i+1: mapping i
		if l.Mapping != nil {
			m = e.mappings[*l.Mapping] + 1
		}
		b = binary.AppendUvarint(b, m)
		b = appendFrames(b, l.Frames, func(b []byte, s string) []byte { return binary.AppendUvarint(b, e.str(s)) })
	}
	b = binary.AppendUvarint(b, uint64(len(e.labelSetList)))
	for _, ls := range e.labelSetList {
		b = binary.AppendUvarint(b, uint64(len(ls)/2))
		for _, s := range ls {
			b = binary.AppendUvarint(b, s)
		}
	}
	b = binary.AppendUvarint(b, uint64(len(samples)))
	for _, s := range samples {
		b = binary.AppendVarint(b, s.count)
		b = binary.AppendUvarint(b, s.labels)
		b = binary.AppendUvarint(b, uint64(len(s.stack)))
		for _, l := range s.stack {
			b = binary.AppendUvarint(b, l)
		}
	}
	return b, nil
}

// UnmarshalBinary decodes a MarshalBinary encoding into p, replacing its
// contents. Samples with the same label set share one Labels map, and
// samples share Locations and Mappings as the encoded window did: treat
// them as read only. Empty slices decode as nil. Start is in the local
// time zone, as time.Unix gives.
func (p *Profile) UnmarshalBinary(b []byte) error {
	d := decoder{b: b}
	format := d.byte()
	if format < 1 || format > profileFormat {
		return d.fail(fmt.Errorf("%w: profile format %d, want 1 to %d", ErrCorrupt, format, profileFormat))
	}
	sec := d.varint()
	nsec := d.uvarint()
	if nsec >= 1e9 {
		d.setErr(fmt.Errorf("%w: nanoseconds %d", ErrCorrupt, nsec))
	}
	out := Profile{Start: time.Unix(sec, int64(nsec)), Duration: time.Duration(d.varint()), Period: time.Duration(d.varint())}
	if format >= 3 {
		if out.Kind = Kind(d.byte()); out.Kind > Wall {
			d.setErr(fmt.Errorf("%w: profile kind %d", ErrCorrupt, out.Kind))
		}
	}

	strs := make([]string, 0, d.count(1))
	for range cap(strs) {
		strs = append(strs, d.string())
	}
	str := func() string {
		i := d.uvarint()
		if i >= uint64(len(strs)) {
			d.setErr(fmt.Errorf("%w: string index %d of %d", ErrCorrupt, i, len(strs)))
			return ""
		}
		return strs[i]
	}
	mappings := make([]*Mapping, 0, d.count(6))
	for range cap(mappings) {
		m := &Mapping{Start: d.uvarint(), Limit: d.uvarint(), Offset: d.uvarint(), File: str(), BuildID: str()}
		switch k := d.byte(); k {
		case 0:
		case 1:
			m.Kernel = true
		default:
			d.setErr(fmt.Errorf("%w: kernel flag %d", ErrCorrupt, k))
		}
		mappings = append(mappings, m)
	}
	locations := make([]*Location, 0, d.count(3))
	for range cap(locations) {
		l := &Location{Address: d.uvarint()}
		if m := d.uvarint(); m > uint64(len(mappings)) {
			d.setErr(fmt.Errorf("%w: mapping index %d of %d", ErrCorrupt, m-1, len(mappings)))
		} else if m > 0 {
			l.Mapping = mappings[m-1]
		}
		l.Frames = d.frames(format, str)
		if d.err != nil {
			return d.err
		}
		locations = append(locations, l)
	}
	labelSets := make([]map[string]string, 0, d.count(1))
	for range cap(labelSets) {
		n := d.count(2)
		ls := make(map[string]string, n)
		for range n {
			k := str()
			ls[k] = str()
		}
		if len(ls) != n && d.err == nil {
			d.setErr(fmt.Errorf("%w: label set repeats a name", ErrCorrupt))
		}
		labelSets = append(labelSets, ls)
	}
	for range d.count(3) {
		s := &Sample{Count: d.varint()}
		if i := d.uvarint(); i >= uint64(len(labelSets)) {
			d.setErr(fmt.Errorf("%w: label set index %d of %d", ErrCorrupt, i, len(labelSets)))
		} else {
			s.Labels = labelSets[i]
		}
		for range d.count(1) {
			if i := d.uvarint(); i >= uint64(len(locations)) {
				d.setErr(fmt.Errorf("%w: location index %d of %d", ErrCorrupt, i, len(locations)))
			} else {
				s.Stack = append(s.Stack, locations[i])
			}
		}
		if d.err != nil {
			return d.err
		}
		out.Samples = append(out.Samples, s)
	}
	if err := d.end(); err != nil {
		return err
	}
	*p = out
	return nil
}

// encoder builds the tables of a window's encoding.
type encoder struct {
	strings      map[string]uint64
	stringList   []string
	mappings     map[Mapping]uint64
	mappingList  []Mapping
	locations    map[*Location]uint64
	locationList []*Location
	labelSets    map[string]uint64 // by canonical encoding
	labelSetList [][]uint64        // name, value string indexes
}

func (e *encoder) str(s string) uint64 {
	i, ok := e.strings[s]
	if !ok {
		i = uint64(len(e.stringList))
		e.strings[s] = i
		e.stringList = append(e.stringList, s)
	}
	return i
}

func (e *encoder) location(l *Location) uint64 {
	if i, ok := e.locations[l]; ok {
		return i
	}
	if m := l.Mapping; m != nil {
		if _, ok := e.mappings[*m]; !ok {
			e.str(m.File)
			e.str(m.BuildID)
			e.mappings[*m] = uint64(len(e.mappingList))
			e.mappingList = append(e.mappingList, *m)
		}
	}
	for _, f := range l.Frames {
		e.str(f.Function)
		e.str(f.File)
	}
	i := uint64(len(e.locationList))
	e.locations[l] = i
	e.locationList = append(e.locationList, l)
	return i
}

// labelSet returns the index of labels' set, sorted by name so that equal
// sets share one entry; names is scratch space.
func (e *encoder) labelSet(labels map[string]string, names []string) (uint64, []string) {
	names = names[:0]
	for k := range labels {
		names = append(names, k)
	}
	slices.Sort(names)
	var key strings.Builder
	for _, k := range names {
		key.Write(appendString(nil, k))
		key.Write(appendString(nil, labels[k]))
	}
	if i, ok := e.labelSets[key.String()]; ok {
		return i, names
	}
	set := make([]uint64, 0, 2*len(names))
	for _, k := range names {
		set = append(set, e.str(k), e.str(labels[k]))
	}
	i := uint64(len(e.labelSetList))
	e.labelSets[key.String()] = i
	e.labelSetList = append(e.labelSetList, set)
	return i, names
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// decoder reads varints and strings from untrusted bytes. The first error
// sticks: later reads return zero values, so a decoding loop checks d.err
// once per item rather than after every field.
type decoder struct {
	b   []byte
	off int
	err error
}

func (d *decoder) setErr(err error) {
	if d.err == nil {
		d.err = err
	}
}

func (d *decoder) fail(err error) error {
	d.setErr(err)
	return d.err
}

func (d *decoder) corrupt(what string) {
	d.setErr(fmt.Errorf("%w: %s at byte %d", ErrCorrupt, what, d.off))
}

func (d *decoder) byte() byte {
	if d.err != nil {
		return 0
	}
	if d.off >= len(d.b) {
		d.corrupt("truncated")
		return 0
	}
	c := d.b[d.off]
	d.off++
	return c
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b[d.off:])
	if n <= 0 {
		d.corrupt("bad varint")
		return 0
	}
	d.off += n
	return v
}

// varint reads a zigzag-encoded varint, as binary.AppendVarint writes.
func (d *decoder) varint() int64 {
	u := d.uvarint()
	return int64(u>>1) ^ -int64(u&1)
}

// int reads a varint that must fit an int (a line number).
func (d *decoder) int() int {
	v := d.varint()
	if int64(int(v)) != v {
		d.corrupt("integer out of range")
		return 0
	}
	return int(v)
}

// count reads an item count and checks that the bytes left can hold that
// many items of at least minSize bytes each, which caps what a decoder
// allocates at a small multiple of the input's size.
func (d *decoder) count(minSize int) int {
	n := d.uvarint()
	if d.err != nil {
		return 0
	}
	if n > uint64((len(d.b)-d.off)/minSize) {
		d.corrupt(fmt.Sprintf("count %d exceeds the bytes left", n))
		return 0
	}
	return int(n)
}

func (d *decoder) string() string {
	n := d.uvarint()
	if d.err != nil {
		return ""
	}
	if n > uint64(len(d.b)-d.off) {
		d.corrupt("string length")
		return ""
	}
	s := string(d.b[d.off : d.off+int(n)])
	d.off += int(n)
	return s
}

// end reports the sticky error, or trailing bytes after a valid encoding.
func (d *decoder) end() error {
	if d.err == nil && d.off != len(d.b) {
		d.corrupt("trailing bytes")
	}
	return d.err
}
