package otlp

import (
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/flint-dev/flint/internal/profile"
	"github.com/flint-dev/flint/internal/symbol"
	common "go.opentelemetry.io/proto/slim/otlp/common/v1"
	pb "go.opentelemetry.io/proto/slim/otlp/profiles/v1development"
)

// Limits on one Decode, so that a broken or hostile sender costs bounded
// work and memory; input beyond them is an error, not truncated.
const (
	maxSamples    = 1 << 20 // samples in all the profiles of one ProfilesData
	maxStackDepth = 1024    // locations in one stack
	maxLines      = 1024    // lines (inlined frames) of one location
	maxAttributes = 256     // attributes of one resource, profile, sample, mapping or location
)

// htlhashKey is the build ID the OpenTelemetry profiles specification
// recommends on every mapping (a hash of the file's first and last pages
// and its length; docs/specs/otel/profiles/mappings). The OpenTelemetry
// eBPF profiler always sends it, the GNU build ID only when the file has one.
const htlhashKey = "process.executable.build_id.htlhash"

// kernelModule names the mapping of kernel locations a sender gave none,
// as internal/collect names the kernel's own.
const kernelModule = "[kernel.kallsyms]"

// Skipped says which profiles Decode left out because flint has no use
// for their sample type (off-CPU time, memory, ...).
type Skipped struct {
	Profiles int      // how many
	Types    []string // their sample types as "type/unit", each once, in order of appearance; at most maxSkippedTypes
}

// maxSkippedTypes bounds Skipped.Types, which senders see in messages.
const maxSkippedTypes = 8

// Decode converts OTLP profiles, flint's own (Encode) or another
// producer's such as the OpenTelemetry eBPF profiler, to one flint
// Profile per OTLP profile whose sample type is CPU samples; it skips and
// reports the others.
//
// Counts: for sample type samples/count, a sample's count is the sum of
// its values, or the number of its timestamps when it has no values; for
// cpu or wall time (nanoseconds, microseconds, milliseconds or seconds) it
// is the time divided by the period, rounded, at least 1 when the time is
// not zero, and a sample with timestamps only counts one per timestamp.
// Samples counting 0 are left out.
//
// Period: period × its unit when the period type is cpu or wall time;
// otherwise it is unknown and Period is 0, and a time-valued profile
// (whose counts need the period) is skipped. A time_unix_nano of 0 is the
// zero Start.
//
// Labels: the resource's attributes, then the profile's, then the
// sample's, a later one replacing an earlier one of the same key; keys
// become labels as labelOf says, ints and doubles their decimal text,
// bools "true" or "false", bytes hex; empty values, arrays and maps are
// left out.
//
// Stacks: a location without lines is named like flint's unnamed
// addresses ("libc.so.6+0x1234", "[kernel]+0x…", "[unknown]"); a location
// whose profile.frame.type attribute is "kernel" gets a Kernel mapping. A
// mapping's BuildID is its process.executable.build_id.gnu attribute, or
// else its process.executable.build_id.htlhash.
//
// Sharing: within one Decode, equal dictionary entries decode to the same
// *Location and *Mapping, samples of one stack share their Stack slice and
// samples of one profile with the same attributes share their Labels map;
// treat them all as read-only.
//
// Any index out of its table, a negative or overflowing value, more than
// 1<<20 samples, a stack deeper than 1024 or a location with more than
// 1024 lines makes the whole of d an error naming the profile and sample.
func Decode(d *pb.ProfilesData) ([]*profile.Profile, Skipped, error) {
	var skipped Skipped
	dec := &decoder{
		dict:      d.GetDictionary(),
		mappings:  map[mappingKey]*profile.Mapping{},
		locations: map[int32]*profile.Location{},
		stacks:    map[int32][]*profile.Location{},
	}
	var out []*profile.Profile
	n, samples := 0, 0
	for ri, rp := range d.GetResourceProfiles() {
		res, err := dec.keyValues(rp.GetResource().GetAttributes())
		if err != nil {
			return nil, Skipped{}, fmt.Errorf("resource %d: %w", ri, err)
		}
		for _, sp := range rp.GetScopeProfiles() {
			for _, pp := range sp.GetProfiles() {
				if dec.dict == nil {
					return nil, Skipped{}, fmt.Errorf("profile %d: no dictionary", n)
				}
				samples += len(pp.GetSamples())
				if samples > maxSamples {
					return nil, Skipped{}, fmt.Errorf("profile %d: more than %d samples in all profiles", n, maxSamples)
				}
				p, typ, err := dec.profile(n, pp, res)
				if err != nil {
					return nil, Skipped{}, err
				}
				n++
				if p == nil {
					skipped.Profiles++
					if len(skipped.Types) < maxSkippedTypes && !slices.Contains(skipped.Types, typ) {
						skipped.Types = append(skipped.Types, typ)
					}
					continue
				}
				out = append(out, p)
			}
		}
	}
	return out, skipped, nil
}

