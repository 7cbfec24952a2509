package otlp

import (
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/flint-dev/flint/internal/export"
	"github.com/flint-dev/flint/internal/profile"
	"github.com/flint-dev/flint/internal/symbol"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pprofile"
	"go.opentelemetry.io/collector/pdata/pprofile/pprofileotlp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// testWindow is two processes: a Go program in a Kubernetes container,
// with an inlined frame and a kernel frame, two threads; and a native
// process outside any container.
func testWindow() *profile.Profile {
	goBin := &profile.Mapping{Start: 0x400000, Limit: 0x800000, File: "/app/server", BuildID: "ab12cd"}
	kernel := &profile.Mapping{Start: 0xffffffff81000000, Limit: 0xffffffff82000000, File: "[kernel.kallsyms]", Kernel: true}
	libc := &profile.Mapping{Start: 0x7f0000000000, Limit: 0x7f0000100000, Offset: 0x28000, File: "/usr/lib/libc.so.6", BuildID: "ef34"}
	handler := &profile.Location{Address: 0x401000, Mapping: goBin, Frames: []symbol.Frame{
		{Function: "main.parse", File: "/src/parse.go", Line: 12, StartLine: 10}, // inlined into
		{Function: "main.handle", File: "/src/main.go", Line: 40, StartLine: 33},
	}}
	mainLoc := &profile.Location{Address: 0x402000, Mapping: goBin, Frames: []symbol.Frame{{Function: "main.main", File: "/src/main.go", Line: 8, StartLine: 5}}}
	syscall := &profile.Location{Address: 0xffffffff81001000, Mapping: kernel, Frames: []symbol.Frame{{Function: "do_syscall_64"}}}
	memcpy := &profile.Location{Address: 0x7f0000001000, Mapping: libc, Frames: []symbol.Frame{{Function: "memcpy"}}}
	goLabels := func(tid, thread string) map[string]string {
		return map[string]string{
			"node": "node-1", "pid": "42", "comm": "server", "exe": "/app/server", "start_time": "1234",
			"container_id": "0123abcd", "pod": "web-7f9", "namespace": "shop", "container": "web", "pod_uid": "u-1",
			"cgroup": "/kubepods/pod-u-1/0123abcd", "tid": tid, "thread": thread,
		}
	}
	return &profile.Profile{
		Start: time.Unix(1700000000, 5), Duration: 10 * time.Second, Period: time.Second / 99,
		Samples: []*profile.Sample{
			{Stack: []*profile.Location{handler, mainLoc}, Count: 7, Labels: goLabels("42", "server")},
			{Stack: []*profile.Location{syscall, handler, mainLoc}, Count: 3, Labels: goLabels("43", "worker")},
			{Stack: []*profile.Location{memcpy}, Count: 5, Labels: map[string]string{"node": "node-1", "pid": "7", "comm": "cp", "exe": "/usr/bin/cp", "tid": "7", "thread": "cp"}},
			{Stack: []*profile.Location{memcpy}, Count: 0, Labels: map[string]string{"pid": "8"}}, // no samples: not sent
		},
	}
}

// collector is an OTLP profiles receiver built on the OpenTelemetry
// collector's own types.
type testCollector struct {
	pprofileotlp.UnimplementedGRPCServer
	got  chan pprofile.Profiles
	fail error
}

func (c *testCollector) Export(_ context.Context, req pprofileotlp.ExportRequest) (pprofileotlp.ExportResponse, error) {
	if c.fail != nil {
		return pprofileotlp.NewExportResponse(), c.fail
	}
	p := pprofile.NewProfiles()
	req.Profiles().CopyTo(p)
	c.got <- p
	return pprofileotlp.NewExportResponse(), nil
}

func startCollector(t *testing.T, fail error) (*testCollector, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := &testCollector{got: make(chan pprofile.Profiles, 1), fail: fail}
	s := grpc.NewServer()
	pprofileotlp.RegisterGRPCServer(s, c)
	go s.Serve(ln)
	t.Cleanup(s.Stop)
	return c, ln.Addr().String()
}

func sender(t *testing.T, raw string) export.Sender {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewSender(u, "test")
	if err != nil {
		t.Fatal(err)
	}
	if c, ok := s.(io.Closer); ok {
		t.Cleanup(func() { c.Close() })
	}
	return s
}

// process is what the collector received for one resource: its
// attributes, the profile's fields, and its samples as folded stacks
// (root first, frames "function file:line", inlined ones marked) with
// their thread attributes.
type process struct {
	resource map[string]any
	scope    string
	header   string
	stacks   map[string]int64
}

// readProfiles turns what the collector got into processes keyed by
// process.pid, reading every table through the collector's own types.
func readProfiles(t *testing.T, p pprofile.Profiles) map[int64]process {
	t.Helper()
	d := p.Dictionary()
	str := func(i int32) string { return d.StringTable().At(int(i)) }
	attrs := func(idx pcommon.Int32Slice) []string {
		var out []string
		for _, i := range idx.AsRaw() {
			kv := d.AttributeTable().At(int(i))
			out = append(out, fmt.Sprintf("%s=%v", str(kv.KeyStrindex()), kv.Value().AsRaw()))
		}
		return out
	}
	out := map[int64]process{}
	for i := 0; i < p.ResourceProfiles().Len(); i++ {
		rp := p.ResourceProfiles().At(i)
		res := rp.Resource().Attributes().AsRaw()
		if rp.ScopeProfiles().Len() != 1 || rp.ScopeProfiles().At(0).Profiles().Len() != 1 {
			t.Fatalf("resource %v: want one scope with one profile", res)
		}
		sp := rp.ScopeProfiles().At(0)
		prof := sp.Profiles().At(0)
		if prof.ProfileID().IsEmpty() {
			t.Errorf("resource %v: the profile has no ID", res)
		}
		pr := process{
			resource: res,
			scope:    sp.Scope().Name() + " " + sp.Scope().Version(),
			header: fmt.Sprintf("%s/%s period %d %s/%s time %d duration %d", str(prof.SampleType().TypeStrindex()), str(prof.SampleType().UnitStrindex()),
				prof.Period(), str(prof.PeriodType().TypeStrindex()), str(prof.PeriodType().UnitStrindex()), prof.Time(), prof.DurationNano()),
			stacks: map[string]int64{},
		}
		for j := 0; j < prof.Samples().Len(); j++ {
			s := prof.Samples().At(j)
			var frames []string
			for _, li := range d.StackTable().At(int(s.StackIndex())).LocationIndices().AsRaw() {
				loc := d.LocationTable().At(int(li))
				m := d.MappingTable().At(int(loc.MappingIndex()))
				mapping := fmt.Sprintf("[%s %x-%x@%x %v %v]", str(m.FilenameStrindex()), m.MemoryStart(), m.MemoryLimit(), m.FileOffset(), attrs(m.AttributeIndices()), attrs(loc.AttributeIndices()))
				for k := 0; k < loc.Lines().Len(); k++ {
					line := loc.Lines().At(k)
					fn := d.FunctionTable().At(int(line.FunctionIndex()))
					f := fmt.Sprintf("%s@%s:%d(start %d)%s %#x", str(fn.NameStrindex()), str(fn.FilenameStrindex()), line.Line(), fn.StartLine(), mapping, loc.Address())
					if k < loc.Lines().Len()-1 {
						f += " inlined"
					}
					frames = append(frames, f)
				}
			}
			slices.Reverse(frames)
			key := strings.Join(frames, ";") + " " + strings.Join(attrs(s.AttributeIndices()), ",")
			pr.stacks[key] += s.Values().At(0)
			if s.Values().Len() != 1 {
				t.Errorf("sample with %d values, want 1", s.Values().Len())
			}
		}
		pid, _ := res["process.pid"].(int64)
		if _, dup := out[pid]; dup {
			t.Errorf("process %d has two resources", pid)
		}
		out[pid] = pr
	}
	return out
}

// checkWindow checks every field of testWindow as received.
func checkWindow(t *testing.T, got map[int64]process) {
	t.Helper()
	if len(got) != 2 {
		t.Fatalf("got %d processes, want 2 (the one without samples is not sent)", len(got))
	}
	header := fmt.Sprintf("samples/count period %d cpu/nanoseconds time %d duration %d", (time.Second / 99).Nanoseconds(), int64(1700000000_000000005), (10 * time.Second).Nanoseconds())
	goProc := process{
		resource: map[string]any{
			"host.name": "node-1", "process.pid": int64(42), "process.executable.name": "server", "process.executable.path": "/app/server",
			"container.id": "0123abcd", "k8s.pod.name": "web-7f9", "k8s.pod.uid": "u-1", "k8s.namespace.name": "shop", "k8s.container.name": "web",
			"flint.start_time": "1234", "flint.cgroup": "/kubepods/pod-u-1/0123abcd",
		},
		scope: "flint test", header: header,
		stacks: map[string]int64{
			"main.main@/src/main.go:8(start 5)[/app/server 400000-800000@0 [process.executable.build_id.gnu=ab12cd] [profile.frame.type=native]] 0x402000;" +
				"main.handle@/src/main.go:40(start 33)[/app/server 400000-800000@0 [process.executable.build_id.gnu=ab12cd] [profile.frame.type=native]] 0x401000;" +
				"main.parse@/src/parse.go:12(start 10)[/app/server 400000-800000@0 [process.executable.build_id.gnu=ab12cd] [profile.frame.type=native]] 0x401000 inlined" +
				" thread.name=server,thread.id=42": 7,
			"main.main@/src/main.go:8(start 5)[/app/server 400000-800000@0 [process.executable.build_id.gnu=ab12cd] [profile.frame.type=native]] 0x402000;" +
				"main.handle@/src/main.go:40(start 33)[/app/server 400000-800000@0 [process.executable.build_id.gnu=ab12cd] [profile.frame.type=native]] 0x401000;" +
				"main.parse@/src/parse.go:12(start 10)[/app/server 400000-800000@0 [process.executable.build_id.gnu=ab12cd] [profile.frame.type=native]] 0x401000 inlined;" +
				"do_syscall_64@:0(start 0)[[kernel.kallsyms] ffffffff81000000-ffffffff82000000@0 [] [profile.frame.type=kernel]] 0xffffffff81001000" +
				" thread.name=worker,thread.id=43": 3,
		},
	}
	cp := process{
		resource: map[string]any{"host.name": "node-1", "process.pid": int64(7), "process.executable.name": "cp", "process.executable.path": "/usr/bin/cp"},
		scope:    "flint test", header: header,
		stacks: map[string]int64{
			"memcpy@:0(start 0)[/usr/lib/libc.so.6 7f0000000000-7f0000100000@28000 [process.executable.build_id.gnu=ef34] [profile.frame.type=native]] 0x7f0000001000 thread.name=cp,thread.id=7": 5,
		},
	}
	for pid, want := range map[int64]process{42: goProc, 7: cp} {
		if diff := describeDiff(got[pid], want); diff != "" {
			t.Errorf("process %d:\n%s", pid, diff)
		}
	}
}

func describeDiff(got, want process) string {
	var b strings.Builder
	if fmt.Sprint(got.resource) != fmt.Sprint(want.resource) {
		fmt.Fprintf(&b, "resource %v\n    want %v\n", got.resource, want.resource)
	}
	if got.scope != want.scope || got.header != want.header {
		fmt.Fprintf(&b, "scope %q header %q\n want %q %q\n", got.scope, got.header, want.scope, want.header)
	}
	for k, v := range want.stacks {
		if got.stacks[k] != v {
			fmt.Fprintf(&b, "stack %s: %d, want %d\n", k, got.stacks[k], v)
		}
	}
	for k, v := range got.stacks {
		if _, ok := want.stacks[k]; !ok {
			fmt.Fprintf(&b, "unexpected stack %s: %d\n", k, v)
		}
	}
	return b.String()
}

func TestSendGRPC(t *testing.T) {
	c, addr := startCollector(t, nil)
	if err := sender(t, "otlp://"+addr).Send(context.Background(), testWindow()); err != nil {
		t.Fatal(err)
	}
	checkWindow(t, readProfiles(t, <-c.got))
}

func TestSendHTTP(t *testing.T) {
	got := make(chan pprofile.Profiles, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/v1development/profiles" || r.Header.Get("Content-Type") != "application/x-protobuf" || r.Header.Get("Content-Encoding") != "gzip" {
			http.Error(w, fmt.Sprintf("%s %s %q %q", r.Method, r.URL.Path, r.Header.Get("Content-Type"), r.Header.Get("Content-Encoding")), http.StatusBadRequest)
			return
		}
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		body, _ := io.ReadAll(zr)
		req := pprofileotlp.NewExportRequest()
		if err := req.UnmarshalProto(body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		p := pprofile.NewProfiles()
		req.Profiles().CopyTo(p)
		got <- p
		resp, _ := pprofileotlp.NewExportResponse().MarshalProto()
		w.Write(resp)
	}))
	defer srv.Close()
	if err := sender(t, "otlphttp://"+strings.TrimPrefix(srv.URL, "http://")).Send(context.Background(), testWindow()); err != nil {
		t.Fatal(err)
	}
	checkWindow(t, readProfiles(t, <-got))
}

