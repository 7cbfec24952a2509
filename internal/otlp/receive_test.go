package otlp

import (
	"bytes"
	"cmp"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flint-dev/flint/internal/profile"
	"github.com/flint-dev/flint/internal/symbol"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pprofile"
	"go.opentelemetry.io/collector/pdata/pprofile/pprofileotlp"
	collector "go.opentelemetry.io/proto/slim/otlp/collector/profiles/v1development"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// sink keeps what a Receiver hands it; fail, when set, may refuse.
type sink struct {
	mu       sync.Mutex
	profiles []*profile.Profile
	fail     func(*profile.Profile) error
}

func (s *sink) put(_ context.Context, p *profile.Profile) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fail != nil {
		if err := s.fail(p); err != nil {
			return err
		}
	}
	s.profiles = append(s.profiles, p)
	return nil
}

func (s *sink) got() []*profile.Profile {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.profiles)
}

// collectorProfiles is what the OpenTelemetry eBPF profiler sends, built
// with the collector's own types: a CPU profile of one sample with
// timestamps only (a kernel frame without a mapping, an inlined call, an
// unnamed address; a mapping with only the htlhash build ID; thread
// attributes on the sample, process ones on the resource), and an
// off-CPU profile flint skips.
func collectorProfiles() pprofile.Profiles {
	pd := pprofile.NewProfiles()
	dict := pd.Dictionary()
	strs := map[string]int32{}
	s := func(v string) int32 {
		if i, ok := strs[v]; ok {
			return i
		}
		strs[v] = int32(dict.StringTable().Len())
		dict.StringTable().Append(v)
		return strs[v]
	}
	s("")
	dict.MappingTable().AppendEmpty()
	dict.LocationTable().AppendEmpty()
	dict.FunctionTable().AppendEmpty()
	dict.LinkTable().AppendEmpty()
	dict.AttributeTable().AppendEmpty()
	dict.StackTable().AppendEmpty()
	attr := func(key string, set func(pcommon.Value)) int32 {
		a := dict.AttributeTable().AppendEmpty()
		a.SetKeyStrindex(s(key))
		set(a.Value())
		return int32(dict.AttributeTable().Len() - 1)
	}
	kernel := attr("profile.frame.type", func(v pcommon.Value) { v.SetStr("kernel") })
	native := attr("profile.frame.type", func(v pcommon.Value) { v.SetStr("native") })

	m := dict.MappingTable().AppendEmpty()
	m.SetMemoryStart(0x400000)
	m.SetMemoryLimit(0x500000)
	m.SetFilenameStrindex(s("/usr/bin/shop"))
	m.AttributeIndices().Append(attr("process.executable.build_id.htlhash", func(v pcommon.Value) { v.SetStr("600dcafe4a110000f2bf38c493f5fb92") }))

	function := func(name string) int32 {
		f := dict.FunctionTable().AppendEmpty()
		f.SetNameStrindex(s(name))
		f.SetFilenameStrindex(s("/src/shop.go"))
		return int32(dict.FunctionTable().Len() - 1)
	}
	location := func(addr uint64, mapping, frameType int32, lines map[int32]int64, order ...int32) int32 {
		l := dict.LocationTable().AppendEmpty()
		l.SetAddress(addr)
		l.SetMappingIndex(mapping)
		l.AttributeIndices().Append(frameType)
		for _, fn := range order {
			line := l.Lines().AppendEmpty()
			line.SetFunctionIndex(fn)
			line.SetLine(lines[fn])
		}
		return int32(dict.LocationTable().Len() - 1)
	}
	syscall := function("do_syscall_64")
	price, checkout := function("shop.price"), function("shop.checkout")
	st := dict.StackTable().AppendEmpty()
	st.LocationIndices().Append(
		location(0xffffffff81000100, 0, kernel, nil, syscall),
		location(0x401234, 1, native, map[int32]int64{price: 12, checkout: 40}, price, checkout),
		location(0x402000, 1, native, nil),
	)

	rp := pd.ResourceProfiles().AppendEmpty()
	res := rp.Resource().Attributes()
	res.PutStr("service.name", "checkout")
	res.PutStr("process.executable.name", "shop")
	res.PutInt("process.pid", 4242)
	res.PutStr("host.name", "node-1")
	p := rp.ScopeProfiles().AppendEmpty().Profiles().AppendEmpty()
	p.SampleType().SetTypeStrindex(s("samples"))
	p.SampleType().SetUnitStrindex(s("count"))
	p.PeriodType().SetTypeStrindex(s("cpu"))
	p.PeriodType().SetUnitStrindex(s("nanoseconds"))
	p.SetPeriod(50_000_000) // 20 Hz, the eBPF profiler's default
	p.SetTime(pcommon.NewTimestampFromTime(testStart))
	p.SetDurationNano(uint64(5 * time.Second))
	sample := p.Samples().AppendEmpty()
	sample.SetStackIndex(1)
	sample.AttributeIndices().Append(
		attr("thread.name", func(v pcommon.Value) { v.SetStr("worker") }),
		attr("thread.id", func(v pcommon.Value) { v.SetInt(77) }),
	)
	at := uint64(testStart.UnixNano())
	sample.TimestampsUnixNano().Append(at+1e8, at+2e8, at+3e8)

	off := pd.ResourceProfiles().AppendEmpty()
	off.Resource().Attributes().PutInt("process.pid", 4243)
	op := off.ScopeProfiles().AppendEmpty().Profiles().AppendEmpty()
	op.SampleType().SetTypeStrindex(s("off_cpu"))
	op.SampleType().SetUnitStrindex(s("nanoseconds"))
	os := op.Samples().AppendEmpty()
	os.SetStackIndex(1)
	os.Values().Append(1e6)
	return pd
}

