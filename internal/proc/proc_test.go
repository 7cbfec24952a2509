package proc

import (
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
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

// TestReadKnownExe names the executable by the mapping at the start of
// its text, as the sampler's announcement gives it (here from
// /proc/self/stat's startcode), and by /proc/PID/exe without it.
func TestReadKnownExe(t *testing.T) {
	stat, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
	startCode, err := strconv.ParseUint(f[23], 10, 64) // field 26
	if err != nil || startCode == 0 {
		t.Fatalf("startcode %q: %v", f[23], err)
	}
	exe, _ := os.Executable()
	for _, text := range []uint64{startCode, 0, 1} {
		p, err := ReadKnown(os.Getpid(), Known{Comm: "self", StartTime: 1, ExeText: text})
		if err != nil {
			t.Fatal(err)
		}
		if p.Exe != exe || p.Comm != "self" || p.StartTime != 1 {
			t.Errorf("ExeText %#x: exe %q comm %q start %d; want exe %q", text, p.Exe, p.Comm, p.StartTime, exe)
		}
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

// TestQueryMapsMatchesText checks that PROCMAP_QUERY and /proc/PID/maps
// give the same executable mappings, a deleted file's included.
func TestQueryMapsMatchesText(t *testing.T) {
	// A deleted executable mapping: a copy of this test binary, mapped
	// executable, then removed.
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "mapped")
	if err := os.WriteFile(path, b[:4096], 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	mem, err := unix.Mmap(int(f.Fd()), 0, 4096, unix.PROT_READ|unix.PROT_EXEC, unix.MAP_PRIVATE)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(mem)
	os.Remove(path)

	fd, err := unix.Open("/proc/self/maps", unix.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	queried, err := queryMaps(fd, make([]byte, unix.PathMax))
	if errors.Is(err, errNoQuery) {
		t.Skip("kernel lacks PROCMAP_QUERY (Linux 6.11)")
	}
	if err != nil {
		t.Fatal(err)
	}
	text, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Fatal(err)
	}
	var parsed []Mapping
	for _, m := range ParseMaps(text) {
		if m.Path != "[vsyscall]" { // not a VMA: PROCMAP_QUERY does not list it
			parsed = append(parsed, m)
		}
	}
	if !slices.Equal(queried, parsed) {
		t.Errorf("PROCMAP_QUERY gave\n%+v\n/proc/self/maps gave\n%+v", queried, parsed)
	}
	deleted := false
	for _, m := range queried {
		deleted = deleted || m.Deleted && m.Path == path
	}
	if !deleted {
		t.Errorf("no deleted mapping of %s in %+v", path, queried)
	}
}

// TestReadText reads a process from files that answer no ioctl, as
// /proc/PID/maps does before Linux 6.11: the maps are parsed as text, in
// one read however long, and the namespace PID is read only for a process
// with anonymous executable memory.
func TestReadText(t *testing.T) {
	root := t.TempDir()
	defer func(r string) { Root = r }(Root)
	Root = root
	lib := "7f0000000000-7f0000001000 r-xp 00001000 fe:00 42 /usr/lib/libfoo.so\n"
	filler := "7e0000000000-7e0000001000 rw-p 00000000 00:00 0 \n"
	for _, tc := range []struct {
		name, maps string
		wantMaps   int
		wantNSPID  int
	}{
		{"file-backed", lib, 1, 7},
		{"longer than the buffer", strings.Repeat(filler, 2000) + lib, 1, 7},
		{"JIT code", lib + "7f0000002000-7f0000003000 r-xp 00000000 00:00 0 \n", 2, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(root, "7")
			os.MkdirAll(dir, 0o755)
			files := map[string]string{
				"stat":   "7 (app) S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 4242 20\n",
				"maps":   tc.maps,
				"status": "Name:\tapp\nNSpid:\t7\t3\n",
				"cgroup": "0::/system.slice/app.service\n",
			}
			for name, body := range files {
				if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			p, err := Read(7)
			if err != nil {
				t.Fatal(err)
			}
			if len(p.Mappings) != tc.wantMaps || p.Mappings[0].Path != "/usr/lib/libfoo.so" || p.Mappings[0].Offset != 0x1000 {
				t.Errorf("mappings %+v, want %d starting with libfoo.so at offset 0x1000", p.Mappings, tc.wantMaps)
			}
			if p.NSPID != tc.wantNSPID || p.StartTime != 4242 || p.Comm != "app" || p.Cgroup != "/system.slice/app.service" {
				t.Errorf("Read = %+v", p)
			}
		})
	}
}

// TestReadKnownAllocs bounds what reading a new process of known binaries
// allocates, however many files it maps: the snapshot, its mappings, and
// no path that an earlier read had.
func TestReadKnownAllocs(t *testing.T) {
	cmd := exec.Command("python3", "-c", "import json, decimal, random, sys; print(flush=True); sys.stdin.read()")
	stdin, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Skipf("needs python3: %v", err)
	}
	defer func() { stdin.Close(); cmd.Wait() }()
	if _, err := out.Read(make([]byte, 1)); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	p, err := ReadKnown(pid, Known{Comm: "python3", StartTime: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Mappings) < 10 {
		t.Fatalf("python3 has %d executable mappings, want its libraries'", len(p.Mappings))
	}
	allocs := testing.AllocsPerRun(20, func() {
		ReadKnown(pid, Known{Comm: "python3", StartTime: 1, ExeText: p.Mappings[0].Start})
	})
	if allocs > 7 {
		t.Errorf("%v allocations reading a process of %d executable mappings, want at most 7", allocs, len(p.Mappings))
	}
}
