package export

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	pprof "github.com/google/pprof/profile"

	"github.com/flint-dev/flint/internal/profile"
	"github.com/flint-dev/flint/internal/symbol"
)

// pyroscopePush is one request the fake Pyroscope received, decoded.
type pyroscopePush struct {
	method, path, contentType string
	query                     url.Values
	user, password            string
	auth                      bool
	tenant                    string
	tls                       bool
	fields                    []string // multipart field names, in order
	prof                      *pprof.Profile
}

// fakePyroscope is an ingest endpoint that decodes each push as Pyroscope
// does (multipart form, gzipped pprof in the profile field) and answers
// with answer(name parameter).
type fakePyroscope struct {
	mu     sync.Mutex
	pushes []pyroscopePush
}

func (f *fakePyroscope) handler(t *testing.T, answer func(name string) (int, string)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		p := pyroscopePush{
			method: r.Method, path: r.URL.Path, contentType: r.Header.Get("Content-Type"),
			query: r.URL.Query(), tenant: r.Header.Get("X-Scope-OrgID"), tls: r.TLS != nil,
		}
		p.user, p.password, p.auth = r.BasicAuth()
		if err := p.decode(r); err != nil {
			t.Errorf("push %q: %v", p.query.Get("name"), err)
		}
		f.mu.Lock()
		f.pushes = append(f.pushes, p)
		f.mu.Unlock()
		code, body := http.StatusOK, ""
		if answer != nil {
			code, body = answer(p.query.Get("name"))
		}
		w.WriteHeader(code)
		_, _ = io.WriteString(w, body)
	}
}

func (p *pyroscopePush) decode(r *http.Request) error {
	mediaType, params, err := mime.ParseMediaType(p.contentType)
	if err != nil {
		return err
	}
	if mediaType != "multipart/form-data" {
		return errors.New("content type " + mediaType)
	}
	mr := multipart.NewReader(r.Body, params["boundary"])
	for {
		part, err := mr.NextPart()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		p.fields = append(p.fields, part.FormName())
		if part.FormName() != "profile" {
			continue
		}
		// Pyroscope's clients send the pprof gzipped: insist on it.
		gz, err := gzip.NewReader(part)
		if err != nil {
			return err
		}
		raw, err := io.ReadAll(gz)
		if err != nil {
			return err
		}
		if p.prof, err = pprof.ParseData(raw); err != nil {
			return err
		}
	}
}

func (f *fakePyroscope) byName() map[string][]pyroscopePush {
	f.mu.Lock()
	defer f.mu.Unlock()
	m := map[string][]pyroscopePush{}
	for _, p := range f.pushes {
		m[p.query.Get("name")] = append(m[p.query.Get("name")], p)
	}
	return m
}

const (
	webName      = "ebpf/shop/web{comm=web,container=web,namespace=shop,node=node-1,pod=web-7f9c}"
	postgresName = "postgres{comm=postgres,node=node-1}"
)

