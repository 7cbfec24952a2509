package store

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/flint-dev/flint/internal/profile"
	"github.com/flint-dev/flint/internal/selector"
	"github.com/flint-dev/flint/internal/symbol"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// testOptions are DefaultOptions without the background goroutine, so
// tests decide when to compact.
func testOptions() Options {
	o := DefaultOptions()
	o.CompactInterval = 0
	return o
}

func openTest(t testing.TB, dir string, o Options) *SQLite {
	t.Helper()
	s, err := Open(dir, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func write(t testing.TB, s Store, ps ...*profile.Profile) {
	t.Helper()
	for _, p := range ps {
		if err := s.Write(context.Background(), p); err != nil {
			t.Fatal(err)
		}
	}
}

func query(t testing.TB, s Store, q Query) *profile.Profile {
	t.Helper()
	p, err := s.Profile(context.Background(), q)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// handmade returns a window with what the store must keep exactly: inlined
// frames with their functions' start lines, kernel and unmapped locations, build IDs, empty label values, a
// location without frames, an empty stack, duplicate samples and
// addresses with the top bit set.
func handmade(start time.Time) *profile.Profile {
	exe := &profile.Mapping{Start: 0x55d0c0000000, Limit: 0x55d0c0400000, Offset: 0x1000, File: "/app/server", BuildID: "0123456789abcdef0123456789abcdef01234567"}
	exe2 := &profile.Mapping{Start: 0x55d0c0000000, Limit: 0x55d0c0400000, Offset: 0x1000, File: "/app/server", BuildID: "0123456789abcdef0123456789abcdef01234567"}
	kern := &profile.Mapping{File: "[kernel.kallsyms]", Kernel: true}
	mod := &profile.Mapping{File: "[nvme]", Kernel: true}
	inlined := &profile.Location{Address: 0x55d0c0001234, Mapping: exe, Frames: []symbol.Frame{
		{Function: "strings.IndexByte", File: "/usr/local/go/src/strings/strings.go", Line: 115, StartLine: 113},
		{Function: "net/http.parseHeader", File: "/usr/local/go/src/net/http/header.go", Line: 77, StartLine: 60},
		{Function: "net/http.(*conn).readRequest", File: "/usr/local/go/src/net/http/server.go", Line: 1012, StartLine: 990},
	}}
	main := &profile.Location{Address: 0x55d0c0000100, Mapping: exe2, Frames: []symbol.Frame{{Function: "main.main", File: "/src/main.go", Line: 12, StartLine: 10}}}
	sys := &profile.Location{Address: 0xffffffff8a201234, Mapping: kern, Frames: []symbol.Frame{{Function: "do_syscall_64"}}}
	nvme := &profile.Location{Address: 0xffffffffc0a01000, Mapping: mod, Frames: []symbol.Frame{{Function: "nvme_queue_rq"}}}
	unknown := &profile.Location{Address: 0x7ffd1234, Frames: []symbol.Frame{{Function: "[unknown]"}}}
	noFrames := &profile.Location{Address: 0x42, Mapping: exe}
	a := map[string]string{"comm": "server", "pid": "42", "thread": "worker-1", "pod": "web-1", "container": "abc", "build_id": exe.BuildID}
	b := map[string]string{"comm": "server", "pid": "42", "thread": "gc", "pod": "web-1", "container": "abc", "build_id": exe.BuildID}
	c := map[string]string{"comm": "kworker/0:1", "pid": "7", "pod": "", "container": "", "node": "n1"}
	a2 := maps.Clone(a) // equal content in another map
	return &profile.Profile{Start: start, Duration: 10 * time.Second, Period: time.Second / 99, Samples: []*profile.Sample{
		{Stack: []*profile.Location{sys, inlined, main}, Count: 5, Labels: a},
		{Stack: []*profile.Location{sys, inlined, main}, Count: 3, Labels: a2},
		{Stack: []*profile.Location{inlined, main}, Count: 7, Labels: b},
		{Stack: []*profile.Location{nvme, sys}, Count: 11, Labels: c},
		{Stack: []*profile.Location{unknown, noFrames, main}, Count: 1, Labels: a},
		{Stack: nil, Count: 2, Labels: c},
		{Stack: []*profile.Location{main}, Count: 0, Labels: c}, // dropped
		{Stack: []*profile.Location{main}, Count: 4, Labels: nil},
	}}
}

// mixedWindows returns wl's first n windows with the sixth replaced by the
// handmade one, so that a test sees both kinds.
func mixedWindows(wl *workload, n int) []*profile.Profile {
	ps := make([]*profile.Profile, n)
	for i := range ps {
		ps[i] = wl.window(i)
	}
	ps[5] = handmade(ps[5].Start)
	return ps
}

func TestRoundTrip(t *testing.T) {
	forEachBackend(t, testOptions(), func(t *testing.T, s Store) {
		wl := newWorkload(t0)
		ps := mixedWindows(wl, 30)
		write(t, s, ps...)
		tests := []struct {
			name     string
			from, to int // window indexes
		}{
			{"one window", 0, 1},
			{"handmade", 5, 6},
			{"several", 3, 17},
			{"all", 0, 30},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				q := Query{From: t0.Add(time.Duration(tt.from) * wlWindow), To: t0.Add(time.Duration(tt.to) * wlWindow)}
				got := query(t, s, q)
				var want []*profile.Sample
				for _, p := range ps[tt.from:tt.to] {
					for _, smp := range p.Samples {
						if smp.Count > 0 {
							want = append(want, smp)
						}
					}
				}
				if diff := compare(canonical(got.Samples), canonical(want)); diff != "" {
					t.Error(diff)
				}
				if !got.Start.Equal(q.From) || got.Duration != q.To.Sub(q.From) || got.Period != wlPeriod {
					t.Errorf("got start %v duration %v period %v, want %v %v %v", got.Start, got.Duration, got.Period, q.From, q.To.Sub(q.From), wlPeriod)
				}
				// Merged: one sample per distinct (stack, labels).
				if n := len(canonical(got.Samples)); n != len(got.Samples) {
					t.Errorf("%d samples for %d distinct ones", len(got.Samples), n)
				}
			})
		}
	})
}

// compare describes how two canonical profiles differ, or returns "".
func compare(got, want map[string]int64) string {
	var diffs []string
	for k, w := range want {
		if g := got[k]; g != w {
			diffs = append(diffs, fmt.Sprintf("count %d, want %d: %.300s", g, w, k))
		}
	}
	for k, g := range got {
		if _, ok := want[k]; !ok {
			diffs = append(diffs, fmt.Sprintf("unexpected count %d: %.300s", g, k))
		}
	}
	if len(diffs) == 0 {
		return ""
	}
	slices.Sort(diffs)
	if len(diffs) > 5 {
		diffs = append(diffs[:5], fmt.Sprintf("… and %d more", len(diffs)-5))
	}
	return fmt.Sprintf("%d differences:\n%s", len(diffs), strings.Join(diffs, "\n"))
}

// filter applies a selector and KeepLabels to input samples, as the store
// should.
func filter(ps []*profile.Profile, sel selector.Selector, keepLabels []string) []*profile.Sample {
	var out []*profile.Sample
	for _, p := range ps {
		for _, s := range p.Samples {
			if s.Count <= 0 || !sel.Matches(s.Labels) {
				continue
			}
			out = append(out, &profile.Sample{Stack: s.Stack, Count: s.Count, Labels: keep(s.Labels, keepLabels)})
		}
	}
	return out
}

func TestSelectorAndKeepLabels(t *testing.T) {
	forEachBackend(t, testOptions(), func(t *testing.T, s Store) {
		wl := newWorkload(t0)
		var ps []*profile.Profile
		for i := range 20 {
			ps = append(ps, wl.window(i))
		}
		ps = append(ps, handmade(t0.Add(20*wlWindow)))
		write(t, s, ps...)
		tests := []struct {
			selector string
			keep     []string
			wantNone bool
		}{
			{selector: ""},
			{selector: `{comm="svc1"}`},
			{selector: `{comm="svc1"}`, keep: []string{"comm"}},
			{selector: `{pod=~"svc2-.*",thread!="worker-0"}`, keep: []string{"pod", "thread"}},
			{selector: `{pod=""}`, keep: []string{"comm", "pod"}},
			{selector: `{container!~".+"}`},
			{selector: `{comm="server"}`, keep: []string{}},
			{selector: "", keep: []string{"comm", "no_such_label"}},
			{selector: `{comm="nobody"}`, wantNone: true},
			{selector: `{node="n1"}`, keep: []string{"node"}},
		}
		for _, tt := range tests {
			t.Run(fmt.Sprintf("%s keep %q", tt.selector, tt.keep), func(t *testing.T) {
				sel, err := selector.Parse(tt.selector)
				if err != nil {
					t.Fatal(err)
				}
				q := Query{From: t0, To: t0.Add(time.Hour), Selector: sel, KeepLabels: tt.keep}
				got := query(t, s, q)
				want := filter(ps, sel, tt.keep)
				if tt.wantNone != (len(want) == 0) {
					t.Fatalf("test expects none: %v, but %d samples match", tt.wantNone, len(want))
				}
				if diff := compare(canonical(got.Samples), canonical(want)); diff != "" {
					t.Error(diff)
				}
				if n := len(canonical(got.Samples)); n != len(got.Samples) {
					t.Errorf("%d samples for %d distinct ones", len(got.Samples), n)
				}
			})
		}
	})
}

func TestSeries(t *testing.T) {
	forEachBackend(t, testOptions(), func(t *testing.T, s Store) {
		// Windows every 10 s; window i has i+1 samples of comm "a" and 1 of "b"
		// (none of b when i%3 == 0), and one without a comm.
		loc := &profile.Location{Address: 1, Frames: []symbol.Frame{{Function: "f"}}}
		for i := range 12 {
			p := &profile.Profile{Start: t0.Add(time.Duration(i) * wlWindow), Duration: wlWindow, Period: wlPeriod}
			p.Samples = append(p.Samples,
				&profile.Sample{Stack: []*profile.Location{loc}, Count: int64(i + 1), Labels: map[string]string{"comm": "a", "pid": "1"}},
				&profile.Sample{Stack: []*profile.Location{loc}, Count: 100, Labels: map[string]string{"pid": "3"}})
			if i%3 != 0 {
				p.Samples = append(p.Samples, &profile.Sample{Stack: []*profile.Location{loc}, Count: 1, Labels: map[string]string{"comm": "b", "pid": "2"}})
			}
			write(t, s, p)
		}
		pts := func(step time.Duration, from time.Time, ns ...int64) []Point {
			var out []Point
			for i, n := range ns {
				out = append(out, Point{Time: from.Add(time.Duration(i) * step), Samples: n})
			}
			return out
		}
		tests := []struct {
			name string
			q    SeriesQuery
			want SeriesSet // its Period wlPeriod but for a range with no window
		}{
			{"by comm, 30 s", SeriesQuery{Query: Query{From: t0, To: t0.Add(2 * time.Minute)}, By: "comm", Step: 30 * time.Second}, SeriesSet{wlPeriod, []Series{
				{Value: "", Points: pts(30*time.Second, t0, 300, 300, 300, 300)},
				{Value: "a", Points: pts(30*time.Second, t0, 1+2+3, 4+5+6, 7+8+9, 10+11+12)},
				{Value: "b", Points: pts(30*time.Second, t0, 2, 2, 2, 2)},
			}}},
			{"selector, partial last step", SeriesQuery{Query: Query{From: t0.Add(10 * time.Second), To: t0.Add(75 * time.Second), Selector: mustParse(t, `{comm=~"a|b"}`)}, By: "comm", Step: 20 * time.Second}, SeriesSet{wlPeriod, []Series{
				{Value: "a", Points: pts(20*time.Second, t0.Add(10*time.Second), 2+3, 4+5, 6+7, 8)},
				{Value: "b", Points: pts(20*time.Second, t0.Add(10*time.Second), 2, 1, 1, 1)},
			}}},
			{"no by", SeriesQuery{Query: Query{From: t0, To: t0.Add(time.Minute)}, Step: time.Minute}, SeriesSet{wlPeriod, []Series{
				{Value: "", Points: pts(time.Minute, t0, 21+4+600)},
			}}},
			{"nothing in range", SeriesQuery{Query: Query{From: t0.Add(-time.Hour), To: t0}, By: "comm", Step: time.Minute}, SeriesSet{}},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				got, err := s.Series(context.Background(), tt.q)
				if err != nil {
					t.Fatal(err)
				}
				if !reflect.DeepEqual(got, tt.want) {
					t.Errorf("got  %+v\nwant %+v", got, tt.want)
				}
			})
		}
	})
}

