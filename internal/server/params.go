package server

import (
	"fmt"
	"math"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/flint-dev/flint/internal/profile"
	"github.com/flint-dev/flint/internal/selector"
	"github.com/flint-dev/flint/internal/store"
)

// Query limits and defaults; docs/API.md lists them.
const (
	defaultRange = time.Hour
	// maxPoints bounds the steps of one series, as Prometheus does (11,000).
	maxPoints = 11000
	// targetPoints is what the default step aims for: about one point per
	// two pixels of a chart.
	targetPoints   = 300
	minStep        = time.Second
	defaultLimit   = 100  // series kept by /api/v1/series
	maxLimit       = 1000 // and at most
	maxParamLength = 8192 // bytes of one parameter value
)

// paramError is a bad query parameter: the response is 400.
type paramError struct {
	name string
	err  error
}

func (e *paramError) Error() string { return e.name + ": " + e.err.Error() }
func (e *paramError) Unwrap() error { return e.err }

func badParam(name, format string, args ...any) error {
	return &paramError{name, fmt.Errorf(format, args...)}
}

// Times the API accepts: profiles are stored with Unix nanoseconds.
var (
	minTime = time.Unix(0, 0).UTC()
	maxTime = time.Unix(0, math.MaxInt64).UTC() // 2262-04-11
)

// ParseTime reads a point in time given to the API, between 1970 and
// 2262 (Unix nanoseconds):
//
//   - "now", "now-15m", "now-1h30m", "now+5m": relative to now;
//   - "15m", "1d": a bare duration, that long before now ("now-15m");
//   - "2026-11-22T10:00:00Z", "2026-11-22T10:00:00.5+01:00": RFC 3339;
//   - "1795000000", "1795000000.25": Unix seconds, up to nanoseconds.
//
// Durations are ParseDuration's.
func ParseTime(s string, now time.Time) (time.Time, error) {
	t, err := parseTime(s, now)
	if err != nil {
		return time.Time{}, err
	}
	if t.Before(minTime) || t.After(maxTime) {
		return time.Time{}, fmt.Errorf("time %q is %s: want one from 1970 to 2262", s, t.UTC().Format(time.RFC3339))
	}
	return t, nil
}

func parseTime(s string, now time.Time) (time.Time, error) {
	bad := func() (time.Time, error) {
		return time.Time{}, fmt.Errorf("bad time %q (want RFC 3339, Unix seconds, now, now-15m or 15m)", s)
	}
	switch {
	case s == "now":
		return now, nil
	case strings.HasPrefix(s, "now-"), strings.HasPrefix(s, "now+"):
		d, err := ParseDuration(s[4:])
		if err != nil {
			return time.Time{}, fmt.Errorf("bad time %q: %w", s, err)
		}
		if s[3] == '-' {
			d = -d
		}
		return now.Add(d), nil
	case s == "":
		return bad()
	case '0' <= s[0] && s[0] <= '9' && strings.Trim(s, "0123456789.") == "":
		return parseUnix(s)
	case '0' <= s[0] && s[0] <= '9' && len(s) >= 20 && s[4] == '-':
		t, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			return bad()
		}
		return t, nil
	}
	d, err := ParseDuration(s)
	if err != nil {
		return bad()
	}
	return now.Add(-d), nil
}

// parseUnix reads Unix seconds with up to nine decimals, exactly: a float64
// holds only about 16 digits.
func parseUnix(s string) (time.Time, error) {
	secs, frac, _ := strings.Cut(s, ".")
	if secs == "" || len(frac) > 9 || strings.Contains(frac, ".") {
		return time.Time{}, fmt.Errorf("bad time %q: want Unix seconds with at most nine decimals", s)
	}
	n, err := strconv.ParseInt(secs, 10, 64)
	if err != nil || n > maxTime.Unix() {
		return time.Time{}, fmt.Errorf("bad time %q: Unix seconds beyond 2262", s)
	}
	var ns int64
	if frac != "" {
		ns, _ = strconv.ParseInt(frac+strings.Repeat("0", 9-len(frac)), 10, 64)
	}
	return time.Unix(n, ns).UTC(), nil
}