// pyroscopeWindow is a window with a Kubernetes container (two stacks) and
// two processes of one executable outside any container.
func pyroscopeWindow() *profile.Profile {
	web := &profile.Mapping{Start: 0x400000, Limit: 0x500000, File: "/app/web", BuildID: "aa"}
	pg := &profile.Mapping{Start: 0x600000, Limit: 0x700000, File: "/usr/lib/postgresql/16/bin/postgres"}
	loc := func(m *profile.Mapping, addr uint64, fn string) *profile.Location {
		return &profile.Location{Address: addr, Mapping: m, Frames: []symbol.Frame{{Function: fn}}}
	}
	main, handle, serve := loc(web, 0x401000, "main.main"), loc(web, 0x402000, "main.handle"), loc(web, 0x403000, "main.serve")
	pgMain, exec := loc(pg, 0x601000, "PostgresMain"), loc(pg, 0x602000, "ExecQuery")
	webLabels := func(tid, thread string) map[string]string {
		return map[string]string{
			profile.LabelComm: "web", profile.LabelPID: "100", profile.LabelTID: tid, profile.LabelThread: thread,
			profile.LabelExe: "/app/web", profile.LabelNode: "node-1", profile.LabelStartTime: "5000",
			profile.LabelNamespace: "shop", profile.LabelPod: "web-7f9c", profile.LabelContainer: "web",
			profile.LabelPodUID: "0f1e", profile.LabelContainerID: "c0ffee", profile.LabelCgroup: "/kubepods/c0ffee",
		}
	}
	pgLabels := func(pid, startTime string) map[string]string {
		return map[string]string{
			profile.LabelComm: "postgres", profile.LabelPID: pid, profile.LabelTID: pid, profile.LabelThread: "postgres",
			profile.LabelExe: "/usr/lib/postgresql/16/bin/postgres", profile.LabelNode: "node-1",
			profile.LabelStartTime: startTime, profile.LabelBuildID: "bb",
		}
	}
	return &profile.Profile{
		Start:    time.Unix(1700000000, 600_000_000),
		Duration: 10 * time.Second,
		Period:   time.Second / 99,
		Samples: []*profile.Sample{
			{Stack: []*profile.Location{handle, main}, Count: 5, Labels: webLabels("101", "worker-1")},
			{Stack: []*profile.Location{serve, main}, Count: 7, Labels: webLabels("102", "worker-2")},
			{Stack: []*profile.Location{exec, pgMain}, Count: 3, Labels: pgLabels("200", "6000")},
			{Stack: []*profile.Location{pgMain}, Count: 4, Labels: pgLabels("300", "7000")},
		},
	}
}

func newTestPyroscope(t *testing.T, raw string, client *http.Client) Sender {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewPyroscope(u, client)
	if err != nil {
		t.Fatalf("NewPyroscope(%s): %v", raw, err)
	}
	return s
}

