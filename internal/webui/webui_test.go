package webui

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestHandler(t *testing.T) {
	h := Handler()
	for _, tc := range []struct {
		target, method string
		status         int
		ctype, body    string
	}{
		{target: "/", status: 200, ctype: "text/html", body: "<title>flint</title>"},
		{target: "/", method: http.MethodHead, status: 200, ctype: "text/html"},
		{target: "/assets/index.js", status: 200, ctype: "text/javascript"},
		{target: "/assets/index.css", status: 200, ctype: "text/css"},
		{target: "/index.html", status: 404, body: "no such path /index.html\n"},
		{target: "/nothing", status: 404, ctype: "text/plain", body: "no such path /nothing\n"},
		{target: "/assets/", status: 404},
	} {
		t.Run(tc.target, func(t *testing.T) {
			method := tc.method
			if method == "" {
				method = http.MethodGet
			}
			w := httptest.NewRecorder()
			h.ServeHTTP(w, httptest.NewRequest(method, tc.target, nil))
			if w.Code != tc.status {
				t.Fatalf("status %d, want %d: %s", w.Code, tc.status, w.Body)
			}
			if ct := w.Header().Get("Content-Type"); !strings.HasPrefix(ct, tc.ctype) {
				t.Errorf("Content-Type %q, want %q", ct, tc.ctype)
			}
			if !strings.Contains(w.Body.String(), tc.body) {
				t.Errorf("body does not contain %q: %.200s", tc.body, w.Body)
			}
			if method == http.MethodHead && w.Body.Len() != 0 {
				t.Errorf("HEAD sent a body of %d bytes", w.Body.Len())
			}
		})
	}
}

// TestRevalidate checks that a browser holding the current bundle gets 304.
func TestRevalidate(t *testing.T) {
	h := Handler()
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/assets/index.js", nil))
	etag := w.Header().Get("ETag")
	if etag == "" || w.Header().Get("Cache-Control") != "no-cache" {
		t.Fatalf("ETag %q, Cache-Control %q", etag, w.Header().Get("Cache-Control"))
	}
	r := httptest.NewRequest(http.MethodGet, "/assets/index.js", nil)
	r.Header.Set("If-None-Match", etag)
	w = httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if w.Code != http.StatusNotModified {
		t.Errorf("status %d, want 304", w.Code)
	}
}
