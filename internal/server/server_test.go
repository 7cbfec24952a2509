package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	pprofile "github.com/google/pprof/profile"

	"github.com/flint-dev/flint/internal/profile"
	"github.com/flint-dev/flint/internal/store"
)

const testToken = "s3cret"

// get serves one request to 127.0.0.1:7070, or to the Host of header,
// and returns the recorded response.
func get(h http.Handler, method, target string, header http.Header) *httptest.ResponseRecorder {
	r := httptest.NewRequest(method, target, nil)
	r.Host = "127.0.0.1:7070"
	for k, v := range header {
		if k == "Host" {
			r.Host = v[0]
			continue
		}
		r.Header[k] = v
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func bearer(token string) http.Header {
	return http.Header{"Authorization": {"Bearer " + token}}
}

func basicAuth(user, password string) http.Header {
	r := httptest.NewRequest("GET", "/", nil)
	r.SetBasicAuth(user, password)
	return http.Header{"Authorization": {r.Header.Get("Authorization")}}
}

// checkError checks an error response: its status, and a body of one line
// holding want, as JSON {"error": …} for /api/ paths and plain text else.
func checkError(t *testing.T, target string, w *httptest.ResponseRecorder, status int, want string) {
	t.Helper()
	if w.Code != status {
		t.Fatalf("status %d, want %d; body %q", w.Code, status, w.Body)
	}
	body := w.Body.String()
	if strings.Count(body, "\n") != 1 || !strings.HasSuffix(body, "\n") {
		t.Errorf("error body is not one line: %q", body)
	}
	msg := body
	if strings.HasPrefix(target, "/api/") {
		if ct := w.Header().Get("Content-Type"); ct != "application/json" {
			t.Errorf("error content type %q", ct)
		}
		var e struct{ Error string }
		if err := json.Unmarshal(w.Body.Bytes(), &e); err != nil || e.Error == "" {
			t.Fatalf("error body %q is not {\"error\": …}: %v", body, err)
		}
		msg = e.Error
	} else if ct := w.Header().Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
		t.Errorf("error content type %q", ct)
	}
	if !strings.Contains(msg, want) {
		t.Errorf("error %q does not contain %q", msg, want)
	}
}

func decode[T any](t *testing.T, w *httptest.ResponseRecorder) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(w.Body.Bytes(), &v); err != nil {
		t.Fatalf("decode %q: %v", w.Body, err)
	}
	return v
}

func folded(w *httptest.ResponseRecorder) []string {
	return strings.Split(strings.TrimSpace(w.Body.String()), "\n")
}

