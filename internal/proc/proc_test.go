package proc

import (
	"errors"
	"io"
	"os"
	"strings"
	"testing"
)

func TestParseStat(t *testing.T) {
	stat := "4242 (a) b) c) R 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 987654 20 21\n"
	comm, start, err := parseStat([]byte(stat))
	if err != nil || comm != "a) b) c" || start != 987654 {
		t.Errorf("parseStat = %q, %d, %v", comm, start, err)
	}
	for _, bad := range []string{"", "1 (x", "1 (x) R 1 2", "1 (x) R 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 zz"} {
		if _, _, err := parseStat([]byte(bad)); err == nil {
			t.Errorf("parseStat(%q) succeeded", bad)
		}
	}
}

func TestParseMaps(t *testing.T) {
	maps := `55d0c0a00000-55d0c0a02000 r--p 00000000 fe:00 247026                     /usr/bin/cat
55d0c0a02000-55d0c0a07000 r-xp 00002000 fe:00 247026                     /usr/bin/cat
7f0000000000-7f0000001000 r-xp 00000000 00:00 0 
7f0000002000-7f0000003000 r-xp 00001000 103:02 42                         /tmp/my prog (deleted)
7ffd1000000-7ffd1002000 r-xp 00000000 00:00 0                          [vdso]
garbage line
`
	got := ParseMaps([]byte(maps))
	if len(got) != 4 {
		t.Fatalf("got %d mappings, want 4: %+v", len(got), got)
	}
	if m := got[0]; m.Start != 0x55d0c0a02000 || m.Offset != 0x2000 || m.Path != "/usr/bin/cat" || m.Inode != 247026 || m.Dev != 0xfe<<20 {
		t.Errorf("first mapping %+v", m)
	}
	if got[1].Path != "" {
		t.Errorf("anonymous mapping path %q", got[1].Path)
	}
	if m := got[2]; m.Path != "/tmp/my prog" || !m.Deleted || m.Dev != 0x103<<20|2 {
		t.Errorf("deleted mapping %+v", m)
	}
	if got[3].Path != "[vdso]" {
		t.Errorf("vdso mapping %+v", got[3])
	}
	p := &Process{Mappings: got}
	if m := p.Find(0x55d0c0a03000); m != &p.Mappings[0] {
		t.Errorf("Find in first mapping = %v", m)
	}
	if m := p.Find(0x55d0c0a07000); m != nil {
		t.Errorf("Find past end = %+v", m)
	}
}

func TestParseContainer(t *testing.T) {
	id := strings.Repeat("3f2a", 16)
	for _, tc := range []struct{ name, cgroup, container, pod string }{
		{"docker v1", "4:memory:/docker/" + id + "\n", id, ""},
		{"docker systemd", "0::/system.slice/docker-" + id + ".scope\n", id, ""},
		{"containerd k8s systemd", "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1b2c3d4e_1111_2222_3333_444455556666.slice/cri-containerd-" + id + ".scope\n", id, "1b2c3d4e-1111-2222-3333-444455556666"},
		{"cri-o", "0::/kubepods.slice/kubepods-pod1b2c3d4e_1111_2222_3333_444455556666.slice/crio-" + id + ".scope\n", id, "1b2c3d4e-1111-2222-3333-444455556666"},
		{"k8s cgroupfs", "3:cpu:/kubepods/burstable/pod1b2c3d4e-1111-2222-3333-444455556666/" + id + "\n", id, "1b2c3d4e-1111-2222-3333-444455556666"},
		{"podman", "0::/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-" + id + ".scope/container\n", id, ""},
		{"none", "0::/user.slice/session-1.scope\n4:memory:/process_api/384c80b7fc217963b83682aed1dee72f\n", "", ""},
		{"malformed", "nonsense\n::\n", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, p := ParseContainer(tc.cgroup)
			if c != tc.container || p != tc.pod {
				t.Errorf("ParseContainer = %q, %q; want %q, %q", c, p, tc.container, tc.pod)
			}
		})
	}
}

func TestReadSelf(t *testing.T) {
	p, err := Read(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	exe, _ := os.Executable()
	if p.Exe != exe || p.StartTime == 0 || p.Comm == "" {
		t.Errorf("Read(self) = exe %q start %d comm %q; want exe %q", p.Exe, p.StartTime, p.Comm, exe)
	}
	var text *Mapping
	for i := range p.Mappings {
		if p.Mappings[i].Path == exe {
			text = &p.Mappings[i]
		}
	}
	if text == nil {
		t.Fatalf("no executable mapping of %s in %+v", exe, p.Mappings)
	}
	f, err := Open(p.PID, text)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	magic := make([]byte, 4)
	if _, err := io.ReadFull(f, magic); err != nil || string(magic) != "\x7fELF" {
		t.Errorf("opened mapping starts %q, %v", magic, err)
	}
}

func TestReadMissing(t *testing.T) {
	if _, err := Read(1 << 30); !errors.Is(err, ErrNoProcess) {
		t.Errorf("Read(missing) = %v, want ErrNoProcess", err)
	}
}

func FuzzParseMaps(f *testing.F) {
	f.Add([]byte("55d0c0a02000-55d0c0a07000 r-xp 00002000 fe:00 247026 /usr/bin/cat\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, m := range ParseMaps(b) {
			if m.End <= m.Start {
				t.Errorf("empty mapping %+v", m)
			}
		}
		parseStat(b)
		ParseContainer(string(b))
	})
}
