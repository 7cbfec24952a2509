// Package spool keeps windows on local disk until a remote store has them.
//
// The agent puts every window (with the findings of its examination) into
// the spool, and a sender writes them to the store, oldest first, strictly
// in order. A window survives a store that is down or slow, and a crash of
// the agent: Put returns once the window is durable on disk, and a file is
// deleted only after the store accepted it. A window may therefore reach
// the store twice (sent, then the agent dies before deleting it); the
// sender says so (resend) and the store's idempotent write keeps one copy.
// The spool is bounded: a Put that would exceed Options.MaxBytes drops the
// oldest windows and counts them.
//
//	sp, err := spool.Open(spool.DefaultOptions(dir), connect)
//	...
//	err = sp.Put(window, findings) // durable when it returns
//	...
//	sp.Drain(ctx) // optional: wait until the store has everything
//	sp.Close()    // what is not sent stays for the next Open
package spool

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/flint-dev/flint/internal/profile"
	"github.com/flint-dev/flint/internal/store"
)

// Sink is the store the spool sends windows to.
type Sink interface {
	// WriteWindow stores one window and its findings. resend is true when
	// an earlier attempt may have stored them already (its answer was
	// lost, or the agent died before it could delete the file): the sink
	// must then keep one copy, not two.
	WriteWindow(ctx context.Context, p *profile.Profile, fs []store.Finding, resend bool) error
}

// Connect opens the sink. The sender calls it until it succeeds, with the
// same backoff as failed sends, so a store that cannot be opened at start
// (unreachable, bad credentials, wrong schema) is retried in the
// background while windows wait in the spool.
type Connect func(ctx context.Context) (Sink, error)

// Options configure a spool.
type Options struct {
	// Dir holds the window files; created if missing.
	Dir string
	// MaxBytes bounds the files' total size; a Put beyond it drops the
	// oldest windows. Must be positive.
	MaxBytes int64
	// SendTimeout bounds one attempt to connect or send a window, so a
	// store that hangs cannot stop the queue.
	SendTimeout time.Duration
	// MinBackoff is the wait after the first failed attempt; it doubles
	// after each further failure up to MaxBackoff.
	MinBackoff, MaxBackoff time.Duration
	// Logf reports the start and end of an outage, and drops; nil
	// discards.
	Logf func(format string, args ...any)
}

// DefaultOptions are the agent's: 256 MiB, attempts of at most 30 s,
// retries after 1 s doubling to 30 s.
func DefaultOptions(dir string) Options {
	return Options{Dir: dir, MaxBytes: 256 << 20, SendTimeout: 30 * time.Second, MinBackoff: time.Second, MaxBackoff: 30 * time.Second}
}

// ErrTooLarge reports a window larger than the whole spool.
var ErrTooLarge = errors.New("window larger than the spool")

// Stats are the spool's gauges and counters since Open.
type Stats struct {
	// Windows and Bytes are what the spool holds now.
	Windows int
	Bytes   int64
	// Oldest is the start of the oldest window held; zero when empty.
	Oldest time.Time
	// Sent counts windows the sink accepted; SendFailures the attempts
	// (connects included) that failed.
	Sent, SendFailures int64
	// DroppedWindows and DroppedBytes count windows dropped to stay under
	// MaxBytes.
	DroppedWindows, DroppedBytes int64
	// Corrupt counts files that could not be read, set aside as *.corrupt.
	Corrupt int64
	// Outage is true from a failed attempt until the spool has caught up.
	Outage bool
}

// entry is one window file.
type entry struct {
	name   string
	size   int64
	start  time.Time
	resend bool // found at Open: a crash may have come after the store had it
}

// Spool is an open spool; its methods are safe for concurrent use.
type Spool struct {
	o    Options
	lock *os.File

	putMu sync.Mutex // one Put at a time: sequence numbers in file order

	mu       sync.Mutex
	queue    []*entry // oldest first
	bytes    int64
	seq      uint64
	inFlight *entry        // being sent; never dropped
	changed  chan struct{} // closed and replaced on every change
	outage   outage
	stats    Stats // counters only; the gauges come from queue

	cancel    func()        // stops the sender
	done      chan struct{} // closed when the sender returns
	closeOnce sync.Once
	closeErr  error
}

