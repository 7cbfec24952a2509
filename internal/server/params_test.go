package server

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"
)

func TestParseTime(t *testing.T) {
	now := time.Date(2026, 11, 22, 11, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		in      string
		want    time.Time
		wantErr string
	}{
		{in: "now", want: now},
		{in: "now-15m", want: now.Add(-15 * time.Minute)},
		{in: "now-1h30m", want: now.Add(-90 * time.Minute)},
		{in: "now+5m", want: now.Add(5 * time.Minute)},
		{in: "now-1d", want: now.Add(-24 * time.Hour)},
		{in: "now-1w2d", want: now.Add(-9 * 24 * time.Hour)},
		{in: "now-1.5h", want: now.Add(-90 * time.Minute)},
		{in: "15m", want: now.Add(-15 * time.Minute)},
		{in: "2h", want: now.Add(-2 * time.Hour)},
		{in: "2026-11-22T10:00:00Z", want: time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)},
		{in: "2026-11-22T10:00:00.5+01:00", want: time.Date(2026, 11, 22, 9, 0, 0, 5e8, time.UTC)},
		{in: "1795341600", want: time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)},
		{in: "1795341600.25", want: time.Date(2026, 11, 22, 10, 0, 0, 25e7, time.UTC)},
		{in: "1795341600.000000001", want: time.Date(2026, 11, 22, 10, 0, 0, 1, time.UTC)},
		{in: "0", want: time.Unix(0, 0)},
		{in: "", wantErr: `bad time ""`},
		{in: "yesterday", wantErr: `bad time "yesterday" (want RFC 3339, Unix seconds, now, now-15m or 15m)`},
		{in: "now-", wantErr: `bad time "now-": bad duration "": empty`},
		{in: "now-15", wantErr: "missing unit"},
		{in: "now-15x", wantErr: `unknown unit "x"`},
		{in: "now--15m", wantErr: "want a number"},
		{in: "now-0s", wantErr: "not positive"},
		{in: "now-300000w", wantErr: "too long"},
		{in: "-15m", wantErr: "bad time"},
		{in: "1795341600.1234567891", wantErr: "at most nine decimals"},
		{in: "1.2.3", wantErr: "at most nine decimals"},
		{in: "99999999999999", wantErr: "beyond 2262"},
		{in: "9223372036", want: time.Unix(9223372036, 0)},
		{in: "9223372037", wantErr: "beyond 2262"},
		{in: "2262-04-12T00:00:00Z", wantErr: `time "2262-04-12T00:00:00Z" is 2262-04-12T00:00:00Z: want one from 1970 to 2262`},
		{in: "1969-12-31T23:59:59Z", wantErr: "want one from 1970 to 2262"},
		{in: "now-57y", wantErr: "unknown unit"},
		{in: "now-3000w", wantErr: "want one from 1970 to 2262"},
		{in: "2026-11-22T10:00:00", wantErr: "bad time"},
		{in: "2026-11-22", wantErr: "bad time"},
		{in: "1e9", wantErr: "bad time"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseTime(tc.in, now)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("ParseTime(%q) = %v, %v; want error %q", tc.in, got, err, tc.wantErr)
				}
				return
			}
			if err != nil || !got.Equal(tc.want) {
				t.Fatalf("ParseTime(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
			}
		})
	}
}

