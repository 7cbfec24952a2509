package store

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/flint-dev/flint/internal/profile"
	"github.com/flint-dev/flint/internal/symbol"
)

// TestProfileTypes stores a CPU and an off-CPU window with the same start
// and labels and asks for each type: neither leaks into the other, wall
// time is both, and a count beyond 32 bits (6 s of one stack) survives.
func TestProfileTypes(t *testing.T) {
	forEachBackend(t, testOptions(), func(t *testing.T, s Store) {
		ctx := context.Background()
		run := &profile.Location{Address: 1, Frames: []symbol.Frame{{Function: "run"}}}
		wait := &profile.Location{Address: 2, Frames: []symbol.Frame{{Function: "futex_wait"}}}
		api := map[string]string{"comm": "api", "pid": "1", "node": "n1"}
		db := map[string]string{"comm": "db", "pid": "2", "node": "n1"}
		cpu := &profile.Profile{Start: t0, Duration: wlWindow, Period: wlPeriod, Samples: []*profile.Sample{
			{Stack: []*profile.Location{run}, Count: 300, Labels: api},
			{Stack: []*profile.Location{run}, Count: 50, Labels: db},
		}}
		off := &profile.Profile{Start: t0, Duration: wlWindow, Kind: profile.OffCPU, Period: time.Nanosecond, Samples: []*profile.Sample{
			{Stack: []*profile.Location{wait}, Count: 6e9, Labels: api},
			{Stack: []*profile.Location{run, wait}, Count: 7e6, Labels: db},
		}}
		write(t, s, cpu, off)
		if err := s.Write(ctx, &profile.Profile{Start: t0, Kind: profile.Wall}); err == nil {
			t.Error("wrote a wall window")
		}

		q := Query{From: t0, To: t0.Add(time.Minute)}
		cpuNs := 350 * int64(wlPeriod)
		for _, tt := range []struct {
			typ    profile.Kind
			period time.Duration
			total  int64
			stacks int
		}{
			{profile.CPU, wlPeriod, 350, 2},
			{profile.OffCPU, time.Nanosecond, 6e9 + 7e6, 2},
			{profile.Wall, time.Nanosecond, cpuNs + 6e9 + 7e6, 4},
		} {
			q.Type = tt.typ
			p := query(t, s, q)
			if p.Kind != tt.typ || p.Period != tt.period || p.Total() != tt.total || len(p.Samples) != tt.stacks {
				t.Errorf("type %d: kind %d, period %s, total %d in %d samples; want kind %d, period %s, total %d in %d",
					tt.typ, p.Kind, p.Period, p.Total(), len(p.Samples), tt.typ, tt.period, tt.total, tt.stacks)
			}
			leaf := "run"
			if tt.typ == profile.OffCPU {
				leaf = "futex_wait"
			}
			if tt.typ != profile.Wall && !slices.ContainsFunc(p.Samples, func(s *profile.Sample) bool {
				return s.Stack[0].Frames[0].Function == leaf
			}) {
				t.Errorf("type %d: no stack ending in %s", tt.typ, leaf)
			}

			ss, err := s.Series(ctx, SeriesQuery{Query: q, By: "comm", Step: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			var sum int64
			for _, s := range ss {
				for _, pt := range s.Points {
					sum += pt.Samples
				}
			}
			if sum != tt.total {
				t.Errorf("type %d: series sum to %d, want %d", tt.typ, sum, tt.total)
			}
		}

		q.Type = profile.Wall + 1
		if _, err := s.Profile(ctx, q); !errors.Is(err, ErrBadQuery) {
			t.Errorf("profile of type %d: %v, want ErrBadQuery", q.Type, err)
		}
		if _, err := s.Series(ctx, SeriesQuery{Query: q, Step: time.Minute}); !errors.Is(err, ErrBadQuery) {
			t.Errorf("series of type %d: %v, want ErrBadQuery", q.Type, err)
		}
	})
}

// checkReadsAsCPU checks that w, written by a version without profile
// types, reads as CPU time and not as off-CPU time; it returns the query
// of w's range, of type off-CPU.
func checkReadsAsCPU(t *testing.T, s Store, w *profile.Profile) Query {
	t.Helper()
	q := Query{From: w.Start, To: w.Start.Add(w.Duration)}
	if p := query(t, s, q); p.Total() != w.Total() || p.Period != w.Period {
		t.Errorf("CPU profile of the old window: %d samples of %s, want %d of %s", p.Total(), p.Period, w.Total(), w.Period)
	}
	q.Type = profile.OffCPU
	if p := query(t, s, q); len(p.Samples) != 0 {
		t.Errorf("off-CPU profile of an old CPU window: %d samples, want none", len(p.Samples))
	}
	return q
}
