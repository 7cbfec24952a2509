package otlp

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"

	"github.com/flint-dev/flint/internal/export"
	"github.com/flint-dev/flint/internal/profile"
	service "go.opentelemetry.io/proto/slim/otlp/collector/profiles/v1development"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	_ "google.golang.org/grpc/encoding/gzip" // lets the client compress with gzip
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// exportMethod is the profiles service's one RPC.
const exportMethod = "/opentelemetry.proto.collector.profiles.v1development.ProfilesService/Export"

// HTTPPath is where OTLP/HTTP takes profiles.
const HTTPPath = "/v1development/profiles"

// NewSender returns a Sender for an OTLP endpoint:
//
//	otlp://host:4317        gRPC, plaintext
//	otlps://host:4317       gRPC over TLS
//	otlphttp://host:4318    HTTP/protobuf, plaintext, to /v1development/profiles
//	otlphttps://host:4318   HTTP/protobuf over TLS
//
// A path on an otlphttp URL replaces the default one. version is flint's,
// for the instrumentation scope.
func NewSender(u *url.URL, version string) (export.Sender, error) {
	if u.Hostname() == "" || u.Port() == "" {
		return nil, fmt.Errorf("%s: want %s://HOST:PORT", redacted(u), u.Scheme)
	}
	if u.User != nil {
		return nil, fmt.Errorf("%s: credentials in an OTLP URL are not supported", redacted(u))
	}
	switch u.Scheme {
	case "otlp", "otlps":
		creds := insecure.NewCredentials()
		if u.Scheme == "otlps" {
			creds = credentials.NewTLS(&tls.Config{MinVersion: tls.VersionTLS12})
		}
		conn, err := grpc.NewClient(u.Host, grpc.WithTransportCredentials(creds))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", redacted(u), err)
		}
		return &grpcSender{name: redacted(u), conn: conn, version: version}, nil
	case "otlphttp", "otlphttps":
		endpoint := *u
		endpoint.Scheme = strings.TrimPrefix(u.Scheme, "otlp")
		if endpoint.Path == "" || endpoint.Path == "/" {
			endpoint.Path = HTTPPath
		}
		return &httpSender{name: redacted(u), url: endpoint.String(), version: version, client: &http.Client{}}, nil
	}
	return nil, fmt.Errorf("%s: not an OTLP URL (otlp, otlps, otlphttp or otlphttps)", redacted(u))
}

// redacted is u without credentials or query, fit for logs.
func redacted(u *url.URL) string {
	c := *u
	c.User, c.RawQuery = nil, ""
	return c.String()
}

type grpcSender struct {
	name    string
	conn    *grpc.ClientConn
	version string
}

func (s *grpcSender) Name() string { return s.name }

// Send exports one window. Following the OTLP specification, the codes a
// later try can cure are retried; the others reject the window.
func (s *grpcSender) Send(ctx context.Context, p *profile.Profile) error {
	data := Encode(p, s.version)
	req := &service.ExportProfilesServiceRequest{ResourceProfiles: data.ResourceProfiles, Dictionary: data.Dictionary}
	var resp service.ExportProfilesServiceResponse
	err := s.conn.Invoke(ctx, exportMethod, req, &resp, grpc.UseCompressor("gzip"))
	switch status.Code(err) {
	case codes.OK:
		return partial(s.name, resp.GetPartialSuccess())
	case codes.Canceled, codes.DeadlineExceeded, codes.ResourceExhausted, codes.Aborted,
		codes.OutOfRange, codes.Unavailable, codes.DataLoss:
		return fmt.Errorf("export to %s: %s", s.name, status.Convert(err).Message())
	}
	return export.Rejected(fmt.Errorf("export to %s: %s: %s", s.name, status.Code(err), status.Convert(err).Message()))
}

type httpSender struct {
	name, url string
	version   string
	client    *http.Client
}

func (s *httpSender) Name() string { return s.name }

// Send posts one window, gzipped. 429, 502, 503 and 504 are retried, as
// the OTLP specification says; other failures reject the window.
func (s *httpSender) Send(ctx context.Context, p *profile.Profile) error {
	data := Encode(p, s.version)
	body, err := proto.Marshal(&service.ExportProfilesServiceRequest{ResourceProfiles: data.ResourceProfiles, Dictionary: data.Dictionary})
	if err != nil {
		return export.Rejected(fmt.Errorf("export to %s: encode: %w", s.name, err))
	}
	var zipped bytes.Buffer
	zw := gzip.NewWriter(&zipped)
	zw.Write(body)
	zw.Close()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.url, &zipped)
	if err != nil {
		return export.Rejected(fmt.Errorf("export to %s: %w", s.name, err))
	}
	req.Header.Set("Content-Type", "application/x-protobuf")
	req.Header.Set("Content-Encoding", "gzip")
	resp, err := s.client.Do(req)
	if err != nil {
		var op *net.OpError
		if errors.As(err, &op) {
			err = op // "dial tcp ...: connection refused", without the URL again
		}
		return fmt.Errorf("export to %s: %w", s.name, err)
	}
	defer resp.Body.Close()
	answer, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	switch {
	case resp.StatusCode == http.StatusOK:
		var r service.ExportProfilesServiceResponse
		if proto.Unmarshal(answer, &r) != nil {
			return nil // some receivers answer with an empty or JSON body
		}
		return partial(s.name, r.GetPartialSuccess())
	case resp.StatusCode == http.StatusTooManyRequests, resp.StatusCode == http.StatusBadGateway,
		resp.StatusCode == http.StatusServiceUnavailable, resp.StatusCode == http.StatusGatewayTimeout:
		return fmt.Errorf("export to %s: %s", s.name, resp.Status)
	}
	return export.Rejected(fmt.Errorf("export to %s: %s: %.200s", s.name, resp.Status, errorText(resp.Header.Get("Content-Type"), answer)))
}

// errorText is an error answer's message: OTLP receivers send a
// google.rpc.Status in protobuf, others text.
func errorText(contentType string, answer []byte) string {
	if contentType == "application/x-protobuf" {
		var st spb.Status
		if proto.Unmarshal(answer, &st) == nil {
			return st.GetMessage()
		}
	}
	return string(bytes.TrimSpace(answer))
}

// partial turns a receiver's partial success into a rejection, so that
// the window is counted and the reason logged; nothing is resent.
func partial(name string, ps *service.ExportProfilesPartialSuccess) error {
	if ps.GetRejectedProfiles() == 0 && ps.GetErrorMessage() == "" {
		return nil
	}
	return export.Rejected(fmt.Errorf("export to %s: %d profiles rejected: %.200s", name, ps.GetRejectedProfiles(), ps.GetErrorMessage()))
}

// Close closes the connection.
func (s *grpcSender) Close() error { return s.conn.Close() }
