package export

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flint-dev/flint/internal/fixture"
)

// BenchmarkPyroscope is what pushing a window of the agent's shape
// (fixture.AgentWindow: 50 processes, one executable) to Pyroscope costs
// the agent: splitting it into series, a gzipped pprof and a request for
// each, against a server that reads the body and answers 200.
func BenchmarkPyroscope(b *testing.B) {
	var pushes, bytes atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		pushes.Add(1)
		bytes.Add(n)
	}))
	defer srv.Close()
	u, _ := url.Parse("pyroscope://" + strings.TrimPrefix(srv.URL, "http://"))
	s, err := NewPyroscope(u, srv.Client())
	if err != nil {
		b.Fatal(err)
	}
	p := fixture.AgentWindow(time.Now())
	for b.Loop() {
		w := *p // a new window each time: the sender remembers a window's pushes
		w.Start = w.Start.Add(10 * time.Second)
		p = &w
		if err := s.Send(context.Background(), p); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(pushes.Load())/float64(b.N), "pushes/window")
	b.ReportMetric(float64(bytes.Load())/float64(b.N), "bytes/window")
}
