package profile

import (
	"bytes"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/flint-dev/flint/internal/symbol"
)

// codecWindow is a window with what the codec must carry: shared and
// kernel mappings, inlined frames, a location without mapping, labels with
// empty values and odd bytes, a negative line.
func codecWindow() *Profile {
	exe := &Mapping{Start: 0x400000, Limit: 0x800000, Offset: 0x1000, File: "/usr/bin/api", BuildID: "abc123"}
	kernel := &Mapping{Start: 0xffffffff81000000, Limit: 0xffffffff82000000, File: "[kernel.kallsyms]", Kernel: true}
	main := &Location{Address: 0x401000, Mapping: exe, Frames: []symbol.Frame{{Function: "main", File: "main.go", Line: 10, StartLine: 8}}}
	inl := &Location{Address: 0x402000, Mapping: exe, Frames: []symbol.Frame{
		{Function: "inlined", File: "a.go", Line: 3, StartLine: 2}, {Function: "outer", File: "a.go", Line: -1}}}
	sys := &Location{Address: 0xffffffff81001234, Mapping: kernel, Frames: []symbol.Frame{{Function: "do_syscall_64"}}}
	unknown := &Location{Address: 0x7, Frames: []symbol.Frame{{Function: "[unknown]"}}}
	api := map[string]string{"comm": "api", "pid": "42", "pod": ""}
	return &Profile{
		Start:    time.Date(2026, 3, 1, 12, 0, 0, 123, time.UTC),
		Duration: 10 * time.Second,
		Period:   time.Second / 99,
		Samples: []*Sample{
			{Stack: []*Location{inl, main}, Count: 5, Labels: api},
			{Stack: []*Location{sys, inl, main}, Count: 1, Labels: map[string]string{"comm": "api", "pid": "42", "pod": ""}},
			{Stack: []*Location{unknown}, Count: 1 << 40, Labels: map[string]string{"x": "\x00\xff\"'\\", "": "empty name"}},
			{Stack: nil, Count: 2, Labels: map[string]string{}},
		},
	}
}

// sameProfile compares two profiles structurally; the time zone of Start
// does not matter.
func sameProfile(t *testing.T, got, want *Profile) {
	t.Helper()
	if !got.Start.Equal(want.Start) {
		t.Errorf("start %v, want %v", got.Start, want.Start)
	}
	g, w := *got, *want
	g.Start, w.Start = time.Time{}, time.Time{}
	if !reflect.DeepEqual(g, w) {
		t.Errorf("decoded %+v\nwant %+v", g, w)
	}
}

func TestProfileRoundTrip(t *testing.T) {
	offCPU := codecWindow()
	offCPU.Kind, offCPU.Period = OffCPU, time.Nanosecond
	for _, p := range []*Profile{codecWindow(), offCPU, {}, {Start: time.Unix(0, 0), Samples: []*Sample{}}} {
		b, err := p.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		var got Profile
		if err := got.UnmarshalBinary(b); err != nil {
			t.Fatal(err)
		}
		want := *p
		if len(want.Samples) == 0 {
			want.Samples = nil
		}
		sameProfile(t, &got, &want)
		again, err := got.MarshalBinary()
		if err != nil || !bytes.Equal(again, b) {
			t.Errorf("re-encoding differs: %v\n% x\n% x", err, again, b)
		}
	}
}

func TestProfileSharing(t *testing.T) {
	p := codecWindow()
	b, err := p.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	var got Profile
	if err := got.UnmarshalBinary(b); err != nil {
		t.Fatal(err)
	}
	s0, s1 := got.Samples[0], got.Samples[1]
	if s0.Stack[0] != s1.Stack[1] || s0.Stack[1] != s1.Stack[2] {
		t.Error("a location shared by two samples decoded as two")
	}
	if reflect.ValueOf(s0.Labels).Pointer() != reflect.ValueOf(s1.Labels).Pointer() {
		t.Error("equal label sets decoded as two maps")
	}
	// The second label set, equal to the first, and every shared string
	// cost nothing: the window is smaller than its parts written out.
	var sum int
	for _, s := range p.Samples {
		sum += len(AppendStack(nil, s.Stack))
	}
	if len(b) >= sum {
		t.Errorf("window of %d bytes, its stacks alone take %d", len(b), sum)
	}
}

func TestStackRoundTrip(t *testing.T) {
	for _, s := range codecWindow().Samples {
		b := AppendStack(nil, s.Stack)
		got, err := DecodeStack(b)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, s.Stack) {
			t.Errorf("decoded %+v, want %+v", got, s.Stack)
		}
		if again := AppendStack(nil, got); !bytes.Equal(again, b) {
			t.Errorf("re-encoding differs:\n% x\n% x", again, b)
		}
	}
}

