package store

import (
	"context"
	"errors"
	"maps"
	"math"
	"reflect"
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

			set, err := s.Series(ctx, SeriesQuery{Query: q, By: "comm", Step: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			if set.Period != tt.period {
				t.Errorf("type %d: series period %s, want %s", tt.typ, set.Period, tt.period)
			}
			var sum int64
			for _, s := range set.Series {
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

// TestMixedPeriods stores windows sampled at different rates, as a fleet's
// agents with other --frequency values or a profiler sending over OTLP
// write them: a range adds them up as CPU time, in counts of its finest
// period, and a range of one rate reads as it was written.
func TestMixedPeriods(t *testing.T) {
	forEachBackend(t, testOptions(), func(t *testing.T, s Store) {
		ctx := context.Background()
		a := &profile.Location{Address: 1, Frames: []symbol.Frame{{Function: "a"}}}
		b := &profile.Location{Address: 2, Frames: []symbol.Frame{{Function: "b"}}}
		api := map[string]string{"comm": "api", "pid": "1", "node": "n1"}
		fast, slow := 10*time.Millisecond, 50*time.Millisecond
		window := func(i int, period time.Duration, na, nb int64) *profile.Profile {
			return &profile.Profile{Start: t0.Add(time.Duration(i) * wlWindow), Duration: wlWindow, Period: period, Samples: []*profile.Sample{
				{Stack: []*profile.Location{a}, Count: na, Labels: api},
				{Stack: []*profile.Location{b}, Count: nb, Labels: api},
			}}
		}
		// 100 ms of a, then 50 ms of a and 100 ms of b, then 30 ms of b,
		// then two samples of a of no known period (received over OTLP
		// without one).
		write(t, s, window(0, fast, 10, 0), window(1, slow, 1, 2), window(2, fast, 0, 3), window(3, 0, 2, 0))
		counts := func(p *profile.Profile) map[string]int64 {
			out := map[string]int64{}
			for _, smp := range p.Samples {
				out[smp.Stack[0].Frames[0].Function] += smp.Count
			}
			return out
		}
		for _, tt := range []struct {
			name     string
			from, to int // window indexes
			period   time.Duration
			want     map[string]int64
		}{
			{"all", 0, 3, fast, map[string]int64{"a": 15, "b": 13}},
			{"the slow window", 1, 2, slow, map[string]int64{"a": 1, "b": 2}},
			{"from the slow window", 1, 3, fast, map[string]int64{"a": 5, "b": 13}},
			{"a window of no known period too", 0, 4, fast, map[string]int64{"a": 17, "b": 13}},
		} {
			t.Run(tt.name, func(t *testing.T) {
				q := Query{From: t0.Add(time.Duration(tt.from) * wlWindow), To: t0.Add(time.Duration(tt.to) * wlWindow)}
				p := query(t, s, q)
				if got := counts(p); p.Period != tt.period || !maps.Equal(got, tt.want) {
					t.Errorf("%v of %s, want %v of %s", got, p.Period, tt.want, tt.period)
				}
				set, err := s.Series(ctx, SeriesQuery{Query: q, Step: q.To.Sub(q.From)})
				if err != nil || set.Period != tt.period || len(set.Series) != 1 || set.Series[0].Points[0].Samples != tt.want["a"]+tt.want["b"] {
					t.Errorf("series %+v, %v; want %d samples of %s", set, err, tt.want["a"]+tt.want["b"], tt.period)
				}
				q.Type = profile.Wall
				if got, want := query(t, s, q).Total(), (tt.want["a"]+tt.want["b"])*int64(tt.period); got != want {
					t.Errorf("wall time %d ns, want %d", got, want)
				}
			})
		}
		set, err := s.Series(ctx, SeriesQuery{Query: Query{From: t0, To: t0.Add(4 * wlWindow)}, By: "comm", Step: wlWindow})
		if err != nil {
			t.Fatal(err)
		}
		want := SeriesSet{Period: fast, Series: []Series{{Value: "api", Points: []Point{{t0, 10}, {t0.Add(wlWindow), 15}, {t0.Add(2 * wlWindow), 3}, {t0.Add(3 * wlWindow), 2}}}}}
		if !reflect.DeepEqual(set, want) {
			t.Errorf("series %+v, want %+v", set, want)
		}
	})
}

func TestPassConvert(t *testing.T) {
	fast := time.Second / 99
	for _, tt := range []struct {
		ps   pass
		n    int64
		want int64
	}{
		{pass{every: true}, 7, 7},
		{pass{period: fast, unit: fast}, 7, 7},
		{pass{period: 0, unit: fast}, 7, 7},                // no known period: as it is
		{pass{period: time.Second / 19, unit: fast}, 1, 5}, // 5.21
		{pass{period: time.Second / 19, unit: fast}, 19, 99},
		{pass{period: math.MaxInt64, unit: time.Nanosecond}, 1 << 40, 1 << 53},
	} {
		if got := tt.ps.convert(tt.n); got != tt.want {
			t.Errorf("%+v: %d samples converted to %d, want %d", tt.ps, tt.n, got, tt.want)
		}
	}
	if got := passes(profile.OffCPU, []time.Duration{fast, time.Second / 19}); len(got) != 1 || !got[0].every {
		t.Errorf("off-CPU passes %+v, want one over every window", got)
	}
	got := passes(profile.CPU, []time.Duration{0, fast, time.Second / 19})
	if len(got) != 3 || got[0].every || got[0].period != 0 || got[1].unit != fast {
		t.Errorf("passes %+v, want one a period, in counts of %s", got, fast)
	}
}
