package server

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/flint-dev/flint/internal/profile"
)

func TestLive(t *testing.T) {
	for _, tc := range []struct {
		target  string
		status  int // 0: 200
		errMsg  string
		wantD   time.Duration
		wantSel string
	}{
		{target: "/debug/pprof/profile", wantD: 30 * time.Second, wantSel: "{}"},
		{target: "/debug/pprof/profile?seconds=10&pid=4242", wantD: 10 * time.Second, wantSel: `{pid="4242"}`},
		{target: `/debug/pprof/profile?seconds=300&selector={comm=~"api|web"}`, wantD: 300 * time.Second, wantSel: `{comm=~"api|web"}`},
		{target: "/debug/pprof/block?seconds=5&pid=4242", wantD: 5 * time.Second, wantSel: `{pid="4242"}`},
		{target: "/debug/pprof/block?seconds=301", status: 400, errMsg: "seconds: want whole seconds"},
		{target: "/debug/pprof/profile?seconds=301", status: 400, errMsg: `seconds: want whole seconds from 1 to 300, not "301"`},
		{target: "/debug/pprof/profile?seconds=0", status: 400, errMsg: "seconds: want whole seconds"},
		{target: "/debug/pprof/profile?seconds=1.5", status: 400, errMsg: "seconds: want whole seconds"},
		{target: "/debug/pprof/profile?pid=0", status: 400, errMsg: `pid: "0" is not a process ID`},
		{target: "/debug/pprof/profile?pid=1&selector={}", status: 400, errMsg: "pid: give pid or selector, not both"},
		{target: "/debug/pprof/profile?selector={pid", status: 400, errMsg: "selector: bad selector"},
		{target: "/debug/pprof/profile?debug=1", status: 400, errMsg: "debug: unknown parameter (want seconds, pid, selector)"},
		{target: "/debug/pprof/profile?seconds=%", status: 400, errMsg: "query: invalid URL escape"},
	} {
		t.Run(tc.target, func(t *testing.T) {
			live := &fakeLive{}
			w := get(New(Options{Live: live}), http.MethodGet, tc.target, nil)
			if tc.status != 0 {
				checkError(t, tc.target, w, tc.status, tc.errMsg)
				if w.Header().Get("X-Go-Pprof") == "" || w.Header().Get("Content-Disposition") != "" {
					t.Errorf("error headers %v: go tool pprof shows the message only with X-Go-Pprof", w.Header())
				}
				return
			}
			if w.Code != 200 {
				t.Fatalf("status %d: %s", w.Code, w.Body)
			}
			if got := w.Header().Get("Content-Disposition"); got != `attachment; filename="profile"` {
				t.Errorf("Content-Disposition %q", got)
			}
			if got := w.Header().Get("Content-Type"); got != "application/octet-stream" {
				t.Errorf("Content-Type %q", got)
			}
			p := parsePprof(t, w.Body.Bytes())
			if len(p.Sample) != 1 || p.Sample[0].Value[0] != 25 || p.DurationNanos != int64(tc.wantD) {
				t.Errorf("profile %v", p)
			}
			if live.d != tc.wantD || live.sel.String() != tc.wantSel {
				t.Errorf("sampled %s of %s, want %s of %s", live.d, live.sel, tc.wantD, tc.wantSel)
			}
			if want := map[bool]profile.Kind{false: profile.CPU, true: profile.OffCPU}[strings.Contains(tc.target, "/block")]; live.kind != want {
				t.Errorf("asked for kind %d, want %d", live.kind, want)
			}
		})
	}
}

func TestLiveErrors(t *testing.T) {
	live := &fakeLive{err: errors.New("perf_event_open: no such device")}
	s := newServer(Options{Live: live}, time.Now)
	w := get(s, http.MethodGet, "/debug/pprof/profile?seconds=1", nil)
	checkError(t, "/debug/pprof/profile", w, 500, "profile: perf_event_open: no such device")

	for range maxLive {
		s.live <- struct{}{}
	}
	w = get(s, http.MethodGet, "/debug/pprof/profile?seconds=1", nil)
	checkError(t, "/debug/pprof/profile", w, 429, "too many live profiles in progress (at most 4)")
}

// TestGoToolPprof fetches live and stored profiles with go tool pprof, as
// docs/API.md tells users to, through a real HTTP server and the token as
// the URL's password.
func TestGoToolPprof(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go tool pprof")
	}
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command")
	}
	live := &fakeLive{}
	srv := httptest.NewServer(newServer(Options{Store: newFakeStore(), Live: live, Token: testToken}, func() time.Time { return testNow }))
	defer srv.Close()
	authURL := strings.Replace(srv.URL, "http://", "http://flint:"+testToken+"@", 1)
	for _, tc := range []struct {
		url  string
		want []string
	}{
		{authURL + "/debug/pprof/profile?seconds=1&pid=4242", []string{"Type: samples", "25 100%", "main.work"}},
		{authURL + "/api/v1/profile?format=pprof&labels=comm", []string{"Duration: 1hrs", "150 38.46%", "main.work"}},
		{authURL + "/api/v1/diff?from=now-59m&to=now-58m&format=pprof", []string{"of 240 total", "-90 37.50%", "main.work"}},
		{srv.URL + "/debug/pprof/profile?seconds=1", []string{"401 Unauthorized - missing or wrong token"}},
		{authURL + "/debug/pprof/profile?seconds=999", []string{"400 Bad Request - seconds: want whole seconds from 1 to 300"}},
	} {
		t.Run(tc.url, func(t *testing.T) {
			cmd := exec.Command("go", "tool", "pprof", "-top", "-sample_index=samples", tc.url)
			cmd.Env = append(cmd.Environ(), "PPROF_TMPDIR="+t.TempDir())
			out, _ := cmd.CombinedOutput()
			text := strings.Join(strings.Fields(string(out)), " ")
			for _, want := range tc.want {
				if !strings.Contains(text, want) {
					t.Errorf("go tool pprof -top output lacks %q:\n%s", want, out)
				}
			}
		})
	}
	if live.d != time.Second || live.sel.String() != `{pid="4242"}` {
		t.Errorf("live profile of %s for %s", live.sel, live.d)
	}
}

// deadlineRecorder records the write deadline a handler sets through
// http.ResponseController.
type deadlineRecorder struct {
	*httptest.ResponseRecorder
	deadline time.Time
}

func (d *deadlineRecorder) SetWriteDeadline(t time.Time) error {
	d.deadline = t
	return nil
}

// TestLiveWriteDeadline checks that a live profile of N seconds gets the
// server's write timeout plus N to answer, so that the timeout Start sets
// does not cut it off.
func TestLiveWriteDeadline(t *testing.T) {
	srv := newHTTPServer(New(Options{Live: &fakeLive{}}), 0)
	r := httptest.NewRequest(http.MethodGet, "/debug/pprof/profile?seconds=200", nil)
	r.Host = "localhost"
	r = r.WithContext(context.WithValue(r.Context(), http.ServerContextKey, srv))
	w := &deadlineRecorder{ResponseRecorder: httptest.NewRecorder()}
	before := time.Now()
	srv.Handler.ServeHTTP(w, r)
	if w.Code != 200 {
		t.Fatalf("status %d: %s", w.Code, w.Body)
	}
	want := srv.WriteTimeout + 200*time.Second
	if got := w.deadline.Sub(before); got < want || got > want+time.Minute {
		t.Errorf("write deadline %s after the request, want %s (the write timeout %s plus 200 s)", got, want, srv.WriteTimeout)
	}
}
