package store

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"net/url"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/flint-dev/flint/internal/profile"
)

// ClickHouse is the Store for fleets: the agents of many nodes write into
// one ClickHouse database (or a cluster of shards), and flint server
// queries it. The schema, docs/STORE.md's "ClickHouse" part, is created
// or checked by OpenClickHouse. Safe for concurrent use.
type ClickHouse struct {
	dsn   chDSN
	opts  Options
	hosts []*chClient // hosts[0] takes queries and inserts; all take DDL

	mu     sync.Mutex // serialises writes and guards the fields below
	seen   daySeen
	closed bool

	stop context.CancelFunc
	done chan struct{}
	once sync.Once

	now func() time.Time // time.Now; tests move the clock
}

var _ Store = (*ClickHouse)(nil)

// chSchemaVersion is the version of the ClickHouse schema this code writes
// and reads; docs/STORE.md describes each.
const chSchemaVersion = 2

// minVersion is the oldest ClickHouse release flint is tested with.
var minVersion = [2]int{18, 16}

// OpenClickHouse connects to the ClickHouse named by dsn,
//
//	clickhouse://host:8123[,host2:8123…]/database?user=U&password=P&password_file=F&secure=1&timeout=30s&cluster=C
//
// (defaults: database flint, user default, no password, plain HTTP, 30 s),
// creates the database and the schema if they are missing and checks them
// otherwise. Several agents may open the same database at once. With
// cluster=C, every listed host gets the local tables and Distributed
// tables over the remote_servers cluster C (docs/STORE.md). Of o it uses
// Retention (whole days are dropped, in the background every
// CompactInterval), the query limits and OnCompactError; MaxSize does not
// apply. Errors are one line saying what is wrong: unreachable, not
// ClickHouse, bad credentials, a newer schema (ErrNewerSchema), a table
// that is not flint's.
func OpenClickHouse(ctx context.Context, dsn string, o Options) (*ClickHouse, error) {
	d, err := parseDSN(dsn)
	if err == nil {
		err = d.readPasswordFile()
	}
	if err != nil {
		return nil, fmt.Errorf("open clickhouse store: %w", err)
	}
	c := &ClickHouse{dsn: d, opts: o, now: time.Now, done: make(chan struct{})}
	for _, h := range d.hosts {
		cl := newClient(d, h)
		// Queries over Distributed tables read label sets on the shard
		// that holds their samples (both are sharded by node).
		if d.cluster != "" {
			cl.settings.Set("distributed_product_mode", "local")
		}
		c.hosts = append(c.hosts, cl)
	}
	for i, h := range c.hosts {
		if err := prepare(ctx, h, d, o.ReadOnly); err != nil {
			return nil, fmt.Errorf("open clickhouse store at %s: %w", d.hosts[i], err)
		}
	}
	if o.CompactInterval > 0 && !o.ReadOnly {
		var bg context.Context
		bg, c.stop = context.WithCancel(context.Background())
		go c.compactLoop(bg, o.CompactInterval)
	} else {
		close(c.done)
	}
	return c, nil
}

var versionRe = regexp.MustCompile(`^(\d+)\.(\d+)`)

// prepare checks that h is a ClickHouse flint can use and brings its
// schema to chSchemaVersion, or with readOnly checks that it is there.
func prepare(ctx context.Context, h *chClient, d chDSN, readOnly bool) error {
	db := h.database
	h.database = "" // the database may not exist yet
	var version string
	err := h.query(ctx, "SELECT version()", nil, func(r *rowReader) error {
		version = r.string()
		return nil
	})
	if err == nil && !readOnly {
		err = h.exec(ctx, "CREATE DATABASE IF NOT EXISTS "+db, nil)
	}
	h.database = db
	if err != nil {
		switch chCode(err) {
		case chUnknownUser, chWrongPassword, chRequiredPassword, chIPAddressNotAllow, chAuthFailed:
			return fmt.Errorf("clickhouse refused user %q: %w", d.user, err)
		}
		return err
	}
	m := versionRe.FindStringSubmatch(version)
	if m == nil {
		return fmt.Errorf("clickhouse version %q does not parse", version)
	}
	major, _ := strconv.Atoi(m[1])
	minor, _ := strconv.Atoi(m[2])
	if major < minVersion[0] || major == minVersion[0] && minor < minVersion[1] {
		return fmt.Errorf("clickhouse %s is older than %d.%d, the oldest flint supports", version, minVersion[0], minVersion[1])
	}
	if readOnly {
		return checkClickHouse(ctx, h, d.cluster)
	}
	return migrateClickHouse(ctx, h, d.cluster)
}

