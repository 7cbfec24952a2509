package doctor

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"math"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/flint-dev/flint/internal/proc"
)

// CPULimit is how much CPU a process may use.
type CPULimit struct {
	// Quota is the CPU bandwidth limit in CPUs (quota/period), the
	// tightest of the process's cgroup and its ancestors; 0: no limit.
	Quota float64
	// QuotaCgroup is the cgroup that sets Quota.
	QuotaCgroup string
	// LeafQuota is the limit of the process's own cgroup, the only one the
	// Go runtime reads; 0: none.
	LeafQuota float64
	// CPUs is how many CPUs the process may run on (its affinity mask,
	// which includes its cpuset); 0 when unknown.
	CPUs int
	// CgroupVersion of the cpu controller: 1 or 2; 0 when not found.
	CgroupVersion int
	// Periods and Throttled count the limiting cgroup's CFS periods during
	// the recording, and those in which it was throttled; -1 if unknown.
	Periods, Throttled int64

	statFile                     string // cpu.stat of the limiting cgroup
	startPeriods, startThrottled int64  // its counters when read; -1: unknown
}

// Limit is the CPUs the process can use at most: the tighter of Quota and
// CPUs; 0 when neither is known.
func (l *CPULimit) Limit() float64 {
	switch {
	case l.Quota > 0 && l.CPUs > 0:
		return math.Min(l.Quota, float64(l.CPUs))
	case l.Quota > 0:
		return l.Quota
	}
	return float64(l.CPUs)
}

// mountinfo is the mount table that locates the cgroup hierarchies (flint's
// own view: /proc/PID/cgroup paths are relative to the reader's cgroup
// namespace); tests point it elsewhere.
var mountinfo = "/proc/self/mountinfo"

// readCPULimit finds pid's CPU bandwidth limit in its cgroups (v1
// cpu.cfs_quota_us/cpu.cfs_period_us or v2 cpu.max), walking up to the
// root, and the CPUs it may run on.
func readCPULimit(pid int) (*CPULimit, error) {
	l := &CPULimit{Periods: -1, Throttled: -1, startPeriods: -1}
	if status, err := os.ReadFile(fmt.Sprintf("%s/%d/status", proc.Root, pid)); err == nil {
		if list, ok := statusField(status, "Cpus_allowed_list"); ok {
			l.CPUs = countCPUs(list)
		}
	}
	cg, err := os.ReadFile(fmt.Sprintf("%s/%d/cgroup", proc.Root, pid))
	if err != nil {
		return nil, noProcess(pid, err)
	}
	mi, err := os.ReadFile(mountinfo)
	if err != nil {
		return nil, fmt.Errorf("read mount table: %w", err)
	}
	dir, version, ok := cpuCgroupDir(string(cg), string(mi))
	if !ok {
		return l, nil // no cpu controller: no quota
	}
	l.CgroupVersion = version
	mount := dir.mount
	for d, leaf := dir.path, true; ; leaf = false {
		quota, ok := readQuota(filepath.Join(mount, d), version)
		if ok && (l.Quota == 0 || quota < l.Quota) {
			l.Quota, l.QuotaCgroup = quota, d
			l.statFile = filepath.Join(mount, d, "cpu.stat")
		}
		if ok && leaf {
			l.LeafQuota = quota
		}
		if d == "/" || d == "." || d == "" {
			break
		}
		d = path.Dir(d)
	}
	if per, thr, err := l.throttling(); err == nil {
		l.startPeriods, l.startThrottled = per, thr
	}
	return l, nil
}

// cgroupDir is a cgroup: its hierarchy's mount point and its path there.
type cgroupDir struct{ mount, path string }

