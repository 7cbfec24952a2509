package server

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/flint-dev/flint/internal/profile"
	"github.com/flint-dev/flint/internal/selector"
	"github.com/flint-dev/flint/internal/store"
	"github.com/flint-dev/flint/internal/symbol"
)

// fakeStore is an in-memory store.Store with the interface's semantics and
// knobs for the errors a real one returns.
type fakeStore struct {
	mu         sync.Mutex
	windows    []*profile.Profile
	findings   []store.Finding
	err        error // returned by every query when set
	maxSamples int   // a larger profile is store.ErrTooLarge; 0: no limit
	block      bool  // queries wait for their context to end
	// entered, when set, receives a value as each query starts.
	entered chan struct{}
	queries []store.Query
}

func (f *fakeStore) Write(_ context.Context, p *profile.Profile) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.windows = append(f.windows, p)
	return nil
}

// begin records q and returns the error the query should fail with.
func (f *fakeStore) begin(ctx context.Context, q store.Query) error {
	f.mu.Lock()
	f.queries = append(f.queries, q)
	err, block, entered := f.err, f.block, f.entered
	f.mu.Unlock()
	if entered != nil {
		entered <- struct{}{}
	}
	if block {
		<-ctx.Done()
		return fmt.Errorf("fake query: %w", ctx.Err())
	}
	if err != nil {
		return err
	}
	if !q.From.Before(q.To) {
		return fmt.Errorf("%w: empty range", store.ErrBadQuery)
	}
	return nil
}

// matching calls fn for every sample of every window starting in q's range
// that q's selector matches.
func (f *fakeStore) matching(q store.Query, fn func(w *profile.Profile, s *profile.Sample)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, w := range f.windows {
		if w.Start.Before(q.From) || !w.Start.Before(q.To) {
			continue
		}
		for _, s := range w.Samples {
			if q.Selector.Matches(s.Labels) {
				fn(w, s)
			}
		}
	}
}

func (f *fakeStore) Profile(ctx context.Context, q store.Query) (*profile.Profile, error) {
	if err := f.begin(ctx, q); err != nil {
		return nil, err
	}
	out := &profile.Profile{Start: q.From, Duration: q.To.Sub(q.From)}
	merged := map[string]*profile.Sample{}
	f.matching(q, func(w *profile.Profile, s *profile.Sample) {
		out.Period = w.Period
		labels := map[string]string{}
		for k, v := range s.Labels {
			if q.KeepLabels == nil || slices.Contains(q.KeepLabels, k) {
				labels[k] = v
			}
		}
		key := fmt.Sprintf("%p %v", s.Stack, labels)
		if m := merged[key]; m != nil {
			m.Count += s.Count
			return
		}
		m := &profile.Sample{Stack: s.Stack, Count: s.Count, Labels: labels}
		merged[key] = m
		out.Samples = append(out.Samples, m)
	})
	if f.maxSamples > 0 && len(out.Samples) > f.maxSamples {
		return nil, fmt.Errorf("%w: more than %d distinct stacks", store.ErrTooLarge, f.maxSamples)
	}
	return out, nil
}

// Series buckets windows by their start as time.Truncate does, aligned to
// zero time rather than the Unix epoch: the server must cope with any
// alignment.
func (f *fakeStore) Series(ctx context.Context, q store.SeriesQuery) (store.SeriesSet, error) {
	if err := f.begin(ctx, q.Query); err != nil {
		return store.SeriesSet{}, err
	}
	if q.Step <= 0 {
		return store.SeriesSet{}, fmt.Errorf("%w: step %s", store.ErrBadQuery, q.Step)
	}
	var out store.SeriesSet
	counts := map[string]map[time.Time]int64{}
	f.matching(q.Query, func(w *profile.Profile, s *profile.Sample) {
		out.Period = w.Period
		v := s.Labels[q.By]
		if counts[v] == nil {
			counts[v] = map[time.Time]int64{}
		}
		counts[v][w.Start.Truncate(q.Step)] += s.Count
	})
	for v, byTime := range counts {
		s := store.Series{Value: v}
		for t, n := range byTime {
			s.Points = append(s.Points, store.Point{Time: t, Samples: n})
		}
		sort.Slice(s.Points, func(i, j int) bool { return s.Points[i].Time.Before(s.Points[j].Time) })
		out.Series = append(out.Series, s)
	}
	return out, nil
}

func (f *fakeStore) LabelNames(ctx context.Context, from, to time.Time) ([]string, error) {
	return f.labels(ctx, from, to, func(labels map[string]string, add func(string)) {
		for k := range labels {
			add(k)
		}
	})
}

