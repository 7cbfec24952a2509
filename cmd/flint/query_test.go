package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	pprofile "github.com/google/pprof/profile"

	"github.com/flint-dev/flint/internal/doctor"
	"github.com/flint-dev/flint/internal/profile"
	"github.com/flint-dev/flint/internal/server"
	"github.com/flint-dev/flint/internal/store"
	"github.com/flint-dev/flint/internal/symbol"
)

func TestParseQueryCommands(t *testing.T) {
	t.Setenv("FLINT_SERVER", "")
	t.Setenv("FLINT_TOKEN", "")
	for _, tc := range []struct {
		args    string
		env     map[string]string
		wantErr string // substring; "" for success
		check   func(c any) bool
	}{
		{args: "query", check: func(c any) bool {
			q := c.(*QueryConfig)
			return q.Server == defaultServer && q.Output == "flint.svg" && q.Format == profile.FormatSVG && q.From == "" && !q.Diff
		}},
		{args: "query --since 15m -o - --selector {comm=\"api\"}", check: func(c any) bool {
			q := c.(*QueryConfig)
			return q.From == "now-15m" && q.Format == profile.FormatFolded && q.Selector == `{comm="api"}`
		}},
		{args: "query --from 2026-11-22T10:00:00Z --to now -o x.pb.gz", check: func(c any) bool {
			return c.(*QueryConfig).Format == profile.FormatPprof
		}},
		{args: "query --base-from now-1d -o d.json", check: func(c any) bool {
			q := c.(*QueryConfig)
			return q.Diff && q.BaseFrom == "now-1d" && q.Format == profile.FormatJSON
		}},
		{args: "query --normalize", check: func(c any) bool { return c.(*QueryConfig).Diff }},
		{args: "query", check: func(c any) bool { return c.(*QueryConfig).Type == profile.CPU }},
		{args: "query --type off-cpu", check: func(c any) bool { return c.(*QueryConfig).Type == profile.OffCPU }},
		{args: "query --type wall", check: func(c any) bool { return c.(*QueryConfig).Type == profile.Wall }},
		{args: "query -o default.pgo", check: func(c any) bool { return c.(*QueryConfig).Format == profile.FormatPprof }},
		{args: "query --server node:7070/", check: func(c any) bool { return c.(*QueryConfig).Server == "http://node:7070" }},
		{args: "query", env: map[string]string{"FLINT_SERVER": "https://n:1", "FLINT_TOKEN": "t"}, check: func(c any) bool {
			q := c.(*QueryConfig)
			return q.Server == "https://n:1" && q.Token == "t"
		}},
		{args: "query --token u", env: map[string]string{"FLINT_TOKEN": "t"}, check: func(c any) bool { return c.(*QueryConfig).Token == "u" }},
		{args: "top", check: func(c any) bool { q := c.(*TopConfig); return q.N == 20 && !q.Cum }},
		{args: "top -n 0 --cum --since 1d", check: func(c any) bool { q := c.(*TopConfig); return q.N == 0 && q.Cum && q.From == "now-1d" }},
		{args: "top --type wall", check: func(c any) bool { return c.(*TopConfig).values().Get("type") == "wall" }},
		{args: "series --type off-cpu", check: func(c any) bool { return c.(*SeriesConfig).values().Get("type") == "off-cpu" }},
		{args: "series", check: func(c any) bool { return !c.(*SeriesConfig).values().Has("type") }},
		{args: "series", check: func(c any) bool { q := c.(*SeriesConfig); return q.By == "comm" && q.Step == 0 && q.Limit == 10 }},
		{args: "series --by pid --step 30 --json", check: func(c any) bool {
			q := c.(*SeriesConfig)
			return q.By == "pid" && q.Step == 30*time.Second && q.JSON
		}},

		{args: "query --since 15m --from now", wantErr: "--since and --from exclude each other"},
		{args: "query --since soon", wantErr: `--since: bad duration "soon"`},
		{args: "query --from yesterday", wantErr: `--from: bad time "yesterday"`},
		{args: "query --to later", wantErr: `--to: bad time "later"`},
		{args: "query --base-to later", wantErr: `--base-to: bad time "later"`},
		{args: "query --selector {comm", wantErr: "--selector: bad selector"},
		{args: "query --base-selector {", wantErr: "--base-selector: bad selector"},
		{args: "query --server ftp://x", wantErr: `--server "ftp://x": want a URL`},
		{args: "query -o out.weird", wantErr: "cannot tell the format"},
		{args: "query --format xml", wantErr: "unknown format"},
		{args: "query --type block", wantErr: `profile type "block": want cpu, off-cpu or wall`},
		{args: "query stray", wantErr: `unexpected argument "stray"`},
		{args: "top -n -1", wantErr: "-n -1: want a number of functions"},
		{args: "series --step 500ms", wantErr: "--step 500ms: the smallest step is 1s"},
		{args: "series --limit 0", wantErr: "--limit 0: want 1 to 1000 series"},
		{args: "series --by=", wantErr: "--by: want a label name"},
	} {
		t.Run(tc.args, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			args := strings.Fields(tc.args)
			var c any
			var err error
			switch args[0] {
			case "query":
				c, err = parseQuery(args[1:])
			case "top":
				c, err = parseTop(args[1:])
			case "series":
				c, err = parseSeries(args[1:])
			}
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tc.wantErr)
				}
				var u usageError
				if !errors.As(err, &u) {
					t.Errorf("err %v is not a usage error (exit status 2)", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !tc.check(c) {
				t.Errorf("config %+v", c)
			}
		})
	}
}

