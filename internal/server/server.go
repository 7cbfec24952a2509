package server

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/flint-dev/flint/internal/otlp"
	"github.com/flint-dev/flint/internal/profile"
	"github.com/flint-dev/flint/internal/selector"
	"github.com/flint-dev/flint/internal/store"
	"github.com/flint-dev/flint/internal/webui"
)

// Options configure the handler New returns.
type Options struct {
	// Store answers the /api/v1 routes; nil: they answer 404.
	Store store.Reader
	// Live takes the profiles of /debug/pprof/profile; nil (flint server):
	// it answers 501, pointing at the agent on the node.
	Live LiveProfiler
	// Metrics writes the caller's own metrics (the agent's) in the
	// Prometheus text format at the top of /metrics; the API's metrics
	// follow whether or not it is set.
	Metrics func(w io.Writer)
	// Token, when set, is required by every request but /healthz in the
	// Authorization header, as "Bearer <token>" or as the password of HTTP
	// basic authentication (any user name); never from the query string or
	// a cookie. Empty: no authentication, so only requests whose Host names
	// a loopback address, localhost or one of AllowHosts are answered, and
	// Endpoint.Check refuses addresses beyond loopback.
	Token string
	// AllowHosts are further Host names (without port) answered without a
	// token: the names a proxy on this machine forwards under. Compared
	// without regard to case; ignored when Token is set.
	AllowHosts []string
	// Node names this machine in flame graph titles; empty: not shown.
	Node string
	// Receive, if set, takes OTLP profiles (internal/otlp) at POST
	// otlp.HTTPPath, under the same Host and token checks as the API. A
	// browser cannot send them from another site: their content type
	// needs a CORS preflight, which is never granted.
	Receive http.Handler
	// QueryTimeout bounds each store query; zero: one minute.
	QueryTimeout time.Duration
	// MaxSamples bounds the distinct samples (stack and labels) of one
	// profile response, whatever the store allows; beyond it the response
	// is 422. Zero: 1,000,000.
	MaxSamples int
	// MaxQueries bounds the /api/v1 requests served at once, each holding
	// a store query and its result in memory; beyond it they get 429 at
	// once. Zero: 4.
	MaxQueries int
}

// Defaults for zero Options fields.
const (
	defaultQueryTimeout = time.Minute
	defaultMaxSamples   = 1_000_000
	defaultMaxQueries   = 4
	// maxLive bounds concurrent live profiles: each one holds a sampling
	// session and its samples in memory.
	maxLive = 4
)

// LiveProfiler takes profiles on demand.
type LiveProfiler interface {
	// Profile records for d from now and returns the profile of kind
	// (CPU or OffCPU) of the processes sel matches (all for an empty
	// selector). It returns early with ctx's error when ctx is done.
	Profile(ctx context.Context, kind profile.Kind, d time.Duration, sel selector.Selector) (*profile.Profile, error)
}

type server struct {
	http.Handler
	o       Options
	now     func() time.Time
	live    chan struct{} // semaphore of maxLive
	queries chan struct{} // semaphore of Options.MaxQueries
	metrics apiMetrics
	// token is the SHA-256 of Options.Token, so comparing takes the same
	// time whatever the length of what a client sent.
	token [sha256.Size]byte
}

// New returns the HTTP handler of the agent and of flint server. It serves
// GET and HEAD only (other methods get 405), answers unknown paths with
// 404, checks the Host header (without a token) and then the token before
// anything but /healthz, and never sends CORS headers, so a browser keeps
// other sites' pages from reading its answers. docs/API.md describes every
// route.
func New(o Options) http.Handler {
	return newServer(o, time.Now)
}

func newServer(o Options, now func() time.Time) *server {
	if o.QueryTimeout <= 0 {
		o.QueryTimeout = defaultQueryTimeout
	}
	if o.MaxSamples <= 0 {
		o.MaxSamples = defaultMaxSamples
	}
	if o.MaxQueries <= 0 {
		o.MaxQueries = defaultMaxQueries
	}
	s := &server{
		o: o, now: now,
		live:    make(chan struct{}, maxLive),
		queries: make(chan struct{}, o.MaxQueries),
		token:   sha256.Sum256([]byte(o.Token)),
	}
	mux := http.NewServeMux()
	mux.Handle("GET /api/v1/profile", s.api("profile", s.handleProfile))
	mux.Handle("GET /api/v1/series", s.api("series", s.handleSeries))
	mux.Handle("GET /api/v1/diff", s.api("diff", s.handleDiff))
	mux.Handle("GET /api/v1/findings", s.api("findings", s.handleFindings))
	mux.Handle("GET /api/v1/labels", s.api("labels", s.handleLabels))
	mux.Handle("GET /api/v1/labels/{name}/values", s.api("label_values", s.handleLabelValues))
	mux.Handle("GET /api/v1/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		jsonError(w, http.StatusNotFound, errNotFound.Error())
	}))
	if o.Receive != nil {
		mux.Handle("POST "+otlp.HTTPPath, o.Receive)
	}
	mux.HandleFunc("GET /debug/pprof/profile", s.handleLive(profile.CPU))
	mux.HandleFunc("GET /debug/pprof/block", s.handleLive(profile.OffCPU))
	mux.HandleFunc("GET /metrics", s.handleMetrics)
	mux.HandleFunc("GET /healthz", handleHealth)
	mux.Handle("/", webui.Handler()) // the web UI; 404 for other paths
	s.Handler = s.guard(mux)
	return s
}

