package kube

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"maps"
	"math/big"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// IDs of testdata/pods.json, a node's pod list as the kubelet serves it.
const (
	webUID      = "1c4e5a62-8f0b-4e3a-9d27-5b6c1f0e2a91"
	webID       = "7ace710e382d0d8222aa68c7e70cce1b545cbe5cbad0f28824f0b7bd19558005"
	envoyID     = "537863c3e0fa620f592c7be85e0278359096f22444cb99c626f1d9ac6276dde4"
	migrateID   = "8c7eb62e8cffbcf02d03e7596a015d583f69ee383e0ab76069f7c6ad042fc3e2"
	proxyUID    = "7f3b2a19-5c6d-4e8f-a0b1-c2d3e4f5a6b7"
	proxyID     = "0689ec0c63ff9809063e4d451c163ffdc1444aa5bc0a8d714b91a956f2558486"
	etcdID      = "cf32917a50a26dfc726b6784746b0c79e9ebbb6eece71635bb7d720e0bcea001"
	workerUID   = "9a8b7c6d-5e4f-4a3b-8c2d-1e0f9a8b7c6d"
	sandboxID   = "0000000000000000000000000000000000000000000000000000000000000abc"
	unknownUID  = "00000000-0000-4000-8000-000000000000"
	secretToken = "eyJhbGciOiJSUzI1NiJ9.test-token"
)

func podsJSON(t testing.TB) []byte {
	b, err := os.ReadFile("testdata/pods.json")
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestParsePods(t *testing.T) {
	pods, err := ParsePods(podsJSON(t))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, p := range pods {
		got[p.UID] = p.Namespace + "/" + p.Name
		for _, c := range p.Containers {
			got[c.ID] = p.Name + "/" + c.Name
		}
	}
	want := map[string]string{
		webUID:                             "shop/web-7d9c6b5f4-x2kqp",
		webID:                              "web-7d9c6b5f4-x2kqp/web",
		envoyID:                            "web-7d9c6b5f4-x2kqp/envoy",
		migrateID:                          "web-7d9c6b5f4-x2kqp/migrate",
		proxyUID:                           "kube-system/kube-proxy-8zq4m",
		proxyID:                            "kube-proxy-8zq4m/kube-proxy",
		"5f1a3c9e8b7d6f4a2c0e1b3d5f7a9c8e": "kube-system/etcd-node-a",
		etcdID:                             "etcd-node-a/etcd",
		workerUID:                          "shop/worker-0", // pending: no container yet
	}
	if !maps.Equal(got, want) {
		t.Errorf("parsed\n%v\nwant\n%v", got, want)
	}
}

func TestParsePodsErrors(t *testing.T) {
	for _, body := range []string{``, `[]`, `{"kind":"Pod"}`, `{"kind":"PodList","items":{}}`, `{"kind":"PodList","items":[{"metadata":"x"}]}`} {
		if _, err := ParsePods([]byte(body)); err == nil {
			t.Errorf("ParsePods(%q) = nil error", body)
		}
	}
	pods, err := ParsePods([]byte(`{"kind":"PodList","items":[{"metadata":{"name":"a"}},{"metadata":{"uid":"u","name":"b"},"status":{"containerStatuses":[{"name":"c","containerID":"3f2a"},{"name":"","containerID":"docker://ab"},{"name":"d","containerID":"cri-o://AB"}]}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if len(pods) != 1 || fmt.Sprint(pods[0].Containers) != "[{ab d}]" {
		t.Errorf("pods without a UID, containers without a name or a runtime scheme: %+v", pods)
	}
}

func FuzzParsePods(f *testing.F) {
	f.Add(podsJSON(f))
	f.Add([]byte(`{"kind":"PodList","items":[{"metadata":{"uid":"u","name":"n"},"status":{"containerStatuses":[{"name":"c","containerID":"x://"}]}}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		pods, err := ParsePods(b)
		if err != nil {
			return
		}
		for _, p := range pods {
			if p.UID == "" || p.Name == "" {
				t.Fatalf("pod without UID or name: %+v", p)
			}
			for _, c := range p.Containers {
				if c.ID == "" || c.Name == "" || strings.ToLower(c.ID) != c.ID {
					t.Fatalf("container %+v", c)
				}
			}
		}
	})
}

// kubelet serves a pod list over TLS, as a kubelet does, requiring the token.
type kubelet struct {
	srv   *httptest.Server
	mu    sync.Mutex
	body  []byte
	code  int
	token string
	gets  atomic.Int64
}

func newKubelet(t *testing.T, body []byte) *kubelet {
	k := &kubelet{body: body, code: http.StatusOK, token: secretToken}
	k.srv = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		k.gets.Add(1)
		k.mu.Lock()
		body, code, token := k.body, k.code, k.token
		k.mu.Unlock()
		switch {
		case r.URL.Path != "/pods":
			http.NotFound(w, r)
		case r.Header.Get("Authorization") != "Bearer "+token:
			http.Error(w, "Unauthorized", http.StatusUnauthorized)
		case code != http.StatusOK:
			http.Error(w, http.StatusText(code), code)
		default:
			w.Header().Set("Content-Type", "application/json")
			w.Write(body)
		}
	}))
	t.Cleanup(k.srv.Close)
	return k
}

