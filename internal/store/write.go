package store

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/maphash"
	"maps"
	"math/bits"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"github.com/flint-dev/flint/internal/profile"
	"github.com/flint-dev/flint/internal/symbol"
)

// lastSlack is how stale the first/last columns of stacks and label sets may
// be. A Write updates last only when the window starts more than lastSlack
// after it, so a stack used in every window costs one UPDATE an hour, not
// one per window. Readers widen their time ranges by it.
const lastSlack = int64(time.Hour)

// Cache bounds, in entries. A location costs ~100 bytes of key and map
// overhead, so the caches stay within a few tens of MB; a full cache loses
// a random half, and the next lookups of those items go to the database.
const (
	maxCachedLocations = 1 << 17
	maxCachedItems     = 1 << 16 // each of functions, mappings, stacks
	maxCachedLabelSets = 1 << 14 // ~1 KB each with the copy of the labels
)

// entry is what a write cache knows of a stored row. first and last are
// the rows' columns for stacks (last only) and label sets.
type entry struct {
	id, first, last int64
}

// labelEntry is a cached label set: its row's id, first and last, and the
// labels to compare with on a hit.
type labelEntry struct {
	entry
	labels map[string]string
}

// locEntry is a cached location: its row and the frames it was stored
// with, compared on each hit (cheaply: the symbolizer hands out the same
// strings each time, and equal string pointers compare in O(1)).
type locEntry struct {
	id     int64
	frames []symbol.Frame
}

// locKey finds a location by mapping row and address; the frames are
// checked against the entry.
type locKey struct {
	mapping int64
	address uint64
}

// framesKey finds a location by what names it: its mapping row and its
// frames as stored (function ids and lines). A location is one row per
// framesKey: addresses that symbolize alike (the same function, line and
// inlining) share the row of the first one stored, so a short-lived
// process whose samples land on new instructions of known lines adds no
// locations, and fewer stacks.
type framesKey struct {
	mapping int64
	frames  string
}

// cache maps an item's content to its row. It is bounded; see maxCachedItems.
type cache[K comparable, V any] struct {
	m   map[K]V
	max int
}

func newCache[K comparable, V any](max int) cache[K, V] {
	return cache[K, V]{m: map[K]V{}, max: max}
}

func (c *cache[K, V]) put(k K, v V) {
	if len(c.m) >= c.max {
		// Map iteration order is random: this drops a random half.
		n := len(c.m) / 2
		for k := range c.m {
			if n == 0 {
				break
			}
			delete(c.m, k)
			n--
		}
	}
	c.m[k] = v
}

type funcKey struct{ name, file string }

// writer turns windows into rows on the one write connection. The caches
// let a window that repeats earlier stacks and label sets skip every lookup
// and insert but its samples rows. Guarded by SQLite.mu.
type writer struct {
	conn *sql.Conn
	st   map[string]*sql.Stmt

	funcs     cache[funcKey, entry]
	mappings  cache[profile.Mapping, entry]
	locations cache[locKey, locEntry]   // by address: no function lookups
	byFrames  cache[framesKey, int64]   // by content: the row's identity
	stacks    cache[string, entry]      // key: stack blob
	labelsets cache[uint64, labelEntry] // key: labelsHash

	// The hashes stored, by the name of the lookup (batch) statement.
	filters map[string]*hashFilter

	// undo reverts this transaction's cache changes if it rolls back, so
	// the caches never name rows that do not exist.
	undo []func()

	// Per-window memos and scratch space, reused.
	locMemo   map[*profile.Location]int64
	mapMemo   map[*profile.Mapping]int64
	labelMemo map[unsafe.Pointer]int64
	triples   []triple
	kept      []*profile.Sample // the samples of triples
	pending   []newLoc          // locations the caches missed, until their functions are known (l and key set)
	newFuncs  []newFunc         // functions the cache missed
	funcIDs   map[funcKey]int64 // the window's functions: cached, found or stored
	newLocs   []newLoc          // locations the caches missed
	newStacks []missed          // stacks the caches missed
	newStack  map[string]int    // their index in newStacks, by key
	newLabels []newLabels       // label sets the cache missed
	newLabel  map[string]int    // their index in newLabels, by key
	found     map[int64][]int   // items missed, by hash
	locIDs    []int64
	pairs     []stackCount
	names     []string
	key, buf  []byte
	args      []any             // an insert's parameters
	ends      []int             // where each samples row's blob ends in buf
	fresh     []int             // the new items of a window the store lacks, by index
	firstLoc  map[framesKey]int // the first of a window's new locations alike
}

