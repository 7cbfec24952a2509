package export

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"mime/multipart"
	"net/http"
	"net/url"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"

	pprof "github.com/google/pprof/profile"

	"github.com/flint-dev/flint/internal/profile"
)

// NewPyroscope returns a Sender that pushes windows to Grafana Pyroscope's
// HTTP ingest API (POST /ingest, "Pyroscope Legacy HTTP API" in
// docs/sources/reference-server-api of github.com/grafana/pyroscope).
//
// The target is pyroscope://host[:port][/prefix] (plain HTTP) or
// pyroscopes://host[:port][/prefix] (HTTPS); the push goes to
// /prefix/ingest. Userinfo (pyroscopes://user:token@host, as Grafana Cloud
// wants it) is sent as HTTP basic auth, and ?tenant=X as the header
// X-Scope-OrgID: X that a multi-tenant Pyroscope requires. No other query
// parameter is accepted. A nil client means a new http.Client with no
// timeout: Send's ctx bounds each window.
//
// Send pushes one request per series, the samples of one service with the
// same labels: POST /ingest?name=…&from=…&until=…&sampleRate=…&spyName=ebpfspy
// (from and until in Unix seconds) with a multipart/form-data body whose
// profile field holds the gzipped pprof, as grafana/pyroscope-go's
// upstream/remote sends it. There is no format=pprof parameter: with it,
// Pyroscope reads the body as a bare pprof, not as a form
// (pkg/ingester/pyroscope/ingest_handler.go).
//
// name is service_name{label=value,...} in Pyroscope's label set syntax
// (its service_name, then labels). The service_name follows Pyroscope's
// eBPF agent, grafana/alloy pyroscope.ebpf, and its documented examples:
//
//   - "ebpf/<namespace>/<container>" for a Kubernetes container;
//   - otherwise the base name of the process's executable (alloy's
//     discovery.process example), else its comm; a container without
//     Kubernetes names too, since its ID changes each time it starts;
//   - "unspecified" (alloy's fallback) when the process has neither.
//
// Characters Pyroscope refuses in a service name become '_'. The labels are
// node, namespace, pod and container when known (alloy's Kubernetes
// relabeling names them so), and comm (the process name), with ',', '{'
// and '}', which the syntax cannot escape, made '_'. pid, tid and
// start_time are not among them: each would make a series per process.
// The pprof holds only the series' samples, with one sample type,
// cpu/nanoseconds (count × period, as pyroscope.ebpf sends it); pid and tid
// stay in it as numeric sample labels. It has no string sample labels:
// Pyroscope makes each one a series label (pkg/model/pprofsplit), and
// thread names would split every service.
func NewPyroscope(u *url.URL, client *http.Client) (Sender, error) {
	if u == nil {
		return nil, errors.New("pyroscope target: no URL")
	}
	// Errors show the URL without its password.
	shown := *u
	shown.User = nil
	var scheme string
	switch u.Scheme {
	case "pyroscope":
		scheme = "http"
	case "pyroscopes":
		scheme = "https"
	default:
		return nil, fmt.Errorf("pyroscope target %s: scheme must be pyroscope:// (HTTP) or pyroscopes:// (HTTPS)", shown.String())
	}
	if u.Opaque != "" || u.Hostname() == "" {
		return nil, fmt.Errorf("pyroscope target %s: no host (want %s://host:port)", shown.String(), u.Scheme)
	}
	if u.Fragment != "" {
		return nil, fmt.Errorf("pyroscope target %s: a fragment means nothing here", shown.String())
	}
	query, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return nil, fmt.Errorf("pyroscope target %s: query: %w", shown.String(), err)
	}
	s := &pyroscope{
		name:   shown.String(),
		url:    url.URL{Scheme: scheme, Host: u.Host, Path: path.Join("/", u.Path, "ingest")},
		client: client,
	}
	for k, v := range query {
		if k != "tenant" {
			return nil, fmt.Errorf("pyroscope target %s: unknown parameter %q (only tenant)", shown.String(), k)
		}
		if len(v) != 1 || !pyroscopeTenantOK(v[0]) {
			return nil, fmt.Errorf("pyroscope target %s: tenant must be given once, non-empty, printable ASCII without spaces", shown.String())
		}
		s.tenant = v[0]
	}
	if u.User != nil {
		s.user = u.User.Username()
		s.password, _ = u.User.Password()
		s.auth = true
	}
	if s.client == nil {
		s.client = &http.Client{}
	}
	return s, nil
}

type pyroscope struct {
	name           string  // target URL without userinfo
	url            url.URL // http(s)://host/prefix/ingest
	user, password string
	auth           bool
	tenant         string
	client         *http.Client

	// mu serializes Send. window and pushed remember which series of the
	// window last sent are done (accepted, or refused for good), so a retry
	// of that window pushes only the rest: Pyroscope adds up what it is
	// given, and a series pushed twice would show twice its CPU time.
	mu     sync.Mutex
	window *profile.Profile
	pushed map[string]bool
}