func mustParse(t *testing.T, text string) selector.Selector {
	t.Helper()
	sel, err := selector.Parse(text)
	if err != nil {
		t.Fatal(err)
	}
	return sel
}

func TestLabels(t *testing.T) {
	forEachBackend(t, testOptions(), func(t *testing.T, s Store) {
		loc := &profile.Location{Address: 1, Frames: []symbol.Frame{{Function: "f"}}}
		sample := func(labels map[string]string) *profile.Sample {
			return &profile.Sample{Stack: []*profile.Location{loc}, Count: 1, Labels: labels}
		}
		write(t, s,
			&profile.Profile{Start: t0, Samples: []*profile.Sample{
				sample(map[string]string{"comm": "a", "pod": "p1"}),
				sample(map[string]string{"comm": "b", "pod": ""}),
			}},
			&profile.Profile{Start: t0.Add(time.Hour), Samples: []*profile.Sample{
				sample(map[string]string{"comm": "c", "node": "n"}),
			}},
		)
		ctx := context.Background()
		tests := []struct {
			name       string
			from, to   time.Time
			names      []string
			commValues []string
		}{
			{"first", t0, t0.Add(time.Minute), []string{"comm", "pod"}, []string{"a", "b"}},
			{"second", t0.Add(time.Minute), t0.Add(2 * time.Hour), []string{"comm", "node"}, []string{"c"}},
			{"both", t0, t0.Add(2 * time.Hour), []string{"comm", "node", "pod"}, []string{"a", "b", "c"}},
			{"none", t0.Add(-time.Hour), t0, []string{}, []string{}},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				names, err := s.LabelNames(ctx, tt.from, tt.to)
				if err != nil {
					t.Fatal(err)
				}
				if !reflect.DeepEqual(names, tt.names) {
					t.Errorf("names %q, want %q", names, tt.names)
				}
				values, err := s.LabelValues(ctx, "comm", tt.from, tt.to)
				if err != nil {
					t.Fatal(err)
				}
				if !reflect.DeepEqual(values, tt.commValues) {
					t.Errorf("comm values %q, want %q", values, tt.commValues)
				}
			})
		}
	})
}