type triple struct{ labels, stack, count int64 }

// newFunc is a function that the cache misses, looked up with the window's
// others; id is 0 until it is found or stored.
type newFunc struct {
	f         symbol.Frame // its first frame in the window: the start line stored
	hash      int64
	id        int64
	startLine int64 // as stored, when found
}

// newLoc is a location that the caches miss, looked up with the window's
// others; id is 0 until it is found or stored.
type newLoc struct {
	l    *profile.Location
	key  locKey
	fk   framesKey // fk.frames: function ids and lines, as stored
	hash int64
	id   int64
}

// missed is an item the caches miss, looked up with the window's others
// (findMissed): its content as stored, the stored hash, and its row, id 0
// until it is found or stored.
type missed struct {
	key  string
	hash int64
	e    entry
}

// newLabels is a label set the cache misses; cached is its key there
// (labelsHash).
type newLabels struct {
	missed
	cached uint64
	labels map[string]string
}

// statements the writer prepares once on its connection.
var writerStatements = map[string]string{
	"window":       `INSERT INTO windows (start, duration, period, samples, type) VALUES (?, ?, ?, ?, ?)`,
	"func.batch":   `SELECT id, hash, start_line, name, file FROM functions WHERE hash IN (SELECT value FROM json_each(?)) ORDER BY id`,
	"func.start":   `UPDATE functions SET start_line = ? WHERE id = ?`,
	"mapping.find": `SELECT id FROM mappings WHERE hash = ? AND start_addr = ? AND limit_addr = ? AND file_offset = ? AND file = ? AND build_id = ? AND kernel = ?`,
	"mapping.add":  `INSERT INTO mappings (hash, start_addr, limit_addr, file_offset, file, build_id, kernel) VALUES (?, ?, ?, ?, ?, ?, ?)`,
	"loc.batch":    `SELECT id, hash, mapping, frames FROM locations WHERE hash IN (SELECT value FROM json_each(?)) ORDER BY id`,
	"stack.batch":  `SELECT id, hash, 0, last, locations FROM stacks WHERE hash IN (SELECT value FROM json_each(?))`,
	"stack.last":   `UPDATE stacks SET last = ? WHERE id = ?`,
	"labels.batch": `SELECT id, hash, first, last, labels FROM labelsets WHERE hash IN (SELECT value FROM json_each(?))`,
	"labels.span":  `UPDATE labelsets SET first = ?, last = ? WHERE id = ?`,
}

// rowInserts are the tables the writer inserts rows into many at a time:
// the statement's head, and one row's values. A window of new processes
// adds hundreds of rows, and database/sql and the driver spend as much on
// each statement as SQLite on a row: a statement a row cost a new process
// 113 us to write, 97 us in statements of up to 64 (BenchmarkWriteNewProcs;
// docs/BENCHMARKS.md).
var rowInserts = map[string]struct{ head, row string }{
	"sample": {`INSERT INTO samples (start, window, labels, total, stacks) VALUES `, `(?, ?, ?, ?, ?)`},
	"func":   {`INSERT INTO functions (hash, name, file, start_line) VALUES `, `(?, ?, ?, ?)`},
	"loc":    {`INSERT INTO locations (hash, mapping, address, frames) VALUES `, `(?, ?, ?, coalesce(?, x''))`},
	"stack":  {`INSERT INTO stacks (hash, last, locations) VALUES `, `(?, ?, coalesce(?, x''))`},
	"labels": {`INSERT INTO labelsets (hash, first, last, labels) VALUES `, `(?, ?, ?, coalesce(?, x''))`},
}

// maxRowsAnInsert bounds the rows of one statement, within SQLite's
// 32,766 parameters.
const maxRowsAnInsert = 64