// The fake store's windows run from t0 = now-1h to t0+2m.
func TestHandlers(t *testing.T) {
	type check func(t *testing.T, w *httptest.ResponseRecorder)
	for _, tc := range []struct {
		target string
		status int    // 0: 200
		ctype  string // wanted Content-Type prefix, for 200
		errMsg string // wanted in the error message
		check  check
	}{
		{target: "/healthz", ctype: "text/plain", check: func(t *testing.T, w *httptest.ResponseRecorder) {
			if w.Body.String() != "ok\n" {
				t.Errorf("body %q", w.Body)
			}
		}},
		{target: "/api/v1/profile", ctype: "application/json", check: func(t *testing.T, w *httptest.ResponseRecorder) {
			root := decode[profile.Node](t, w)
			if root.Total != 390 || len(root.Children) != 2 || root.Children[0].Name != "api" {
				t.Errorf("tree root total %d, children %d", root.Total, len(root.Children))
			}
		}},
		{target: "/api/v1/profile?from=now-1h&to=now-59m", check: func(t *testing.T, w *httptest.ResponseRecorder) {
			if root := decode[profile.Node](t, w); root.Total != 240 {
				t.Errorf("first minute has %d samples, want 240", root.Total)
			}
		}},
		{target: "/api/v1/profile?from=1795341600&to=2026-11-22T10:01:00Z&format=folded", ctype: "text/plain", check: func(t *testing.T, w *httptest.ResponseRecorder) {
			want := []string{"api;main.main;main.idle 60", "api;main.main;main.work 120", "worker;main.main;worker.loop 60"}
			if got := folded(w); !reflect.DeepEqual(got, want) {
				t.Errorf("folded %q, want %q", got, want)
			}
		}},
		{target: `/api/v1/profile?format=folded&selector={comm="api",pid=~"42.*"}`, check: func(t *testing.T, w *httptest.ResponseRecorder) {
			want := []string{"api;main.main;main.idle 120", "api;main.main;main.work 150"}
			if got := folded(w); !reflect.DeepEqual(got, want) {
				t.Errorf("folded %q, want %q", got, want)
			}
		}},
		{target: "/api/v1/profile?format=pprof", ctype: "application/octet-stream", check: func(t *testing.T, w *httptest.ResponseRecorder) {
			if cd := w.Header().Get("Content-Disposition"); cd != `attachment; filename="flint.pb.gz"` {
				t.Errorf("Content-Disposition %q", cd)
			}
			p := parsePprof(t, w.Body.Bytes())
			if p.Sample[0].NumLabel["pid"] == nil || p.Period != int64(10*time.Millisecond) {
				t.Errorf("pprof keeps all labels by default; got %v, period %d", p.Sample[0].NumLabel, p.Period)
			}
		}},
		{target: "/api/v1/profile?format=pprof&labels=comm", check: func(t *testing.T, w *httptest.ResponseRecorder) {
			p := parsePprof(t, w.Body.Bytes())
			if len(p.Sample) != 3 || p.Sample[0].NumLabel["pid"] != nil {
				t.Errorf("labels=comm: %d samples, labels %v", len(p.Sample), p.Sample[0].NumLabel)
			}
		}},
		{target: "/api/v1/profile?format=svg", ctype: "image/svg+xml", check: func(t *testing.T, w *httptest.ResponseRecorder) {
			if !strings.Contains(w.Body.String(), "<svg") || !strings.Contains(w.Body.String(), "CPU of all processes, 2026-11-22 10:00:00 to 2026-11-22 11:00:00 UTC") {
				t.Errorf("svg body without title: %.300s", w.Body)
			}
		}},
		{target: "/api/v1/profile?format=html&labels=", ctype: "text/html"},

		{target: "/api/v1/profile?from=yesterday", status: 400, errMsg: `from: bad time "yesterday"`},
		{target: "/api/v1/profile?to=now-1h&from=now", status: 400, errMsg: "from: 2026-11-22T11:00:00Z is not before to 2026-11-22T10:00:00Z"},
		{target: "/api/v1/profile?selector={comm=", status: 400, errMsg: `selector: bad selector "{comm="`},
		{target: "/api/v1/profile?selector={comm=~\"(\"}", status: 400, errMsg: "selector: bad selector"},
		{target: "/api/v1/profile?format=xml", status: 400, errMsg: `format: unknown format "xml"`},
		{target: "/api/v1/profile?selecter={}", status: 400, errMsg: "selecter: unknown parameter (want from, to, selector, format, labels, type)"},
		{target: "/api/v1/profile?type=offcpu", status: 400, errMsg: `type: profile type "offcpu": want cpu, off-cpu or wall`},
		{target: "/api/v1/series?type=", status: 400, errMsg: `type: profile type "": want cpu, off-cpu or wall`},
		{target: "/api/v1/diff?type=block", status: 400, errMsg: `type: profile type "block"`},
		{target: "/api/v1/profile?from=1&from=2", status: 400, errMsg: "from: given 2 times"},
		{target: "/api/v1/profile?" + strings.Repeat("y", 100) + "=1", status: 400, errMsg: strings.Repeat("y", 64) + "…: unknown parameter"},
		{target: "/api/v1/profile?selector=%zz", status: 400, errMsg: "query: invalid URL escape"},
		{target: "/api/v1/profile?labels=comm,no-such", status: 400, errMsg: `labels: "no-such" is not a label name`},
		{target: "/api/v1/profile?selector=" + strings.Repeat("x", 9000), status: 400, errMsg: "selector: longer than 8192 bytes"},

		{target: "/api/v1/series?from=now-1h&to=now-58m&step=10s", ctype: "application/json", check: func(t *testing.T, w *httptest.ResponseRecorder) {
			s := decode[SeriesResponse](t, w)
			if s.Step != 10 || s.By != "comm" || s.Period != 0.01 || !s.From.Equal(t0) || !s.To.Equal(t0.Add(2*time.Minute)) || len(s.Series) != 2 {
				t.Fatalf("series %+v", s)
			}
			api := s.Series[0]
			if api.Value != "api" || api.Samples != 270 || len(api.Points) != 12 {
				t.Fatalf("first series %+v", api)
			}
			if p := api.Points[0]; p != [2]float64{float64(t0.Unix()), 3} {
				t.Errorf("first point %v, want [%d 3]: 30 samples in 10 s", p, t0.Unix())
			}
			if p := api.Points[11]; p[1] != 1.5 {
				t.Errorf("last point %v, want 1.5 samples/s", p)
			}
		}},
		{target: "/api/v1/series?from=now-1h&to=now-58m&step=30&by=pid&limit=1", check: func(t *testing.T, w *httptest.ResponseRecorder) {
			s := decode[SeriesResponse](t, w)
			if len(s.Series) != 2 || s.Series[0].Value != "4242" || !s.Series[1].Other || s.Series[1].Samples != 120 {
				t.Fatalf("series %+v", s)
			}
			// 3 windows of 10 samples of worker in 30 s.
			if got := s.Series[1].Points[0][1]; got != 1 {
				t.Errorf("other series rate %g, want 1", got)
			}
		}},
		{target: "/api/v1/series?from=now-1h&to=now-59m59s&step=7s", check: func(t *testing.T, w *httptest.ResponseRecorder) {
			// The range widens to whole 7 s steps since the epoch.
			s := decode[SeriesResponse](t, w)
			if s.From.Unix()%7 != 0 || s.To.Unix()%7 != 0 || s.From.After(t0) || s.To.Before(t0.Add(time.Second)) {
				t.Errorf("range %v to %v not aligned to 7 s around t0", s.From, s.To)
			}
		}},
		{target: "/api/v1/series", check: func(t *testing.T, w *httptest.ResponseRecorder) {
			if s := decode[SeriesResponse](t, w); s.Step != 15 || len(s.Series[0].Points) != 240 {
				t.Errorf("default step %gs, %d points; want 15s and 240", s.Step, len(s.Series[0].Points))
			}
		}},
		{target: "/api/v1/series?from=now-1d&step=1s", status: 400, errMsg: "step: 1s gives 86400 points"},
		{target: "/api/v1/series?step=500ms", status: 400, errMsg: "step: step 500ms is below the minimum of 1s"},
		{target: "/api/v1/series?step=often", status: 400, errMsg: `step: bad duration "often"`},
		{target: "/api/v1/series?by=a.b", status: 400, errMsg: `by: "a.b" is not a label name`},
		{target: "/api/v1/series?limit=0", status: 400, errMsg: "limit: want a number of series from 1 to 1000"},

		{target: "/api/v1/labels", ctype: "application/json", check: func(t *testing.T, w *httptest.ResponseRecorder) {
			if got := decode[[]string](t, w); !reflect.DeepEqual(got, []string{"comm", "pid", "thread", "tid"}) {
				t.Errorf("labels %q", got)
			}
		}},
		{target: "/api/v1/labels/comm/values?from=now-2h", check: func(t *testing.T, w *httptest.ResponseRecorder) {
			if got := decode[[]string](t, w); !reflect.DeepEqual(got, []string{"api", "worker"}) {
				t.Errorf("values %q", got)
			}
		}},
		{target: "/api/v1/labels/pod/values", check: func(t *testing.T, w *httptest.ResponseRecorder) {
			if w.Body.String() != "[]\n" {
				t.Errorf("no values: body %q, want []", w.Body)
			}
		}},
		{target: "/api/v1/labels/a-b/values", status: 400, errMsg: `name: "a-b" is not a label name`},
		{target: "/api/v1/labels?to=soon", status: 400, errMsg: `to: bad time "soon"`},

		// The base defaults to the minute before from.
		{target: "/api/v1/diff?from=now-59m&to=now-58m&format=folded", ctype: "text/plain", check: func(t *testing.T, w *httptest.ResponseRecorder) {
			want := []string{"api;main.main;main.idle 60 60", "api;main.main;main.work 120 30", "worker;main.main;worker.loop 60 60"}
			if got := folded(w); !reflect.DeepEqual(got, want) {
				t.Errorf("diff %q, want %q", got, want)
			}
		}},
		{target: "/api/v1/diff?from=now-59m&to=now-58m&base_from=now-1h&format=folded&normalize=true", check: func(t *testing.T, w *httptest.ResponseRecorder) {
			// The base is scaled by 150/240.
			want := []string{"api;main.main;main.idle 38 60", "api;main.main;main.work 75 30", "worker;main.main;worker.loop 38 60"}
			if got := folded(w); !reflect.DeepEqual(got, want) {
				t.Errorf("diff %q, want %q", got, want)
			}
		}},
		{target: `/api/v1/diff?from=now-59m&to=now-58m&base_to=now-59m&base_selector={comm="worker"}`, ctype: "application/json", check: func(t *testing.T, w *httptest.ResponseRecorder) {
			root := decode[profile.DiffNode](t, w)
			if root.Base != 60 || root.Current != 150 {
				t.Errorf("diff root base %d, current %d; want 60, 150", root.Base, root.Current)
			}
		}},
		{target: "/api/v1/diff?from=now-59m&to=now-58m&format=pprof", ctype: "application/octet-stream", check: func(t *testing.T, w *httptest.ResponseRecorder) {
			p := parsePprof(t, w.Body.Bytes())
			var base int
			for _, s := range p.Sample {
				if s.DiffBaseSample() {
					base++
				}
			}
			if base != 3 || len(p.Sample) != 6 {
				t.Errorf("%d base samples of %d", base, len(p.Sample))
			}
		}},
		{target: "/api/v1/diff?from=now-59m&to=now-58m&format=svg", ctype: "image/svg+xml"},
		{target: "/api/v1/diff?base_from=later", status: 400, errMsg: `base_from: bad time "later"`},
		{target: "/api/v1/diff?base_from=now&base_to=now-1m", status: 400, errMsg: "base_from: 2026-11-22T11:00:00Z is not before base_to"},
		{target: "/api/v1/diff?base_selector={", status: 400, errMsg: "base_selector: bad selector"},
		{target: "/api/v1/diff?normalize=maybe", status: 400, errMsg: `normalize: want true or false, not "maybe"`},

		{target: "/api/v1/findings?from=now-1h", ctype: "application/json", check: func(t *testing.T, w *httptest.ResponseRecorder) {
			resp := decode[struct {
				Findings []map[string]any
			}](t, w)
			if len(resp.Findings) != 1 {
				t.Fatalf("findings %v", resp.Findings)
			}
			f := resp.Findings[0]
			labels, _ := f["labels"].(map[string]any)
			if f["id"] != "busy-poll" || f["summary"] != "spins" || f["time"] != "2026-11-22T10:00:10Z" || f["duration"] != 10.0 || labels["pid"] != "4242" {
				t.Errorf("finding %v", f)
			}
		}},
		{target: `/api/v1/findings?from=now-1h&selector={comm="worker"}`, check: func(t *testing.T, w *httptest.ResponseRecorder) {
			if resp := decode[FindingsResponse](t, w); len(resp.Findings) != 0 {
				t.Errorf("findings of worker: %s", resp.Findings)
			}
		}},
		{target: "/api/v1/findings?selector={", status: 400, errMsg: "selector: bad selector"},
		{target: "/api/v1/findings?from=now&to=now-1h", status: 400, errMsg: "from: "},

		{target: "/api/v1/nothing", status: 404, errMsg: "no such path"},
		{target: "/api/v1/profile/", status: 404, errMsg: "no such path"},
		{target: "/nothing", status: 404, errMsg: "no such path /nothing"},
		{target: "/metrics", ctype: "text/plain; version=0.0.4", check: func(t *testing.T, w *httptest.ResponseRecorder) {
			// The API's own metrics, even without the agent's.
			if !strings.Contains(w.Body.String(), "flint_api_queries_in_progress 0\n") {
				t.Errorf("metrics %q", w.Body)
			}
		}},
		{target: "/metrics?x=1", status: 400, errMsg: "/metrics takes no parameters"},
		// flint server: no live profiler.
		{target: "/debug/pprof/profile?seconds=5&pid=42", status: 501,
			errMsg: "live profiles come from an agent, so ask the agent on the node, e.g. http://NODE:7070/debug/pprof/profile?seconds=5&pid=42"},
	} {
		t.Run(tc.target, func(t *testing.T) {
			h := newServer(Options{Store: newFakeStore()}, func() time.Time { return testNow })
			w := get(h, http.MethodGet, tc.target, nil)
			if tc.status != 0 {
				checkError(t, tc.target, w, tc.status, tc.errMsg)
				return
			}
			if w.Code != http.StatusOK {
				t.Fatalf("status %d: %s", w.Code, w.Body)
			}
			if ct := w.Header().Get("Content-Type"); !strings.HasPrefix(ct, tc.ctype) {
				t.Errorf("Content-Type %q, want %q", ct, tc.ctype)
			}
			if tc.check != nil {
				tc.check(t, w)
			}
		})
	}
}

