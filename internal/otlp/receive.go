package otlp

import (
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/flint-dev/flint/internal/profile"
	collector "go.opentelemetry.io/proto/slim/otlp/collector/profiles/v1development"
	pb "go.opentelemetry.io/proto/slim/otlp/profiles/v1development"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	_ "google.golang.org/grpc/encoding/gzip" // lets senders compress with gzip
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// MaxRequest bounds an OTLP/HTTP request body, after decompression; a
// gRPC server should take it as its MaxRecvMsgSize (4 MiB otherwise).
const MaxRequest = 64 << 20

// profilesService is the OTLP profiles service, as senders name it.
const profilesService = "opentelemetry.proto.collector.profiles.v1development.ProfilesService"

// versionHeader carries the schema version of a development OTLP profiles
// request (the OpenTelemetry collector sends and checks it); absent means
// 1, the one the slim types flint decodes with implement.
const versionHeader = "otlp-profiles-development-version"

// Receiver takes OTLP profiles over HTTP and gRPC, decodes them (Decode)
// and hands each to a sink. It is safe for concurrent use.
type Receiver struct {
	sink func(context.Context, *profile.Profile) error
	logf func(string, ...any)

	requests, profiles, samples      atomic.Int64
	invalid, unsupported, sinkFailed atomic.Int64
	mu                               sync.Mutex
	logged                           map[string]logged // by failure kind
}

// logged is when a failure kind was last logged and how often it has
// happened since.
type logged struct {
	at     time.Time
	missed int
}

// ReceiverStats counts what a Receiver took and refused since it was made.
type ReceiverStats struct {
	Requests int64 // export requests, over either transport
	Profiles int64 // profiles in the requests that decoded, delivered or not
	Samples  int64 // samples (their counts) in the profiles decoded
	// Refused, by reason.
	Invalid     int64 // requests refused whole: wrong method, content type or version, too large, undecodable
	Unsupported int64 // profiles skipped for their sample type
	SinkFailed  int64 // profiles the sink returned an error for
}

// NewReceiver returns a Receiver handing profiles to sink, as Decode makes
// them (read-only: they share pointers), one at a time per request and
// concurrently across requests. logf (nil for none) gets at most one line
// per minute for each kind of failure: invalid requests, unsupported
// profiles, sink errors.
func NewReceiver(sink func(context.Context, *profile.Profile) error, logf func(string, ...any)) *Receiver {
	if logf == nil {
		logf = func(string, ...any) {}
	}
	return &Receiver{sink: sink, logf: logf, logged: map[string]logged{}}
}

// Stats returns the counters, for /metrics.
func (r *Receiver) Stats() ReceiverStats {
	return ReceiverStats{
		Requests: r.requests.Load(), Profiles: r.profiles.Load(), Samples: r.samples.Load(),
		Invalid: r.invalid.Load(), Unsupported: r.unsupported.Load(), SinkFailed: r.sinkFailed.Load(),
	}
}

// log logs a failure of kind unless one was logged less than a minute
// ago; the line says how many went unlogged before it.
func (r *Receiver) log(kind, format string, args ...any) {
	now := time.Now()
	r.mu.Lock()
	l := r.logged[kind]
	if !l.at.IsZero() && now.Sub(l.at) < time.Minute {
		l.missed++
		r.logged[kind] = l
		r.mu.Unlock()
		return
	}
	r.logged[kind] = logged{at: now}
	r.mu.Unlock()
	msg := fmt.Sprintf(format, args...)
	if l.missed > 0 {
		msg += fmt.Sprintf(" (and %d more since the last such line)", l.missed)
	}
	r.logf("%s", msg)
}

// refuse counts and logs a request refused whole and returns the error
// for its sender.
func (r *Receiver) refuse(code codes.Code, format string, args ...any) error {
	r.invalid.Add(1)
	msg := fmt.Sprintf(format, args...)
	r.log("invalid", "otlp receiver: refused a request: %s", msg)
	return status.Error(code, msg)
}

// checkVersion refuses schema versions other than 1.
func checkVersion(values []string) error {
	if len(values) == 0 || len(values) == 1 && values[0] == "1" {
		return nil
	}
	return fmt.Errorf("%s %.16q: only 1 is supported", versionHeader, strings.Join(values, ","))
}

// export decodes a request and hands its profiles to the sink. Its error
// is a gRPC status: InvalidArgument when the request cannot be decoded,
// Unavailable when the sink failed for every profile (the sender should
// retry); profiles skipped or refused by the sink otherwise make a
// partial success.
func (r *Receiver) export(ctx context.Context, req *collector.ExportProfilesServiceRequest) (*collector.ExportProfilesServiceResponse, error) {
	profs, skipped, err := Decode(&pb.ProfilesData{ResourceProfiles: req.GetResourceProfiles(), Dictionary: req.GetDictionary()})
	if err != nil {
		return nil, r.refuse(codes.InvalidArgument, "decode profiles: %v", err)
	}
	r.profiles.Add(int64(len(profs) + skipped.Profiles))
	var msgs []string
	if skipped.Profiles > 0 {
		r.unsupported.Add(int64(skipped.Profiles))
		types := make([]string, len(skipped.Types))
		for i, t := range skipped.Types {
			types[i] = fmt.Sprintf("%.64q", t) // the sender's text: quoted and bounded for logs
		}
		msgs = append(msgs, fmt.Sprintf("%d profiles skipped: sample type %s: flint takes CPU samples only",
			skipped.Profiles, strings.Join(types, ", ")))
		r.log("unsupported", "otlp receiver: %s", msgs[0])
	}
	var failed int
	var sinkErr error
	for _, p := range profs {
		r.samples.Add(p.Total())
		if err := r.sink(ctx, p); err != nil {
			failed++
			if sinkErr == nil {
				sinkErr = errors.New(strings.ReplaceAll(err.Error(), "\n", " "))
			}
		}
	}
	if failed > 0 {
		r.sinkFailed.Add(int64(failed))
		r.log("sink", "otlp receiver: %d of %d profiles not stored: %v", failed, len(profs), sinkErr)
		if failed == len(profs) {
			return nil, status.Errorf(codes.Unavailable, "store profiles: %v", sinkErr)
		}
		msgs = append(msgs, fmt.Sprintf("%d profiles not stored: %v", failed, sinkErr))
	}
	resp := &collector.ExportProfilesServiceResponse{}
	if len(msgs) > 0 {
		resp.PartialSuccess = &collector.ExportProfilesPartialSuccess{
			RejectedProfiles: int64(skipped.Profiles + failed),
			ErrorMessage:     strings.Join(msgs, "; "),
		}
	}
	return resp, nil
}

// ServeHTTP is OTLP/HTTP for profiles; the caller's mux routes HTTPPath
// (/v1development/profiles) to it. It takes a POST of an
// ExportProfilesServiceRequest as application/x-protobuf (OTLP/JSON is
// not supported), optionally gzipped, at most 64 MiB decompressed, and
// answers as the OTLP specification says: 200 with an
// ExportProfilesServiceResponse (a partial success when profiles were
// skipped or the sink failed for some), or a google.rpc.Status with a
// one-line message: 400 when the body cannot be decoded, 413 when it is
// too large, 503 when the sink failed for every profile. A request that
// is not OTLP/protobuf at all gets 405 (not a POST) or 415 (another
// content type or encoding) with a plain-text line.
func (r *Receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	r.requests.Add(1)
	if req.Method != http.MethodPost {
		err := r.refuse(codes.InvalidArgument, "method %.16q: OTLP profiles take POST", req.Method)
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, status.Convert(err).Message(), http.StatusMethodNotAllowed)
		return
	}
	ct := req.Header.Get("Content-Type")
	if mt, _, _ := mime.ParseMediaType(ct); mt != "application/x-protobuf" {
		why := "OTLP profiles are taken as application/x-protobuf"
		if mt == "application/json" {
			why += "; OTLP/JSON is not supported"
		}
		err := r.refuse(codes.InvalidArgument, "Content-Type %.64q: %s", ct, why)
		http.Error(w, status.Convert(err).Message(), http.StatusUnsupportedMediaType)
		return
	}
	var body io.Reader = http.MaxBytesReader(w, req.Body, MaxRequest)
	switch enc := strings.ToLower(strings.TrimSpace(req.Header.Get("Content-Encoding"))); enc {
	case "", "identity":
	case "gzip":
		zr, err := gzip.NewReader(body)
		if err != nil {
			writeStatus(w, r.refuse(codes.InvalidArgument, "gzip body: %v", err))
			return
		}
		body = zr
	default:
		err := r.refuse(codes.InvalidArgument, "Content-Encoding %.64q: only gzip is supported", enc)
		http.Error(w, status.Convert(err).Message(), http.StatusUnsupportedMediaType)
		return
	}
	if err := checkVersion(req.Header.Values(versionHeader)); err != nil {
		writeStatus(w, r.refuse(codes.InvalidArgument, "%v", err))
		return
	}
	data, err := io.ReadAll(io.LimitReader(body, MaxRequest+1))
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge) || len(data) > MaxRequest:
		writeStatus(w, r.refuse(codes.ResourceExhausted, "body larger than %d MiB", MaxRequest>>20))
		return
	case err != nil:
		writeStatus(w, r.refuse(codes.InvalidArgument, "read body: %v", err))
		return
	}
	var in collector.ExportProfilesServiceRequest
	if err := proto.Unmarshal(data, &in); err != nil {
		writeStatus(w, r.refuse(codes.InvalidArgument, "decode request: %v", err))
		return
	}
	resp, err := r.export(req.Context(), &in)
	if err != nil {
		writeStatus(w, err)
		return
	}
	out, err := proto.Marshal(resp)
	if err != nil {
		writeStatus(w, status.Errorf(codes.Internal, "encode response: %v", err))
		return
	}
	w.Header().Set("Content-Type", "application/x-protobuf")
	w.Write(out)
}