// testAgent serves the real API over a fake store holding the last few
// minutes: api runs main.work (20 samples per 10 s window, then 5) and
// main.idle (10), worker runs worker.loop (10).
func testAgent(t *testing.T, token string) (url string, st *memStore) {
	t.Helper()
	st = &memStore{}
	exe := &profile.Mapping{File: "/usr/bin/api", Start: 0x400000, Limit: 0x500000}
	loc := func(addr uint64, fn string) *profile.Location {
		return &profile.Location{Address: addr, Mapping: exe, Frames: []symbol.Frame{{Function: fn}}}
	}
	main := loc(0x401000, "main.main")
	work := []*profile.Location{loc(0x402000, "main.work"), main}
	idle := []*profile.Location{loc(0x403000, "main.idle"), main}
	wloop := []*profile.Location{loc(0x404000, "worker.loop"), main}
	api := map[string]string{profile.LabelComm: "api", profile.LabelPID: "4242"}
	worker := map[string]string{profile.LabelComm: "worker", profile.LabelPID: "77"}
	start := time.Now().Add(-5 * time.Minute).Truncate(10 * time.Second)
	for i := range 12 {
		n := int64(20)
		if i >= 6 {
			n = 5
		}
		st.windows = append(st.windows, &profile.Profile{
			Start: start.Add(time.Duration(i) * 10 * time.Second), Duration: 10 * time.Second, Period: 10 * time.Millisecond,
			Samples: []*profile.Sample{
				{Stack: work, Count: n, Labels: api},
				{Stack: idle, Count: 10, Labels: api},
				{Stack: wloop, Count: 10, Labels: worker},
			},
		})
	}
	// Off-CPU time in the first window, which CPU queries must not see.
	st.windows = append(st.windows, &profile.Profile{Start: start, Duration: 10 * time.Second, Kind: profile.OffCPU, Period: time.Nanosecond,
		Samples: []*profile.Sample{{Stack: idle, Count: 3e9, Labels: api}}})
	srv := httptest.NewServer(server.New(server.Options{Store: st, Token: token}))
	t.Cleanup(srv.Close)
	return srv.URL, st
}

// memStore is the smallest store.Store the commands need.
type memStore struct {
	windows  []*profile.Profile
	findings []store.Finding
	tooLarge bool
}

func (m *memStore) each(q store.Query, fn func(w *profile.Profile, s *profile.Sample)) {
	for _, w := range m.windows {
		if w.Kind == q.Type && !w.Start.Before(q.From) && w.Start.Before(q.To) {
			for _, s := range w.Samples {
				if q.Selector.Matches(s.Labels) {
					fn(w, s)
				}
			}
		}
	}
}