// chTable is one table of the schema.
type chTable struct {
	name    string
	columns [][2]string // name, type
	engine  string      // ENGINE clause, without the "ENGINE = "
	local   bool        // never Distributed: each server's own
}

// chTables is the schema, version chSchemaVersion. Every table but meta
// is partitioned by day, so retention drops whole partitions, and has a
// node column, the sharding key of a cluster: everything one window
// writes lands on one shard, where one INSERT per table is atomic.
var chTables = []chTable{
	{name: "meta", local: true,
		columns: [][2]string{{"version", "UInt32"}, {"written", "DateTime"}},
		engine:  "MergeTree ORDER BY version"},
	{name: "samples",
		columns: [][2]string{{"day", "Date"}, {"node", "String"}, {"start", "Int64"}, {"labels", "UInt64"}, {"stack", "UInt64"}, {"count", "UInt32"}, {"type", "UInt8"}},
		engine:  "MergeTree PARTITION BY day ORDER BY (labels, start, stack)"},
	// A window's samples summed per label set, written after them: the
	// timeline (Series) reads one row per process and window instead of
	// one per stack.
	{name: "totals",
		columns: [][2]string{{"day", "Date"}, {"node", "String"}, {"start", "Int64"}, {"labels", "UInt64"}, {"count", "UInt64"}, {"type", "UInt8"}},
		engine:  "MergeTree PARTITION BY day ORDER BY (labels, start)"},
	{name: "labelsets",
		columns: [][2]string{{"day", "Date"}, {"node", "String"}, {"hash", "UInt64"}, {"names", "Array(String)"}, {"values", "Array(String)"}},
		engine:  "ReplacingMergeTree PARTITION BY day ORDER BY hash"},
	{name: "stacks",
		columns: [][2]string{{"day", "Date"}, {"node", "String"}, {"hash", "UInt64"}, {"body", "String"}},
		engine:  "ReplacingMergeTree PARTITION BY day ORDER BY hash"},
	// CPU windows only: ordered by (node, start), an off-CPU window of the
	// same start would replace its CPU window when parts merge, and its
	// period is always 1 ns.
	{name: "windows",
		columns: [][2]string{{"day", "Date"}, {"node", "String"}, {"start", "Int64"}, {"duration", "Int64"}, {"period", "Int64"}, {"samples", "UInt64"}},
		engine:  "ReplacingMergeTree PARTITION BY day ORDER BY (node, start)"},
	{name: "findings",
		columns: [][2]string{{"day", "Date"}, {"node", "String"}, {"start", "Int64"}, {"duration", "Int64"}, {"detector", "String"},
			{"severity", "String"}, {"names", "Array(String)"}, {"values", "Array(String)"}, {"body", "String"}},
		engine: "MergeTree PARTITION BY day ORDER BY (start, node, detector)"},
}

// chAdded names the columns added after version 1, "table.column", with
// the version that added them: ALTER TABLE adds them to an older database,
// and rows written before read as the type's zero (type 0: CPU). They come
// last in chTables, where ADD COLUMN puts them.
var chAdded = map[string]uint32{"samples.type": 2, "totals.type": 2}

// dataName is the table that holds t's rows on each server: over a
// cluster, the local table under the Distributed one.
func (t chTable) dataName(cluster string) string {
	if cluster != "" && !t.local {
		return t.name + "_local"
	}
	return t.name
}

// names lists the tables that hold t over cluster: the data table, then
// the Distributed one that reads it, if any.
func (t chTable) names(cluster string) []string {
	if name := t.dataName(cluster); name != t.name {
		return []string{name, t.name}
	}
	return []string{t.name}
}