// checkCollectorProfile checks that got is collectorProfiles' CPU profile.
func checkCollectorProfile(t *testing.T, got []*profile.Profile) {
	t.Helper()
	if len(got) != 1 {
		t.Fatalf("sink got %d profiles, want 1", len(got))
	}
	p := got[0]
	if !p.Start.Equal(testStart) || p.Duration != 5*time.Second || p.Period != 50*time.Millisecond {
		t.Errorf("start %v duration %v period %v", p.Start, p.Duration, p.Period)
	}
	shop := &profile.Mapping{Start: 0x400000, Limit: 0x500000, File: "/usr/bin/shop", BuildID: "600dcafe4a110000f2bf38c493f5fb92"}
	want := []*profile.Sample{{
		Count: 3,
		Labels: map[string]string{
			"service_name": "checkout", profile.LabelComm: "shop", profile.LabelPID: "4242", profile.LabelNode: "node-1",
			profile.LabelThread: "worker", profile.LabelTID: "77",
		},
		Stack: []*profile.Location{
			{Address: 0xffffffff81000100, Mapping: &profile.Mapping{File: "[kernel.kallsyms]", Kernel: true}, Frames: []symbol.Frame{{Function: "do_syscall_64", File: "/src/shop.go"}}},
			{Address: 0x401234, Mapping: shop, Frames: []symbol.Frame{
				{Function: "shop.price", File: "/src/shop.go", Line: 12},
				{Function: "shop.checkout", File: "/src/shop.go", Line: 40},
			}},
			{Address: 0x402000, Mapping: shop, Frames: []symbol.Frame{{Function: "shop+0x402000"}}},
		},
	}}
	if have, want := flat(p.Samples), flat(want); !slices.Equal(have, want) {
		t.Errorf("decoded:\n%s\nwant:\n%s", strings.Join(have, ""), strings.Join(want, ""))
	}
}

func TestReceiverGRPC(t *testing.T) {
	var sk sink
	r := NewReceiver(sk.put, t.Logf)
	var mu sync.Mutex
	var methods []string
	s := grpc.NewServer(grpc.UnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		mu.Lock()
		methods = append(methods, info.FullMethod)
		mu.Unlock()
		return handler(ctx, req)
	}))
	cc := serveGRPC(t, r, s)

	resp, err := pprofileotlp.NewGRPCClient(cc).Export(t.Context(), pprofileotlp.NewExportRequestFromProfiles(collectorProfiles()))
	if err != nil {
		t.Fatalf("Export: %v", err)
	}
	ps := resp.PartialSuccess()
	if ps.RejectedProfiles() != 1 || !strings.Contains(ps.ErrorMessage(), "off_cpu/nanoseconds") {
		t.Errorf("partial success %d %q, want the off-CPU profile rejected", ps.RejectedProfiles(), ps.ErrorMessage())
	}
	checkCollectorProfile(t, sk.got())
	if st, want := r.Stats(), (ReceiverStats{Requests: 1, Profiles: 2, Samples: 3, Unsupported: 1}); st != want {
		t.Errorf("stats %+v, want %+v", st, want)
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(methods, []string{"/" + profilesService + "/Export"}) {
		t.Errorf("interceptor saw %q", methods)
	}
}

