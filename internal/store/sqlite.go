package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/flint-dev/flint/internal/profile"
	"github.com/flint-dev/flint/internal/symbol"

	_ "modernc.org/sqlite" // registers the "sqlite" driver
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
	if err := os.MkdirAll(dir, 0o755); err != nil {
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
	// The DSN pragmas run on every new connection. auto_vacuum only takes
	// effect on a new, empty database, which is when it matters; WAL is
	// persistent once set. See docs/STORE.md for why each is set.
	const common = "_pragma=busy_timeout(10000)&_pragma=synchronous(NORMAL)&_pragma=temp_store(memory)"
	s.wdb, err = sql.Open("sqlite", s.path+"?"+common+
		"&_auto_vacuum=INCREMENTAL&_journal_mode=WAL&_txlock=immediate"+
		"&_pragma=journal_size_limit(67108864)&_pragma=cache_size(-8192)")
	if err != nil {
		return nil, err
	}
	s.wdb.SetMaxOpenConns(1)
	s.wdb.SetMaxIdleConns(1)
	s.wdb.SetConnMaxLifetime(0)
	s.wdb.SetConnMaxIdleTime(0)
	ctx := context.Background()
	if err := migrate(ctx, s.wdb, s.path); err != nil {
		return nil, err
	}
	var mode string
	if err := s.wdb.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode); err != nil {
		return nil, fmt.Errorf("read journal mode: %w", err)
	}
	if mode != "wal" {
		return nil, fmt.Errorf("%s: journal mode is %q, want wal (is the file system local?)", s.path, mode)
	}
	s.w, err = newWriter(ctx, s.wdb)
	if err != nil {
		return nil, err
	}
	s.rdb, err = sql.Open("sqlite", s.path+"?"+common+"&_pragma=query_only(1)&_pragma=cache_size(-4096)")
	if err != nil {
		return nil, err
	}
	s.rdb.SetMaxOpenConns(4)
	s.rdb.SetMaxIdleConns(4)
	if err := s.rdb.PingContext(ctx); err != nil {
		return nil, err
	}
	s.labels.m = map[int64]map[string]string{}
	s.read = readCache{
		stacks:    map[int64][]int64{},
		locations: map[int64]storedLoc{},
		functions: map[int64]symbol.Frame{},
		mappings:  map[int64]profile.Mapping{},
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
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return fmt.Errorf("write window: %w", errClosed)
	}
	if err := s.w.write(ctx, p); err != nil {
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