func TestPyroscopeSendRequests(t *testing.T) {
	var f fakePyroscope
	srv := httptest.NewServer(f.handler(t, nil))
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	s := newTestPyroscope(t, "pyroscope://alice:s3cret@"+host+"/prefix?tenant=team-a", nil)
	if got, want := s.Name(), "pyroscope://"+host+"/prefix?tenant=team-a"; got != want {
		t.Errorf("Name() = %q, want %q", got, want)
	}

	w := pyroscopeWindow()
	if err := s.Send(context.Background(), w); err != nil {
		t.Fatal(err)
	}

	period := w.Period.Nanoseconds()
	tests := []struct {
		name      string
		count     int64
		pids      []int64
		functions []string
	}{
		{webName, 12, []int64{100}, []string{"main.handle", "main.main", "main.serve"}},
		{postgresName, 7, []int64{200, 300}, []string{"ExecQuery", "PostgresMain"}},
	}
	pushes := f.byName()
	if len(pushes) != len(tests) {
		t.Errorf("pushed %d series, want %d: %v", len(pushes), len(tests), pushes)
	}
	var total int64
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if len(pushes[tt.name]) != 1 {
				t.Fatalf("%d pushes, want 1", len(pushes[tt.name]))
			}
			p := pushes[tt.name][0]
			if p.method != http.MethodPost || p.path != "/prefix/ingest" {
				t.Errorf("request %s %s, want POST /prefix/ingest", p.method, p.path)
			}
			wantQuery := url.Values{
				"name":       {tt.name},
				"from":       {"1700000000"}, // the window's start, truncated
				"until":      {"1700000010"},
				"sampleRate": {"99"},
				"spyName":    {"ebpfspy"},
			}
			if p.query.Encode() != wantQuery.Encode() {
				t.Errorf("query %s, want %s", p.query.Encode(), wantQuery.Encode())
			}
			if !strings.HasPrefix(p.contentType, "multipart/form-data; boundary=") {
				t.Errorf("content type %q", p.contentType)
			}
			if !p.auth || p.user != "alice" || p.password != "s3cret" {
				t.Errorf("basic auth %v %q %q, want alice s3cret", p.auth, p.user, p.password)
			}
			if p.tenant != "team-a" {
				t.Errorf("X-Scope-OrgID %q, want team-a", p.tenant)
			}
			if !slices.Equal(p.fields, []string{"profile"}) {
				t.Errorf("form fields %q, want [profile]", p.fields)
			}
			prof := p.prof
			if prof == nil {
				t.Fatal("no profile decoded")
			}
			if len(prof.SampleType) != 1 || prof.SampleType[0].Type != "cpu" || prof.SampleType[0].Unit != "nanoseconds" {
				t.Errorf("sample types %v, want [cpu/nanoseconds]", prof.SampleType)
			}
			if prof.PeriodType == nil || prof.PeriodType.Type != "cpu" || prof.Period != period {
				t.Errorf("period %v %d, want cpu/nanoseconds %d", prof.PeriodType, prof.Period, period)
			}
			if prof.TimeNanos != w.Start.UnixNano() || prof.DurationNanos != w.Duration.Nanoseconds() {
				t.Errorf("time %d+%d, want %d+%d", prof.TimeNanos, prof.DurationNanos, w.Start.UnixNano(), w.Duration.Nanoseconds())
			}
			var count int64
			var pids []int64
			for _, smp := range prof.Sample {
				if smp.Value[0]%period != 0 {
					t.Errorf("value %d is not a multiple of the period", smp.Value[0])
				}
				count += smp.Value[0] / period
				if len(smp.Label) != 0 {
					t.Errorf("string labels %v would become Pyroscope series", smp.Label)
				}
				if len(smp.NumLabel["pid"]) != 1 || len(smp.NumLabel["tid"]) != 1 {
					t.Errorf("numeric labels %v, want pid and tid", smp.NumLabel)
				} else if !slices.Contains(pids, smp.NumLabel["pid"][0]) {
					pids = append(pids, smp.NumLabel["pid"][0])
				}
			}
			total += count
			slices.Sort(pids)
			if count != tt.count || !slices.Equal(pids, tt.pids) {
				t.Errorf("%d samples of pids %v, want %d of %v", count, pids, tt.count, tt.pids)
			}
			var functions []string
			for _, fn := range prof.Function {
				functions = append(functions, fn.Name)
			}
			slices.Sort(functions)
			if !slices.Equal(functions, tt.functions) {
				t.Errorf("functions %q, want only the series' own %q", functions, tt.functions)
			}
		})
	}
	if total != w.Total() {
		t.Errorf("pushed %d samples in all, the window has %d", total, w.Total())
	}
}

func TestPyroscopeSeriesNames(t *testing.T) {
	tests := []struct {
		name    string
		labels  map[string]string
		service string
		series  string
	}{
		{
			name: "kubernetes container",
			labels: map[string]string{
				"namespace": "kube-system", "pod": "coredns-5d78c9869d-abcde", "container": "coredns",
				"container_id": "0123456789ab", "pod_uid": "u1", "comm": "coredns", "exe": "/coredns",
				"node": "n1", "pid": "7", "tid": "8", "start_time": "9", "thread": "t", "cgroup": "/x", "build_id": "ff",
			},
			service: "ebpf/kube-system/coredns",
			series:  "ebpf/kube-system/coredns{comm=coredns,container=coredns,namespace=kube-system,node=n1,pod=coredns-5d78c9869d-abcde}",
		},
		{
			name:    "container without kubernetes names",
			labels:  map[string]string{"container_id": "0123456789ab", "comm": "nginx", "exe": "/usr/sbin/nginx", "node": "n1", "pid": "7"},
			service: "nginx",
			series:  "nginx{comm=nginx,node=n1}",
		},
		{
			name:    "executable replaced while running",
			labels:  map[string]string{"comm": "server", "exe": "/opt/app/bin/server (deleted)"},
			service: "server",
			series:  "server{comm=server}",
		},
		{
			name:    "executable name pyroscope refuses",
			labels:  map[string]string{"comm": "my app", "exe": "/opt/my app+1"},
			service: "my_app_1",
			series:  "my_app_1{comm=my app}",
		},
		{
			name:    "kernel thread: comm",
			labels:  map[string]string{"comm": "kworker/0:1H", "node": "n1", "pid": "12"},
			service: "kworker/0_1H",
			series:  "kworker/0_1H{comm=kworker/0:1H,node=n1}",
		},
		{
			name:    "values the syntax cannot carry",
			labels:  map[string]string{"namespace": "ns", "container": "c", "pod": " a,b{c}d ", "node": "n\xffx"},
			service: "ebpf/ns/c",
			series:  "ebpf/ns/c{container=c,namespace=ns,node=n_x,pod=a_b_c_d}",
		},
		{
			name:    "namespace without container",
			labels:  map[string]string{"namespace": "ns", "comm": "sh", "exe": "/bin/sh"},
			service: "sh",
			series:  "sh{comm=sh,namespace=ns}",
		},
		{
			name:    "nothing known",
			labels:  map[string]string{"pid": "1"},
			service: "unspecified",
			series:  "unspecified{}",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := pyroscopeSplit(&profile.Profile{Samples: []*profile.Sample{{Count: 1, Labels: tt.labels}}})
			if len(got) != 1 {
				t.Fatalf("%d series, want 1", len(got))
			}
			if got[0].service != tt.service || got[0].name != tt.series {
				t.Errorf("service %q series %q, want %q %q", got[0].service, got[0].name, tt.service, tt.series)
			}
		})
	}
}

