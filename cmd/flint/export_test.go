package main

import (
	"context"
	"debug/elf"
	"encoding/hex"
	"fmt"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pprofile"
	"go.opentelemetry.io/collector/pdata/pprofile/pprofileotlp"
	"google.golang.org/grpc"
)

// otlpCollector is an OTLP profiles receiver built on the OpenTelemetry
// collector's own types; it keeps every request.
type otlpCollector struct {
	pprofileotlp.UnimplementedGRPCServer
	mu  sync.Mutex
	got []pprofile.Profiles
}

func (c *otlpCollector) Export(_ context.Context, req pprofileotlp.ExportRequest) (pprofileotlp.ExportResponse, error) {
	p := pprofile.NewProfiles()
	req.Profiles().CopyTo(p)
	c.mu.Lock()
	c.got = append(c.got, p)
	c.mu.Unlock()
	return pprofileotlp.NewExportResponse(), nil
}

func startOTLPCollector(t *testing.T) (*otlpCollector, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := &otlpCollector{}
	s := grpc.NewServer()
	pprofileotlp.RegisterGRPCServer(s, c)
	go s.Serve(ln)
	t.Cleanup(s.Stop)
	return c, ln.Addr().String()
}

// processSamples is what the collector holds of one process (by its
// process.executable.name): samples by the fixture function on the stack,
// resource attributes seen, and the build IDs of its mappings.
type processSamples struct {
	total     int64
	byFunc    map[string]int64
	resources []map[string]any
	buildIDs  map[string]string // mapping file → build ID
}

func (c *otlpCollector) process(name string, funcs []string) processSamples {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := processSamples{byFunc: map[string]int64{}, buildIDs: map[string]string{}}
	for _, p := range c.got {
		d := p.Dictionary()
		str := func(i int32) string { return d.StringTable().At(int(i)) }
		for i := 0; i < p.ResourceProfiles().Len(); i++ {
			rp := p.ResourceProfiles().At(i)
			res := rp.Resource().Attributes().AsRaw()
			if res["process.executable.name"] != name {
				continue
			}
			out.resources = append(out.resources, res)
			for j := 0; j < rp.ScopeProfiles().Len(); j++ {
				for k := 0; k < rp.ScopeProfiles().At(j).Profiles().Len(); k++ {
					prof := rp.ScopeProfiles().At(j).Profiles().At(k)
					for s := 0; s < prof.Samples().Len(); s++ {
						sample := prof.Samples().At(s)
						n := sample.Values().At(0)
						out.total += n
						seen := map[string]bool{}
						for _, li := range d.StackTable().At(int(sample.StackIndex())).LocationIndices().AsRaw() {
							loc := d.LocationTable().At(int(li))
							m := d.MappingTable().At(int(loc.MappingIndex()))
							for _, ai := range m.AttributeIndices().AsRaw() {
								if kv := d.AttributeTable().At(int(ai)); str(kv.KeyStrindex()) == "process.executable.build_id.gnu" {
									out.buildIDs[str(m.FilenameStrindex())] = kv.Value().Str()
								}
							}
							for l := 0; l < loc.Lines().Len(); l++ {
								fn := str(d.FunctionTable().At(int(loc.Lines().At(l).FunctionIndex())).NameStrindex())
								if slices.Contains(funcs, fn) && !seen[fn] {
									out.byFunc[fn] += n
									seen[fn] = true
								}
							}
						}
					}
				}
			}
		}
	}
	return out
}

// gnuBuildID reads a binary's GNU build ID, hex.
func gnuBuildID(t *testing.T, path string) string {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	note := f.Section(".note.gnu.build-id")
	if note == nil {
		t.Fatalf("%s has no build ID note", path)
	}
	b, err := note.Data()
	if err != nil || len(b) < 16 {
		t.Fatalf("build ID note of %s: %v", path, err)
	}
	return hex.EncodeToString(b[16:]) // after namesz, descsz, type and "GNU\0"
}