// durationUnits extends time.ParseDuration's units with days and weeks.
var durationUnits = map[string]time.Duration{
	"ns": time.Nanosecond, "us": time.Microsecond, "µs": time.Microsecond, "μs": time.Microsecond,
	"ms": time.Millisecond, "s": time.Second, "m": time.Minute, "h": time.Hour,
	"d": 24 * time.Hour, "w": 7 * 24 * time.Hour,
}

// ParseDuration reads a positive duration such as "15m", "1h30m", "1.5d"
// or "2w": time.ParseDuration's units plus d (24 hours) and w (7 days),
// every number with a unit, no sign.
func ParseDuration(s string) (time.Duration, error) {
	bad := func(why string) (time.Duration, error) {
		return 0, fmt.Errorf("bad duration %q: %s (want e.g. 15m, 1h30m, 2d)", s, why)
	}
	if s == "" {
		return bad("empty")
	}
	var total time.Duration
	for rest := s; rest != ""; {
		i := strings.IndexFunc(rest, func(r rune) bool { return (r < '0' || r > '9') && r != '.' })
		if i <= 0 {
			if i < 0 {
				return bad("missing unit")
			}
			return bad("want a number")
		}
		num := rest[:i]
		rest = rest[i:]
		j := strings.IndexFunc(rest, func(r rune) bool { return '0' <= r && r <= '9' || r == '.' })
		if j < 0 {
			j = len(rest)
		}
		unit, ok := durationUnits[rest[:j]]
		if !ok {
			return bad(fmt.Sprintf("unknown unit %q", rest[:j]))
		}
		rest = rest[j:]
		v, err := strconv.ParseFloat(num, 64)
		if err != nil || strings.Count(num, ".") > 1 || num == "." {
			return bad("want a number")
		}
		// Whole units are exact; a fraction is rounded to the nanosecond.
		// whole < 2⁶³/unit keeps whole·unit below 2⁶³.
		whole, frac := math.Modf(v)
		if whole >= (1<<63)/float64(unit) {
			return bad("too long")
		}
		d, f := time.Duration(whole)*unit, time.Duration(math.Round(frac*float64(unit)))
		if d > math.MaxInt64-f || total > math.MaxInt64-d-f {
			return bad("too long")
		}
		total += d + f
	}
	if total <= 0 {
		return bad("not positive")
	}
	return total, nil
}

// niceSteps are the default steps: round numbers of seconds, minutes,
// hours. The smallest is the agent's window: a finer step would show each
// window as a spike between empty steps.
var niceSteps = []time.Duration{
	10 * time.Second, 15 * time.Second, 30 * time.Second,
	time.Minute, 2 * time.Minute, 5 * time.Minute, 10 * time.Minute, 15 * time.Minute, 30 * time.Minute,
	time.Hour, 2 * time.Hour, 3 * time.Hour, 6 * time.Hour, 12 * time.Hour, 24 * time.Hour,
}

// defaultStep is the smallest nice step that covers r in at most
// targetPoints steps, and never below the agent's window.
func defaultStep(r time.Duration) time.Duration {
	for _, s := range niceSteps {
		if r <= s*targetPoints {
			return s
		}
	}
	// Whole days beyond that.
	day := 24 * time.Hour
	return (r/targetPoints + day - 1) / day * day
}

// parseStep reads a step: a duration or plain seconds ("10").
func parseStep(s string) (time.Duration, error) {
	if strings.Trim(s, "0123456789.") == "" {
		v, err := strconv.ParseFloat(s, 64)
		if err != nil || v > float64(math.MaxInt64/time.Second) {
			return 0, fmt.Errorf("bad step %q (want a duration such as 10s, or seconds)", s)
		}
		s = strconv.FormatFloat(v, 'f', -1, 64) + "s"
	}
	d, err := ParseDuration(s)
	if err != nil {
		return 0, err
	}
	if d < minStep {
		return 0, fmt.Errorf("step %s is below the minimum of %s", d, minStep)
	}
	return d, nil
}

