package server

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/flint-dev/flint/internal/profile"
	"github.com/flint-dev/flint/internal/store"
)

// TestSQLiteStore runs requests through the real embedded store and checks
// that it answers as the fake does.
func TestSQLiteStore(t *testing.T) {
	st, fake := sqliteWithFake(t)
	real := newServer(Options{Store: st}, func() time.Time { return testNow })
	want := newServer(Options{Store: fake}, func() time.Time { return testNow })
	for _, target := range []string{
		"/api/v1/profile?format=folded",
		`/api/v1/profile?format=folded&selector={comm="api"}&from=now-59m`,
		"/api/v1/profile?format=json",
		"/api/v1/series?from=now-1h&to=now-58m&step=10s",
		"/api/v1/series?by=pid&limit=1&step=30s",
		"/api/v1/labels",
		"/api/v1/labels/comm/values",
		"/api/v1/diff?from=now-59m&to=now-58m&format=folded",
		"/api/v1/diff?from=now-59m&to=now-58m&format=json&normalize=1",
	} {
		t.Run(target, func(t *testing.T) {
			got, exp := get(real, http.MethodGet, target, nil), get(want, http.MethodGet, target, nil)
			if got.Code != 200 || got.Body.String() != exp.Body.String() {
				t.Errorf("sqlite: %d %.500s\nfake: %d %.500s", got.Code, got.Body, exp.Code, exp.Body)
			}
		})
	}
}

// TestSQLiteProfileTypes asks the real store for each profile type: an
// off-CPU window beside the CPU windows shows only with type=off-cpu, in
// nanoseconds, and with type=wall beside the CPU samples in nanoseconds.
func TestSQLiteProfileTypes(t *testing.T) {
	st, fake := sqliteWithFake(t)
	_, idle, _ := testStack()
	first := fake.windows[0]
	off := &profile.Profile{Start: first.Start, Duration: first.Duration, Kind: profile.OffCPU, Period: time.Nanosecond,
		Samples: []*profile.Sample{{Stack: idle, Count: 5e9, Labels: first.Samples[0].Labels}}}
	if err := st.Write(context.Background(), off); err != nil {
		t.Fatal(err)
	}
	h := newServer(Options{Store: st}, func() time.Time { return testNow })
	cpu := get(h, http.MethodGet, "/api/v1/profile?format=folded", nil).Body.String()
	for _, tc := range []struct {
		target string
		want   string
	}{
		{"/api/v1/profile?format=folded&type=cpu", cpu},
		{"/api/v1/profile?format=folded&type=off-cpu", "api;main.main;main.idle 5000000000\n"},
		// 120, 150 and 120 samples of 10 ms, and 5 s off the CPU in main.idle.
		{"/api/v1/profile?format=folded&type=wall", "api;main.main;main.idle 6200000000\napi;main.main;main.work 1500000000\nworker;main.main;worker.loop 1200000000\n"},
	} {
		t.Run(tc.target, func(t *testing.T) {
			w := get(h, http.MethodGet, tc.target, nil)
			if w.Code != 200 || w.Body.String() != tc.want {
				t.Errorf("%d %q, want %q", w.Code, w.Body, tc.want)
			}
		})
	}
	w := get(h, http.MethodGet, "/api/v1/series?from=now-1h&to=now-58m&step=1m&type=off-cpu", nil)
	s := decode[SeriesResponse](t, w)
	if len(s.Series) != 1 || s.Series[0].Samples != 5e9 || s.Series[0].Points[0][1] != 5e9/60 || s.Period != 1e-9 {
		t.Errorf("off-CPU series %+v, want 5 s of api in the first minute, in nanoseconds", s)
	}
}

// TestSQLiteDiffPeriods compares a range sampled at 100 Hz with a base
// sampled at 20 Hz for the same CPU time: as CPU time, in counts of the
// shorter period, they are the same.
func TestSQLiteDiffPeriods(t *testing.T) {
	st, fake := sqliteWithFake(t)
	for i := range 6 {
		w := *fake.windows[i]
		w.Start, w.Period = w.Start.Add(-time.Minute), 5*w.Period
		w.Samples = nil
		for _, smp := range fake.windows[i].Samples {
			w.Samples = append(w.Samples, &profile.Sample{Stack: smp.Stack, Count: smp.Count / 5, Labels: smp.Labels})
		}
		if err := st.Write(context.Background(), &w); err != nil {
			t.Fatal(err)
		}
	}
	h := newServer(Options{Store: st}, func() time.Time { return testNow })
	w := get(h, http.MethodGet, "/api/v1/diff?from=now-1h&to=now-59m&format=folded", nil)
	want := "api;main.main;main.idle 60 60\napi;main.main;main.work 120 120\nworker;main.main;worker.loop 60 60\n"
	if w.Code != 200 || w.Body.String() != want {
		t.Errorf("%d %q, want %q", w.Code, w.Body, want)
	}
}

// TestSQLiteLimits checks that the store's limits come back as 422 and its
// rejections as 400.
func TestSQLiteLimits(t *testing.T) {
	o := store.DefaultOptions()
	o.Retention, o.CompactInterval = 0, 0
	o.MaxStacks, o.MaxQueryRange = 1, 24*time.Hour
	st, err := store.Open(t.TempDir(), o)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for _, w := range newFakeStore().windows {
		if err := st.Write(context.Background(), w); err != nil {
			t.Fatal(err)
		}
	}
	h := newServer(Options{Store: st}, func() time.Time { return testNow })
	for _, tc := range []struct {
		target string
		status int
		want   string
	}{
		{"/api/v1/profile", 422, "query too large: profile has more than 1 distinct samples"},
		{"/api/v1/series?from=now-2d", 422, "longer than the limit 24h0m0s"},
	} {
		checkError(t, tc.target, get(h, http.MethodGet, tc.target, nil), tc.status, tc.want)
	}
}

// sqliteWithFake opens a SQLite store holding the fake store's windows.
func sqliteWithFake(t *testing.T) (*store.SQLite, *fakeStore) {
	t.Helper()
	o := store.DefaultOptions()
	o.Retention, o.CompactInterval = 0, 0 // the test data is in 2026
	st, err := store.Open(t.TempDir(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	fake := newFakeStore()
	for _, w := range fake.windows {
		if err := st.Write(context.Background(), w); err != nil {
			t.Fatal(err)
		}
	}
	return st, fake
}