// TestAgentExportsOTLP runs the agent beside the spin fixture, exporting to
// a collector, to Pyroscope and to an address nobody listens on: the
// collector gets the fixture's split with its process's attributes and
// build ID, Pyroscope the fixture's service, the dead target is one log
// line and counts, and none holds up the local store.
func TestAgentExportsOTLP(t *testing.T) {
	requireRoot(t)
	flint, spin := build(t)
	fixture := filepath.Join(t.TempDir(), "spin_otlp")
	copyFile(t, spin, fixture)
	pid := startSpin(t, fixture)
	c, addr := startOTLPCollector(t)
	dead := freeAddr(t)
	// A Pyroscope stand-in: the pushes of the fixture's service
	// (pyroscope_test.go in internal/export checks their contents).
	var pushes atomic.Int64
	pyro := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/ingest" && strings.HasPrefix(r.URL.Query().Get("name"), "spin_otlp{") {
			pushes.Add(1)
		}
	}))
	defer pyro.Close()
	a := startAgent(t, flint, t.TempDir(), "--window", "2s", "--frequency", "199", "--node", "n1",
		"--export", "otlp://"+addr, "--export", "otlp://"+dead, "--export", "pyroscope://"+strings.TrimPrefix(pyro.URL, "http://"))

	funcs := []string{"func_a", "func_b", "func_c"}
	// 2 s of the fixture's CPU at 199 Hz (its split within 3 points), in
	// two windows or more: the dead target held up none of them.
	sentMetric := fmt.Sprintf("flint_export_windows_sent_total{target=%q}", "otlp://"+addr)
	waitFor(t, a, 2*time.Minute, "the collector to hold two windows and the fixture's samples", func() bool {
		return c.process("spin_otlp", funcs).total >= 400 && a.metric(t, sentMetric) >= 2
	})
	if n := a.metric(t, fmt.Sprintf("flint_export_send_failures_total{target=%q}", "otlp://"+dead)); n < 1 {
		t.Errorf("no failures counted for the dead target")
	}
	if n := a.metric(t, "flint_windows_written_total"); n < 2 {
		t.Errorf("%v windows in the local store, want 2 or more", n)
	}
	log := stopAgent(t, a)
	if pushes.Load() < 2 {
		t.Errorf("%d pushes of the fixture's service to Pyroscope, want 2 or more", pushes.Load())
	}

	got := c.process("spin_otlp", funcs)
	for i, want := range []float64{50, 30, 20} {
		share := 100 * float64(got.byFunc[funcs[i]]) / float64(got.total)
		t.Logf("%s: %.1f%% of %d samples", funcs[i], share, got.total)
		if math.Abs(share-want) > 3 {
			t.Errorf("%s: %.1f%% of the exported samples, want %.0f%% within 3 points", funcs[i], share, want)
		}
	}
	for _, res := range got.resources {
		if res["process.pid"] != int64(pid) || res["process.executable.path"] != fixture || res["host.name"] != "n1" || res["flint.start_time"] == nil {
			t.Errorf("resource %v: want process.pid %d, process.executable.path %s, host.name n1, flint.start_time", res, pid, fixture)
			break
		}
	}
	if id, want := got.buildIDs[fixture], gnuBuildID(t, fixture); id != want {
		t.Errorf("the fixture's mapping has build ID %q, want %q (all: %v)", id, want, got.buildIDs)
	}
	lines := regexp.MustCompile(`(?m)^.*`+regexp.QuoteMeta(dead)+`.*$`).FindAllString(log, -1)
	if len(lines) != 2 || !strings.Contains(lines[0], "(retrying") || !strings.Contains(lines[1], "not sent at stop") {
		t.Errorf("the log has %d lines on the dead target, want 2 (it is down; windows not sent at stop):\n%s", len(lines), log)
	}
}

// TestAgentReceivesOTLP runs agent b with --receive otlp and agent a
// exporting to it over gRPC and over HTTP on b's API: b holds each of a's
// samples twice, and a's view of the fixture has its split.
func TestAgentReceivesOTLP(t *testing.T) {
	requireRoot(t)
	flint, spin := build(t)
	fixture := filepath.Join(t.TempDir(), "spin_rcv")
	copyFile(t, spin, fixture)
	startSpin(t, fixture)
	from := time.Now()
	grpcAddr := freeAddr(t)
	b := startAgent(t, flint, t.TempDir(), "--window", "2s", "--frequency", "99", "--node", "b",
		"--receive", "otlp", "--receive-listen", grpcAddr)
	a := startAgent(t, flint, t.TempDir(), "--window", "2s", "--frequency", "199", "--node", "a",
		"--export", "otlp://"+grpcAddr, "--export", "otlphttp://"+b.addr)
	waitFor(t, a, 2*time.Minute, "windows sent both ways", func() bool {
		return a.metric(t, fmt.Sprintf("flint_export_windows_sent_total{target=%q}", "otlp://"+grpcAddr)) >= 3 &&
			a.metric(t, fmt.Sprintf("flint_export_windows_sent_total{target=%q}", "otlphttp://"+b.addr)) >= 3
	})
	aLog := stopAgent(t, a)
	m := regexp.MustCompile(`(\d+) samples in all`).FindStringSubmatch(aLog)
	if m == nil {
		t.Fatalf("agent a did not say what it wrote:\n%s", aLog)
	}
	written, _ := strconv.ParseInt(m[1], 10, 64)

	q := url.Values{"from": {strconv.FormatInt(from.Unix()-1, 10)}, "to": {"now"}}
	byNode := seriesByNode(t, string(b.get(t, "/api/v1/series", withParams(q, "by", "node", "step", "10s"))))
	if byNode["a"] != 2*written {
		t.Errorf("agent b holds %d samples of node a, want twice the %d agent a wrote (over gRPC and HTTP); by node: %v", byNode["a"], written, byNode)
	}
	checkPprofSplit(t, b.get(t, "/api/v1/profile", withParams(q, "format", "pprof", "selector", `{node="a",comm="spin_rcv"}`)),
		[]string{"func_a", "func_b", "func_c"}, []float64{50, 30, 20})
	stopAgent(t, b)
}

// withParams copies q and sets the pairs in kv.
func withParams(q url.Values, kv ...string) url.Values {
	out := url.Values{}
	for k, v := range q {
		out[k] = v
	}
	for i := 0; i < len(kv); i += 2 {
		out[kv[i]] = []string{kv[i+1]}
	}
	return out
}