// params reads one request's query parameters. Unknown and repeated
// parameters are errors: a typo such as "selecter" would otherwise return
// everything.
type params struct {
	v   url.Values
	now time.Time
}

func newParams(v url.Values, now time.Time, allowed ...string) (*params, error) {
	names := make([]string, 0, len(v))
	for name := range v {
		names = append(names, name)
	}
	slices.Sort(names) // report the same error for the same query
	for _, name := range names {
		if !slices.Contains(allowed, name) {
			return nil, badParam(clip(name), "unknown parameter (want %s)", strings.Join(allowed, ", "))
		}
		if len(v[name]) > 1 {
			return nil, badParam(name, "given %d times", len(v[name]))
		}
		if len(v[name][0]) > maxParamLength {
			return nil, badParam(name, "longer than %d bytes", maxParamLength)
		}
	}
	return &params{v: v, now: now}, nil
}

// clip shortens text from a client that an error message repeats.
func clip(s string) string {
	const n = 64
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "") + "…"
}

func (p *params) has(name string) bool   { return p.v.Has(name) }
func (p *params) get(name string) string { return p.v.Get(name) }

// optTime reads an optional time parameter.
func (p *params) optTime(name string) (t time.Time, ok bool, err error) {
	if !p.has(name) {
		return time.Time{}, false, nil
	}
	t, err = ParseTime(p.get(name), p.now)
	if err != nil {
		return time.Time{}, false, &paramError{name, err}
	}
	return t, true, nil
}

// timeRange reads the range [from, to) of parameters "from" and "to"; to
// defaults to now and from to an hour before to.
func (p *params) timeRange() (from, to time.Time, err error) {
	to, ok, err := p.optTime("to")
	if err != nil {
		return
	}
	if !ok {
		to = p.now
	}
	from, ok, err = p.optTime("from")
	if err != nil {
		return
	}
	if !ok {
		from = to.Add(-defaultRange)
	}
	return from, to, checkRange("from", "to", from, to)
}

func checkRange(fromName, toName string, from, to time.Time) error {
	if !from.Before(to) {
		return badParam(fromName, "%s is not before %s %s", from.Format(time.RFC3339Nano), toName, to.Format(time.RFC3339Nano))
	}
	return nil
}

func (p *params) selector(name string) (selector.Selector, error) {
	sel, err := selector.Parse(p.get(name))
	if err != nil {
		return nil, &paramError{name, err}
	}
	return sel, nil
}

func (p *params) format() (profile.Format, error) {
	if !p.has("format") {
		return profile.FormatJSON, nil
	}
	f, err := profile.ParseFormat(p.get("format"))
	if err != nil {
		return "", &paramError{"format", err}
	}
	return f, nil
}

// labels reads which sample labels a profile keeps: a comma-separated
// list, "all", or empty for none. The default is what each format shows:
// pprof's tags (comm, thread, pid, tid and node, which tells the pids of a
// fleet apart; Proto drops the rest), and comm for the others, which show
// only the process name. Every label kept and not shown would only
// multiply the distinct samples.
func (p *params) labels(f profile.Format) ([]string, error) {
	if !p.has("labels") {
		if f == profile.FormatPprof {
			return []string{profile.LabelComm, profile.LabelThread, profile.LabelPID, profile.LabelTID, profile.LabelNode}, nil
		}
		return []string{profile.LabelComm}, nil
	}
	v := p.get("labels")
	switch v {
	case "all":
		return nil, nil
	case "":
		return []string{}, nil
	}
	names := strings.Split(v, ",")
	for _, n := range names {
		if !validLabelName(n) {
			return nil, badParam("labels", "%q is not a label name", n)
		}
	}
	return names, nil
}

// profileType reads the type parameter: cpu (the default), off-cpu or
// wall.
func (p *params) profileType() (profile.Kind, error) {
	if !p.has("type") {
		return profile.CPU, nil
	}
	k, err := profile.ParseKind(p.get("type"))
	if err != nil {
		return 0, &paramError{"type", err}
	}
	return k, nil
}

