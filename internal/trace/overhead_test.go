package trace

import (
	"math"
	"slices"
	"testing"
	"time"
)

func TestSlowdown(t *testing.T) {
	for _, tc := range []struct{ cpu, probe, want float64 }{
		{1, 0, 1},
		{1, 0.5, 2},
		{1, 0.9, 10},
		{0.2, 0.002, 0.2 / 0.198},
		{1, 1, math.Inf(1)},
		{0, 0, 0},
	} {
		if got := Slowdown(tc.cpu, tc.probe); math.Abs(got-tc.want) > 1e-9 && !(math.IsInf(got, 1) && math.IsInf(tc.want, 1)) {
			t.Errorf("Slowdown(%v, %v) = %v, want %v", tc.cpu, tc.probe, got, tc.want)
		}
	}
}

func TestOverBudget(t *testing.T) {
	load := map[int]float64{0: 0.5, 1: 0.001, 2: 0.03, 3: 0.015}
	if got := overBudget(load, 0.02); !slices.Equal(got, []int{0, 2}) {
		t.Errorf("overBudget 2%% = %v, want [0 2] (then 1.6%% stays)", got)
	}
	if got := overBudget(load, 0); got != nil {
		t.Errorf("no budget: detached %v", got)
	}
	if got := overBudget(load, 1); got != nil {
		t.Errorf("within budget: detached %v", got)
	}
}

func TestPerCall(t *testing.T) {
	c := Cost{Hit: 5 * time.Microsecond, HitEmulated: time.Microsecond, TimedCall: 11 * time.Microsecond}
	goFn := &Function{Lang: Go}
	cFn := &Function{Lang: C, EntryEmulated: true}
	for _, tc := range []struct {
		f       *Function
		latency bool
		want    time.Duration
	}{
		{goFn, false, 5 * time.Microsecond},
		{goFn, true, 11 * time.Microsecond},
		{&Function{Lang: Go, NoLatency: "tail call"}, true, 5 * time.Microsecond},
		{cFn, false, time.Microsecond},
		{cFn, true, 2 * time.Microsecond},
		{&Function{Lang: C}, true, 6 * time.Microsecond},
	} {
		if got := c.PerCall(tc.f, tc.latency); got != tc.want {
			t.Errorf("PerCall(%+v, %v) = %v, want %v", tc.f, tc.latency, got, tc.want)
		}
	}
}