func newWriter(ctx context.Context, db *sql.DB) (*writer, error) {
	conn, err := db.Conn(ctx)
	if err != nil {
		return nil, err
	}
	w := &writer{conn: conn, st: map[string]*sql.Stmt{}}
	for name, q := range writerStatements {
		st, err := conn.PrepareContext(ctx, q)
		if err != nil {
			w.close()
			return nil, fmt.Errorf("prepare %s: %w", name, err)
		}
		w.st[name] = st
	}
	w.resetCaches()
	w.filters = map[string]*hashFilter{}
	for name, table := range map[string]string{"labels": "labelsets", "stack": "stacks", "loc": "locations", "func": "functions"} {
		f := &hashFilter{table: table}
		if err := f.build(ctx, conn); err != nil {
			w.close()
			return nil, err
		}
		w.filters[name] = f
	}
	w.newStack = map[string]int{}
	w.newLabel = map[string]int{}
	w.firstLoc = map[framesKey]int{}
	w.funcIDs = map[funcKey]int64{}
	w.found = map[int64][]int{}
	w.locMemo = map[*profile.Location]int64{}
	w.mapMemo = map[*profile.Mapping]int64{}
	w.labelMemo = map[unsafe.Pointer]int64{}
	return w, nil
}

func (w *writer) close() error {
	for _, st := range w.st {
		st.Close()
	}
	return w.conn.Close()
}

// resetCaches forgets every cached row, after garbage collection deleted
// some.
func (w *writer) resetCaches() {
	w.funcs = newCache[funcKey, entry](maxCachedItems)
	w.mappings = newCache[profile.Mapping, entry](maxCachedItems)
	w.locations = newCache[locKey, locEntry](maxCachedLocations)
	w.byFrames = newCache[framesKey, int64](maxCachedLocations)
	w.stacks = newCache[string, entry](maxCachedItems)
	w.labelsets = newCache[uint64, labelEntry](maxCachedLabelSets)
}

// tx runs f in an immediate transaction on the write connection. When f or
// the commit fails, it rolls back and undoes f's cache changes.
func (w *writer) tx(ctx context.Context, f func() error) (err error) {
	w.undo = w.undo[:0]
	if _, err := w.conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		// A transaction left open by a failed ROLLBACK would fail every
		// later write; end it and try once more.
		w.conn.ExecContext(context.Background(), "ROLLBACK")
		if _, err := w.conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
			return fmt.Errorf("begin: %w", err)
		}
	}
	defer func() {
		if err == nil {
			return
		}
		// SQLite may have rolled back already (after SQLITE_FULL, say);
		// ROLLBACK then fails harmlessly with "no transaction is active".
		w.conn.ExecContext(context.Background(), "ROLLBACK")
		for i := len(w.undo) - 1; i >= 0; i-- {
			w.undo[i]()
		}
	}()
	if err := f(); err != nil {
		return err
	}
	if _, err := w.conn.ExecContext(ctx, "COMMIT"); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

// remember puts an entry in a cache and records how to take it back.
func remember[K comparable, V any](w *writer, c *cache[K, V], k K, e V) {
	prev, had := c.m[k]
	c.put(k, e)
	w.undo = append(w.undo, func() {
		if had {
			c.m[k] = prev
		} else {
			delete(c.m, k)
		}
	})
}

// insertRows inserts n rows into table (a rowInserts name) with as few
// statements as it can: chunks of a power of two rows, up to
// maxRowsAnInsert, each statement prepared once. args appends row i's
// values; id, if not nil, is given each row's id.
func (w *writer) insertRows(ctx context.Context, table string, n int, args func(i int, a []any) []any, id func(i int, id int64)) error {
	for done := 0; done < n; {
		k := min(maxRowsAnInsert, 1<<(bits.Len(uint(n-done))-1))
		st, err := w.insertStatement(ctx, table, k)
		if err != nil {
			return err
		}
		w.args = w.args[:0]
		for i := done; i < done+k; i++ {
			w.args = args(i, w.args)
		}
		res, err := st.ExecContext(ctx, w.args...)
		clear(w.args) // drop the blobs
		if err != nil {
			return err
		}
		if id != nil {
			// One statement inserts its rows in order, and the writer is
			// the only one: their ids follow each other up to the last.
			last, err := res.LastInsertId()
			if err != nil {
				return err
			}
			for j := range k {
				id(done+j, last-int64(k-1-j))
			}
		}
		done += k
	}
	return nil
}

// insertStatement returns the statement that inserts k rows into table,
// preparing it the first time.
func (w *writer) insertStatement(ctx context.Context, table string, k int) (*sql.Stmt, error) {
	name := table + ".add/" + strconv.Itoa(k)
	if st := w.st[name]; st != nil {
		return st, nil
	}
	ins := rowInserts[table]
	q := ins.head + strings.Repeat(ins.row+", ", k-1) + ins.row
	st, err := w.conn.PrepareContext(ctx, q)
	if err != nil {
		return nil, fmt.Errorf("prepare %s: %w", name, err)
	}
	w.st[name] = st
	return st, nil
}