func (p *params) bool(name string) (bool, error) {
	if !p.has(name) {
		return false, nil
	}
	b, err := strconv.ParseBool(p.get(name))
	if err != nil {
		return false, badParam(name, "want true or false, not %q", p.get(name))
	}
	return b, nil
}

// validLabelName reports whether s is a label name as selectors spell them.
func validLabelName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '_' && (c < 'a' || c > 'z') && (c < 'A' || c > 'Z') && (i == 0 || c < '0' || c > '9') {
			return false
		}
	}
	return true
}

// profileRequest is a parsed /api/v1/profile request.
type profileRequest struct {
	query  store.Query
	format profile.Format
}

func parseProfileRequest(v url.Values, now time.Time) (*profileRequest, error) {
	p, err := newParams(v, now, "from", "to", "selector", "format", "labels", "type")
	if err != nil {
		return nil, err
	}
	r := &profileRequest{}
	if r.query.From, r.query.To, err = p.timeRange(); err != nil {
		return nil, err
	}
	if r.query.Type, err = p.profileType(); err != nil {
		return nil, err
	}
	if r.query.Selector, err = p.selector("selector"); err != nil {
		return nil, err
	}
	if r.format, err = p.format(); err != nil {
		return nil, err
	}
	if r.query.KeepLabels, err = p.labels(r.format); err != nil {
		return nil, err
	}
	return r, nil
}

// diffRequest is a parsed /api/v1/diff request.
type diffRequest struct {
	base, current store.Query
	format        profile.Format
	normalize     bool
}

func parseDiffRequest(v url.Values, now time.Time) (*diffRequest, error) {
	p, err := newParams(v, now, "base_from", "base_to", "from", "to", "selector", "base_selector", "format", "labels", "normalize", "type")
	if err != nil {
		return nil, err
	}
	r := &diffRequest{}
	c, b := &r.current, &r.base
	if c.From, c.To, err = p.timeRange(); err != nil {
		return nil, err
	}
	// A missing end of the base is the current range's length away from
	// the other; with neither, the base is the period just before.
	length := c.To.Sub(c.From)
	bFrom, hasFrom, err := p.optTime("base_from")
	if err != nil {
		return nil, err
	}
	bTo, hasTo, err := p.optTime("base_to")
	if err != nil {
		return nil, err
	}
	switch {
	case hasFrom && hasTo:
		b.From, b.To = bFrom, bTo
	case hasFrom:
		b.From, b.To = bFrom, bFrom.Add(length)
	case hasTo:
		b.From, b.To = bTo.Add(-length), bTo
	default:
		b.From, b.To = c.From.Add(-length), c.From
	}
	if err := checkRange("base_from", "base_to", b.From, b.To); err != nil {
		return nil, err
	}
	if c.Selector, err = p.selector("selector"); err != nil {
		return nil, err
	}
	b.Selector = c.Selector
	if p.has("base_selector") {
		if b.Selector, err = p.selector("base_selector"); err != nil {
			return nil, err
		}
	}
	if r.format, err = p.format(); err != nil {
		return nil, err
	}
	if c.KeepLabels, err = p.labels(r.format); err != nil {
		return nil, err
	}
	b.KeepLabels = c.KeepLabels
	if c.Type, err = p.profileType(); err != nil {
		return nil, err
	}
	b.Type = c.Type
	if r.normalize, err = p.bool("normalize"); err != nil {
		return nil, err
	}
	return r, nil
}

// seriesRequest is a parsed /api/v1/series request. The range is widened
// to whole steps, aligned to multiples of the step since the Unix epoch, so
// every point covers a full step and charts of different ranges agree.
type seriesRequest struct {
	query store.SeriesQuery
	limit int
}

