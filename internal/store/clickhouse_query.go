package store

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"regexp/syntax"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/flint-dev/flint/internal/profile"
	"github.com/flint-dev/flint/internal/selector"
)

// chCondition is sel as an SQL condition over the names and values columns
// of labelsets or findings: a missing label has the empty value, and a
// regular expression matches the whole value with Go's semantics.
func chCondition(sel selector.Selector) (string, error) {
	if len(sel) == 0 {
		return "1", nil
	}
	parts := make([]string, len(sel))
	for i, m := range sel {
		v := "values[indexOf(names, " + quote(m.Name) + ")]"
		switch m.Op {
		case selector.Equal:
			parts[i] = v + " = " + quote(m.Value)
		case selector.NotEqual:
			parts[i] = v + " != " + quote(m.Value)
		case selector.Match, selector.NotMatch:
			re, err := chRegexp(m.Value)
			if err != nil {
				return "", fmt.Errorf("%w: regular expression %q: %v", ErrBadQuery, m.Value, err)
			}
			parts[i] = "match(" + v + ", " + quote(re) + ")"
			if m.Op == selector.NotMatch {
				parts[i] = "NOT " + parts[i]
			}
		default:
			return "", fmt.Errorf("%w: matcher operator %q", ErrBadQuery, m.Op)
		}
	}
	return strings.Join(parts, " AND "), nil
}

// chRegexp rewrites re, anchored at both ends as the selector does, into
// the syntax both Go and ClickHouse's RE2 read the same way: Go prints the
// parsed expression with its flags spelled out, so that "." keeps not
// matching a newline (ClickHouse's default is the opposite) and Go-only
// spellings such as (?<name>…) become RE2's.
func chRegexp(re string) (string, error) {
	r, err := syntax.Parse("^(?:"+re+")$", syntax.Perl)
	if err != nil {
		return "", err
	}
	return r.String(), nil
}

// chRange is what every query's WHERE starts with: the days (partitions)
// and the window starts of [from, to).
func chRange(from, to time.Time) string {
	return fmt.Sprintf("%s AND start >= %d AND start < %d", chDays(from, to), from.UnixNano(), to.UnixNano())
}

func chDays(from, to time.Time) string {
	return fmt.Sprintf("day BETWEEN %s AND %s", dateLit(dayOf(from)), dateLit(dayOf(to.Add(-1))))
}

// chSamples is the WHERE condition of the samples (or totals) of type t
// of [from, to) whose label sets match cond.
func chSamples(cond string, t profile.Kind, from, to time.Time) string {
	w := chRange(from, to) + " AND type = " + strconv.Itoa(int(t))
	if cond != "1" {
		w += " AND labels IN (SELECT hash FROM labelsets WHERE " + chDays(from, to) + " AND " + cond + ")"
	}
	return w
}

// queryRows runs a SELECT on the first host. The whole answer is computed
// before it is sent, so an error becomes an HTTP error rather than text
// after some rows; a query longer than ClickHouse's default limit (256 KiB:
// a profile's list of stacks) raises the limit for itself.
func (c *ClickHouse) queryRows(ctx context.Context, q string, f func(r *rowReader) error) error {
	settings := url.Values{"wait_end_of_query": {"1"}}
	if len(q) > 200<<10 {
		settings.Set("max_query_size", strconv.Itoa(len(q)+1024))
	}
	return c.hosts[0].query(ctx, q, settings, f)
}

// Profile merges the samples of windows starting in [q.From, q.To) whose
// labels match q.Selector, as SQLite.Profile does. Samples that share a
// label set share one Labels map: treat them as read only.
func (c *ClickHouse) Profile(ctx context.Context, q Query) (*profile.Profile, error) {
	if err := checkRange(c.opts, "profile", q.From, q.To); err != nil {
		return nil, err
	}
	if err := checkQueryType(q.Type); err != nil {
		return nil, err
	}
	if q.Type == profile.Wall {
		return wallProfile(ctx, c, q)
	}
	p, err := c.profile(ctx, q)
	if err != nil {
		if errors.Is(err, ErrTooLarge) || errors.Is(err, ErrBadQuery) {
			return nil, err
		}
		return nil, fmt.Errorf("query profile: %w", err)
	}
	return p, nil
}

