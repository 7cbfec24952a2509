package store

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/flint-dev/flint/internal/profile"
	"github.com/flint-dev/flint/internal/symbol"
)

// maxInList is how many ids go in one "IN (...)" list; longer lists are
// split. Ids are integers formatted by us, so no quoting is needed.
const maxInList = 1000

// checkRange validates a query's time range against the limits.
func (s *SQLite) checkRange(what string, from, to time.Time) error {
	return checkRange(s.opts, what, from, to)
}

// checkRange validates a query's time range against o's limits.
func checkRange(o Options, what string, from, to time.Time) error {
	if from.IsZero() || to.IsZero() {
		return fmt.Errorf("%w: %s needs both a start and an end time", ErrBadQuery, what)
	}
	if !from.Before(to) {
		return fmt.Errorf("%w: %s range is empty or inverted (%s to %s)", ErrBadQuery, what,
			from.UTC().Format(time.RFC3339), to.UTC().Format(time.RFC3339))
	}
	if r := to.Sub(from); o.MaxQueryRange > 0 && r > o.MaxQueryRange {
		return fmt.Errorf("%w: %s range %s is longer than the limit %s", ErrTooLarge, what, r, o.MaxQueryRange)
	}
	return nil
}

// inSnapshot runs f in one read transaction, so everything f reads comes from one
// snapshot: whole windows only, and no stack that garbage collection
// removes halfway.
func (s *SQLite) inSnapshot(ctx context.Context, f func(*sql.Tx) error) error {
	s.rmu.RLock()
	defer s.rmu.RUnlock()
	if s.rdb == nil { // a corrupt database could not be replaced
		return errClosed
	}
	tx, err := s.rdb.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return err
	}
	defer tx.Rollback()
	return f(tx)
}

// labelSet is a stored label set that may have samples in a query's range.
type labelSet struct {
	id     int64
	labels map[string]string // shared with the label cache: do not modify
}

// candidates returns the label sets that may have samples in [from, to):
// every one that has, and perhaps a few used within lastSlack before from.
func (s *SQLite) candidates(ctx context.Context, tx *sql.Tx, from, to int64) ([]labelSet, error) {
	rows, err := tx.QueryContext(ctx, `SELECT id, labels FROM labelsets WHERE first < ? AND last >= ?`, to, from-lastSlack)
	if err != nil {
		return nil, fmt.Errorf("read label sets: %w", err)
	}
	defer rows.Close()
	var out []labelSet
	for rows.Next() {
		var id int64
		var b sql.RawBytes
		if err := rows.Scan(&id, &b); err != nil {
			return nil, fmt.Errorf("read label sets: %w", err)
		}
		l, err := s.decodeLabelSet(id, b)
		if err != nil {
			return nil, err
		}
		out = append(out, labelSet{id, l})
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read label sets: %w", err)
	}
	return out, nil
}

func (s *SQLite) decodeLabelSet(id int64, b []byte) (map[string]string, error) {
	if l, ok := s.labels.get(id); ok {
		return l, nil
	}
	l, err := decodeLabels(b)
	if err != nil {
		return nil, fmt.Errorf("label set %d: %w", id, err)
	}
	s.labels.put(id, l)
	return l, nil
}

// span is what the windows table says of a query's range [from, to):
// the small table tells which windows to read, and samples rows are read
// by start.
type span struct {
	from, to int64
	typ      profile.Kind
	// others: windows of another type are in the range.
	others bool
	// periods are those of its CPU windows, shortest first.
	periods []time.Duration
}

