package otlp

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/flint-dev/flint/internal/profile"
	"github.com/flint-dev/flint/internal/symbol"
	common "go.opentelemetry.io/proto/slim/otlp/common/v1"
	pb "go.opentelemetry.io/proto/slim/otlp/profiles/v1development"
	resource "go.opentelemetry.io/proto/slim/otlp/resource/v1"
	"google.golang.org/protobuf/proto"
)

var testStart = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

// testProfile is a window of two processes, one with two threads: user
// frames in two binaries with build IDs, an inlined call, a kernel frame,
// an address no module covers, and labels with and without a semantic
// convention.
func testProfile() *profile.Profile {
	app := &profile.Mapping{Start: 0x400000, Limit: 0x500000, File: "/usr/bin/app", BuildID: "aabbccdd"}
	libc := &profile.Mapping{Start: 0x7f0000000000, Limit: 0x7f0000100000, Offset: 0x1000, File: "/usr/lib/libc.so.6", BuildID: "00112233"}
	kern := &profile.Mapping{File: "[kernel.kallsyms]", Kernel: true}
	main := &profile.Location{Address: 0x401000, Mapping: app, Frames: []symbol.Frame{{Function: "main.main", File: "/src/main.go", Line: 10, StartLine: 5}}}
	inlined := &profile.Location{Address: 0x401100, Mapping: app, Frames: []symbol.Frame{
		{Function: "main.inner", File: "/src/main.go", Line: 30, StartLine: 28},
		{Function: "main.outer", File: "/src/main.go", Line: 20, StartLine: 18},
	}}
	write := &profile.Location{Address: 0x2234, Mapping: libc, Frames: []symbol.Frame{{Function: "libc.so.6+0x2234"}}}
	syscall := &profile.Location{Address: 0xffffffff81000100, Mapping: kern, Frames: []symbol.Frame{{Function: "do_syscall_64"}}}
	unknown := &profile.Location{Address: 0x10, Frames: []symbol.Frame{{Function: "[unknown]"}}}
	labels := func(pid, tid, thread string) map[string]string {
		l := map[string]string{
			profile.LabelNode: "node-1", profile.LabelComm: "app", profile.LabelPID: pid,
			profile.LabelExe: "/usr/bin/app", profile.LabelBuildID: "aabbccdd",
			profile.LabelStartTime: "12345" + pid, profile.LabelCgroup: "/system.slice/app.service",
			profile.LabelTID: tid, profile.LabelThread: thread,
		}
		return l
	}
	return &profile.Profile{
		Start: testStart, Duration: 10 * time.Second, Period: 10 * time.Millisecond,
		Samples: []*profile.Sample{
			{Stack: []*profile.Location{inlined, main}, Count: 7, Labels: labels("100", "100", "app")},
			{Stack: []*profile.Location{syscall, write, main}, Count: 3, Labels: labels("100", "101", "worker")},
			{Stack: []*profile.Location{write, main}, Count: 1, Labels: labels("100", "101", "worker")},
			{Stack: []*profile.Location{unknown, main}, Count: 2, Labels: labels("200", "200", "app")},
		},
	}
}

// flat describes samples as comparable text, sorted: labels, count, and
// each location with its mapping and frames.
func flat(samples []*profile.Sample) []string {
	var out []string
	for _, s := range samples {
		var b strings.Builder
		keys := make([]string, 0, len(s.Labels))
		for k := range s.Labels {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			fmt.Fprintf(&b, "%s=%s ", k, s.Labels[k])
		}
		fmt.Fprintf(&b, "count=%d\n", s.Count)
		for _, l := range s.Stack {
			fmt.Fprintf(&b, "  %#x", l.Address)
			if l.Mapping != nil {
				fmt.Fprintf(&b, " %+v", *l.Mapping)
			}
			fmt.Fprintf(&b, " %+v\n", l.Frames)
		}
		out = append(out, b.String())
	}
	slices.Sort(out)
	return out
}

// roundTrip encodes p, marshals and unmarshals it as the wire would, and
// decodes it.
func roundTrip(t *testing.T, p *profile.Profile) ([]*profile.Profile, Skipped) {
	t.Helper()
	b, err := proto.Marshal(Encode(p, "test"))
	if err != nil {
		t.Fatal(err)
	}
	var d pb.ProfilesData
	if err := proto.Unmarshal(b, &d); err != nil {
		t.Fatal(err)
	}
	got, skipped, err := Decode(&d)
	if err != nil {
		t.Fatalf("Decode: %v", err)
	}
	return got, skipped
}

