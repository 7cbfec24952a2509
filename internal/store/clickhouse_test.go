package store

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flint-dev/flint/internal/profile"
	"github.com/flint-dev/flint/internal/store/chtest"
	"github.com/flint-dev/flint/internal/symbol"
)

// chExec runs a statement on the shared server, behind the store's back.
func chExec(t testing.TB, srv *chtest.Server, db, q string) {
	t.Helper()
	d, err := parseDSN(srv.DSN(db))
	if err != nil {
		t.Fatal(err)
	}
	if err := newClient(d, d.hosts[0]).exec(context.Background(), q, nil); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}

// chCount returns SELECT count() of a query's FROM and WHERE part.
func chCount(t testing.TB, s *ClickHouse, fromWhere string) uint64 {
	t.Helper()
	var n uint64
	err := s.queryRows(context.Background(), "SELECT count() FROM "+fromWhere, func(r *rowReader) error {
		n = r.uint64()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestClickHouseBadInput(t *testing.T) {
	srv := sharedClickHouse(t)
	ports, err := chtest.FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	notCH := httptest.NewServer(http.NotFoundHandler())
	defer notCH.Close()
	pwFile := filepath.Join(t.TempDir(), "password")
	if err := os.WriteFile(pwFile, []byte(chtest.Password+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	newer := newDatabase(t)
	openClickHouse(t, newer, testOptions()).Close()
	chExec(t, srv, dbOf(newer), "INSERT INTO meta VALUES (99, now())")
	foreign := newDatabase(t)
	chExec(t, srv, "default", "CREATE DATABASE "+dbOf(foreign))
	chExec(t, srv, dbOf(foreign), "CREATE TABLE samples (x UInt8) ENGINE = Memory")
	wrongType := newDatabase(t)
	chExec(t, srv, "default", "CREATE DATABASE "+dbOf(wrongType))
	chExec(t, srv, dbOf(wrongType), "CREATE TABLE stacks (day Date, node String, hash UInt32, body String) ENGINE = Memory")

	tests := []struct {
		name string
		dsn  string
		want string // in the error; "" for success
		is   error
	}{
		{"ok", newDatabase(t), "", nil},
		{"password", newDatabase(t, "user="+chtest.User, "password="+chtest.Password), "", nil},
		{"password file", newDatabase(t, "user="+chtest.User, "password_file="+pwFile), "", nil},
		{"unreachable", fmt.Sprintf("clickhouse://127.0.0.1:%d/flint?timeout=2s", ports[0]), "unreachable", nil},
		{"not clickhouse", "clickhouse://" + strings.TrimPrefix(notCH.URL, "http://") + "/flint", "not a ClickHouse HTTP interface", nil},
		{"wrong password", newDatabase(t, "user="+chtest.User, "password=wrong"), `refused user "flint"`, nil},
		{"unknown user", newDatabase(t, "user=nobody"), `refused user "nobody"`, nil},
		{"missing password file", newDatabase(t, "password_file=/nonexistent"), "password file", nil},
		{"scheme", "http://127.0.0.1:8123/flint", "scheme", nil},
		{"unknown parameter", newDatabase(t, "compress=1"), `parameter "compress" unknown`, nil},
		{"bad database name", "clickhouse://127.0.0.1:8123/a-b", "database name", nil},
		{"bad timeout", newDatabase(t, "timeout=soon"), "timeout", nil},
		{"newer schema", newer, fmt.Sprintf("schema version 99, this flint reads up to %d", chSchemaVersion), ErrNewerSchema},
		{"foreign table", foreign, "has no column day", nil},
		{"wrong type", wrongType, "hash is UInt32", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := OpenClickHouse(context.Background(), tt.dsn, testOptions())
			if tt.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				s.Close()
				return
			}
			if err == nil {
				s.Close()
				t.Fatal("opened")
			}
			t.Log(err)
			if !strings.Contains(err.Error(), tt.want) || strings.Contains(err.Error(), "\n") {
				t.Errorf("error %q: want one line with %q", err, tt.want)
			}
			if strings.Contains(err.Error(), "password=") || strings.Contains(err.Error(), chtest.Password) {
				t.Errorf("error %q shows the password", err)
			}
			if tt.is != nil && !errors.Is(err, tt.is) {
				t.Errorf("error %q is not %v", err, tt.is)
			}
		})
	}
}

// dbOf is the database of a DSN.
func dbOf(dsn string) string {
	d, err := parseDSN(dsn)
	if err != nil {
		panic(err)
	}
	return d.database
}

// TestClickHouseMigrate opens databases of schema version 1, before
// profile types, on one server and over a cluster of two shards: the agent
// adds the columns, to the Distributed tables too, and the old windows
// read as CPU.
func TestClickHouseMigrate(t *testing.T) {
	t.Run("one server", func(t *testing.T) {
		srv := sharedClickHouse(t)
		dsn := newDatabase(t)
		migrateFromV1(t, dsn, []*chtest.Server{srv}, dbOf(dsn), false)
	})
	t.Run("shards", func(t *testing.T) {
		servers := chtest.StartCluster(t, "flint_shards", 2)
		hosts := make([]string, len(servers))
		for i, s := range servers {
			hosts[i] = fmt.Sprintf("127.0.0.1:%d", s.HTTPPort)
		}
		migrateFromV1(t, "clickhouse://"+strings.Join(hosts, ",")+"/flint?cluster=flint_shards", servers, "flint", true)
	})
}

// migrateFromV1 writes a window into the store at dsn, takes its database
// db back to schema version 1 on every server, opens it again and checks
// what the migration kept and what it lets write.
func migrateFromV1(t *testing.T, dsn string, servers []*chtest.Server, db string, cluster bool) {
	w := newWorkload(t0).window(0)
	old := openClickHouse(t, dsn, testOptions())
	write(t, old, w)
	old.Close()
	for _, srv := range servers {
		for _, table := range []string{"samples", "totals"} {
			chExec(t, srv, db, "ALTER TABLE "+table+" DROP COLUMN type")
			if cluster {
				chExec(t, srv, db, "ALTER TABLE "+table+"_local DROP COLUMN type")
			}
		}
		chExec(t, srv, db, "DROP TABLE meta")
		chExec(t, srv, db, "CREATE TABLE meta (version UInt32, written DateTime) ENGINE = MergeTree ORDER BY version")
		chExec(t, srv, db, "INSERT INTO meta VALUES (1, now())")
	}

	s := openClickHouse(t, dsn, testOptions())
	for i, h := range s.hosts {
		if v, err := schemaVersionOf(context.Background(), h); err != nil || v != chSchemaVersion {
			t.Errorf("host %d: schema version %d, %v; want %d", i, v, err, chSchemaVersion)
		}
	}
	q := checkReadsAsCPU(t, s, w)
	// A new window of each type goes in beside the old one.
	next := newWorkload(t0).window(1)
	next.Kind, next.Period = profile.OffCPU, time.Nanosecond
	write(t, s, next)
	q.To = next.Start.Add(next.Duration)
	if p := query(t, s, q); p.Total() != next.Total() {
		t.Errorf("off-CPU profile after migration: %d ns, want %d", p.Total(), next.Total())
	}
}

func TestClickHouseConcurrentOpen(t *testing.T) {
	dsn := newDatabase(t)
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Go(func() {
			s, err := OpenClickHouse(context.Background(), dsn, testOptions())
			if err == nil {
				s.Close()
			}
			errs[i] = err
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	s := openClickHouse(t, dsn, testOptions())
	if v, err := schemaVersionOf(context.Background(), s.hosts[0]); err != nil || v != chSchemaVersion {
		t.Errorf("schema version %d, %v", v, err)
	}
}

// TestClickHouseReadOnly opens the store as a user that may only read, as
// flint server does: queries answer, nothing is created, and a write or a
// missing schema fails with one line.
func TestClickHouseReadOnly(t *testing.T) {
	ctx := context.Background()
	written := newDatabase(t)
	w := openClickHouse(t, written, testOptions())
	wl := newWorkload(t0)
	if err := w.Write(ctx, wl.window(0)); err != nil {
		t.Fatal(err)
	}
	reader := "user=" + chtest.Reader + "&password=" + chtest.Password
	ro := DefaultOptions() // retention on, as agents have it
	ro.ReadOnly = true
	r := openClickHouse(t, written+"?"+reader, ro)
	r.now = func() time.Time { return t0.Add(30 * 24 * time.Hour) }
	if err := r.Compact(ctx); err != nil {
		t.Errorf("compact as a reader: %v; want nothing to do", err)
	}
	p, err := r.Profile(ctx, Query{From: t0, To: t0.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := p.Total(), wl.window(0).Total(); got != want {
		t.Errorf("read %d samples, want %d", got, want)
	}
	if err := r.Write(ctx, wl.window(1)); err == nil || strings.Contains(err.Error(), "\n") {
		t.Errorf("write as a reader: %v; want one line", err)
	}

	empty := newDatabase(t, "user="+chtest.Reader, "password="+chtest.Password)
	for _, tt := range []struct {
		name string
		o    Options
		want string
	}{
		{"read only", ro, "has no flint schema: an agent started with --store creates it"},
		{"read write", testOptions(), "readonly mode"},
	} {
		s, err := OpenClickHouse(ctx, empty, tt.o)
		if err == nil {
			s.Close()
			t.Fatalf("%s: opened a database without a schema as a reader", tt.name)
		}
		if !strings.Contains(err.Error(), tt.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: error %q; want one line with %q", tt.name, err, tt.want)
		}
	}
}

// TestClickHouseResend stops the server under a writer: the write fails
// with one clear line, and once the server is back a resend of a window
// that was stored, and of one that was not, stores each exactly once.
func TestClickHouseResend(t *testing.T) {
	srv := chtest.Start(t)
	ctx := context.Background()
	s := openClickHouse(t, srv.DSN("flint", "timeout=5s"), testOptions())
	wl := newWorkload(t0)
	w0, w1 := wl.window(0), wl.window(1)
	f0 := []Finding{finding(t0, "busy-poll", "api"), finding(t0, "hot-debug-output", "web")}
	if err := s.WriteWindow(ctx, w0, f0, false); err != nil {
		t.Fatal(err)
	}
	srv.Stop()
	err := s.WriteWindow(ctx, w1, nil, false)
	if err == nil || !strings.Contains(err.Error(), "unreachable") || strings.Contains(err.Error(), "\n") {
		t.Errorf("write to a stopped server: %v; want one line saying unreachable", err)
	}
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	// The answer to w0 was "lost": it is sent again, as is w1.
	if err := s.WriteWindow(ctx, w0, f0, true); err != nil {
		t.Fatal(err)
	}
	if err := s.WriteWindow(ctx, w1, []Finding{finding(t0.Add(wlWindow), "busy-poll", "api")}, true); err != nil {
		t.Fatal(err)
	}
	if err := s.WriteWindow(ctx, w1, []Finding{finding(t0.Add(wlWindow), "busy-poll", "api")}, true); err != nil {
		t.Fatal(err)
	}
	got := query(t, s, Query{From: t0, To: t0.Add(time.Hour)})
	if diff := compare(canonical(got.Samples), canonical(filter([]*profile.Profile{w0, w1}, nil, nil))); diff != "" {
		t.Error(diff)
	}
	fs, err := s.Findings(ctx, Query{From: t0, To: t0.Add(time.Hour)})
	if err != nil || len(fs) != 3 {
		t.Errorf("%d findings, %v; want 3", len(fs), err)
	}

	// An attempt that stored the samples but not the totals after them:
	// the resend writes the totals alone.
	chExec(t, srv, "flint", "ALTER TABLE totals DROP PARTITION '"+dayString(dayOf(t0))+"'")
	for _, w := range []*profile.Profile{w0, w1} {
		if err := s.WriteWindow(ctx, w, nil, true); err != nil {
			t.Fatal(err)
		}
	}
	got = query(t, s, Query{From: t0, To: t0.Add(time.Hour)})
	if diff := compare(canonical(got.Samples), canonical(filter([]*profile.Profile{w0, w1}, nil, nil))); diff != "" {
		t.Errorf("after resending the totals: %s", diff)
	}
	set, err := s.Series(ctx, SeriesQuery{Query: Query{From: t0, To: t0.Add(time.Hour)}, By: "comm", Step: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	for _, sr := range set.Series {
		total += sr.Points[0].Samples
	}
	if want := w0.Total() + w1.Total(); total != want {
		t.Errorf("series after resending the totals: %d samples, want %d", total, want)
	}
}

// TestClickHouseResendLarge resends a window of 15,000 label sets and a
// finding of 300 KB: the checks for an earlier write name them all in
// queries longer than ClickHouse's default limit of 256 KiB, and each is
// stored once.
func TestClickHouseResendLarge(t *testing.T) {
	ctx := context.Background()
	s := openClickHouse(t, newDatabase(t), testOptions())
	loc := &profile.Location{Address: 1, Frames: []symbol.Frame{{Function: "f"}}}
	p := &profile.Profile{Start: t0, Duration: 10 * time.Second, Period: time.Second / 99}
	for i := range 15000 {
		p.Samples = append(p.Samples, &profile.Sample{Stack: []*profile.Location{loc}, Count: 1,
			Labels: map[string]string{"pid": strconv.Itoa(i), "node": "n1"}})
	}
	f := finding(t0, "busy-poll", "api")
	f.Body = []byte(`{"evidence":"` + strings.Repeat("x", 300<<10) + `"}`)
	for range 2 {
		if err := s.WriteWindow(ctx, p, []Finding{f}, true); err != nil {
			t.Fatal(err)
		}
	}
	if n := chCount(t, s, "samples"); n != 15000 {
		t.Errorf("%d sample rows, want 15000", n)
	}
	if n := chCount(t, s, "findings"); n != 1 {
		t.Errorf("%d findings, want 1", n)
	}
}

// TestClickHouseWindowNode checks that a window's row names its node when
// its first sample is one the store skips (count 0).
func TestClickHouseWindowNode(t *testing.T) {
	s := openClickHouse(t, newDatabase(t), testOptions())
	loc := &profile.Location{Address: 1, Frames: []symbol.Frame{{Function: "f"}}}
	labels := map[string]string{"node": "n1", "comm": "api"}
	write(t, s, &profile.Profile{Start: t0, Duration: 10 * time.Second, Period: time.Second / 99, Samples: []*profile.Sample{
		{Stack: []*profile.Location{loc}, Count: 0, Labels: labels},
		{Stack: []*profile.Location{loc}, Count: 3, Labels: labels},
	}})
	if n := chCount(t, s, "windows WHERE node = 'n1'"); n != 1 {
		t.Errorf("%d windows of node n1, want 1", n)
	}
}

func TestClickHouseRetention(t *testing.T) {
	o := testOptions()
	o.Retention = 48 * time.Hour
	s := openClickHouse(t, newDatabase(t), o)
	wl := newWorkload(t0)
	for d := range 5 {
		p := wl.window(0)
		p.Start = t0.Add(time.Duration(d) * 24 * time.Hour)
		write(t, s, p)
		if err := s.WriteFindings(context.Background(), []Finding{finding(p.Start, "busy-poll", "api")}); err != nil {
			t.Fatal(err)
		}
	}
	// Now is day 4, 12:00: days 0 and 1 ended more than 48 h ago.
	s.now = func() time.Time { return t0.Add(4 * 24 * time.Hour) }
	for range 2 { // idempotent
		if err := s.Compact(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	for _, table := range []string{"samples", "totals", "labelsets", "stacks", "windows", "findings"} {
		for d := range 5 {
			n := chCount(t, s, table+" WHERE day = "+dateLit(dayOf(t0.Add(time.Duration(d)*24*time.Hour))))
			if kept := d >= 2; kept != (n > 0) {
				t.Errorf("%s of day %d: %d rows, want kept %v", table, d, n, kept)
			}
		}
	}
}

// TestQuote checks that any bytes survive a trip through a literal.
func TestQuote(t *testing.T) {
	s := openClickHouse(t, newDatabase(t), testOptions())
	rng := rand.New(rand.NewPCG(3, 4))
	inputs := []string{"", "'", "\\", "\\'", "'; DROP TABLE samples; --", "\x00\x01\xff\xfe", "é€😀", "\\x41", "a\nb\tc\r"}
	for range 200 {
		b := make([]byte, rng.IntN(40))
		for i := range b {
			b[i] = byte(rng.IntN(256))
		}
		inputs = append(inputs, string(b))
	}
	for _, in := range inputs {
		var got string
		err := s.queryRows(context.Background(), "SELECT "+quote(in), func(r *rowReader) error {
			got = r.string()
			return nil
		})
		if err != nil || got != in {
			t.Errorf("%q came back as %q, %v", in, got, err)
		}
	}
}

func FuzzQuote(f *testing.F) {
	f.Add("a'b\\c\x00\xff")
	f.Fuzz(func(t *testing.T, s string) {
		q := quote(s)
		if len(q) < 2 || q[0] != '\'' || q[len(q)-1] != '\'' {
			t.Fatalf("quote(%q) = %q", s, q)
		}
		// Inside, every quote and backslash is escaped and every byte is
		// printable ASCII, so the literal ends where it should.
		body := q[1 : len(q)-1]
		for i := 0; i < len(body); i++ {
			c := body[i]
			if c < 0x20 || c >= 0x7f {
				t.Fatalf("quote(%q) has byte %#x", s, c)
			}
			if c == '\\' {
				i++
				continue
			}
			if c == '\'' {
				t.Fatalf("quote(%q) = %q ends early", s, q)
			}
		}
	})
}

// TestClickHouseRegexp checks that selectors' regular expressions match in
// ClickHouse as they do in Go.
func TestClickHouseRegexp(t *testing.T) {
	s := openClickHouse(t, newDatabase(t), testOptions())
	values := []string{"", "a", "ab", "a\nb", "AB", "abc", "x1", "12", "é", "a.b", "svc-1", "line\n"}
	for _, re := range []string{"a.b", "(?s)a.b", "(?i)ab", "a|ab", ".*", ".+", `\d+`, `x\d`, "é|e", `a\.b`, "[[:alpha:]]+",
		"(?P<n>a)b", "(?<n>a)b", "svc-.*", "line$", "(?m)line$", `\w+`, "a{1,2}b?", `\Qa.b\E`, "[^a]*", `\pL`, "ab|"} {
		goRe := regexp.MustCompile("^(?:" + re + ")$")
		sqlRe, err := chRegexp(re)
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range values {
			var got uint64
			err := s.queryRows(context.Background(), "SELECT toUInt64(match("+quote(v)+", "+quote(sqlRe)+"))", func(r *rowReader) error {
				got = r.uint64()
				return nil
			})
			if err != nil {
				t.Fatalf("%q as %q: %v", re, sqlRe, err)
			}
			if want := goRe.MatchString(v); want != (got == 1) {
				t.Errorf("%q (sent as %q) on %q: ClickHouse %v, Go %v", re, sqlRe, v, got == 1, want)
			}
		}
	}
}

func TestParseError(t *testing.T) {
	tests := []struct {
		body string
		code int
		msg  string
	}{
		{"Code: 193, e.displayText() = DB::Exception: Wrong password for user flint, e.what() = DB::Exception\n", 193, "Wrong password for user flint"},
		{"Code: 516. DB::Exception: default: Authentication failed: password is incorrect, or there is no user with such name. (AUTHENTICATION_FAILED) (version 24.8.4.13 (official build))\n",
			516, "default: Authentication failed: password is incorrect, or there is no user with such name. (AUTHENTICATION_FAILED)"},
		{"Code: 60. DB::Exception: Table flint.samples does not exist. (UNKNOWN_TABLE) (version 25.1.1.1)\nstack trace\n", 60, "Table flint.samples does not exist. (UNKNOWN_TABLE)"},
		{"Code: x\n", 0, "Code: x"},
	}
	for _, tt := range tests {
		var e *chError
		if !errors.As(parseError([]byte(tt.body)), &e) || e.Code != tt.code || e.Msg != tt.msg {
			t.Errorf("%q: got %+v, want code %d %q", tt.body, e, tt.code, tt.msg)
		}
	}
}
