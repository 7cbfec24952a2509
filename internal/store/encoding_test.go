package store

import (
	"bytes"
	"maps"
	"reflect"
	"slices"
	"testing"
)

func TestCountsEncoding(t *testing.T) {
	tests := []struct {
		name  string
		pairs []stackCount
		want  []byte
	}{
		{"empty", nil, nil},
		{"one", []stackCount{{1, 1}}, []byte{1, 1}},
		{"deltas", []stackCount{{5, 2}, {6, 300}, {1000, 1}}, []byte{5, 2, 1, 0xac, 0x02, 0xe2, 0x07, 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := appendCounts(nil, tt.pairs)
			if !bytes.Equal(b, tt.want) {
				t.Errorf("encoded % x, want % x", b, tt.want)
			}
			var got []stackCount
			if err := decodeCounts(b, func(s, c int64) { got = append(got, stackCount{s, c}) }); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tt.pairs) {
				t.Errorf("decoded %v, want %v", got, tt.pairs)
			}
		})
	}
}

func TestDecodeCorrupt(t *testing.T) {
	tests := []struct {
		name string
		b    []byte
	}{
		{"truncated pair", []byte{1}},
		{"zero delta", []byte{1, 1, 0, 1}},
		{"zero count", []byte{1, 0}},
		{"truncated varint", []byte{0x80}},
		{"id overflow", []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f, 1, 1, 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := decodeCounts(tt.b, func(int64, int64) {}); err == nil {
				t.Error("decodeCounts accepted it")
			}
		})
	}
	for _, b := range [][]byte{{0}, {1, 0x80}, {2, 1}} {
		if _, err := decodeStack(b, nil); err == nil {
			t.Errorf("decodeStack accepted % x", b)
		}
	}
	for _, b := range [][]byte{{3, 'a', 'b'}, {1, 'b', 0, 1, 'a', 0}, {1, 'a', 0, 1, 'a', 0}} {
		if _, err := decodeLabels(b); err == nil {
			t.Errorf("decodeLabels accepted % x", b)
		}
	}
}

func TestLabelsEncoding(t *testing.T) {
	for _, l := range []map[string]string{
		{},
		{"comm": "api", "pod": "", "": "empty name", "pid": "1"},
		{"x": string([]byte{0, 0xff, '"'})},
	} {
		b, _ := appendLabels(nil, l, nil)
		got, err := decodeLabels(b)
		if err != nil {
			t.Fatal(err)
		}
		if !maps.Equal(got, l) {
			t.Errorf("round trip of %q gave %q", l, got)
		}
	}
}

// FuzzDecode feeds arbitrary bytes, as a damaged or hostile database file
// would, to every blob decoder: none may panic, and whatever one accepts
// must encode back to something that decodes to the same values.
func FuzzDecode(f *testing.F) {
	f.Add(appendCounts(nil, []stackCount{{1, 5}, {7, 1}, {1 << 40, 1 << 50}}))
	f.Add(appendStack(nil, []int64{9, 10, 11, 3, 1 << 62}))
	f.Add(appendFrames(nil, []frame{{1, 10}, {2, -1}}))
	lb, _ := appendLabels(nil, map[string]string{"comm": "a", "pod": ""}, nil)
	f.Add(lb)
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01})
	f.Fuzz(func(t *testing.T, b []byte) {
		var pairs []stackCount
		if err := decodeCounts(b, func(s, c int64) { pairs = append(pairs, stackCount{s, c}) }); err == nil {
			var again []stackCount
			if err := decodeCounts(appendCounts(nil, pairs), func(s, c int64) { again = append(again, stackCount{s, c}) }); err != nil || !slices.Equal(pairs, again) {
				t.Errorf("counts %v re-decode as %v, %v", pairs, again, err)
			}
			for i := 1; i < len(pairs); i++ {
				if pairs[i].stack <= pairs[i-1].stack || pairs[i].count <= 0 {
					t.Errorf("decoded pairs out of order or not positive: %v", pairs)
				}
			}
		}
		if ids, err := decodeStack(b, nil); err == nil {
			again, err := decodeStack(appendStack(nil, ids), nil)
			if err != nil || !slices.Equal(ids, again) {
				t.Errorf("stack %v re-decodes as %v, %v", ids, again, err)
			}
			for _, id := range ids {
				if id <= 0 {
					t.Errorf("decoded location id %d", id)
				}
			}
		}
		if fs, err := decodeFrames(b, nil); err == nil {
			again, err := decodeFrames(appendFrames(nil, fs), nil)
			if err != nil || !slices.Equal(fs, again) {
				t.Errorf("frames %v re-decode as %v, %v", fs, again, err)
			}
		}
		if l, err := decodeLabels(b); err == nil {
			enc, _ := appendLabels(nil, l, nil)
			again, err := decodeLabels(enc)
			if err != nil || !reflect.DeepEqual(l, again) {
				t.Errorf("labels %q re-decode as %q, %v", l, again, err)
			}
		}
	})
}