// TestDecodeFormat1 decodes the encodings of the format before start lines,
// as older agents left them in spools and stores: the frames decode with
// start line 0.
func TestDecodeFormat1(t *testing.T) {
	want := []symbol.Frame{{Function: "f", File: "a.go", Line: 3}}
	// One location at 0x10 without mapping, one frame f a.go:3.
	stack, err := DecodeStack([]byte{1, 1, 0x10, noMapping, 1, 1, 'f', 4, 'a', '.', 'g', 'o', 6})
	if err != nil || len(stack) != 1 || !reflect.DeepEqual(stack[0].Frames, want) {
		t.Errorf("format 1 stack: %+v, %v; want one location of %+v", stack, err, want)
	}
	// Strings f and a.go, no mapping, that location, one empty label
	// set, one sample of count 1.
	var p Profile
	err = p.UnmarshalBinary([]byte{1, 0, 0, 0, 0, 2, 1, 'f', 4, 'a', '.', 'g', 'o', 0, 1, 0x10, 0, 1, 0, 1, 6, 1, 0, 1, 2, 0, 1, 0})
	if err != nil || len(p.Samples) != 1 || !reflect.DeepEqual(p.Samples[0].Stack[0].Frames, want) {
		t.Errorf("format 1 window: %+v, %v; want one sample of %+v", p.Samples, err, want)
	}
}

func TestDecodeCorrupt(t *testing.T) {
	window, _ := codecWindow().MarshalBinary()
	stack := AppendStack(nil, codecWindow().Samples[1].Stack)
	tests := []struct {
		name  string
		b     []byte
		stack bool
	}{
		{"empty stack", nil, true},
		{"stack format", []byte{9, 0}, true},
		{"stack truncated", stack[:len(stack)-1], true},
		{"stack trailing", append(stack[:len(stack):len(stack)], 0), true},
		{"stack huge count", []byte{stackFormat, 0xff, 0xff, 0xff, 0xff, 0x0f}, true},
		{"mapping flag", []byte{stackFormat, 1, 0, 7, 0}, true},
		{"empty window", nil, false},
		{"window format", []byte{9}, false},
		{"window truncated", window[:len(window)-1], false},
		{"window trailing", append(window[:len(window):len(window)], 0), false},
		{"nanoseconds", []byte{profileFormat, 0, 0x80, 0x94, 0xeb, 0xdc, 0x03, 0, 0, 0, 0, 0, 0, 0}, false},
		{"kind", []byte{profileFormat, 0, 0, 0, 0, 3, 0, 0, 0, 0}, false},
		{"huge string count", []byte{profileFormat, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0x7f}, false},
		// one string, no mappings, one location naming mapping 1
		{"mapping index", []byte{profileFormat, 0, 0, 0, 0, 0, 1, 0, 0, 1, 0, 1, 0, 0, 0}, false},
		// one string, one location, one label set, one sample of location 3
		{"location index", []byte{profileFormat, 0, 0, 0, 0, 0, 1, 0, 0, 1, 0, 0, 0, 1, 0, 1, 2, 0, 1, 3}, false},
		{"label set index", []byte{profileFormat, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 2, 5, 0}, false},
		{"repeated label", []byte{profileFormat, 0, 0, 0, 0, 0, 1, 1, 'a', 0, 0, 1, 2, 0, 0, 0, 0, 0}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var err error
			if tt.stack {
				_, err = DecodeStack(tt.b)
			} else {
				var p Profile
				err = p.UnmarshalBinary(tt.b)
			}
			if !errors.Is(err, ErrCorrupt) {
				t.Errorf("got %v, want ErrCorrupt", err)
			}
		})
	}
}

func TestMarshalNil(t *testing.T) {
	for _, p := range []*Profile{
		{Samples: []*Sample{nil}},
		{Samples: []*Sample{{Stack: []*Location{nil}}}},
	} {
		if _, err := p.MarshalBinary(); err == nil {
			t.Errorf("encoded %+v", p)
		}
	}
}

func FuzzCodec(f *testing.F) {
	w, _ := codecWindow().MarshalBinary()
	f.Add(w)
	f.Add(AppendStack(nil, codecWindow().Samples[1].Stack))
	f.Add([]byte{profileFormat, 0, 0, 0, 0, 0, 1, 1, 'a', 0, 0, 1, 1, 0, 0, 1, 2, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		// Varints may be longer than needed, so compare decoded values,
		// not bytes.
		if s, err := DecodeStack(b); err == nil {
			again, err := DecodeStack(AppendStack(nil, s))
			if err != nil || !reflect.DeepEqual(again, s) {
				t.Errorf("stack %+v re-decodes as %+v, %v", s, again, err)
			}
		}
		var p Profile
		if err := p.UnmarshalBinary(b); err == nil {
			enc, err := p.MarshalBinary()
			if err != nil {
				t.Fatal(err)
			}
			var q Profile
			if err := q.UnmarshalBinary(enc); err != nil {
				t.Fatalf("re-encoding does not decode: %v", err)
			}
			sameProfile(t, &q, &p)
		}
	})
}
