package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flint-dev/flint/internal/profile"
	"github.com/flint-dev/flint/internal/selector"
	"github.com/flint-dev/flint/internal/spool"
	"github.com/flint-dev/flint/internal/store"
	"github.com/flint-dev/flint/internal/store/chtest"
	"github.com/flint-dev/flint/internal/symbol"
)

// logLines collects what the agent logs.
type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *logLines) logf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, fmt.Sprintf(format, args...))
}

// count returns how many lines contain s.
func (l *logLines) count(s string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, line := range l.lines {
		if strings.Contains(line, s) {
			n++
		}
	}
	return n
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("waited a minute for %s", what)
		}
	}
}

// remoteWindow is window i of a run of 10 s windows from start: one
// sample of comm "fixture" counted 100+i times.
func remoteWindow(start time.Time, i int) *profile.Profile {
	loc := &profile.Location{Address: 0x401000, Frames: []symbol.Frame{{Function: "spin"}}}
	return &profile.Profile{
		Start: start.Add(time.Duration(i) * 10 * time.Second), Duration: 10 * time.Second, Period: time.Second / 99,
		Samples: []*profile.Sample{{Stack: []*profile.Location{loc}, Count: int64(100 + i),
			Labels: map[string]string{profile.LabelComm: "fixture", profile.LabelNode: "a", profile.LabelPID: "1"}}},
	}
}

