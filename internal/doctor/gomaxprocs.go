package doctor

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// gomaxprocs-quota: a Go program running more Ps (GOMAXPROCS) than the
// CPUs it may use. The scheduler keeps that many threads looking for work,
// the GC starts a quarter of them as mark workers and runs idle workers on
// the rest, and the kernel throttles the cgroup once its quota is spent
// with all of them waiting: CPU goes to the runtime, latency to throttling.
//
// The limit is the tighter of the CPU bandwidth quota (cgroup v1
// cpu.cfs_quota_us/cpu.cfs_period_us or v2 cpu.max, the tightest over the
// process's cgroup and its ancestors) and the CPUs its affinity mask (and
// cpuset) allows. It fires when GOMAXPROCS, read from runtime.gomaxprocs in
// the process's memory, exceeds what Go 1.25's own default would be, the
// number of allowed CPUs capped at ceil(quota) but not below 2 (the
// runtime's floor), and the process used at least GOMAXPROCSMinCPU. The
// evidence says why GOMAXPROCS is what it is: a GOMAXPROCS environment
// variable, a Go older than 1.25, a go.mod `go` line of 1.24 or older (the
// DefaultGODEBUG build setting carries containermaxprocs=0), a GODEBUG
// setting, a limit set on a parent cgroup (Go reads only its own), or else a
// runtime.GOMAXPROCS call.
func gomaxprocsQuota(d *Data, t Thresholds) []Finding {
	var out []Finding
	for pid, p := range d.Processes {
		if p.Go == nil || p.Go.GOMAXPROCS == 0 || p.Limit == nil {
			continue
		}
		l := p.Limit
		limit := l.Limit()
		if limit == 0 {
			continue
		}
		want := expectedGOMAXPROCS(l)
		n := p.Go.GOMAXPROCS
		cpu := d.processCPU(pid)
		if n <= want || cpu < t.GOMAXPROCSMinCPU {
			continue
		}
		f := Finding{
			ID: "gomaxprocs-quota", PID: pid, Comm: p.Comm,
			Summary: fmt.Sprintf("GOMAXPROCS is %d but %s may use only %s CPU", n, p.Comm, trimFloat(limit)),
		}
		reason, fix := gomaxprocsReason(p, want)
		f.Evidence = append(f.Evidence,
			Evidence{Name: "gomaxprocs", Value: float64(n),
				Text: fmt.Sprintf("GOMAXPROCS = %d (%s, read from its memory)", n, p.Go.GOMAXPROCSFrom)},
			Evidence{Name: "cpu_limit", Value: limit, Unit: "CPU", Text: limitText(l)},
			Evidence{Name: "reason", Text: reason},
		)
		b := runtimeBreakdown(d, pid)
		overhead := b.share(classScheduler) + b.share(classGC)
		if b.total > 0 {
			f.Evidence = append(f.Evidence, Evidence{Name: "scheduler_gc_share", Value: overhead, Unit: "ratio",
				Text: fmt.Sprintf("scheduler %s and GC %s of its CPU samples", pct(b.share(classScheduler)), pct(b.share(classGC)))})
		}
		f.Evidence = append(f.Evidence, Evidence{Name: "process_cpu", Value: cpu, Unit: "CPU",
			Text: fmt.Sprintf("the process used %.2f CPU", cpu)})
		if p.CtxSwitches >= 0 && d.Duration > 0 {
			r := float64(p.CtxSwitches) / d.Duration.Seconds()
			f.Evidence = append(f.Evidence, Evidence{Name: "context_switches_per_second", Value: r, Unit: "1/s",
				Text: fmt.Sprintf("%s context switches across its %d threads", rate(r), p.Threads)})
		}
		if l.Periods > 0 {
			s := float64(l.Throttled) / float64(l.Periods)
			f.Evidence = append(f.Evidence, Evidence{Name: "throttled_share", Value: s, Unit: "ratio",
				Text: fmt.Sprintf("throttled in %s of %d CFS periods", pct(s), l.Periods)})
		}
		f.Fix = fix
		f.Cost = overhead * cpu
		// Wrong whatever it costs now: the next GC cycle or burst of
		// goroutines pays for it.
		f.Severity = severityOf(f.Cost, overhead)
		if f.Severity == Info {
			f.Severity = Warning
		}
		out = append(out, f)
	}
	return out
}

