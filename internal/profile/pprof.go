package profile

import (
	"io"

	"github.com/google/pprof/profile"
)

// Proto converts p to a pprof profile with sample types samples/count and
// cpu/nanoseconds (off_cpu/nanoseconds or wall/nanoseconds for those
// kinds), the process and thread as labels, mappings with build IDs, and
// locations with their inlined lines (innermost first).
func (p *Profile) Proto() *profile.Profile {
	out := &profile.Profile{
		SampleType: []*profile.ValueType{
			{Type: "samples", Unit: "count"},
			{Type: "cpu", Unit: "nanoseconds"},
		},
		PeriodType:    &profile.ValueType{Type: "cpu", Unit: "nanoseconds"},
		Period:        p.Period.Nanoseconds(),
		TimeNanos:     p.Start.UnixNano(),
		DurationNanos: p.Duration.Nanoseconds(),
		Comments:      p.Comments,
	}
	value := func(s *Sample) []int64 { return []int64{s.Count, s.Count * p.Period.Nanoseconds()} }
	if p.Kind != CPU {
		kind := map[Kind]string{OffCPU: "off_cpu", Wall: "wall"}[p.Kind]
		out.SampleType = []*profile.ValueType{{Type: kind, Unit: "nanoseconds"}}
		out.PeriodType = &profile.ValueType{Type: kind, Unit: "nanoseconds"}
		out.Period = 1
		value = func(s *Sample) []int64 { return []int64{s.Count} }
	}
	mappings := map[*Mapping]*profile.Mapping{}
	locations := map[*Location]*profile.Location{}
	type funcKey struct{ name, file string }
	functions := map[funcKey]*profile.Function{}

	mapping := func(m *Mapping) *profile.Mapping {
		if m == nil {
			return nil
		}
		pm := mappings[m]
		if pm == nil {
			pm = &profile.Mapping{
				ID: uint64(len(out.Mapping) + 1), Start: m.Start, Limit: m.Limit, Offset: m.Offset,
				File: m.File, BuildID: m.BuildID, HasFunctions: true,
			}
			mappings[m] = pm
			out.Mapping = append(out.Mapping, pm)
		}
		return pm
	}
	location := func(l *Location) *profile.Location {
		pl := locations[l]
		if pl != nil {
			return pl
		}
		pl = &profile.Location{ID: uint64(len(out.Location) + 1), Address: l.Address, Mapping: mapping(l.Mapping)}
		for _, f := range l.Frames {
			k := funcKey{f.Function, f.File}
			fn := functions[k]
			if fn == nil {
				fn = &profile.Function{ID: uint64(len(out.Function) + 1), Name: f.Function, SystemName: f.Function, Filename: f.File}
				functions[k] = fn
				out.Function = append(out.Function, fn)
			}
			// go build -pgo places call sites by their line within the
			// function: it needs the function's first line.
			if fn.StartLine == 0 {
				fn.StartLine = int64(f.StartLine)
			}
			pl.Line = append(pl.Line, profile.Line{Function: fn, Line: int64(f.Line)})
			if f.File != "" && pl.Mapping != nil {
				pl.Mapping.HasFilenames, pl.Mapping.HasLineNumbers = true, true
			}
			if len(l.Frames) > 1 && pl.Mapping != nil {
				pl.Mapping.HasInlineFrames = true
			}
		}
		locations[l] = pl
		out.Location = append(out.Location, pl)
		return pl
	}
	for _, s := range p.Samples {
		ps := &profile.Sample{
			Value:    value(s),
			Label:    map[string][]string{},
			NumLabel: map[string][]int64{},
		}
		for _, name := range []string{LabelComm, LabelThread, LabelNode} {
			if v := s.Labels[name]; v != "" {
				ps.Label[name] = []string{v}
			}
		}
		for _, name := range []string{LabelPID, LabelTID} {
			if v, err := parseInt(s.Labels[name]); err == nil {
				ps.NumLabel[name] = []int64{v}
			}
		}
		for _, l := range s.Stack {
			ps.Location = append(ps.Location, location(l))
		}
		out.Sample = append(out.Sample, ps)
	}
	return out
}

// WritePprof writes p as a gzipped profile.proto.
func WritePprof(w io.Writer, p *Profile) error {
	return p.Proto().Write(w)
}
