package doctor

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
)

// attachUprobe puts a uprobe running an empty BPF program on symbol of the
// binary at path, for every process running it.
func attachUprobe(t testing.TB, path, symbol string) link.Link {
	t.Helper()
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name: "doctor_test", Type: ebpf.Kprobe, License: "GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 0), asm.Return()},
	})
	if err != nil {
		t.Fatalf("load uprobe program: %v", err)
	}
	t.Cleanup(func() { prog.Close() })
	ex, err := link.OpenExecutable(path)
	if err != nil {
		t.Fatal(err)
	}
	l, err := ex.Uprobe(symbol, prog, nil)
	if err != nil {
		t.Fatalf("attach uprobe to %s: %v", symbol, err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// TestProbeOverhead probes the fixture's hot function (200,000 calls a
// second: the bug), then detaches (the fix), then probes its cold one
// (100 a second: a healthy probe; at 1,000 a second a hit cost some 25 us
// on an AMD EPYC VM, 0.025 CPU, and what the samples measured reached the
// 0.05 CPU threshold: docs/BENCHMARKS.md, "The healthy twins under load").
func TestProbeOverhead(t *testing.T) {
	requireRoot(t)
	fx := buildFixtures(t)
	w := startFixture(t, "", nil, fx["probe"])

	hot := attachUprobe(t, fx["probe"], "hot")
	findings, data := doctorRun(t, w.pid, Options{})
	logFindings(t, "hot probe", of(findings, w.pid))
	var f *Finding
	for i := range findings {
		if findings[i].ID == "probe-overhead" && strings.Contains(findings[i].Summary, "doctor_test") {
			f = &findings[i]
		}
	}
	if f == nil {
		t.Fatal("probe-overhead did not fire on a uprobe hit 200,000 times a second")
	}
	if f.PID != w.pid {
		t.Errorf("finding names pid %d, want the probed process %d", f.PID, w.pid)
	}
	if e, _ := evidence(f, "hits_per_second"); e.Value < 20000 {
		t.Errorf("hits %.0f/s, want tens of thousands", e.Value)
	}
	if e, _ := evidence(f, "attachment"); !strings.Contains(e.Text, "hot in ") {
		t.Errorf("attachment %q does not name hot", e.Text)
	}
	if e, ok := evidence(f, "uprobe_share"); !ok || e.Value < 0.5 {
		t.Errorf("uprobe handling share %+v: the process does little else", e)
	}
	bugCPU := processCPU(t, data, w.pid)

	hot.Close()
	findings, data = doctorRun(t, w.pid, Options{})
	logFindings(t, "detached", of(findings, w.pid))
	logTwin(t, "detached", data, w.pid)
	if got := of(findings, w.pid); len(got) > 0 {
		t.Errorf("findings with the probe detached: %+v", got)
	}
	fixedCPU := processCPU(t, data, w.pid)
	t.Logf("CPU: %.3f probed, %.3f detached", bugCPU, fixedCPU)
	if fixedCPU > bugCPU/2 {
		t.Errorf("CPU %.3f detached, %.3f probed: want it at least halved", fixedCPU, bugCPU)
	}

	attachUprobe(t, fx["probe"], "cold")
	findings, data = doctorRun(t, w.pid, Options{})
	logTwin(t, "cold probe", data, w.pid)
	for _, f := range findings {
		if f.ID == "probe-overhead" && strings.Contains(f.Summary, "doctor_test") || f.PID == w.pid {
			t.Errorf("a probe on the cold function: %s", f.Summary)
		}
	}
}

func TestProbeEstimate(t *testing.T) {
	probe := Probe{Program: "p", ProgramID: 9, Kind: "uprobe", Hits: 50000, RunTime: 10 * time.Millisecond,
		Attachments: []Attachment{{Path: "/bin/app", Offset: 0x1130, Function: "hot"}}}
	d := &Data{Duration: 10 * time.Second, Probes: []Probe{probe}}
	th := DefaultThresholds()
	perHit := (th.UprobeHitCost + 200*time.Nanosecond).Seconds()
	// 5,000 hits/s: about 0.02 CPU, below ProbeCost.
	if got := Analyze(d); len(got) != 0 {
		t.Errorf("cheap probe (%.3f CPU): %+v", 5000*perHit, got)
	}
	d.Probes[0].Hits *= 20
	d.Probes[0].RunTime *= 20
	got := Analyze(d)
	if want := 100000 * perHit; len(got) != 1 || got[0].ID != "probe-overhead" || math.Abs(got[0].Cost-want) > 1e-9 {
		t.Fatalf("100,000 hits/s: got %+v, want cost %.3f", got, want)
	}
}