func parsePprof(t *testing.T, data []byte) *pprofile.Profile {
	t.Helper()
	p, err := pprofile.ParseData(data)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.CheckValid(); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestStoreErrors checks the status of each kind of store failure.
func TestStoreErrors(t *testing.T) {
	for _, tc := range []struct {
		name   string
		setup  func(*fakeStore, *Options)
		target string
		status int
		want   string
	}{
		{"too large", func(f *fakeStore, _ *Options) { f.maxSamples = 1 }, "/api/v1/profile", 422,
			"query too large: more than 1 distinct stacks"},
		{"over MaxSamples", func(_ *fakeStore, o *Options) { o.MaxSamples = 2 }, "/api/v1/diff?from=now-59m&to=now-58m&format=pprof", 422,
			"base: query too large: the profile has 3 distinct samples, more than 2"},
		{"bad query", func(f *fakeStore, _ *Options) { f.err = fmt.Errorf("%w: range beyond retention", store.ErrBadQuery) },
			"/api/v1/series", 400, "bad query: range beyond retention"},
		{"internal", func(f *fakeStore, _ *Options) { f.err = errors.New("disk on fire\nsecond line") },
			"/api/v1/labels", 500, "disk on fire second line"},
		{"timeout", func(f *fakeStore, o *Options) { f.block = true; o.QueryTimeout = 20 * time.Millisecond },
			"/api/v1/labels/comm/values", 503, "context deadline exceeded (the limit is 20ms: narrow the range or selector)"},
		{"no store", func(_ *fakeStore, o *Options) { o.Store = nil }, "/api/v1/profile", 404,
			"this agent keeps no profiles (no store)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeStore()
			o := Options{Store: f}
			tc.setup(f, &o)
			w := get(newServer(o, func() time.Time { return testNow }), http.MethodGet, tc.target, nil)
			checkError(t, tc.target, w, tc.status, tc.want)
		})
	}
}