func TestDecodeRoundTrip(t *testing.T) {
	in := testProfile()
	got, skipped := roundTrip(t, in)
	if skipped.Profiles != 0 {
		t.Errorf("skipped %+v", skipped)
	}
	if len(got) != 2 {
		t.Fatalf("got %d profiles, want one per process (2)", len(got))
	}
	var all []*profile.Sample
	for _, p := range got {
		if !p.Start.Equal(in.Start) || p.Duration != in.Duration || p.Period != in.Period {
			t.Errorf("profile start %v duration %v period %v, want %v %v %v", p.Start, p.Duration, p.Period, in.Start, in.Duration, in.Period)
		}
		all = append(all, p.Samples...)
	}
	want, have := flat(in.Samples), flat(all)
	if !slices.Equal(have, want) {
		t.Errorf("decoded samples:\n%s\nwant:\n%s", strings.Join(have, ""), strings.Join(want, ""))
	}

	// One dictionary location is one *Location, across samples and
	// profiles; one mapping is one *Mapping.
	locs := map[uint64]*profile.Location{}
	maps := map[string]*profile.Mapping{}
	for _, s := range all {
		for _, l := range s.Stack {
			if prev, ok := locs[l.Address]; ok && prev != l {
				t.Errorf("location %#x decoded twice", l.Address)
			}
			locs[l.Address] = l
			if m := l.Mapping; m != nil {
				if prev, ok := maps[m.File]; ok && prev != m {
					t.Errorf("mapping %s decoded twice", m.File)
				}
				maps[m.File] = m
			}
		}
	}
	if len(locs) != 5 || len(maps) != 3 {
		t.Errorf("%d locations and %d mappings, want 5 and 3", len(locs), len(maps))
	}
}

// A window without a start (the zero time) travels as time_unix_nano 0
// and comes back without one.
func TestDecodeZeroStart(t *testing.T) {
	in := testProfile()
	in.Start = time.Time{}
	got, _ := roundTrip(t, in)
	for _, p := range got {
		if !p.Start.IsZero() {
			t.Errorf("start %v, want the zero time", p.Start)
		}
	}
}

// dictionary builds a ProfilesDictionary for hand-made profiles: strings
// and attributes are added as used.
type dictionary struct{ *pb.ProfilesDictionary }

func newDictionary() dictionary {
	return dictionary{&pb.ProfilesDictionary{
		MappingTable: []*pb.Mapping{{}}, LocationTable: []*pb.Location{{}}, FunctionTable: []*pb.Function{{}},
		LinkTable: []*pb.Link{{}}, StringTable: []string{""}, AttributeTable: []*pb.KeyValueAndUnit{{}}, StackTable: []*pb.Stack{{}},
	}}
}

func (d dictionary) str(s string) int32 {
	if i := slices.Index(d.StringTable, s); i >= 0 {
		return int32(i)
	}
	d.StringTable = append(d.StringTable, s)
	return int32(len(d.StringTable) - 1)
}

func (d dictionary) attr(key string, v *common.AnyValue) int32 {
	d.AttributeTable = append(d.AttributeTable, &pb.KeyValueAndUnit{KeyStrindex: d.str(key), Value: v})
	return int32(len(d.AttributeTable) - 1)
}

func (d dictionary) valueType(typ, unit string) *pb.ValueType {
	return &pb.ValueType{TypeStrindex: d.str(typ), UnitStrindex: d.str(unit)}
}

// stack adds a stack of one location named fn.
func (d dictionary) stack(fn string) int32 {
	d.FunctionTable = append(d.FunctionTable, &pb.Function{NameStrindex: d.str(fn)})
	d.LocationTable = append(d.LocationTable, &pb.Location{Lines: []*pb.Line{{FunctionIndex: int32(len(d.FunctionTable) - 1)}}})
	d.StackTable = append(d.StackTable, &pb.Stack{LocationIndices: []int32{int32(len(d.LocationTable) - 1)}})
	return int32(len(d.StackTable) - 1)
}