type decoder struct {
	dict      *pb.ProfilesDictionary
	mappings  map[mappingKey]*profile.Mapping
	locations map[int32]*profile.Location
	stacks    map[int32][]*profile.Location
}

// A mappingKey is a dictionary mapping as kernel or user locations use it.
type mappingKey struct {
	index  int32
	kernel bool
}

// at returns table[i], or an error naming the table when i is outside it.
func at[T any](table []T, i int32, what string) (T, error) {
	if i < 0 || int(i) >= len(table) {
		var zero T
		return zero, fmt.Errorf("%s index %d out of range (table has %d)", what, i, len(table))
	}
	return table[i], nil
}

func (dec *decoder) str(i int32) (string, error) {
	return at(dec.dict.GetStringTable(), i, "string")
}

// sampleKind is how a profile's values become counts.
type sampleKind int

const (
	unsupported sampleKind = iota
	counted                // samples/count: values are counts
	timed                  // cpu or wall time: values divided by the period are counts
)

// timeUnits are the time units OTLP producers use, in nanoseconds.
var timeUnits = map[string]int64{
	"nanoseconds": 1, "ns": 1,
	"microseconds": 1e3, "us": 1e3,
	"milliseconds": 1e6, "ms": 1e6,
	"seconds": 1e9, "s": 1e9,
}

// valueType returns a sample or period type's strings; what names it in
// errors.
func (dec *decoder) valueType(vt *pb.ValueType, what string) (typ, unit string, err error) {
	if typ, err = dec.str(vt.GetTypeStrindex()); err != nil {
		return "", "", fmt.Errorf("%s: %w", what, err)
	}
	if unit, err = dec.str(vt.GetUnitStrindex()); err != nil {
		return "", "", fmt.Errorf("%s unit: %w", what, err)
	}
	return typ, unit, nil
}