func (s *pyroscope) Name() string { return s.name }

// Send pushes each series of p in turn, all of them even when one fails.
// It returns the first retryable error if any push had one, else the first
// refusal (wrapped by Rejected), noting how many pushes failed.
func (s *pyroscope) Send(ctx context.Context, p *profile.Profile) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.window != p {
		s.window, s.pushed = p, map[string]bool{}
	}
	if p.Period <= 0 {
		s.window, s.pushed = nil, nil
		return Rejected(fmt.Errorf("push to %s: window has no sampling period", s.name))
	}
	series := slices.DeleteFunc(pyroscopeSplit(p), func(ser *pyroscopeSeries) bool { return s.pushed[ser.name] })
	var retry, refused error
	failed := 0
	for i, ser := range series {
		if ctx.Err() != nil {
			// Not tried: counted as failed, pushed on the retry.
			failed += len(series) - i
			if retry == nil {
				retry = fmt.Errorf("push to %s: %w", s.name, ctx.Err())
			}
			break
		}
		err := s.push(ctx, p, ser)
		switch {
		case err == nil:
			s.pushed[ser.name] = true
		case IsRejected(err):
			s.pushed[ser.name] = true
			failed++
			if refused == nil {
				refused = err
			}
		default:
			failed++
			if retry == nil {
				retry = err
			}
		}
	}
	err := retry
	if err == nil {
		// Nothing is left to retry: forget the window.
		s.window, s.pushed = nil, nil
		err = refused
	}
	if err != nil && failed > 1 {
		err = fmt.Errorf("%w; %d of %d pushes failed", err, failed, len(series))
	}
	return err
}

// push sends one series of window p.
func (s *pyroscope) push(ctx context.Context, p *profile.Profile, ser *pyroscopeSeries) error {
	body, contentType, err := pyroscopeBody(p, ser.samples)
	if err != nil {
		return Rejected(fmt.Errorf("push to %s: encode %s: %w", s.name, ser.service, err))
	}
	q := url.Values{}
	q.Set("name", ser.name)
	q.Set("from", strconv.FormatInt(p.Start.Unix(), 10))
	q.Set("until", strconv.FormatInt(p.Start.Add(p.Duration).Unix(), 10))
	q.Set("sampleRate", strconv.FormatInt(max(1, int64(math.Round(1e9/float64(p.Period.Nanoseconds())))), 10))
	q.Set("spyName", "ebpfspy")
	u := s.url
	u.RawQuery = q.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), bytes.NewReader(body))
	if err != nil {
		return Rejected(fmt.Errorf("push to %s: %w", s.name, err))
	}
	req.Header.Set("Content-Type", contentType)
	if s.auth {
		req.SetBasicAuth(s.user, s.password)
	}
	if s.tenant != "" {
		req.Header.Set("X-Scope-OrgID", s.tenant)
	}
	resp, err := s.client.Do(req)
	if err != nil {
		// url.Error repeats the whole request URL; the target is enough.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return fmt.Errorf("push to %s: %w (service %s)", s.name, err, ser.service)
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		// Read what is left so the connection can be reused.
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		return nil
	}
	msg := strings.TrimSpace(fmt.Sprintf("%d %s", resp.StatusCode, http.StatusText(resp.StatusCode)))
	if b := pyroscopeSnippet(resp.Body); b != "" {
		msg += ": " + b
	}
	err = fmt.Errorf("push to %s: %s (service %s)", s.name, msg, ser.service)
	switch {
	// Pyroscope answers 429 when a tenant is over its ingestion limits and
	// 408 when it could not read the request; 5xx is the server's trouble.
	case resp.StatusCode == http.StatusTooManyRequests, resp.StatusCode == http.StatusRequestTimeout,
		resp.StatusCode >= 500:
		return err
	default:
		return Rejected(err)
	}
}

// pyroscopeSnippet returns at most 200 bytes of an answer's body on one line.
func pyroscopeSnippet(r io.Reader) string {
	b, _ := io.ReadAll(io.LimitReader(r, 200))
	return strings.ToValidUTF8(strings.Join(strings.Fields(string(b)), " "), "")
}

// pyroscopeTenantOK reports whether t can be sent as X-Scope-OrgID.
func pyroscopeTenantOK(t string) bool {
	if t == "" {
		return false
	}
	for i := 0; i < len(t); i++ {
		if t[i] <= ' ' || t[i] > '~' {
			return false
		}
	}
	return true
}

// pyroscopeSeries is the samples of one push.
type pyroscopeSeries struct {
	service string
	name    string // the name parameter: service{label=value,...}
	samples []*profile.Sample
}