func str(s string) *common.AnyValue {
	return &common.AnyValue{Value: &common.AnyValue_StringValue{StringValue: s}}
}

func data(d dictionary, res []*common.KeyValue, profiles ...*pb.Profile) *pb.ProfilesData {
	return &pb.ProfilesData{
		Dictionary: d.ProfilesDictionary,
		ResourceProfiles: []*pb.ResourceProfiles{{
			Resource:      &resource.Resource{Attributes: res},
			ScopeProfiles: []*pb.ScopeProfiles{{Profiles: profiles}},
		}},
	}
}

func TestDecodeCounts(t *testing.T) {
	for _, tt := range []struct {
		name        string
		sampleType  [2]string
		periodType  [2]string
		period      int64
		values      []int64
		timestamps  int
		wantCount   int64 // 0: no sample
		wantPeriod  time.Duration
		wantSkipped string
	}{
		{name: "samples", sampleType: [2]string{"samples", "count"}, periodType: [2]string{"cpu", "nanoseconds"}, period: 1e7, values: []int64{4}, wantCount: 4, wantPeriod: 10 * time.Millisecond},
		{name: "several values", sampleType: [2]string{"samples", "count"}, periodType: [2]string{"cpu", "nanoseconds"}, period: 1e7, values: []int64{2, 2, 3}, timestamps: 3, wantCount: 7, wantPeriod: 10 * time.Millisecond},
		{name: "timestamps only", sampleType: [2]string{"samples", "count"}, periodType: [2]string{"cpu", "nanoseconds"}, period: 5e7, timestamps: 3, wantCount: 3, wantPeriod: 50 * time.Millisecond},
		{name: "zero", sampleType: [2]string{"samples", "count"}, periodType: [2]string{"cpu", "nanoseconds"}, period: 1e7, values: []int64{0}, wantPeriod: 10 * time.Millisecond},
		{name: "no period", sampleType: [2]string{"samples", "count"}, values: []int64{4}, wantCount: 4},
		{name: "count period", sampleType: [2]string{"samples", "count"}, periodType: [2]string{"samples", "count"}, period: 1, values: []int64{4}, wantCount: 4},
		{name: "period in ms", sampleType: [2]string{"samples", "count"}, periodType: [2]string{"cpu", "milliseconds"}, period: 10, values: []int64{1}, wantCount: 1, wantPeriod: 10 * time.Millisecond},
		{name: "cpu time", sampleType: [2]string{"cpu", "nanoseconds"}, periodType: [2]string{"cpu", "nanoseconds"}, period: 1e7, values: []int64{25e6}, wantCount: 3, wantPeriod: 10 * time.Millisecond},
		{name: "cpu time below a period", sampleType: [2]string{"cpu", "nanoseconds"}, periodType: [2]string{"cpu", "nanoseconds"}, period: 1e7, values: []int64{1}, wantCount: 1, wantPeriod: 10 * time.Millisecond},
		{name: "cpu time in ms", sampleType: [2]string{"cpu", "milliseconds"}, periodType: [2]string{"cpu", "nanoseconds"}, period: 1e7, values: []int64{60}, wantCount: 6, wantPeriod: 10 * time.Millisecond},
		{name: "wall time", sampleType: [2]string{"wall", "nanoseconds"}, periodType: [2]string{"wall", "nanoseconds"}, period: 1e7, values: []int64{1e8}, wantCount: 10, wantPeriod: 10 * time.Millisecond},
		{name: "cpu time without period", sampleType: [2]string{"cpu", "nanoseconds"}, values: []int64{1e8}, wantSkipped: "cpu/nanoseconds without a time period"},
		{name: "off-cpu", sampleType: [2]string{"off_cpu", "nanoseconds"}, periodType: [2]string{"cpu", "nanoseconds"}, period: 1e7, values: []int64{1e8}, wantSkipped: "off_cpu/nanoseconds"},
		{name: "memory", sampleType: [2]string{"alloc_space", "bytes"}, values: []int64{100}, wantSkipped: "alloc_space/bytes"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			d := newDictionary()
			p := &pb.Profile{
				SampleType: d.valueType(tt.sampleType[0], tt.sampleType[1]),
				Period:     tt.period,
				Samples:    []*pb.Sample{{StackIndex: d.stack("f"), Values: tt.values, TimestampsUnixNano: make([]uint64, tt.timestamps)}},
			}
			if tt.periodType[0] != "" {
				p.PeriodType = d.valueType(tt.periodType[0], tt.periodType[1])
			}
			got, skipped, err := Decode(data(d, nil, p))
			if err != nil {
				t.Fatal(err)
			}
			if tt.wantSkipped != "" {
				if len(got) != 0 || skipped.Profiles != 1 || !slices.Equal(skipped.Types, []string{tt.wantSkipped}) {
					t.Errorf("got %d profiles, skipped %+v; want it skipped as %q", len(got), skipped, tt.wantSkipped)
				}
				return
			}
			if len(got) != 1 || skipped.Profiles != 0 {
				t.Fatalf("got %d profiles, skipped %+v; want 1", len(got), skipped)
			}
			if got[0].Period != tt.wantPeriod {
				t.Errorf("period %v, want %v", got[0].Period, tt.wantPeriod)
			}
			var count int64
			for _, s := range got[0].Samples {
				count += s.Count
			}
			if count != tt.wantCount || tt.wantCount == 0 && len(got[0].Samples) != 0 {
				t.Errorf("samples %d counting %d, want %d", len(got[0].Samples), count, tt.wantCount)
			}
		})
	}
}

