package doctor

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/flint-dev/flint/internal/proc"
)

const mountinfoV1 = `22 1 0:21 / /sys rw,nosuid shared:7 - sysfs sysfs rw
30 22 0:26 / /sys/fs/cgroup ro shared:9 - tmpfs tmpfs ro,mode=755
33 30 0:29 / /sys/fs/cgroup/cpu,cpuacct rw shared:12 - cgroup cgroup rw,cpu,cpuacct
34 30 0:30 / /sys/fs/cgroup/memory rw shared:13 - cgroup cgroup rw,memory
35 30 0:31 / /sys/fs/cgroup/unified rw shared:14 - cgroup2 cgroup2 rw
`

const mountinfoV2 = `22 1 0:21 / /sys rw,nosuid shared:7 - sysfs sysfs rw
30 22 0:26 / /sys/fs/cgroup rw shared:9 - cgroup2 cgroup2 rw,nsdelegate
`

func TestCPUCgroupDir(t *testing.T) {
	for _, tc := range []struct {
		name, cgroup, mountinfo string
		want                    cgroupDir
		version                 int
	}{
		{"v1", "12:memory:/docker/abc\n4:cpu,cpuacct:/docker/abc\n0::/system.slice\n", mountinfoV1,
			cgroupDir{"/sys/fs/cgroup/cpu,cpuacct", "/docker/abc"}, 1},
		{"v1 bind mounted below its root", "4:cpu,cpuacct:/kubepods/pod1/c1\n",
			strings.Replace(mountinfoV1, "0:29 / /sys/fs/cgroup/cpu,cpuacct", "0:29 /kubepods /sys/fs/cgroup/cpu,cpuacct", 1),
			cgroupDir{"/sys/fs/cgroup/cpu,cpuacct", "/pod1/c1"}, 1},
		{"v1 spaces escaped", "4:cpu:/a b\n", "33 30 0:29 / /mnt/my\\040cgroups rw - cgroup cgroup rw,cpu\n",
			cgroupDir{"/mnt/my cgroups", "/a b"}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, version, ok := cpuCgroupDir(tc.cgroup, tc.mountinfo)
			if !ok || got != tc.want || version != tc.version {
				t.Errorf("got %+v v%d %v, want %+v v%d", got, version, ok, tc.want, tc.version)
			}
		})
	}
	if _, _, ok := cpuCgroupDir("0::/x\n", "garbage\n"); ok {
		t.Error("found a cgroup without a mount")
	}
}

func TestParseCPUMax(t *testing.T) {
	for in, want := range map[string]float64{"max 100000\n": 0, "50000 100000\n": 0.5, "250000 100000": 2.5, "x y": 0, "": 0, "-1 100000": 0} {
		if got, _ := parseCPUMax(in); got != want {
			t.Errorf("parseCPUMax(%q) = %v, want %v", in, got, want)
		}
	}
}

func TestCountCPUs(t *testing.T) {
	for in, want := range map[string]int{"0-3,6": 5, "0": 1, "0-63\n": 64, "": 0, "3-1": 0, "a": 0} {
		if got := countCPUs(in); got != want {
			t.Errorf("countCPUs(%q) = %d, want %d", in, got, want)
		}
	}
}