func TestAuthAndMethods(t *testing.T) {
	var metrics bytes.Buffer
	metrics.WriteString("# TYPE flint_samples_total counter\nflint_samples_total 42\n")
	h := newServer(Options{Store: newFakeStore(), Live: &fakeLive{}, Token: testToken, Metrics: func(w io.Writer) { w.Write(metrics.Bytes()) }},
		func() time.Time { return testNow })
	basic, wrongBasic := basicAuth("flint", testToken), basicAuth("flint", "nope")

	for _, tc := range []struct {
		name, method, target string
		header               http.Header
		status               int
		want                 string
	}{
		{"healthz needs no token", "GET", "/healthz", nil, 200, "ok"},
		{"no token", "GET", "/api/v1/labels", nil, 401, "missing or wrong token"},
		{"wrong token", "GET", "/api/v1/labels", bearer("s3cre"), 401, "missing or wrong token"},
		{"wrong scheme", "GET", "/api/v1/labels", http.Header{"Authorization": {testToken}}, 401, "missing or wrong token"},
		{"wrong password", "GET", "/metrics", wrongBasic, 401, "missing or wrong token"},
		{"unknown path, no token", "GET", "/nothing", nil, 401, "missing or wrong token"},
		{"bearer", "GET", "/api/v1/labels", bearer(testToken), 200, `["comm","pid","thread","tid"]`},
		{"bearer scheme in any case", "GET", "/api/v1/labels", http.Header{"Authorization": {"bEARER " + testToken}}, 200, "comm"},
		{"bearer with spaces", "GET", "/api/v1/labels", http.Header{"Authorization": {"Bearer   " + testToken + " "}}, 200, "comm"},
		{"bearer without token", "GET", "/api/v1/labels", http.Header{"Authorization": {"Bearer"}}, 401, "missing or wrong token"},
		{"bearer, longer token", "GET", "/api/v1/labels", bearer(testToken + "x"), 401, "missing or wrong token"},
		{"token as basic user name", "GET", "/metrics", basicAuth(testToken, ""), 401, "missing or wrong token"},
		{"token in the query string", "GET", "/api/v1/labels?token=" + testToken, nil, 401, "missing or wrong token"},
		{"access_token in the query string", "GET", "/metrics?access_token=" + testToken, nil, 401, "missing or wrong token"},
		{"token in a cookie", "GET", "/api/v1/labels", http.Header{"Cookie": {"token=" + testToken}}, 401, "missing or wrong token"},
		{"any Host with the token", "GET", "/api/v1/labels", http.Header{"Authorization": {"Bearer " + testToken}, "Host": {"flint.example.com"}}, 200, "comm"},
		{"any Host, no token", "GET", "/api/v1/labels", http.Header{"Host": {"flint.example.com"}}, 401, "missing or wrong token"},
		{"basic", "GET", "/metrics", basic, 200, "flint_samples_total 42"},
		{"HEAD", "HEAD", "/api/v1/labels", bearer(testToken), 200, ""},
		{"HEAD live does not sample", "HEAD", "/debug/pprof/profile?seconds=300", bearer(testToken), 200, ""},
		{"POST api", "POST", "/api/v1/profile", bearer(testToken), 405, "method POST not allowed (use GET)"},
		{"DELETE healthz", "DELETE", "/healthz", nil, 405, "method DELETE not allowed"},
		{"PUT before auth", "PUT", "/metrics", nil, 405, "method PUT not allowed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := get(h, tc.method, tc.target, tc.header)
			if tc.status != 200 {
				checkError(t, tc.target, w, tc.status, tc.want)
			} else if w.Code != 200 || !strings.Contains(w.Body.String(), tc.want) {
				t.Fatalf("status %d, body %q; want 200 and %q", w.Code, w.Body, tc.want)
			}
			switch tc.status {
			case 401:
				if got := w.Header().Values("WWW-Authenticate"); len(got) != 2 {
					t.Errorf("WWW-Authenticate %q", got)
				}
			case 405:
				if got := w.Header().Get("Allow"); got != "GET, HEAD" {
					t.Errorf("Allow %q", got)
				}
			}
		})
	}
}