// chDDL returns the statements that create the schema in database db,
// with Distributed tables over cluster when it is not "".
func chDDL(db, cluster string) []string {
	var out []string
	for _, t := range chTables {
		cols := make([]string, len(t.columns))
		for i, c := range t.columns {
			cols[i] = c[0] + " " + c[1]
		}
		name := t.dataName(cluster)
		out = append(out, fmt.Sprintf("CREATE TABLE IF NOT EXISTS %s.%s (%s) ENGINE = %s", db, name, strings.Join(cols, ", "), t.engine))
		if name != t.name {
			out = append(out, fmt.Sprintf("CREATE TABLE IF NOT EXISTS %s.%s AS %s.%s ENGINE = Distributed(%s, %s, %s, cityHash64(node))",
				db, t.name, db, name, cluster, db, name))
		}
	}
	return out
}

// migrateClickHouse creates what is missing of the schema and checks the
// rest. Two agents doing so at once both succeed: tables are created IF
// NOT EXISTS and the version row may be written twice.
func migrateClickHouse(ctx context.Context, h *chClient, cluster string) error {
	version, err := schemaVersionOf(ctx, h)
	if err != nil {
		return err
	}
	if version > chSchemaVersion {
		return fmt.Errorf("%w: clickhouse database %s has schema version %d, this flint reads up to %d: upgrade flint or use another database",
			ErrNewerSchema, h.database, version, chSchemaVersion)
	}
	for _, q := range chDDL(h.database, cluster) {
		// Before 19.x, a table created by another client between the
		// check and the creation fails IF NOT EXISTS with "already exists".
		if err := h.exec(ctx, q, nil); err != nil && chCode(err) != chTableAlreadyExists {
			return fmt.Errorf("create schema: %w", err)
		}
	}
	if version > 0 && version < chSchemaVersion {
		if err := addColumns(ctx, h, cluster, version); err != nil {
			return err
		}
	}
	if err := checkColumns(ctx, h, cluster); err != nil {
		return err
	}
	if version < chSchemaVersion {
		var w rowWriter
		w.uint32(chSchemaVersion)
		w.uint32(uint32(time.Now().Unix()))
		if err := h.insert(ctx, "meta", w.b, nil); err != nil {
			return fmt.Errorf("write schema version: %w", err)
		}
	}
	return nil
}

// addColumns adds to a database of schema version the columns later
// versions added, to the data and the Distributed tables. Another agent
// may add one meanwhile: an ALTER that fails is an error only when the
// column is still missing.
func addColumns(ctx context.Context, h *chClient, cluster string, version uint32) error {
	have, err := columnsOf(ctx, h)
	if err != nil {
		return err
	}
	for _, t := range chTables {
		names := t.names(cluster)
		for _, c := range t.columns {
			if v, ok := chAdded[t.name+"."+c[0]]; !ok || v <= version {
				continue
			}
			for _, name := range names {
				if _, ok := have[name+"."+c[0]]; ok {
					continue
				}
				err := h.exec(ctx, fmt.Sprintf("ALTER TABLE %s.%s ADD COLUMN %s %s", h.database, name, c[0], c[1]), nil)
				if err == nil {
					continue
				}
				if now, rerr := columnsOf(ctx, h); rerr != nil || now[name+"."+c[0]] == "" {
					return fmt.Errorf("migrate schema %d to %d: add column %s.%s: %w", version, chSchemaVersion, name, c[0], err)
				}
			}
		}
	}
	return nil
}

// checkClickHouse checks, changing nothing, that the schema is the one
// this flint reads.
func checkClickHouse(ctx context.Context, h *chClient, cluster string) error {
	version, err := schemaVersionOf(ctx, h)
	switch {
	case err != nil:
		return err
	case version == 0:
		return fmt.Errorf("clickhouse database %s has no flint schema: an agent started with --store creates it", h.database)
	case version > chSchemaVersion:
		return fmt.Errorf("%w: clickhouse database %s has schema version %d, this flint reads up to %d: upgrade flint",
			ErrNewerSchema, h.database, version, chSchemaVersion)
	case version < chSchemaVersion:
		return fmt.Errorf("clickhouse database %s has schema version %d, this flint reads %d: an agent of this release upgrades it",
			h.database, version, chSchemaVersion)
	}
	return checkColumns(ctx, h, cluster)
}

