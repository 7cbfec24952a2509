package store

import (
	"context"
	"math/rand/v2"
	"testing"
)

// TestHashFilterHoldsEveryHash fills a filter to its capacity: every hash
// added is held, and of hashes never added at most 1% seem held.
func TestHashFilterHoldsEveryHash(t *testing.T) {
	f := &hashFilter{capacity: 20_000}
	f.words = make([]uint64, (f.capacity*filterBitsPerHash+63)/64)
	rng := rand.New(rand.NewPCG(1, 2))
	added := map[int64]bool{}
	for range f.capacity {
		h := rng.Int64()
		added[h] = true
		f.add(h)
	}
	for h := range added {
		if !f.mayHold(h) {
			t.Fatalf("hash %d added, not held", h)
		}
	}
	var seem int
	const tries = 100_000
	for range tries {
		if h := rng.Int64(); !added[h] && f.mayHold(h) {
			seem++
		}
	}
	if rate := float64(seem) / tries; rate > 0.01 {
		t.Errorf("%.2f%% of hashes never added seem held, want at most 1%%", 100*rate)
	}
}

// TestHashFilterBuiltAgain writes more new items than the filters were
// sized for, so that the writer builds them again from the tables, then
// writes them again with its caches empty: each item is stored once.
func TestHashFilterBuiltAgain(t *testing.T) {
	s := openTest(t, t.TempDir(), testOptions())
	for _, f := range s.w.filters {
		f.capacity = 10
	}
	wl := newWorkload(t0)
	write(t, s, wl.window(0), wl.window(1))
	for name, f := range s.w.filters {
		if f.capacity == 10 {
			t.Errorf("filter of %s not built again after %d hashes", name, f.held)
		}
		rows := count(t, s, f.table)
		var held int
		hashes, err := s.w.conn.QueryContext(context.Background(), "SELECT hash FROM "+f.table)
		if err != nil {
			t.Fatal(err)
		}
		for hashes.Next() {
			var h int64
			hashes.Scan(&h)
			if f.mayHold(h) {
				held++
			}
		}
		hashes.Close()
		if held != rows {
			t.Errorf("filter of %s holds %d of the table's %d hashes", name, held, rows)
		}
	}
	before := map[string]int{}
	for _, table := range []string{"labelsets", "stacks", "locations", "functions"} {
		before[table] = count(t, s, table)
	}
	s.w.resetCaches()
	write(t, s, wl.window(0))
	for table, n := range before {
		if got := count(t, s, table); got != n {
			t.Errorf("%s: %d rows after the same window again, want %d", table, got, n)
		}
	}
}

// BenchmarkHashFilterBuild builds the filter of a table of a million rows,
// as opening a store that holds them does.
func BenchmarkHashFilterBuild(b *testing.B) {
	s := openTest(b, b.TempDir(), testOptions())
	ctx := context.Background()
	const rows = 1_000_000
	_, err := s.w.conn.ExecContext(ctx, `WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?)
		INSERT INTO stacks (hash, last, locations) SELECT random(), 0, x'01' FROM n`, rows)
	if err != nil {
		b.Fatal(err)
	}
	var f hashFilter
	for b.Loop() {
		f = hashFilter{table: "stacks"}
		if err := f.build(ctx, s.w.conn); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(f.words)*8), "bytes")
}