// pyroscopeLabels are the labels a series carries, as Pyroscope names them
// (as alloy's documented Kubernetes relabeling does) in sorted order.
var pyroscopeLabels = [...]struct{ name, label string }{
	{"comm", profile.LabelComm},
	{"container", profile.LabelContainer},
	{"namespace", profile.LabelNamespace},
	{"node", profile.LabelNode},
	{"pod", profile.LabelPod},
}

// pyroscopeSplit groups p's samples into series, sorted by name.
func pyroscopeSplit(p *profile.Profile) []*pyroscopeSeries {
	byName := map[string]*pyroscopeSeries{}
	var b strings.Builder
	for _, smp := range p.Samples {
		service := pyroscopeServiceName(smp.Labels)
		b.Reset()
		b.WriteString(service)
		b.WriteByte('{')
		first := true
		for _, l := range pyroscopeLabels {
			v := pyroscopeValue(smp.Labels[l.label])
			if v == "" {
				continue
			}
			if !first {
				b.WriteByte(',')
			}
			first = false
			b.WriteString(l.name)
			b.WriteByte('=')
			b.WriteString(v)
		}
		b.WriteByte('}')
		ser := byName[b.String()]
		if ser == nil {
			ser = &pyroscopeSeries{service: service, name: b.String()}
			byName[ser.name] = ser
		}
		ser.samples = append(ser.samples, smp)
	}
	out := make([]*pyroscopeSeries, 0, len(byName))
	for _, ser := range byName {
		out = append(out, ser)
	}
	slices.SortFunc(out, func(a, b *pyroscopeSeries) int { return strings.Compare(a.name, b.name) })
	return out
}

// pyroscopeServiceName names the service a sample belongs to (see
// NewPyroscope). Pyroscope accepts [A-Za-z0-9_./-] in a service name.
func pyroscopeServiceName(labels map[string]string) string {
	var name string
	ns, ctr, exe := labels[profile.LabelNamespace], labels[profile.LabelContainer], labels[profile.LabelExe]
	switch {
	case ns != "" && ctr != "":
		name = "ebpf/" + ns + "/" + ctr
	case exe != "":
		// An executable replaced while running reads "path (deleted)".
		name = path.Base(strings.TrimSuffix(exe, " (deleted)"))
	default:
		name = labels[profile.LabelComm]
	}
	name = strings.Map(func(r rune) rune {
		if r == '_' || r == '.' || r == '/' || r == '-' || 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' {
			return r
		}
		return '_'
	}, name)
	if strings.Trim(name, "./") == "" {
		return "unspecified"
	}
	return name
}

// pyroscopeValue makes v a label value the name syntax can carry: it has
// no quoting, so ',' and '}' would end the value; Pyroscope trims spaces
// and wants valid UTF-8.
func pyroscopeValue(v string) string {
	v = strings.Map(func(r rune) rune {
		switch r {
		case ',', '{', '}':
			return '_'
		}
		return r
	}, strings.ToValidUTF8(v, "_"))
	return strings.TrimSpace(v)
}

// gzipWriters are reused across pushes. The fastest level: compressing
// was half a push's CPU at the default one, for bodies 9% smaller
// (BenchmarkPyroscope).
var gzipWriters = sync.Pool{New: func() any {
	w, _ := gzip.NewWriterLevel(nil, gzip.BestSpeed)
	return w
}}

// pyroscopeBody encodes samples of window p as the multipart form
// Pyroscope's clients send: one file field, profile, holding the gzipped
// pprof. There is no sample_type_config field: Pyroscope knows the cpu
// sample type.
func pyroscopeBody(p *profile.Profile, samples []*profile.Sample) ([]byte, string, error) {
	pp := (&profile.Profile{Start: p.Start, Duration: p.Duration, Period: p.Period, Samples: samples}).Proto()
	cpu := slices.IndexFunc(pp.SampleType, func(t *pprof.ValueType) bool { return t.Type == "cpu" && t.Unit == "nanoseconds" })
	if cpu < 0 {
		return nil, "", errors.New("pprof has no cpu/nanoseconds sample type")
	}
	pp.SampleType = pp.SampleType[cpu : cpu+1]
	pp.DefaultSampleType = "cpu"
	for _, smp := range pp.Sample {
		smp.Value = smp.Value[cpu : cpu+1]
		smp.Label = nil
	}
	var body bytes.Buffer
	w := multipart.NewWriter(&body)
	part, err := w.CreateFormFile("profile", "profile.pprof")
	if err != nil {
		return nil, "", err
	}
	// pp.Write would make a gzip writer, a megabyte of tables, per push.
	zw := gzipWriters.Get().(*gzip.Writer)
	defer gzipWriters.Put(zw)
	zw.Reset(part)
	if err := pp.WriteUncompressed(zw); err != nil {
		return nil, "", err
	}
	if err := zw.Close(); err != nil {
		return nil, "", err
	}
	if err := w.Close(); err != nil {
		return nil, "", err
	}
	return body.Bytes(), w.FormDataContentType(), nil
}