// schemaVersionOf reads the schema version; 0 when there is no schema
// (or no database).
func schemaVersionOf(ctx context.Context, h *chClient) (uint32, error) {
	var v uint64
	err := h.query(ctx, "SELECT toUInt64(max(version)) FROM meta", nil, func(r *rowReader) error {
		v = r.uint64()
		return nil
	})
	if code := chCode(err); code == chUnknownTable || code == chUnknownDatabase {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("read schema version: %w", err)
	}
	if v > math.MaxUint32 {
		return 0, fmt.Errorf("schema version %d is not a version", v)
	}
	return uint32(v), nil
}

// columnsOf returns the type of every column of h's database by
// "table.column".
func columnsOf(ctx context.Context, h *chClient) (map[string]string, error) {
	have := map[string]string{}
	err := h.query(ctx, "SELECT table, name, type FROM system.columns WHERE database = "+quote(h.database), nil, func(r *rowReader) error {
		t, n, typ := r.string(), r.string(), r.string()
		have[t+"."+n] = typ
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read schema: %w", err)
	}
	return have, nil
}

// checkColumns checks that every table has the columns flint writes, with
// their types: a table of the same name made by something else fails here
// rather than at the first insert.
func checkColumns(ctx context.Context, h *chClient, cluster string) error {
	have, err := columnsOf(ctx, h)
	if err != nil {
		return err
	}
	for _, t := range chTables {
		for _, name := range t.names(cluster) {
			for _, c := range t.columns {
				typ, ok := have[name+"."+c[0]]
				switch {
				case !ok:
					return fmt.Errorf("clickhouse table %s.%s has no column %s: it is not flint's schema version %d; drop it or use another database",
						h.database, name, c[0], chSchemaVersion)
				case typ != c[1]:
					return fmt.Errorf("clickhouse column %s.%s.%s is %s, flint's schema version %d has %s; drop it or use another database",
						h.database, name, c[0], typ, chSchemaVersion, c[1])
				}
			}
		}
	}
	return nil
}

func (c *ClickHouse) compactLoop(ctx context.Context, every time.Duration) {
	defer close(c.done)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		if err := c.Compact(ctx); err != nil && ctx.Err() == nil && c.opts.OnCompactError != nil {
			c.opts.OnCompactError(err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Compact drops, on every host, the days that ended more than
// Options.Retention ago: a window is kept for at least Retention and at
// most a day longer. Idempotent, so several agents may run it; the
// background goroutine OpenClickHouse starts calls it every
// Options.CompactInterval.
func (c *ClickHouse) Compact(ctx context.Context) error {
	if c.opts.Retention <= 0 || c.opts.ReadOnly {
		return nil
	}
	// Day d ends at (d+1)·24h; drop it when that is before now − Retention.
	cutoff := dayOf(c.now().Add(-c.opts.Retention)) // days before it are expired
	for i, h := range c.hosts {
		if err := c.dropBefore(ctx, h, cutoff); err != nil {
			return fmt.Errorf("drop expired days at %s: %w", c.dsn.hosts[i], err)
		}
	}
	return nil
}

func (c *ClickHouse) dropBefore(ctx context.Context, h *chClient, cutoff uint16) error {
	var tables []string
	for _, t := range chTables {
		if t.name != "meta" { // the only table without days
			tables = append(tables, t.dataName(c.dsn.cluster))
		}
	}
	type part struct {
		table string
		day   uint16
	}
	var parts []part
	err := h.query(ctx, "SELECT DISTINCT table, min_date FROM system.parts WHERE active AND database = "+quote(h.database)+
		" AND table IN ("+quoteJoin(tables)+") AND min_date < "+dateLit(cutoff), nil,
		func(r *rowReader) error {
			p := part{table: r.string()}
			if b := r.take(2); b != nil {
				p.day = uint16(b[0]) | uint16(b[1])<<8
			}
			parts = append(parts, p)
			return nil
		})
	if err != nil {
		return err
	}
	for _, p := range parts {
		q := fmt.Sprintf("ALTER TABLE %s.%s DROP PARTITION %s", h.database, p.table, quote(dayString(p.day)))
		if err := h.exec(ctx, q, nil); err != nil {
			return err
		}
	}
	return nil
}

// dayOf is t's UTC day as a ClickHouse Date: days since 1970-01-01.
func dayOf(t time.Time) uint16 {
	d := t.Unix() / 86400
	if t.Unix() < 0 {
		return 0
	}
	return uint16(min(d, math.MaxUint16))
}

func dayString(d uint16) string {
	return time.Unix(int64(d)*86400, 0).UTC().Format("2006-01-02")
}

// dateLit is day as a Date literal.
func dateLit(d uint16) string { return "toDate('" + dayString(d) + "')" }

// Close stops the background retention; safe to call twice. Everything a
// write returned nil for is in ClickHouse already.
func (c *ClickHouse) Close() error {
	c.once.Do(func() {
		if c.stop != nil {
			c.stop()
		}
		<-c.done
		c.mu.Lock()
		c.closed = true
		c.mu.Unlock()
	})
	return nil
}

// daySeen remembers the label sets and stacks this process wrote for one
// day, so a window writes only new ones. Other agents write theirs too:
// the tables are ReplacingMergeTree and readers group by hash, so a
// duplicate costs a little space until merged, never a wrong answer.
type daySeen struct {
	day            uint16
	labels, stacks map[uint64]struct{}
}

// maxSeen bounds each set of daySeen; a full set is cleared, which costs
// rewriting some rows.
const maxSeen = 1 << 20

func (d *daySeen) reset(day uint16) {
	if d.day != day || d.labels == nil {
		d.day = day
		d.labels = map[uint64]struct{}{}
		d.stacks = map[uint64]struct{}{}
	}
}

// Write stores one window; see WriteWindow.
func (c *ClickHouse) Write(ctx context.Context, p *profile.Profile) error {
	return c.WriteWindow(ctx, p, nil, false)
}

// WriteFindings stores the findings of one examination in one INSERT.
func (c *ClickHouse) WriteFindings(ctx context.Context, fs []Finding) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return fmt.Errorf("write findings: %w", errClosed)
	}
	if err := c.writeFindings(ctx, fs, false); err != nil {
		return fmt.Errorf("write findings: %w", err)
	}
	return nil
}

// WriteWindow stores window p and the findings fs of examining it (fs may
// be nil). The samples are one INSERT, the window's commit point: when it
// fails nothing of the window is visible to queries, and the findings are
// another. With resend, p and fs may have been stored already by a call
// whose answer was lost (a timeout, a restarted server): WriteWindow then
// first checks what is there and writes only what is not, so a window is
// never counted twice. Over a cluster the checks see the write because
// inserts are synchronous (insert_distributed_sync).
func (c *ClickHouse) WriteWindow(ctx context.Context, p *profile.Profile, fs []Finding, resend bool) error {
	if p == nil {
		return errors.New("write window: nil profile")
	}
	if err := checkWriteKind(p); err != nil {
		return fmt.Errorf("write window: %w", err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return fmt.Errorf("write window: %w", errClosed)
	}
	if err := c.writeWindow(ctx, p, resend); err != nil {
		return fmt.Errorf("write window at %s: %w", p.Start.UTC().Format(time.RFC3339Nano), err)
	}
	if err := c.writeFindings(ctx, fs, resend); err != nil {
		return fmt.Errorf("write findings of window at %s: %w", p.Start.UTC().Format(time.RFC3339Nano), err)
	}
	return nil
}

// insertSettings make an INSERT into a Distributed table return only
// once every shard has the rows, so that a resend's check sees them.
var insertSettings = url.Values{"insert_distributed_sync": {"1"}}

// checkTime refuses times a Date cannot hold (1970 to 2149).
func checkTime(t time.Time) error {
	if t.Unix() < 0 || t.Unix()/86400 > math.MaxUint16 {
		return fmt.Errorf("time %s is outside 1970 to 2149, the range of a ClickHouse Date", t.UTC().Format(time.RFC3339))
	}
	return nil
}

type sampleRow struct {
	labels, stack uint64
	count         int64
}

func (c *ClickHouse) writeWindow(ctx context.Context, p *profile.Profile, resend bool) error {
	if err := checkTime(p.Start); err != nil {
		return err
	}
	day := dayOf(p.Start)
	c.seen.reset(day)
	start := p.Start.UnixNano()

	var labels, stacks rowWriter
	newLabels := map[uint64]bool{}
	newStacks := map[uint64]bool{}
	counts := map[sampleRow]int64{}
	nodeOf := map[uint64]string{} // label set → node
	var node string               // the window's node: its first sample's
	var total int64
	var buf []byte
	var names []string
	// Samples of one process share one labels map: hash it once.
	type labelSet struct {
		hash, nodeHash uint64
		node           string
	}
	labelSets := map[unsafe.Pointer]labelSet{}
	for i, s := range p.Samples {
		if s.Count < 0 {
			return fmt.Errorf("sample %d has count %d", i, s.Count)
		}
		if s.Count == 0 {
			continue
		}
		ptr := reflect.ValueOf(s.Labels).UnsafePointer()
		ls, ok := labelSets[ptr]
		if !ok || ptr == nil {
			buf, names = appendLabels(buf[:0], s.Labels, names)
			n := s.Labels[profile.LabelNode]
			ls = labelSet{hash: uint64(hash64(buf)), nodeHash: uint64(hash64([]byte(n))), node: n}
			labelSets[ptr] = ls
		}
		lh, n := ls.hash, ls.node
		if node == "" {
			node = n
		}
		// A label set new here was hashed just above: names are its.
		if _, ok := c.seen.labels[lh]; !ok && !newLabels[lh] {
			newLabels[lh] = true
			labels.date(day)
			labels.string(n)
			labels.uint64(lh)
			vals := make([]string, len(names))
			for j, k := range names {
				vals[j] = s.Labels[k]
			}
			labels.strings(names)
			labels.strings(vals)
		}
		nodeOf[lh] = n
		buf = profile.AppendStack(buf[:0], s.Stack)
		sh := uint64(hash64(buf))
		// Over a cluster a node's stacks must be on its shard: remember
		// them per node. (A label set names its node already.)
		seenKey := sh ^ ls.nodeHash
		if _, ok := c.seen.stacks[seenKey]; !ok && !newStacks[seenKey] {
			newStacks[seenKey] = true
			stacks.date(day)
			stacks.string(n)
			stacks.uint64(sh)
			stacks.string(string(buf))
		}
		counts[sampleRow{labels: lh, stack: sh}] += s.Count
		total += s.Count
	}
	var stored windowState
	if resend {
		var err error
		if stored, err = c.windowStored(ctx, day, start, p.Kind, nodeOf); err != nil {
			return err
		}
	}

	rows := make([]sampleRow, 0, len(counts))
	for k, n := range counts {
		// A count beyond a UInt32 (4.3 s off the CPU, of one stack's
		// threads in one window) takes several rows: queries sum them.
		for ; n > math.MaxUint32; n -= math.MaxUint32 {
			rows = append(rows, sampleRow{labels: k.labels, stack: k.stack, count: math.MaxUint32})
		}
		k.count = n
		rows = append(rows, k)
	}
	// In the table's order: the server sorts less.
	slices.SortFunc(rows, func(a, b sampleRow) int {
		if a.labels != b.labels {
			return cmp.Compare(a.labels, b.labels)
		}
		return cmp.Compare(a.stack, b.stack)
	})
	var samples, totals rowWriter
	var labelTotal int64
	for i, r := range rows {
		samples.date(day)
		samples.string(nodeOf[r.labels])
		samples.int64(start)
		samples.uint64(r.labels)
		samples.uint64(r.stack)
		samples.uint32(uint32(r.count))
		samples.uint8(uint8(p.Kind))
		// rows are sorted by label set: its total ends with its last row.
		labelTotal += r.count
		if i == len(rows)-1 || rows[i+1].labels != r.labels {
			totals.date(day)
			totals.string(nodeOf[r.labels])
			totals.int64(start)
			totals.uint64(r.labels)
			totals.uint64(uint64(labelTotal))
			totals.uint8(uint8(p.Kind))
			labelTotal = 0
		}
	}
	var window rowWriter
	if p.Kind == profile.CPU {
		window.date(day)
		window.string(node)
		window.int64(start)
		window.int64(int64(p.Duration))
		window.int64(int64(p.Period))
		window.uint64(uint64(total))
	}

	// The samples are the window's commit point; its totals follow. A
	// resend writes what the lost attempt did not.
	h := c.hosts[0]
	for _, ins := range []struct {
		table string
		rows  []byte
		done  bool
	}{{"labelsets", labels.b, stored.samples}, {"stacks", stacks.b, stored.samples}, {"windows", window.b, stored.samples},
		{"samples", samples.b, stored.samples}, {"totals", totals.b, stored.totals}} {
		if len(ins.rows) == 0 || ins.done {
			continue
		}
		if err := h.insert(ctx, ins.table, ins.rows, insertSettings); err != nil {
			return fmt.Errorf("insert into %s: %w", ins.table, err)
		}
	}
	for lh := range newLabels {
		putBounded(c.seen.labels, maxSeen, lh, struct{}{})
	}
	for sh := range newStacks {
		putBounded(c.seen.stacks, maxSeen, sh, struct{}{})
	}
	return nil
}

// windowState is what an earlier attempt stored of a window.
type windowState struct{ samples, totals bool }

// windowStored reports which of the samples and totals of the window of
// type kind starting at start with these label sets are stored. Each
// INSERT is atomic, so any row of one means all of them.
func (c *ClickHouse) windowStored(ctx context.Context, day uint16, start int64, kind profile.Kind, labelSets map[uint64]string) (windowState, error) {
	if len(labelSets) == 0 {
		return windowState{}, nil
	}
	hs := make([]string, 0, len(labelSets))
	for h := range labelSets {
		hs = append(hs, strconv.FormatUint(h, 10))
	}
	var st windowState
	for _, t := range []struct {
		table  string
		stored *bool
	}{{"samples", &st.samples}, {"totals", &st.totals}} {
		q := fmt.Sprintf("SELECT count() FROM %s WHERE day = %s AND start = %d AND type = %d AND labels IN (%s)",
			t.table, dateLit(day), start, kind, strings.Join(hs, ","))
		err := c.queryRows(ctx, q, func(r *rowReader) error {
			*t.stored = r.uint64() > 0
			return nil
		})
		if err != nil {
			return windowState{}, fmt.Errorf("check for an earlier write: %w", err)
		}
	}
	return st, nil
}

// writeFindings inserts fs in one INSERT; with resend, not if the first
// of them is stored already.
func (c *ClickHouse) writeFindings(ctx context.Context, fs []Finding, resend bool) error {
	if len(fs) == 0 {
		return nil
	}
	var w rowWriter
	var names []string
	for _, f := range fs {
		if err := checkTime(f.Start); err != nil {
			return err
		}
		names = names[:0]
		for k := range f.Labels {
			names = append(names, k)
		}
		slices.Sort(names)
		vals := make([]string, len(names))
		for i, k := range names {
			vals[i] = f.Labels[k]
		}
		w.date(dayOf(f.Start))
		w.string(f.Labels[profile.LabelNode])
		w.int64(f.Start.UnixNano())
		w.int64(int64(f.Duration))
		w.string(f.Detector)
		w.string(f.Severity)
		w.strings(names)
		w.strings(vals)
		w.string(string(f.Body))
	}
	if resend {
		f := fs[0]
		q := fmt.Sprintf("SELECT count() FROM findings WHERE day = %s AND start = %d AND node = %s AND detector = %s AND body = %s",
			dateLit(dayOf(f.Start)), f.Start.UnixNano(), quote(f.Labels[profile.LabelNode]), quote(f.Detector), quote(string(f.Body)))
		var n uint64
		// The body is in the query, which queryRows lets be longer than
		// ClickHouse's default limit.
		err := c.queryRows(ctx, q, func(r *rowReader) error {
			n = r.uint64()
			return nil
		})
		if err != nil {
			return fmt.Errorf("check for an earlier write: %w", err)
		}
		if n > 0 {
			return nil
		}
	}
	return c.hosts[0].insert(ctx, "findings", w.b, insertSettings)
}
