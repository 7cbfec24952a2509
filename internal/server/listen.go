package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"
)

// Endpoint is where the API listens, and over what.
type Endpoint struct {
	// Addr is host:port, as net.Listen takes it; an empty host is every
	// interface.
	Addr string
	// TLSCert and TLSKey are PEM files of the certificate (chain) and its
	// key, read once by Start; both or neither. Neither: plain HTTP.
	TLSCert, TLSKey string
}

// The http.Server's timeouts: slow or stalled clients lose their
// connection rather than holding a goroutine, a socket and buffers, and
// the agent's sampling does not wait on them.
const (
	// readHeaderTimeout bounds the request line and headers.
	readHeaderTimeout = 10 * time.Second
	// readTimeout bounds reading a whole request; GET requests have no body.
	readTimeout = 30 * time.Second
	// writeMargin is the time a response has to encode and send its body
	// once its query has run: the write timeout is the query timeout plus
	// this. The live profile extends its own deadline by its duration.
	writeMargin = 30 * time.Second
	// idleTimeout closes kept-alive connections no request uses.
	idleTimeout = 2 * time.Minute
	// maxHeaderBytes bounds the request line and headers: parameters are
	// at most 8192 bytes each.
	maxHeaderBytes = 64 << 10
)

// ErrNeedToken reports an address beyond loopback without a token.
var ErrNeedToken = errors.New("needs a token")

// Check enforces who may reach the API before anything listens: an
// address beyond loopback (127.0.0.0/8, ::1, localhost) needs a token,
// with ErrNeedToken; TLS needs both files. It returns warnings for what is
// allowed but unwise: a token sent in clear text beyond loopback.
func (e Endpoint) Check(token string) (warnings []string, err error) {
	host, _, err := net.SplitHostPort(e.Addr)
	if err != nil {
		return nil, fmt.Errorf("listen address %q: %w", e.Addr, err)
	}
	if (e.TLSCert == "") != (e.TLSKey == "") {
		return nil, errors.New("--tls-cert and --tls-key go together: give both or neither")
	}
	if isLoopback(host) {
		return nil, nil
	}
	what := "every interface"
	if host != "" {
		what = host
	}
	if token == "" {
		return nil, fmt.Errorf("listen on %s %w (set one with --token-file, or listen on 127.0.0.1)", what, ErrNeedToken)
	}
	if e.TLSCert == "" {
		warnings = append(warnings, fmt.Sprintf("listening on %s without TLS: the token and the profiles cross the network in clear text (give --tls-cert and --tls-key, or put a TLS proxy in front)", what))
	}
	return warnings, nil
}

// isLoopback reports whether host names only this machine.
func isLoopback(host string) bool {
	if strings.EqualFold(strings.TrimSuffix(host, "."), "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Running is an API being served.
type Running struct {
	srv *http.Server
	ln  net.Listener
	url string
}

// Listener is an endpoint listened on, not served yet.
type Listener struct {
	ln  net.Listener
	tls *tls.Config // nil: plain HTTP
}

// Listen checks e against token as Check does, loads its certificate and
// listens on e.Addr. A process that drops privileges listens first: a port
// below 1024 takes CAP_NET_BIND_SERVICE.
func Listen(e Endpoint, token string) (*Listener, error) {
	if _, err := e.Check(token); err != nil {
		return nil, err
	}
	l := &Listener{}
	if e.TLSCert != "" {
		cert, err := tls.LoadX509KeyPair(e.TLSCert, e.TLSKey)
		if err != nil {
			return nil, fmt.Errorf("load TLS certificate: %w", err)
		}
		l.tls = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	}
	ln, err := net.Listen("tcp", e.Addr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", e.Addr, err)
	}
	l.ln = ln
	return l, nil
}

// Close stops listening; for a Listener that is not served.
func (l *Listener) Close() error { return l.ln.Close() }

// Serve serves New(o) on l, over TLS when l has a certificate, with
// timeouts on reading requests, writing answers and idle connections. The
// caller ends it with Shutdown.
func (l *Listener) Serve(o Options) *Running {
	srv := newHTTPServer(New(o), o.QueryTimeout)
	scheme := "http"
	if l.tls != nil {
		srv.TLSConfig, scheme = l.tls, "https"
		// The certificate is in TLSConfig; ServeTLS also offers HTTP/2.
		go srv.ServeTLS(l.ln, "", "")
	} else {
		go srv.Serve(l.ln)
	}
	return &Running{srv: srv, ln: l.ln, url: scheme + "://" + l.ln.Addr().String()}
}

// Start is Listen and Serve. Its errors are failures to start; the caller
// ends it with Shutdown.
func Start(e Endpoint, o Options) (*Running, error) {
	l, err := Listen(e, o.Token)
	if err != nil {
		return nil, err
	}
	return l.Serve(o), nil
}

// newHTTPServer returns the http.Server for h; queryTimeout (zero: the
// default) sets how long an answer may take to write.
func newHTTPServer(h http.Handler, queryTimeout time.Duration) *http.Server {
	if queryTimeout <= 0 {
		queryTimeout = defaultQueryTimeout
	}
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: readHeaderTimeout,
		ReadTimeout:       readTimeout,
		WriteTimeout:      queryTimeout + writeMargin,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
	}
}

// URL is the base URL the API answers at, such as https://[::]:7070.
func (r *Running) URL() string { return r.url }

// Shutdown stops accepting connections and waits for the requests in
// progress until ctx ends, then closes the rest.
func (r *Running) Shutdown(ctx context.Context) error {
	err := r.srv.Shutdown(ctx)
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return r.srv.Close()
	}
	return err
}
