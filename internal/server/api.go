package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"time"

	"github.com/flint-dev/flint/internal/profile"
	"github.com/flint-dev/flint/internal/store"
)

// maxSeriesPoints bounds the points of one /api/v1/series response, all
// series together: 100 series of 11,000 points.
const maxSeriesPoints = 100 * maxPoints

// api adapts the /api/v1 handler of route: it needs the store and one of
// Options.MaxQueries places, it is counted in the API's metrics, and its
// error becomes a JSON error body with the status statusOf picks.
func (s *server) api(route string, h func(http.ResponseWriter, *http.Request) error) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		err := s.runQuery(w, r, h)
		status := http.StatusOK
		if err != nil {
			if errors.Is(err, context.DeadlineExceeded) {
				err = fmt.Errorf("%w (the limit is %s: narrow the range or selector)", err, s.o.QueryTimeout)
			}
			status = statusOf(err)
			if status == http.StatusTooManyRequests {
				w.Header().Set("Retry-After", "1")
			}
			jsonError(w, status, err.Error())
		}
		s.metrics.observe(route, status, time.Since(start))
	})
}

// runQuery runs h if the store is there and a query place is free.
func (s *server) runQuery(w http.ResponseWriter, r *http.Request, h func(http.ResponseWriter, *http.Request) error) error {
	if s.o.Store == nil {
		return errNoStore
	}
	select {
	case s.queries <- struct{}{}:
		defer func() { <-s.queries }()
	default:
		return fmt.Errorf("%w (at most %d): try again in a moment", errBusy, s.o.MaxQueries)
	}
	return h(w, r)
}

// query parses r's query string; url.Values.Query drops what it cannot
// parse, which would turn "selector=%zz" into no selector at all.
func query(r *http.Request) (url.Values, error) {
	v, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return nil, &paramError{"query", err}
	}
	return v, nil
}

func (s *server) storeContext(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), s.o.QueryTimeout)
}

// handleProfile serves GET /api/v1/profile: the merged profile of the
// windows that start in [from, to).
//
// Parameters: from, to (times; default to=now, from=to-1h), selector (a
// label selector; default all), format (json, pprof, folded, svg, html;
// default json) and labels (the sample labels kept: names separated by
// commas, "all" or empty for none; default comm, thread, pid, tid and node
// for pprof, comm otherwise).
func (s *server) handleProfile(w http.ResponseWriter, r *http.Request) error {
	v, err := query(r)
	if err != nil {
		return err
	}
	req, err := parseProfileRequest(v, s.now())
	if err != nil {
		return err
	}
	ctx, cancel := s.storeContext(r)
	defer cancel()
	// Store errors name their query ("query profile: …").
	p, err := s.o.Store.Profile(ctx, req.query)
	if err != nil {
		return err
	}
	if err := s.checkSize(p); err != nil {
		return err
	}
	fillRange(p, req.query)
	var buf bytes.Buffer
	if err := profile.Write(&buf, p, req.format, s.title(req.query.Type.Title(), req.query)); err != nil {
		return fmt.Errorf("encode profile: %w", err)
	}
	writeProfile(w, req.format, "flint", &buf)
	return nil
}

