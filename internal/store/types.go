package store

import (
	"context"
	"fmt"
	"time"

	"github.com/flint-dev/flint/internal/profile"
)

// Profile types. The store keeps two, CPU samples and off-CPU nanoseconds,
// each window of one type; wall time is computed from both when asked for,
// here, once for every backend.

// typedReader is a backend: it answers queries of one stored type and
// tells the CPU sampling period, which converts CPU samples to time.
type typedReader interface {
	Reader
	cpuPeriod(ctx context.Context, from, to time.Time) (time.Duration, error)
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
func wallProfile(ctx context.Context, r typedReader, q Query) (*profile.Profile, error) {
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
// period most CPU windows in the range had, plus the off-CPU series.
func wallSeries(ctx context.Context, r typedReader, q SeriesQuery) ([]Series, error) {
	period, err := r.cpuPeriod(ctx, q.From, q.To)
	if err != nil {
		return nil, fmt.Errorf("query series: %w", err)
	}
	index := map[string]int{}
	var values []string
	var points [][]int64
	for _, part := range []struct {
		t     profile.Kind
		scale int64
	}{{profile.CPU, int64(period)}, {profile.OffCPU, 1}} {
		q.Type = part.t
		ss, err := r.Series(ctx, q)
		if err != nil {
			return nil, err
		}
		for _, s := range ss {
			i, ok := index[s.Value]
			if !ok {
				i = len(values)
				index[s.Value] = i
				values = append(values, s.Value)
				points = append(points, make([]int64, len(s.Points)))
			}
			for b, pt := range s.Points {
				points[i][b] += pt.Samples * part.scale
			}
		}
	}
	return rankSeries(values, points, q.From, q.Step), nil
}