// httpStatus is the HTTP status for the gRPC codes export and ServeHTTP use.
var httpStatus = map[codes.Code]int{
	codes.InvalidArgument:   http.StatusBadRequest,
	codes.ResourceExhausted: http.StatusRequestEntityTooLarge,
	codes.Unavailable:       http.StatusServiceUnavailable,
}

// writeStatus answers with err as a google.rpc.Status, as OTLP/HTTP wants
// error bodies.
func writeStatus(w http.ResponseWriter, err error) {
	st := status.Convert(err)
	code, ok := httpStatus[st.Code()]
	if !ok {
		code = http.StatusInternalServerError
	}
	b, _ := proto.Marshal(st.Proto())
	w.Header().Set("Content-Type", "application/x-protobuf")
	w.WriteHeader(code)
	w.Write(b)
}

// RegisterGRPC registers the Receiver on s as the OTLP profiles service
// (opentelemetry.proto.collector.profiles.v1development.ProfilesService,
// method Export), with ServeHTTP's semantics: InvalidArgument for a
// request that cannot be decoded, Unavailable when the sink failed for
// every profile, a partial success when it failed for some or profiles
// were skipped. A message that is not protobuf at all grpc-go answers
// itself, with Internal, before the handler's error can; it is counted
// and logged as invalid all the same.
func (r *Receiver) RegisterGRPC(s *grpc.Server) {
	s.RegisterService(&serviceDesc, r)
}