// guard refuses methods other than GET and HEAD, then Host headers that do
// not name this machine (without a token), then requests without the
// token.
func (s *server) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeErr := textError
		if strings.HasPrefix(r.URL.Path, "/api/") {
			writeErr = jsonError
		}
		receive := s.o.Receive != nil && r.URL.Path == otlp.HTTPPath
		if r.Method != http.MethodGet && r.Method != http.MethodHead && !(receive && r.Method == http.MethodPost) {
			w.Header().Set("Allow", "GET, HEAD")
			writeErr(w, http.StatusMethodNotAllowed, "method "+r.Method+" not allowed (use GET)")
			return
		}
		if r.URL.Path == "/healthz" {
			next.ServeHTTP(w, r)
			return
		}
		if !s.hostAllowed(r.Host) {
			// A page on another site can make a browser send requests to
			// 127.0.0.1 under its own name (DNS rebinding); the Host header
			// still carries that name.
			writeErr(w, http.StatusMisdirectedRequest, fmt.Sprintf(
				"Host %q is not a name of this machine: without a token flint answers only localhost and loopback addresses (add the name with --allow-host, or set a token)", r.Host))
			return
		}
		if !s.authorized(r) {
			w.Header().Add("WWW-Authenticate", `Bearer realm="flint"`)
			w.Header().Add("WWW-Authenticate", `Basic realm="flint"`)
			writeErr(w, http.StatusUnauthorized, "missing or wrong token (send Authorization: Bearer TOKEN)")
			return
		}
		next.ServeHTTP(w, r)
	})
}

// hostAllowed reports whether a request's Host header may be answered:
// always with a token; without one only loopback addresses, localhost and
// Options.AllowHosts, with or without a port.
func (s *server) hostAllowed(hostport string) bool {
	if s.o.Token != "" {
		return true
	}
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if isLoopback(host) {
		return true
	}
	for _, a := range s.o.AllowHosts {
		if a != "" && strings.EqualFold(a, host) {
			return true
		}
	}
	return false
}

// authorized checks the token of the Authorization header: a bearer token,
// or the password of basic authentication, which is what browsers (the
// web UI) and go tool pprof (a URL's user information) send. Nothing else
// carries it: a token in a URL ends up in logs and browser history.
func (s *server) authorized(r *http.Request) bool {
	if s.o.Token == "" {
		return true
	}
	got, ok := bearerToken(r.Header.Get("Authorization"))
	if !ok {
		_, got, ok = r.BasicAuth()
	}
	if !ok {
		return false
	}
	sum := sha256.Sum256([]byte(got))
	return subtle.ConstantTimeCompare(sum[:], s.token[:]) == 1
}

// bearerToken reads "Bearer TOKEN"; the scheme is case-insensitive (RFC
// 9110, section 11.1).
func bearerToken(h string) (string, bool) {
	scheme, token, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	token = strings.TrimSpace(token)
	return token, token != ""
}

// Errors handlers return for a status other than 400, 422 or 500.
var (
	errNotFound = errors.New("no such path")
	errNoStore  = errors.New("this agent keeps no profiles (no store)")
	errBusy     = errors.New("too many queries in progress")
)

// statusOf maps a handler's error to the response status.
func statusOf(err error) int {
	var pe *paramError
	switch {
	case errors.As(err, &pe), errors.Is(err, store.ErrBadQuery):
		return http.StatusBadRequest
	case errors.Is(err, store.ErrTooLarge):
		return http.StatusUnprocessableEntity
	case errors.Is(err, errNotFound), errors.Is(err, errNoStore):
		return http.StatusNotFound
	case errors.Is(err, context.DeadlineExceeded):
		return http.StatusServiceUnavailable
	case errors.Is(err, errBusy):
		return http.StatusTooManyRequests
	}
	return http.StatusInternalServerError
}

// oneLine keeps an error message to one line.
var oneLine = strings.NewReplacer("\r\n", " ", "\n", " ", "\r", " ")

// jsonError writes {"error": msg}, the error body of /api/v1 routes.
func jsonError(w http.ResponseWriter, status int, msg string) {
	h := w.Header()
	h.Del("Content-Disposition")
	h.Set("Content-Type", "application/json")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(struct {
		Error string `json:"error"`
	}{oneLine.Replace(msg)})
}

// textError writes msg as one line of plain text, the error body of the
// other routes. X-Go-Pprof makes go tool pprof show the message.
func textError(w http.ResponseWriter, status int, msg string) {
	h := w.Header()
	h.Del("Content-Disposition")
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Go-Pprof", "1")
	w.WriteHeader(status)
	fmt.Fprintln(w, oneLine.Replace(msg))
}

// handleMetrics serves GET /metrics: Options.Metrics (the agent's), then
// the API's own, in the Prometheus text exposition format.
func (s *server) handleMetrics(w http.ResponseWriter, r *http.Request) {
	if len(r.URL.Query()) > 0 {
		textError(w, http.StatusBadRequest, "/metrics takes no parameters")
		return
	}
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	if s.o.Metrics != nil {
		s.o.Metrics(w)
	}
	s.metrics.write(w, len(s.queries))
}

// handleHealth serves GET /healthz: "ok" while the process serves HTTP. It
// needs no token, for load balancers and liveness probes.
func handleHealth(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Write([]byte("ok\n"))
}