// TestRemoteStoreThroughSpool runs the agent's spool in front of a real
// ClickHouse that first refuses the agent's password, then stops for a
// while: every window arrives once, and each outage is two log lines.
func TestRemoteStoreThroughSpool(t *testing.T) {
	srv := chtest.Start(t)
	dir := t.TempDir()
	password := filepath.Join(dir, "password")
	if err := os.WriteFile(password, []byte("wrong\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var logs logLines
	o := DefaultOptions()
	o.DataDir, o.Logf = dir, logs.logf
	o.Store = srv.DSN("agent_spool", "user="+chtest.User, "password_file="+password)
	spo := spoolOptions(o)
	spo.MinBackoff, spo.MaxBackoff = 10*time.Millisecond, 200*time.Millisecond
	sp, remote, err := openSpool(o, spo)
	if err != nil {
		t.Fatal(err)
	}
	defer remote.Close()
	defer sp.Close()

	start := time.Now().Add(-time.Hour).Truncate(10 * time.Second)
	q := store.Query{From: start, To: start.Add(time.Hour), Selector: selector.Selector{}}
	if _, err := remote.Profile(context.Background(), q); !errors.Is(err, errStoreNotOpen) {
		t.Errorf("query before the store opened: %v, want errStoreNotOpen", err)
	}
	put := func(from, to int) {
		for i := from; i < to; i++ {
			if err := sp.Put(remoteWindow(start, i), nil); err != nil {
				t.Fatal(err)
			}
		}
	}
	put(0, 3)
	eventually(t, "the refused password to be logged", func() bool { return logs.count("refused user") == 1 })
	if err := os.WriteFile(password, []byte(chtest.Password+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	drain(t, sp)

	srv.Stop()
	failures := sp.Stats().SendFailures
	put(3, 6)
	eventually(t, "a send to the stopped server to fail", func() bool { return sp.Stats().SendFailures > failures })
	if st := sp.Stats(); st.Windows == 0 {
		t.Errorf("spool empty while the store is down: %+v", st)
	}
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	drain(t, sp)
	sp.Close() // the sender has logged all it will
	for _, line := range logs.lines {
		t.Logf("agent: %s", line)
	}

	if got := logs.count("retrying"); got != 2 {
		t.Errorf("%d outage lines, want 2 (refused, stopped): %q", got, logs.lines)
	}
	if got := logs.count("reachable again"); got != 2 {
		t.Errorf("%d recovery lines, want 2: %q", got, logs.lines)
	}
	set, err := remote.Series(context.Background(), store.SeriesQuery{Query: q, By: profile.LabelComm, Step: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if len(set.Series) != 1 {
		t.Fatalf("series %+v, want one of comm fixture", set)
	}
	got := map[int64]int64{}
	for _, p := range set.Series[0].Points {
		if p.Samples > 0 {
			got[int64(p.Time.Sub(start)/(10*time.Second))] = p.Samples
		}
	}
	for i := range 6 {
		if got[int64(i)] != int64(100+i) {
			t.Errorf("window %d holds %d samples, want %d (once)", i, got[int64(i)], 100+i)
		}
	}
	if len(got) != 6 {
		t.Errorf("samples in %d windows, want 6: %v", len(got), got)
	}
}

func drain(t *testing.T, sp *spool.Spool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := sp.Drain(ctx); err != nil {
		t.Fatalf("drain the spool: %v (%+v)", err, sp.Stats())
	}
}

// TestRemoteStoreBadStart: a store the agent cannot open at start is one
// log line however often the spool's sender retries, and windows wait in
// the spool meanwhile.
func TestRemoteStoreBadStart(t *testing.T) {
	srv := chtest.Start(t)
	wrong := filepath.Join(t.TempDir(), "password")
	if err := os.WriteFile(wrong, []byte("wrong\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ports, err := chtest.FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	for _, sql := range []string{
		"CREATE DATABASE newer",
		"CREATE TABLE newer.meta (version UInt32, written DateTime) ENGINE = MergeTree ORDER BY version",
		"INSERT INTO newer.meta VALUES (99, now())",
	} {
		resp, err := http.Post(srv.URL(), "text/plain", strings.NewReader(sql))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("%s: %s", sql, body)
		}
	}
	for _, tc := range []struct {
		name, dsn, want string
	}{
		{"unreachable", fmt.Sprintf("clickhouse://127.0.0.1:%d/flint", ports[0]), "connection refused"},
		{"wrong password", srv.DSN("flint", "user="+chtest.User, "password_file="+wrong), `refused user "flint"`},
		{"newer schema", srv.DSN("newer"), "schema version 99"},
		{"unknown parameter", srv.DSN("flint", "compress=1"), `parameter "compress" unknown`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logs logLines
			o := DefaultOptions()
			o.DataDir, o.Logf, o.Store = t.TempDir(), logs.logf, tc.dsn
			spo := spoolOptions(o)
			spo.MinBackoff, spo.MaxBackoff = time.Millisecond, 5*time.Millisecond
			sp, remote, err := openSpool(o, spo)
			if err != nil {
				t.Fatal(err)
			}
			defer remote.Close()
			defer sp.Close()
			for i := range 2 {
				if err := sp.Put(remoteWindow(time.Now().Add(-time.Hour), i), nil); err != nil {
					t.Fatal(err)
				}
			}
			eventually(t, "retries", func() bool { return sp.Stats().SendFailures >= 5 })
			sp.Close()
			if n := logs.count("retrying"); n != 1 || logs.count(tc.want) != 1 {
				t.Errorf("logged %q; want one line saying %q", logs.lines, tc.want)
			}
			if st := sp.Stats(); st.Windows != 2 || st.Sent != 0 {
				t.Errorf("spool %+v, want both windows waiting", st)
			}
		})
	}
}

// TestCompactLog: a retention pass that keeps failing the same way is one
// line, a new error another, and none while the spool reports an outage.
func TestCompactLog(t *testing.T) {
	var logs logLines
	l := &compactLog{logf: logs.logf}
	for _, msg := range []string{"drop partition: timeout", "drop partition: timeout", "read parts: refused", "read parts: refused"} {
		l.report(errors.New(msg))
	}
	if len(logs.lines) != 2 || logs.count("timeout") != 1 || logs.count("refused") != 1 {
		t.Errorf("logged %q, want each error once", logs.lines)
	}

	o := spool.DefaultOptions(t.TempDir())
	o.MinBackoff, o.MaxBackoff = time.Millisecond, time.Millisecond
	sp, err := spool.Open(o, func(context.Context) (spool.Sink, error) { return nil, errors.New("down") })
	if err != nil {
		t.Fatal(err)
	}
	defer sp.Close()
	eventually(t, "the outage", func() bool { return sp.Stats().Outage })
	l.spool.Store(sp)
	l.report(errors.New("read parts: connection refused"))
	if len(logs.lines) != 2 {
		t.Errorf("logged %q during an outage", logs.lines[2:])
	}
}