func TestPyroscopeAnswers(t *testing.T) {
	long := strings.Repeat("x", 150) + "\n" + strings.Repeat("y", 300)
	tests := []struct {
		code     int
		body     string
		wantErr  bool
		rejected bool
		detail   string // the error must contain it
	}{
		{code: 200},
		{code: 204},
		{code: 400, body: "invalid label name\n", wantErr: true, rejected: true, detail: "400 Bad Request: invalid label name"},
		{code: 401, body: "unauthorized", wantErr: true, rejected: true, detail: "401 Unauthorized: unauthorized"},
		{code: 413, wantErr: true, rejected: true, detail: "413 Request Entity Too Large"},
		{code: 400, body: long, wantErr: true, rejected: true, detail: "400 Bad Request: " + strings.Repeat("x", 150) + " " + strings.Repeat("y", 49)},
		{code: 408, wantErr: true, detail: "408 Request Timeout"},
		{code: 429, body: "over limit", wantErr: true, detail: "429 Too Many Requests: over limit"},
		{code: 500, wantErr: true, detail: "500 Internal Server Error"},
		{code: 503, body: "ingesters unavailable", wantErr: true, detail: "503 Service Unavailable: ingesters unavailable"},
	}
	for _, tt := range tests {
		t.Run(http.StatusText(tt.code), func(t *testing.T) {
			var f fakePyroscope
			srv := httptest.NewServer(f.handler(t, func(string) (int, string) { return tt.code, tt.body }))
			defer srv.Close()
			s := newTestPyroscope(t, "pyroscope://"+strings.TrimPrefix(srv.URL, "http://"), nil)
			err := s.Send(context.Background(), pyroscopeWindow())
			if (err != nil) != tt.wantErr {
				t.Fatalf("Send() = %v, want error %v", err, tt.wantErr)
			}
			if err == nil {
				return
			}
			msg := err.Error()
			if got := IsRejected(err); got != tt.rejected {
				t.Errorf("IsRejected(%q) = %v, want %v", msg, got, tt.rejected)
			}
			prefix := "push to " + s.Name() + ": "
			if !strings.HasPrefix(msg, prefix) || !strings.Contains(msg, tt.detail) {
				t.Errorf("error %q, want %q…%q", msg, prefix, tt.detail)
			}
			if strings.Contains(msg, "y"+strings.Repeat("y", 49)) {
				t.Errorf("error %q carries more than 200 bytes of the answer", msg)
			}
			if strings.ContainsAny(msg, "\n\r") {
				t.Errorf("error %q is not one line", msg)
			}
			// Both series failed, and the error says so.
			if !strings.HasSuffix(msg, "; 2 of 2 pushes failed") {
				t.Errorf("error %q does not count the failed pushes", msg)
			}
		})
	}
}