func TestDecodeLabels(t *testing.T) {
	d := newDictionary()
	res := []*common.KeyValue{
		{Key: "service.name", Value: str("checkout")},
		{KeyStrindex: d.str("process.executable.name"), Value: &common.AnyValue{Value: &common.AnyValue_StringValueStrindex{StringValueStrindex: d.str("app")}}},
		{Key: "process.pid", Value: &common.AnyValue{Value: &common.AnyValue_IntValue{IntValue: 4242}}},
		{Key: "host.name", Value: str("from-resource")},
		{Key: "flint.cgroup", Value: str("/kubepods/x")},
		{Key: "sampled", Value: &common.AnyValue{Value: &common.AnyValue_BoolValue{BoolValue: true}}},
		{Key: "ratio", Value: &common.AnyValue{Value: &common.AnyValue_DoubleValue{DoubleValue: 0.5}}},
		{Key: "raw", Value: &common.AnyValue{Value: &common.AnyValue_BytesValue{BytesValue: []byte{0xca, 0xfe}}}},
		{Key: "empty", Value: str("")},
		{Key: "none"},
		{Key: "list", Value: &common.AnyValue{Value: &common.AnyValue_ArrayValue{ArrayValue: &common.ArrayValue{Values: []*common.AnyValue{str("a")}}}}},
	}
	p := &pb.Profile{
		SampleType:       d.valueType("samples", "count"),
		AttributeIndices: []int32{d.attr("host.name", str("from-profile")), d.attr("deployment.environment", str("prod"))},
	}
	p.Samples = []*pb.Sample{
		{StackIndex: d.stack("f"), Values: []int64{1}, AttributeIndices: []int32{
			d.attr("thread.name", str("worker")),
			d.attr("thread.id", &common.AnyValue{Value: &common.AnyValue_IntValue{IntValue: 4243}}),
			d.attr("deployment.environment", str("canary")),
		}},
		{StackIndex: d.stack("g"), Values: []int64{1}},
	}
	got, _, err := Decode(data(d, res, p))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || len(got[0].Samples) != 2 {
		t.Fatalf("got %d profiles, want 1 with 2 samples", len(got))
	}
	want := map[string]string{
		"service_name": "checkout", profile.LabelComm: "app", profile.LabelPID: "4242", profile.LabelNode: "from-profile",
		profile.LabelCgroup: "/kubepods/x", "sampled": "true", "ratio": "0.5", "raw": "cafe",
		"deployment_environment": "canary", profile.LabelThread: "worker", profile.LabelTID: "4243",
	}
	if l := got[0].Samples[0].Labels; fmt.Sprint(l) != fmt.Sprint(want) {
		t.Errorf("labels %v\nwant   %v", l, want)
	}
	want["deployment_environment"] = "prod"
	delete(want, profile.LabelThread)
	delete(want, profile.LabelTID)
	if l := got[0].Samples[1].Labels; fmt.Sprint(l) != fmt.Sprint(want) {
		t.Errorf("labels without the sample's %v\nwant   %v", l, want)
	}
}

