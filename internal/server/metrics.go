package server

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"sync"
	"time"
)

// apiMetrics counts the API's answers: what flint server can honestly say
// about itself (it samples nothing), and what the agent adds to its own.
type apiMetrics struct {
	mu     sync.Mutex
	routes map[string]*routeMetrics
}

type routeMetrics struct {
	codes   map[int]uint64
	seconds float64 // time to answer, all requests together
	count   uint64
}

// observe counts one answer of route with status, which took d.
func (m *apiMetrics) observe(route string, status int, d time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.routes == nil {
		m.routes = map[string]*routeMetrics{}
	}
	r := m.routes[route]
	if r == nil {
		r = &routeMetrics{codes: map[int]uint64{}}
		m.routes[route] = r
	}
	r.codes[status]++
	r.seconds += d.Seconds()
	r.count++
}

// write writes the metrics in the Prometheus text format, sorted by route
// and code so that two scrapes differ only in their values.
func (m *apiMetrics) write(w io.Writer, queriesInProgress int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	routes := make([]string, 0, len(m.routes))
	for r := range m.routes {
		routes = append(routes, r)
	}
	slices.Sort(routes)
	fmt.Fprint(w, "# HELP flint_api_requests_total API requests answered, by route and status code; 429: over the query limit, 500 and 503: the store failed or timed out.\n# TYPE flint_api_requests_total counter\n")
	for _, route := range routes {
		r := m.routes[route]
		codes := make([]int, 0, len(r.codes))
		for c := range r.codes {
			codes = append(codes, c)
		}
		slices.Sort(codes)
		for _, c := range codes {
			fmt.Fprintf(w, "flint_api_requests_total{route=%q,code=\"%d\"} %d\n", route, c, r.codes[c])
		}
	}
	fmt.Fprint(w, "# HELP flint_api_request_seconds Time to answer API requests, by route.\n# TYPE flint_api_request_seconds summary\n")
	for _, route := range routes {
		r := m.routes[route]
		fmt.Fprintf(w, "flint_api_request_seconds_sum{route=%q} %s\n", route, strconv.FormatFloat(r.seconds, 'g', -1, 64))
		fmt.Fprintf(w, "flint_api_request_seconds_count{route=%q} %d\n", route, r.count)
	}
	fmt.Fprintf(w, "# HELP flint_api_queries_in_progress Store queries being answered now.\n# TYPE flint_api_queries_in_progress gauge\nflint_api_queries_in_progress %d\n", queriesInProgress)
}