func (k *kubelet) set(body []byte, code int) {
	k.mu.Lock()
	k.body, k.code = body, code
	k.mu.Unlock()
}

// files writes the service account's token and the kubelet's CA, as
// Kubernetes mounts them.
func (k *kubelet) files(t *testing.T) (token, ca string) {
	dir := t.TempDir()
	token, ca = filepath.Join(dir, "token"), filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(token, []byte(secretToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	crt := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: k.srv.Certificate().Raw})
	if err := os.WriteFile(ca, crt, 0o644); err != nil {
		t.Fatal(err)
	}
	return token, ca
}

// logs collects a Client's log lines.
type logs struct {
	mu    sync.Mutex
	lines []string
}

func (l *logs) logf(format string, args ...any) {
	l.mu.Lock()
	l.lines = append(l.lines, fmt.Sprintf(format, args...))
	l.mu.Unlock()
}

func (l *logs) get() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.lines...)
}

func names(c *Client, podUID, containerID string) map[string]string {
	l := map[string]string{"comm": "x"}
	c.AddNames(l, podUID, containerID)
	delete(l, "comm")
	return l
}

func TestNames(t *testing.T) {
	k := newKubelet(t, podsJSON(t))
	token, ca := k.files(t)
	c, err := New(Options{URL: k.srv.URL + "/pods", TokenFile: token, CAFile: ca})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name             string
		podUID, id, want string
	}{
		{"app container", webUID, webID, "namespace=shop pod=web-7d9c6b5f4-x2kqp container=web"},
		{"sidecar", webUID, envoyID, "namespace=shop pod=web-7d9c6b5f4-x2kqp container=envoy"},
		{"init container", webUID, migrateID, "namespace=shop pod=web-7d9c6b5f4-x2kqp container=migrate"},
		{"sandbox: the pod only", webUID, sandboxID, "namespace=shop pod=web-7d9c6b5f4-x2kqp"},
		{"a container of another pod is not this pod's", webUID, proxyID, "namespace=shop pod=web-7d9c6b5f4-x2kqp"},
		{"static pod: UID not from the cgroup path", "", etcdID, "namespace=kube-system pod=etcd-node-a container=etcd"},
		{"unknown pod", unknownUID, webID, ""},
		{"not in a pod", "", sandboxID, ""},
		{"no cgroup IDs", "", "", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			l := names(c, tt.podUID, tt.id)
			var got []string
			for _, k := range []string{"namespace", "pod", "container"} {
				if v, ok := l[k]; ok {
					got = append(got, k+"="+v)
				}
			}
			if g := strings.Join(got, " "); g != tt.want || len(l) != len(got) {
				t.Errorf("AddNames(%q, %q) = %v, want %q", tt.podUID, tt.id, l, tt.want)
			}
		})
	}
}

