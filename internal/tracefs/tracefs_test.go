package tracefs

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func TestMountAt(t *testing.T) {
	defer func(m func(string, string, string, uintptr, string) error) { mount = m }(mount)
	for _, tc := range []struct {
		name     string
		existing bool  // a tracing dir is already mounted
		mountErr error // what mount(2) says
		wantErr  error
		wantText string
	}{
		{name: "already mounted", existing: true},
		{name: "mounts it"},
		{name: "not root", mountErr: unix.EPERM, wantErr: ErrNoPermission, wantText: "tracefs is not mounted at"},
		{name: "no tracefs in kernel", mountErr: unix.ENODEV, wantErr: ErrNotSupported},
		{name: "no mount point", mountErr: unix.ENOENT, wantText: "does not exist"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dirs := []string{filepath.Join(t.TempDir(), "tracing"), filepath.Join(t.TempDir(), "debug-tracing")}
			os.MkdirAll(dirs[0], 0o755)
			if tc.existing {
				os.MkdirAll(filepath.Join(dirs[1], "events"), 0o755)
			}
			mounted := false
			mount = func(source, target, fstype string, flags uintptr, data string) error {
				if source != "nodev" || target != dirs[0] || fstype != "tracefs" {
					t.Errorf("mount(%q, %q, %q)", source, target, fstype)
				}
				if tc.mountErr != nil {
					return tc.mountErr
				}
				mounted = true
				return os.Mkdir(filepath.Join(target, "events"), 0o755)
			}
			dir, err := mountAt(dirs)
			if tc.wantErr != nil || tc.wantText != "" {
				if err == nil || (tc.wantErr != nil && !errors.Is(err, tc.wantErr)) || !strings.Contains(err.Error(), tc.wantText) {
					t.Fatalf("err = %v, want %v containing %q", err, tc.wantErr, tc.wantText)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			want := dirs[0]
			if tc.existing {
				want = dirs[1]
			}
			if dir != want || mounted == tc.existing {
				t.Errorf("dir %s (mounted %v), want %s", dir, mounted, want)
			}
		})
	}
}

func TestMountReal(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount tracefs; CI runs it as root")
	}
	dir, err := Mount()
	if err != nil {
		t.Fatal(err)
	}
	if !HasSyscallEvents(dir) || !HasEvent(dir, "syscalls", "sys_enter_getppid") {
		t.Skipf("kernel has no syscall tracepoints under %s (CONFIG_FTRACE_SYSCALLS)", dir)
	}
	if HasEvent(dir, "syscalls", "sys_enter_no_such_call") {
		t.Error("HasEvent found a syscall that does not exist")
	}
}

func TestParseUprobeEvents(t *testing.T) {
	in := `p:uprobes/p_app_0x1234 /usr/bin/app:0x0000000000001234
r:probe_libc/malloc_ret /lib/x86_64-linux-gnu/libc.so.6:0x00000000000a0d60 arg1=$retval
p:sdt/req /opt/my app/bin:0x10(0x2008)
garbage
p:bad /no/offset
x:odd/kind /bin/true:0x1
`
	got, err := ParseUprobeEvents(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	want := []Uprobe{
		{Event: "uprobes/p_app_0x1234", Path: "/usr/bin/app", Offset: 0x1234},
		{Event: "probe_libc/malloc_ret", Path: "/lib/x86_64-linux-gnu/libc.so.6", Offset: 0xa0d60, Return: true},
	}
	// A path with a space splits the fields: it is skipped, not misread.
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v\nwant %+v", got, want)
	}
}

func TestParseUprobeProfile(t *testing.T) {
	in := "  /usr/bin/app p_app_0x1234                                         1234567\n" +
		"  /lib/x86_64-linux-gnu/libc.so.6 malloc_ret                          0\n" +
		"short line\n  /bin/x ev notanumber\n"
	got, err := ParseUprobeProfile(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]uint64{"p_app_0x1234": 1234567, "malloc_ret": 0}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
}

func TestUprobes(t *testing.T) {
	dir := t.TempDir()
	if got, err := Uprobes(dir); err != nil || got != nil {
		t.Fatalf("no uprobe support: got %v, %v", got, err)
	}
	os.WriteFile(filepath.Join(dir, "uprobe_events"), []byte("p:uprobes/hot /bin/app:0x40\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "uprobe_profile"), []byte("  /bin/app hot 99\n"), 0o644)
	got, err := Uprobes(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := []Uprobe{{Event: "uprobes/hot", Path: "/bin/app", Offset: 0x40, Hits: 99}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v, want %+v", got, want)
	}
}

func FuzzParseUprobeEvents(f *testing.F) {
	f.Add("p:uprobes/p_app_0x1234 /usr/bin/app:0x0000000000001234\n")
	f.Add("r:a/b /x:0x10(0x20) arg=$retval\n")
	f.Fuzz(func(t *testing.T, s string) {
		ParseUprobeEvents(strings.NewReader(s))
	})
}

func FuzzParseUprobeProfile(f *testing.F) {
	f.Add("  /usr/bin/app p_app_0x1234 12\n")
	f.Fuzz(func(t *testing.T, s string) {
		ParseUprobeProfile(strings.NewReader(s))
	})
}