// profile decodes profile n; a nil Profile with its sample type as
// "type/unit" when flint cannot use it.
func (dec *decoder) profile(n int, pp *pb.Profile, res map[string]string) (*profile.Profile, string, error) {
	typ, unit, err := dec.valueType(pp.GetSampleType(), "sample type")
	if err != nil {
		return nil, "", fmt.Errorf("profile %d: %w", n, err)
	}
	kind, scale := unsupported, int64(0)
	switch {
	case unit == "count" && (typ == "samples" || typ == "cpu"):
		kind = counted
	case typ == "cpu" || typ == "wall":
		if scale = timeUnits[unit]; scale != 0 {
			kind = timed
		}
	}
	period, err := dec.period(pp)
	if err != nil {
		return nil, "", fmt.Errorf("profile %d: %w", n, err)
	}
	sampleType := typ + "/" + unit
	if kind == unsupported {
		return nil, sampleType, nil
	}
	if kind == timed && period == 0 {
		return nil, sampleType + " without a time period", nil
	}
	p := &profile.Profile{Period: period}
	if pp.GetTimeUnixNano() > math.MaxInt64 || pp.GetDurationNano() > math.MaxInt64 {
		return nil, "", fmt.Errorf("profile %d: time %d or duration %d out of range", n, pp.GetTimeUnixNano(), pp.GetDurationNano())
	}
	if t := pp.GetTimeUnixNano(); t != 0 {
		p.Start = time.Unix(0, int64(t)).UTC()
	}
	p.Duration = time.Duration(pp.GetDurationNano())

	base, err := dec.labels(res, pp.GetAttributeIndices())
	if err != nil {
		return nil, "", fmt.Errorf("profile %d: attributes: %w", n, err)
	}
	labelSets := map[string]map[string]string{}
	var key strings.Builder
	for si, ps := range pp.GetSamples() {
		count, err := sampleCount(ps, kind, scale, period)
		if err != nil {
			return nil, "", fmt.Errorf("profile %d sample %d: %w", n, si, err)
		}
		if count == 0 {
			continue
		}
		stack, err := dec.stack(ps.GetStackIndex())
		if err != nil {
			return nil, "", fmt.Errorf("profile %d sample %d: %w", n, si, err)
		}
		key.Reset()
		for _, i := range ps.GetAttributeIndices() {
			key.WriteString(strconv.Itoa(int(i)))
			key.WriteByte(',')
		}
		labels, ok := labelSets[key.String()]
		if !ok {
			if labels, err = dec.labels(base, ps.GetAttributeIndices()); err != nil {
				return nil, "", fmt.Errorf("profile %d sample %d: %w", n, si, err)
			}
			labelSets[key.String()] = labels
		}
		p.Samples = append(p.Samples, &profile.Sample{Stack: stack, Count: count, Labels: labels})
	}
	return p, sampleType, nil
}

// period returns the profile's period as a duration, 0 when its type is
// not cpu or wall time or it is not positive.
func (dec *decoder) period(pp *pb.Profile) (time.Duration, error) {
	typ, unit, err := dec.valueType(pp.GetPeriodType(), "period type")
	if err != nil {
		return 0, err
	}
	scale := timeUnits[unit]
	if typ != "cpu" && typ != "wall" || scale == 0 || pp.GetPeriod() <= 0 {
		return 0, nil
	}
	if pp.GetPeriod() > math.MaxInt64/scale {
		return 0, fmt.Errorf("period %d %s out of range", pp.GetPeriod(), unit)
	}
	return time.Duration(pp.GetPeriod() * scale), nil
}

// sampleCount is how many samples ps stands for.
func sampleCount(ps *pb.Sample, kind sampleKind, scale int64, period time.Duration) (int64, error) {
	values := ps.GetValues()
	if len(values) == 0 {
		return int64(len(ps.GetTimestampsUnixNano())), nil
	}
	var sum int64
	for _, v := range values {
		if v < 0 {
			return 0, fmt.Errorf("negative value %d", v)
		}
		if v > math.MaxInt64-sum {
			return 0, errors.New("values overflow")
		}
		sum += v
	}
	if kind == counted || sum == 0 {
		return sum, nil
	}
	// sum×scale/period, rounded; in floating point, which cannot
	// overflow, and whose rounding error is far below one sample.
	ns := float64(sum) * float64(scale)
	count := math.Round(ns / float64(period))
	if count >= math.MaxInt64 {
		return 0, fmt.Errorf("value %d overflows", sum)
	}
	return max(int64(count), 1), nil
}

func (dec *decoder) stack(i int32) ([]*profile.Location, error) {
	if s, ok := dec.stacks[i]; ok {
		return s, nil
	}
	st, err := at(dec.dict.GetStackTable(), i, "stack")
	if err != nil {
		return nil, err
	}
	idx := st.GetLocationIndices()
	if len(idx) > maxStackDepth {
		return nil, fmt.Errorf("stack %d: %d locations (at most %d)", i, len(idx), maxStackDepth)
	}
	var locs []*profile.Location
	if len(idx) > 0 {
		locs = make([]*profile.Location, len(idx))
	}
	for j, li := range idx {
		if locs[j], err = dec.location(li); err != nil {
			return nil, fmt.Errorf("stack %d: %w", i, err)
		}
	}
	dec.stacks[i] = locs
	return locs, nil
}

