package symbol

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unsafe"
)

func TestReadPerfMap(t *testing.T) {
	f, err := os.Open(filepath.Join("testdata", "perf-123.map"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m, err := ReadPerfMap(f)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		addr uint64
		want string
	}{
		{"recompiled: the later line wins", 0x7f0000001000, "LazyCompile:*foo /app/a.js:1"},
		{"end of the recompiled entry", 0x7f00000010ff, "LazyCompile:*foo /app/a.js:1"},
		{"untouched neighbour", 0x7f0000001100, "Builtin:ArgumentsAdaptorTrampoline"},
		{"past its end", 0x7f0000001180, ""},
		{"older entry before the overlap", 0x7f0000002050, "old_function"},
		{"newer entry inside the older", 0x7f0000002080, "new_function overlapping old"},
		{"end of the newer entry", 0x7f00000020bf, "new_function overlapping old"},
		{"older entry after the overlap", 0x7f00000020c0, "old_function"},
		{"end of the older entry", 0x7f00000021ff, "old_function"},
		{"0x prefixes", 0x7f000000300f, "prefixed"},
		{"bad size skipped", 0x7f0000004000, ""},
		{"zero size skipped", 0x7f0000005000, ""},
		{"no name skipped", 0x7f0000006000, ""},
		{"before everything", 0x1000, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := lookupName(m, tt.addr); got != tt.want {
				t.Errorf("Lookup(%#x) = %q, want %q", tt.addr, got, tt.want)
			}
		})
	}
}

func TestReadPerfMapOverlaps(t *testing.T) {
	tests := []struct {
		name  string
		lines string
		want  map[uint64]string
	}{
		{
			"earlier entry inside a later one",
			"110 10 small\n100 100 big\n",
			map[uint64]string{0x100: "big", 0x115: "big", 0x1ff: "big", 0x200: ""},
		},
		{
			"three layers",
			"100 100 a\n140 80 b\n150 10 c\n",
			map[uint64]string{0x13f: "a", 0x140: "b", 0x150: "c", 0x15f: "c", 0x160: "b", 0x1bf: "b", 0x1c0: "a", 0x1ff: "a"},
		},
		{
			"same range rewritten",
			"100 10 a\n100 10 b\n100 10 a\n",
			map[uint64]string{0x100: "a", 0x10f: "a"},
		},
		{
			"touching entries stay apart",
			"100 10 a\n110 10 b\n",
			map[uint64]string{0x10f: "a", 0x110: "b"},
		},
		{
			"top of the address space",
			"fffffffffffffff0 f top\nfffffffffffffff0 10 wraps\n",
			map[uint64]string{0xfffffffffffffff0: "top", 0xfffffffffffffffe: "top", 0xffffffffffffffff: ""},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := ReadPerfMap(strings.NewReader(tt.lines))
			if err != nil {
				t.Fatal(err)
			}
			for addr, want := range tt.want {
				if got := lookupName(m, addr); got != want {
					t.Errorf("Lookup(%#x) = %q, want %q", addr, got, want)
				}
			}
		})
	}
}

// naivePerfMap answers like PerfMap by scanning every line, the last
// covering one winning.
func naivePerfMap(data []byte, addr uint64) string {
	name := ""
	for _, line := range bytes.Split(data, []byte{'\n'}) {
		start, size, n, ok := parsePerfMapLine(line)
		if ok && addr >= start && addr-start < size {
			name = string(n)
		}
	}
	return name
}

func FuzzPerfMap(f *testing.F) {
	if data, err := os.ReadFile(filepath.Join("testdata", "perf-123.map")); err == nil {
		f.Add(data)
	}
	f.Add([]byte("100 100 a\n140 80 b\n150 10 c\n110 10 d\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := ReadPerfMap(bytes.NewReader(data))
		if err != nil {
			t.Fatal(err)
		}
		for i, start := range m.starts {
			if start >= m.segs[i].end || (i > 0 && m.segs[i-1].end > start) {
				t.Fatalf("segment %d [%#x, %#x) overlaps or is empty", i, start, m.segs[i].end)
			}
		}
		// ReadPerfMap skips lines of 64 KiB; the naive answer is quadratic.
		if bytes.Count(data, []byte{'\n'}) > 64 || len(data) > 60<<10 {
			return
		}
		for _, line := range bytes.Split(data, []byte{'\n'}) {
			start, size, _, ok := parsePerfMapLine(line)
			if !ok {
				continue
			}
			for _, addr := range []uint64{start - 1, start, start + size/2, start + size - 1, start + size} {
				if got, want := lookupName(m, addr), naivePerfMap(data, addr); got != want {
					t.Fatalf("Lookup(%#x) = %q, want %q", addr, got, want)
				}
			}
		}
	})
}

func BenchmarkReadPerfMap(b *testing.B) {
	// A V8-like map: 100k functions, a fifth of them later recompiled at
	// addresses overlapping older code.
	var buf bytes.Buffer
	for i := range 100_000 {
		fmt.Fprintf(&buf, "%x %x LazyCompile:~fn%d /app/src/module%d.js:%d\n", 0x3a0000000000+i*0x200, 0x180, i, i%50, i)
	}
	for i := range 20_000 {
		fmt.Fprintf(&buf, "%x %x LazyCompile:*fn%d /app/src/module%d.js:%d\n", 0x3a0000000100+i*0x1000, 0x300, i, i%50, i)
	}
	data := buf.Bytes()
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	loopCPU(b, func() {
		if _, err := ReadPerfMap(bytes.NewReader(data)); err != nil {
			b.Fatal(err)
		}
	})
	m, _ := ReadPerfMap(bytes.NewReader(data))
	b.ReportMetric(float64(8*cap(m.starts)+int(unsafe.Sizeof(perfSeg{}))*cap(m.segs)+len(m.blob)), "table-B")
	b.ReportMetric(float64(len(m.starts)), "segments")
}