func (m *memStore) Profile(_ context.Context, q store.Query) (*profile.Profile, error) {
	if m.tooLarge {
		return nil, fmt.Errorf("query profile: %w: profile has more than 1 distinct samples", store.ErrTooLarge)
	}
	p := &profile.Profile{Start: q.From, Duration: q.To.Sub(q.From), Kind: q.Type, Period: 10 * time.Millisecond}
	if q.Type != profile.CPU {
		p.Period = time.Nanosecond
	}
	m.each(q, func(_ *profile.Profile, s *profile.Sample) {
		labels := map[string]string{}
		for k, v := range s.Labels {
			if q.KeepLabels == nil || slices.Contains(q.KeepLabels, k) {
				labels[k] = v
			}
		}
		p.Samples = append(p.Samples, &profile.Sample{Stack: s.Stack, Count: s.Count, Labels: labels})
	})
	return p, nil
}

func (m *memStore) Series(_ context.Context, q store.SeriesQuery) (store.SeriesSet, error) {
	index := map[string]int{}
	var out store.SeriesSet
	m.each(q.Query, func(w *profile.Profile, s *profile.Sample) {
		out.Period = w.Period
		v := s.Labels[q.By]
		i, ok := index[v]
		if !ok {
			i = len(out.Series)
			index[v] = i
			out.Series = append(out.Series, store.Series{Value: v})
		}
		out.Series[i].Points = append(out.Series[i].Points, store.Point{Time: w.Start, Samples: s.Count})
	})
	return out, nil
}

func (m *memStore) LabelNames(context.Context, time.Time, time.Time) ([]string, error) {
	return []string{"comm", "pid"}, nil
}

func (m *memStore) LabelValues(context.Context, string, time.Time, time.Time) ([]string, error) {
	return nil, nil
}

func (m *memStore) Findings(_ context.Context, q store.Query) ([]store.Finding, error) {
	var out []store.Finding
	for _, f := range m.findings {
		if !f.Start.Before(q.From) && f.Start.Before(q.To) && q.Selector.Matches(f.Labels) {
			out = append(out, f)
		}
	}
	return out, nil
}

func (m *memStore) WriteFindings(_ context.Context, fs []store.Finding) error {
	m.findings = append(m.findings, fs...)
	return nil
}

func (m *memStore) Write(context.Context, *profile.Profile) error { return nil }
func (m *memStore) Close() error                                  { return nil }

// runCmd runs one query command as main would, returning its output.
func runCmd(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	var out, errOut bytes.Buffer
	switch args[0] {
	case "query":
		err = query(args[1:], &out, &errOut)
	case "top":
		err = top(args[1:], &out)
	case "series":
		err = series(args[1:], &out)
	case "findings":
		err = findings(args[1:], &out)
	default:
		t.Fatalf("no command %q", args[0])
	}
	return out.String(), errOut.String(), err
}