// exporter is what serviceDesc's handler needs of its server; the slim
// OTLP module has no generated gRPC code.
type exporter interface {
	export(context.Context, *collector.ExportProfilesServiceRequest) (*collector.ExportProfilesServiceResponse, error)
}

var serviceDesc = grpc.ServiceDesc{
	ServiceName: profilesService,
	HandlerType: (*exporter)(nil),
	Methods:     []grpc.MethodDesc{{MethodName: "Export", Handler: grpcExport}},
	Metadata:    "opentelemetry/proto/collector/profiles/v1development/profiles_service.proto",
}

func grpcExport(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
	r := srv.(*Receiver)
	r.requests.Add(1)
	if err := checkVersion(metadata.ValueFromIncomingContext(ctx, versionHeader)); err != nil {
		return nil, r.refuse(codes.InvalidArgument, "%v", err)
	}
	in := new(collector.ExportProfilesServiceRequest)
	if err := dec(in); err != nil {
		return nil, r.refuse(codes.InvalidArgument, "decode request: %s", status.Convert(err).Message())
	}
	if interceptor == nil {
		return r.export(ctx, in)
	}
	info := &grpc.UnaryServerInfo{Server: srv, FullMethod: "/" + profilesService + "/Export"}
	return interceptor(ctx, in, info, func(ctx context.Context, req any) (any, error) {
		return r.export(ctx, req.(*collector.ExportProfilesServiceRequest))
	})
}