// readSpan reads the span of [from, to) for a query of type typ, in one
// pass over its windows.
func readSpan(ctx context.Context, tx *sql.Tx, typ profile.Kind, from, to int64) (span, error) {
	sp := span{from: from, to: to, typ: typ}
	rows, err := tx.QueryContext(ctx, `SELECT type, period FROM windows WHERE start >= ? AND start < ? GROUP BY type, period ORDER BY period`, from, to)
	if err != nil {
		return sp, fmt.Errorf("read windows: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var t, p int64
		if err := rows.Scan(&t, &p); err != nil {
			return sp, fmt.Errorf("read windows: %w", err)
		}
		if profile.Kind(t) != typ {
			sp.others = true
		}
		if profile.Kind(t) == profile.CPU {
			sp.periods = append(sp.periods, time.Duration(p))
		}
	}
	if err := rows.Err(); err != nil {
		return sp, fmt.Errorf("read windows: %w", err)
	}
	return sp, nil
}

// scan reads the samples rows of the span's windows of its type and of
// the pass, whose label set is in want (all rows
// when want is nil): the columns named in cols (labels first), calling f
// with each row's values; a blob is only valid during the call. Rows cost
// ~1 µs each through database/sql, so only the columns used are read.
func (sp span) scan(ctx context.Context, tx *sql.Tx, ps pass, want []int64, cols string, dest []any, f func() error) error {
	q := "SELECT " + cols + " FROM samples WHERE start >= ?1 AND start < ?2"
	args := []any{sp.from, sp.to}
	// Checking each row's window made a selective query 20-35% slower
	// (BenchmarkProfile24h/pod-selector, a CPU-only store, on a busy
	// machine), so a range whose windows are all of the type (any store
	// without --off-cpu) and of one period is read without.
	if sp.others || !ps.every {
		q += " AND window IN (SELECT id FROM windows WHERE start >= ?1 AND start < ?2 AND type = ?3"
		args = append(args, int(sp.typ))
		if !ps.every {
			q += " AND period = ?4"
			args = append(args, int64(ps.period))
		}
		q += ")"
	}
	if want != nil {
		// A selective selector: let SQLite skip the other rows without
		// handing them to Go.
		q += " AND labels IN (" + idList(want) + ")"
	}
	rows, err := tx.QueryContext(ctx, q, args...)
	if err != nil {
		return fmt.Errorf("read samples: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		if err := rows.Scan(dest...); err != nil {
			return fmt.Errorf("read samples: %w", err)
		}
		if err := f(); err != nil {
			return err
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read samples: %w", err)
	}
	return nil
}

func idList(ids []int64) string {
	var b strings.Builder
	for i, id := range ids {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.FormatInt(id, 10))
	}
	return b.String()
}

// sqlFilter returns the ids to filter on in SQL, or nil to filter in Go:
// a short IN list only pays when it leaves out most rows. matched is not
// empty.
func sqlFilter(matched []int64, candidates int) []int64 {
	if len(matched) <= maxInList && len(matched)*2 <= candidates {
		return matched
	}
	return nil
}

// Profile merges the samples of windows starting in [q.From, q.To) whose
// labels match q.Selector. Samples with the same stack and the same kept
// labels merge into one; samples that share labels share one Labels map and
// samples that share a stack share one Stack slice, so treat them as read
// only. Kind and Period are as Reader.Profile says.
func (s *SQLite) Profile(ctx context.Context, q Query) (*profile.Profile, error) {
	if err := s.checkRange("profile", q.From, q.To); err != nil {
		return nil, err
	}
	if err := checkQueryType(q.Type); err != nil {
		return nil, err
	}
	if q.Type == profile.Wall {
		return wallProfile(ctx, s, q)
	}
	var p *profile.Profile
	err := s.inSnapshot(ctx, func(tx *sql.Tx) error {
		var err error
		p, err = s.profile(ctx, tx, q)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("query profile: %w", err)
	}
	return p, nil
}

type sampleKey struct {
	stack int64
	group int32
}

func (s *SQLite) profile(ctx context.Context, tx *sql.Tx, q Query) (*profile.Profile, error) {
	from, to := q.From.UnixNano(), q.To.UnixNano()
	cands, err := s.candidates(ctx, tx, from, to)
	if err != nil {
		return nil, err
	}
	// Each matching label set maps to a group: its labels cut to KeepLabels.
	group := make(map[int64]int32, len(cands))
	groupIndex := map[string]int32{}
	var groups []map[string]string
	var matched []int64
	var key []byte
	var names []string
	for _, c := range cands {
		if !q.Selector.Matches(c.labels) {
			group[c.id] = -1
			continue
		}
		kept := keep(c.labels, q.KeepLabels)
		key, names = appendLabels(key[:0], kept, names)
		g, ok := groupIndex[string(key)]
		if !ok {
			g = int32(len(groups))
			groupIndex[string(key)] = g
			groups = append(groups, kept)
		}
		group[c.id] = g
		matched = append(matched, c.id)
	}
	sp, err := readSpan(ctx, tx, q.Type, from, to)
	if err != nil {
		return nil, err
	}
	p := &profile.Profile{Start: q.From, Duration: q.To.Sub(q.From), Kind: q.Type, Period: countPeriod(q.Type, sp.periods)}
	if len(matched) == 0 {
		return p, nil
	}
	counts := map[sampleKey]int64{}
	for _, ps := range passes(q.Type, sp.periods) {
		// A pass of one period of several is summed apart, then converted.
		part := counts
		if !ps.every {
			part = map[sampleKey]int64{}
		}
		var g int32
		add := func(stack, count int64) {
			part[sampleKey{stack, g}] += count
		}
		var labels int64
		var blob sql.RawBytes
		err := sp.scan(ctx, tx, ps, sqlFilter(matched, len(cands)), "labels, stacks", []any{&labels, &blob}, func() error {
			var ok bool
			if g, ok = group[labels]; !ok {
				return fmt.Errorf("samples refer to label set %d, which is not stored with their time", labels)
			}
			if g < 0 {
				return nil
			}
			if err := decodeCounts(blob, add); err != nil {
				return fmt.Errorf("samples of label set %d: %w", labels, err)
			}
			if s.opts.MaxStacks > 0 && len(part) > s.opts.MaxStacks {
				return errTooManyStacks(s.opts.MaxStacks)
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
		if !ps.every {
			for k, n := range part {
				counts[k] += ps.convert(n)
			}
			if s.opts.MaxStacks > 0 && len(counts) > s.opts.MaxStacks {
				return nil, errTooManyStacks(s.opts.MaxStacks)
			}
		}
	}
	if len(counts) == 0 {
		return p, nil
	}
	keys := make([]sampleKey, 0, len(counts))
	stackIDs := make([]int64, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
		stackIDs = append(stackIDs, k.stack)
	}
	slices.SortFunc(keys, func(a, b sampleKey) int {
		if a.stack != b.stack {
			return cmp.Compare(a.stack, b.stack)
		}
		return int(a.group - b.group)
	})
	stacks, err := s.loadStacks(ctx, tx, stackIDs)
	if err != nil {
		return nil, err
	}
	p.Samples = make([]*profile.Sample, len(keys))
	for i, k := range keys {
		p.Samples[i] = &profile.Sample{Stack: stacks[k.stack], Count: counts[k], Labels: groups[k.group]}
	}
	return p, nil
}

// keep returns a fresh copy of l with only the names in names (all if nil).
func keep(l map[string]string, names []string) map[string]string {
	out := map[string]string{}
	if names == nil {
		for k, v := range l {
			out[k] = v
		}
		return out
	}
	for _, k := range names {
		if v, ok := l[k]; ok {
			out[k] = v
		}
	}
	return out
}

// readCache holds decoded dictionary rows for queries. Rows never change
// and ids are never reused (AUTOINCREMENT), so entries never go stale; a
// map that outgrows its bound is dropped whole. Queries build fresh
// profile objects from it, so callers cannot corrupt it.
type readCache struct {
	mu        sync.Mutex
	stacks    map[int64][]int64
	locations map[int64]storedLoc
	functions map[int64]symbol.Frame // Line unused; StartLine is the function's
	mappings  map[int64]profile.Mapping
}

// Bounds of readCache, in entries: tens of MB at most, and far more than a
// node's working set of a day (~1,000 stacks, ~3,000 locations here).
const (
	maxReadStacks    = 1 << 15
	maxReadLocations = 1 << 17
	maxReadFunctions = 1 << 16
	maxReadMappings  = 1 << 14
)

type storedLoc struct {
	mapping, address int64
	frames           []frame
}

// putBounded adds k → v to m, dropping m's entries first when it is full.
func putBounded[K comparable, V any](m map[K]V, max int, k K, v V) {
	if len(m) >= max {
		clear(m)
	}
	m[k] = v
}

// missing returns the ids (sorted, distinct) that have no entry in m.
func missing[V any](m map[int64]V, ids []int64) []int64 {
	var out []int64
	for _, id := range ids {
		if _, ok := m[id]; !ok {
			out = append(out, id)
		}
	}
	return out
}

// loadStacks builds the stacks with these ids (duplicates allowed), with
// their locations, mappings and functions, reading what the cache lacks;
// locations and mappings are shared between the stacks.
func (s *SQLite) loadStacks(ctx context.Context, tx *sql.Tx, ids []int64) (map[int64][]*profile.Location, error) {
	c := &s.read
	ids = dedup(ids)
	// Copy what is needed out of the cache under the lock; read the rest
	// from the database without it.
	stacks := make(map[int64][]int64, len(ids))
	c.mu.Lock()
	for _, id := range ids {
		if l, ok := c.stacks[id]; ok {
			stacks[id] = l
		}
	}
	c.mu.Unlock()
	err := queryIn(ctx, tx, "SELECT id, locations FROM stacks WHERE id IN (%s)", missing(stacks, ids), func(rows *sql.Rows) error {
		var id int64
		var b sql.RawBytes
		if err := rows.Scan(&id, &b); err != nil {
			return err
		}
		l, err := decodeStack(b, nil)
		if err != nil {
			return fmt.Errorf("stack %d: %w", id, err)
		}
		stacks[id] = l
		c.mu.Lock()
		putBounded(c.stacks, maxReadStacks, id, l)
		c.mu.Unlock()
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read stacks: %w", err)
	}

	var locIDs []int64
	for _, l := range stacks {
		locIDs = append(locIDs, l...)
	}
	locIDs = dedup(locIDs)
	locs := make(map[int64]storedLoc, len(locIDs))
	c.mu.Lock()
	for _, id := range locIDs {
		if l, ok := c.locations[id]; ok {
			locs[id] = l
		}
	}
	c.mu.Unlock()
	err = queryIn(ctx, tx, "SELECT id, mapping, address, frames FROM locations WHERE id IN (%s)", missing(locs, locIDs), func(rows *sql.Rows) error {
		var id int64
		var l storedLoc
		var b sql.RawBytes
		if err := rows.Scan(&id, &l.mapping, &l.address, &b); err != nil {
			return err
		}
		var err error
		if l.frames, err = decodeFrames(b, nil); err != nil {
			return fmt.Errorf("location %d: %w", id, err)
		}
		locs[id] = l
		c.mu.Lock()
		putBounded(c.locations, maxReadLocations, id, l)
		c.mu.Unlock()
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read locations: %w", err)
	}

	var fnIDs, mapIDs []int64
	for _, l := range locs {
		for _, f := range l.frames {
			fnIDs = append(fnIDs, f.function)
		}
		if l.mapping != 0 {
			mapIDs = append(mapIDs, l.mapping)
		}
	}
	fnIDs, mapIDs = dedup(fnIDs), dedup(mapIDs)
	fns := make(map[int64]symbol.Frame, len(fnIDs))
	mappings := make(map[int64]*profile.Mapping, len(mapIDs))
	c.mu.Lock()
	for _, id := range fnIDs {
		if f, ok := c.functions[id]; ok {
			fns[id] = f
		}
	}
	for _, id := range mapIDs {
		if m, ok := c.mappings[id]; ok {
			mappings[id] = &m
		}
	}
	c.mu.Unlock()
	err = queryIn(ctx, tx, "SELECT id, name, file, start_line FROM functions WHERE id IN (%s)", missing(fns, fnIDs), func(rows *sql.Rows) error {
		var id int64
		var f symbol.Frame
		if err := rows.Scan(&id, &f.Function, &f.File, &f.StartLine); err != nil {
			return err
		}
		fns[id] = f
		c.mu.Lock()
		putBounded(c.functions, maxReadFunctions, id, f)
		c.mu.Unlock()
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read functions: %w", err)
	}
	err = queryIn(ctx, tx, "SELECT id, start_addr, limit_addr, file_offset, file, build_id, kernel FROM mappings WHERE id IN (%s)", missing(mappings, mapIDs), func(rows *sql.Rows) error {
		var id, start, limit, offset int64
		var m profile.Mapping
		if err := rows.Scan(&id, &start, &limit, &offset, &m.File, &m.BuildID, &m.Kernel); err != nil {
			return err
		}
		m.Start, m.Limit, m.Offset = uint64(start), uint64(limit), uint64(offset)
		c.mu.Lock()
		putBounded(c.mappings, maxReadMappings, id, m)
		c.mu.Unlock()
		mappings[id] = &m
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read mappings: %w", err)
	}

	built := make(map[int64]*profile.Location, len(locs))
	for id, l := range locs {
		loc := &profile.Location{Address: uint64(l.address), Frames: make([]symbol.Frame, len(l.frames))}
		if l.mapping != 0 {
			if loc.Mapping = mappings[l.mapping]; loc.Mapping == nil {
				return nil, fmt.Errorf("location %d refers to missing mapping %d", id, l.mapping)
			}
		}
		for i, f := range l.frames {
			fn, ok := fns[f.function]
			if !ok {
				return nil, fmt.Errorf("location %d refers to missing function %d", id, f.function)
			}
			fn.Line = int(f.line)
			loc.Frames[i] = fn
		}
		built[id] = loc
	}
	out := make(map[int64][]*profile.Location, len(ids))
	for _, id := range ids {
		lids, ok := stacks[id]
		if !ok {
			return nil, fmt.Errorf("samples refer to missing stack %d", id)
		}
		stack := make([]*profile.Location, len(lids))
		for i, lid := range lids {
			if stack[i] = built[lid]; stack[i] == nil {
				return nil, fmt.Errorf("stack %d refers to missing location %d", id, lid)
			}
		}
		out[id] = stack
	}
	return out, nil
}

// dedup sorts ids and removes duplicates, in place.
func dedup(ids []int64) []int64 {
	slices.Sort(ids)
	return slices.Compact(ids)
}

// queryIn runs query, whose %s stands for a list of ids, over ids in
// chunks, calling f for each row.
func queryIn(ctx context.Context, tx *sql.Tx, query string, ids []int64, f func(*sql.Rows) error) error {
	for len(ids) > 0 {
		n := min(len(ids), maxInList)
		rows, err := tx.QueryContext(ctx, fmt.Sprintf(query, idList(ids[:n])))
		if err != nil {
			return err
		}
		for rows.Next() {
			if err := f(rows); err != nil {
				rows.Close()
				return err
			}
		}
		if err := rows.Close(); err != nil {
			return err
		}
		if err := rows.Err(); err != nil {
			return err
		}
		ids = ids[n:]
	}
	return nil
}

// Series sums the counts of type q.Type of windows starting in
// [q.From, q.To) per q.Step, per value of the label q.By ("" for samples without it; an empty
// By gives one series of everything). Bucket i covers
// [From + i·Step, From + (i+1)·Step) and every series has a point for every
// bucket, zeros included. Series are sorted by total samples, largest
// first, then by value.
func (s *SQLite) Series(ctx context.Context, q SeriesQuery) (SeriesSet, error) {
	buckets, err := checkSeries(s.opts, q)
	if err != nil {
		return SeriesSet{}, err
	}
	if q.Type == profile.Wall {
		return wallSeries(ctx, s, q)
	}
	limit := int64(s.opts.MaxSeriesPoints)
	var out SeriesSet
	err = s.inSnapshot(ctx, func(tx *sql.Tx) error {
		from, to := q.From.UnixNano(), q.To.UnixNano()
		cands, err := s.candidates(ctx, tx, from, to)
		if err != nil {
			return err
		}
		series := make(map[int64]int32, len(cands))
		index := map[string]int32{}
		var values []string
		var matched []int64
		for _, c := range cands {
			if !q.Selector.Matches(c.labels) {
				series[c.id] = -1
				continue
			}
			v := c.labels[q.By]
			i, ok := index[v]
			if !ok {
				i = int32(len(values))
				index[v] = i
				values = append(values, v)
			}
			series[c.id] = i
			matched = append(matched, c.id)
		}
		sp, err := readSpan(ctx, tx, q.Type, from, to)
		if err != nil {
			return err
		}
		out.Period = countPeriod(q.Type, sp.periods)
		if len(matched) == 0 {
			return nil
		}
		// Points are allocated per series on its first sample, so the
		// limit counts series that have samples, not every candidate.
		points := make([][]int64, len(values))
		var used int64
		step := int64(q.Step)
		var start, labels, total int64
		for _, ps := range passes(q.Type, sp.periods) {
			// A pass of one period of several is summed apart, then
			// converted point by point.
			part := points
			if !ps.every {
				part = make([][]int64, len(values))
			}
			err = sp.scan(ctx, tx, ps, sqlFilter(matched, len(cands)), "start, labels, total", []any{&start, &labels, &total}, func() error {
				i, ok := series[labels]
				if !ok {
					return fmt.Errorf("samples refer to label set %d, which is not stored with their time", labels)
				}
				if i < 0 {
					return nil
				}
				if points[i] == nil {
					used++
					if limit > 0 && used*buckets > limit {
						return errTooManySeries(used-1, buckets, limit)
					}
					points[i] = make([]int64, buckets)
				}
				if part[i] == nil {
					part[i] = make([]int64, buckets)
				}
				part[i][(start-from)/step] += total
				return nil
			})
			if err != nil {
				return err
			}
			if !ps.every {
				for i, pts := range part {
					for b, n := range pts {
						points[i][b] += ps.convert(n)
					}
				}
			}
		}
		out.Series = rankSeries(values, points, q.From, q.Step)
		return nil
	})
	if err != nil {
		return SeriesSet{}, fmt.Errorf("query series: %w", err)
	}
	return out, nil
}

// errTooManyStacks says a profile has more distinct samples than max.
func errTooManyStacks(max int) error {
	return fmt.Errorf("%w: profile has more than %d distinct samples; narrow the selector or the range, or keep fewer labels", ErrTooLarge, max)
}

// errTooManyFindings says a query found more findings than max.
func errTooManyFindings(max int) error {
	return fmt.Errorf("%w: more than %d findings: narrow the range or the selector", ErrTooLarge, max)
}

// errTooManySeries says that n series of that many steps each, and one
// more, exceed the limit on points.
func errTooManySeries(n, buckets, limit int64) error {
	return fmt.Errorf("%w: more than %d series of %d steps is more than the limit of %d points; use a longer step or a narrower selector",
		ErrTooLarge, n, buckets, limit)
}

// rankSeries turns each value's sample counts per step (nil: no samples)
// into Series, the largest total first, then by value; nil for none.
func rankSeries(values []string, points [][]int64, from time.Time, step time.Duration) []Series {
	type ranked struct {
		s     Series
		total int64
	}
	var rs []ranked
	for i, ps := range points {
		if ps == nil {
			continue
		}
		r := ranked{s: Series{Value: values[i], Points: make([]Point, len(ps))}}
		for b, n := range ps {
			r.s.Points[b] = Point{Time: from.Add(time.Duration(b) * step), Samples: n}
			r.total += n
		}
		rs = append(rs, r)
	}
	slices.SortFunc(rs, func(a, b ranked) int {
		if a.total != b.total {
			return cmp.Compare(b.total, a.total)
		}
		return strings.Compare(a.s.Value, b.s.Value)
	})
	if len(rs) == 0 {
		return nil
	}
	out := make([]Series, len(rs))
	for i, r := range rs {
		out[i] = r.s
	}
	return out
}

// checkSeries validates a series query against o's limits and returns
// its number of steps.
func checkSeries(o Options, q SeriesQuery) (int64, error) {
	if err := checkRange(o, "series", q.From, q.To); err != nil {
		return 0, err
	}
	if q.Step <= 0 {
		return 0, fmt.Errorf("%w: series step %s is not positive", ErrBadQuery, q.Step)
	}
	if err := checkQueryType(q.Type); err != nil {
		return 0, err
	}
	span := q.To.Sub(q.From)
	buckets := int64(span / q.Step)
	if span%q.Step != 0 {
		buckets++
	}
	if limit := int64(o.MaxSeriesPoints); limit > 0 && buckets > limit {
		return 0, fmt.Errorf("%w: series of %d steps of %s is more than the limit of %d points; use a longer step",
			ErrTooLarge, buckets, q.Step, limit)
	}
	return buckets, nil
}

// LabelNames lists, sorted, the names of labels with a non-empty value on
// samples of windows starting in [from, to). (As in Prometheus, an empty
// value is the same as no label.)
func (s *SQLite) LabelNames(ctx context.Context, from, to time.Time) ([]string, error) {
	names := map[string]bool{}
	err := s.labelSetsIn(ctx, "label names", from, to, func(l map[string]string) {
		for k, v := range l {
			if v != "" {
				names[k] = true
			}
		}
	})
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(names))
	for k := range names {
		out = append(out, k)
	}
	slices.Sort(out)
	return out, nil
}

// LabelValues lists, sorted, the non-empty values of label name on samples
// of windows starting in [from, to).
func (s *SQLite) LabelValues(ctx context.Context, name string, from, to time.Time) ([]string, error) {
	values := map[string]bool{}
	err := s.labelSetsIn(ctx, "label values", from, to, func(l map[string]string) {
		if v := l[name]; v != "" {
			values[v] = true
		}
	})
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(values))
	for v := range values {
		out = append(out, v)
	}
	slices.Sort(out)
	return out, nil
}

// labelSetsIn calls f with every label set that has samples in [from, to).
func (s *SQLite) labelSetsIn(ctx context.Context, what string, from, to time.Time, f func(map[string]string)) error {
	if err := s.checkRange(what, from, to); err != nil {
		return err
	}
	err := s.inSnapshot(ctx, func(tx *sql.Tx) error {
		rows, err := tx.QueryContext(ctx, `SELECT DISTINCT labels FROM samples WHERE start >= ? AND start < ?`,
			from.UnixNano(), to.UnixNano())
		if err != nil {
			return err
		}
		var missing []int64
		for rows.Next() {
			var id int64
			if err := rows.Scan(&id); err != nil {
				rows.Close()
				return err
			}
			if l, ok := s.labels.get(id); ok {
				f(l)
			} else {
				missing = append(missing, id)
			}
		}
		if err := rows.Close(); err != nil {
			return err
		}
		if err := rows.Err(); err != nil {
			return err
		}
		return queryIn(ctx, tx, "SELECT id, labels FROM labelsets WHERE id IN (%s)", missing, func(rows *sql.Rows) error {
			var id int64
			var b sql.RawBytes
			if err := rows.Scan(&id, &b); err != nil {
				return err
			}
			l, err := s.decodeLabelSet(id, b)
			if err != nil {
				return err
			}
			f(l)
			return nil
		})
	})
	if err != nil {
		return fmt.Errorf("query %s: %w", what, err)
	}
	return nil
}