// What a later try can cure is retried; the rest is rejected, as the
// OTLP specification sorts them.
func TestSendFailures(t *testing.T) {
	for _, tc := range []struct {
		name     string
		fail     error
		status   int
		rejected bool
		want     string
	}{
		{name: "grpc unavailable", fail: status.Error(codes.Unavailable, "overloaded"), want: "overloaded"},
		{name: "grpc invalid", fail: status.Error(codes.InvalidArgument, "bad dictionary"), rejected: true, want: "InvalidArgument: bad dictionary"},
		{name: "grpc unauthenticated", fail: status.Error(codes.Unauthenticated, "no token"), rejected: true, want: "no token"},
		{name: "http 503", status: 503, want: "503 Service Unavailable"},
		{name: "http 429", status: 429, want: "429 Too Many Requests"},
		{name: "http 400", status: 400, rejected: true, want: "400 Bad Request: nope"},
		{name: "http 404", status: 404, rejected: true, want: "404 Not Found"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var s export.Sender
			if tc.status == 0 {
				_, addr := startCollector(t, tc.fail)
				s = sender(t, "otlp://"+addr)
			} else {
				srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { http.Error(w, "nope", tc.status) }))
				defer srv.Close()
				s = sender(t, "otlphttp://"+strings.TrimPrefix(srv.URL, "http://"))
			}
			err := s.Send(context.Background(), testWindow())
			if err == nil || export.IsRejected(err) != tc.rejected || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v (rejected %v), want one with %q, rejected %v", err, export.IsRejected(err), tc.want, tc.rejected)
			}
		})
	}
}

// A target nobody listens on is a retryable one-line error, for gRPC
// within the try's deadline.
func TestSendUnreachable(t *testing.T) {
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := ln.Addr().String()
	ln.Close()
	for _, scheme := range []string{"otlp", "otlphttp"} {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err := sender(t, scheme+"://"+addr).Send(ctx, testWindow())
		cancel()
		if err == nil || export.IsRejected(err) || strings.Contains(err.Error(), "\n") || !strings.Contains(err.Error(), scheme+"://"+addr) {
			t.Errorf("%s: error %q, want a retryable one-line error naming the target", scheme, err)
		}
	}
}

func TestNewSenderRefuses(t *testing.T) {
	for _, raw := range []string{"otlp://host", "otlp://user:pw@host:4317", "otlpx://host:1", "otlphttp://:4318"} {
		u, _ := url.Parse(raw)
		if _, err := NewSender(u, "v"); err == nil {
			t.Errorf("NewSender(%s) succeeded", raw)
		} else if strings.Contains(err.Error(), "pw") {
			t.Errorf("error shows the password: %v", err)
		}
	}
}
