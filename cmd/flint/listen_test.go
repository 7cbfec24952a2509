package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestListenFlags(t *testing.T) {
	dir := t.TempDir()
	file := func(name, content string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil { // past the umask
			t.Fatal(err)
		}
		return p
	}
	private := file("private", "s3cret-token\n", 0o600)
	shared := file("shared", "  s3cret-token  \n", 0o644)
	empty := file("empty", "\n", 0o600)
	spaced := file("spaced", "two words\n", 0o600)
	large := file("large", strings.Repeat("x", 5000), 0o600)

	for _, tc := range []struct {
		name    string
		args    string
		env     string // $FLINT_TOKEN
		token   string
		warn    string
		wantErr string
	}{
		{name: "default", args: ""},
		{name: "env token", args: "--listen 0.0.0.0:7070", env: "from-env", token: "from-env", warn: "without TLS"},
		{name: "token file", args: "--listen 0.0.0.0:7070 --token-file " + private, env: "from-env", token: "s3cret-token", warn: "without TLS"},
		{name: "token file readable by others", args: "--token-file " + shared, token: "s3cret-token", warn: "readable by group or others (mode 0644): chmod 600 it"},
		{name: "token flag", args: "--token abc", token: "abc", warn: "--token is visible to every user of this machine in ps"},
		{name: "TLS", args: "--listen 10.0.0.5:7070 --token-file " + private + " --tls-cert c.pem --tls-key k.pem", token: "s3cret-token"},
		{name: "allowed hosts", args: "--allow-host flint.internal --allow-host 10.0.0.5 --allow-host ::1"},
		{name: "no API", args: "--listen ="},

		{name: "no token beyond loopback", args: "--listen 0.0.0.0:7070", wantErr: "listen on 0.0.0.0 needs a token (set one with --token-file, or listen on 127.0.0.1)"},
		{name: "token and file", args: "--token abc --token-file " + private, wantErr: "--token and --token-file exclude each other"},
		{name: "missing file", args: "--token-file " + filepath.Join(dir, "none"), wantErr: "--token-file: open"},
		{name: "directory", args: "--token-file " + dir, wantErr: "not a regular file"},
		{name: "empty file", args: "--token-file " + empty, wantErr: "the token is empty"},
		{name: "two words", args: "--token-file " + spaced, wantErr: "the token holds a space"},
		{name: "large file", args: "--token-file " + large, wantErr: "larger than 4096 bytes"},
		{name: "bad env token", env: "tab\tbed", wantErr: "$FLINT_TOKEN: the token holds a space"},
		{name: "empty token flag", args: "--token=", wantErr: "--token: the token is empty"},
		{name: "host with port", args: "--allow-host flint.internal:7070", wantErr: `--allow-host "flint.internal:7070": want a host name without port`},
		{name: "host with scheme", args: "--allow-host http://flint", wantErr: "want a host name without port or scheme"},
		{name: "certificate alone", args: "--tls-cert c.pem", wantErr: "--tls-cert and --tls-key go together"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("FLINT_TOKEN", tc.env)
			args := strings.Fields(strings.ReplaceAll(tc.args, "--listen =", "--listen="))
			c, err := parseAgent(append([]string{"--data-dir", dir}, args...))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.Token != tc.token {
				t.Errorf("token %q, want %q", c.Token, tc.token)
			}
			warns := strings.Join(c.Warnings, "; ")
			if (tc.warn == "") != (warns == "") || !strings.Contains(warns, tc.warn) {
				t.Errorf("warnings %q, want %q", warns, tc.warn)
			}
			if c.API != c.Listen.Endpoint || len(c.AllowHosts) != len(c.Listen.AllowHosts) {
				t.Errorf("agent options %+v, %v not from %+v", c.API, c.AllowHosts, c.Listen)
			}
		})
	}
}