// handleDiff serves GET /api/v1/diff: the differential profile of
// [from, to) against the base range [base_from, base_to).
//
// Parameters: from, to, selector, format and labels as for
// /api/v1/profile; base_from and base_to (default: the range of the same
// length just before from; one given, the other is that length away);
// base_selector (default selector); normalize (true: scale the base to the
// current profile's total first; default false, as go tool pprof).
func (s *server) handleDiff(w http.ResponseWriter, r *http.Request) error {
	v, err := query(r)
	if err != nil {
		return err
	}
	req, err := parseDiffRequest(v, s.now())
	if err != nil {
		return err
	}
	ctx, cancel := s.storeContext(r)
	defer cancel()
	base, err := s.o.Store.Profile(ctx, req.base)
	if err != nil {
		return fmt.Errorf("base: %w", err)
	}
	if err := s.checkSize(base); err != nil {
		return fmt.Errorf("base: %w", err)
	}
	current, err := s.o.Store.Profile(ctx, req.current)
	if err != nil {
		return err
	}
	if err := s.checkSize(current); err != nil {
		return err
	}
	fillRange(current, req.current)
	// Ranges sampled at different rates compare as CPU time, in counts of
	// the shorter period.
	if unit := min(base.Period, current.Period); unit > 0 {
		base, current = profile.InPeriod(base, unit), profile.InPeriod(current, unit)
	}
	if req.normalize && base.Total() > 0 {
		base = profile.Scale(base, float64(current.Total())/float64(base.Total()))
	}
	var buf bytes.Buffer
	title := s.title(req.current.Type.Title(), req.current) + " vs " + rangeText(req.base)
	if err := profile.WriteDiff(&buf, profile.Diff(base, current), req.format, title); err != nil {
		return fmt.Errorf("encode diff: %w", err)
	}
	writeProfile(w, req.format, "flint-diff", &buf)
	return nil
}

// checkSize bounds what a profile response holds.
func (s *server) checkSize(p *profile.Profile) error {
	if n := len(p.Samples); n > s.o.MaxSamples {
		return fmt.Errorf("%w: the profile has %d distinct samples, more than %d: narrow the range or selector, or keep fewer labels",
			store.ErrTooLarge, n, s.o.MaxSamples)
	}
	return nil
}

// fillRange places a profile the store returned without a time in the
// queried range, so pprof shows when it was taken.
func fillRange(p *profile.Profile, q store.Query) {
	if p.Start.IsZero() {
		p.Start, p.Duration = q.From, q.To.Sub(q.From)
	}
}

func (s *server) title(what string, q store.Query) string {
	t := what
	if s.o.Node != "" {
		t = s.o.Node + ": " + t
	}
	sel := "all processes"
	if len(q.Selector) > 0 {
		sel = q.Selector.String()
	}
	return t + " of " + sel + ", " + rangeText(q)
}

func rangeText(q store.Query) string {
	const layout = "2006-01-02 15:04:05"
	return q.From.UTC().Format(layout) + " to " + q.To.UTC().Format(layout) + " UTC"
}

// contentTypes are the responses' types per format.
var contentTypes = map[profile.Format]string{
	profile.FormatJSON:   "application/json",
	profile.FormatPprof:  "application/octet-stream",
	profile.FormatFolded: "text/plain; charset=utf-8",
	profile.FormatSVG:    "image/svg+xml",
	profile.FormatHTML:   "text/html; charset=utf-8",
}

// writeProfile sends an encoded profile; pprof is a download named
// name.pb.gz, as net/http/pprof sends its profiles.
func writeProfile(w http.ResponseWriter, f profile.Format, name string, body *bytes.Buffer) {
	h := w.Header()
	h.Set("Content-Type", contentTypes[f])
	h.Set("Content-Length", strconv.Itoa(body.Len()))
	h.Set("X-Content-Type-Options", "nosniff")
	if f == profile.FormatPprof {
		h.Set("Content-Disposition", `attachment; filename="`+name+`.pb.gz"`)
	}
	w.Write(body.Bytes())
}

func writeJSON(w http.ResponseWriter, v any) error {
	body, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode json: %w", err)
	}
	body = append(body, '\n')
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	h.Set("X-Content-Type-Options", "nosniff")
	w.Write(body)
	return nil
}

// SeriesResponse is the body of /api/v1/series.
type SeriesResponse struct {
	From time.Time `json:"from"` // the range, widened to whole steps
	To   time.Time `json:"to"`
	Step float64   `json:"step"` // seconds
	By   string    `json:"by"`
	// Period is the seconds one sample stands for (one nanosecond for
	// off-CPU and wall), so that a rate times Period is CPUs (threads for
	// off-CPU and wall); 0 when the range holds no CPU window of known
	// sampling period.
	Period float64 `json:"period,omitempty"`
	// Series are sorted by their samples in the range, most first.
	Series []Series `json:"series"`
}