func (dec *decoder) location(i int32) (*profile.Location, error) {
	if l, ok := dec.locations[i]; ok {
		return l, nil
	}
	pl, err := at(dec.dict.GetLocationTable(), i, "location")
	if err != nil {
		return nil, err
	}
	kernel := false
	err = dec.attributes(pl.GetAttributeIndices(), func(key, value string) {
		if key == frameTypeKey && value == "kernel" {
			kernel = true
		}
	})
	if err != nil {
		return nil, fmt.Errorf("location %d: %w", i, err)
	}
	l := &profile.Location{Address: pl.GetAddress()}
	if pl.GetMappingIndex() != 0 || kernel { // mapping 0 is none
		if l.Mapping, err = dec.mapping(pl.GetMappingIndex(), kernel); err != nil {
			return nil, fmt.Errorf("location %d: %w", i, err)
		}
	}
	lines := pl.GetLines()
	if len(lines) > maxLines {
		return nil, fmt.Errorf("location %d: %d lines (at most %d)", i, len(lines), maxLines)
	}
	for j, line := range lines {
		f, err := dec.frame(line)
		if err != nil {
			return nil, fmt.Errorf("location %d line %d: %w", i, j, err)
		}
		if f.Function == "" {
			f.Function = unnamed(l)
		}
		l.Frames = append(l.Frames, f)
	}
	if len(l.Frames) == 0 {
		l.Frames = []symbol.Frame{{Function: unnamed(l)}}
	}
	dec.locations[i] = l
	return l, nil
}

func (dec *decoder) frame(line *pb.Line) (symbol.Frame, error) {
	fn, err := at(dec.dict.GetFunctionTable(), line.GetFunctionIndex(), "function")
	if err != nil {
		return symbol.Frame{}, err
	}
	name, err := dec.str(fn.GetNameStrindex())
	if err != nil {
		return symbol.Frame{}, fmt.Errorf("function name: %w", err)
	}
	if name == "" {
		if name, err = dec.str(fn.GetSystemNameStrindex()); err != nil {
			return symbol.Frame{}, fmt.Errorf("function system name: %w", err)
		}
	}
	file, err := dec.str(fn.GetFilenameStrindex())
	if err != nil {
		return symbol.Frame{}, fmt.Errorf("function file: %w", err)
	}
	return symbol.Frame{Function: name, File: file, Line: int(line.GetLine()), StartLine: int(fn.GetStartLine())}, nil
}

// unnamed names an address no line names, as internal/symbol does.
func unnamed(l *profile.Location) string {
	switch m := l.Mapping; {
	case m != nil && m.Kernel:
		return fmt.Sprintf("[kernel]+0x%x", l.Address)
	case m != nil && m.File != "":
		return fmt.Sprintf("%s+0x%x", filepath.Base(m.File), l.Address)
	}
	return "[unknown]"
}

