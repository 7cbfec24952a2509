// Package chtest runs real ClickHouse servers for tests: each on free
// ports, with its own configuration and data directory, stopped when the
// test ends. Tests skip, saying why, when clickhouse-server is not
// installed (`make deps` installs Debian's), except under CI=true, where
// that is a failure.
//
//	srv := chtest.Start(t)
//	st, err := store.OpenClickHouse(ctx, srv.DSN("flint"), opts)
//
// Servers cost ~3 s to start and ~85 MB each: share one per test package
// (StartMain in TestMain) where tests can use separate databases.
package chtest

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Binary is the server executable looked up in PATH and /usr/sbin.
const Binary = "clickhouse-server"

// User and Password name the second account every server has, besides
// "default" without a password, for tests of authentication. Reader, with
// the same password, may only read and set query settings (readonly=2),
// as the account of a flint server should.
const (
	User     = "flint"
	Password = "s3cret"
	Reader   = "flint_reader"
)

// Server is one running clickhouse-server.
type Server struct {
	HTTPPort, TCPPort int
	dir               string // config, data and log
	bin               string
	extra             string // config XML added inside <yandex>

	mu     sync.Mutex
	cmd    *exec.Cmd // nil while stopped
	exited chan error
	log    *os.File
}

// Option changes a server's configuration.
type Option func(*Server)

// WithConfig adds XML inside the server's <yandex> root, such as a
// <remote_servers> section.
func WithConfig(xml string) Option { return func(s *Server) { s.extra += xml } }

// WithPorts sets the ports instead of picking free ones: a cluster's
// configuration names its servers' ports before they start.
func WithPorts(httpPort, tcpPort int) Option {
	return func(s *Server) { s.HTTPPort, s.TCPPort = httpPort, tcpPort }
}

// ErrNotInstalled reports that clickhouse-server is not installed.
var ErrNotInstalled = errors.New(Binary + " is not installed (make deps installs Debian's clickhouse-server)")

