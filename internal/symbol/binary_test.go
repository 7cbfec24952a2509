package symbol

import (
	"testing"

	"github.com/flint-dev/flint/internal/proc"
)

// TestBiasMatchesAddr checks that a mapping's bias turns every runtime
// address of code into the link-time address Addr gives its file offset,
// also where one page holds the end of a read-only segment and the start
// of the executable one, as lld lays binaries out.
func TestBiasMatchesAddr(t *testing.T) {
	for _, tc := range []struct {
		name     string
		segments Layout
		off      uint64 // the executable mapping's file offset
	}{
		{"page-aligned (GNU ld)", []segment{{off: 0, vaddr: 0, size: 0x1000}, {off: 0x1000, vaddr: 0x1000, size: 0x3000, exec: true}}, 0x1000},
		{"packed (lld)", []segment{{off: 0, vaddr: 0, size: 0x4f0}, {off: 0x4f0, vaddr: 0x14f0, size: 0x3000, exec: true}}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := &Binary{segments: tc.segments}
			const start, size = 0x7f0000000000, 0x4000
			bias, ok := b.segments.Bias(&proc.Mapping{Start: start, End: start + size, Offset: tc.off})
			if !ok {
				t.Fatal("no segment")
			}
			for _, fileOff := range []uint64{0x1000, 0x1500, 0x2ff0} {
				runtime := start + fileOff - tc.off
				link, ok := b.Addr(fileOff)
				if !ok || runtime-bias != link {
					t.Errorf("file offset %#x: runtime %#x - bias = %#x, Addr says %#x", fileOff, runtime, runtime-bias, link)
				}
			}
		})
	}
}

func TestSpan(t *testing.T) {
	l := Layout{{off: 0x1000, vaddr: 0x401000, size: 0x3000, exec: true}, {off: 0, vaddr: 0x400000, size: 0x800}, {off: 0x4000, vaddr: 0x405000, size: 0x1200}}
	if lo, hi := l.Span(); lo != 0x400000 || hi != 0x406200 {
		t.Errorf("Span = %#x-%#x, want 0x400000-0x406200", lo, hi)
	}
	if lo, hi := (Layout{}).Span(); lo != 0 || hi != 0 {
		t.Errorf("Span of no segments = %#x-%#x", lo, hi)
	}
}