// TestHost checks which Host headers are answered without a token: a page
// on another site that rebinds its name to 127.0.0.1 must not read the API.
func TestHost(t *testing.T) {
	h := newServer(Options{Store: newFakeStore(), AllowHosts: []string{"flint.internal", "10.1.2.3"}}, func() time.Time { return testNow })
	for _, tc := range []struct {
		host, target string
		status       int
	}{
		{"127.0.0.1:7070", "/api/v1/labels", 200},
		{"127.0.0.1", "/api/v1/labels", 200},
		{"127.8.9.10:80", "/api/v1/labels", 200},
		{"[::1]:7070", "/api/v1/labels", 200},
		{"[::1]", "/api/v1/labels", 200},
		{"[::ffff:127.0.0.1]:7070", "/api/v1/labels", 200},
		{"localhost:7070", "/api/v1/labels", 200},
		{"LocalHost", "/", 200},
		{"localhost.:7070", "/api/v1/labels", 200},
		{"flint.internal:7070", "/api/v1/labels", 200},
		{"FLINT.internal", "/", 200},
		{"10.1.2.3:7070", "/api/v1/labels", 200},
		{"evil.example", "/api/v1/labels", 421},
		{"evil.example:7070", "/", 421},
		{"evil.example:7070", "/metrics", 421},
		{"evil.example:7070", "/debug/pprof/profile", 421},
		{"localhost.evil.example", "/api/v1/labels", 421},
		{"127.0.0.1.evil.example", "/api/v1/labels", 421},
		{"0.0.0.0:7070", "/api/v1/labels", 421}, // browsers send it to loopback
		{"[::]:7070", "/api/v1/labels", 421},
		{"10.0.0.5:7070", "/api/v1/labels", 421},
		{"sub.flint.internal", "/api/v1/labels", 421},
		{"", "/api/v1/labels", 421},
		{"evil.example", "/healthz", 200}, // says only "ok"
	} {
		t.Run(tc.host+tc.target, func(t *testing.T) {
			w := get(h, http.MethodGet, tc.target, http.Header{"Host": {tc.host}})
			if tc.status == 421 {
				checkError(t, tc.target, w, 421, "is not a name of this machine")
			} else if w.Code != tc.status {
				t.Fatalf("status %d, want %d: %s", w.Code, tc.status, w.Body)
			}
		})
	}
}

