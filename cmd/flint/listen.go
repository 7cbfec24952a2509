package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"strings"

	"github.com/flint-dev/flint/internal/server"
)

// ListenConfig is where an HTTP API listens and who may ask: the flags
// `flint agent` and `flint server` share.
type ListenConfig struct {
	server.Endpoint
	// Token is --token, else the contents of TokenFile, else $FLINT_TOKEN.
	Token     string
	TokenFile string
	// AllowHosts are the --allow-host names.
	AllowHosts []string
	// tokenFlag records --token on the command line, which every user of
	// the machine can read in ps.
	tokenFlag bool
}

// listenFlags registers --listen (default addr; "" allowed only when the
// command may serve no API), --token, --token-file, --allow-host,
// --tls-cert and --tls-key.
func listenFlags(fs *flag.FlagSet, c *ListenConfig, addr string) {
	c.Addr = addr
	fs.StringVar(&c.Addr, "listen", c.Addr, "HTTP API `address`; beyond loopback needs a token")
	fs.Func("token", "bearer `token` the API requires (visible in ps: prefer --token-file or $FLINT_TOKEN)", func(s string) error {
		c.Token, c.tokenFlag = s, true
		return nil
	})
	fs.StringVar(&c.TokenFile, "token-file", "", "`file` holding the token (mode 0600), read at start")
	fs.Func("allow-host", "a Host `name` answered without a token besides localhost and loopback addresses (repeatable)", func(s string) error {
		c.AllowHosts = append(c.AllowHosts, s)
		return nil
	})
	fs.StringVar(&c.TLSCert, "tls-cert", "", "PEM certificate `file` (chain): serve HTTPS")
	fs.StringVar(&c.TLSKey, "tls-key", "", "PEM private key `file` of --tls-cert")
}

// Validate reads the token file, checks the names and the listen rules
// (server.Endpoint.Check) and returns warnings for what it allows but an
// operator should fix. An empty Addr (no API) skips the listen rules.
func (c *ListenConfig) Validate() (warnings []string, err error) {
	switch {
	case c.tokenFlag && c.TokenFile != "":
		return nil, errors.New("--token and --token-file exclude each other")
	case c.TokenFile != "":
		var warn string
		if c.Token, warn, err = readTokenFile(c.TokenFile); err != nil {
			return nil, err
		}
		if warn != "" {
			warnings = append(warnings, warn)
		}
	case c.tokenFlag:
		if err := checkToken(c.Token); err != nil {
			return nil, fmt.Errorf("--token: %w", err)
		}
		warnings = append(warnings, "--token is visible to every user of this machine in ps: prefer --token-file or $FLINT_TOKEN")
	default:
		c.Token = os.Getenv("FLINT_TOKEN")
		if c.Token != "" {
			if err := checkToken(c.Token); err != nil {
				return nil, fmt.Errorf("$FLINT_TOKEN: %w", err)
			}
		}
	}
	for _, h := range c.AllowHosts {
		if err := checkHostName(h); err != nil {
			return nil, fmt.Errorf("--allow-host %q: %w", h, err)
		}
	}
	if c.Addr == "" {
		return warnings, nil
	}
	w, err := c.Endpoint.Check(c.Token)
	if err != nil {
		return nil, err
	}
	return append(warnings, w...), nil
}

// readTokenFile reads a token file: one token, surrounding white space
// (the final newline) dropped. A file others can read is a warning, not
// an error: secrets mounted by Docker and Kubernetes are 0444 or 0644 by
// default, readable only inside the container.
func readTokenFile(path string) (token, warning string, err error) {
	f, err := os.Open(path)
	if err != nil {
		return "", "", fmt.Errorf("--token-file: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", "", fmt.Errorf("--token-file: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return "", "", fmt.Errorf("--token-file %s: not a regular file", path)
	}
	// A token is short; a large file is a mistake, such as a binary.
	buf, err := io.ReadAll(io.LimitReader(f, maxTokenFile+1))
	if err != nil {
		return "", "", fmt.Errorf("--token-file: %w", err)
	}
	if len(buf) > maxTokenFile {
		return "", "", fmt.Errorf("--token-file %s: larger than %d bytes: want one token", path, maxTokenFile)
	}
	token = strings.TrimSpace(string(buf))
	if err := checkToken(token); err != nil {
		return "", "", fmt.Errorf("--token-file %s: %w", path, err)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		warning = fmt.Sprintf("--token-file %s is readable by group or others (mode %04o): chmod 600 it", path, perm)
	}
	return token, warning, nil
}

// maxTokenFile bounds a token file's size.
const maxTokenFile = 4096

// checkToken accepts printable ASCII without spaces, what an
// Authorization header carries unchanged.
func checkToken(t string) error {
	if t == "" {
		return errors.New("the token is empty")
	}
	for _, r := range t {
		if r <= ' ' || r > '~' {
			return errors.New("the token holds a space, a control or a non-ASCII character")
		}
	}
	return nil
}

// checkHostName accepts what a Host header names: a DNS name or an IP
// address, without port or scheme.
func checkHostName(h string) error {
	if net.ParseIP(h) != nil {
		return nil
	}
	if h == "" || len(h) > 253 {
		return errors.New("want a host name")
	}
	for _, r := range h {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '.' || r == '_') {
			return errors.New("want a host name without port or scheme, such as flint.example.com")
		}
	}
	return nil
}
