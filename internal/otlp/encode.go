package otlp

import (
	"crypto/rand"
	"encoding/binary"
	"slices"
	"strconv"
	"time"

	"github.com/flint-dev/flint/internal/profile"
	common "go.opentelemetry.io/proto/slim/otlp/common/v1"
	pb "go.opentelemetry.io/proto/slim/otlp/profiles/v1development"
	resource "go.opentelemetry.io/proto/slim/otlp/resource/v1"
)

// Scope names flint in the profiles it sends.
const Scope = "flint"

// frameTypeKey is the location attribute the OpenTelemetry eBPF profiler
// and its consumers read to tell kernel frames from user ones.
const frameTypeKey = "profile.frame.type"

// Encode converts a window to OTLP profiles: one ResourceProfiles per
// process (its labels as resource attributes), each holding one CPU
// profile, sample type samples/count with period cpu/nanoseconds, whose
// samples carry the thread's attributes; one dictionary for them all.
// Stacks are leaf first; a location's lines are innermost first, so
// inlined Go frames are lines of one location. version is flint's, for the
// instrumentation scope.
func Encode(p *profile.Profile, version string) *pb.ProfilesData {
	e := newEncoder()
	byProcess := map[string]*pb.Profile{}
	var key []byte
	for _, s := range p.Samples {
		if s == nil || s.Count <= 0 {
			continue
		}
		key = appendResourceKey(key[:0], s.Labels)
		prof := byProcess[string(key)]
		if prof == nil {
			prof = e.newProfile(p)
			byProcess[string(key)] = prof
			e.data.ResourceProfiles = append(e.data.ResourceProfiles, &pb.ResourceProfiles{
				Resource: &resource.Resource{Attributes: resourceAttributes(s.Labels)},
				ScopeProfiles: []*pb.ScopeProfiles{{
					Scope:    &common.InstrumentationScope{Name: Scope, Version: version},
					Profiles: []*pb.Profile{prof},
				}},
			})
		}
		prof.Samples = append(prof.Samples, &pb.Sample{
			StackIndex:       e.stack(s.Stack),
			AttributeIndices: e.sampleAttributes(s.Labels),
			Values:           []int64{s.Count},
		})
	}
	return e.data
}

// encoder builds one ProfilesData and its dictionary, whose tables start
// with the zero value the format requires at index 0.
type encoder struct {
	data      *pb.ProfilesData
	dict      *pb.ProfilesDictionary
	strings   map[string]int32
	attrs     map[[2]string]int32 // key, value as text (ints as decimal)
	mappings  map[*profile.Mapping]int32
	locations map[*profile.Location]int32
	functions map[funcKey]int32
	stacks    map[string]int32 // location indices as varints
	key       []byte           // scratch for stack keys
}

type funcKey struct {
	name, file string
	startLine  int
}

func newEncoder() *encoder {
	dict := &pb.ProfilesDictionary{
		MappingTable:   []*pb.Mapping{{}},
		LocationTable:  []*pb.Location{{}},
		FunctionTable:  []*pb.Function{{}},
		LinkTable:      []*pb.Link{{}},
		StringTable:    []string{""},
		AttributeTable: []*pb.KeyValueAndUnit{{}},
		StackTable:     []*pb.Stack{{}},
	}
	return &encoder{
		data:      &pb.ProfilesData{Dictionary: dict},
		dict:      dict,
		strings:   map[string]int32{"": 0},
		attrs:     map[[2]string]int32{},
		mappings:  map[*profile.Mapping]int32{},
		locations: map[*profile.Location]int32{},
		functions: map[funcKey]int32{},
		stacks:    map[string]int32{},
	}
}

func (e *encoder) newProfile(p *profile.Profile) *pb.Profile {
	id := make([]byte, 16) // the format wants a random, non-zero ID
	rand.Read(id)
	return &pb.Profile{
		SampleType:   &pb.ValueType{TypeStrindex: e.str("samples"), UnitStrindex: e.str("count")},
		PeriodType:   &pb.ValueType{TypeStrindex: e.str("cpu"), UnitStrindex: e.str("nanoseconds")},
		Period:       p.Period.Nanoseconds(),
		TimeUnixNano: unixNano(p.Start),
		DurationNano: uint64(p.Duration.Nanoseconds()),
		ProfileId:    id,
	}
}

// unixNano is t for time_unix_nano: 0, "not set", for the zero time,
// whose UnixNano is undefined (year 1 does not fit in an int64).
func unixNano(t time.Time) uint64 {
	if t.IsZero() {
		return 0
	}
	return uint64(t.UnixNano())
}

func (e *encoder) str(s string) int32 {
	i, ok := e.strings[s]
	if !ok {
		i = int32(len(e.dict.StringTable))
		e.dict.StringTable = append(e.dict.StringTable, s)
		e.strings[s] = i
	}
	return i
}

