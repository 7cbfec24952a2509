package server

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/flint-dev/flint/internal/store"
)

// TestSQLiteStore runs requests through the real embedded store and checks
// that it answers as the fake does.
func TestSQLiteStore(t *testing.T) {
	o := store.DefaultOptions()
	o.Retention, o.CompactInterval = 0, 0 // the test data is in 2026
	st, err := store.Open(t.TempDir(), o)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	fake := newFakeStore()
	for _, w := range fake.windows {
		if err := st.Write(context.Background(), w); err != nil {
			t.Fatal(err)
		}
	}
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