// Start starts a server for t and stops it when t ends. Without
// clickhouse-server it skips t, or fails it when CI=true.
func Start(t testing.TB, opts ...Option) *Server {
	t.Helper()
	s, err := New(t.TempDir(), opts...)
	if errors.Is(err, ErrNotInstalled) {
		if os.Getenv("CI") == "true" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s
}

// New starts a server with its files in dir; the caller stops it. Use it
// from TestMain, where there is no testing.TB.
func New(dir string, opts ...Option) (*Server, error) {
	bin, err := exec.LookPath(Binary)
	if err != nil {
		if _, serr := os.Stat("/usr/sbin/" + Binary); serr != nil {
			return nil, ErrNotInstalled
		}
		bin = "/usr/sbin/" + Binary
	}
	s := &Server{dir: dir, bin: bin}
	for _, o := range opts {
		o(s)
	}
	if s.HTTPPort == 0 {
		ports, err := FreePorts(2)
		if err != nil {
			return nil, err
		}
		s.HTTPPort, s.TCPPort = ports[0], ports[1]
	}
	if err := s.writeConfig(); err != nil {
		return nil, err
	}
	if err := s.start(); err != nil {
		return nil, err
	}
	return s, nil
}

// FreePorts returns n TCP ports free on 127.0.0.1 now.
func FreePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("find a free port: %w", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

func (s *Server) writeConfig() error {
	for _, d := range []string{"data", "tmp", "user_files", "format_schemas"} {
		if err := os.MkdirAll(filepath.Join(s.dir, d), 0o755); err != nil {
			return err
		}
	}
	users := `<?xml version="1.0"?>
<yandex>
  <profiles><default><max_memory_usage>2000000000</max_memory_usage></default>
    <reader><max_memory_usage>2000000000</max_memory_usage><readonly>2</readonly></reader></profiles>
  <users>
    <default><password></password><networks><ip>127.0.0.1</ip><ip>::1</ip></networks>
      <profile>default</profile><quota>default</quota></default>
    <` + User + `><password>` + Password + `</password><networks><ip>127.0.0.1</ip><ip>::1</ip></networks>
      <profile>default</profile><quota>default</quota></` + User + `>
    <` + Reader + `><password>` + Password + `</password><networks><ip>127.0.0.1</ip><ip>::1</ip></networks>
      <profile>reader</profile><quota>default</quota></` + Reader + `>
  </users>
  <quotas><default></default></quotas>
</yandex>
`
	// The small caches keep a server near 100 MB, so that tests can run
	// several on a small machine.
	config := fmt.Sprintf(`<?xml version="1.0"?>
<yandex>
  <logger><level>warning</level><console>1</console></logger>
  <http_port>%d</http_port>
  <tcp_port>%d</tcp_port>
  <listen_host>127.0.0.1</listen_host>
  <path>%s/data/</path>
  <tmp_path>%s/tmp/</tmp_path>
  <user_files_path>%s/user_files/</user_files_path>
  <format_schema_path>%s/format_schemas/</format_schema_path>
  <users_config>%s/users.xml</users_config>
  <default_profile>default</default_profile>
  <default_database>default</default_database>
  <mark_cache_size>5368709</mark_cache_size>
  <uncompressed_cache_size>8388608</uncompressed_cache_size>
  <max_concurrent_queries>50</max_concurrent_queries>
%s
</yandex>
`, s.HTTPPort, s.TCPPort, s.dir, s.dir, s.dir, s.dir, s.dir, s.extra)
	if err := os.WriteFile(filepath.Join(s.dir, "users.xml"), []byte(users), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(s.dir, "config.xml"), []byte(config), 0o644)
}

func (s *Server) start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		return nil
	}
	log, err := os.OpenFile(filepath.Join(s.dir, "server.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(s.bin, "--config-file="+filepath.Join(s.dir, "config.xml"))
	cmd.Dir = s.dir
	cmd.Stdout, cmd.Stderr = log, log
	// Killed with the test binary, however that ends: no server outlives
	// its test.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		log.Close()
		return fmt.Errorf("start %s: %w", s.bin, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	deadline := time.Now().Add(60 * time.Second)
	for {
		select {
		case err := <-exited:
			log.Close()
			return fmt.Errorf("%s exited at start (%v): %s", s.bin, err, s.tail())
		default:
		}
		if resp, err := http.Get(s.URL() + "ping"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				s.cmd, s.exited, s.log = cmd, exited, log
				return nil
			}
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			<-exited
			log.Close()
			return fmt.Errorf("%s did not answer /ping within a minute: %s", s.bin, s.tail())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// tail returns the end of the server's log, for errors.
func (s *Server) tail() string {
	b, _ := os.ReadFile(filepath.Join(s.dir, "server.log"))
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return strings.TrimSpace(string(b))
}

// Stop stops the server: SIGTERM, then SIGKILL after 10 s. Its data stays
// for Restart. Safe to call twice.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
	case <-time.After(10 * time.Second):
		s.cmd.Process.Kill()
		<-s.exited
	}
	s.log.Close()
	s.cmd = nil
}

// Restart starts a stopped server again on the same ports and data.
func (s *Server) Restart() error { return s.start() }

// URL is the server's HTTP interface, ending in "/".
func (s *Server) URL() string { return fmt.Sprintf("http://127.0.0.1:%d/", s.HTTPPort) }

// DSN is flint's clickhouse:// URL of database db on this server, as user
// default; params, if any, are appended ("cluster=c&timeout=2s").
func (s *Server) DSN(db string, params ...string) string {
	u := fmt.Sprintf("clickhouse://127.0.0.1:%d/%s", s.HTTPPort, db)
	if len(params) > 0 {
		u += "?" + strings.Join(params, "&")
	}
	return u
}

// Dir is the directory of the server's configuration, data and log.
func (s *Server) Dir() string { return s.dir }

// StartCluster starts n servers for t, each configured with a
// remote_servers cluster of that name whose shards are the n servers, one
// replica each, so that a Distributed table on any of them spans all.
func StartCluster(t testing.TB, name string, n int) []*Server {
	t.Helper()
	ports, err := FreePorts(2 * n)
	if err != nil {
		t.Fatal(err)
	}
	var shards strings.Builder
	for i := range n {
		fmt.Fprintf(&shards, "<shard><replica><host>127.0.0.1</host><port>%d</port></replica></shard>", ports[2*i+1])
	}
	config := fmt.Sprintf("<remote_servers><%s>%s</%s></remote_servers>", name, shards.String(), name)
	servers := make([]*Server, n)
	for i := range n {
		servers[i] = Start(t, WithPorts(ports[2*i], ports[2*i+1]), WithConfig(config))
	}
	return servers
}
