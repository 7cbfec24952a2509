package agent

import (
	"testing"

	"github.com/flint-dev/flint/internal/sampler"
)

// TestEmptied keeps a window's room for the next one, without its samples,
// unless a burst made it large.
func TestEmptied(t *testing.T) {
	for _, tc := range []struct {
		name string
		n    int
		kept bool
	}{
		{"window", 1000, true},
		{"burst", maxKeptSamples + 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			window := make([]sampler.Sample, tc.n)
			for i := range window {
				window[i] = sampler.Sample{Comm: "python3", User: []uint64{1}}
			}
			next := emptied(window)
			if len(next) != 0 || (cap(next) == cap(window)) != tc.kept {
				t.Fatalf("emptied: len %d, cap %d of %d; want the room kept: %v", len(next), cap(next), cap(window), tc.kept)
			}
			if s := window[0]; tc.kept && (s.Comm != "" || s.User != nil) {
				t.Errorf("a sample of the last window kept: %+v", s)
			}
			batch := make([]sampler.Sample, tc.n)
			if tc.kept && testing.AllocsPerRun(10, func() { next = append(emptied(next), batch...) }) != 0 {
				t.Error("a window as large as the last allocated")
			}
		})
	}
}