// TestNoCORS checks that no answer lets a page on another origin read it:
// no Access-Control-* header on any route, preflight included.
func TestNoCORS(t *testing.T) {
	var h http.Handler = newServer(Options{Store: newFakeStore(), Live: &fakeLive{}}, func() time.Time { return testNow })
	withToken := newServer(Options{Store: newFakeStore(), Live: &fakeLive{}, Token: testToken}, func() time.Time { return testNow })
	origin := http.Header{"Origin": {"https://evil.example"}, "Access-Control-Request-Method": {"GET"}}
	for _, target := range []string{"/", "/assets/none.js", "/healthz", "/metrics", "/api/v1/profile", "/api/v1/labels",
		"/api/v1/series", "/api/v1/diff", "/api/v1/findings", "/api/v1/labels/comm/values", "/api/v1/nothing",
		"/debug/pprof/profile?seconds=1", "/nothing"} {
		for _, method := range []string{http.MethodGet, http.MethodOptions} {
			for name, h := range map[string]http.Handler{"no token": h, "token": withToken} {
				w := get(h, method, target, origin)
				for k := range w.Header() {
					if strings.HasPrefix(strings.ToLower(k), "access-control-") {
						t.Errorf("%s %s (%s): %d with %s: %q", method, target, name, w.Code, k, w.Header()[k])
					}
				}
			}
		}
	}
}