func (f *fakeStore) LabelValues(ctx context.Context, name string, from, to time.Time) ([]string, error) {
	return f.labels(ctx, from, to, func(labels map[string]string, add func(string)) {
		if v, ok := labels[name]; ok {
			add(v)
		}
	})
}

func (f *fakeStore) labels(ctx context.Context, from, to time.Time, each func(map[string]string, func(string))) ([]string, error) {
	q := store.Query{From: from, To: to}
	if err := f.begin(ctx, q); err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	var out []string
	f.matching(q, func(_ *profile.Profile, s *profile.Sample) {
		each(s.Labels, func(v string) {
			if !seen[v] {
				seen[v] = true
				out = append(out, v)
			}
		})
	})
	return out, nil
}

func (f *fakeStore) WriteFindings(_ context.Context, fs []store.Finding) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.findings = append(f.findings, fs...)
	return nil
}

func (f *fakeStore) Findings(ctx context.Context, q store.Query) ([]store.Finding, error) {
	if err := f.begin(ctx, q); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []store.Finding
	for _, x := range f.findings {
		if !x.Start.Before(q.From) && x.Start.Before(q.To) && q.Selector.Matches(x.Labels) {
			out = append(out, x)
		}
	}
	return out, nil
}

func (f *fakeStore) Close() error { return nil }

// Test data: six 10 s windows from t0, each with 30 samples of api
// (main.work 20, main.idle 10) and 10 of worker (worker.loop), then
// another six with main.work down to 5.
var (
	t0      = time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	testNow = t0.Add(time.Hour)
)

func testStack() (work, idle, loop []*profile.Location) {
	exe := &profile.Mapping{File: "/usr/bin/api", Start: 0x400000, Limit: 0x500000, BuildID: "abc"}
	loc := func(addr uint64, fn string) *profile.Location {
		return &profile.Location{Address: addr, Mapping: exe, Frames: []symbol.Frame{{Function: fn, File: "/src/" + strings.Split(fn, ".")[0] + ".go", Line: 7}}}
	}
	main := loc(0x401000, "main.main")
	return []*profile.Location{loc(0x402000, "main.work"), main},
		[]*profile.Location{loc(0x403000, "main.idle"), main},
		[]*profile.Location{loc(0x404000, "worker.loop"), main}
}

func newFakeStore() *fakeStore {
	work, idle, loop := testStack()
	api := map[string]string{profile.LabelComm: "api", profile.LabelPID: "4242", profile.LabelTID: "4242", profile.LabelThread: "api"}
	worker := map[string]string{profile.LabelComm: "worker", profile.LabelPID: "77", profile.LabelTID: "78", profile.LabelThread: "w1"}
	f := &fakeStore{}
	for i := range 12 {
		n := int64(20)
		if i >= 6 {
			n = 5
		}
		f.Write(context.Background(), &profile.Profile{
			Start: t0.Add(time.Duration(i) * 10 * time.Second), Duration: 10 * time.Second, Period: 10 * time.Millisecond,
			Samples: []*profile.Sample{
				{Stack: work, Count: n, Labels: api},
				{Stack: idle, Count: 10, Labels: api},
				{Stack: loop, Count: 10, Labels: worker},
			},
		})
	}
	f.WriteFindings(context.Background(), []store.Finding{{
		Start: t0.Add(10 * time.Second), Duration: 10 * time.Second, Detector: "busy-poll", Severity: "critical",
		Labels: map[string]string{profile.LabelComm: "api", profile.LabelPID: "4242"},
		Body:   []byte(`{"id":"busy-poll","pid":4242,"comm":"api","severity":"critical","summary":"spins"}`),
	}})
	return f
}

// fakeLive returns a profile of one sample per call, recording its arguments.
type fakeLive struct {
	mu   sync.Mutex
	kind profile.Kind
	d    time.Duration
	sel  selector.Selector
	err  error
}

func (l *fakeLive) Profile(ctx context.Context, kind profile.Kind, d time.Duration, sel selector.Selector) (*profile.Profile, error) {
	l.mu.Lock()
	l.kind, l.d, l.sel = kind, d, sel
	err := l.err
	l.mu.Unlock()
	if err != nil {
		return nil, err
	}
	work, _, _ := testStack()
	return &profile.Profile{Start: testNow, Duration: d, Period: 10 * time.Millisecond, Samples: []*profile.Sample{
		{Stack: work, Count: 25, Labels: map[string]string{profile.LabelComm: "api", profile.LabelPID: "4242"}},
	}}, nil
}