// expectedGOMAXPROCS is the default Go 1.25 and later would choose for a
// limit: the allowed CPUs, capped at ceil(quota) but not below 2.
func expectedGOMAXPROCS(l *CPULimit) int {
	n := l.CPUs
	if l.Quota > 0 {
		q := max(2, int(math.Ceil(l.Quota)))
		if n == 0 || q < n {
			n = q
		}
	}
	return n
}

// gomaxprocsReason explains a GOMAXPROCS above the limit and says how to
// fix it.
func gomaxprocsReason(p *Process, want int) (reason, fix string) {
	g := p.Go
	set := fmt.Sprintf("GOMAXPROCS=%d", want)
	if v, ok := g.Env["GOMAXPROCS"]; ok {
		return fmt.Sprintf("GOMAXPROCS=%s is set in its environment", v),
			fmt.Sprintf("Set GOMAXPROCS to the CPU limit (%s) or remove it from the environment (Go 1.25+ then follows the quota).", set)
	}
	if g.Automaxprocs {
		return "go.uber.org/automaxprocs is linked in and set it (runtime.GOMAXPROCS)",
			fmt.Sprintf("Check automaxprocs' view of the limit (it reads only the process's own cgroup), or set %s.", set)
	}
	if olderThan(g.Version, 1, 25) {
		return fmt.Sprintf("built with %s, whose runtime sets GOMAXPROCS to the CPUs of the machine and ignores the CPU quota (Go 1.25 reads it)", g.Version),
			fmt.Sprintf("Rebuild with Go 1.25 or later (and go 1.25 in go.mod), or set %s, or import go.uber.org/automaxprocs.", set)
	}
	if strings.Contains(g.DefaultGODEBUG, "containermaxprocs=0") {
		return "its go.mod says go 1.24 or older (the build's DefaultGODEBUG has containermaxprocs=0), so the runtime ignores the CPU quota",
			fmt.Sprintf("Raise the go line of go.mod to 1.25 or later (or add //go:debug containermaxprocs=1 to package main), or set %s.", set)
	}
	if strings.Contains(g.Env["GODEBUG"], "containermaxprocs=0") {
		return "GODEBUG=containermaxprocs=0 is set in its environment, so the runtime ignores the CPU quota",
			fmt.Sprintf("Remove containermaxprocs=0 from GODEBUG, or set %s.", set)
	}
	if l := p.Limit; l.Quota > 0 && (l.LeafQuota == 0 || l.Quota < l.LeafQuota) {
		return fmt.Sprintf("the quota is set on the parent cgroup %s; the Go runtime reads only the process's own cgroup", l.QuotaCgroup),
			fmt.Sprintf("Set %s, or set the CPU limit on the process's own cgroup.", set)
	}
	return "the program (or a library) calls runtime.GOMAXPROCS with a larger value",
		fmt.Sprintf("Find the runtime.GOMAXPROCS call and derive its value from the CPU limit, or set %s.", set)
}

// olderThan reports whether a Go version string ("go1.24.3", "go1.25rc1")
// is older than major.minor; unknown versions are not.
func olderThan(v string, major, minor int) bool {
	v, ok := strings.CutPrefix(v, "go")
	if !ok {
		return false
	}
	parts := strings.SplitN(v, ".", 3)
	if len(parts) < 2 {
		return false
	}
	ma, err1 := strconv.Atoi(parts[0])
	mi, err2 := strconv.Atoi(strings.TrimRightFunc(parts[1], func(r rune) bool { return r < '0' || r > '9' }))
	if err1 != nil || err2 != nil {
		return false
	}
	return ma < major || ma == major && mi < minor
}

func limitText(l *CPULimit) string {
	var parts []string
	if l.Quota > 0 {
		file := "cpu.max"
		if l.CgroupVersion == 1 {
			file = "cpu.cfs_quota_us/cpu.cfs_period_us"
		}
		parts = append(parts, fmt.Sprintf("CPU quota %s CPU (cgroup %s, %s)", trimFloat(l.Quota), l.QuotaCgroup, file))
	}
	if l.CPUs > 0 {
		parts = append(parts, fmt.Sprintf("%d CPUs allowed by its affinity", l.CPUs))
	}
	return strings.Join(parts, ", ")
}

// trimFloat formats a CPU count without needless decimals: 1, 1.5, 0.25.
func trimFloat(f float64) string { return strconv.FormatFloat(math.Round(f*100)/100, 'f', -1, 64) }
