package doctor

import (
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/flint-dev/flint/internal/profile"
)

// probe-overhead: a uprobe on a function called so often that the probes
// cost more than the function. Every hit traps into the kernel (an int3,
// then the handler, then stepping over the probed instruction) whatever
// the attached program does: docs/BENCHMARKS.md measures the trap here.
//
// For each uprobe attached on the node (BPF links to uprobes, listed with
// their program's run count and run time, BPF statistics enabled during the
// recording; and tracefs uprobe events with their hit counts), the cost is
// estimated as hits per second × (UprobeHitCost + the program's mean run
// time); UprobeHitCost defaults to the trap cost measured on the kind of VM
// flint is developed on (docs/BENCHMARKS.md). The probed process's CPU
// samples in uprobe handling (the int3 and single-step traps, the uprobe
// handlers, the [uprobes] page) times its CPU measure the cost directly;
// the larger of the two counts. It fires when that reaches ProbeCost (0.05
// CPU).
func probeOverhead(d *Data, t Thresholds) []Finding {
	if len(d.Probes) == 0 || d.Duration <= 0 {
		return nil
	}
	handling := uprobeHandling(d)
	var out []Finding
	secs := d.Duration.Seconds()
	for _, pr := range d.Probes {
		if pr.Hits == 0 {
			continue
		}
		hitRate := float64(pr.Hits) / secs
		mean := pr.RunTime / time.Duration(pr.Hits)
		cost := hitRate * (t.UprobeHitCost + mean).Seconds()
		victim, share := probedProcess(d, pr, handling)
		measured := share * d.processCPU(victim)
		if victim == 0 {
			measured = 0
		}
		if max(cost, measured) < t.ProbeCost {
			continue
		}
		name := pr.describe()
		f := Finding{
			ID: "probe-overhead", PID: victim, Comm: d.Comm(victim),
			Summary: fmt.Sprintf("%s fires %s: about %.2f CPU spent in probe hits", name, rate(hitRate), max(cost, measured)),
			Evidence: []Evidence{
				{Name: "hits_per_second", Value: hitRate, Unit: "1/s", Text: fmt.Sprintf("%s hit %s", name, rate(hitRate))},
				{Name: "estimated_cpu", Value: cost, Unit: "CPU",
					Text: fmt.Sprintf("estimated %.2f CPU: %s a hit (trap %s + program %s)", cost,
						(t.UprobeHitCost + mean).String(), t.UprobeHitCost.String(), mean.String())},
			},
			Cost: max(cost, measured),
			Fix: "Detach the probe, or move it to a function called far less often (the caller that runs once per request " +
				"rather than the helper it calls in a loop); a uprobe costs microseconds per hit however small its program. " +
				"For counting, sample instead of probing every call.",
		}
		for _, a := range pr.Attachments {
			f.Evidence = append(f.Evidence, Evidence{Name: "attachment", Text: "attached to " + a.String()})
		}
		if victim != 0 {
			f.Evidence = append(f.Evidence, Evidence{Name: "uprobe_share", Value: share, Unit: "ratio",
				Text: fmt.Sprintf("%s of pid %d's CPU samples are in the kernel's uprobe handling", pct(share), victim)})
			f.Evidence = append(f.Evidence, Evidence{Name: "measured_cpu", Value: measured, Unit: "CPU",
				Text: fmt.Sprintf("pid %d used %.2f CPU, %.2f of it in uprobe handling", victim, d.processCPU(victim), measured)})
		}
		f.Severity = severityOf(f.Cost, share)
		out = append(out, f)
	}
	return out
}

// String is "function in path+0xoffset".
func (a Attachment) String() string {
	s := fmt.Sprintf("%s+%#x", a.Path, a.Offset)
	if a.Function != "" {
		s = a.Function + " in " + s
	}
	if a.PID != 0 {
		s += fmt.Sprintf(" (pid %d only)", a.PID)
	}
	return s
}

func (p Probe) describe() string {
	what := p.Kind
	switch {
	case p.Program != "":
		what += fmt.Sprintf(" %s (BPF program %d)", p.Program, p.ProgramID)
	case p.Event != "":
		what += " " + p.Event
	}
	if len(p.Attachments) > 0 && p.Attachments[0].Function != "" {
		what += " on " + p.Attachments[0].Function
	}
	return what
}

// uprobeKernelFuncs handle a uprobe hit in the kernel: the breakpoint trap
// (int3 on x86, brk on arm64), the handlers, and the single step over the
// displaced instruction (a debug trap on x86). Matched by prefix.
var uprobeKernelFuncs = []string{
	"handle_swbp", "uprobe_", "__uprobe_", "arch_uprobe_", "handler_chain", "bpf_uprobe_multi_",
	"asm_exc_int3", "exc_int3", "asm_exc_debug", "exc_debug_user", "do_int3",
	"el0_brk64", "do_el0_brk64", "el0_softstp",
}

// isUprobeHandling reports whether a location is in uprobe handling: a
// kernel function above, or the [uprobes] page where the kernel steps over
// displaced instructions.
func isUprobeHandling(l *profile.Location) bool {
	if l.Mapping == nil {
		return false
	}
	if !l.Mapping.Kernel {
		return l.Mapping.File == "[uprobes]"
	}
	for _, f := range l.Frames {
		for _, p := range uprobeKernelFuncs {
			if strings.HasPrefix(f.Function, p) {
				return true
			}
		}
	}
	return false
}

// probedUsage is a process's samples in uprobe handling and the files its
// sampled stacks ran in.
type probedUsage struct {
	share float64
	files map[string]bool
}

// uprobeHandling finds the processes whose samples show uprobe handling.
func uprobeHandling(d *Data) map[int]*probedUsage {
	out := map[int]*probedUsage{}
	x := d.index()
	for pid, samples := range x.byPID {
		var in int64
		files := map[string]bool{}
		for _, s := range samples {
			hit := false
			for _, l := range s.Stack {
				if l.Mapping != nil && !l.Mapping.Kernel {
					files[l.Mapping.File] = true
				}
				if isUprobeHandling(l) {
					hit = true
				}
			}
			if hit {
				in += s.Count
			}
		}
		if in > 0 {
			out[pid] = &probedUsage{share: float64(in) / float64(x.samples[pid]), files: files}
		}
	}
	return out
}

// probedProcess picks the process a probe slows most: among those with
// samples in uprobe handling, one that ran the probed file.
func probedProcess(d *Data, pr Probe, handling map[int]*probedUsage) (pid int, share float64) {
	for p, u := range handling {
		for _, a := range pr.Attachments {
			if (a.PID == 0 || a.PID == p) && (u.files[a.Path] || sameFile(u.files, a.Path)) && u.share > share {
				pid, share = p, u.share
			}
		}
	}
	return pid, share
}

// sameFile matches a probed path against mapped files by base name when the
// paths differ (another mount namespace, a symlink).
func sameFile(files map[string]bool, path string) bool {
	base := filepath.Base(path)
	for f := range files {
		if filepath.Base(f) == base {
			return true
		}
	}
	return false
}
