package spool

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"time"

	"golang.org/x/sys/unix"

	"github.com/flint-dev/flint/internal/store"
)

// outage is a run of failed attempts and the catching up after it, until
// the spool is empty again: it is logged once when it starts and once when
// it ends.
type outage struct {
	since         time.Time // the first failure; zero when none
	late          int64     // windows sent since
	droppedLogged bool
}

// run connects, then sends the oldest window until ctx ends.
func (s *Spool) run(ctx context.Context, connect Connect) {
	defer close(s.done)
	var sink Sink
	if !s.retry(ctx, func(ctx context.Context) (err error) {
		sink, err = connect(ctx)
		return err
	}) {
		return
	}
	s.mu.Lock()
	note := s.caughtUp()
	s.mu.Unlock()
	s.log(note)
	for {
		e := s.next(ctx)
		if e == nil || !s.send(ctx, sink, e) {
			return
		}
	}
}

// next waits for a window to send and marks it in flight; nil when ctx
// ends.
func (s *Spool) next(ctx context.Context) *entry {
	for {
		s.mu.Lock()
		if len(s.queue) > 0 {
			s.inFlight = s.queue[0]
			s.mu.Unlock()
			return s.inFlight
		}
		changed := s.changed
		s.mu.Unlock()
		select {
		case <-changed:
		case <-ctx.Done():
			return nil
		}
	}
}

// send sends one window until the sink has it; it returns false when ctx
// ended first, leaving the file for the next Open.
func (s *Spool) send(ctx context.Context, sink Sink, e *entry) bool {
	w, err := s.read(e)
	if err != nil {
		s.setAside(e, err)
		return true
	}
	resend := e.resend
	if !s.retry(ctx, func(ctx context.Context) error {
		err := sink.WriteWindow(ctx, w.profile, w.findings, resend)
		// The sink may have stored the window without our hearing so.
		resend = true
		return err
	}) {
		return false
	}
	if err := os.Remove(filepath.Join(s.o.Dir, e.name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		// It will be sent again, as a resend, after the next Open.
		s.o.Logf("spool: remove sent window: %v", err)
	}
	s.remove(e, func() {
		s.stats.Sent++
		if !s.outage.since.IsZero() {
			s.outage.late++
		}
	})
	return true
}

func (s *Spool) read(e *entry) (*window, error) {
	b, err := os.ReadFile(filepath.Join(s.o.Dir, e.name))
	if err != nil {
		return nil, err
	}
	return decode(b)
}

// setAside renames a file that cannot be read out of the queue's way.
func (s *Spool) setAside(e *entry, cause error) {
	path := filepath.Join(s.o.Dir, e.name)
	if err := os.Rename(path, path+corruptSuffix); err != nil {
		os.Remove(path)
	}
	s.o.Logf("spool: set aside %s%s: %v", e.name, corruptSuffix, cause)
	s.remove(e, func() { s.stats.Corrupt++ })
}

// remove takes e out of the queue, counts it with count under s.mu, and
// ends an outage if that empties the queue: in one critical section, so
// Stats never shows an outage with nothing left to send.
func (s *Spool) remove(e *entry, count func()) {
	s.mu.Lock()
	if i := slices.Index(s.queue, e); i >= 0 {
		s.queue = slices.Delete(s.queue, i, i+1)
		s.bytes -= e.size
	}
	s.inFlight = nil
	count()
	note := s.caughtUp()
	s.notify()
	s.mu.Unlock()
	s.log(note)
}

// retry calls attempt, each call bounded by SendTimeout, until it
// succeeds (true) or ctx ends (false). After a failure it waits
// MinBackoff, doubling up to MaxBackoff.
func (s *Spool) retry(ctx context.Context, attempt func(context.Context) error) bool {
	wait := s.o.MinBackoff
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		actx, cancel := context.WithTimeout(ctx, s.o.SendTimeout)
		err := attempt(actx)
		cancel()
		if err == nil {
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		s.failed(err)
		timer.Reset(wait)
		select {
		case <-timer.C:
		case <-ctx.Done():
			return false
		}
		wait = min(2*wait, s.o.MaxBackoff)
	}
}

// failed counts a failed attempt and logs the first of an outage.
func (s *Spool) failed(err error) {
	s.mu.Lock()
	s.stats.SendFailures++
	first := s.outage.since.IsZero()
	if first {
		s.outage.since = time.Now()
	}
	s.mu.Unlock()
	if first {
		s.o.Logf("%v (windows wait in the spool in %s; retrying)", err, s.o.Dir)
	}
}

// caughtUp ends an outage once the queue is empty and returns the line
// saying so; "" otherwise. Called with s.mu held.
func (s *Spool) caughtUp() string {
	o := s.outage
	if o.since.IsZero() || len(s.queue) > 0 {
		return ""
	}
	s.outage = outage{}
	return fmt.Sprintf("store reachable again after %s: sent %d spooled windows late", time.Since(o.since).Round(time.Second), o.late)
}

// log logs note unless it is empty; never called with s.mu held, so Logf
// may take its own locks.
func (s *Spool) log(note string) {
	if note != "" {
		s.o.Logf("%s", note)
	}
}

// lockDir takes an exclusive flock on dir/spool.lock, so two agents never
// send the same files; the kernel drops it when the holder dies.
func lockDir(dir string) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(dir, "spool.lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open spool: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("open spool: %w: %s", store.ErrLocked, dir)
		}
		return nil, fmt.Errorf("open spool: lock %s: %w", dir, err)
	}
	return f, nil
}
