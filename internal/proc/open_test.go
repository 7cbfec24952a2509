package proc

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestOpenInRoot opens files the way flint opens a process's JIT map and
// mapped files by path: inside the process's root, refusing symbolic
// links and anything but regular files, without blocking on a FIFO.
func TestOpenInRoot(t *testing.T) {
	dir := t.TempDir()
	defer func(r string) { Root = r }(Root)
	Root = dir
	root := filepath.Join(dir, "42", "root")
	secret := filepath.Join(dir, "secret")
	for _, d := range []string{filepath.Join(root, "tmp"), filepath.Join(root, "etc")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write := func(path, body string) {
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(secret, "SECRET-MARKER host file\n")
	write(filepath.Join(root, "tmp", "perf-1.map"), "1000 10 jitted\n")
	write(filepath.Join(root, "etc", "inside"), "inside the root\n")
	for name, target := range map[string]string{
		"perf-2.map": secret,                      // absolute, to the host's file
		"perf-3.map": "../../../secret",           // relative, climbing out
		"perf-4.map": "/etc/inside",               // inside the root, still a link
		"perf-5.map": "/proc/self/root/" + secret, // through a magic link
	} {
		if err := os.Symlink(target, filepath.Join(root, "tmp", name)); err != nil {
			t.Fatal(err)
		}
	}
	if err := unix.Mkfifo(filepath.Join(root, "tmp", "perf-6.map"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		path string
		want string // contents, or "" for an error
		err  error
	}{
		{"/tmp/perf-1.map", "1000 10 jitted\n", nil},
		{"tmp/perf-1.map", "1000 10 jitted\n", nil},
		{"/../../../../etc/inside", "inside the root\n", nil}, // ".." stops at the root
		{"/tmp/perf-2.map", "", unix.ELOOP},
		{"/tmp/perf-3.map", "", unix.ELOOP},
		{"/tmp/perf-4.map", "", unix.ELOOP},
		{"/tmp/perf-5.map", "", unix.ELOOP},
		{"/tmp/perf-6.map", "", ErrNotRegular},
		{"/tmp", "", ErrNotRegular},
		{"/tmp/missing", "", os.ErrNotExist},
	} {
		t.Run(tc.path, func(t *testing.T) {
			f, err := OpenInRoot(42, tc.path)
			if tc.err != nil {
				if !errors.Is(err, tc.err) {
					t.Errorf("OpenInRoot(%q) = %v, want %v", tc.path, err, tc.err)
				}
				if f != nil {
					b, _ := io.ReadAll(f)
					f.Close()
					if strings.Contains(string(b), "SECRET-MARKER") {
						t.Errorf("read the host's file through %q", tc.path)
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("OpenInRoot(%q): %v", tc.path, err)
			}
			defer f.Close()
			if b, err := io.ReadAll(f); err != nil || string(b) != tc.want {
				t.Errorf("OpenInRoot(%q) read %q, %v; want %q", tc.path, b, err, tc.want)
			}
		})
	}
}