// Open opens the spool in o.Dir, removes what an interrupted Put left,
// and starts the sender, which connects and then sends the windows found
// (marked as resends) and every window Put later.
func Open(o Options, connect Connect) (*Spool, error) {
	if o.MaxBytes <= 0 {
		return nil, fmt.Errorf("open spool: MaxBytes %d must be positive", o.MaxBytes)
	}
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
	if err := os.MkdirAll(o.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("open spool: %w", err)
	}
	lock, err := lockDir(o.Dir)
	if err != nil {
		return nil, err
	}
	s := &Spool{o: o, lock: lock, changed: make(chan struct{}), done: make(chan struct{})}
	if err := s.load(); err != nil {
		lock.Close()
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	go s.run(ctx, connect)
	return s, nil
}

// load lists the window files left by earlier runs and removes temporary
// files: a Put that did not reach its rename never returned, so nobody was
// told that window was kept.
func (s *Spool) load() error {
	des, err := os.ReadDir(s.o.Dir)
	if err != nil {
		return fmt.Errorf("open spool: %w", err)
	}
	for _, de := range des {
		name := de.Name()
		if strings.HasSuffix(name, tmpSuffix) {
			if err := os.Remove(filepath.Join(s.o.Dir, name)); err != nil {
				return fmt.Errorf("open spool: remove unfinished window: %w", err)
			}
			continue
		}
		seq, start, ok := parseName(name)
		if !ok {
			continue
		}
		fi, err := de.Info()
		if err != nil {
			return fmt.Errorf("open spool: %w", err)
		}
		s.queue = append(s.queue, &entry{name: name, size: fi.Size(), start: start, resend: true})
		s.bytes += fi.Size()
		s.seq = max(s.seq, seq+1)
	}
	// ReadDir sorts by name, which is put order.
	return nil
}

// Put stores a window and the findings of its examination durably and
// queues it for the sender. When the spool would exceed MaxBytes it drops
// the oldest windows not being sent; a window larger than MaxBytes is
// refused with ErrTooLarge.
func (s *Spool) Put(p *profile.Profile, fs []store.Finding) error {
	b, err := encode(p, fs)
	if err != nil {
		return err
	}
	size := int64(len(b))
	if size > s.o.MaxBytes {
		return fmt.Errorf("spool window: %w: %d bytes, the bound is %d", ErrTooLarge, size, s.o.MaxBytes)
	}
	s.putMu.Lock()
	defer s.putMu.Unlock()
	s.mu.Lock()
	seq := s.seq
	s.seq++
	note := s.makeRoom(size)
	s.mu.Unlock()
	s.log(note)

	name := fileName(seq, p.Start)
	if err := writeDurably(s.o.Dir, name, b); err != nil {
		return fmt.Errorf("spool window: %w", err)
	}
	s.mu.Lock()
	s.queue = append(s.queue, &entry{name: name, size: size, start: p.Start})
	s.bytes += size
	s.notify()
	s.mu.Unlock()
	return nil
}

// makeRoom drops the oldest windows until size more bytes fit, and
// returns what to log. Called with s.mu held.
func (s *Spool) makeRoom(size int64) (note string) {
	for s.bytes+size > s.o.MaxBytes {
		i := slices.IndexFunc(s.queue, func(e *entry) bool { return e != s.inFlight })
		if i < 0 {
			return note // only the window being sent is left: it goes soon
		}
		e := s.queue[i]
		if err := os.Remove(filepath.Join(s.o.Dir, e.name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Sprintf("spool: drop the oldest window: %v", err)
		}
		s.queue = slices.Delete(s.queue, i, i+1)
		s.bytes -= e.size
		s.stats.DroppedWindows++
		s.stats.DroppedBytes += e.size
		if !s.outage.droppedLogged {
			s.outage.droppedLogged = true
			note = fmt.Sprintf("spool full (%d bytes): dropping the oldest windows (flint_spool_dropped_windows_total counts them)", s.o.MaxBytes)
		}
	}
	return note
}

// writeDurably writes b to dir/name so that the file appears whole or
// not at all, and is on disk when it returns: a temporary file, fsync,
// rename, fsync of the directory.
func writeDurably(dir, name string, b []byte) error {
	tmp := filepath.Join(dir, name+tmpSuffix)
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, filepath.Join(dir, name))
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	return syncDir(dir)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// notify wakes whoever waits for a change. Called with s.mu held.
func (s *Spool) notify() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// Stats returns the spool's gauges and counters.
func (s *Spool) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stats
	st.Windows, st.Bytes = len(s.queue), s.bytes
	st.Outage = !s.outage.since.IsZero()
	if len(s.queue) > 0 {
		st.Oldest = s.queue[0].start
	}
	return st
}

// Drain waits until the sink has every window put so far, or ctx ends; it
// returns ctx's error then.
func (s *Spool) Drain(ctx context.Context) error {
	for {
		s.mu.Lock()
		empty, changed := len(s.queue) == 0, s.changed
		s.mu.Unlock()
		if empty {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		case <-s.done:
			return errors.New("spool closed")
		}
	}
}

// Close stops the sender, cancelling an attempt in flight, and releases
// the directory; windows not sent stay on disk for the next Open. Safe to
// call twice.
func (s *Spool) Close() error {
	s.closeOnce.Do(func() {
		s.cancel()
		<-s.done
		s.closeErr = s.lock.Close()
	})
	return s.closeErr
}