func TestQuery(t *testing.T) {
	url, _ := testAgent(t, "tok")
	t.Setenv("FLINT_SERVER", url)
	t.Setenv("FLINT_TOKEN", "tok")
	dir := t.TempDir()

	svg := filepath.Join(dir, "cpu.svg")
	_, stderr, err := runCmd(t, "query", "--since", "15m", "-o", svg)
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(svg)
	if err != nil || !bytes.HasPrefix(data, []byte("<?xml")) || !bytes.Contains(data, []byte("main.work")) {
		t.Fatalf("svg %.100q, %v", data, err)
	}
	if want := fmt.Sprintf("flint: profile written to %s (svg, %d bytes)\n", svg, len(data)); stderr != want {
		t.Errorf("stderr %q, want %q", stderr, want)
	}

	pb := filepath.Join(dir, "cpu.pb.gz")
	if _, _, err := runCmd(t, "query", "-o", pb, "--selector", `{comm="api"}`); err != nil {
		t.Fatal(err)
	}
	f, _ := os.Open(pb)
	p, err := pprofile.Parse(f)
	f.Close()
	if err != nil || len(p.Sample) != 24 {
		t.Fatalf("pprof: %v, %d samples (want 2 stacks × 12 windows)", err, len(p.Sample))
	}

	stdout, stderr, err := runCmd(t, "query", "-o", "-")
	if err != nil {
		t.Fatal(err)
	}
	want := "api;main.main;main.idle 120\napi;main.main;main.work 150\nworker;main.main;worker.loop 120\n"
	if stdout != want || stderr != "" {
		t.Errorf("folded to stdout %q (stderr %q), want %q", stdout, stderr, want)
	}

	stdout, _, err = runCmd(t, "query", "--type", "off-cpu", "-o", "-")
	if want := "api;main.main;main.idle 3000000000\n"; err != nil || stdout != want {
		t.Errorf("off-CPU folded %q, %v; want %q", stdout, err, want)
	}

	// The base is the hour before: empty here, so base counts are 0.
	stdout, _, err = runCmd(t, "query", "--diff", "-o", "-")
	if err != nil {
		t.Fatal(err)
	}
	want = "api;main.main;main.idle 0 120\napi;main.main;main.work 0 150\nworker;main.main;worker.loop 0 120\n"
	if stdout != want {
		t.Errorf("diff %q, want %q", stdout, want)
	}

	entries, _ := os.ReadDir(dir)
	if len(entries) != 2 {
		t.Errorf("output directory holds %d files, want 2 (no temporary files left)", len(entries))
	}
}

func TestTop(t *testing.T) {
	url, _ := testAgent(t, "")
	t.Setenv("FLINT_SERVER", url)
	row := regexp.MustCompile(`^ {0,9}[\d.]+(?:[num]?s)? [ \d.]{5}% [ \d.]{5}% {1,10}[\d.]+(?:[num]?s)? [ \d.]{5}%  \S+$`)
	for _, tc := range []struct {
		args     []string
		wantHead string
		first    string
	}{
		{[]string{"top"}, "Showing 4 of 4 functions, 390 of 390 samples (100%)", "150 38.46% 38.46% 150 38.46% main.work"},
		{[]string{"top", "-n", "1", "--cum"}, "Showing 1 of 4 functions, 0 of 390 samples (0%)", "0 0% 0% 390 100% main.main"},
		{[]string{"top", "--selector", `{comm="worker"}`, "-n", "2"}, "Showing 2 of 2 functions, 120 of 120 samples (100%)", "120 100% 100% 120 100% worker.loop"},
		{[]string{"top", "--type", "off-cpu"}, "Showing 2 of 2 functions, 3.00s of 3.00s (100%)", "3.00s 100% 100% 3.00s 100% main.idle"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			stdout, _, err := runCmd(t, tc.args...)
			if err != nil {
				t.Fatal(err)
			}
			lines := strings.Split(strings.TrimSuffix(stdout, "\n"), "\n")
			if len(lines) < 3 || lines[0] != tc.wantHead {
				t.Fatalf("output:\n%s\nwant first line %q", stdout, tc.wantHead)
			}
			if got := strings.Join(strings.Fields(lines[1]), " "); got != "flat flat% sum% cum cum%" {
				t.Errorf("column header %q", lines[1])
			}
			for _, l := range lines[2:] {
				if !row.MatchString(l) {
					t.Errorf("row %q is not shaped like go tool pprof -top's", l)
				}
			}
			if got := strings.Join(strings.Fields(lines[2]), " "); got != tc.first {
				t.Errorf("first row %q, want %q", got, tc.first)
			}
		})
	}
}

