package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"modernc.org/sqlite" // registers the "sqlite" driver
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/flint-dev/flint/internal/profile"
	"github.com/flint-dev/flint/internal/symbol"
)

// Options configures the SQLite store. The zero value has no retention, no
// size limit, no query limits and no background compaction; start from
// DefaultOptions.
type Options struct {
	// Retention is how long a window is kept, counted from its start; older
	// windows are dropped by compaction. Default 7 days; 0 keeps windows
	// forever.
	Retention time.Duration
	// MaxSize is the size in bytes of the database files (flint.db, its
	// -wal and -shm) above which compaction drops the oldest windows until
	// the data fits in 90% of it. Default 1 GiB; 0 means no limit.
	MaxSize int64
	// MaxQueryRange is the longest To - From a query may span; a longer one
	// fails with ErrTooLarge. Default 31 days; 0 means no limit.
	MaxQueryRange time.Duration
	// MaxStacks is the most distinct samples (stack × kept labels) a
	// Profile query returns before failing with ErrTooLarge. Default
	// 200,000; 0 means no limit.
	MaxStacks int
	// MaxSeriesPoints is the most points a Series query returns, summed
	// over all series (steps × series); beyond it the query fails with
	// ErrTooLarge. Default 100,000; 0 means no limit.
	MaxSeriesPoints int
	// MaxFindings is the most findings a Findings query returns; beyond it
	// the query fails with ErrTooLarge. Default 10,000; 0 means no limit.
	MaxFindings int
	// CompactInterval is how often a background goroutine runs Compact
	// (retention, size limit, garbage collection). Default 1 minute; 0
	// starts no goroutine, and the caller runs Compact itself.
	CompactInterval time.Duration
	// OnCompactError, if set, receives each error of a background
	// compaction (a failed compaction is retried at the next interval). Nil
	// ignores them; the next Write that fails for the same reason reports it.
	OnCompactError func(error)
	// Logf, if set, receives one line for each thing the store repaired
	// on its own: a data directory or file readable by others made
	// private, a corrupt database moved aside. Nil discards them.
	Logf func(format string, args ...any)
	// ReadOnly, for ClickHouse only, opens an existing schema for queries:
	// it is checked, never created or changed, and Compact drops nothing,
	// so a user that may only read (and set query settings: readonly=2)
	// suffices. flint server opens its store so; the agents create the
	// schema and apply retention.
	ReadOnly bool
}

// DefaultOptions returns the options flint's agent uses.
func DefaultOptions() Options {
	return Options{
		Retention:       7 * 24 * time.Hour,
		MaxSize:         1 << 30,
		MaxQueryRange:   31 * 24 * time.Hour,
		MaxStacks:       200_000,
		MaxSeriesPoints: 100_000,
		MaxFindings:     10_000,
		CompactInterval: time.Minute,
	}
}

// DBFile is the name of the database file inside the data directory;
// SQLite adds DBFile+"-wal" and DBFile+"-shm" beside it.
const DBFile = "flint.db"

// SQLite is the embedded Store: one SQLite database in WAL mode in a data
// directory that one process at a time may open. Writes are serialised on
// one connection; queries run in parallel on others, each in its own
// read transaction, so a query sees whole windows only.
type SQLite struct {
	dir  string
	path string
	opts Options
	lock *dirLock

	wdb *sql.DB // one connection: SQLite has one writer at a time
	rdb *sql.DB // query_only connections for queries

	// rmu is held for reading by each query, and for writing when a
	// corrupt database is replaced under it (with mu held too).
	rmu sync.RWMutex

	mu        sync.Mutex // guards the write connection and the fields below
	w         *writer
	closed    bool
	gcPending bool      // windows were dropped since the last collection
	lastGC    time.Time // when rows were last collected

	labels labelCache // decoded label sets for queries
	read   readCache  // decoded stacks, locations, functions, mappings

	stop     context.CancelFunc
	done     chan struct{}
	closeErr error
	once     sync.Once

	now func() time.Time // time.Now; tests move the clock
}