func TestRefreshErrors(t *testing.T) {
	k := newKubelet(t, podsJSON(t))
	token, ca := k.files(t)
	wrongToken := filepath.Join(t.TempDir(), "token")
	os.WriteFile(wrongToken, []byte("expired"), 0o600)
	otherCA := filepath.Join(t.TempDir(), "ca.crt")
	os.WriteFile(otherCA, selfSigned(t), 0o644)
	for _, tt := range []struct {
		name string
		o    Options
		code int
		body string
		want error
		msg  string
	}{
		{name: "no token", o: Options{CAFile: ca}, want: ErrUnauthorized},
		{name: "wrong token", o: Options{TokenFile: wrongToken, CAFile: ca}, want: ErrUnauthorized},
		{name: "token file missing", o: Options{TokenFile: token + ".gone", CAFile: ca}, want: os.ErrNotExist},
		{name: "no RBAC", o: Options{TokenFile: token, CAFile: ca}, code: http.StatusForbidden, want: ErrForbidden},
		{name: "server error", o: Options{TokenFile: token, CAFile: ca}, code: http.StatusInternalServerError, msg: "500 Internal Server Error"},
		{name: "certificate of another CA", o: Options{TokenFile: token, CAFile: otherCA}, want: ErrCertificate, msg: "certificate signed by unknown authority"},
		{name: "system roots", o: Options{TokenFile: token}, want: ErrCertificate, msg: "certificate signed by unknown authority"},
		{name: "not a pod list", o: Options{TokenFile: token, CAFile: ca}, body: `{"kind":"Status"}`, msg: `kind "Status", want PodList`},
		{name: "truncated", o: Options{TokenFile: token, CAFile: ca}, body: `{"kind":"PodList","items":[`, msg: "parse pod list"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			body := []byte(tt.body)
			if tt.body == "" {
				body = podsJSON(t)
			}
			code := tt.code
			if code == 0 {
				code = http.StatusOK
			}
			k.set(body, code)
			tt.o.URL = k.srv.URL + "/pods"
			c, err := New(tt.o)
			if err != nil {
				t.Fatal(err)
			}
			err = c.Refresh(context.Background())
			if err == nil || (tt.want != nil && !errors.Is(err, tt.want)) || !strings.Contains(err.Error(), tt.msg) {
				t.Fatalf("Refresh = %v, want %v %q", err, tt.want, tt.msg)
			}
			if l := names(c, webUID, webID); len(l) != 0 {
				t.Errorf("names after a failed refresh: %v", l)
			}
		})
	}
}