func TestDecodeForeignLocations(t *testing.T) {
	d := newDictionary()
	kernelType := d.attr(frameTypeKey, str("kernel"))
	nativeType := d.attr(frameTypeKey, str("native"))
	d.MappingTable = append(d.MappingTable,
		&pb.Mapping{MemoryStart: 0x7f00, MemoryLimit: 0x8f00, FilenameStrindex: d.str("/usr/lib/libc.so.6"), AttributeIndices: []int32{
			d.attr(htlhashKey, str("600dcafe")), d.attr(buildIDKey, str("c89b1120")),
		}},
		&pb.Mapping{FilenameStrindex: d.str("/usr/bin/python3"), AttributeIndices: []int32{d.attr(htlhashKey, str("4a110000"))}},
	)
	d.FunctionTable = append(d.FunctionTable, &pb.Function{NameStrindex: d.str("do_syscall_64")}, &pb.Function{SystemNameStrindex: d.str("_PyEval_EvalFrame")})
	d.LocationTable = append(d.LocationTable,
		&pb.Location{Address: 0xffff1000, AttributeIndices: []int32{kernelType}, Lines: []*pb.Line{{FunctionIndex: 1}}}, // 1: kernel, no mapping
		&pb.Location{Address: 0xffff2000, AttributeIndices: []int32{kernelType}},                                        // 2: kernel, unnamed
		&pb.Location{Address: 0x1234, MappingIndex: 1, AttributeIndices: []int32{nativeType}},                           // 3: libc, unnamed
		&pb.Location{Address: 0x99}, // 4: nothing known
		&pb.Location{Address: 0x55, MappingIndex: 2, Lines: []*pb.Line{{FunctionIndex: 2, Line: 7}, {FunctionIndex: 0}}}, // 5: system name, and a line without a function
	)
	d.StackTable = append(d.StackTable, &pb.Stack{LocationIndices: []int32{1, 2, 3, 4, 5}})
	p := &pb.Profile{SampleType: d.valueType("samples", "count"), Samples: []*pb.Sample{{StackIndex: 1, TimestampsUnixNano: []uint64{1}}}}
	got, _, err := Decode(data(d, nil, p))
	if err != nil {
		t.Fatal(err)
	}
	stack := got[0].Samples[0].Stack
	kernel := &profile.Mapping{File: kernelModule, Kernel: true}
	libc := &profile.Mapping{Start: 0x7f00, Limit: 0x8f00, File: "/usr/lib/libc.so.6", BuildID: "c89b1120"}
	python := &profile.Mapping{File: "/usr/bin/python3", BuildID: "4a110000"}
	want := []struct {
		mapping *profile.Mapping
		frames  []symbol.Frame
	}{
		{kernel, []symbol.Frame{{Function: "do_syscall_64"}}},
		{kernel, []symbol.Frame{{Function: "[kernel]+0xffff2000"}}},
		{libc, []symbol.Frame{{Function: "libc.so.6+0x1234"}}},
		{nil, []symbol.Frame{{Function: "[unknown]"}}},
		{python, []symbol.Frame{{Function: "_PyEval_EvalFrame", Line: 7}, {Function: "python3+0x55"}}},
	}
	if len(stack) != len(want) {
		t.Fatalf("stack of %d, want %d", len(stack), len(want))
	}
	for i, w := range want {
		l := stack[i]
		if (l.Mapping == nil) != (w.mapping == nil) || l.Mapping != nil && *l.Mapping != *w.mapping {
			t.Errorf("location %d mapping %+v, want %+v", i, l.Mapping, w.mapping)
		}
		if fmt.Sprint(l.Frames) != fmt.Sprint(w.frames) {
			t.Errorf("location %d frames %+v, want %+v", i, l.Frames, w.frames)
		}
	}
	if stack[0].Mapping != stack[1].Mapping {
		t.Error("kernel locations without a mapping do not share one")
	}
}

// firstProfile is the first profile of Encode's output.
func firstProfile(d *pb.ProfilesData) *pb.Profile {
	return d.ResourceProfiles[0].ScopeProfiles[0].Profiles[0]
}