var _ Store = (*SQLite)(nil)

var errClosed = errors.New("store is closed")

// Open opens or creates the store in dir (created with its parents if
// needed) and takes the directory's lock; a directory another process or
// another Open holds fails with ErrLocked. A database written by a newer
// flint fails with ErrNewerSchema.
func Open(dir string, o Options) (*SQLite, error) {
	s, err := open(dir, o)
	if err != nil {
		return nil, fmt.Errorf("open store: %w", err)
	}
	return s, nil
}

func open(dir string, o Options) (_ *SQLite, err error) {
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
	if err := privateDir(dir, o.Logf); err != nil {
		return nil, err
	}
	lock, err := lockDir(dir)
	if err != nil {
		return nil, err
	}
	s := &SQLite{
		dir:  dir,
		path: filepath.Join(dir, DBFile),
		opts: o,
		lock: lock,
		now:  time.Now,
	}
	defer func() {
		if err != nil {
			s.closeDBs()
			lock.release()
		}
	}()
	ctx := context.Background()
	s.resetCaches()
	if err := s.openDBs(ctx); err != nil {
		if !isCorrupt(err) {
			return nil, err
		}
		if err := s.setAside(ctx, err); err != nil {
			return nil, err
		}
	}
	s.done = make(chan struct{})
	if o.CompactInterval > 0 {
		var bg context.Context
		bg, s.stop = context.WithCancel(context.Background())
		go s.compactLoop(bg, o.CompactInterval)
	} else {
		close(s.done)
	}
	return s, nil
}

// openDBs opens the write and read connections to s.path, creating the
// database if there is none, after checking that it is whole.
func (s *SQLite) openDBs(ctx context.Context) (err error) {
	if err := privateFiles(s.path, s.opts.Logf); err != nil {
		return err
	}
	if err := quickCheck(ctx, s.path); err != nil {
		return err
	}
	// The DSN pragmas run on every new connection. auto_vacuum only takes
	// effect on a new, empty database, which is when it matters; WAL is
	// persistent once set. See docs/STORE.md for why each is set.
	const common = "_pragma=busy_timeout(10000)&_pragma=synchronous(NORMAL)&_pragma=temp_store(memory)"
	s.wdb, err = sql.Open("sqlite", s.path+"?"+common+
		"&_auto_vacuum=INCREMENTAL&_journal_mode=WAL&_txlock=immediate"+
		"&_pragma=journal_size_limit(67108864)&_pragma=cache_size(-8192)"+
		"&_pragma=wal_autocheckpoint("+strconv.Itoa(autoCheckpointPages(s.opts.MaxSize))+")")
	if err != nil {
		return err
	}
	s.wdb.SetMaxOpenConns(1)
	s.wdb.SetMaxIdleConns(1)
	s.wdb.SetConnMaxLifetime(0)
	s.wdb.SetConnMaxIdleTime(0)
	if err := migrate(ctx, s.wdb, s.path); err != nil {
		return err
	}
	var mode string
	if err := s.wdb.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode); err != nil {
		return fmt.Errorf("read journal mode: %w", err)
	}
	if mode != "wal" {
		return fmt.Errorf("%s: journal mode is %q, want wal (is the file system local?)", s.path, mode)
	}
	s.w, err = newWriter(ctx, s.wdb)
	if err != nil {
		return err
	}
	s.rdb, err = sql.Open("sqlite", s.path+"?"+common+"&_pragma=query_only(1)&_pragma=cache_size(-4096)")
	if err != nil {
		return err
	}
	s.rdb.SetMaxOpenConns(4)
	s.rdb.SetMaxIdleConns(4)
	return s.rdb.PingContext(ctx)
}

