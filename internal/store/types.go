package store

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/flint-dev/flint/internal/profile"
)

// Profile types. The store keeps two, CPU samples and off-CPU nanoseconds,
// each window of one type; wall time is computed from both when asked for,
// here, once for every backend.

// A range's CPU windows may have been sampled at different rates: a
// fleet's agents with other --frequency values, profiles received over
// OTLP from a profiler at 20 Hz. Their samples add up as the CPU time they
// stand for, as counts of the range's shortest period (samples at the
// highest rate), read one period at a time; a range of one period is read
// in one pass and keeps its counts as written. A window of period 0 (a
// received profile that counted samples without saying their period)
// counts its samples as they are.

// pass is the part of a query's range read at once.
type pass struct {
	// every: the pass reads every window of the range, each count as it
	// is; otherwise those of period only.
	every  bool
	period time.Duration
	// unit is the period counts are converted to.
	unit time.Duration
}

// passes returns the passes that read a range of type t whose CPU windows
// have periods (shortest first).
func passes(t profile.Kind, periods []time.Duration) []pass {
	if t != profile.CPU || len(periods) < 2 {
		return []pass{{every: true}}
	}
	out := make([]pass, len(periods))
	unit := unitOf(periods)
	for i, p := range periods {
		out[i] = pass{period: p, unit: unit}
	}
	return out
}

// convert returns n samples of the pass's period as samples of its unit,
// rounded: at least n, for no known period is shorter than the unit. A
// received profile's period may be anything: the result stops at 2^53, far
// beyond any real count, so that sums of them stay in range.
func (p pass) convert(n int64) int64 {
	if p.every || p.period == p.unit || p.period == 0 {
		return n
	}
	return int64(min(math.Round(float64(n)*float64(p.period)/float64(p.unit)), 1<<53))
}

// unitOf is the period a range's CPU counts are in: its shortest known
// one; 0 when it has none.
func unitOf(periods []time.Duration) time.Duration {
	for _, p := range periods {
		if p > 0 {
			return p
		}
	}
	return 0
}

// countPeriod is what one count of a query of type t stands for: for CPU
// the range's unit (unitOf its CPU windows' periods), for off-CPU and wall
// 1 ns.
func countPeriod(t profile.Kind, periods []time.Duration) time.Duration {
	if t != profile.CPU {
		return time.Nanosecond
	}
	return unitOf(periods)
}

// checkWriteKind refuses a window of a type the store does not keep.
func checkWriteKind(p *profile.Profile) error {
	if p.Kind != profile.CPU && p.Kind != profile.OffCPU {
		return fmt.Errorf("window of kind %d: the store keeps CPU and off-CPU windows (wall time is both)", p.Kind)
	}
	return nil
}

// checkQueryType refuses a type that is none of CPU, OffCPU and Wall.
func checkQueryType(t profile.Kind) error {
	if t > profile.Wall {
		return fmt.Errorf("%w: profile type %d", ErrBadQuery, t)
	}
	return nil
}

// wallProfile is the CPU profile of q, each count converted to its
// period's nanoseconds, and the off-CPU profile of q in one: where
// threads spent their time, running or not.
func wallProfile(ctx context.Context, r Reader, q Query) (*profile.Profile, error) {
	q.Type = profile.CPU
	cpu, err := r.Profile(ctx, q)
	if err != nil {
		return nil, err
	}
	q.Type = profile.OffCPU
	off, err := r.Profile(ctx, q)
	if err != nil {
		return nil, err
	}
	p := &profile.Profile{Start: q.From, Duration: q.To.Sub(q.From), Kind: profile.Wall, Period: time.Nanosecond,
		Samples: make([]*profile.Sample, 0, len(cpu.Samples)+len(off.Samples))}
	for _, s := range cpu.Samples {
		p.Samples = append(p.Samples, &profile.Sample{Stack: s.Stack, Labels: s.Labels, Count: s.Count * int64(cpu.Period)})
	}
	p.Samples = append(p.Samples, off.Samples...)
	return p, nil
}

// wallSeries is the CPU series of q converted to nanoseconds by the
// period its counts are in, plus the off-CPU series.
func wallSeries(ctx context.Context, r Reader, q SeriesQuery) (SeriesSet, error) {
	index := map[string]int{}
	var values []string
	var points [][]int64
	for _, t := range []profile.Kind{profile.CPU, profile.OffCPU} {
		q.Type = t
		set, err := r.Series(ctx, q)
		if err != nil {
			return SeriesSet{}, err
		}
		scale := int64(set.Period)
		for _, s := range set.Series {
			i, ok := index[s.Value]
			if !ok {
				i = len(values)
				index[s.Value] = i
				values = append(values, s.Value)
				points = append(points, make([]int64, len(s.Points)))
			}
			for b, pt := range s.Points {
				points[i][b] += pt.Samples * scale
			}
		}
	}
	return SeriesSet{Period: time.Nanosecond, Series: rankSeries(values, points, q.From, q.Step)}, nil
}