// selfSigned is a CA certificate that signed nothing the tests serve.
func selfSigned(t *testing.T) []byte {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "another cluster"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func TestTimeout(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select { // a kubelet that never answers
		case <-r.Context().Done():
		case <-release:
		}
	}))
	defer srv.Close()
	defer close(release)
	c, err := New(Options{URL: srv.URL + "/pods", Timeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	err = c.Refresh(context.Background())
	if err == nil || !strings.Contains(err.Error(), "Client.Timeout exceeded") {
		t.Fatalf("Refresh = %v, want a timeout", err)
	}
	if l := names(c, webUID, webID); len(l) != 0 {
		t.Errorf("names after a timeout: %v", l)
	}
}

func TestNew(t *testing.T) {
	notPEM := filepath.Join(t.TempDir(), "ca.crt")
	os.WriteFile(notPEM, []byte("not a certificate"), 0o644)
	for _, o := range []Options{
		{URL: ""},
		{URL: "10.0.0.1:10250/pods"},
		{URL: "ftp://10.0.0.1/pods"},
		{URL: "https:///pods"},
		{URL: "https://10.0.0.1:10250/pods", CAFile: notPEM},
		{URL: "https://10.0.0.1:10250/pods", CAFile: notPEM + ".gone"},
	} {
		if _, err := New(o); err == nil {
			t.Errorf("New(%+v) = nil error", o)
		}
	}
	// The read-only port gets no token: it takes none, and plain HTTP would show it.
	c, err := New(Options{URL: "http://10.0.0.1:10255/pods", TokenFile: ServiceAccountToken, CAFile: notPEM})
	if err != nil || c.o.TokenFile != "" {
		t.Errorf("New(http) = %v, token file %q", err, c.o.TokenFile)
	}
	// The insecure option does not read the CA at all.
	if _, err := New(Options{URL: "https://10.0.0.1:10250/pods", CAFile: notPEM, InsecureSkipVerify: true}); err != nil {
		t.Error(err)
	}
}

// waitFor polls cond until it holds or the test's deadline nears.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	if d, ok := t.Deadline(); ok && d.Before(deadline) {
		deadline = d.Add(-time.Second)
	}
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestRun: a miss asks for the list again without waiting for it; a
// failing kubelet is logged once, and its recovery once; the token is read
// again for every request.
func TestRun(t *testing.T) {
	k := newKubelet(t, []byte(`{"kind":"PodList","apiVersion":"v1","items":[]}`))
	token, ca := k.files(t)
	var log logs
	c, err := New(Options{URL: k.srv.URL + "/pods", TokenFile: token, CAFile: ca, MinInterval: time.Millisecond, Every: time.Hour, Logf: log.logf})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		c.Run(ctx)
		close(done)
	}()
	defer func() {
		cancel()
		<-done
	}()
	waitFor(t, "the first fetch", func() bool { return k.gets.Load() >= 1 })

	// The pod appears: the first lookup misses and asks, a later one names it.
	k.set(podsJSON(t), http.StatusOK)
	if l := names(c, webUID, webID); len(l) != 0 {
		t.Fatalf("names before the list has the pod: %v", l)
	}
	waitFor(t, "the pod's names", func() bool { return names(c, webUID, webID)["container"] == "web" })

	// A miss asks once per key until the next periodic fetch.
	gets := k.gets.Load()
	for range 5 {
		names(c, unknownUID, "")
	}
	waitFor(t, "a fetch for the unknown pod", func() bool { return k.gets.Load() == gets+1 })
	names(c, unknownUID, "")

	// The token rotates and the kubelet takes only the new one: one line
	// for the failure however often it recurs, one for the recovery.
	k.mu.Lock()
	k.token = "rotated"
	k.mu.Unlock()
	for i := range 3 {
		names(c, unknownUID, fmt.Sprint(i))
		want := gets + 2 + int64(i)
		waitFor(t, "a refused fetch", func() bool { return k.gets.Load() >= want })
	}
	if err := os.WriteFile(token, []byte("rotated"), 0o600); err != nil {
		t.Fatal(err)
	}
	names(c, unknownUID, "new")
	waitFor(t, "the recovery", func() bool { return len(log.get()) == 2 })
	lines := log.get()
	if !strings.Contains(lines[0], "kubelet pod list: the kubelet refused the token (401)") || !strings.Contains(lines[1], "kubelet pod list works again: 4 pods") {
		t.Errorf("log:\n%s", strings.Join(lines, "\n"))
	}
	// What was known stays known while fetches fail.
	if got := names(c, webUID, webID)["pod"]; got != "web-7d9c6b5f4-x2kqp" {
		t.Errorf("pod = %q after failed fetches", got)
	}
}

func TestForgetsGonePods(t *testing.T) {
	c, err := New(Options{URL: "http://127.0.0.1:10255/pods"})
	if err != nil {
		t.Fatal(err)
	}
	pods, err := ParsePods(podsJSON(t))
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	c.replace(pods, t0)
	c.replace(pods[1:], t0.Add(keepGone)) // the web pod is deleted
	if names(c, webUID, webID)["container"] != "web" {
		t.Error("a pod just deleted lost its names: its processes' last samples need them")
	}
	c.replace(pods[1:], t0.Add(keepGone+time.Second))
	if l := names(c, webUID, webID); len(l) != 0 {
		t.Errorf("a pod deleted long ago keeps names %v", l)
	}
	if names(c, proxyUID, proxyID)["container"] != "kube-proxy" {
		t.Error("a pod still listed lost its names")
	}
}

func BenchmarkAddNames(b *testing.B) {
	c, err := New(Options{URL: "http://127.0.0.1:10255/pods"})
	if err != nil {
		b.Fatal(err)
	}
	pods, err := ParsePods(podsJSON(b))
	if err != nil {
		b.Fatal(err)
	}
	c.replace(pods, time.Now())
	l := map[string]string{}
	for b.Loop() {
		c.AddNames(l, webUID, webID)
	}
}
