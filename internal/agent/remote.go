package agent

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/flint-dev/flint/internal/profile"
	"github.com/flint-dev/flint/internal/spool"
	"github.com/flint-dev/flint/internal/store"
)

// With Options.Store set, windows go to a remote store (ClickHouse)
// through a spool in DataDir: flush puts each window, with the findings
// of its examination, into the spool and returns; the spool's sender
// writes them to the store in order. The store is opened in the
// background, so an agent whose store is unreachable, refuses its
// credentials or has the wrong schema at start still samples: the spool's
// sender logs the error once and retries (with the spool's backoff, up to
// every 30 s) until the store opens. Every error is retried, bad
// credentials and a newer schema included: a rotated secret or an upgraded
// agent fixes them without a restart, and the password file is read
// again at each try.

// remoteStore is the agent's API's view of the remote store: queries fail
// with errStoreNotOpen until the spool's sender has opened it.
type remoteStore struct {
	dsn  string
	opts store.Options
	ch   atomic.Pointer[store.ClickHouse]
}

var _ store.Reader = (*remoteStore)(nil)

// errStoreNotOpen answers queries while the remote store is not open yet.
var errStoreNotOpen = errors.New("the agent's store is not open yet (unreachable or refusing it; windows wait in the spool)")

// spoolOptions are the spool's options for o.
func spoolOptions(o Options) spool.Options {
	spo := spool.DefaultOptions(filepath.Join(o.DataDir, "spool"))
	spo.MaxBytes, spo.Logf = o.SpoolMax, o.Logf
	return spo
}

// openSpool opens the spool spo in front of the remote store o.Store.
func openSpool(o Options, spo spool.Options) (*spool.Spool, *remoteStore, error) {
	so := store.DefaultOptions()
	so.Retention = o.Retention
	compactLog := &compactLog{logf: o.Logf}
	so.OnCompactError = compactLog.report
	r := &remoteStore{dsn: o.Store, opts: so}
	sp, err := spool.Open(spo, r.connect)
	if err != nil {
		return nil, nil, err
	}
	compactLog.spool.Store(sp)
	return sp, r, nil
}

// compactLog reports the store's failed retention passes, which it
// retries every minute: once per distinct error, and not during an outage
// the spool has reported already.
type compactLog struct {
	logf  func(format string, args ...any)
	spool atomic.Pointer[spool.Spool]
	mu    sync.Mutex
	last  string
}

func (l *compactLog) report(err error) {
	if sp := l.spool.Load(); sp != nil && sp.Stats().Outage {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if msg := err.Error(); msg != l.last {
		l.last = msg
		l.logf("store retention: %v (retried every minute)", err)
	}
}

// connect opens the store; it is the spool's Connect.
func (r *remoteStore) connect(ctx context.Context) (spool.Sink, error) {
	c, err := store.OpenClickHouse(ctx, r.dsn, r.opts)
	if err != nil {
		return nil, err
	}
	r.ch.Store(c)
	return c, nil
}

func (r *remoteStore) open() (*store.ClickHouse, error) {
	if c := r.ch.Load(); c != nil {
		return c, nil
	}
	return nil, errStoreNotOpen
}

// Profile answers from the store once open.
func (r *remoteStore) Profile(ctx context.Context, q store.Query) (*profile.Profile, error) {
	c, err := r.open()
	if err != nil {
		return nil, err
	}
	return c.Profile(ctx, q)
}

// Series answers from the store once open.
func (r *remoteStore) Series(ctx context.Context, q store.SeriesQuery) (store.SeriesSet, error) {
	c, err := r.open()
	if err != nil {
		return store.SeriesSet{}, err
	}
	return c.Series(ctx, q)
}

// LabelNames answers from the store once open.
func (r *remoteStore) LabelNames(ctx context.Context, from, to time.Time) ([]string, error) {
	c, err := r.open()
	if err != nil {
		return nil, err
	}
	return c.LabelNames(ctx, from, to)
}

// LabelValues answers from the store once open.
func (r *remoteStore) LabelValues(ctx context.Context, name string, from, to time.Time) ([]string, error) {
	c, err := r.open()
	if err != nil {
		return nil, err
	}
	return c.LabelValues(ctx, name, from, to)
}

// Findings answers from the store once open.
func (r *remoteStore) Findings(ctx context.Context, q store.Query) ([]store.Finding, error) {
	c, err := r.open()
	if err != nil {
		return nil, err
	}
	return c.Findings(ctx, q)
}

// Close closes the store if it was opened; call it after the spool's
// Close, which stops the opening.
func (r *remoteStore) Close() error {
	if c := r.ch.Load(); c != nil {
		return c.Close()
	}
	return nil
}