// resetCaches empties the caches of decoded rows: ids mean other rows in
// a new database.
func (s *SQLite) resetCaches() {
	s.labels.mu.Lock()
	s.labels.m = map[int64]map[string]string{}
	s.labels.mu.Unlock()
	s.read.mu.Lock()
	s.read.stacks = map[int64][]int64{}
	s.read.locations = map[int64]storedLoc{}
	s.read.functions = map[int64]symbol.Frame{}
	s.read.mappings = map[int64]profile.Mapping{}
	s.read.mu.Unlock()
}

// autoCheckpointPages is how many pages the WAL grows to before SQLite
// checkpoints it, for a store of maxSize bytes (0: no limit). A checkpoint
// writes each page in the WAL once, and syncs. A window of new processes
// dirties about a page of a hash index for each row it adds, over a
// thousand in a large store, so at SQLite's default of 1000 pages every
// such window was checkpointed; at 16,384 pages (64 MiB) storing a new
// process cost 17% less (BenchmarkWriteNewProcs over 2,000 windows,
// docs/BENCHMARKS.md). Compaction's checkpoint, every CompactInterval,
// comes first when sooner (in the agent, every minute). The WAL counts
// towards maxSize: it is meant to take no more than a sixteenth of it,
// and never checkpoints sooner than at SQLite's default.
func autoCheckpointPages(maxSize int64) int {
	const pageSize, fewest, most = 4096, 1000, 16384
	if maxSize <= 0 {
		return most
	}
	return int(min(max(maxSize/16/pageSize, fewest), most))
}

// errDamaged reports a database that PRAGMA quick_check finds damaged.
var errDamaged = errors.New("database is damaged")

// quickCheck runs PRAGMA quick_check: every page and index entry is read
// and checked for consistency, without matching indexes to their tables
// (integrity_check's far slower part). It reads the whole file: 53 ms of
// CPU for the 17.8 MB 24 h benchmark store, some 3 s for a 1 GB store
// (docs/BENCHMARKS.md).
// It runs on a connection of its own that only reads, without the store's
// connection settings, so that a damaged file is set aside as it was.
func quickCheck(ctx context.Context, path string) error {
	db, err := sql.Open("sqlite", path+"?_pragma=busy_timeout(10000)&_pragma=query_only(1)")
	if err != nil {
		return fmt.Errorf("check database: %w", err)
	}
	defer db.Close()
	rows, err := db.QueryContext(ctx, "PRAGMA quick_check(1)")
	if err != nil {
		return fmt.Errorf("check database: %w", err)
	}
	defer rows.Close()
	var first string // quick_check(1) stops at the first problem
	if rows.Next() {
		if err := rows.Scan(&first); err != nil {
			return fmt.Errorf("check database: %w", err)
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("check database: %w", err)
	}
	if first != "ok" {
		return fmt.Errorf("%w: %s", errDamaged, first)
	}
	return nil
}

// isCorrupt reports whether err says the database file is damaged or not
// a database at all, rather than busy, full or closed.
func isCorrupt(err error) bool {
	var e *sqlite.Error
	if errors.As(err, &e) {
		switch e.Code() & 0xff { // the primary code of an extended one
		case sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB:
			return true
		}
	}
	return errors.Is(err, errDamaged)
}

// SalvageCommand is the shell command that copies what can still be read
// of the damaged database file from into a new database file to, which
// Open accepts as its DBFile. sqlite3's .dump skips the damaged pages but
// ends with ROLLBACK when it met any; COMMIT keeps the rest (.recover, its
// intended tool, fails on flint's stores in sqlite3 3.40).
func SalvageCommand(from, to string) string {
	return fmt.Sprintf("sqlite3 %s .dump | sed '$s/^ROLLBACK.*/COMMIT;/' | sqlite3 %s", from, to)
}

// setAside moves the corrupt database (with its -wal and -shm, which
// recovery needs) to DBFile.corrupt-TIME, says so through Logf, and
// opens a new, empty store in its place. Callers hold mu, or own s.
func (s *SQLite) setAside(ctx context.Context, cause error) error {
	s.rmu.Lock()
	defer s.rmu.Unlock()
	s.closeDBs()
	s.w, s.wdb, s.rdb = nil, nil, nil
	aside := s.path + ".corrupt-" + s.now().UTC().Format("20060102T150405Z")
	for i := 2; ; i++ {
		if _, err := os.Lstat(aside); errors.Is(err, fs.ErrNotExist) {
			break
		}
		aside = fmt.Sprintf("%s.corrupt-%s-%d", s.path, s.now().UTC().Format("20060102T150405Z"), i)
	}
	for _, suffix := range []string{"", "-wal", "-shm"} {
		if err := os.Rename(s.path+suffix, aside+suffix); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("move corrupt database %s aside (%v): %w", s.path, cause, err)
		}
	}
	s.opts.Logf("store: %s is corrupt (%v): kept as %s, writing to a new, empty store; to salvage what it holds "+
		"(docs/STORE.md): %s", s.path, cause, aside, SalvageCommand(aside, aside+".recovered"))
	s.resetCaches()
	return s.openDBs(ctx)
}