// A retried window pushes only the series that failed and can be retried:
// Pyroscope would count a series pushed twice twice.
func TestPyroscopeRetryPushesOnlyFailed(t *testing.T) {
	var mu sync.Mutex
	webAnswer := http.StatusServiceUnavailable
	var f fakePyroscope
	srv := httptest.NewServer(f.handler(t, func(name string) (int, string) {
		mu.Lock()
		defer mu.Unlock()
		if name == webName {
			return webAnswer, "try later"
		}
		return http.StatusBadRequest, "refused"
	}))
	defer srv.Close()
	s := newTestPyroscope(t, "pyroscope://"+strings.TrimPrefix(srv.URL, "http://"), nil)
	w := pyroscopeWindow()

	err := s.Send(context.Background(), w)
	if err == nil || IsRejected(err) || !strings.Contains(err.Error(), "503") {
		t.Fatalf("first Send() = %v, want the retryable 503", err)
	}
	mu.Lock()
	webAnswer = http.StatusOK
	mu.Unlock()
	if err := s.Send(context.Background(), w); err != nil {
		t.Fatalf("retry: %v", err)
	}
	got := f.byName()
	if len(got[webName]) != 2 || len(got[postgresName]) != 1 {
		t.Errorf("pushes: %d of %s (want 2: failed, then retried), %d of %s (want 1: refused for good)",
			len(got[webName]), webName, len(got[postgresName]), postgresName)
	}
}

func TestPyroscopeTimeout(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	defer srv.Close()
	defer close(release) // before srv.Close, which waits for handlers
	s := newTestPyroscope(t, "pyroscope://"+strings.TrimPrefix(srv.URL, "http://"), nil)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := s.Send(ctx, pyroscopeWindow())
	if !errors.Is(err, context.DeadlineExceeded) || IsRejected(err) {
		t.Errorf("Send() = %v, want a retryable deadline error", err)
	}
	// Not a performance assertion: a Send that ignored ctx would hang.
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Send returned after %v, its deadline was 100ms", d)
	}
}

func TestPyroscopeUnreachable(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	raw := "pyroscope://" + strings.TrimPrefix(srv.URL, "http://")
	srv.Close()
	err := newTestPyroscope(t, raw, nil).Send(context.Background(), pyroscopeWindow())
	if err == nil || IsRejected(err) || !strings.HasPrefix(err.Error(), "push to "+raw+": ") {
		t.Errorf("Send() = %v, want a retryable error naming the target", err)
	}
}

func TestPyroscopeHTTPS(t *testing.T) {
	var f fakePyroscope
	srv := httptest.NewTLSServer(f.handler(t, nil))
	defer srv.Close()
	s := newTestPyroscope(t, "pyroscopes://"+strings.TrimPrefix(srv.URL, "https://"), srv.Client())
	if err := s.Send(context.Background(), pyroscopeWindow()); err != nil {
		t.Fatal(err)
	}
	got := f.byName()
	if len(got) != 2 || !got[webName][0].tls || got[webName][0].auth || got[webName][0].tenant != "" {
		t.Errorf("pushes %+v, want two over TLS without auth or tenant", got)
	}
}

func TestPyroscopeNothingToSend(t *testing.T) {
	var f fakePyroscope
	srv := httptest.NewServer(f.handler(t, nil))
	defer srv.Close()
	s := newTestPyroscope(t, "pyroscope://"+strings.TrimPrefix(srv.URL, "http://"), nil)
	if err := s.Send(context.Background(), &profile.Profile{Start: time.Now(), Duration: time.Second, Period: time.Millisecond}); err != nil {
		t.Errorf("empty window: %v", err)
	}
	if n := len(f.byName()); n != 0 {
		t.Errorf("empty window made %d pushes", n)
	}
	w := pyroscopeWindow()
	w.Period = 0
	if err := s.Send(context.Background(), w); !IsRejected(err) {
		t.Errorf("window without period: %v, want rejected", err)
	}
}