// serveGRPC serves r on s on a loopback port and returns a client of it.
func serveGRPC(t *testing.T, r *Receiver, s *grpc.Server) *grpc.ClientConn {
	t.Helper()
	r.RegisterGRPC(s)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(lis)
	t.Cleanup(s.Stop)
	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

// TestReceiverGRPCErrors sends what no OTLP client would, with Invoke.
func TestReceiverGRPCErrors(t *testing.T) {
	var sk sink
	r := NewReceiver(sk.put, nil)
	s := grpc.NewServer()
	cc := serveGRPC(t, r, s)
	method := "/" + profilesService + "/Export"

	good := func() *collector.ExportProfilesServiceRequest {
		d := Encode(testProfile(), "test")
		return &collector.ExportProfilesServiceRequest{ResourceProfiles: d.ResourceProfiles, Dictionary: d.Dictionary}
	}
	bad := good()
	bad.ResourceProfiles[0].ScopeProfiles[0].Profiles[0].Samples[0].StackIndex = 99
	for _, tt := range []struct {
		name     string
		ctx      context.Context
		req      proto.Message
		fail     bool
		want     codes.Code
		wantMsg  string
		rejected int64
	}{
		{name: "good", req: good(), want: codes.OK},
		{name: "empty", req: &collector.ExportProfilesServiceRequest{}, want: codes.OK},
		{name: "bad index", req: bad, want: codes.InvalidArgument, wantMsg: "profile 0 sample 0: stack index 99 out of range"},
		// grpc-go answers a message it cannot unmarshal itself, before
		// the handler's error; the handler still counts it.
		{name: "garbage", req: &wrapperspb.BytesValue{Value: []byte{0xff, 0xff, 0xff}}, want: codes.Internal, wantMsg: "unmarshal"},
		{name: "version", ctx: metadata.AppendToOutgoingContext(t.Context(), versionHeader, "2"), req: good(), want: codes.InvalidArgument, wantMsg: versionHeader},
		{name: "sink fails", req: good(), fail: true, want: codes.Unavailable, wantMsg: "disk full"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			sk.mu.Lock()
			sk.fail = nil
			if tt.fail {
				sk.fail = func(*profile.Profile) error { return errors.New("disk full") }
			}
			sk.mu.Unlock()
			ctx := tt.ctx
			if ctx == nil {
				ctx = t.Context()
			}
			var resp collector.ExportProfilesServiceResponse
			err := cc.Invoke(ctx, method, tt.req, &resp)
			if status.Code(err) != tt.want || !strings.Contains(status.Convert(err).Message(), tt.wantMsg) {
				t.Errorf("got %v, want %v %q", err, tt.want, tt.wantMsg)
			}
			if resp.GetPartialSuccess().GetRejectedProfiles() != tt.rejected {
				t.Errorf("partial success %v", resp.GetPartialSuccess())
			}
		})
	}
	want := ReceiverStats{Requests: 6, Profiles: 4, Samples: 26, Invalid: 3, SinkFailed: 2}
	if st := r.Stats(); st != want {
		t.Errorf("stats %+v, want %+v", st, want)
	}
	if got := len(sk.got()); got != 2 {
		t.Errorf("sink got %d profiles, want 2", got)
	}
}

func gzipped(b []byte) []byte {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zw.Write(b)
	zw.Close()
	return buf.Bytes()
}

