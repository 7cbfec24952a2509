package export

import (
	"context"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/flint-dev/flint/internal/profile"
)

// Options configure an Exporter.
type Options struct {
	// MaxWindows bounds the queue: beyond it the oldest window is dropped
	// and counted. Zero means DefaultMaxWindows.
	MaxWindows int
	// Timeout bounds one try to send a window. Zero means 30 s.
	Timeout time.Duration
	// MinBackoff and MaxBackoff bound the wait between tries of a window
	// that failed: it doubles from MinBackoff up to MaxBackoff. Zeros mean
	// 1 s and 30 s.
	MinBackoff, MaxBackoff time.Duration
	// Logf reports a target becoming unreachable and reachable again, and
	// rejected windows; nil discards.
	Logf func(format string, args ...any)
}

// DefaultMaxWindows is an hour of the agent's default 10 s windows.
const DefaultMaxWindows = 360

// Stats are an Exporter's counters.
type Stats struct {
	Sent, Failures, Rejected, Dropped int64
	Queued                            int
}

// Exporter sends windows to one target from its own goroutine, in order,
// retrying each with backoff until it is sent, rejected or pushed out of
// the full queue.
type Exporter struct {
	s Sender
	o Options

	mu      sync.Mutex
	queue   []*profile.Profile
	wake    chan struct{} // a window was queued
	stopped chan struct{} // Close was called
	done    chan struct{} // the goroutine returned

	sent, failures, rejected, dropped atomic.Int64
	failing                           atomic.Bool // the last try failed
	rejecting                         bool        // the last window was rejected; owned by run
}

// New starts an Exporter for s.
func New(s Sender, o Options) *Exporter {
	if o.MaxWindows <= 0 {
		o.MaxWindows = DefaultMaxWindows
	}
	if o.Timeout <= 0 {
		o.Timeout = 30 * time.Second
	}
	if o.MinBackoff <= 0 {
		o.MinBackoff = time.Second
	}
	if o.MaxBackoff < o.MinBackoff {
		o.MaxBackoff = max(30*time.Second, o.MinBackoff)
	}
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
	e := &Exporter{s: s, o: o, wake: make(chan struct{}, 1), stopped: make(chan struct{}), done: make(chan struct{})}
	go e.run()
	return e
}

// Name is the target's.
func (e *Exporter) Name() string { return e.s.Name() }

// Put queues a window; it never blocks. The window must not change after.
func (e *Exporter) Put(p *profile.Profile) {
	e.mu.Lock()
	if len(e.queue) >= e.o.MaxWindows {
		e.queue[0] = nil
		e.queue = e.queue[1:]
		e.dropped.Add(1)
	}
	e.queue = append(e.queue, p)
	e.mu.Unlock()
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

// Stats returns the counters.
func (e *Exporter) Stats() Stats {
	e.mu.Lock()
	queued := len(e.queue)
	e.mu.Unlock()
	return Stats{Sent: e.sent.Load(), Failures: e.failures.Load(), Rejected: e.rejected.Load(), Dropped: e.dropped.Load(), Queued: queued}
}

// Close sends what is queued for up to wait (not at all while the target
// fails), then stops; windows still
// queued are lost and logged. It closes the Sender if it is an io.Closer.
func (e *Exporter) Close(wait time.Duration) {
	deadline := time.Now().Add(wait)
	for e.Stats().Queued > 0 && time.Now().Before(deadline) && !e.failing.Load() {
		time.Sleep(50 * time.Millisecond)
	}
	close(e.stopped)
	<-e.done
	if n := e.Stats().Queued; n > 0 {
		e.o.Logf("export to %s: %d windows not sent at stop", e.s.Name(), n)
	}
	if c, ok := e.s.(io.Closer); ok {
		c.Close()
	}
}

func (e *Exporter) front() *profile.Profile {
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.queue) == 0 {
		return nil
	}
	return e.queue[0]
}

// pop removes p from the front, unless Put has pushed it out already.
func (e *Exporter) pop(p *profile.Profile) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.queue) > 0 && e.queue[0] == p {
		e.queue[0] = nil
		e.queue = e.queue[1:]
	}
}

func (e *Exporter) run() {
	defer close(e.done)
	backoff := e.o.MinBackoff
	for {
		p := e.front()
		if p == nil {
			select {
			case <-e.wake:
				continue
			case <-e.stopped:
				return
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), e.o.Timeout)
		err := e.s.Send(ctx, p)
		cancel()
		switch {
		case err == nil:
			e.sent.Add(1)
			e.pop(p)
			if e.failing.Swap(false) {
				e.o.Logf("export to %s: reachable again", e.s.Name())
			}
			backoff = e.o.MinBackoff
			e.rejecting = false
			continue
		case IsRejected(err):
			e.rejected.Add(1)
			e.pop(p)
			if !e.rejecting { // once until a window is taken again
				e.o.Logf("%v (window dropped)", err)
				e.rejecting = true
			}
			continue
		}
		e.failures.Add(1)
		if !e.failing.Swap(true) {
			e.o.Logf("%v (retrying; up to %d windows wait)", err, e.o.MaxWindows)
		}
		select {
		case <-time.After(backoff):
			backoff = min(2*backoff, e.o.MaxBackoff)
		case <-e.stopped:
			return
		}
	}
}