// mapping returns the mapping at index i as kernel or user locations use
// it; a kernel location without one gets the kernel's.
func (dec *decoder) mapping(i int32, kernel bool) (*profile.Mapping, error) {
	k := mappingKey{i, kernel}
	if m, ok := dec.mappings[k]; ok {
		return m, nil
	}
	if i == 0 {
		m := &profile.Mapping{File: kernelModule, Kernel: true}
		dec.mappings[k] = m
		return m, nil
	}
	pm, err := at(dec.dict.GetMappingTable(), i, "mapping")
	if err != nil {
		return nil, err
	}
	file, err := dec.str(pm.GetFilenameStrindex())
	if err != nil {
		return nil, fmt.Errorf("mapping %d file: %w", i, err)
	}
	if kernel && file == "" {
		file = kernelModule
	}
	m := &profile.Mapping{Start: pm.GetMemoryStart(), Limit: pm.GetMemoryLimit(), Offset: pm.GetFileOffset(), File: file, Kernel: kernel}
	var htlhash string
	err = dec.attributes(pm.GetAttributeIndices(), func(key, value string) {
		switch key {
		case buildIDKey:
			m.BuildID = value
		case htlhashKey:
			htlhash = value
		}
	})
	if err != nil {
		return nil, fmt.Errorf("mapping %d: %w", i, err)
	}
	if m.BuildID == "" {
		m.BuildID = htlhash
	}
	dec.mappings[k] = m
	return m, nil
}

// attributes calls f with the key and value as text of each dictionary
// attribute at indices that has both.
func (dec *decoder) attributes(indices []int32, f func(key, value string)) error {
	if len(indices) > maxAttributes {
		return fmt.Errorf("%d attributes (at most %d)", len(indices), maxAttributes)
	}
	for _, i := range indices {
		a, err := at(dec.dict.GetAttributeTable(), i, "attribute")
		if err != nil {
			return err
		}
		key, err := dec.str(a.GetKeyStrindex())
		if err != nil {
			return fmt.Errorf("attribute %d key: %w", i, err)
		}
		value, err := dec.text(a.GetValue())
		if err != nil {
			return fmt.Errorf("attribute %d value: %w", i, err)
		}
		if key != "" && value != "" {
			f(key, value)
		}
	}
	return nil
}

// labels returns base with the dictionary attributes at indices added as
// labels; base itself is not changed.
func (dec *decoder) labels(base map[string]string, indices []int32) (map[string]string, error) {
	out := make(map[string]string, len(base)+len(indices))
	for k, v := range base {
		out[k] = v
	}
	err := dec.attributes(indices, func(key, value string) {
		if l := labelOf(key); l != "" {
			out[l] = value
		}
	})
	return out, err
}

// keyValues returns a resource's attributes as labels. Their keys and
// string values may be references to the dictionary's strings, as the
// OpenTelemetry collector sends them.
func (dec *decoder) keyValues(kvs []*common.KeyValue) (map[string]string, error) {
	if len(kvs) > maxAttributes {
		return nil, fmt.Errorf("%d attributes (at most %d)", len(kvs), maxAttributes)
	}
	out := make(map[string]string, len(kvs))
	for j, kv := range kvs {
		key := kv.GetKey()
		if key == "" && kv.GetKeyStrindex() != 0 {
			var err error
			if key, err = dec.str(kv.GetKeyStrindex()); err != nil {
				return nil, fmt.Errorf("attribute %d key: %w", j, err)
			}
		}
		value, err := dec.text(kv.GetValue())
		if err != nil {
			return nil, fmt.Errorf("attribute %d value: %w", j, err)
		}
		if l := labelOf(key); l != "" && value != "" {
			out[l] = value
		}
	}
	return out, nil
}

// text is an attribute value as a label value; "" for none, arrays and maps.
func (dec *decoder) text(v *common.AnyValue) (string, error) {
	switch v := v.GetValue().(type) {
	case *common.AnyValue_StringValue:
		return v.StringValue, nil
	case *common.AnyValue_StringValueStrindex:
		return dec.str(v.StringValueStrindex)
	case *common.AnyValue_IntValue:
		return strconv.FormatInt(v.IntValue, 10), nil
	case *common.AnyValue_DoubleValue:
		return strconv.FormatFloat(v.DoubleValue, 'g', -1, 64), nil
	case *common.AnyValue_BoolValue:
		return strconv.FormatBool(v.BoolValue), nil
	case *common.AnyValue_BytesValue:
		return hex.EncodeToString(v.BytesValue), nil
	}
	return "", nil
}