func (w *writer) write(ctx context.Context, p *profile.Profile) error {
	defer func() {
		clear(w.locMemo)
		clear(w.mapMemo)
		clear(w.labelMemo)
		clear(w.newStack)
		clear(w.newLabel)
		clear(w.newLabels) // drop their maps
		clear(w.firstLoc)
		clear(w.funcIDs)
		clear(w.pending)
		clear(w.newFuncs) // drop their strings
		clear(w.found)
		clear(w.newLocs) // drop their pointers
		clear(w.kept)
	}()
	for _, f := range w.filters {
		if f.full() {
			if err := f.build(ctx, w.conn); err != nil {
				return err
			}
		}
	}
	return w.tx(ctx, func() error { return w.insertWindow(ctx, p) })
}

// insertWindow runs its statements without ctx's end: a statement run with
// a context that can end starts a goroutine to watch it (in the driver,
// and in database/sql for queries), one or two for each row of a new
// stack: 40% of the CPU a new process's stacks cost to write
// (BenchmarkWriteNewProcs, docs/BENCHMARKS.md). It checks ctx between
// samples instead.
//
// The locations and stacks the caches miss are most often new (the
// stacks of short-lived processes): each kind is looked up in one query
// for the whole window, and only those it does not find are inserted.
func (w *writer) insertWindow(ctx context.Context, p *profile.Profile) error {
	end := ctx
	ctx = context.WithoutCancel(ctx)
	start := p.Start.UnixNano()
	w.triples, w.kept, w.newLocs, w.newStacks, w.newLabels = w.triples[:0], w.kept[:0], w.newLocs[:0], w.newStacks[:0], w.newLabels[:0]
	w.pending, w.newFuncs = w.pending[:0], w.newFuncs[:0]
	var total int64
	for i, s := range p.Samples {
		if err := end.Err(); err != nil {
			return err
		}
		if s == nil || s.Count == 0 {
			continue
		}
		if s.Count < 0 {
			return fmt.Errorf("sample %d has a negative count %d", i, s.Count)
		}
		lid, err := w.labelset(ctx, s.Labels, start)
		if err != nil {
			return err
		}
		// A stack whose locations are all stored is looked up now; the
		// others once theirs are (0 until then).
		known := true
		w.locIDs = w.locIDs[:0]
		for _, l := range s.Stack {
			id, err := w.location(ctx, l)
			if err != nil {
				return err
			}
			known = known && id != 0
			w.locIDs = append(w.locIDs, id)
		}
		var sid int64
		if known {
			if sid, err = w.stackOf(ctx, w.locIDs, start); err != nil {
				return err
			}
		}
		w.triples = append(w.triples, triple{labels: lid, stack: sid, count: s.Count})
		w.kept = append(w.kept, s)
		total += s.Count
	}
	if err := w.addLabelSets(ctx, start); err != nil {
		return err
	}
	if err := w.addFunctions(ctx); err != nil {
		return err
	}
	for _, nl := range w.pending {
		w.locationByFrames(nl)
	}
	if err := w.addLocations(ctx); err != nil {
		return err
	}
	for i, s := range w.kept {
		if w.triples[i].stack != 0 {
			continue
		}
		w.locIDs = w.locIDs[:0]
		for _, l := range s.Stack {
			w.locIDs = append(w.locIDs, w.locMemo[l])
		}
		sid, err := w.stackOf(ctx, w.locIDs, start)
		if err != nil {
			return err
		}
		w.triples[i].stack = sid
	}
	if err := w.addStacks(ctx, start); err != nil {
		return err
	}
	for i := range w.triples {
		t := &w.triples[i]
		if t.stack < 0 {
			t.stack = w.newStacks[-t.stack-1].e.id
		}
		if t.labels < 0 {
			t.labels = w.newLabels[-t.labels-1].e.id
		}
	}
	res, err := w.st["window"].ExecContext(ctx, start, int64(p.Duration), int64(p.Period), total, int(p.Kind))
	if err != nil {
		return fmt.Errorf("insert window: %w", err)
	}
	window, err := res.LastInsertId()
	if err != nil {
		return err
	}
	slices.SortFunc(w.triples, func(a, b triple) int {
		if a.labels != b.labels {
			return cmp.Compare(a.labels, b.labels)
		}
		return cmp.Compare(a.stack, b.stack)
	})
	// One samples row per label set; equal (labels, stack) samples merge.
	// The rows' blobs go one after another in buf, ends marking them.
	w.buf, w.ends, w.pairs = w.buf[:0], w.ends[:0], w.pairs[:0]
	type row struct{ labels, total int64 }
	var rows []row
	for i := 0; i < len(w.triples); {
		lid := w.triples[i].labels
		w.pairs = w.pairs[:0]
		var sum int64
		for ; i < len(w.triples) && w.triples[i].labels == lid; i++ {
			t := w.triples[i]
			if n := len(w.pairs); n > 0 && w.pairs[n-1].stack == t.stack {
				w.pairs[n-1].count += t.count
			} else {
				w.pairs = append(w.pairs, stackCount{t.stack, t.count})
			}
			sum += t.count
		}
		w.buf = appendCounts(w.buf, w.pairs)
		w.ends = append(w.ends, len(w.buf))
		rows = append(rows, row{lid, sum})
	}
	err = w.insertRows(ctx, "sample", len(rows), func(i int, a []any) []any {
		from := 0
		if i > 0 {
			from = w.ends[i-1]
		}
		return append(a, start, window, rows[i].labels, rows[i].total, w.buf[from:w.ends[i]])
	}, nil)
	if err != nil {
		return fmt.Errorf("insert samples: %w", err)
	}
	return nil
}

