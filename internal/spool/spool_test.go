package spool

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flint-dev/flint/internal/profile"
	"github.com/flint-dev/flint/internal/store"
	"github.com/flint-dev/flint/internal/symbol"
)

var base = time.Date(2026, 11, 24, 20, 0, 0, 0, time.UTC)

// testWindow is window i of a run of 10 s windows: one stack of two
// frames, and a sample count that tells windows apart.
func testWindow(i int) *profile.Profile {
	exe := &profile.Mapping{Start: 0x400000, Limit: 0x800000, File: "/usr/bin/api", BuildID: "abc"}
	leaf := &profile.Location{Address: 0x401000, Mapping: exe, Frames: []symbol.Frame{{Function: "work", File: "main.go", Line: 7}}}
	root := &profile.Location{Address: 0x402000, Mapping: exe, Frames: []symbol.Frame{{Function: "main", File: "main.go", Line: 3}}}
	return &profile.Profile{
		Start: base.Add(time.Duration(i) * 10 * time.Second), Duration: 10 * time.Second, Period: time.Second / 99,
		Samples: []*profile.Sample{{Stack: []*profile.Location{leaf, root}, Count: int64(100 + i),
			Labels: map[string]string{"comm": "api", "pid": "42", "node": "a"}}},
	}
}

func testFindings(p *profile.Profile) []store.Finding {
	return []store.Finding{{
		Start: p.Start, Duration: p.Duration, Detector: "busy-poll", Severity: "warning",
		Labels: map[string]string{"comm": "api", "pid": "42"}, Body: []byte(`{"id":"busy-poll"}`),
	}}
}

type call struct {
	start  time.Time
	count  int64 // of the first sample
	resend bool
}

// fakeSink records every attempt; fail, when set, decides an attempt's
// error.
type fakeSink struct {
	mu    sync.Mutex
	calls []call
	fail  func(c call, attempt int) error
	got   []*window // accepted
}

func (f *fakeSink) WriteWindow(ctx context.Context, p *profile.Profile, fs []store.Finding, resend bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := call{start: p.Start, resend: resend}
	if len(p.Samples) > 0 {
		c.count = p.Samples[0].Count
	}
	f.calls = append(f.calls, c)
	if f.fail != nil {
		if err := f.fail(c, len(f.calls)); err != nil {
			return err
		}
	}
	f.got = append(f.got, &window{profile: p, findings: fs})
	return nil
}

func (f *fakeSink) snapshot() ([]call, []*window) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.calls), slices.Clone(f.got)
}

func connectTo(s Sink) Connect {
	return func(context.Context) (Sink, error) { return s, nil }
}

// neverConnects keeps the windows in the spool.
func neverConnects(context.Context) (Sink, error) { return nil, errors.New("store down") }

func testOptions(t *testing.T, dir string) Options {
	o := DefaultOptions(dir)
	o.MinBackoff, o.MaxBackoff = time.Millisecond, 4*time.Millisecond
	o.Logf = t.Logf
	return o
}

func openSpool(t *testing.T, o Options, connect Connect) *Spool {
	t.Helper()
	s, err := Open(o, connect)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func drain(t *testing.T, s *Spool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.Drain(ctx); err != nil {
		t.Fatalf("drain: %v (stats %+v)", err, s.Stats())
	}
}

func put(t *testing.T, s *Spool, from, to int) {
	t.Helper()
	for i := from; i < to; i++ {
		p := testWindow(i)
		if err := s.Put(p, testFindings(p)); err != nil {
			t.Fatal(err)
		}
	}
}

func windowFiles(t *testing.T, dir string) []string {
	t.Helper()
	des, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, de := range des {
		if de.Name() != "spool.lock" {
			names = append(names, de.Name())
		}
	}
	return names
}

func wantCalls(t *testing.T, got []call, want ...call) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("sink saw %d attempts %v, want %d %v", len(got), got, len(want), want)
	}
	for i := range want {
		if !got[i].start.Equal(want[i].start) || got[i].count != want[i].count || got[i].resend != want[i].resend {
			t.Errorf("attempt %d: %+v, want %+v", i, got[i], want[i])
		}
	}
}

