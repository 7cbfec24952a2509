package server

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestEndpointCheck(t *testing.T) {
	for _, tc := range []struct {
		addr, token    string
		tls            bool
		wantErr, warns string
	}{
		{addr: "127.0.0.1:7070"},
		{addr: "127.1.2.3:7070"},
		{addr: "[::1]:7070"},
		{addr: "localhost:7070"},
		{addr: "LOCALHOST:0"},
		{addr: ":7070", wantErr: "listen on every interface needs a token"},
		{addr: "0.0.0.0:7070", wantErr: "listen on 0.0.0.0 needs a token"},
		{addr: "10.0.0.5:7070", wantErr: "listen on 10.0.0.5 needs a token"},
		{addr: "[::]:7070", wantErr: "listen on :: needs a token"},
		{addr: "node.example:7070", wantErr: "needs a token"},
		{addr: "0.0.0.0:7070", tls: true, wantErr: "needs a token"},
		{addr: ":7070", token: "t", warns: "listening on every interface without TLS"},
		{addr: "10.0.0.5:7070", token: "t", warns: "listening on 10.0.0.5 without TLS: the token and the profiles cross the network in clear text"},
		{addr: "10.0.0.5:7070", token: "t", tls: true},
		{addr: "127.0.0.1:7070", token: "t"},
		{addr: "7070", wantErr: `listen address "7070"`},
	} {
		t.Run(tc.addr+"/"+tc.token, func(t *testing.T) {
			e := Endpoint{Addr: tc.addr}
			if tc.tls {
				e.TLSCert, e.TLSKey = "cert.pem", "key.pem"
			}
			warns, err := e.Check(tc.token)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				if strings.Contains(tc.wantErr, "needs a token") && !errors.Is(err, ErrNeedToken) {
					t.Errorf("%v is not ErrNeedToken", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.Join(warns, "; "); (tc.warns == "") != (got == "") || !strings.Contains(got, tc.warns) {
				t.Errorf("warnings %q, want %q", got, tc.warns)
			}
		})
	}
	if _, err := (Endpoint{Addr: "127.0.0.1:0", TLSCert: "c.pem"}).Check(""); err == nil || !strings.Contains(err.Error(), "--tls-cert and --tls-key go together") {
		t.Errorf("certificate without key: %v", err)
	}
}

// selfSigned writes a certificate for 127.0.0.1 and its key, and returns
// their paths and a pool trusting the certificate.
func selfSigned(t *testing.T) (cert, key string, pool *x509.CertPool) {
	t.Helper()
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "flint test"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		DNSNames:     []string{"localhost"},
		IsCA:         true, BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &priv.PublicKey, priv)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cert, key = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(key, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	parsed, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool = x509.NewCertPool()
	pool.AddCert(parsed)
	return cert, key, pool
}

// TestStartTLS serves over TLS with a certificate made here, and checks
// that a client trusting it gets answers, with the token, over HTTP/2.
func TestStartTLS(t *testing.T) {
	cert, key, pool := selfSigned(t)
	r, err := Start(Endpoint{Addr: "127.0.0.1:0", TLSCert: cert, TLSKey: key}, Options{Store: newFakeStore(), Token: testToken})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Shutdown(context.Background())
	if !strings.HasPrefix(r.URL(), "https://127.0.0.1:") {
		t.Fatalf("URL %s", r.URL())
	}
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: true}
	defer tr.CloseIdleConnections()
	c := &Client{URL: r.URL(), Token: testToken, HTTP: &http.Client{Transport: tr}}
	body, err := c.Get(context.Background(), "/api/v1/labels", url.Values{"from": {t0.Format(time.RFC3339)}})
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(body)
	body.Close()
	if string(got) != `["comm","pid","thread","tid"]`+"\n" {
		t.Errorf("labels over TLS: %q", got)
	}
	req, _ := http.NewRequest(http.MethodGet, r.URL()+"/healthz", nil)
	resp, err := c.HTTP.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.ProtoMajor != 2 || resp.TLS == nil {
		t.Errorf("protocol %s, TLS %v: want HTTP/2 over TLS", resp.Proto, resp.TLS != nil)
	}

	// Without the certificate trusted, or in clear text, nothing is read.
	if _, err := (&Client{URL: r.URL(), Token: testToken}).Get(context.Background(), "/api/v1/labels", nil); err == nil {
		t.Error("a client that does not trust the certificate got an answer")
	}
	plain := &Client{URL: strings.Replace(r.URL(), "https://", "http://", 1), Token: testToken}
	if _, err := plain.Get(context.Background(), "/api/v1/labels", nil); err == nil || !strings.Contains(err.Error(), "400") {
		t.Errorf("plain HTTP to the TLS port: %v, want 400", err)
	}
}

func TestStartErrors(t *testing.T) {
	cert, key, _ := selfSigned(t)
	for _, tc := range []struct {
		name string
		e    Endpoint
		o    Options
		want string
	}{
		{"no token beyond loopback", Endpoint{Addr: "0.0.0.0:0"}, Options{}, "needs a token"},
		{"key is not a key", Endpoint{Addr: "127.0.0.1:0", TLSCert: cert, TLSKey: cert}, Options{}, "load TLS certificate"},
		{"no certificate file", Endpoint{Addr: "127.0.0.1:0", TLSCert: cert + ".no", TLSKey: key}, Options{}, "load TLS certificate"},
		{"bad address", Endpoint{Addr: "127.0.0.1:http2"}, Options{}, "listen on 127.0.0.1:http2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := Start(tc.e, tc.o)
			if err == nil {
				r.Shutdown(context.Background())
				t.Fatal("started")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err %v, want %q", err, tc.want)
			}
		})
	}
}

// TestTimeouts checks the http.Server Start configures, not how long
// anything takes: every timeout is set, and a response may take the query
// timeout plus a margin to write.
func TestTimeouts(t *testing.T) {
	for _, qt := range []time.Duration{0, 5 * time.Minute} {
		r, err := Start(Endpoint{Addr: "127.0.0.1:0"}, Options{QueryTimeout: qt})
		if err != nil {
			t.Fatal(err)
		}
		srv := r.srv
		r.Shutdown(context.Background())
		want := qt
		if want == 0 {
			want = defaultQueryTimeout
		}
		if srv.ReadHeaderTimeout != 10*time.Second || srv.ReadTimeout != 30*time.Second || srv.IdleTimeout != 2*time.Minute ||
			srv.WriteTimeout != want+30*time.Second || srv.MaxHeaderBytes != 64<<10 {
			t.Errorf("query timeout %s: read header %s, read %s, write %s, idle %s, header bytes %d",
				qt, srv.ReadHeaderTimeout, srv.ReadTimeout, srv.WriteTimeout, srv.IdleTimeout, srv.MaxHeaderBytes)
		}
	}
}
