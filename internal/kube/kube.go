// Package kube names the pods and containers of the Kubernetes node flint
// runs on. A process's cgroup path holds its pod's UID and its container's
// ID (internal/proc); the kubelet's pod list (GET /pods on its port, the
// same list `kubectl get --raw /api/v1/nodes/NODE/proxy/pods` shows) maps
// them to a namespace, a pod name and a container name.
//
// A Client keeps the list in memory and answers from it without waiting:
// a process whose pod or container is not in the list yet gets no names,
// and asks for the list to be fetched again, at most once per MinInterval.
//
//	c, err := kube.New(kube.Options{URL: "https://10.0.0.5:10250/pods", TokenFile: kube.ServiceAccountToken, CAFile: kube.ServiceAccountCA})
//	go c.Run(ctx)
//	c.AddNames(labels, podUID, containerID)
package kube

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/flint-dev/flint/internal/profile"
)

// Where Kubernetes mounts a pod's service-account credentials.
const (
	ServiceAccountToken = "/var/run/secrets/kubernetes.io/serviceaccount/token"
	ServiceAccountCA    = "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt"
)

// Errors of a refresh that callers and operators tell apart.
var (
	// ErrUnauthorized: the kubelet did not accept the token (401).
	ErrUnauthorized = errors.New("the kubelet refused the token (401): is the service account token mounted and current?")
	// ErrForbidden: the token's account may not read the pod list (403).
	ErrForbidden = errors.New("the kubelet forbids reading its pod list (403): the service account needs get on nodes/proxy (see docs/KUBERNETES.md)")
	// ErrCertificate: the kubelet's certificate is not signed by the CA.
	ErrCertificate = errors.New("the kubelet's certificate is not signed by the CA given (kubeadm's kubelets sign their own: see docs/KUBERNETES.md)")
)

// maxBody bounds the pod list read: a node's 110 pods take about 1 MB.
const maxBody = 64 << 20

// Options configure a Client.
type Options struct {
	// URL is the kubelet's pod list: https://NODE_IP:10250/pods, or
	// http://NODE_IP:10255/pods where the read-only port is enabled.
	URL string
	// TokenFile holds the bearer token sent with every request; it is read
	// again before each one, as projected service-account tokens rotate.
	// Empty sends no token, and so does an http URL: the read-only port
	// takes none, and a token must not travel in clear.
	TokenFile string
	// CAFile holds the certificates that may sign the kubelet's serving
	// certificate (PEM); empty trusts the system's roots.
	CAFile string
	// InsecureSkipVerify accepts any kubelet certificate: for clusters
	// whose kubelets serve self-signed certificates (kubeadm's default).
	InsecureSkipVerify bool
	// Timeout bounds one request; zero means 10 s.
	Timeout time.Duration
	// MinInterval is the least time between two requests; zero means 10 s.
	MinInterval time.Duration
	// Every is how often Run fetches the list unasked; zero means 1 min.
	Every time.Duration
	// Logf reports when the list cannot be had and when it can again; nil
	// discards.
	Logf func(format string, args ...any)
}

// keepGone is how long the names of a pod the list no longer holds are
// kept: its processes' last samples may be named after it was deleted.
const keepGone = 5 * time.Minute

// Client answers from the kubelet's pod list. Its methods are safe for
// concurrent use.
type Client struct {
	o    Options
	http *http.Client
	wake chan struct{}

	mu         sync.RWMutex
	pods       map[string]*pod       // by UID
	containers map[string]*container // by container ID
	asked      map[string]bool       // pod UID/container ID missed since the last periodic fetch
	failing    string                // the error last logged, "" while fetching works
}

type pod struct {
	namespace, name string
	seen            time.Time
}

type container struct {
	podUID, name string
	seen         time.Time
}

// New returns a Client of the kubelet at o.URL; it fetches nothing until
// Run or Refresh. It fails on a URL that is not http(s) or a CA file that
// holds no certificate.
func New(o Options) (*Client, error) {
	u, err := url.Parse(o.URL)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return nil, fmt.Errorf("kubelet URL %q: want https://NODE_IP:10250/pods or http://NODE_IP:10255/pods", o.URL)
	}
	if u.Scheme == "http" {
		o.TokenFile, o.CAFile = "", ""
	}
	if o.Timeout == 0 {
		o.Timeout = 10 * time.Second
	}
	if o.MinInterval == 0 {
		o.MinInterval = 10 * time.Second
	}
	if o.Every == 0 {
		o.Every = time.Minute
	}
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
	tc := &tls.Config{InsecureSkipVerify: o.InsecureSkipVerify}
	if o.CAFile != "" && !o.InsecureSkipVerify {
		pem, err := os.ReadFile(o.CAFile)
		if err != nil {
			return nil, fmt.Errorf("read kubelet CA: %w", err)
		}
		tc.RootCAs = x509.NewCertPool()
		if !tc.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("read kubelet CA %s: no PEM certificate in it", o.CAFile)
		}
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = tc
	tr.Proxy = nil // the kubelet is on this node: never through a proxy
	return &Client{
		o:          o,
		http:       &http.Client{Transport: tr, Timeout: o.Timeout},
		wake:       make(chan struct{}, 1),
		pods:       map[string]*pod{},
		containers: map[string]*container{},
		asked:      map[string]bool{},
	}, nil
}