func TestReceiverHTTP(t *testing.T) {
	var sk sink
	r := NewReceiver(sk.put, t.Logf)
	mux := http.NewServeMux()
	mux.Handle(HTTPPath, r)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)

	body, err := pprofileotlp.NewExportRequestFromProfiles(collectorProfiles()).MarshalProto()
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.URL+HTTPPath, bytes.NewReader(gzipped(body)))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-protobuf")
	req.Header.Set("Content-Encoding", "gzip")
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	answer, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/x-protobuf" {
		t.Fatalf("%s %s: %q", resp.Status, resp.Header.Get("Content-Type"), answer)
	}
	er := pprofileotlp.NewExportResponse()
	if err := er.UnmarshalProto(answer); err != nil {
		t.Fatalf("response: %v", err)
	}
	if ps := er.PartialSuccess(); ps.RejectedProfiles() != 1 || !strings.Contains(ps.ErrorMessage(), "off_cpu/nanoseconds") {
		t.Errorf("partial success %d %q, want the off-CPU profile rejected", ps.RejectedProfiles(), ps.ErrorMessage())
	}
	checkCollectorProfile(t, sk.got())
	if st, want := r.Stats(), (ReceiverStats{Requests: 1, Profiles: 2, Samples: 3, Unsupported: 1}); st != want {
		t.Errorf("stats %+v, want %+v", st, want)
	}
}