// TestReadCPULimit walks a fake cgroup v2 tree whose parent is tighter
// than the process's own cgroup.
func TestReadCPULimit(t *testing.T) {
	root := t.TempDir()
	procDir := filepath.Join(root, "proc")
	cg := filepath.Join(root, "cgroup")
	write := func(path, content string) {
		os.MkdirAll(filepath.Dir(path), 0o755)
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(procDir, "7", "cgroup"), "0::/kubepods/pod1/c1\n")
	write(filepath.Join(procDir, "7", "status"), "Name:\tapp\nCpus_allowed_list:\t0-7\n")
	write(filepath.Join(procDir, "7", "stat"), "7 (app) S 1 7 7 0 -1 0 0 0 0 0 10 5 0 0 20 0 1 0 99 0 0\n")
	write(filepath.Join(cg, "cgroup.controllers"), "cpu memory\n")
	write(filepath.Join(cg, "kubepods", "cpu.max"), "max 100000\n")
	write(filepath.Join(cg, "kubepods", "pod1", "cpu.max"), "150000 100000\n")
	write(filepath.Join(cg, "kubepods", "pod1", "cpu.stat"), "usage_usec 10\nnr_periods 40\nnr_throttled 10\n")
	write(filepath.Join(cg, "kubepods", "pod1", "c1", "cpu.max"), "400000 100000\n")
	mi := filepath.Join(root, "mountinfo")
	write(mi, "30 22 0:26 / "+cg+" rw - cgroup2 cgroup2 rw\n")
	defer func(r, m string) { proc.Root, mountinfo = r, m }(proc.Root, mountinfo)
	proc.Root, mountinfo = procDir, mi

	l, err := readCPULimit(7)
	if err != nil {
		t.Fatal(err)
	}
	if l.Quota != 1.5 || l.QuotaCgroup != "/kubepods/pod1" || l.LeafQuota != 4 || l.CPUs != 8 || l.CgroupVersion != 2 || l.Limit() != 1.5 {
		t.Errorf("limit %+v", l)
	}
	write(filepath.Join(cg, "kubepods", "pod1", "cpu.stat"), "nr_periods 140\nnr_throttled 60\n")
	p := &Process{PID: 7, StartTime: 99, Limit: l}
	finishProcess(p, usage{}, time.Second)
	if l.Periods != 100 || l.Throttled != 50 {
		t.Errorf("throttling: %d of %d periods, want 50 of 100", l.Throttled, l.Periods)
	}
	if want := "the parent cgroup /kubepods/pod1"; !strings.Contains(mustReason(l), want) {
		t.Errorf("reason %q lacks %q", mustReason(l), want)
	}
}

func mustReason(l *CPULimit) string {
	r, _ := gomaxprocsReason(&Process{Go: &GoInfo{Version: "go1.26.0"}, Limit: l}, 2)
	return r
}

func TestParseStat(t *testing.T) {
	stat := "4242 (my (odd) prog) S 1 4242 4242 0 -1 4194560 100 0 0 0 150 50 0 0 20 0 3 0 123456 1000 100 18446744073709551615\n"
	start, cpu, err := parseStat([]byte(stat))
	if err != nil || start != 123456 || cpu != 2*time.Second {
		t.Errorf("got %d, %v, %v; want 123456, 2s", start, cpu, err)
	}
	for _, bad := range []string{"", "1 (x) S 1 2", "1 (x) S 1 2 3 4 5 6 7 8 9 10 11 x y 14 15 16 17 18 19 20 21"} {
		if _, _, err := parseStat([]byte(bad)); err == nil {
			t.Errorf("parsed %q", bad)
		}
	}
}

func FuzzParseStat(f *testing.F) {
	f.Add([]byte("4242 (prog) S 1 4242 4242 0 -1 4194560 100 0 0 0 150 50 0 0 20 0 3 0 123456 1000 100\n"))
	f.Fuzz(func(t *testing.T, b []byte) { parseStat(b) })
}

func FuzzCPUCgroupDir(f *testing.F) {
	f.Add("4:cpu,cpuacct:/docker/abc\n0::/x\n", mountinfoV1)
	f.Add("0::/a\n", mountinfoV2)
	f.Fuzz(func(t *testing.T, cgroup, mi string) {
		cpuCgroupDir(cgroup, mi)
		unescapeMount(mi)
	})
}

func FuzzParseCPUMax(f *testing.F) {
	f.Add("50000 100000")
	f.Fuzz(func(t *testing.T, s string) {
		parseCPUMax(s)
		countCPUs(s)
	})
}