// TestQueryLimit fills every query place with queries the store holds,
// then checks that one more gets 429 at once, that routes without a store
// query still answer, and that the places free up.
func TestQueryLimit(t *testing.T) {
	st := newFakeStore()
	st.block, st.entered = true, make(chan struct{})
	s := newServer(Options{Store: st, MaxQueries: 2}, func() time.Time { return testNow })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int)
	for _, target := range []string{"/api/v1/profile", "/api/v1/labels"} {
		go func() {
			r := httptest.NewRequest(http.MethodGet, target, nil).WithContext(ctx)
			r.Host = "localhost"
			w := httptest.NewRecorder()
			s.ServeHTTP(w, r)
			done <- w.Code
		}()
	}
	<-st.entered
	<-st.entered
	for _, target := range []string{"/api/v1/series", "/api/v1/findings", "/api/v1/labels/comm/values"} {
		w := get(s, http.MethodGet, target, nil)
		checkError(t, target, w, 429, "too many queries in progress (at most 2): try again in a moment")
		if w.Header().Get("Retry-After") != "1" {
			t.Errorf("%s: Retry-After %q", target, w.Header().Get("Retry-After"))
		}
	}
	for _, target := range []string{"/healthz", "/", "/metrics"} {
		if w := get(s, http.MethodGet, target, nil); w.Code != 200 {
			t.Errorf("%s while queries are busy: %d", target, w.Code)
		}
	}
	metrics := get(s, http.MethodGet, "/metrics", nil).Body.String()
	for _, want := range []string{"flint_api_queries_in_progress 2\n", `flint_api_requests_total{route="series",code="429"} 1` + "\n"} {
		if !strings.Contains(metrics, want) {
			t.Errorf("metrics lack %q:\n%s", want, metrics)
		}
	}
	cancel()
	<-done
	<-done
	st.mu.Lock()
	st.block, st.entered = false, nil
	st.mu.Unlock()
	if w := get(s, http.MethodGet, "/api/v1/labels", nil); w.Code != 200 {
		t.Errorf("after the queries ended: %d %s", w.Code, w.Body)
	}
}