// AddNames adds the namespace, pod and container labels of the process in
// the pod podUID and the container containerID (as its cgroup path names
// them) to l, the names the list holds and only those: a container of
// another pod, or one the list does not hold yet, gets no container label.
// A pod UID the cgroup path did not give (a static pod's is not a UUID) is
// the pod of the container. It never waits: a miss in a pod asks Run for
// the list again.
func (c *Client) AddNames(l map[string]string, podUID, containerID string) {
	if podUID == "" && containerID == "" {
		return
	}
	c.mu.RLock()
	ct := c.containers[containerID]
	uid := podUID
	if uid == "" && ct != nil {
		uid = ct.podUID
	}
	p := c.pods[uid]
	c.mu.RUnlock()
	if p != nil {
		l[profile.LabelNamespace], l[profile.LabelPod] = p.namespace, p.name
	}
	if ct != nil && ct.podUID == uid {
		l[profile.LabelContainer] = ct.name
	}
	// Only a miss in a pod asks: a container outside Kubernetes (docker
	// run) is in no list. A pod's sandbox ("pause") container is in none
	// either: it asks once per Every, as any other miss.
	if podUID != "" && (p == nil || (containerID != "" && ct == nil)) {
		c.ask(podUID + "/" + containerID)
	}
}

// ask wakes Run once per key missed between two periodic fetches.
func (c *Client) ask(key string) {
	c.mu.Lock()
	seen := c.asked[key]
	c.asked[key] = true
	c.mu.Unlock()
	if seen {
		return
	}
	select {
	case c.wake <- struct{}{}:
	default: // a fetch is asked for already
	}
}

// Run fetches the list at once, then every Every and when AddNames misses,
// at most once per MinInterval, until ctx ends. It logs one line when
// fetching fails, again only when the error changes, and one when it works
// again.
func (c *Client) Run(ctx context.Context) {
	tick := time.NewTicker(c.o.Every)
	defer tick.Stop()
	for {
		last := time.Now()
		c.refreshLogged(ctx)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			c.mu.Lock()
			clear(c.asked)
			c.mu.Unlock()
		case <-c.wake:
		}
		if d := c.o.MinInterval - time.Since(last); d > 0 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(d):
			}
		}
	}
}

func (c *Client) refreshLogged(ctx context.Context) {
	err := c.Refresh(ctx)
	if ctx.Err() != nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case err != nil && err.Error() != c.failing:
		c.failing = err.Error()
		c.o.Logf("kubelet pod list: %v (processes in pods keep no namespace, pod or container names until it works)", err)
	case err == nil && c.failing != "":
		c.failing = ""
		c.o.Logf("kubelet pod list works again: %d pods", len(c.pods))
	}
}

// Refresh fetches the pod list once and replaces what the Client knows;
// on an error it keeps what it knew (a pod's UID and a container's ID are
// never reused, so old names are never wrong names).
func (c *Client) Refresh(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.o.URL, nil)
	if err != nil {
		return fmt.Errorf("get %s: %w", c.o.URL, err)
	}
	req.Header.Set("Accept", "application/json")
	if c.o.TokenFile != "" {
		tok, err := os.ReadFile(c.o.TokenFile)
		if err != nil {
			return fmt.Errorf("read kubelet token: %w", err)
		}
		req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(tok)))
	}
	resp, err := c.http.Do(req)
	if err != nil {
		if _, ok := errors.AsType[*tls.CertificateVerificationError](err); ok {
			return fmt.Errorf("get %s: %w: %w", c.o.URL, ErrCertificate, err)
		}
		return fmt.Errorf("get %s: %w", c.o.URL, err)
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
	case http.StatusUnauthorized:
		return ErrUnauthorized
	case http.StatusForbidden:
		return ErrForbidden
	default:
		return fmt.Errorf("get %s: %s", c.o.URL, resp.Status)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxBody+1))
	if err != nil {
		return fmt.Errorf("read %s: %w", c.o.URL, err)
	}
	if len(body) > maxBody {
		return fmt.Errorf("read %s: pod list larger than %d MiB", c.o.URL, maxBody>>20)
	}
	list, err := ParsePods(body)
	if err != nil {
		return fmt.Errorf("read %s: %w", c.o.URL, err)
	}
	c.replace(list, time.Now())
	return nil
}

// replace takes in a fetched list, forgetting what no list held for keepGone.
func (c *Client) replace(list []Pod, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range list {
		c.pods[p.UID] = &pod{namespace: p.Namespace, name: p.Name, seen: now}
		for _, ct := range p.Containers {
			c.containers[ct.ID] = &container{podUID: p.UID, name: ct.Name, seen: now}
		}
	}
	for uid, p := range c.pods {
		if now.Sub(p.seen) > keepGone {
			delete(c.pods, uid)
		}
	}
	for id, ct := range c.containers {
		if now.Sub(ct.seen) > keepGone {
			delete(c.containers, id)
		}
	}
}