// cpuCgroupDir finds the cgroup holding the cpu controller for a process,
// from its /proc/PID/cgroup and the mount table: a v1 hierarchy with the
// cpu controller if one is mounted, else the v2 hierarchy.
func cpuCgroupDir(cgroup, mountinfo string) (cgroupDir, int, bool) {
	var v1Path, v2Path string
	haveV2 := false
	for line := range strings.Lines(cgroup) {
		parts := strings.SplitN(strings.TrimSpace(line), ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[1] == "" && parts[0] == "0" {
			v2Path, haveV2 = parts[2], true
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			if c == "cpu" {
				v1Path = parts[2]
			}
		}
	}
	var v1Mount, v1Root, v2Mount, v2Root string
	sc := bufio.NewScanner(strings.NewReader(mountinfo))
	for sc.Scan() {
		// id parent major:minor root mountpoint opts [optional...] - fstype source superopts
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		if !ok {
			continue
		}
		f, g := strings.Fields(pre), strings.Fields(post)
		if len(f) < 5 || len(g) < 3 {
			continue
		}
		root, mnt := unescapeMount(f[3]), unescapeMount(f[4])
		switch g[0] {
		case "cgroup":
			for _, o := range strings.Split(g[2], ",") {
				if o == "cpu" && v1Mount == "" {
					v1Mount, v1Root = mnt, root
				}
			}
		case "cgroup2":
			if v2Mount == "" {
				v2Mount, v2Root = mnt, root
			}
		}
	}
	rel := func(p, root string) string {
		if root != "/" {
			p = strings.TrimPrefix(p, root)
		}
		if p == "" {
			p = "/"
		}
		return p
	}
	switch {
	case v1Path != "" && v1Mount != "":
		return cgroupDir{v1Mount, rel(v1Path, v1Root)}, 1, true
	case haveV2 && v2Mount != "" && fileExists(filepath.Join(v2Mount, "cgroup.controllers")):
		return cgroupDir{v2Mount, rel(v2Path, v2Root)}, 2, true
	}
	return cgroupDir{}, 0, false
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// readQuota reads one cgroup's CPU bandwidth limit in CPUs; false when it
// has none.
func readQuota(dir string, version int) (float64, bool) {
	if version == 1 {
		q, err1 := readInt(filepath.Join(dir, "cpu.cfs_quota_us"))
		p, err2 := readInt(filepath.Join(dir, "cpu.cfs_period_us"))
		if err1 != nil || err2 != nil || q <= 0 || p <= 0 {
			return 0, false
		}
		return float64(q) / float64(p), true
	}
	b, err := os.ReadFile(filepath.Join(dir, "cpu.max"))
	if err != nil {
		return 0, false
	}
	return parseCPUMax(string(b))
}

// parseCPUMax parses cgroup v2 cpu.max, "QUOTA PERIOD" or "max PERIOD".
func parseCPUMax(s string) (float64, bool) {
	f := strings.Fields(s)
	if len(f) != 2 || f[0] == "max" {
		return 0, false
	}
	q, err1 := strconv.ParseInt(f[0], 10, 64)
	p, err2 := strconv.ParseInt(f[1], 10, 64)
	if err1 != nil || err2 != nil || q <= 0 || p <= 0 {
		return 0, false
	}
	return float64(q) / float64(p), true
}

func readInt(p string) (int64, error) {
	b, err := os.ReadFile(p)
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
}

// countCPUs counts the CPUs of a list such as "0-3,6".
func countCPUs(list string) int {
	n := 0
	for _, part := range strings.Split(strings.TrimSpace(list), ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil {
			return 0
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil || b < a {
				return 0
			}
		}
		n += b - a + 1
	}
	return n
}

// throttling reads the limiting cgroup's CFS period counters.
func (l *CPULimit) throttling() (periods, throttled int64, err error) {
	if l.statFile == "" {
		return 0, 0, errors.New("no CPU quota")
	}
	b, err := os.ReadFile(l.statFile)
	if err != nil {
		return 0, 0, err
	}
	p, ok1 := statValue(b, "nr_periods")
	t, ok2 := statValue(b, "nr_throttled")
	if !ok1 || !ok2 {
		return 0, 0, errors.New("cpu.stat lacks nr_periods")
	}
	return p, t, nil
}

func statValue(b []byte, name string) (int64, bool) {
	for line := range bytes.Lines(b) {
		k, v, ok := strings.Cut(strings.TrimSpace(string(line)), " ")
		if ok && k == name {
			n, err := strconv.ParseInt(v, 10, 64)
			return n, err == nil
		}
	}
	return 0, false
}