func TestParseDuration(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want time.Duration // 0: an error
	}{
		{"10s", 10 * time.Second},
		{"1h30m", 90 * time.Minute},
		{"1.5d", 36 * time.Hour},
		{"2w", 14 * 24 * time.Hour},
		{"500ms", 500 * time.Millisecond},
		{"1µs", time.Microsecond},
		{"3us2ns", 3002 * time.Nanosecond},
		{"2562047h", 2562047 * time.Hour},
		{"2562048h", 0},
		{"106751d23h", 2562047 * time.Hour},
		{"106751d24h", 0},
		{"2562047.9h", 0},
		{"9223372036854ms", 9223372036854 * time.Millisecond},
		{"9223372036854775808ns", 0},
		{"1h2562047h", 0},
		{"10", 0},
		{"s", 0},
		{".s", 0},
		{"1..5s", 0},
		{"1m-", 0},
		{"", 0},
		{"0s", 0},
	} {
		got, err := ParseDuration(tc.in)
		if tc.want == 0 {
			if err == nil {
				t.Errorf("ParseDuration(%q) = %v, want an error", tc.in, got)
			}
		} else if err != nil || got != tc.want {
			t.Errorf("ParseDuration(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
}

func TestDefaultStep(t *testing.T) {
	for _, tc := range []struct{ r, want time.Duration }{
		{time.Minute, 10 * time.Second},
		{50 * time.Minute, 10 * time.Second},
		{time.Hour, 15 * time.Second},
		{6 * time.Hour, 2 * time.Minute},
		{24 * time.Hour, 5 * time.Minute},
		{7 * 24 * time.Hour, time.Hour},
		{300 * 24 * time.Hour, 24 * time.Hour},
		{301 * 24 * time.Hour, 48 * time.Hour},
	} {
		if got := defaultStep(tc.r); got != tc.want {
			t.Errorf("defaultStep(%s) = %s, want %s", tc.r, got, tc.want)
		}
		if n := tc.r / defaultStep(tc.r); n > targetPoints {
			t.Errorf("defaultStep(%s) gives %d points", tc.r, n)
		}
	}
}

func FuzzParseTime(f *testing.F) {
	for _, s := range []string{"now", "now-15m", "now+1h30m", "15m", "1.5d", "2026-11-22T10:00:00Z",
		"2026-11-22T10:00:00.123456789-07:00", "1795341600", "1795341600.25", "now-9223372036s", "now-1w2d3h4m5s6ms7us8ns"} {
		f.Add(s)
	}
	now := time.Date(2026, 11, 22, 11, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, s string) {
		got, err := ParseTime(s, now)
		if err != nil {
			if strings.ContainsAny(err.Error(), "\r\n") && !strings.ContainsAny(s, "\r\n") {
				t.Fatalf("error of more than one line: %q", err)
			}
			return
		}
		switch {
		case strings.HasPrefix(s, "now-"):
			if !got.Before(now) {
				t.Fatalf("%q = %v, not before now", s, got)
			}
		case strings.HasPrefix(s, "now+"):
			if !got.After(now) {
				t.Fatalf("%q = %v, not after now", s, got)
			}
		}
		// Whatever was read can be written as RFC 3339 and read back.
		if y := got.Year(); y >= 0 && y <= 9999 {
			text := got.Format(time.RFC3339Nano)
			again, err := ParseTime(text, now)
			if err != nil || !again.Equal(got) {
				t.Fatalf("%q = %v, written %q, read back %v, %v", s, got, text, again, err)
			}
		}
	})
}

// FuzzQuery drives the whole request path, from the raw query string
// through parsing to the store and the encoders, for every route.
func FuzzQuery(f *testing.F) {
	routes := []string{"/api/v1/profile", "/api/v1/series", "/api/v1/diff", "/api/v1/labels",
		"/api/v1/labels/comm/values", "/debug/pprof/profile"}
	for i, q := range []string{
		"from=now-1h&to=now&selector={comm=\"api\"}&format=folded",
		"from=now-1h&to=now-58m&step=10s&by=pid&limit=1",
		"from=now-59m&to=now-58m&base_from=now-1h&format=json&normalize=true",
		"from=1795341600&to=2026-11-22T10:01:00Z",
		"from=now-2h",
		"seconds=0&pid=4242",
		"format=pprof&labels=comm,pid",
		"step=1&from=0",
		"selector=%zz",
	} {
		f.Add(uint8(i), q)
	}
	st := newFakeStore()
	h := newServer(Options{Store: st, Live: &fakeLive{}}, func() time.Time { return testNow })
	f.Fuzz(func(t *testing.T, route uint8, rawQuery string) {
		path := routes[int(route)%len(routes)]
		if v, err := url.ParseQuery(rawQuery); err == nil {
			checkParsed(t, path, v)
			if path == "/debug/pprof/profile" {
				// Parse only: a live profile waits its seconds.
				return
			}
		}
		r, err := http.NewRequest(http.MethodGet, path+"?"+rawQuery, nil)
		if err != nil {
			return
		}
		r.Host = "localhost:7070"
		w := &limitedRecorder{header: http.Header{}}
		h.ServeHTTP(w, r)
		switch w.status {
		case 200:
		case 400, 422:
			if body := w.body.String(); strings.Count(body, "\n") != 1 {
				t.Fatalf("%s?%s: error body not one line: %q", path, rawQuery, body)
			}
		default:
			t.Fatalf("%s?%s: status %d: %s", path, rawQuery, w.status, w.body.String())
		}
	})
}

// checkParsed checks what the request parsers accept.
func checkParsed(t *testing.T, path string, v url.Values) {
	switch path {
	case "/api/v1/profile":
		if r, err := parseProfileRequest(v, testNow); err == nil && !r.query.From.Before(r.query.To) {
			t.Fatalf("profile range %v to %v", r.query.From, r.query.To)
		}
	case "/api/v1/diff":
		if r, err := parseDiffRequest(v, testNow); err == nil {
			if !r.base.From.Before(r.base.To) || !r.current.From.Before(r.current.To) {
				t.Fatalf("diff ranges %+v", r)
			}
		}
	case "/api/v1/series":
		if r, err := parseSeriesRequest(v, testNow); err == nil {
			q := r.query
			if q.Step < minStep || !q.From.Before(q.To) || q.To.Sub(q.From)%q.Step != 0 ||
				q.To.Sub(q.From)/q.Step > maxPoints || q.From.UnixNano()%int64(q.Step) != 0 || r.limit < 1 || r.limit > maxLimit {
				t.Fatalf("series query %+v, limit %d", q, r.limit)
			}
		}
	case "/debug/pprof/profile":
		if r, err := parseLiveRequest(v); err == nil && (r.duration < time.Second || r.duration > maxLiveSeconds*time.Second) {
			t.Fatalf("live duration %s", r.duration)
		}
	}
}

// limitedRecorder is an http.ResponseWriter that keeps the status and at
// most 64 KiB of body: fuzzing must not hold every flame graph.
type limitedRecorder struct {
	header http.Header
	status int
	body   strings.Builder
}

func (w *limitedRecorder) Header() http.Header { return w.header }
func (w *limitedRecorder) WriteHeader(status int) {
	if w.status == 0 {
		w.status = status
	}
}
func (w *limitedRecorder) Write(b []byte) (int, error) {
	w.WriteHeader(200)
	if n := 64<<10 - w.body.Len(); n > 0 {
		w.body.Write(b[:min(n, len(b))])
	}
	return len(b), nil
}