func TestSeries(t *testing.T) {
	url, _ := testAgent(t, "")
	t.Setenv("FLINT_SERVER", url)
	stdout, _, err := runCmd(t, "series", "--since", "10m", "--step", "10s")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(stdout, "\n"), "\n")
	if lines[0] != "%CPU by comm, step 10s" || strings.Join(strings.Fields(lines[1]), " ") != "time api worker" {
		t.Fatalf("table head:\n%s", stdout)
	}
	if len(lines) < 60 || len(lines) > 63 {
		t.Errorf("%d rows for 10 minutes of 10 s steps", len(lines)-2)
	}
	// Times carry their date when the range spans midnight.
	row := regexp.MustCompile(`^(?:\d{4}-\d\d-\d\d )?\d\d:\d\d:\d\d +(\d+\.\d) +(\d+\.\d)$`)
	var busy []string
	for _, l := range lines[2:] {
		m := row.FindStringSubmatch(l)
		if m == nil {
			t.Errorf("row %q", l)
			continue
		}
		if m[1] != "0.0" {
			busy = append(busy, m[1]+"/"+m[2])
		}
	}
	if want := "3.0/1.0 3.0/1.0 3.0/1.0 3.0/1.0 3.0/1.0 3.0/1.0 1.5/1.0 1.5/1.0 1.5/1.0 1.5/1.0 1.5/1.0 1.5/1.0"; strings.Join(busy, " ") != want {
		t.Errorf("rates %v, want %s", busy, want)
	}

	stdout, _, err = runCmd(t, "series", "--json", "--by", "pid", "--limit", "1")
	if err != nil {
		t.Fatal(err)
	}
	var resp server.SeriesResponse
	if err := json.Unmarshal([]byte(stdout), &resp); err != nil {
		t.Fatal(err)
	}
	if len(resp.Series) != 2 || resp.Series[0].Value != "4242" || !resp.Series[1].Other || resp.By != "pid" || resp.Period != 0.01 {
		t.Errorf("series %+v", resp)
	}

	// The off-CPU window: api waited 3 s in 10.
	stdout, _, err = runCmd(t, "series", "--type", "off-cpu", "--since", "10m", "--step", "10s")
	if err != nil {
		t.Fatal(err)
	}
	lines = strings.Split(strings.TrimSuffix(stdout, "\n"), "\n")
	if lines[0] != "threads off the CPU by comm, step 10s" || strings.Join(strings.Fields(lines[1]), " ") != "time api" || !strings.Contains(stdout, " 0.30\n") {
		t.Errorf("off-CPU table:\n%s", stdout)
	}
}

// TestFmtNs: times in nanoseconds, as flint trace and flint top print
// them, with three significant digits.
func TestFmtNs(t *testing.T) {
	for ns, want := range map[float64]string{0: "0ns", 850: "850ns", 12_345: "12.3us", 1_500_000: "1.50ms", 4_560_000_000: "4.56s", 3600e9: "3600s"} {
		if got := fmtNs(ns); got != want {
			t.Errorf("fmtNs(%g) = %q, want %q", ns, got, want)
		}
	}
}

// TestSeriesTableUnits: a CPU rate reads as %CPU by the period a sample
// stands for, and as samples per second when the response does not say;
// time a second reads as threads.
func TestSeriesTableUnits(t *testing.T) {
	for _, tc := range []struct {
		t          profile.Kind
		period     float64
		rate       float64
		head, want string
	}{
		{profile.CPU, 1.0 / 99, 99, "%CPU by comm", "100.0"},
		{profile.CPU, 1.0 / 19, 99, "%CPU by comm", "521.1"},
		{profile.CPU, 0, 99, "samples/s by comm", "99.0"},
		{profile.OffCPU, 1e-9, 2.5e9, "threads off the CPU by comm", "2.50"},
		{profile.Wall, 1e-9, 1.25e9, "threads on or off the CPU by comm", "1.25"},
	} {
		resp := server.SeriesResponse{Step: 10, By: "comm", Period: tc.period, Series: []server.Series{{Value: "api", Points: [][2]float64{{1e9, tc.rate}}}}}
		var b strings.Builder
		if err := writeSeriesTable(&b, &resp, tc.t); err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(b.String(), "\n")
		if !strings.HasPrefix(lines[0], tc.head+", step 10s") || len(lines) < 3 || !strings.HasSuffix(lines[2], " "+tc.want) {
			t.Errorf("%s, period %g: got\n%s\nwant %q and %s", tc.t, tc.period, b.String(), tc.head, tc.want)
		}
	}
}