func TestQueryErrors(t *testing.T) {
	o := testOptions()
	o.MaxQueryRange = 24 * time.Hour
	o.MaxStacks = 100
	o.MaxSeriesPoints = 1000
	forEachBackend(t, o, func(t *testing.T, s Store) {
		wl := newWorkload(t0)
		write(t, s, wl.window(0), wl.window(1))
		ctx := context.Background()
		hour := Query{From: t0, To: t0.Add(time.Hour)}
		tests := []struct {
			name string
			run  func() error
			want error
		}{
			{"inverted", func() error { _, err := s.Profile(ctx, Query{From: t0, To: t0.Add(-1)}); return err }, ErrBadQuery},
			{"empty", func() error { _, err := s.Profile(ctx, Query{From: t0, To: t0}); return err }, ErrBadQuery},
			{"no start", func() error { _, err := s.Profile(ctx, Query{To: t0}); return err }, ErrBadQuery},
			{"too long", func() error { _, err := s.Profile(ctx, Query{From: t0, To: t0.Add(25 * time.Hour)}); return err }, ErrTooLarge},
			{"too many stacks", func() error { _, err := s.Profile(ctx, hour); return err }, ErrTooLarge},
			{"few enough stacks", func() error {
				_, err := s.Profile(ctx, Query{From: t0, To: t0.Add(time.Hour), Selector: mustParse(t, `{pid="1001"}`)})
				return err
			}, nil},
			{"zero step", func() error { _, err := s.Series(ctx, SeriesQuery{Query: hour, By: "comm"}); return err }, ErrBadQuery},
			{"negative step", func() error { _, err := s.Series(ctx, SeriesQuery{Query: hour, Step: -time.Second}); return err }, ErrBadQuery},
			{"too many steps", func() error {
				_, err := s.Series(ctx, SeriesQuery{Query: hour, By: "comm", Step: time.Second})
				return err
			}, ErrTooLarge},
			{"too many series", func() error {
				_, err := s.Series(ctx, SeriesQuery{Query: hour, By: "pid", Step: time.Minute})
				return err
			}, ErrTooLarge},
			{"few enough series", func() error {
				_, err := s.Series(ctx, SeriesQuery{Query: hour, By: "comm", Step: time.Minute})
				return err
			}, nil},
			{"label range", func() error { _, err := s.LabelNames(ctx, t0, t0); return err }, ErrBadQuery},
			{"label values range", func() error { _, err := s.LabelValues(ctx, "comm", t0, t0.Add(48*time.Hour)); return err }, ErrTooLarge},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				err := tt.run()
				if !errors.Is(err, tt.want) || (tt.want == nil) != (err == nil) {
					t.Fatalf("got %v, want %v", err, tt.want)
				}
				if err != nil && strings.Contains(err.Error(), "\n") {
					t.Errorf("message is not one line: %q", err)
				}
			})
		}
	})
}