// labelset returns the id of a label set, widening its first/last span to
// cover start, or, for a set the cache misses, -1 - its index in newLabels
// (addLabelSets gives it its id).
func (w *writer) labelset(ctx context.Context, labels map[string]string, start int64) (int64, error) {
	// Samples of one process may share one labels map: look it up once.
	ptr := reflect.ValueOf(labels).UnsafePointer()
	if id, ok := w.labelMemo[ptr]; ok && ptr != nil {
		return id, nil
	}
	// The agent makes a new map per sample, so the cache is keyed by a
	// hash that needs no sorting, and a hit is confirmed by comparing maps.
	h := labelsHash(labels)
	var id int64
	if e, ok := w.labelsets.m[h]; ok && maps.Equal(e.labels, labels) {
		if err := w.widen(ctx, h, e, start); err != nil {
			return 0, err
		}
		id = e.id
	} else {
		w.key, w.names = appendLabels(w.key[:0], labels, w.names)
		n, ok := w.newLabel[string(w.key)]
		if !ok {
			n = len(w.newLabels)
			w.newLabels = append(w.newLabels, newLabels{missed: missed{key: string(w.key), hash: hash64(w.key)}, cached: h, labels: labels})
			w.newLabel[string(w.key)] = n
		}
		id = int64(-1 - n)
	}
	if ptr != nil {
		w.labelMemo[ptr] = id
	}
	return id, nil
}

// widen moves the span of label set e, cached under h, to cover start
// when start is outside it by more than lastSlack.
func (w *writer) widen(ctx context.Context, h uint64, e labelEntry, start int64) error {
	if start >= e.first && start <= e.last+lastSlack {
		return nil
	}
	first, last := min(e.first, start), max(e.last, start)
	if _, err := w.st["labels.span"].ExecContext(ctx, first, last, e.id); err != nil {
		return fmt.Errorf("update label set: %w", err)
	}
	e.first, e.last = first, last
	remember(w, &w.labelsets, h, e)
	return nil
}

// addLabelSets looks up the window's label sets that the cache missed,
// inserts those the store does not have, and caches them all.
func (w *writer) addLabelSets(ctx context.Context, start int64) error {
	err := w.findMissed(ctx, "labels", len(w.newLabels), func(i int) *missed { return &w.newLabels[i].missed }, func(i int) error {
		nl := &w.newLabels[i]
		e := labelEntry{entry: nl.e, labels: maps.Clone(nl.labels)}
		remember(w, &w.labelsets, nl.cached, e)
		return w.widen(ctx, nl.cached, e, start)
	})
	if err != nil {
		return fmt.Errorf("label sets: %w", err)
	}
	err = w.insertRows(ctx, "labels", len(w.fresh), func(i int, a []any) []any {
		nl := &w.newLabels[w.fresh[i]]
		return append(a, nl.hash, start, start, []byte(nl.key))
	}, func(i int, id int64) {
		nl := &w.newLabels[w.fresh[i]]
		nl.e = entry{id: id, first: start, last: start}
		remember(w, &w.labelsets, nl.cached, labelEntry{entry: nl.e, labels: maps.Clone(nl.labels)})
	})
	if err != nil {
		return fmt.Errorf("insert label sets: %w", err)
	}
	return nil
}

