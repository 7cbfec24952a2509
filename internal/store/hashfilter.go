package store

import (
	"context"
	"database/sql"
	"fmt"
	"math/bits"
)

// hashFilter is a Bloom filter of the hash column of one of the tables
// the writer looks rows up in by hash. An item whose hash it does not hold
// has no row, so the writer inserts it without a lookup: a window of new
// processes brings label sets, stacks, locations and functions that are
// mostly new, and each kind's lookup query, finding nothing, was a
// quarter of the CPU such a window cost the store (docs/BENCHMARKS.md).
// Rows deleted since it was built, or never written (a window that
// rolled back), leave their bits behind: a lookup that finds nothing,
// until the filter is built again, which it is once it holds more hashes
// than it was sized for.
type hashFilter struct {
	table    string // the SQL table whose hash column it holds
	words    []uint64
	held     int // hashes it holds: its table's when built, and those added since
	capacity int // hashes it is sized for; past it, built again
}

const (
	filterBitsPerHash = 12 // with filterProbes, 0.7% false positives at capacity
	filterProbes      = 4
	filterFewest      = 4096 // hashes any filter is sized for
)

// probes returns the bits of h.
func (f *hashFilter) probes(h int64) (at [filterProbes]uint64) {
	// The column's hashes are FNV: mixed (splitmix64's finalizer) so that
	// every bit of them moves every probe.
	x := uint64(h)
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	step, n := x>>32|x<<32|1, uint64(len(f.words))*64
	for i := range at {
		at[i], _ = bits.Mul64(x, n)
		x += step
	}
	return at
}

// add puts h in f. Only a hash f did not hold counts towards its
// capacity: an item the caches miss again, its row found, adds nothing.
func (f *hashFilter) add(h int64) {
	fresh := false
	for _, b := range f.probes(h) {
		if bit := uint64(1) << (b % 64); f.words[b/64]&bit == 0 {
			f.words[b/64] |= bit
			fresh = true
		}
	}
	if fresh {
		f.held++
	}
}

// mayHold reports whether a row may have hash h; false means none has.
func (f *hashFilter) mayHold(h int64) bool {
	for _, b := range f.probes(h) {
		if f.words[b/64]&(1<<(b%64)) == 0 {
			return false
		}
	}
	return true
}

// full reports whether f holds more hashes than it was sized for.
func (f *hashFilter) full() bool { return f.held > f.capacity }

// build fills f with the hashes of its table's rows, sized for twice as
// many.
func (f *hashFilter) build(ctx context.Context, conn *sql.Conn) error {
	var rows int
	if err := conn.QueryRowContext(ctx, "SELECT count(*) FROM "+f.table).Scan(&rows); err != nil {
		return fmt.Errorf("count %s: %w", f.table, err)
	}
	f.capacity = max(2*rows, filterFewest)
	f.words = make([]uint64, (f.capacity*filterBitsPerHash+63)/64)
	f.held = 0
	hashes, err := conn.QueryContext(ctx, "SELECT hash FROM "+f.table)
	if err != nil {
		return fmt.Errorf("read %s: %w", f.table, err)
	}
	defer hashes.Close()
	for hashes.Next() {
		var h int64
		if err := hashes.Scan(&h); err != nil {
			return fmt.Errorf("read %s: %w", f.table, err)
		}
		f.add(h)
	}
	return hashes.Err()
}