func TestDecodeHostile(t *testing.T) {
	for _, tt := range []struct {
		name   string
		mutate func(*pb.ProfilesData)
		want   string
	}{
		{"stack index", func(d *pb.ProfilesData) { firstProfile(d).Samples[0].StackIndex = 99 },
			"profile 0 sample 0: stack index 99 out of range (table has 5)"},
		{"negative stack index", func(d *pb.ProfilesData) { firstProfile(d).Samples[1].StackIndex = -1 },
			"profile 0 sample 1: stack index -1 out of range"},
		{"location index", func(d *pb.ProfilesData) { d.Dictionary.StackTable[1].LocationIndices[1] = 1000 },
			"profile 0 sample 0: stack 1: location index 1000 out of range (table has 6)"},
		{"function index", func(d *pb.ProfilesData) { d.Dictionary.LocationTable[1].Lines[0].FunctionIndex = 77 },
			"location 1 line 0: function index 77 out of range"},
		{"function name", func(d *pb.ProfilesData) { d.Dictionary.FunctionTable[1].NameStrindex = 5000 },
			"function name: string index 5000 out of range"},
		{"function file", func(d *pb.ProfilesData) { d.Dictionary.FunctionTable[1].FilenameStrindex = -3 },
			"function file: string index -3 out of range"},
		{"mapping index", func(d *pb.ProfilesData) { d.Dictionary.LocationTable[1].MappingIndex = 9 },
			"location 1: mapping index 9 out of range (table has 4)"},
		{"mapping file", func(d *pb.ProfilesData) { d.Dictionary.MappingTable[1].FilenameStrindex = 9999 },
			"mapping 1 file: string index 9999 out of range"},
		{"mapping attribute", func(d *pb.ProfilesData) { d.Dictionary.MappingTable[1].AttributeIndices[0] = 300 },
			"mapping 1: attribute index 300 out of range"},
		{"location attribute", func(d *pb.ProfilesData) { d.Dictionary.LocationTable[1].AttributeIndices[0] = 300 },
			"location 1: attribute index 300 out of range"},
		{"sample attribute", func(d *pb.ProfilesData) { firstProfile(d).Samples[0].AttributeIndices[0] = 300 },
			"profile 0 sample 0: attribute index 300 out of range"},
		{"profile attribute", func(d *pb.ProfilesData) { firstProfile(d).AttributeIndices = []int32{-7} },
			"profile 0: attributes: attribute index -7 out of range"},
		{"attribute key", func(d *pb.ProfilesData) { d.Dictionary.AttributeTable[1].KeyStrindex = 1 << 30 },
			"key: string index 1073741824 out of range"},
		{"attribute value", func(d *pb.ProfilesData) {
			d.Dictionary.AttributeTable[1].Value = &common.AnyValue{Value: &common.AnyValue_StringValueStrindex{StringValueStrindex: 4096}}
		}, "value: string index 4096 out of range"},
		{"resource key", func(d *pb.ProfilesData) {
			d.ResourceProfiles[1].Resource.Attributes[0] = &common.KeyValue{KeyStrindex: 888, Value: str("x")}
		}, "resource 1: attribute 0 key: string index 888 out of range"},
		{"sample type", func(d *pb.ProfilesData) { firstProfile(d).SampleType.TypeStrindex = 12345 },
			"profile 0: sample type: string index 12345 out of range"},
		{"period type", func(d *pb.ProfilesData) { firstProfile(d).PeriodType.UnitStrindex = 12345 },
			"profile 0: period type unit: string index 12345 out of range"},
		{"no dictionary", func(d *pb.ProfilesData) { d.Dictionary = nil }, "profile 0: no dictionary"},
		{"empty dictionary", func(d *pb.ProfilesData) { d.Dictionary = &pb.ProfilesDictionary{} },
			"profile 0: sample type: string index 1 out of range (table has 0)"},
		{"negative value", func(d *pb.ProfilesData) { firstProfile(d).Samples[0].Values = []int64{-1} },
			"profile 0 sample 0: negative value -1"},
		{"values overflow", func(d *pb.ProfilesData) { firstProfile(d).Samples[0].Values = []int64{math.MaxInt64, 1} },
			"profile 0 sample 0: values overflow"},
		{"time", func(d *pb.ProfilesData) { firstProfile(d).TimeUnixNano = math.MaxUint64 }, "out of range"},
		{"period", func(d *pb.ProfilesData) {
			p := firstProfile(d)
			p.PeriodType.UnitStrindex = int32(len(d.Dictionary.StringTable))
			d.Dictionary.StringTable = append(d.Dictionary.StringTable, "seconds")
			p.Period = math.MaxInt64 / 2
		}, "profile 0: period 4611686018427387903 seconds out of range"},
		{"too many samples", func(d *pb.ProfilesData) {
			p := firstProfile(d)
			s := p.Samples[0]
			p.Samples = make([]*pb.Sample, maxSamples+1)
			for i := range p.Samples {
				p.Samples[i] = s // one sample many times: cheap to build
			}
		}, "profile 0: more than 1048576 samples"},
		{"too many samples in all", func(d *pb.ProfilesData) {
			for _, rp := range d.ResourceProfiles {
				p := rp.ScopeProfiles[0].Profiles[0]
				s := p.Samples[0]
				p.Samples = make([]*pb.Sample, maxSamples/2+1)
				for i := range p.Samples {
					p.Samples[i] = s
				}
			}
		}, "profile 1: more than 1048576 samples"},
		{"deep stack", func(d *pb.ProfilesData) { d.Dictionary.StackTable[1].LocationIndices = make([]int32, maxStackDepth+1) },
			"profile 0 sample 0: stack 1: 1025 locations (at most 1024)"},
		{"many lines", func(d *pb.ProfilesData) {
			l := d.Dictionary.LocationTable[1]
			l.Lines = slices.Repeat(l.Lines, maxLines+1)
		}, "location 1: 2050 lines (at most 1024)"},
		{"many attributes", func(d *pb.ProfilesData) { firstProfile(d).Samples[0].AttributeIndices = make([]int32, maxAttributes+1) },
			"profile 0 sample 0: 257 attributes (at most 256)"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			d := Encode(testProfile(), "test")
			tt.mutate(d)
			got, _, err := Decode(d)
			if err == nil {
				t.Fatalf("decoded %d profiles, want error %q", len(got), tt.want)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q, want it to contain %q", err, tt.want)
			}
		})
	}
}