// attr returns the dictionary index of an attribute; a value of an int
// attribute that is not a number travels as a string.
func (e *encoder) attr(key, value string, isInt bool) int32 {
	k := [2]string{key, value}
	i, ok := e.attrs[k]
	if !ok {
		i = int32(len(e.dict.AttributeTable))
		e.dict.AttributeTable = append(e.dict.AttributeTable, &pb.KeyValueAndUnit{KeyStrindex: e.str(key), Value: anyValue(value, isInt)})
		e.attrs[k] = i
	}
	return i
}

func anyValue(v string, isInt bool) *common.AnyValue {
	if isInt {
		if n, err := strconv.ParseInt(v, 10, 64); err == nil {
			return &common.AnyValue{Value: &common.AnyValue_IntValue{IntValue: n}}
		}
	}
	return &common.AnyValue{Value: &common.AnyValue_StringValue{StringValue: v}}
}

// sampleAttributes are a sample's thread labels as attribute indices.
func (e *encoder) sampleAttributes(labels map[string]string) []int32 {
	var out []int32
	for _, a := range attributes {
		if v, ok := labels[a.label]; ok && !a.resource {
			out = append(out, e.attr(a.key, v, a.isInt))
		}
	}
	return out
}

func (e *encoder) stack(locs []*profile.Location) int32 {
	idx := make([]int32, len(locs))
	e.key = e.key[:0]
	for i, l := range locs {
		idx[i] = e.location(l)
		e.key = binary.AppendUvarint(e.key, uint64(idx[i]))
	}
	i, ok := e.stacks[string(e.key)]
	if !ok {
		i = int32(len(e.dict.StackTable))
		e.dict.StackTable = append(e.dict.StackTable, &pb.Stack{LocationIndices: idx})
		e.stacks[string(e.key)] = i
	}
	return i
}

func (e *encoder) location(l *profile.Location) int32 {
	if i, ok := e.locations[l]; ok {
		return i
	}
	loc := &pb.Location{Address: l.Address}
	frameType := "native"
	if l.Mapping != nil {
		loc.MappingIndex = e.mapping(l.Mapping)
		if l.Mapping.Kernel {
			frameType = "kernel"
		}
	}
	loc.AttributeIndices = []int32{e.attr(frameTypeKey, frameType, false)}
	for _, f := range l.Frames {
		loc.Lines = append(loc.Lines, &pb.Line{FunctionIndex: e.function(f.Function, f.File, f.StartLine), Line: int64(f.Line)})
	}
	i := int32(len(e.dict.LocationTable))
	e.dict.LocationTable = append(e.dict.LocationTable, loc)
	e.locations[l] = i
	return i
}

func (e *encoder) function(name, file string, startLine int) int32 {
	k := funcKey{name, file, startLine}
	i, ok := e.functions[k]
	if !ok {
		i = int32(len(e.dict.FunctionTable))
		n := e.str(name)
		e.dict.FunctionTable = append(e.dict.FunctionTable, &pb.Function{
			NameStrindex: n, SystemNameStrindex: n, FilenameStrindex: e.str(file), StartLine: int64(startLine),
		})
		e.functions[k] = i
	}
	return i
}

func (e *encoder) mapping(m *profile.Mapping) int32 {
	if i, ok := e.mappings[m]; ok {
		return i
	}
	pm := &pb.Mapping{MemoryStart: m.Start, MemoryLimit: m.Limit, FileOffset: m.Offset, FilenameStrindex: e.str(m.File)}
	if m.BuildID != "" {
		pm.AttributeIndices = []int32{e.attr(buildIDKey, m.BuildID, false)}
	}
	i := int32(len(e.dict.MappingTable))
	e.dict.MappingTable = append(e.dict.MappingTable, pm)
	e.mappings[m] = i
	return i
}

// appendResourceKey appends what identifies a sample's process: its
// resource labels, the known ones in the order of attributes, the others
// by name. It allocates nothing for a window's usual labels.
func appendResourceKey(b []byte, labels map[string]string) []byte {
	for _, a := range attributes {
		if v, ok := labels[a.label]; ok && a.resource {
			b = append(b, a.key...)
			b = append(b, 0)
			b = append(b, v...)
			b = append(b, 0)
		}
	}
	for _, k := range otherLabels(labels) {
		b = append(b, k...)
		b = append(b, 0)
		b = append(b, labels[k]...)
		b = append(b, 0)
	}
	return b
}

// otherLabels are the labels without a semantic convention, by name.
func otherLabels(labels map[string]string) []string {
	var out []string
	for k := range labels {
		if _, known := byLabel[k]; !known {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}

// resourceAttributes are a process's labels as resource attributes, in
// the order of attributes, then flint.* ones by name.
func resourceAttributes(labels map[string]string) []*common.KeyValue {
	var out []*common.KeyValue
	for _, a := range attributes {
		if v, ok := labels[a.label]; ok && a.resource {
			out = append(out, &common.KeyValue{Key: a.key, Value: anyValue(v, a.isInt)})
		}
	}
	for _, k := range otherLabels(labels) {
		out = append(out, &common.KeyValue{Key: flintPrefix + k, Value: anyValue(labels[k], false)})
	}
	return out
}