func attempt(i int, resend bool) call {
	return call{start: testWindow(i).Start, count: int64(100 + i), resend: resend}
}

func TestSendsInOrderAndDeletes(t *testing.T) {
	dir := t.TempDir()
	sink := &fakeSink{}
	s := openSpool(t, testOptions(t, dir), connectTo(sink))
	put(t, s, 0, 5)
	drain(t, s)
	calls, got := sink.snapshot()
	wantCalls(t, calls, attempt(0, false), attempt(1, false), attempt(2, false), attempt(3, false), attempt(4, false))
	for i, w := range got {
		want := testWindow(i)
		if !w.profile.Start.Equal(want.Start) || w.profile.Duration != want.Duration || w.profile.Period != want.Period ||
			w.profile.Total() != want.Total() || w.profile.Samples[0].Stack[0].Frames[0].Function != "work" {
			t.Errorf("window %d arrived as %+v", i, w.profile)
		}
		if len(w.findings) != 1 || !w.findings[0].Start.Equal(want.Start) || w.findings[0].Labels["comm"] != "api" ||
			string(w.findings[0].Body) != `{"id":"busy-poll"}` {
			t.Errorf("window %d findings arrived as %+v", i, w.findings)
		}
	}
	if files := windowFiles(t, dir); len(files) != 0 {
		t.Errorf("files left after sending: %v", files)
	}
	if st := s.Stats(); st.Sent != 5 || st.Windows != 0 || st.Bytes != 0 || !st.Oldest.IsZero() {
		t.Errorf("stats %+v, want 5 sent and nothing held", st)
	}
}

func TestBoundDropsOldest(t *testing.T) {
	dir := t.TempDir()
	b, err := encode(testWindow(0), testFindings(testWindow(0)))
	if err != nil {
		t.Fatal(err)
	}
	o := testOptions(t, dir)
	o.MaxBytes = 3*int64(len(b)) + int64(len(b))/2 // room for 3 windows
	s := openSpool(t, o, neverConnects)
	put(t, s, 0, 5)
	st := s.Stats()
	if st.Windows != 3 || st.DroppedWindows != 2 || st.DroppedBytes != 2*int64(len(b)) || st.Bytes != 3*int64(len(b)) {
		t.Errorf("stats %+v, want 3 held and 2 dropped windows of %d bytes", st, len(b))
	}
	if !st.Oldest.Equal(testWindow(2).Start) {
		t.Errorf("oldest window starts %s, want %s (window 2)", st.Oldest, testWindow(2).Start)
	}
	if files := windowFiles(t, dir); len(files) != 3 {
		t.Errorf("files %v, want 3", files)
	}
	s.Close()

	sink := &fakeSink{}
	s = openSpool(t, o, connectTo(sink))
	drain(t, s)
	calls, _ := sink.snapshot()
	wantCalls(t, calls, attempt(2, true), attempt(3, true), attempt(4, true))
}

func TestTooLargeWindow(t *testing.T) {
	o := testOptions(t, t.TempDir())
	o.MaxBytes = 10
	s := openSpool(t, o, neverConnects)
	if err := s.Put(testWindow(0), nil); !errors.Is(err, ErrTooLarge) {
		t.Errorf("put: %v, want ErrTooLarge", err)
	}
}

func TestResendFlags(t *testing.T) {
	dir := t.TempDir()
	// Window 0 fails twice (the second time after the sink kept it), then
	// goes through; window 1 goes through at once.
	sink := &fakeSink{fail: func(c call, n int) error {
		if n <= 2 {
			return fmt.Errorf("attempt %d: timeout", n)
		}
		return nil
	}}
	s := openSpool(t, testOptions(t, dir), connectTo(sink))
	put(t, s, 0, 2)
	drain(t, s)
	calls, got := sink.snapshot()
	wantCalls(t, calls, attempt(0, false), attempt(0, true), attempt(0, true), attempt(1, false))
	if len(got) != 2 {
		t.Errorf("sink kept %d windows, want 2", len(got))
	}
	if st := s.Stats(); st.SendFailures != 2 || st.Sent != 2 {
		t.Errorf("stats %+v, want 2 failures, 2 sent", st)
	}
}

