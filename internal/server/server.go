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

	"github.com/flint-dev/flint/internal/profile"
	"github.com/flint-dev/flint/internal/selector"
	"github.com/flint-dev/flint/internal/store"
	"github.com/flint-dev/flint/internal/webui"
)

// Options configure the handler New returns.
type Options struct {
	// Store answers the /api/v1 routes; nil: they answer 404.
	Store store.Store
	// Live takes the profiles of /debug/pprof/profile; nil: it answers 404.
	Live LiveProfiler
	// Metrics writes the agent's metrics in the Prometheus text format for
	// /metrics; nil: it answers 404.
	Metrics func(w io.Writer)
	// Token, when set, is required by every request but /healthz, as
	// "Authorization: Bearer <token>" or as the password of HTTP basic
	// authentication (any user name). Empty: no authentication; CheckListen
	// then refuses addresses beyond loopback.
	Token string
	// Node names this machine in flame graph titles; empty: not shown.
	Node string
	// QueryTimeout bounds each store query; zero: one minute.
	QueryTimeout time.Duration
	// MaxSamples bounds the distinct samples (stack and labels) of one
	// profile response, whatever the store allows; beyond it the response
	// is 422. Zero: 1,000,000.
	MaxSamples int
}

// Defaults for zero Options fields.
const (
	defaultQueryTimeout = time.Minute
	defaultMaxSamples   = 1_000_000
	// maxLive bounds concurrent live profiles: each one holds a sampling
	// session and its samples in memory.
	maxLive = 4
)

// LiveProfiler takes profiles on demand.
type LiveProfiler interface {
	// Profile samples for d from now and returns the profile of the
	// processes sel matches (all for an empty selector). It returns early
	// with ctx's error when ctx is done.
	Profile(ctx context.Context, d time.Duration, sel selector.Selector) (*profile.Profile, error)
}

type server struct {
	http.Handler
	o    Options
	now  func() time.Time
	live chan struct{} // semaphore of maxLive
	// token is the SHA-256 of Options.Token, so comparing takes the same
	// time whatever the length of what a client sent.
	token [sha256.Size]byte
}

// New returns the agent's HTTP handler. It serves GET and HEAD only (other
// methods get 405), answers unknown paths with 404, and checks the token
// before anything but /healthz. docs/API.md describes every route.
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
	s := &server{o: o, now: now, live: make(chan struct{}, maxLive), token: sha256.Sum256([]byte(o.Token))}
	mux := http.NewServeMux()
	mux.Handle("GET /api/v1/profile", s.api(s.handleProfile))
	mux.Handle("GET /api/v1/series", s.api(s.handleSeries))
	mux.Handle("GET /api/v1/diff", s.api(s.handleDiff))
	mux.Handle("GET /api/v1/findings", s.api(s.handleFindings))
	mux.Handle("GET /api/v1/labels", s.api(s.handleLabels))
	mux.Handle("GET /api/v1/labels/{name}/values", s.api(s.handleLabelValues))
	mux.Handle("GET /api/v1/", s.api(func(http.ResponseWriter, *http.Request) error { return errNotFound }))
	mux.HandleFunc("GET /debug/pprof/profile", s.handleLive)
	mux.HandleFunc("GET /metrics", s.handleMetrics)
	mux.HandleFunc("GET /healthz", handleHealth)
	mux.Handle("/", webui.Handler()) // the web UI; 404 for other paths
	s.Handler = s.guard(mux)
	return s
}

// guard refuses methods other than GET and HEAD and checks the token.
func (s *server) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeErr := textError
		if strings.HasPrefix(r.URL.Path, "/api/") {
			writeErr = jsonError
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			writeErr(w, http.StatusMethodNotAllowed, "method "+r.Method+" not allowed (use GET)")
			return
		}
		if r.URL.Path != "/healthz" && !s.authorized(r) {
			w.Header().Add("WWW-Authenticate", `Bearer realm="flint"`)
			w.Header().Add("WWW-Authenticate", `Basic realm="flint"`)
			writeErr(w, http.StatusUnauthorized, "missing or wrong token (send Authorization: Bearer TOKEN)")
			return
		}
		next.ServeHTTP(w, r)
	})
}

func (s *server) authorized(r *http.Request) bool {
	if s.o.Token == "" {
		return true
	}
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok {
		_, got, ok = r.BasicAuth()
	}
	if !ok {
		return false
	}
	sum := sha256.Sum256([]byte(got))
	return subtle.ConstantTimeCompare(sum[:], s.token[:]) == 1
}

// Errors handlers return for a status other than 400, 422 or 500.
var (
	errNotFound = errors.New("no such path")
	errNoStore  = errors.New("this agent keeps no profiles (no store)")
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

// handleMetrics serves GET /metrics: the agent's metrics in the Prometheus
// text exposition format.
func (s *server) handleMetrics(w http.ResponseWriter, r *http.Request) {
	if len(r.URL.Query()) > 0 {
		textError(w, http.StatusBadRequest, "/metrics takes no parameters")
		return
	}
	if s.o.Metrics == nil {
		textError(w, http.StatusNotFound, "this agent exports no metrics")
		return
	}
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	s.o.Metrics(w)
}

// handleHealth serves GET /healthz: "ok" while the process serves HTTP. It
// needs no token, for load balancers and liveness probes.
func handleHealth(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Write([]byte("ok\n"))
}

// CheckListen refuses to serve beyond this machine without a token: addr
// (host:port, as net.Listen takes it) must be on a loopback address
// (127.0.0.0/8, ::1, localhost) unless token is set. An empty host means
// every interface.
func CheckListen(addr, token string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("listen address %q: %w", addr, err)
	}
	if token != "" {
		return nil
	}
	if strings.EqualFold(host, "localhost") {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	what := "every interface"
	if host != "" {
		what = host
	}
	return fmt.Errorf("listen on %s needs a token (set one, or listen on 127.0.0.1)", what)
}