func TestMetrics(t *testing.T) {
	s := newServer(Options{Store: newFakeStore(), Metrics: func(w io.Writer) { io.WriteString(w, "flint_samples_total 42\n") }},
		func() time.Time { return testNow })
	for _, target := range []string{"/api/v1/labels", "/api/v1/labels", "/api/v1/profile?format=folded", "/api/v1/profile?from=soon", "/api/v1/nothing"} {
		get(s, http.MethodGet, target, nil)
	}
	body := get(s, http.MethodGet, "/metrics", nil).Body.String()
	if !strings.HasPrefix(body, "flint_samples_total 42\n") {
		t.Errorf("the agent's metrics do not come first:\n%s", body)
	}
	for _, want := range []string{
		`flint_api_requests_total{route="labels",code="200"} 2`,
		`flint_api_requests_total{route="profile",code="200"} 1`,
		`flint_api_requests_total{route="profile",code="400"} 1`,
		`flint_api_request_seconds_count{route="profile"} 2`,
		`flint_api_request_seconds_sum{route="labels"} `,
		"# TYPE flint_api_request_seconds summary",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %q:\n%s", want, body)
		}
	}
	if strings.Contains(body, "nothing") {
		t.Errorf("unknown paths are counted:\n%s", body)
	}
}

// TestPprofNode checks that pprof profiles keep the node by default, so
// the pids of a fleet's profile stay apart (-tagfocus=node=n1).
func TestPprofNode(t *testing.T) {
	work, _, _ := testStack()
	st := &fakeStore{}
	for _, node := range []string{"n1", "n2"} {
		st.Write(context.Background(), &profile.Profile{Start: t0, Duration: 10 * time.Second, Period: 10 * time.Millisecond,
			Samples: []*profile.Sample{{Stack: work, Count: 3, Labels: map[string]string{profile.LabelComm: "api", profile.LabelPID: "42", profile.LabelNode: node}}}})
	}
	w := get(newServer(Options{Store: st}, func() time.Time { return testNow }), http.MethodGet, "/api/v1/profile?format=pprof", nil)
	p := parsePprof(t, w.Body.Bytes())
	var nodes []string
	for _, s := range p.Sample {
		nodes = append(nodes, s.Label["node"]...)
	}
	sort.Strings(nodes)
	if !reflect.DeepEqual(nodes, []string{"n1", "n2"}) {
		t.Errorf("node tags %q, want n1 and n2", nodes)
	}
}

// TestReceiveRoute checks that OTLP profiles are taken only where the agent
// receives them, under the API's Host and token rules.
func TestReceiveRoute(t *testing.T) {
	var calls int
	receive := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { calls++; io.WriteString(w, "taken") })
	for _, tc := range []struct {
		name   string
		o      Options
		method string
		header http.Header
		status int
		taken  bool
	}{
		{"not receiving", Options{}, "POST", nil, 405, false},
		{"receiving on loopback", Options{Receive: receive}, "POST", nil, 200, true},
		{"rebound Host", Options{Receive: receive}, "POST", http.Header{"Host": {"evil.example"}}, 421, false},
		{"no token", Options{Receive: receive, Token: testToken}, "POST", nil, 401, false},
		{"token", Options{Receive: receive, Token: testToken}, "POST", bearer(testToken), 200, true},
		{"PUT", Options{Receive: receive}, "PUT", nil, 405, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			calls = 0
			w := get(newServer(tc.o, func() time.Time { return testNow }), tc.method, "/v1development/profiles", tc.header)
			if w.Code != tc.status || (calls == 1) != tc.taken {
				t.Errorf("status %d, receiver called %d times; want %d, taken %v: %s", w.Code, calls, tc.status, tc.taken, w.Body)
			}
		})
	}
}