func TestReceiverHTTPErrors(t *testing.T) {
	encoded := func() []byte {
		d := Encode(testProfile(), "test")
		b, err := proto.Marshal(&collector.ExportProfilesServiceRequest{ResourceProfiles: d.ResourceProfiles, Dictionary: d.Dictionary})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	d := Encode(testProfile(), "test")
	d.ResourceProfiles[1].ScopeProfiles[0].Profiles[0].Samples[0].StackIndex = 99
	badIndex, err := proto.Marshal(&collector.ExportProfilesServiceRequest{ResourceProfiles: d.ResourceProfiles, Dictionary: d.Dictionary})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name        string
		method      string
		contentType string
		encoding    string
		version     string
		body        []byte
		fail        func(*profile.Profile) error
		want        int
		wantMsg     string // in the plain-text body or the Status's message
		wantStatus  bool   // the body is a google.rpc.Status
		rejected    int64  // in a 200's partial success
		stats       ReceiverStats
	}{
		{name: "ok", body: encoded(), want: 200,
			stats: ReceiverStats{Requests: 1, Profiles: 2, Samples: 13}},
		{name: "ok gzipped", encoding: "gzip", body: gzipped(encoded()), want: 200,
			stats: ReceiverStats{Requests: 1, Profiles: 2, Samples: 13}},
		{name: "content type with parameters", contentType: "application/x-protobuf; charset=binary", body: encoded(), want: 200,
			stats: ReceiverStats{Requests: 1, Profiles: 2, Samples: 13}},
		{name: "GET", method: http.MethodGet, want: 405, wantMsg: "POST",
			stats: ReceiverStats{Requests: 1, Invalid: 1}},
		{name: "JSON", contentType: "application/json", body: []byte("{}"), want: 415, wantMsg: "JSON is not supported",
			stats: ReceiverStats{Requests: 1, Invalid: 1}},
		{name: "no content type", contentType: "-", body: encoded(), want: 415, wantMsg: "application/x-protobuf",
			stats: ReceiverStats{Requests: 1, Invalid: 1}},
		{name: "brotli", encoding: "br", body: encoded(), want: 415, wantMsg: "only gzip",
			stats: ReceiverStats{Requests: 1, Invalid: 1}},
		{name: "garbage", body: []byte{0xff, 0xff, 0xff, 0xff}, want: 400, wantStatus: true, wantMsg: "decode request",
			stats: ReceiverStats{Requests: 1, Invalid: 1}},
		{name: "not gzip", encoding: "gzip", body: encoded(), want: 400, wantStatus: true, wantMsg: "gzip",
			stats: ReceiverStats{Requests: 1, Invalid: 1}},
		{name: "truncated gzip", encoding: "gzip", body: gzipped(encoded())[:100], want: 400, wantStatus: true, wantMsg: "read body",
			stats: ReceiverStats{Requests: 1, Invalid: 1}},
		{name: "bad index", body: badIndex, want: 400, wantStatus: true, wantMsg: "profile 1 sample 0: stack index 99 out of range",
			stats: ReceiverStats{Requests: 1, Invalid: 1}},
		{name: "version", version: "2", body: encoded(), want: 400, wantStatus: true, wantMsg: versionHeader,
			stats: ReceiverStats{Requests: 1, Invalid: 1}},
		{name: "too large", encoding: "gzip", body: gzipped(make([]byte, MaxRequest+1)), want: 413, wantStatus: true, wantMsg: "larger than 64 MiB",
			stats: ReceiverStats{Requests: 1, Invalid: 1}},
		{name: "sink fails for all", body: encoded(), fail: func(*profile.Profile) error { return errors.New("disk full") },
			want: 503, wantStatus: true, wantMsg: "store profiles: disk full",
			stats: ReceiverStats{Requests: 1, Profiles: 2, Samples: 13, SinkFailed: 2}},
		{name: "sink fails for some", body: encoded(), fail: func(p *profile.Profile) error {
			if p.Samples[0].Labels[profile.LabelPID] == "200" {
				return errors.New("disk full")
			}
			return nil
		}, want: 200, rejected: 1, wantMsg: "1 profiles not stored: disk full",
			stats: ReceiverStats{Requests: 1, Profiles: 2, Samples: 13, SinkFailed: 1}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			sk := sink{fail: tt.fail}
			var logged []string
			r := NewReceiver(sk.put, func(format string, args ...any) { logged = append(logged, fmt.Sprintf(format, args...)) })
			method := cmp.Or(tt.method, http.MethodPost)
			req := httptest.NewRequest(method, HTTPPath, bytes.NewReader(tt.body))
			switch tt.contentType {
			case "":
				req.Header.Set("Content-Type", "application/x-protobuf")
			case "-":
			default:
				req.Header.Set("Content-Type", tt.contentType)
			}
			if tt.encoding != "" {
				req.Header.Set("Content-Encoding", tt.encoding)
			}
			if tt.version != "" {
				req.Header.Set(versionHeader, tt.version)
			}
			w := httptest.NewRecorder()
			r.ServeHTTP(w, req)
			if w.Code != tt.want {
				t.Fatalf("status %d, want %d; body %q", w.Code, tt.want, w.Body.Bytes())
			}
			msg := w.Body.String()
			switch {
			case tt.want == 200:
				var resp collector.ExportProfilesServiceResponse
				if err := proto.Unmarshal(w.Body.Bytes(), &resp); err != nil {
					t.Fatalf("response: %v", err)
				}
				msg = resp.GetPartialSuccess().GetErrorMessage()
				if got := resp.GetPartialSuccess().GetRejectedProfiles(); got != tt.rejected {
					t.Errorf("%d profiles rejected, want %d", got, tt.rejected)
				}
			case tt.wantStatus:
				var st spb.Status
				if w.Header().Get("Content-Type") != "application/x-protobuf" || proto.Unmarshal(w.Body.Bytes(), &st) != nil {
					t.Fatalf("body %q is not a google.rpc.Status", w.Body.Bytes())
				}
				msg = st.GetMessage()
			}
			if !strings.Contains(msg, tt.wantMsg) || strings.Contains(strings.TrimSpace(msg), "\n") {
				t.Errorf("message %q, want one line with %q", msg, tt.wantMsg)
			}
			if tt.want == 405 && w.Header().Get("Allow") != http.MethodPost {
				t.Errorf("Allow %q", w.Header().Get("Allow"))
			}
			if st := r.Stats(); st != tt.stats {
				t.Errorf("stats %+v, want %+v", st, tt.stats)
			}
			if tt.want != 200 && len(logged) != 1 {
				t.Errorf("logged %q, want one line", logged)
			}
		})
	}
}

// TestReceiverLogsSparingly: a sender failing on every request makes one
// line per kind of failure, not one per request.
func TestReceiverLogsSparingly(t *testing.T) {
	var lines []string
	sk := sink{fail: func(*profile.Profile) error { return errors.New("disk full") }}
	r := NewReceiver(sk.put, func(format string, args ...any) {
		lines = append(lines, fmt.Sprintf(format, args...))
	})
	d := Encode(testProfile(), "test")
	good, err := proto.Marshal(&collector.ExportProfilesServiceRequest{ResourceProfiles: d.ResourceProfiles, Dictionary: d.Dictionary})
	if err != nil {
		t.Fatal(err)
	}
	for _, body := range [][]byte{{0xff}, good, {0xff}, good, {0xff}, good} {
		req := httptest.NewRequest(http.MethodPost, HTTPPath, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/x-protobuf")
		r.ServeHTTP(httptest.NewRecorder(), req)
	}
	if len(lines) != 2 {
		t.Errorf("logged %d lines, want 2 (one invalid, one sink): %q", len(lines), lines)
	}
	if st := r.Stats(); st.Invalid != 3 || st.SinkFailed != 6 {
		t.Errorf("stats %+v, want 3 invalid and 6 sink failures", st)
	}
}