func parseSeriesRequest(v url.Values, now time.Time) (*seriesRequest, error) {
	p, err := newParams(v, now, "from", "to", "selector", "by", "step", "limit", "type")
	if err != nil {
		return nil, err
	}
	r := &seriesRequest{limit: defaultLimit}
	q := &r.query
	if q.From, q.To, err = p.timeRange(); err != nil {
		return nil, err
	}
	if q.Type, err = p.profileType(); err != nil {
		return nil, err
	}
	if q.Selector, err = p.selector("selector"); err != nil {
		return nil, err
	}
	q.By = profile.LabelComm
	if p.has("by") {
		q.By = p.get("by")
		if !validLabelName(q.By) {
			return nil, badParam("by", "%q is not a label name", q.By)
		}
	}
	q.Step = defaultStep(q.To.Sub(q.From))
	if p.has("step") {
		if q.Step, err = parseStep(p.get("step")); err != nil {
			return nil, &paramError{"step", err}
		}
	}
	if p.has("limit") {
		n, err := strconv.Atoi(p.get("limit"))
		if err != nil || n < 1 || n > maxLimit {
			return nil, badParam("limit", "want a number of series from 1 to %d, not %q", maxLimit, p.get("limit"))
		}
		r.limit = n
	}
	q.From = alignDown(q.From, q.Step)
	q.To = alignDown(q.To.Add(-1), q.Step).Add(q.Step)
	if q.To.After(maxTime) {
		return nil, badParam("to", "%s widened to whole steps of %s is beyond 2262", q.To.Format(time.RFC3339), q.Step)
	}
	if n := q.To.Sub(q.From) / q.Step; n > maxPoints {
		return nil, badParam("step", "%s gives %d points from %s to %s, more than %d: use a larger step",
			q.Step, n, q.From.Format(time.RFC3339), q.To.Format(time.RFC3339), maxPoints)
	}
	return r, nil
}

// alignDown rounds t, from 1970 to 2262, down to a multiple of step since
// the Unix epoch.
func alignDown(t time.Time, step time.Duration) time.Time {
	return t.Add(-(t.Sub(minTime) % step)).UTC()
}

func parseFindingsRequest(v url.Values, now time.Time) (*store.Query, error) {
	p, err := newParams(v, now, "from", "to", "selector")
	if err != nil {
		return nil, err
	}
	q := &store.Query{}
	if q.From, q.To, err = p.timeRange(); err != nil {
		return nil, err
	}
	if q.Selector, err = p.selector("selector"); err != nil {
		return nil, err
	}
	return q, nil
}

// labelsRequest is a parsed /api/v1/labels request.
type labelsRequest struct {
	from, to time.Time
}

func parseLabelsRequest(v url.Values, now time.Time) (*labelsRequest, error) {
	p, err := newParams(v, now, "from", "to")
	if err != nil {
		return nil, err
	}
	r := &labelsRequest{}
	if r.from, r.to, err = p.timeRange(); err != nil {
		return nil, err
	}
	return r, nil
}

// liveRequest is a parsed /debug/pprof/profile request.
type liveRequest struct {
	duration time.Duration
	selector selector.Selector
}

// Live profile limits, as net/http/pprof's defaults.
const (
	defaultLiveSeconds = 30
	maxLiveSeconds     = 300
)

func parseLiveRequest(v url.Values) (*liveRequest, error) {
	p, err := newParams(v, time.Time{}, "seconds", "pid", "selector")
	if err != nil {
		return nil, err
	}
	r := &liveRequest{duration: defaultLiveSeconds * time.Second}
	if p.has("seconds") {
		n, err := strconv.Atoi(p.get("seconds"))
		if err != nil || n < 1 || n > maxLiveSeconds {
			return nil, badParam("seconds", "want whole seconds from 1 to %d, not %q", maxLiveSeconds, p.get("seconds"))
		}
		r.duration = time.Duration(n) * time.Second
	}
	switch {
	case p.has("pid") && p.has("selector"):
		return nil, badParam("pid", "give pid or selector, not both")
	case p.has("pid"):
		n, err := strconv.Atoi(p.get("pid"))
		if err != nil || n < 1 {
			return nil, badParam("pid", "%q is not a process ID", p.get("pid"))
		}
		r.selector = selector.Selector{{Name: profile.LabelPID, Op: selector.Equal, Value: strconv.Itoa(n)}}
	default:
		if r.selector, err = p.selector("selector"); err != nil {
			return nil, err
		}
	}
	return r, nil
}