func TestLocked(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, testOptions())
	if err != nil {
		t.Fatal(err)
	}
	_, err = Open(dir, testOptions())
	if !errors.Is(err, ErrLocked) {
		t.Fatalf("second open: got %v, want ErrLocked", err)
	}
	for _, want := range []string{dir, "pid " + strconv.Itoa(os.Getpid())} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second close: %v", err)
	}
	if err := s.Write(context.Background(), newWorkload(t0).window(0)); err == nil {
		t.Error("write after close succeeded")
	}
	s2, err := Open(dir, testOptions())
	if err != nil {
		t.Fatalf("open after close: %v", err)
	}
	s2.Close()
}

// storeEditedBy writes one window to a new store, closes it, runs queries
// on its database behind the store's back, and returns its directory.
func storeEditedBy(t *testing.T, queries ...string) string {
	t.Helper()
	dir := t.TempDir()
	s := openTest(t, dir, testOptions())
	write(t, s, newWorkload(t0).window(0))
	s.Close()
	db, err := sql.Open("sqlite", filepath.Join(dir, DBFile))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, q := range queries {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestSchemaVersion(t *testing.T) {
	dir := storeEditedBy(t, `UPDATE meta SET value = '99' WHERE key = 'schema_version'`)
	_, err := Open(dir, testOptions())
	if !errors.Is(err, ErrNewerSchema) || !strings.Contains(err.Error(), "99") {
		t.Fatalf("got %v, want ErrNewerSchema naming version 99", err)
	}
	// The failed open released the lock.
	if _, err := Open(dir, testOptions()); errors.Is(err, ErrLocked) {
		t.Fatal("failed open kept the lock")
	}

	other := t.TempDir()
	db, err := sql.Open("sqlite", filepath.Join(other, DBFile))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`CREATE TABLE t (x)`); err != nil {
		t.Fatal(err)
	}
	db.Close()
	if _, err := Open(other, testOptions()); err == nil || !strings.Contains(err.Error(), "not flint's") {
		t.Fatalf("opening a foreign database: got %v", err)
	}
}

// TestWriteOutOfOrder writes windows in shuffled time order, far apart, so
// the label sets' first/last spans must widen both ways.
func TestWriteOutOfOrder(t *testing.T) {
	s := openTest(t, t.TempDir(), testOptions())
	wl := newWorkload(t0)
	order := []int{500, 3, 900, 0, 2000, 1, 450}
	ps := map[int]*profile.Profile{}
	for _, i := range order {
		ps[i] = wl.window(i)
		write(t, s, ps[i])
	}
	for _, i := range order {
		q := Query{From: ps[i].Start, To: ps[i].Start.Add(wlWindow)}
		if diff := compare(canonical(query(t, s, q).Samples), canonical(ps[i].Samples)); diff != "" {
			t.Errorf("window %d: %s", i, diff)
		}
	}
}

// TestFailedWriteKeepsCaches checks that a write rolled back after storing
// new items does not leave their ids in the caches.
func TestFailedWriteKeepsCaches(t *testing.T) {
	s := openTest(t, t.TempDir(), testOptions())
	fresh := &profile.Location{Address: 0xdead, Frames: []symbol.Frame{{Function: "fresh", File: "fresh.go", Line: 1}}}
	labels := map[string]string{"comm": "new"}
	bad := &profile.Profile{Start: t0, Samples: []*profile.Sample{
		{Stack: []*profile.Location{fresh}, Count: 1, Labels: labels},
		{Stack: []*profile.Location{fresh}, Count: -1, Labels: labels},
	}}
	if err := s.Write(context.Background(), bad); err == nil {
		t.Fatal("write with a negative count succeeded")
	}
	good := &profile.Profile{Start: t0, Samples: bad.Samples[:1]}
	write(t, s, good)
	got := query(t, s, Query{From: t0, To: t0.Add(time.Second)})
	if diff := compare(canonical(got.Samples), canonical(good.Samples)); diff != "" {
		t.Error(diff)
	}
}

// TestCacheEviction writes more distinct items than the caches hold.
func TestCacheEviction(t *testing.T) {
	s := openTest(t, t.TempDir(), testOptions())
	s.w.stacks.max, s.w.locations.max, s.w.funcs.max, s.w.labelsets.max, s.w.mappings.max = 8, 8, 8, 8, 8
	wl := newWorkload(t0)
	var ps []*profile.Profile
	for i := range 5 {
		ps = append(ps, wl.window(i*400))
		write(t, s, ps[i])
	}
	for _, p := range ps {
		got := query(t, s, Query{From: p.Start, To: p.Start.Add(wlWindow)})
		if diff := compare(canonical(got.Samples), canonical(p.Samples)); diff != "" {
			t.Error(diff)
		}
	}
	var stacks int
	s.rdb.QueryRow(`SELECT count(*) FROM stacks`).Scan(&stacks)
	if want := len(wl.stacks); stacks != want {
		t.Errorf("%d stacks stored, want %d (duplicates after eviction?)", stacks, want)
	}
}

// TestEqualItemsOneRow writes a window whose equal locations and stacks are
// distinct objects, then again after a restart (its caches empty): each is
// stored once.
func TestEqualItemsOneRow(t *testing.T) {
	dir := t.TempDir()
	loc := func() *profile.Location {
		return &profile.Location{Address: 0x10, Frames: []symbol.Frame{{Function: "f", File: "f.go", Line: 3}}}
	}
	window := func(i int) *profile.Profile {
		labels := map[string]string{"comm": "c"}
		return &profile.Profile{Start: t0.Add(time.Duration(i) * wlWindow), Samples: []*profile.Sample{
			{Stack: []*profile.Location{loc(), loc()}, Count: 1, Labels: labels},
			{Stack: []*profile.Location{loc(), loc()}, Count: 2, Labels: labels},
		}}
	}
	s := openTest(t, dir, testOptions())
	write(t, s, window(0))
	s.Close()
	s = openTest(t, dir, testOptions())
	write(t, s, window(1))
	if n, m, f := count(t, s, "locations"), count(t, s, "stacks"), count(t, s, "functions"); n != 1 || m != 1 || f != 1 {
		t.Errorf("%d locations, %d stacks and %d functions stored, want 1 of each", n, m, f)
	}
	got := query(t, s, Query{From: t0, To: t0.Add(2 * wlWindow)})
	if diff := compare(canonical(got.Samples), canonical(append(window(0).Samples, window(1).Samples...))); diff != "" {
		t.Error(diff)
	}
}

// TestManyNewItems writes windows of more new label sets, stacks,
// locations and functions than one insert statement takes (maxRowsAnInsert), as a
// window of new processes has: each must read back as written, before
// and after a restart (the caches empty, the rows found in the store).
func TestManyNewItems(t *testing.T) {
	dir := t.TempDir()
	window := func(i, procs int) *profile.Profile {
		p := &profile.Profile{Start: t0.Add(time.Duration(i) * wlWindow)}
		for n := range procs {
			leaf := &profile.Location{Address: uint64(0x1000 + n), Frames: []symbol.Frame{{Function: fmt.Sprint("f", n), File: "f.c", Line: n}}}
			root := &profile.Location{Address: 0x10, Frames: []symbol.Frame{{Function: "main", File: "main.c", Line: 1}}}
			p.Samples = append(p.Samples, &profile.Sample{Stack: []*profile.Location{leaf, root}, Count: int64(n + 1),
				Labels: map[string]string{"comm": "c", "pid": strconv.Itoa(n)}})
		}
		return p
	}
	s := openTest(t, dir, testOptions())
	write(t, s, window(0, 2*maxRowsAnInsert+37))
	s.Close()
	s = openTest(t, dir, testOptions())
	write(t, s, window(1, 3*maxRowsAnInsert+5))
	if n, m, l, f := count(t, s, "locations"), count(t, s, "stacks"), count(t, s, "labelsets"), count(t, s, "functions"); n != 3*maxRowsAnInsert+6 || m != 3*maxRowsAnInsert+5 || l != m || f != n {
		t.Errorf("%d locations, %d stacks, %d label sets, %d functions stored; want %d, %d, %d, %[5]d", n, m, l, f, 3*maxRowsAnInsert+6, 3*maxRowsAnInsert+5, 3*maxRowsAnInsert+5)
	}
	got := query(t, s, Query{From: t0, To: t0.Add(2 * wlWindow)})
	want := slices.Concat(window(0, 2*maxRowsAnInsert+37).Samples, window(1, 3*maxRowsAnInsert+5).Samples)
	if diff := compare(canonical(got.Samples), canonical(want)); diff != "" {
		t.Error(diff)
	}
}

// TestAlikeLocationsOneRow writes locations whose addresses differ but
// whose frames and mapping do not: one row, before and after a restart
// (its caches empty), while another line or another mapping is a row of
// its own.
func TestAlikeLocationsOneRow(t *testing.T) {
	dir := t.TempDir()
	lib := &profile.Mapping{Start: 0x1000, Limit: 0x9000, File: "/lib/libx.so"}
	other := &profile.Mapping{Start: 0x1000, Limit: 0x9000, File: "/lib/liby.so"}
	at := func(m *profile.Mapping, addr uint64, line int) *profile.Location {
		return &profile.Location{Address: addr, Mapping: m, Frames: []symbol.Frame{{Function: "f", File: "f.c", Line: line}}}
	}
	window := func(i int, stack ...*profile.Location) *profile.Profile {
		return &profile.Profile{Start: t0.Add(time.Duration(i) * wlWindow), Samples: []*profile.Sample{
			{Stack: stack, Count: 1, Labels: map[string]string{"comm": "c"}},
		}}
	}
	s := openTest(t, dir, testOptions())
	write(t, s, window(0, at(lib, 0x1010, 3), at(lib, 0x1014, 3)))
	if n := count(t, s, "locations"); n != 1 {
		t.Errorf("%d locations stored for one line at two addresses, want 1", n)
	}
	s.Close()
	s = openTest(t, dir, testOptions())
	write(t, s, window(1, at(lib, 0x1018, 3)), window(2, at(lib, 0x101c, 4), at(other, 0x1010, 3)))
	if n, m := count(t, s, "locations"), count(t, s, "stacks"); n != 3 || m != 3 {
		t.Errorf("%d locations and %d stacks stored, want 3 and 3: one per line and mapping", n, m)
	}
	got := query(t, s, Query{From: t0, To: t0.Add(3 * wlWindow)})
	// Read back at the address stored first.
	first := at(lib, 0x1010, 3)
	want := slices.Concat(window(0, first, first).Samples, window(1, first).Samples,
		window(2, at(lib, 0x101c, 4), at(other, 0x1010, 3)).Samples)
	if diff := compare(canonical(got.Samples), canonical(want)); diff != "" {
		t.Error(diff)
	}
}

// TestAutoCheckpoint opens stores of several size limits: the writer's WAL
// checkpoints at a sixteenth of the limit, between SQLite's default 1000
// pages and 16,384.
func TestAutoCheckpoint(t *testing.T) {
	for _, tt := range []struct {
		maxSize int64
		pages   int
	}{
		{0, 16384}, // no limit
		{1 << 30, 16384},
		{100 << 20, 1600},
		{2 << 20, 1000},
	} {
		o := testOptions()
		o.MaxSize = tt.maxSize
		s := openTest(t, t.TempDir(), o)
		var pages int
		if err := s.w.conn.QueryRowContext(context.Background(), `PRAGMA wal_autocheckpoint`).Scan(&pages); err != nil {
			t.Fatal(err)
		}
		if pages != tt.pages {
			t.Errorf("MaxSize %d: the WAL checkpoints at %d pages, want %d", tt.maxSize, pages, tt.pages)
		}
	}
}

func count(t *testing.T, s *SQLite, table string) int {
	t.Helper()
	var n int
	if err := s.rdb.QueryRow(`SELECT count(*) FROM ` + table).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestRetentionByAge(t *testing.T) {
	o := testOptions()
	o.Retention = 2 * time.Hour
	s := openTest(t, t.TempDir(), o)
	wl := newWorkload(t0)
	const n = 6 * 360 // 6 hours
	for i := range n {
		write(t, s, wl.window(i))
	}
	stacksBefore, labelsBefore := count(t, s, "stacks"), count(t, s, "labelsets")
	now := t0.Add(n * wlWindow)
	s.now = func() time.Time { return now }
	if err := s.Compact(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got, want := count(t, s, "windows"), 2*360; got != want {
		t.Errorf("%d windows kept, want %d", got, want)
	}
	var oldest int64
	s.rdb.QueryRow(`SELECT min(start) FROM windows`).Scan(&oldest)
	if cutoff := now.Add(-o.Retention); time.Unix(0, oldest).Before(cutoff) {
		t.Errorf("oldest window %v is before the cutoff %v", time.Unix(0, oldest).UTC(), cutoff)
	}
	// The first collection is due at once; stacks and pids older than
	// 3 h (retention + slack) are gone.
	stacks, labels := count(t, s, "stacks"), count(t, s, "labelsets")
	if stacks >= stacksBefore || labels >= labelsBefore {
		t.Errorf("collection kept %d of %d stacks and %d of %d label sets", stacks, stacksBefore, labels, labelsBefore)
	}
	var orphans int
	s.rdb.QueryRow(`SELECT count(*) FROM mappings WHERE id NOT IN (SELECT mapping FROM locations)`).Scan(&orphans)
	if orphans != 0 {
		t.Errorf("%d unreferenced mappings", orphans)
	}
	// Everything kept reads back exactly, and writing stacks that were
	// collected works (the caches forgot them).
	for _, i := range []int{n - 2*360, n - 1} {
		p := wl.window(i)
		got := query(t, s, Query{From: p.Start, To: p.Start.Add(wlWindow)})
		if diff := compare(canonical(got.Samples), canonical(p.Samples)); diff != "" {
			t.Errorf("window %d: %s", i, diff)
		}
	}
	old := wl.window(0)
	old.Start = now
	write(t, s, old)
	got := query(t, s, Query{From: now, To: now.Add(wlWindow)})
	if diff := compare(canonical(got.Samples), canonical(old.Samples)); diff != "" {
		t.Errorf("rewritten window: %s", diff)
	}
	// Everything expired: the dictionaries empty out.
	s.now = func() time.Time { return now.Add(30 * 24 * time.Hour) }
	s.lastGC = time.Time{}
	if err := s.Compact(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, table := range []string{"windows", "samples", "stacks", "labelsets", "locations", "functions", "mappings"} {
		if n := count(t, s, table); n != 0 {
			t.Errorf("%d rows left in %s", n, table)
		}
	}
}

func TestRetentionBySize(t *testing.T) {
	o := testOptions()
	o.Retention = 0
	o.MaxSize = 2 << 20
	dir := t.TempDir()
	s := openTest(t, dir, o)
	wl := newWorkload(t0)
	ctx := context.Background()
	i := 0
	for ; ; i++ {
		write(t, s, wl.window(i))
		if i%50 == 0 {
			s.mu.Lock()
			pageSize, pages, _, err := s.pages(ctx)
			s.mu.Unlock()
			if err != nil {
				t.Fatal(err)
			}
			if pageSize*pages > 2*o.MaxSize {
				break
			}
		}
	}
	last := i
	if err := s.Compact(ctx); err != nil {
		t.Fatal(err)
	}
	size, err := s.diskSize()
	if err != nil {
		t.Fatal(err)
	}
	if size > o.MaxSize {
		t.Errorf("files are %d bytes after compaction, limit %d", size, o.MaxSize)
	}
	kept := count(t, s, "windows")
	if kept == 0 || kept > last {
		t.Fatalf("%d of %d windows kept", kept, last+1)
	}
	t.Logf("%d bytes, %d of %d windows kept", size, kept, last+1)
	// The newest windows are the ones kept.
	var oldest int64
	s.rdb.QueryRow(`SELECT min(start) FROM windows`).Scan(&oldest)
	if want := wl.window(last - kept + 1).Start.UnixNano(); oldest != want {
		t.Errorf("oldest kept window starts at %v, want %v", time.Unix(0, oldest).UTC(), time.Unix(0, want).UTC())
	}
	p := wl.window(last)
	got := query(t, s, Query{From: p.Start, To: p.Start.Add(wlWindow)})
	if diff := compare(canonical(got.Samples), canonical(p.Samples)); diff != "" {
		t.Error(diff)
	}
	// Writing on keeps the files bounded.
	for j := last + 1; j < last+400; j++ {
		write(t, s, wl.window(j))
		if j%100 == 0 {
			if err := s.Compact(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := s.Compact(ctx); err != nil {
		t.Fatal(err)
	}
	if size, _ := s.diskSize(); size > o.MaxSize {
		t.Errorf("files are %d bytes after more windows, limit %d", size, o.MaxSize)
	}
}

func TestBackgroundCompaction(t *testing.T) {
	o := testOptions()
	o.Retention = time.Hour
	o.CompactInterval = 10 * time.Millisecond
	errs := make(chan error, 10)
	o.OnCompactError = func(err error) { errs <- err }
	s := openTest(t, t.TempDir(), o)
	wl := newWorkload(time.Now().Add(-2 * time.Hour))
	write(t, s, wl.window(0), wl.window(719))
	deadline := time.Now().Add(10 * time.Second)
	for count(t, s, "windows") != 1 {
		if time.Now().After(deadline) {
			t.Fatal("background compaction did not drop the expired window")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-errs:
		t.Errorf("background compaction failed: %v", err)
	default:
	}
}

// TestConcurrent runs queries while windows are written and compacted.
func TestConcurrent(t *testing.T) {
	o := testOptions()
	o.Retention = 10 * time.Minute
	s := openTest(t, t.TempDir(), o)
	wl := newWorkload(t0)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errs := make(chan error, 4)
	for range 3 {
		go func() {
			for ctx.Err() == nil {
				p, err := s.Profile(ctx, Query{From: t0, To: t0.Add(time.Hour), KeepLabels: []string{"comm"}})
				if err != nil && ctx.Err() == nil {
					errs <- err
					return
				}
				// Every window is whole: totals are multiples of a window.
				if err == nil && p.Total()%wlSamples != 0 {
					errs <- fmt.Errorf("profile total %d is not whole windows", p.Total())
					return
				}
			}
			errs <- nil
		}()
	}
	for i := range 200 {
		write(t, s, wl.window(i))
		if i%20 == 0 {
			now := wl.window(i).Start
			s.now = func() time.Time { return now }
			s.mu.Lock()
			s.lastGC = time.Time{}
			s.mu.Unlock()
			if err := s.Compact(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	cancel()
	for range 3 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

// logLines collects what the store says through Options.Logf.
type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *logLines) logf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, fmt.Sprintf(format, args...))
}

func (l *logLines) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.lines)
}

func modeOf(t *testing.T, path string) fs.FileMode {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Mode().Perm()
}

// TestPrivate checks that a new data directory is 0700 and its files 0600,
// and that an existing one open to others is made so, with a log line for
// each path changed.
func TestPrivate(t *testing.T) {
	files := []string{DBFile, DBFile + "-wal", DBFile + "-shm", "flint.lock"}
	t.Run("new", func(t *testing.T) {
		syscall.Umask(0o022)
		dir := filepath.Join(t.TempDir(), "a", "data")
		var log logLines
		o := testOptions()
		o.Logf = log.logf
		s := openTest(t, dir, o)
		write(t, s, handmade(t0))
		if m := modeOf(t, dir); m != 0o700 {
			t.Errorf("data directory mode %#o, want 0700", m)
		}
		for _, f := range files {
			if m := modeOf(t, filepath.Join(dir, f)); m != 0o600 {
				t.Errorf("%s mode %#o, want 0600", f, m)
			}
		}
		if got := log.all(); len(got) > 0 {
			t.Errorf("a new store logged %q", got)
		}
	})
	t.Run("existing", func(t *testing.T) {
		dir := t.TempDir()
		s := openTest(t, dir, testOptions())
		write(t, s, handmade(t0))
		s.Close()
		os.Chmod(dir, 0o755)
		os.Chmod(filepath.Join(dir, DBFile), 0o644)
		os.Chmod(filepath.Join(dir, "flint.lock"), 0o666)
		var log logLines
		o := testOptions()
		o.Logf = log.logf
		s = openTest(t, dir, o)
		write(t, s, handmade(t0.Add(time.Minute)))
		if m := modeOf(t, dir); m != 0o700 {
			t.Errorf("data directory mode %#o, want 0700", m)
		}
		for _, f := range files {
			if m := modeOf(t, filepath.Join(dir, f)); m != 0o600 {
				t.Errorf("%s mode %#o, want 0600", f, m)
			}
		}
		got := log.all()
		want := []string{dir + " was mode 0755", DBFile + " was mode 0644", "flint.lock was mode 0666"}
		if len(got) != len(want) {
			t.Fatalf("log %q, want one line for each of %q", got, want)
		}
		for i := range want {
			if !strings.Contains(got[i], want[i]) || !strings.Contains(got[i], "now 0") {
				t.Errorf("log line %q, want %q", got[i], want[i])
			}
		}
	})
}

// corruptMiddle overwrites four pages in the middle of the file at path.
func corruptMiddle(t *testing.T, path string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	if fi.Size() < 64<<10 {
		t.Fatalf("%s has %d bytes: too small to damage in the middle", path, fi.Size())
	}
	junk := bytes.Repeat([]byte{0xa5, 0x5a, 0x00, 0xff}, 4096)
	if _, err := f.WriteAt(junk, fi.Size()/2/4096*4096); err != nil {
		t.Fatal(err)
	}
}

// TestOpenCorrupt damages pages in the middle of a store's file: Open keeps
// the file as it was under a new name, says so in one line that names it
// and how to salvage it, and writes to a new store.
func TestOpenCorrupt(t *testing.T) {
	dir := t.TempDir()
	s := openTest(t, dir, testOptions())
	wl := newWorkload(t0)
	for i := range 200 {
		write(t, s, wl.window(i))
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, DBFile)
	corruptMiddle(t, path)
	damaged, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}

	var log logLines
	o := testOptions()
	o.Logf = log.logf
	o.MaxQueryRange = 0
	s = openTest(t, dir, o)
	got := log.all()
	if len(got) != 1 {
		t.Fatalf("log %q, want one line", got)
	}
	aside, _ := filepath.Glob(path + ".corrupt-*")
	if len(aside) != 1 {
		t.Fatalf("files set aside: %q, want one", aside)
	}
	for _, want := range []string{path + " is corrupt", "kept as " + aside[0], SalvageCommand(aside[0], aside[0]+".recovered")} {
		if !strings.Contains(got[0], want) {
			t.Errorf("log line %q does not say %q", got[0], want)
		}
	}
	if b, err := os.ReadFile(aside[0]); err != nil || !bytes.Equal(b, damaged) {
		first := -1
		for i := range min(len(b), len(damaged)) {
			if b[i] != damaged[i] {
				first = i
				break
			}
		}
		t.Errorf("the damaged file was not kept as it was: %v; %d bytes, were %d; first difference at %d", err, len(b), len(damaged), first)
	}
	if m := modeOf(t, aside[0]); m != 0o600 {
		t.Errorf("kept file mode %#o, want 0600", m)
	}
	// The salvage the line advises gives a whole database that flint
	// opens, with the rows of the undamaged pages. (Queries over windows
	// whose stacks lost rows fail: the store does not guess frames.)
	if _, err := exec.LookPath("sqlite3"); err == nil {
		salvaged := t.TempDir()
		if out, err := exec.Command("sh", "-c", SalvageCommand(aside[0], filepath.Join(salvaged, DBFile))).CombinedOutput(); err != nil {
			t.Fatalf("salvage: %v\n%s", err, out)
		}
		r := openTest(t, salvaged, o)
		n := count(t, r, "windows")
		t.Logf("salvaged %d of 200 windows", n)
		var check string
		if err := r.rdb.QueryRow("PRAGMA integrity_check").Scan(&check); err != nil || check != "ok" || n < 100 {
			t.Errorf("salvaged %d of 200 windows, integrity_check %q %v", n, check, err)
		}
	}
	// The new store is empty and works.
	if p := query(t, s, Query{From: t0, To: t0.Add(time.Hour)}); len(p.Samples) != 0 {
		t.Errorf("new store has %d samples", len(p.Samples))
	}
	p := handmade(t0.Add(time.Hour))
	write(t, s, p)
	back := query(t, s, Query{From: p.Start, To: p.Start.Add(p.Duration)})
	if diff := compare(canonical(back.Samples), canonical(p.Samples)); diff != "" {
		t.Errorf("new store: %s", diff)
	}
}

// TestIsCorrupt tells a file that is not a database, and a damaged one,
// from other failures.
func TestIsCorrupt(t *testing.T) {
	notDB := filepath.Join(t.TempDir(), "x.db")
	os.WriteFile(notDB, bytes.Repeat([]byte("not a database "), 1000), 0o600)
	db, err := sql.Open("sqlite", notDB)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	_, err = db.Exec("SELECT * FROM sqlite_master")
	if err == nil || !isCorrupt(err) {
		t.Errorf("not a database: %v, isCorrupt false", err)
	}
	if !isCorrupt(fmt.Errorf("check database: %w", errDamaged)) {
		t.Error("quick_check's finding is not corruption")
	}
	for _, err := range []error{nil, errClosed, ErrLocked, context.Canceled, errors.New("disk I/O error")} {
		if isCorrupt(err) {
			t.Errorf("isCorrupt(%v)", err)
		}
	}
}

// TestWriteCorrupt damages the database under an open store: the next
// Write that reads a damaged page sets the file aside, as Open does, and
// stores its window in a new store.
func TestWriteCorrupt(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	var log logLines
	o := testOptions()
	o.Logf = log.logf
	o.MaxQueryRange = 0
	s := openTest(t, dir, o)
	wl := newWorkload(t0)
	for i := range 200 {
		write(t, s, wl.window(i))
	}
	ctx := context.Background()
	// Everything in the main file, and nothing of it in SQLite's cache.
	if _, err := s.w.conn.ExecContext(ctx, "PRAGMA wal_checkpoint(TRUNCATE)"); err != nil {
		t.Fatal(err)
	}
	// Damage the page every write reads: the root of the windows table.
	var root, pageSize int64
	if err := s.w.conn.QueryRowContext(ctx, "SELECT rootpage FROM sqlite_master WHERE name = 'windows'").Scan(&root); err != nil {
		t.Fatal(err)
	}
	if err := s.w.conn.QueryRowContext(ctx, "PRAGMA page_size").Scan(&pageSize); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(s.path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteAt(bytes.Repeat([]byte{0xa5, 0x5a, 0x00, 0xff}, int(pageSize)/4), (root-1)*pageSize)
	f.Close()
	if _, err := s.w.conn.ExecContext(ctx, "PRAGMA shrink_memory"); err != nil {
		t.Fatal(err)
	}
	i := 200
	for ; i < 400 && len(log.all()) == 0; i++ {
		if err = s.Write(ctx, wl.window(i)); err != nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("write %d on a damaged store: %v", i, err)
	}
	got := log.all()
	aside, _ := filepath.Glob(s.path + ".corrupt-*")
	if len(got) != 1 || len(aside) != 1 || !strings.Contains(got[0], "kept as "+aside[0]) {
		t.Fatalf("after %d writes: log %q, set aside %q; want one line naming the one file", i-200, got, aside)
	}
	// The window whose write met the damage is in the new store.
	p := wl.window(i - 1)
	back := query(t, s, Query{From: p.Start, To: p.Start.Add(wlWindow)})
	if diff := compare(canonical(back.Samples), canonical(p.Samples)); diff != "" {
		t.Errorf("window %d, written when the damage was found: %s", i-1, diff)
	}
	t.Logf("found at write %d: %s", i-1, got[0])
}
