package server

import (
	"bytes"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/flint-dev/flint/internal/profile"
)

// handleLive serves GET /debug/pprof/profile?seconds=N[&pid=PID|&selector=SEL]:
// a CPU profile of the next N seconds (default 30, at most 300), as
// net/http/pprof's Profile serves one: a gzipped profile.proto sent as the
// attachment "profile", so
//
//	go tool pprof 'http://127.0.0.1:7070/debug/pprof/profile?seconds=10&pid=4242'
//
// works as against a Go program's own endpoint; and GET /debug/pprof/block
// likewise, the time threads spent off the CPU (off_cpu/nanoseconds). pid
// is short for selector={pid="PID"}; without either every process is
// profiled. At most four live profiles run at once; more get 429. Without
// a LiveProfiler (flint server) it answers 501 and names the agent's URL
// to ask instead.
func (s *server) handleLive(kind profile.Kind) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) { s.serveLive(kind, w, r) }
}

func (s *server) serveLive(kind profile.Kind, w http.ResponseWriter, r *http.Request) {
	w.Header().Set("X-Content-Type-Options", "nosniff")
	if s.o.Live == nil {
		u := "http://NODE:7070" + r.URL.Path
		if r.URL.RawQuery != "" {
			u += "?" + r.URL.RawQuery
		}
		textError(w, http.StatusNotImplemented, "flint server keeps stored profiles only: live profiles come from an agent, so ask the agent on the node, e.g. "+u)
		return
	}
	v, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		textError(w, http.StatusBadRequest, "query: "+err.Error())
		return
	}
	req, err := parseLiveRequest(v)
	if err != nil {
		textError(w, http.StatusBadRequest, err.Error())
		return
	}
	if r.Method == http.MethodHead {
		// Sampling for HEAD would make a client wait for nothing.
		liveHeaders(w)
		return
	}
	select {
	case s.live <- struct{}{}:
		defer func() { <-s.live }()
	default:
		textError(w, http.StatusTooManyRequests, "too many live profiles in progress (at most "+strconv.Itoa(maxLive)+"): try again later")
		return
	}
	extendWriteDeadline(w, r, req.duration)

	p, err := s.o.Live.Profile(r.Context(), kind, req.duration, req.selector)
	if err != nil {
		if r.Context().Err() != nil {
			return // the client went away
		}
		textError(w, http.StatusInternalServerError, "profile: "+err.Error())
		return
	}
	var buf bytes.Buffer
	if err := profile.WritePprof(&buf, p); err != nil {
		textError(w, http.StatusInternalServerError, "encode profile: "+err.Error())
		return
	}
	liveHeaders(w)
	w.Header().Set("Content-Length", strconv.Itoa(buf.Len()))
	w.Write(buf.Bytes())
}

func liveHeaders(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Disposition", `attachment; filename="profile"`)
}

// extendWriteDeadline gives the response the profile's duration on top of
// the server's WriteTimeout, as net/http/pprof does, so a 30 s profile
// works behind a 10 s write timeout.
func extendWriteDeadline(w http.ResponseWriter, r *http.Request, d time.Duration) {
	srv, ok := r.Context().Value(http.ServerContextKey).(*http.Server)
	if ok && srv.WriteTimeout > 0 {
		http.NewResponseController(w).SetWriteDeadline(time.Now().Add(srv.WriteTimeout + d))
	}
}