// labelSeed keys labelsHash; it is random per process, which is fine for an
// in-memory cache and keeps crafted label values (a process picks its own
// comm) from colliding on purpose.
var labelSeed = maphash.MakeSeed()

// labelsHash hashes a label set independently of map order: the sum of a
// mixed hash per label.
func labelsHash(labels map[string]string) uint64 {
	h := uint64(len(labels))
	for k, v := range labels {
		x := maphash.String(labelSeed, k)
		x ^= maphash.String(labelSeed, v) * 0x9e3779b97f4a7c15
		x ^= x >> 31
		x *= 0xbf58476d1ce4e5b9
		h += x ^ x>>29
	}
	return h
}

// stackOf returns the id of the stack of stored locations ids, or, for a
// stack the caches miss, -1 - its index in newStacks (addStacks gives it
// its id).
func (w *writer) stackOf(ctx context.Context, ids []int64, start int64) (int64, error) {
	w.key = appendStack(w.key[:0], ids)
	if e, ok := w.stacks.m[string(w.key)]; ok {
		return e.id, w.touchStack(ctx, string(w.key), e, start)
	}
	n, ok := w.newStack[string(w.key)]
	if !ok {
		n = len(w.newStacks)
		w.newStacks = append(w.newStacks, missed{key: string(w.key), hash: hash64(w.key)})
		w.newStack[string(w.key)] = n
	}
	return int64(-1 - n), nil
}

// addStacks looks up the window's stacks that the caches missed and
// inserts those the store does not have.
func (w *writer) addStacks(ctx context.Context, start int64) error {
	err := w.findMissed(ctx, "stack", len(w.newStacks), func(i int) *missed { return &w.newStacks[i] }, func(i int) error {
		ns := &w.newStacks[i]
		return w.touchStack(ctx, ns.key, ns.e, start)
	})
	if err != nil {
		return fmt.Errorf("stacks: %w", err)
	}
	err = w.insertRows(ctx, "stack", len(w.fresh), func(i int, a []any) []any {
		ns := &w.newStacks[w.fresh[i]]
		return append(a, ns.hash, start, []byte(ns.key))
	}, func(i int, id int64) {
		ns := &w.newStacks[w.fresh[i]]
		ns.e = entry{id: id, last: start}
		remember(w, &w.stacks, ns.key, ns.e)
	})
	if err != nil {
		return fmt.Errorf("insert stacks: %w", err)
	}
	return nil
}

// touchStack caches stack e, moving its last use to start when it is more
// than lastSlack old.
func (w *writer) touchStack(ctx context.Context, key string, e entry, start int64) error {
	if start > e.last+lastSlack {
		if _, err := w.st["stack.last"].ExecContext(ctx, start, e.id); err != nil {
			return fmt.Errorf("update stack: %w", err)
		}
		e.last = start
	} else if _, ok := w.stacks.m[key]; ok {
		return nil
	}
	remember(w, &w.stacks, key, e)
	return nil
}