func TestCorruptFileSetAside(t *testing.T) {
	dir := t.TempDir()
	s := openSpool(t, testOptions(t, dir), neverConnects)
	put(t, s, 0, 3)
	s.Close()
	files := windowFiles(t, dir)
	// Damage the middle window: one flipped byte.
	path := filepath.Join(dir, files[1])
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0xff
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}

	sink := &fakeSink{}
	s = openSpool(t, testOptions(t, dir), connectTo(sink))
	drain(t, s)
	calls, _ := sink.snapshot()
	wantCalls(t, calls, attempt(0, true), attempt(2, true))
	if st := s.Stats(); st.Corrupt != 1 {
		t.Errorf("stats %+v, want 1 corrupt", st)
	}
	if got := windowFiles(t, dir); !slices.Equal(got, []string{files[1] + corruptSuffix}) {
		t.Errorf("files %v, want only %s", got, files[1]+corruptSuffix)
	}
}

// TestReopenAfterCrash leaves what kill -9 can leave: windows put and not
// sent, and the temporary file of a Put that did not reach its rename.
func TestReopenAfterCrash(t *testing.T) {
	dir := t.TempDir()
	s := openSpool(t, testOptions(t, dir), neverConnects)
	put(t, s, 0, 3)
	files := windowFiles(t, dir)
	s.Close()
	unfinished := filepath.Join(dir, fileName(3, testWindow(3).Start)+tmpSuffix)
	if err := os.WriteFile(unfinished, []byte("half a window"), 0o600); err != nil {
		t.Fatal(err)
	}

	sink := &fakeSink{fail: func(c call, n int) error {
		if !c.start.Before(testWindow(3).Start) {
			return nil
		}
		if !c.resend {
			return fmt.Errorf("window %s left by a crash sent without resend", c.start)
		}
		return nil
	}}
	s = openSpool(t, testOptions(t, dir), connectTo(sink))
	if _, err := os.Stat(unfinished); !os.IsNotExist(err) {
		t.Errorf("unfinished file still there after Open: %v", err)
	}
	put(t, s, 3, 4)
	drain(t, s)
	calls, _ := sink.snapshot()
	wantCalls(t, calls, attempt(0, true), attempt(1, true), attempt(2, true), attempt(3, false))
	// The new window's file came after the old ones: sequence numbers go on.
	if seq, _, ok := parseName(files[len(files)-1]); !ok || s.seq != seq+2 {
		t.Errorf("next sequence number %d after reopening with last file %s", s.seq, files[len(files)-1])
	}
}