func TestNewPyroscope(t *testing.T) {
	tests := []struct {
		url      string
		endpoint string // empty: NewPyroscope must fail
		name     string
	}{
		{url: "pyroscope://localhost:4040", endpoint: "http://localhost:4040/ingest", name: "pyroscope://localhost:4040"},
		{url: "pyroscopes://u:tok@profiles.example.net", endpoint: "https://profiles.example.net/ingest", name: "pyroscopes://profiles.example.net"},
		{url: "pyroscope://h:4040/pyro/prefix/?tenant=t1", endpoint: "http://h:4040/pyro/prefix/ingest", name: "pyroscope://h:4040/pyro/prefix/?tenant=t1"},
		{url: "pyroscope://[::1]:4040", endpoint: "http://[::1]:4040/ingest", name: "pyroscope://[::1]:4040"},
		{url: "http://u:secretpw@localhost:4040"},
		{url: "otlp://localhost:4317"},
		{url: "pyroscope://"},
		{url: "pyroscope:localhost"},
		{url: "pyroscope://:4040"},
		{url: "pyroscope://h?tenant="},
		{url: "pyroscope://h?tenant=a&tenant=b"},
		{url: "pyroscope://h?tenant=a%20b"},
		{url: "pyroscope://h?tenantid=a"},
		{url: "pyroscope://h?tenant=a;b"},
		{url: "pyroscope://h#x"},
	}
	for _, tt := range tests {
		t.Run(tt.url, func(t *testing.T) {
			u, err := url.Parse(tt.url)
			if err != nil {
				t.Fatal(err)
			}
			s, err := NewPyroscope(u, nil)
			if tt.endpoint == "" {
				if err == nil {
					t.Fatalf("NewPyroscope(%s) = %v, want an error", tt.url, s.Name())
				}
				if msg := err.Error(); !strings.HasPrefix(msg, "pyroscope target ") || strings.Contains(msg, "secretpw") {
					t.Errorf("error %q: want it to start with the operation and not show the password", msg)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := s.(*pyroscope).url.String(); got != tt.endpoint {
				t.Errorf("endpoint %q, want %q", got, tt.endpoint)
			}
			if s.Name() != tt.name {
				t.Errorf("Name() = %q, want %q", s.Name(), tt.name)
			}
		})
	}
	if _, err := NewPyroscope(nil, nil); err == nil {
		t.Error("NewPyroscope(nil) succeeded")
	}
}

// The fake server must tell a wrong body from a right one, or the tests
// above prove nothing.
func TestFakePyroscopeDecode(t *testing.T) {
	good := func(gzipped bool, field string) (string, []byte) {
		var pb bytes.Buffer
		p := pyroscopeWindow().Proto()
		if gzipped {
			_ = p.Write(&pb)
		} else {
			_ = p.WriteUncompressed(&pb)
		}
		var body bytes.Buffer
		mw := multipart.NewWriter(&body)
		fw, _ := mw.CreateFormFile(field, "p.pprof")
		_, _ = fw.Write(pb.Bytes())
		_ = mw.Close()
		return mw.FormDataContentType(), body.Bytes()
	}
	tests := []struct {
		name    string
		gzipped bool
		wantErr bool
	}{
		{"gzipped", true, false},
		{"not gzipped", false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ct, body := good(tt.gzipped, "profile")
			r := httptest.NewRequest(http.MethodPost, "/ingest", bytes.NewReader(body))
			p := pyroscopePush{contentType: ct}
			err := p.decode(r)
			if (err != nil) != tt.wantErr || (err == nil && p.prof == nil) {
				t.Errorf("decode: %v, profile %v", err, p.prof != nil)
			}
		})
	}
	r := httptest.NewRequest(http.MethodPost, "/ingest", strings.NewReader("x"))
	p := pyroscopePush{contentType: "application/octet-stream"}
	if p.decode(r) == nil {
		t.Error("decode accepted a body that is not a form")
	}
}