// findMissed looks up n items the caches missed, item(i) each, by their
// hash with statement name+".batch", which returns each row's id, hash,
// first, last and content. It gives those found their row and calls found
// with each; the others' indexes it leaves in w.fresh.
func (w *writer) findMissed(ctx context.Context, name string, n int, item func(i int) *missed, found func(i int) error) error {
	err := w.batch(ctx, name, n, func(i int) int64 { return item(i).hash }, func(rows *sql.Rows) error {
		var e entry
		var h int64
		var content []byte
		if err := rows.Scan(&e.id, &h, &e.first, &e.last, &content); err != nil {
			return err
		}
		for _, i := range w.found[h] {
			if it := item(i); it.key == string(content) {
				it.e = e
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("look up: %w", err)
	}
	w.fresh = w.fresh[:0]
	for i := range n {
		if item(i).e.id == 0 {
			w.fresh = append(w.fresh, i)
		} else if err := found(i); err != nil {
			return err
		}
	}
	return nil
}

// batch runs statement name+".batch" with the hashes of n items, which
// hash returns, and calls row for each row it returns; w.found holds
// the items by hash meanwhile. Items whose hash no row has (the filter
// says so) are left out, and the query with them when all are. Each
// item has a row by the end of the window, found or inserted: the
// filter holds their hashes from now on.
func (w *writer) batch(ctx context.Context, name string, n int, hash func(int) int64, row func(*sql.Rows) error) error {
	clear(w.found)
	f := w.filters[name]
	w.buf = append(w.buf[:0], '[')
	for i := range n {
		h := hash(i)
		if !f.mayHold(h) {
			continue
		}
		if len(w.found[h]) == 0 {
			if len(w.buf) > 1 {
				w.buf = append(w.buf, ',')
			}
			w.buf = strconv.AppendInt(w.buf, h, 10)
		}
		w.found[h] = append(w.found[h], i)
	}
	for i := range n {
		f.add(hash(i))
	}
	if len(w.found) == 0 {
		return nil
	}
	w.buf = append(w.buf, ']')
	rows, err := w.st[name+".batch"].QueryContext(ctx, string(w.buf))
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := row(rows); err != nil {
			return err
		}
	}
	return rows.Err()
}

// location returns the id of a location from the caches, or, storing its
// mapping if new, queues it for locationByFrames once its functions are
// known (addFunctions), and those of its functions the cache misses, and
// returns 0 (also for a location queued before).
func (w *writer) location(ctx context.Context, l *profile.Location) (int64, error) {
	if l == nil {
		return 0, errors.New("nil location on a stack")
	}
	if id, ok := w.locMemo[l]; ok {
		return id, nil
	}
	var mapping int64
	if l.Mapping != nil {
		var err error
		if mapping, err = w.mapping(ctx, l.Mapping); err != nil {
			return 0, err
		}
	}
	lk := locKey{mapping, l.Address}
	if e, ok := w.locations.m[lk]; ok && slices.Equal(e.frames, l.Frames) {
		w.locMemo[l] = e.id
		return e.id, nil
	}
	w.locMemo[l] = 0 // until addLocations
	w.pending = append(w.pending, newLoc{l: l, key: lk})
	for _, f := range l.Frames {
		k := funcKey{f.Function, f.File}
		if _, ok := w.funcIDs[k]; ok {
			continue
		}
		if e, ok := w.funcs.m[k]; ok {
			w.funcIDs[k] = e.id
			continue
		}
		w.funcIDs[k] = 0 // until addFunctions
		w.key = appendString(appendString(w.key[:0], f.Function), f.File)
		w.newFuncs = append(w.newFuncs, newFunc{f: f, hash: hash64(w.key)})
	}
	return 0, nil
}

// locationByFrames gives pending location nl, whose functions are known,
// the id of the stored location alike if cached, or queues it for
// addLocations.
func (w *writer) locationByFrames(nl newLoc) {
	var k []byte
	for _, f := range nl.l.Frames {
		k = binary.AppendUvarint(k, uint64(w.funcIDs[funcKey{f.Function, f.File}]))
		k = binary.AppendUvarint(k, uint64(int64(f.Line)))
	}
	nl.fk = framesKey{nl.key.mapping, string(k)}
	if id, ok := w.byFrames.m[nl.fk]; ok {
		remember(w, &w.locations, nl.key, locEntry{id, slices.Clone(nl.l.Frames)})
		w.locMemo[nl.l] = id
		return
	}
	// The hash covers what identifies the row: its frames and mapping.
	nl.hash = hash64(binary.AppendUvarint(slices.Clip(k), uint64(nl.key.mapping)))
	w.newLocs = append(w.newLocs, nl)
}

// addFunctions looks up the window's functions that the cache missed,
// in one query, and inserts those the store does not have.
func (w *writer) addFunctions(ctx context.Context) error {
	err := w.batch(ctx, "func", len(w.newFuncs), func(i int) int64 { return w.newFuncs[i].hash }, func(rows *sql.Rows) error {
		var id, h, startLine int64
		var name, file string
		if err := rows.Scan(&id, &h, &startLine, &name, &file); err != nil {
			return err
		}
		for _, i := range w.found[h] {
			nf := &w.newFuncs[i]
			if nf.id != 0 || nf.f.Function != name || nf.f.File != file {
				continue
			}
			nf.id, nf.startLine = id, startLine
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("look up functions: %w", err)
	}
	w.fresh = w.fresh[:0]
	for i := range w.newFuncs {
		switch nf := &w.newFuncs[i]; {
		case nf.id == 0:
			w.fresh = append(w.fresh, i)
		case nf.startLine == 0 && nf.f.StartLine != 0:
			// Stored by a flint that did not keep start lines.
			if _, err := w.st["func.start"].ExecContext(ctx, nf.f.StartLine, nf.id); err != nil {
				return fmt.Errorf("update function: %w", err)
			}
		}
	}
	err = w.insertRows(ctx, "func", len(w.fresh), func(i int, a []any) []any {
		nf := &w.newFuncs[w.fresh[i]]
		return append(a, nf.hash, nf.f.Function, nf.f.File, nf.f.StartLine)
	}, func(i int, id int64) { w.newFuncs[w.fresh[i]].id = id })
	if err != nil {
		return fmt.Errorf("insert functions: %w", err)
	}
	for _, nf := range w.newFuncs {
		k := funcKey{nf.f.Function, nf.f.File}
		w.funcIDs[k] = nf.id
		remember(w, &w.funcs, k, entry{id: nf.id})
	}
	return nil
}

// addLocations looks up the window's locations that the caches missed and
// inserts those the store does not have.
func (w *writer) addLocations(ctx context.Context) error {
	err := w.batch(ctx, "loc", len(w.newLocs), func(i int) int64 { return w.newLocs[i].hash }, func(rows *sql.Rows) error {
		var id, h, mapping int64
		var frames []byte
		if err := rows.Scan(&id, &h, &mapping, &frames); err != nil {
			return err
		}
		for _, i := range w.found[h] {
			// Rows come oldest first: should two be alike, the oldest.
			if nl := &w.newLocs[i]; nl.id == 0 && nl.fk == (framesKey{mapping, string(frames)}) {
				nl.id = id
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("look up locations: %w", err)
	}
	// The ones still without a row get one; alike ones in the window
	// share the first one's.
	w.fresh = w.fresh[:0]
	for i := range w.newLocs {
		nl := &w.newLocs[i]
		if id, ok := w.byFrames.m[nl.fk]; ok && nl.id == 0 {
			nl.id = id
		}
		if _, ok := w.firstLoc[nl.fk]; nl.id == 0 && !ok {
			w.firstLoc[nl.fk] = i
			w.fresh = append(w.fresh, i)
		}
	}
	err = w.insertRows(ctx, "loc", len(w.fresh), func(i int, a []any) []any {
		nl := &w.newLocs[w.fresh[i]]
		return append(a, nl.hash, nl.key.mapping, int64(nl.key.address), []byte(nl.fk.frames))
	}, func(i int, id int64) { w.newLocs[w.fresh[i]].id = id })
	if err != nil {
		return fmt.Errorf("insert locations: %w", err)
	}
	for i := range w.newLocs {
		nl := &w.newLocs[i]
		if nl.id == 0 {
			nl.id = w.newLocs[w.firstLoc[nl.fk]].id
		}
		remember(w, &w.byFrames, nl.fk, nl.id)
		remember(w, &w.locations, nl.key, locEntry{nl.id, slices.Clone(nl.l.Frames)})
		w.locMemo[nl.l] = nl.id
	}
	return nil
}

func (w *writer) mapping(ctx context.Context, m *profile.Mapping) (int64, error) {
	if id, ok := w.mapMemo[m]; ok {
		return id, nil
	}
	k := *m
	e, ok := w.mappings.m[k]
	if !ok {
		kernel := 0
		if m.Kernel {
			kernel = 1
		}
		var hk []byte
		hk = binary.AppendUvarint(hk, m.Start)
		hk = binary.AppendUvarint(hk, m.Limit)
		hk = binary.AppendUvarint(hk, m.Offset)
		hk = appendString(hk, m.File)
		hk = appendString(hk, m.BuildID)
		hk = append(hk, byte(kernel))
		h := hash64(hk)
		args := []any{h, int64(m.Start), int64(m.Limit), int64(m.Offset), m.File, m.BuildID, kernel}
		err := w.st["mapping.find"].QueryRowContext(ctx, args...).Scan(&e.id)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			res, err := w.st["mapping.add"].ExecContext(ctx, args...)
			if err != nil {
				return 0, fmt.Errorf("insert mapping: %w", err)
			}
			if e.id, err = res.LastInsertId(); err != nil {
				return 0, err
			}
		case err != nil:
			return 0, fmt.Errorf("look up mapping: %w", err)
		}
		remember(w, &w.mappings, k, e)
	}
	w.mapMemo[m] = e.id
	return e.id, nil
}