// Series is one label value's rate of samples over time.
type Series struct {
	Value string `json:"value"`
	// Other marks the sum of the series beyond the request's limit.
	Other   bool  `json:"other,omitempty"`
	Samples int64 `json:"samples"` // in the whole range
	// Points are [Unix seconds, samples per second] at the start of every
	// step of the range, zero where nothing was sampled.
	Points [][2]float64 `json:"points"`
}

// handleSeries serves GET /api/v1/series: how many samples per second
// each value of one label had, step by step.
//
// Parameters: from, to and selector as for /api/v1/profile; by (the label;
// default comm); step (a duration or seconds, at least 1s; default the
// smallest of 10s, 15s, 30s, 1m, 2m, 5m, … that gives at most 300 points);
// limit (series kept, the largest, 1 to 1000; the rest are summed into one
// series marked "other"; default 100). The range is widened to whole
// steps aligned to the Unix epoch; at most 11,000 points per series.
func (s *server) handleSeries(w http.ResponseWriter, r *http.Request) error {
	v, err := query(r)
	if err != nil {
		return err
	}
	req, err := parseSeriesRequest(v, s.now())
	if err != nil {
		return err
	}
	ctx, cancel := s.storeContext(r)
	defer cancel()
	res, err := s.o.Store.Series(ctx, req.query)
	if err != nil {
		return err
	}
	resp, err := rates(res, req)
	if err != nil {
		return err
	}
	return writeJSON(w, resp)
}

// rates turns the store's sample counts into dense rates per step, keeping
// the limit largest series and summing the rest.
func rates(set store.SeriesSet, req *seriesRequest) (*SeriesResponse, error) {
	q := req.query
	n := int(q.To.Sub(q.From) / q.Step)
	resp := &SeriesResponse{From: q.From, To: q.To, Step: q.Step.Seconds(), By: q.By, Period: set.Period.Seconds(), Series: []Series{}}
	res := set.Series

	type ranked struct {
		s     *store.Series
		total int64
	}
	all := make([]ranked, len(res))
	for i := range res {
		all[i].s = &res[i]
		for _, p := range res[i].Points {
			all[i].total += p.Samples
		}
	}
	sort.Slice(all, func(i, j int) bool {
		if all[i].total != all[j].total {
			return all[i].total > all[j].total
		}
		return all[i].s.Value < all[j].s.Value
	})
	kept := min(len(all), req.limit)
	if len(all) > kept {
		kept++ // the "other" series
	}
	if kept*n > maxSeriesPoints {
		return nil, fmt.Errorf("%w: %d series of %d points, more than %d points: use a larger step or a smaller limit",
			store.ErrTooLarge, kept, n, maxSeriesPoints)
	}

	add := func(counts []int64, points []store.Point) {
		for _, p := range points {
			// Whatever the store's alignment, a point counts in the step
			// it falls in.
			i := p.Time.Sub(q.From) / q.Step
			if p.Time.Before(q.From) || int(i) >= n {
				continue
			}
			counts[i] += p.Samples
		}
	}
	emit := func(value string, other bool, total int64, counts []int64) {
		s := Series{Value: value, Other: other, Samples: total, Points: make([][2]float64, n)}
		for i, c := range counts {
			t := q.From.Add(time.Duration(i) * q.Step)
			s.Points[i] = [2]float64{float64(t.UnixNano()) / 1e9, float64(c) / q.Step.Seconds()}
		}
		resp.Series = append(resp.Series, s)
	}
	for i := 0; i < min(len(all), req.limit); i++ {
		counts := make([]int64, n)
		add(counts, all[i].s.Points)
		emit(all[i].s.Value, false, all[i].total, counts)
	}
	if len(all) > req.limit {
		counts := make([]int64, n)
		var total int64
		for _, r := range all[req.limit:] {
			add(counts, r.s.Points)
			total += r.total
		}
		emit("", true, total, counts)
	}
	return resp, nil
}