func (s *SQLite) compactLoop(ctx context.Context, every time.Duration) {
	defer close(s.done)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		// Compact at once too: an agent restarted after a long stop has
		// expired windows to drop.
		if err := s.Compact(ctx); err != nil && ctx.Err() == nil && s.opts.OnCompactError != nil {
			s.opts.OnCompactError(err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Close stops background compaction, waits for running queries and
// releases the database and the directory lock; safe to call twice.
// Everything Write returned nil for is already durable against a process
// crash (see docs/STORE.md), so Close has nothing to flush.
func (s *SQLite) Close() error {
	s.once.Do(func() {
		if s.stop != nil {
			s.stop()
		}
		<-s.done
		s.mu.Lock()
		s.closed = true
		s.mu.Unlock()
		s.closeErr = s.closeDBs()
		if err := s.lock.release(); err != nil && s.closeErr == nil {
			s.closeErr = err
		}
		if s.closeErr != nil {
			s.closeErr = fmt.Errorf("close store: %w", s.closeErr)
		}
	})
	return s.closeErr
}

func (s *SQLite) closeDBs() error {
	var errs []error
	if s.w != nil {
		errs = append(errs, s.w.close())
	}
	if s.rdb != nil {
		errs = append(errs, s.rdb.Close())
	}
	if s.wdb != nil {
		errs = append(errs, s.wdb.Close())
	}
	return errors.Join(errs...)
}

// Write stores one window in one transaction: when it returns nil the
// window survives a crash of the process; when it fails (disk full, say)
// nothing of the window is stored and the store stays usable.
func (s *SQLite) Write(ctx context.Context, p *profile.Profile) error {
	if p == nil {
		return errors.New("write window: nil profile")
	}
	if err := checkWriteKind(p); err != nil {
		return fmt.Errorf("write window: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return fmt.Errorf("write window: %w", errClosed)
	}
	err := s.w.write(ctx, p)
	if isCorrupt(err) {
		// Keep the damaged file for salvage and the window in a new one.
		if err = s.setAside(ctx, err); err == nil {
			err = s.w.write(ctx, p)
		} else {
			s.closed = true // no database left to use
		}
	}
	if err != nil {
		return fmt.Errorf("write window at %s: %w", p.Start.UTC().Format(time.RFC3339Nano), err)
	}
	return nil
}

// labelCache holds decoded label sets by id for queries. Ids are never
// reused (AUTOINCREMENT), so an entry never goes stale; the cache is
// dropped when it grows past labelCacheMax.
type labelCache struct {
	mu sync.Mutex
	m  map[int64]map[string]string
}

const labelCacheMax = 1 << 16

func (c *labelCache) get(id int64) (map[string]string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	l, ok := c.m[id]
	return l, ok
}

func (c *labelCache) put(id int64, l map[string]string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.m) >= labelCacheMax {
		clear(c.m)
	}
	c.m[id] = l
}
