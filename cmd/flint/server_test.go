package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	pprofile "github.com/google/pprof/profile"

	"github.com/flint-dev/flint/internal/profile"
	"github.com/flint-dev/flint/internal/server"
	"github.com/flint-dev/flint/internal/store"
	"github.com/flint-dev/flint/internal/store/chtest"
	"github.com/flint-dev/flint/internal/symbol"
)

func TestParseServer(t *testing.T) {
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte("tok\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	const dsn = "clickhouse://ch.internal:8123/flint"
	for _, tc := range []struct {
		args, env string // env: $FLINT_STORE
		wantErr   string
		check     func(*ServerConfig) bool
	}{
		{args: "--store " + dsn, check: func(c *ServerConfig) bool {
			return c.Store == dsn && c.Listen.Addr == "127.0.0.1:7070" && c.MaxQueries == 16 && c.QueryTimeout == time.Minute && c.Listen.Token == ""
		}},
		{env: dsn, args: "--listen 0.0.0.0:7070 --token-file " + tokenFile + " --max-queries 64 --query-timeout 2m", check: func(c *ServerConfig) bool {
			return c.Store == dsn && c.Listen.Addr == "0.0.0.0:7070" && c.Listen.Token == "tok" && c.MaxQueries == 64 &&
				c.QueryTimeout == 2*time.Minute && len(c.Warnings) == 1 && strings.Contains(c.Warnings[0], "without TLS")
		}},
		{args: "", wantErr: "--store is required"},
		{args: "--store /var/lib/flint", wantErr: `--store: unknown scheme ""`},
		{args: "--store clickhouse://u:hunter2@x%zz/flint", wantErr: "--store: not a URL"},
		{args: "--store " + dsn + " --listen 0.0.0.0:7070", wantErr: "listen on 0.0.0.0 needs a token"},
		{args: "--store " + dsn + " --listen=", wantErr: "--listen is empty"},
		{args: "--store " + dsn + " --max-queries 0", wantErr: "--max-queries 0: must be between 1 and 1024"},
		{args: "--store " + dsn + " --query-timeout 100ms", wantErr: "--query-timeout 100ms: must be between 1s and 1h"},
		{args: "--store " + dsn + " extra", wantErr: `unexpected argument "extra"`},
	} {
		t.Run(tc.args, func(t *testing.T) {
			t.Setenv("FLINT_STORE", tc.env)
			t.Setenv("FLINT_TOKEN", "")
			c, err := parseServer(strings.Fields(tc.args))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				if strings.Contains(err.Error(), "hunter2") {
					t.Errorf("the error shows the password: %v", err)
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
	if got := store.URLName("clickhouse://u:pw1@ch:8123/flint?password=pw2&user=x"); strings.Contains(got, "pw1") || strings.Contains(got, "pw2") {
		t.Errorf("redacted %q", got)
	}
}

// fleetWindows are the windows two nodes' agents write: on each, api runs
// main.work (with an inlined frame) and main.idle, and n2 also runs
// worker; n1's doctor found a busy poll.
func fleetWindows(start time.Time) ([]*profile.Profile, []store.Finding) {
	exe := &profile.Mapping{File: "/usr/bin/api", Start: 0x400000, Limit: 0x500000, BuildID: "b1d"}
	loc := func(addr uint64, frames ...symbol.Frame) *profile.Location {
		return &profile.Location{Address: addr, Mapping: exe, Frames: frames}
	}
	main := loc(0x401000, symbol.Frame{Function: "main.main", File: "/src/main.go", Line: 10})
	work := []*profile.Location{loc(0x402000, symbol.Frame{Function: "main.sum", File: "/src/sum.go", Line: 3},
		symbol.Frame{Function: "main.work", File: "/src/main.go", Line: 20}), main}
	idle := []*profile.Location{loc(0x403000, symbol.Frame{Function: "main.idle", File: "/src/main.go", Line: 30}), main}
	wloop := []*profile.Location{loc(0x404000, symbol.Frame{Function: "worker.loop", File: "/src/w.go", Line: 5}), main}
	labels := func(node, comm, pid string) map[string]string {
		return map[string]string{profile.LabelNode: node, profile.LabelComm: comm, profile.LabelPID: pid, profile.LabelTID: pid, profile.LabelThread: comm}
	}
	var windows []*profile.Profile
	for i := range 12 {
		for j, node := range []string{"n1", "n2"} {
			w := &profile.Profile{
				Start: start.Add(time.Duration(i) * 10 * time.Second), Duration: 10 * time.Second, Period: 10 * time.Millisecond,
				Samples: []*profile.Sample{
					{Stack: work, Count: int64(20 - i + j), Labels: labels(node, "api", "4242")},
					{Stack: idle, Count: 10, Labels: labels(node, "api", "4242")},
				},
			}
			if node == "n2" {
				w.Samples = append(w.Samples, &profile.Sample{Stack: wloop, Count: 7, Labels: labels(node, "worker", "77")})
			}
			windows = append(windows, w)
		}
	}
	findings := []store.Finding{{
		Start: start.Add(30 * time.Second), Duration: 10 * time.Second, Detector: "busy-poll", Severity: "critical",
		Labels: labels("n1", "api", "4242"),
		Body:   []byte(`{"id":"busy-poll","pid":4242,"comm":"api","severity":"critical","summary":"spins"}`),
	}}
	return windows, findings
}

// TestServerOverClickHouse writes two nodes' windows through the store
// API into ClickHouse, as agents do, and into an agent's SQLite store;
// then runs two flint servers over the ClickHouse database, one of them
// over TLS, and checks that both answer as the agent does, that live
// profiles answer 501, and that the query commands read them with
// --server and --token, https included.
func TestServerOverClickHouse(t *testing.T) {
	if testing.Short() {
		t.Skip("starts ClickHouse and builds flint")
	}
	ch := chtest.Start(t)
	ctx := context.Background()
	dsn := ch.DSN("flint")
	// The server reads as a user that may not write.
	readerDSN := ch.DSN("flint", "user="+chtest.Reader, "password="+chtest.Password)
	start := time.Now().Add(-30 * time.Minute).Truncate(time.Minute)
	windows, findings := fleetWindows(start)

	agentStore, err := store.Open(t.TempDir(), store.DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	defer agentStore.Close()
	writer, err := store.OpenClickHouse(ctx, dsn, store.DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range []store.Store{agentStore, writer} {
		for _, w := range windows {
			if err := st.Write(ctx, w); err != nil {
				t.Fatal(err)
			}
		}
		if err := st.WriteFindings(ctx, findings); err != nil {
			t.Fatal(err)
		}
	}
	writer.Close()

	// The agent's API over its store, as agent.Run serves it but for
	// the live profiler, which needs BPF.
	agentAPI, err := server.Start(server.Endpoint{Addr: "127.0.0.1:0"}, server.Options{Store: agentStore, Token: "tok"})
	if err != nil {
		t.Fatal(err)
	}
	defer agentAPI.Shutdown(ctx)

	certFile, keyFile, caFile := testCertificate(t)
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte("tok\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	plainAddr, tlsAddr := freeAddr(t), freeAddr(t)
	startServer(t, "--store", readerDSN, "--listen", plainAddr, "--token-file", tokenFile)
	startServer(t, "--store", readerDSN, "--listen", tlsAddr, "--token-file", tokenFile, "--tls-cert", certFile, "--tls-key", keyFile)
	ca := x509.NewCertPool()
	caPEM, _ := os.ReadFile(caFile)
	ca.AppendCertsFromPEM(caPEM)
	tlsClient := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca}}}
	servers := []*server.Client{
		{URL: agentAPI.URL(), Token: "tok"},
		{URL: "http://" + plainAddr, Token: "tok"},
		{URL: "https://" + tlsAddr, Token: "tok", HTTP: tlsClient},
	}
	waitHealthy(t, servers[1:])

	rng := url.Values{"from": {start.Format(time.RFC3339)}, "to": {start.Add(2 * time.Minute).Format(time.RFC3339)}}
	with := func(kv ...string) url.Values {
		q := url.Values{}
		for k, v := range rng {
			q[k] = v
		}
		for i := 0; i < len(kv); i += 2 {
			q.Set(kv[i], kv[i+1])
		}
		return q
	}
	for _, tc := range []struct {
		path string
		q    url.Values
		want string // in the agent's answer
	}{
		{"/api/v1/profile", with("format", "json"), `"name":"main.sum"`},
		{"/api/v1/profile", with("format", "folded"), "api;main.main;main.work;main.sum 360\n"},
		{"/api/v1/profile", with("format", "folded", "selector", `{node="n2",comm=~"w.*"}`), "worker;main.main;worker.loop 84\n"},
		{"/api/v1/profile", with("format", "json", "labels", "all"), `"total":`},
		{"/api/v1/series", with("by", "node", "step", "30s"), `"value":"n2","samples":`},
		{"/api/v1/series", with("by", "comm"), `"value":"worker","samples":84`},
		{"/api/v1/labels", rng, `["comm","node","pid","thread","tid"]`},
		{"/api/v1/labels/node/values", rng, `["n1","n2"]`},
		{"/api/v1/findings", rng, `"summary":"spins"`},
		{"/api/v1/findings", with("selector", `{node="n2"}`), `"findings":[]`},
		{"/api/v1/diff", with("from", start.Add(time.Minute).Format(time.RFC3339), "base_from", start.Format(time.RFC3339), "format", "folded"), "api;main.main;main.idle 120 120\n"},
	} {
		t.Run(tc.path+"?"+tc.q.Encode(), func(t *testing.T) {
			want := fetch(t, servers[0], tc.path, tc.q)
			if !strings.Contains(want, tc.want) {
				t.Fatalf("the agent's answer lacks %q:\n%.600s", tc.want, want)
			}
			for _, s := range servers[1:] {
				if got := fetch(t, s, tc.path, tc.q); got != want {
					t.Errorf("flint server at %s:\n%.600s\nthe agent:\n%.600s", s.URL, got, want)
				}
			}
		})
	}

	// pprof tags samples with their node, so -tagfocus tells nodes apart.
	body, err := servers[2].Get(ctx, "/api/v1/profile", with("format", "pprof"))
	if err != nil {
		t.Fatal(err)
	}
	p, err := pprofile.Parse(body)
	body.Close()
	if err != nil {
		t.Fatal(err)
	}
	var nodes []string
	for _, s := range p.Sample {
		if n := s.Label["node"]; len(n) == 1 && !slices.Contains(nodes, n[0]) {
			nodes = append(nodes, n[0])
		}
	}
	slices.Sort(nodes)
	if !slices.Equal(nodes, []string{"n1", "n2"}) {
		t.Errorf("pprof node tags %q", nodes)
	}

	for _, s := range servers[1:] {
		_, err := s.Get(ctx, "/debug/pprof/profile", url.Values{"seconds": {"5"}, "pid": {"4242"}})
		if e, ok := err.(*server.Error); !ok || e.Status != 501 || !strings.Contains(e.Message, "ask the agent on the node, e.g. http://NODE:7070/debug/pprof/profile?pid=4242&seconds=5") {
			t.Errorf("live profile from flint server: %v, want 501", err)
		}
		if _, err := (&server.Client{URL: s.URL, HTTP: s.HTTP}).Get(ctx, "/api/v1/labels", nil); err == nil || !strings.Contains(err.Error(), "401") {
			t.Errorf("no token: %v, want 401", err)
		}
		if got := fetch(t, s, "/", nil); !strings.Contains(got, "<html") && !strings.Contains(got, "<!doctype html") {
			t.Errorf("web UI: %.200s", got)
		}
		if got := fetch(t, s, "/metrics", nil); !strings.Contains(got, `flint_api_requests_total{route="profile",code="200"}`) {
			t.Errorf("metrics:\n%s", got)
		}
	}

	// The query commands, as a user runs them, against both servers.
	flint, _ := build(t)
	cli := func(serverURL string, args ...string) string {
		t.Helper()
		cmd := exec.Command(flint, append(args, "--server", serverURL, "--token", "tok", "--from", rng.Get("from"), "--to", rng.Get("to"))...)
		cmd.Env = append(os.Environ(), "SSL_CERT_FILE="+caFile, "FLINT_TOKEN=", "FLINT_SERVER=")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("flint %s --server %s: %v\n%s", strings.Join(args, " "), serverURL, err, out)
		}
		return string(out)
	}
	for _, args := range [][]string{{"top", "-n", "5"}, {"series", "--by", "node"}, {"findings"}, {"query", "-o", "-"}} {
		want := cli(servers[0].URL, args...)
		for _, s := range servers[1:] {
			if got := cli(s.URL, args...); got != want {
				t.Errorf("flint %s against %s:\n%s\nagainst the agent:\n%s", strings.Join(args, " "), s.URL, got, want)
			}
		}
	}
}

// startServer runs `flint server` in this process until the test ends.
func startServer(t *testing.T, args ...string) {
	t.Helper()
	t.Setenv("FLINT_STORE", "")
	t.Setenv("FLINT_TOKEN", "")
	c, err := parseServer(args)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- serve(ctx, c, openStore, t.Logf) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("flint server: %v", err)
		}
	})
}

// waitHealthy waits until every server answers /healthz.
func waitHealthy(t *testing.T, servers []*server.Client) {
	t.Helper()
	for _, s := range servers {
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			body, err := s.Get(context.Background(), "/healthz", nil)
			if err == nil {
				body.Close()
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("flint server at %s did not come up: %v", s.URL, err)
			}
		}
	}
}

func fetch(t *testing.T, c *server.Client, path string, q url.Values) string {
	t.Helper()
	body, err := c.Get(context.Background(), path, q)
	if err != nil {
		t.Fatalf("GET %s%s: %v", c.URL, path, err)
	}
	defer body.Close()
	b, err := io.ReadAll(body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// testCertificate writes httptest's certificate for 127.0.0.1 and its key
// as PEM files; the certificate is its own CA.
func testCertificate(t *testing.T) (cert, key, ca string) {
	t.Helper()
	ts := httptest.NewTLSServer(http.NotFoundHandler())
	ts.Close()
	c := ts.TLS.Certificates[0]
	keyDER, err := x509.MarshalPKCS8PrivateKey(c.PrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cert, key = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	var certPEM bytes.Buffer
	for _, der := range c.Certificate {
		pem.Encode(&certPEM, &pem.Block{Type: "CERTIFICATE", Bytes: der})
	}
	for path, data := range map[string][]byte{
		cert: certPEM.Bytes(),
		key:  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}),
	} {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(fmt.Errorf("write %s: %w", path, err))
		}
	}
	return cert, key, cert
}