// Nil entries, which a Go caller (not the wire) can build, read as zero
// values: a nil profile has no sample type and is skipped, a nil location
// is unnamed.
func TestDecodeNils(t *testing.T) {
	d := Encode(testProfile(), "test")
	d.ResourceProfiles = append(d.ResourceProfiles, nil, &pb.ResourceProfiles{ScopeProfiles: []*pb.ScopeProfiles{nil, {Profiles: []*pb.Profile{nil}}}})
	d.Dictionary.LocationTable[0] = nil
	d.Dictionary.StackTable = append(d.Dictionary.StackTable, &pb.Stack{LocationIndices: []int32{0}})
	p := firstProfile(d)
	p.Samples = append(p.Samples, nil, &pb.Sample{StackIndex: int32(len(d.Dictionary.StackTable) - 1), Values: []int64{1}})
	got, skipped, err := Decode(d)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || skipped.Profiles != 1 || !slices.Equal(skipped.Types, []string{"/"}) {
		t.Fatalf("got %d profiles, skipped %+v; want 2 and the nil one", len(got), skipped)
	}
	last := got[0].Samples[len(got[0].Samples)-1]
	if len(last.Stack) != 1 || last.Stack[0].Frames[0].Function != "[unknown]" {
		t.Errorf("nil location decoded as %+v", last.Stack)
	}
	if got, _, err := Decode(nil); err != nil || len(got) != 0 {
		t.Errorf("Decode(nil) = %d profiles, %v", len(got), err)
	}
}

func FuzzDecode(f *testing.F) {
	seed, err := proto.Marshal(Encode(testProfile(), "test"))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(seed)
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		var d pb.ProfilesData
		if proto.Unmarshal(b, &d) != nil {
			return
		}
		profiles, _, err := Decode(&d)
		if err != nil {
			return
		}
		for _, p := range profiles {
			for _, s := range p.Samples {
				if s.Count <= 0 {
					t.Fatalf("sample count %d", s.Count)
				}
				for _, l := range s.Stack {
					if len(l.Frames) == 0 {
						t.Fatalf("location %#x without frames", l.Address)
					}
				}
			}
		}
	})
}