// TestFindings stores a busy-poll finding in three windows and a warning in
// one, and checks that flint findings prints each problem once, worst first,
// with when it was seen.
func TestFindings(t *testing.T) {
	url, st := testAgent(t, "")
	t.Setenv("FLINT_SERVER", url)
	start := time.Now().Add(-5 * time.Minute).Truncate(10 * time.Second)
	api := map[string]string{profile.LabelComm: "api", profile.LabelPID: "4242", profile.LabelStartTime: "100"}
	worker := map[string]string{profile.LabelComm: "worker", profile.LabelPID: "77", profile.LabelStartTime: "200"}
	add := func(i int, labels map[string]string, body string) {
		var f doctor.Finding
		if err := json.Unmarshal([]byte(body), &f); err != nil {
			t.Fatal(err)
		}
		st.WriteFindings(context.Background(), []store.Finding{{
			Start: start.Add(time.Duration(i) * time.Minute), Duration: 10 * time.Second,
			Detector: f.ID, Severity: string(f.Severity), Labels: labels, Body: []byte(body),
		}})
	}
	add(0, worker, `{"id":"hot-debug-output","pid":77,"comm":"worker","severity":"warning","summary":"prints","evidence":[{"name":"x","text":"writes 5,000/s"}],"fix":"drop the print"}`)
	for i := range 3 {
		add(i, api, fmt.Sprintf(`{"id":"busy-poll","pid":4242,"comm":"api","tid":4243,"thread":"loop","severity":"critical","summary":"spins %d","evidence":[{"name":"y","text":"400,000 empty calls/s"}],"fix":"block"}`, i))
	}
	stdout, _, err := runCmd(t, "findings", "--since", "10m")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{": 2 findings", "1. [critical] busy-poll: pid 4242 (api) thread 4243 (loop)", "seen in 3 examined window(s)",
		"spins 2", "400,000 empty calls/s", "fix: block", "2. [warning] hot-debug-output: pid 77 (worker)", "seen in 1 examined window(s)"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, stdout)
		}
	}
	stdout, _, err = runCmd(t, "findings", "--json", "--selector", `{comm="worker"}`)
	if err != nil {
		t.Fatal(err)
	}
	var resp struct{ Findings []storedFinding }
	if err := json.Unmarshal([]byte(stdout), &resp); err != nil {
		t.Fatal(err)
	}
	if len(resp.Findings) != 1 || resp.Findings[0].ID != "hot-debug-output" || resp.Findings[0].Labels["pid"] != "77" {
		t.Errorf("findings of worker: %+v", resp.Findings)
	}
}

// TestQueryErrors checks the one line main prints (after "flint: ").
func TestQueryErrors(t *testing.T) {
	url, st := testAgent(t, "tok")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + ln.Addr().String()
	ln.Close()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"query", "--token", "tok", "--server", closed, "-o", "-"}, "no agent at " + closed + " (start one with 'sudo flint agent')"},
		{[]string{"top", "--server", url}, "top: 401: missing or wrong token (send Authorization: Bearer TOKEN)"},
		{[]string{"series", "--server", url, "--token", "tok", "--by", "a.b"}, `series: 400: by: "a.b" is not a label name`},
		{[]string{"query", "--server", url, "--token", "tok", "--from", "now", "--to", "now-1h", "-o", "-"}, "query: 400: from: "},
		{[]string{"query", "--server", url + "/nope", "--token", "tok", "-o", "-"}, "query: 404: no such path /nope/api/v1/profile"},
		{[]string{"query", "--server", "http://no-such-host.invalid:7070", "-o", "-"}, "query: dial tcp: lookup no-such-host.invalid"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			_, _, err := runCmd(t, tc.args...)
			if err == nil || !strings.HasPrefix(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("err = %v, want one line starting %q", err, tc.want)
			}
		})
	}

	st.tooLarge = true
	dest := filepath.Join(t.TempDir(), "cpu.svg")
	_, _, err = runCmd(t, "query", "--server", url, "--token", "tok", "-o", dest)
	if want := "query: 422: query profile: query too large: profile has more than 1 distinct samples"; err == nil || err.Error() != want {
		t.Errorf("err = %v, want %q", err, want)
	}
	if entries, _ := os.ReadDir(filepath.Dir(dest)); len(entries) != 0 {
		t.Errorf("a failed query left %d files", len(entries))
	}
}