func TestCloseDuringBackoff(t *testing.T) {
	dir := t.TempDir()
	failed := make(chan struct{}, 1)
	sink := &fakeSink{fail: func(call, int) error {
		select {
		case failed <- struct{}{}:
		default:
		}
		return errors.New("store down")
	}}
	o := testOptions(t, dir)
	o.MinBackoff, o.MaxBackoff = time.Hour, time.Hour
	s := openSpool(t, o, connectTo(sink))
	put(t, s, 0, 2)
	<-failed
	// The sender now waits an hour; Close must not.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if calls, _ := sink.snapshot(); len(calls) != 1 {
		t.Errorf("sink saw %d attempts, want 1", len(calls))
	}
	if files := windowFiles(t, dir); len(files) != 2 {
		t.Errorf("files after Close %v, want both windows", files)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

// TestCloseCancelsAttempt: a store that hangs holds one attempt, which
// Close cancels; the window stays.
func TestCloseCancelsAttempt(t *testing.T) {
	dir := t.TempDir()
	started := make(chan struct{})
	hang := sinkFunc(func(ctx context.Context) error {
		close(started)
		<-ctx.Done()
		return ctx.Err()
	})
	s := openSpool(t, testOptions(t, dir), connectTo(hang))
	put(t, s, 0, 1)
	<-started
	s.Close()
	if files := windowFiles(t, dir); len(files) != 1 {
		t.Errorf("files after Close %v, want the window", files)
	}
}

type sinkFunc func(ctx context.Context) error

func (f sinkFunc) WriteWindow(ctx context.Context, _ *profile.Profile, _ []store.Finding, _ bool) error {
	return f(ctx)
}

// TestConnectRetried: a store that cannot be opened at first is retried,
// the outage is logged once when it starts and once when it ends.
func TestConnectRetried(t *testing.T) {
	dir := t.TempDir()
	var mu sync.Mutex
	var lines []string
	o := testOptions(t, dir)
	o.Logf = func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		lines = append(lines, fmt.Sprintf(format, args...))
	}
	sink := &fakeSink{}
	tries := 0
	s := openSpool(t, o, func(context.Context) (Sink, error) {
		if tries++; tries < 4 {
			return nil, errors.New("open clickhouse store: authentication failed")
		}
		return sink, nil
	})
	put(t, s, 0, 3)
	drain(t, s)
	calls, _ := sink.snapshot()
	wantCalls(t, calls, attempt(0, false), attempt(1, false), attempt(2, false))
	s.Close() // the sender has logged all it will
	mu.Lock()
	defer mu.Unlock()
	if len(lines) != 2 || !strings.Contains(lines[0], "authentication failed") || !strings.Contains(lines[1], "reachable again") {
		t.Errorf("logged %q, want the failure and the recovery", lines)
	}
	if st := s.Stats(); st.SendFailures != 3 {
		t.Errorf("stats %+v, want 3 failures", st)
	}
}

func TestSecondOpenRefused(t *testing.T) {
	dir := t.TempDir()
	openSpool(t, testOptions(t, dir), neverConnects)
	if _, err := Open(testOptions(t, dir), neverConnects); !errors.Is(err, store.ErrLocked) {
		t.Errorf("second Open: %v, want ErrLocked", err)
	}
}

func TestFileRoundTrip(t *testing.T) {
	p := testWindow(3)
	b, err := encode(p, testFindings(p))
	if err != nil {
		t.Fatal(err)
	}
	w, err := decode(b)
	if err != nil {
		t.Fatal(err)
	}
	again, err := encode(w.profile, w.findings)
	if err != nil || !bytes.Equal(again, b) {
		t.Errorf("re-encoding the decoded window differs (%v)", err)
	}
	for name, bad := range map[string][]byte{
		"empty":     nil,
		"truncated": b[:len(b)-1],
		"no magic":  append([]byte("x"), b[1:]...),
		"flipped":   append(slices.Clone(b[:20]), append([]byte{b[20] ^ 1}, b[21:]...)...),
	} {
		if _, err := decode(bad); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: decode gave %v, want ErrCorrupt", name, err)
		}
	}
}

// FuzzDecode feeds decode files whose checksum holds, so the fuzzer gets
// past it to the header, the window and the findings.
func FuzzDecode(f *testing.F) {
	p := testWindow(0)
	b, err := encode(p, testFindings(p))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b[:len(b)-4])
	f.Add([]byte(magic))
	f.Fuzz(func(t *testing.T, body []byte) {
		file := binary.LittleEndian.AppendUint32(slices.Clone(body), crc32.Checksum(body, castagnoli))
		w, err := decode(file)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Errorf("decode error %v is not ErrCorrupt", err)
			}
			return
		}
		if _, err := encode(w.profile, w.findings); err != nil {
			t.Errorf("a decoded window does not encode: %v", err)
		}
	})
}

func TestParseName(t *testing.T) {
	for _, tc := range []struct {
		name string
		ok   bool
	}{
		{fileName(7, base), true},
		{fileName(7, base) + tmpSuffix, false},
		{fileName(7, base) + corruptSuffix, false},
		{"spool.lock", false},
		{"00000000000000000007-x" + suffix, false},
	} {
		seq, start, ok := parseName(tc.name)
		if ok != tc.ok || ok && (seq != 7 || !start.Equal(base)) {
			t.Errorf("parseName(%q) = %d, %s, %v", tc.name, seq, start, ok)
		}
	}
}
