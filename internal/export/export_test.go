package export

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flint-dev/flint/internal/profile"
)

// fakeSender records the windows it takes; fail decides each try's error.
type fakeSender struct {
	mu   sync.Mutex
	got  []*profile.Profile
	fail func(try int, p *profile.Profile) error
	try  int
}

func (f *fakeSender) Name() string { return "fake://target" }

func (f *fakeSender) Send(ctx context.Context, p *profile.Profile) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.try++
	if f.fail != nil {
		if err := f.fail(f.try, p); err != nil {
			return err
		}
	}
	f.got = append(f.got, p)
	return nil
}

func (f *fakeSender) received() []*profile.Profile {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]*profile.Profile(nil), f.got...)
}

// logs collects log lines.
type logs struct {
	mu    sync.Mutex
	lines []string
}

func (l *logs) logf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, fmt.Sprintf(format, args...))
}

func (l *logs) text() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

func windows(n int) []*profile.Profile {
	out := make([]*profile.Profile, n)
	for i := range out {
		out[i] = &profile.Profile{Start: time.Unix(int64(i), 0)}
	}
	return out
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

func TestExporterSendsInOrder(t *testing.T) {
	f := &fakeSender{}
	e := New(f, Options{})
	in := windows(5)
	for _, p := range in {
		e.Put(p)
	}
	e.Close(5 * time.Second)
	got := f.received()
	if len(got) != len(in) {
		t.Fatalf("sent %d windows, want %d", len(got), len(in))
	}
	for i := range in {
		if got[i] != in[i] {
			t.Errorf("window %d out of order", i)
		}
	}
	if s := e.Stats(); s.Sent != 5 || s.Queued != 0 || s.Failures != 0 {
		t.Errorf("stats %+v", s)
	}
}

// A target that is down for three tries gets every window once it is back,
// and the outage is two log lines.
func TestExporterRetriesWithBackoff(t *testing.T) {
	f := &fakeSender{fail: func(try int, _ *profile.Profile) error {
		if try <= 3 {
			return errors.New("export to fake://target: connection refused")
		}
		return nil
	}}
	var l logs
	e := New(f, Options{MinBackoff: 10 * time.Millisecond, MaxBackoff: 40 * time.Millisecond, Logf: l.logf})
	for _, p := range windows(3) {
		e.Put(p)
	}
	waitFor(t, "three windows", func() bool { return len(f.received()) == 3 })
	e.Close(time.Second)
	if s := e.Stats(); s.Sent != 3 || s.Failures != 3 || s.Rejected != 0 || s.Dropped != 0 {
		t.Errorf("stats %+v, want 3 sent after 3 failures", s)
	}
	log := l.text()
	if strings.Count(log, "connection refused (retrying") != 1 || strings.Count(log, "reachable again") != 1 {
		t.Errorf("want one line for the outage and one for the recovery:\n%s", log)
	}
}

// A rejected window is dropped without a retry, and logged once while
// windows keep being rejected.
func TestExporterDropsRejected(t *testing.T) {
	in := windows(4)
	f := &fakeSender{fail: func(_ int, p *profile.Profile) error {
		if p != in[3] {
			return Rejected(errors.New("export to fake://target: 400 Bad Request"))
		}
		return nil
	}}
	var l logs
	e := New(f, Options{Logf: l.logf})
	for _, p := range in {
		e.Put(p)
	}
	waitFor(t, "the last window", func() bool { return len(f.received()) == 1 })
	e.Close(time.Second)
	if s := e.Stats(); s.Rejected != 3 || s.Sent != 1 || s.Failures != 0 || f.try != 4 {
		t.Errorf("stats %+v after %d tries, want 3 rejected and 1 sent in 4 tries", s, f.try)
	}
	if n := strings.Count(l.text(), "400 Bad Request"); n != 1 {
		t.Errorf("%d log lines for rejections in a row, want 1:\n%s", n, l.text())
	}
}

// While the target is down the queue keeps the newest windows; Close does
// not wait for a failing target.
func TestExporterBoundsQueue(t *testing.T) {
	f := &fakeSender{fail: func(int, *profile.Profile) error { return errors.New("down") }}
	var l logs
	e := New(f, Options{MaxWindows: 4, MinBackoff: time.Hour, Logf: l.logf})
	in := windows(10)
	for _, p := range in {
		e.Put(p)
	}
	waitFor(t, "a first try", func() bool { return e.Stats().Failures > 0 })
	s := e.Stats()
	if s.Queued != 4 || s.Dropped != 6 {
		t.Errorf("stats %+v, want 4 queued and 6 dropped", s)
	}
	start := time.Now()
	e.Close(time.Minute)
	if waited := time.Since(start); waited > 10*time.Second {
		t.Errorf("Close waited %v for a failing target", waited)
	}
	if !strings.Contains(l.text(), "4 windows not sent at stop") {
		t.Errorf("log does not say what was lost:\n%s", l.text())
	}
}

func TestRejected(t *testing.T) {
	base := errors.New("400")
	err := fmt.Errorf("wrapped: %w", Rejected(base))
	if !IsRejected(err) || !errors.Is(err, base) || err.Error() != "wrapped: 400" {
		t.Errorf("Rejected: %v, IsRejected %v, Is(base) %v", err, IsRejected(err), errors.Is(err, base))
	}
	if IsRejected(base) {
		t.Error("a plain error counts as rejected")
	}
}

// slowSender answers nothing until its context ends.
type slowSender struct{ tries chan struct{} }

func (s slowSender) Name() string { return "slow://target" }

func (s slowSender) Send(ctx context.Context, p *profile.Profile) error {
	s.tries <- struct{}{}
	<-ctx.Done()
	return fmt.Errorf("export to slow://target: %w", ctx.Err())
}

// A receiver that never answers costs each try its timeout, then counts as
// a failure like any other: one log line, and the queue behind it bounded.
func TestExporterTimesOutSlowTarget(t *testing.T) {
	s := slowSender{tries: make(chan struct{}, 100)}
	var l logs
	e := New(s, Options{Timeout: 20 * time.Millisecond, MinBackoff: time.Millisecond, MaxBackoff: time.Millisecond, MaxWindows: 3, Logf: l.logf})
	for _, p := range windows(5) {
		e.Put(p)
	}
	for range 3 {
		<-s.tries
	}
	waitFor(t, "three failures", func() bool { return e.Stats().Failures >= 3 })
	e.Close(time.Second)
	st := e.Stats()
	if st.Queued != 3 || st.Dropped != 2 || st.Sent != 0 {
		t.Errorf("stats %+v, want 3 queued and 2 dropped", st)
	}
	if n := strings.Count(l.text(), "context deadline exceeded (retrying"); n != 1 {
		t.Errorf("%d log lines for the slow target, want 1:\n%s", n, l.text())
	}
}