// FindingsResponse is the body of /api/v1/findings.
type FindingsResponse struct {
	From time.Time `json:"from"`
	To   time.Time `json:"to"`
	// Findings are oldest first; each is flint doctor's finding (as
	// `flint doctor --json` prints it) with when and where it was found.
	Findings []json.RawMessage `json:"findings"`
}

// storedFinding is what /api/v1/findings adds to a finding.
type storedFinding struct {
	Time     time.Time         `json:"time"`     // the examined window's start
	Duration float64           `json:"duration"` // and length, in seconds
	Labels   map[string]string `json:"labels"`   // of the process
}

// handleFindings serves GET /api/v1/findings: what the agent's doctor
// found in the windows it examined that start in [from, to).
//
// Parameters: from, to and selector as for /api/v1/profile; the selector
// matches the labels of the process a finding is about.
func (s *server) handleFindings(w http.ResponseWriter, r *http.Request) error {
	v, err := query(r)
	if err != nil {
		return err
	}
	q, err := parseFindingsRequest(v, s.now())
	if err != nil {
		return err
	}
	ctx, cancel := s.storeContext(r)
	defer cancel()
	fs, err := s.o.Store.Findings(ctx, *q)
	if err != nil {
		return err
	}
	resp := FindingsResponse{From: q.From, To: q.To, Findings: make([]json.RawMessage, 0, len(fs))}
	for _, f := range fs {
		body, err := withPlace(f)
		if err != nil {
			return err
		}
		resp.Findings = append(resp.Findings, body)
	}
	return writeJSON(w, resp)
}

// withPlace adds the time, length and labels of f's window to its JSON
// object.
func withPlace(f store.Finding) (json.RawMessage, error) {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(f.Body, &obj); err != nil {
		return nil, fmt.Errorf("stored finding at %s: %w", f.Start.UTC().Format(time.RFC3339), err)
	}
	place, err := json.Marshal(storedFinding{Time: f.Start, Duration: f.Duration.Seconds(), Labels: f.Labels})
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(place, &obj); err != nil {
		return nil, err
	}
	return json.Marshal(obj)
}

// handleLabels serves GET /api/v1/labels: a JSON array of the label names
// seen in [from, to), sorted.
//
// Parameters: from and to as for /api/v1/profile.
func (s *server) handleLabels(w http.ResponseWriter, r *http.Request) error {
	v, err := query(r)
	if err != nil {
		return err
	}
	req, err := parseLabelsRequest(v, s.now())
	if err != nil {
		return err
	}
	ctx, cancel := s.storeContext(r)
	defer cancel()
	names, err := s.o.Store.LabelNames(ctx, req.from, req.to)
	if err != nil {
		return err
	}
	return writeJSON(w, sorted(names))
}

// handleLabelValues serves GET /api/v1/labels/{name}/values: a JSON array
// of the values label name had in [from, to), sorted.
//
// Parameters: from and to as for /api/v1/profile.
func (s *server) handleLabelValues(w http.ResponseWriter, r *http.Request) error {
	name := r.PathValue("name")
	if !validLabelName(name) {
		return badParam("name", "%q is not a label name", name)
	}
	v, err := query(r)
	if err != nil {
		return err
	}
	req, err := parseLabelsRequest(v, s.now())
	if err != nil {
		return err
	}
	ctx, cancel := s.storeContext(r)
	defer cancel()
	values, err := s.o.Store.LabelValues(ctx, name, req.from, req.to)
	if err != nil {
		return err
	}
	return writeJSON(w, sorted(values))
}

// sorted returns ss sorted, and an empty array rather than JSON null.
func sorted(ss []string) []string {
	if ss == nil {
		return []string{}
	}
	sort.Strings(ss)
	return ss
}