func (c *ClickHouse) profile(ctx context.Context, q Query) (*profile.Profile, error) {
	cond, err := chCondition(q.Selector)
	if err != nil {
		return nil, err
	}
	where := chSamples(cond, q.Type, q.From, q.To)
	kn, kv := "names", "values"
	switch {
	case q.KeepLabels == nil:
	case len(q.KeepLabels) == 0:
		kn, kv = "emptyArrayString()", "emptyArrayString()"
	default:
		// ClickHouse 18.16 loses columns that only a lambda's body uses
		// ("Unknown identifier"), so the arrays are spelled out per name.
		has := make([]string, len(q.KeepLabels))
		vals := make([]string, len(q.KeepLabels))
		for i, k := range q.KeepLabels {
			has[i] = "has(names, " + quote(k) + ")"
			vals[i] = "values[indexOf(names, " + quote(k) + ")]"
		}
		present := "[" + strings.Join(has, ", ") + "]"
		kn = "arrayFilter((k, p) -> p, " + "[" + quoteJoin(q.KeepLabels) + "]" + ", " + present + ")"
		kv = "arrayFilter((v, p) -> p, [" + strings.Join(vals, ", ") + "], " + present + ")"
	}
	limit := ""
	if c.opts.MaxStacks > 0 {
		limit = " LIMIT " + strconv.Itoa(c.opts.MaxStacks+1)
	}
	// Each matching label set maps to a group, the hash of the labels it
	// keeps; samples are summed per (stack, group) as they are read, so
	// the server never holds more than the answer. (Summing per label set
	// and stack first, then merging, costs a hash table of every pair in
	// the range: seconds over a fleet's hour.)
	sets := "(SELECT hash, any(" + kn + ") AS kn, any(" + kv + ") AS kv FROM labelsets WHERE " +
		chDays(q.From, q.To) + " AND " + cond + " GROUP BY hash)"
	groups := map[uint64]map[string]string{}
	err = c.queryRows(ctx, "SELECT DISTINCT cityHash64(toString(kn), toString(kv)), kn, kv FROM "+sets, func(r *rowReader) error {
		g, names, values := r.uint64(), r.strings(), r.strings()
		if len(names) != len(values) {
			return fmt.Errorf("label set of %d names and %d values", len(names), len(values))
		}
		l := make(map[string]string, len(names))
		for i := range names {
			l[names[i]] = values[i]
		}
		groups[g] = l
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read label sets: %w", err)
	}
	var periods []time.Duration
	if q.Type == profile.CPU {
		if periods, err = c.cpuPeriods(ctx, q.From, q.To); err != nil {
			return nil, err
		}
	}
	p := &profile.Profile{Start: q.From, Duration: q.To.Sub(q.From), Kind: q.Type, Period: countPeriod(q.Type, periods)}
	type row struct {
		stack, group uint64
	}
	if len(groups) == 0 {
		return p, nil
	}
	counts := map[row]int64{}
	for _, ps := range passes(q.Type, periods) {
		// FROM samples itself, so that over a cluster each shard joins and
		// sums its own rows (the label sets it joins are its own too).
		sql := "SELECT stack, g, sum(count) FROM samples ALL INNER JOIN (SELECT hash AS labels, cityHash64(toString(kn), toString(kv)) AS g FROM " +
			sets + ") AS l USING labels WHERE " + where + chPeriod(ps, q.From, q.To) + " GROUP BY stack, g" + limit
		err = c.queryRows(ctx, sql, func(r *rowReader) error {
			st, g, n := r.uint64(), r.uint64(), r.int64()
			if r.err != nil {
				return nil
			}
			if _, ok := groups[g]; !ok {
				return fmt.Errorf("samples of label group %x, which is not among the label sets", g)
			}
			counts[row{st, g}] += ps.convert(n)
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	if c.opts.MaxStacks > 0 && len(counts) > c.opts.MaxStacks {
		return nil, errTooManyStacks(c.opts.MaxStacks)
	}
	if len(counts) == 0 {
		return p, nil
	}
	// In a fixed order, whatever order the shards answered in: replicas
	// give the same bytes for the same question.
	rows := slices.SortedFunc(maps.Keys(counts), func(a, b row) int {
		return cmp.Or(cmp.Compare(a.stack, b.stack), cmp.Compare(a.group, b.group))
	})
	// The stacks are named by their hashes, which the samples query
	// returned: reading them again from samples would scan them twice.
	listed := map[uint64]bool{}
	var in strings.Builder
	for _, r := range rows {
		if listed[r.stack] {
			continue
		}
		listed[r.stack] = true
		if in.Len() > 0 {
			in.WriteByte(',')
		}
		in.WriteString(strconv.FormatUint(r.stack, 10))
	}
	stacks := map[uint64][]*profile.Location{}
	err = c.queryRows(ctx, "SELECT hash, any(body) FROM stacks WHERE "+chDays(q.From, q.To)+
		" AND hash IN ("+in.String()+") GROUP BY hash", func(r *rowReader) error {
		h, b := r.uint64(), r.bytes()
		if r.err != nil {
			return nil
		}
		s, err := profile.DecodeStack(b)
		if err != nil {
			return fmt.Errorf("stack %x: %w", h, err)
		}
		stacks[h] = s
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read stacks: %w", err)
	}
	p.Samples = make([]*profile.Sample, len(rows))
	for i, r := range rows {
		s, ok := stacks[r.stack]
		if !ok {
			return nil, fmt.Errorf("samples refer to stack %x, which is not stored with their day", r.stack)
		}
		p.Samples[i] = &profile.Sample{Stack: s, Count: counts[r], Labels: groups[r.group]}
	}
	return p, nil
}

// cpuPeriods lists the distinct periods of the CPU windows (no other
// type is in the table) starting in [from, to), shortest first.
func (c *ClickHouse) cpuPeriods(ctx context.Context, from, to time.Time) ([]time.Duration, error) {
	var out []time.Duration
	err := c.queryRows(ctx, "SELECT DISTINCT period FROM windows WHERE "+chRange(from, to)+" ORDER BY period", func(r *rowReader) error {
		out = append(out, time.Duration(r.int64()))
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read windows: %w", err)
	}
	return out, nil
}

// chPeriod is the condition, to add to chSamples's, that keeps the
// samples of a pass's windows; "" for every window.
func chPeriod(ps pass, from, to time.Time) string {
	if ps.every {
		return ""
	}
	return fmt.Sprintf(" AND (node, start) IN (SELECT node, start FROM windows WHERE %s AND period = %d)", chRange(from, to), int64(ps.period))
}

// Series counts samples per step per value of q.By, as SQLite.Series does.
func (c *ClickHouse) Series(ctx context.Context, q SeriesQuery) (SeriesSet, error) {
	buckets, err := checkSeries(c.opts, q)
	if err != nil {
		return SeriesSet{}, err
	}
	if q.Type == profile.Wall {
		return wallSeries(ctx, c, q)
	}
	cond, err := chCondition(q.Selector)
	if err != nil {
		return SeriesSet{}, err
	}
	from := q.From.UnixNano()
	limit := ""
	if c.opts.MaxSeriesPoints > 0 {
		limit = " LIMIT " + strconv.Itoa(c.opts.MaxSeriesPoints+1)
	}
	var periods []time.Duration
	if q.Type == profile.CPU {
		if periods, err = c.cpuPeriods(ctx, q.From, q.To); err != nil {
			return SeriesSet{}, fmt.Errorf("query series: %w", err)
		}
	}
	out := SeriesSet{Period: countPeriod(q.Type, periods)}
	index := map[string]int{}
	var values []string
	var points [][]int64
	for _, ps := range passes(q.Type, periods) {
		// Joined first, then summed per (value, step): summing per (label
		// set, step) first makes a group of every process's every window.
		sql := fmt.Sprintf("SELECT v, intDiv(start - %d, %d) AS b, sum(count) FROM totals ALL INNER JOIN (SELECT hash AS labels,"+
			" any(values[indexOf(names, %s)]) AS v FROM labelsets WHERE %s AND %s GROUP BY hash) AS l USING labels WHERE %s%s GROUP BY v, b%s",
			from, int64(q.Step), quote(q.By), chDays(q.From, q.To), cond, chSamples(cond, q.Type, q.From, q.To), chPeriod(ps, q.From, q.To), limit)
		err = c.queryRows(ctx, sql, func(r *rowReader) error {
			v, b, n := r.string(), r.int64(), r.int64()
			if r.err != nil {
				return nil
			}
			if b < 0 || b >= buckets {
				return fmt.Errorf("series bucket %d out of range", b)
			}
			i, ok := index[v]
			if !ok {
				if max := int64(c.opts.MaxSeriesPoints); max > 0 && int64(len(values)+1)*buckets > max {
					return errTooManySeries(int64(len(values)), buckets, max)
				}
				i = len(values)
				index[v] = i
				values = append(values, v)
				points = append(points, make([]int64, buckets))
			}
			points[i][b] += ps.convert(n)
			return nil
		})
		if err != nil {
			if errors.Is(err, ErrTooLarge) {
				return SeriesSet{}, err
			}
			return SeriesSet{}, fmt.Errorf("query series: %w", err)
		}
	}
	out.Series = rankSeries(values, points, q.From, q.Step)
	return out, nil
}

// LabelNames lists, sorted, the names of labels with a non-empty value on
// samples of windows starting in [from, to).
func (c *ClickHouse) LabelNames(ctx context.Context, from, to time.Time) ([]string, error) {
	return c.labelStrings(ctx, "label names", from, to,
		"arrayJoin(arrayFilter((k, v) -> v != '', names, values))", "1")
}

// LabelValues lists, sorted, the non-empty values of label name on samples
// of windows starting in [from, to).
func (c *ClickHouse) LabelValues(ctx context.Context, name string, from, to time.Time) ([]string, error) {
	v := "values[indexOf(names, " + quote(name) + ")]"
	return c.labelStrings(ctx, "label values", from, to, v, v+" != ''")
}

func (c *ClickHouse) labelStrings(ctx context.Context, what string, from, to time.Time, expr, cond string) ([]string, error) {
	if err := checkRange(c.opts, what, from, to); err != nil {
		return nil, err
	}
	sql := "SELECT DISTINCT " + expr + " AS s FROM labelsets WHERE " + chDays(from, to) + " AND " + cond +
		" AND hash IN (SELECT labels FROM totals WHERE " + chRange(from, to) + ") ORDER BY s"
	out := []string{}
	err := c.queryRows(ctx, sql, func(r *rowReader) error {
		out = append(out, r.string())
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("query %s: %w", what, err)
	}
	return out, nil
}

// Findings returns the findings of examinations starting in [q.From, q.To)
// whose labels match q.Selector, oldest first (then by node and detector).
func (c *ClickHouse) Findings(ctx context.Context, q Query) ([]Finding, error) {
	if err := checkRange(c.opts, "findings", q.From, q.To); err != nil {
		return nil, err
	}
	cond, err := chCondition(q.Selector)
	if err != nil {
		return nil, err
	}
	limit := ""
	if c.opts.MaxFindings > 0 {
		limit = " LIMIT " + strconv.Itoa(c.opts.MaxFindings+1)
	}
	var out []Finding
	err = c.queryRows(ctx, "SELECT start, duration, detector, severity, names, values, body FROM findings WHERE "+
		chRange(q.From, q.To)+" AND "+cond+" ORDER BY start, node, detector, body"+limit, func(r *rowReader) error {
		f := Finding{Start: time.Unix(0, r.int64()), Duration: time.Duration(r.int64()), Detector: r.string(), Severity: r.string()}
		names, values := r.strings(), r.strings()
		f.Body = []byte(r.string())
		if len(names) != len(values) {
			return fmt.Errorf("finding of %d label names and %d values", len(names), len(values))
		}
		f.Labels = make(map[string]string, len(names))
		for i := range names {
			f.Labels[names[i]] = values[i]
		}
		out = append(out, f)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read findings: %w", err)
	}
	if max := c.opts.MaxFindings; max > 0 && len(out) > max {
		return nil, errTooManyFindings(max)
	}
	return out, nil
}
