package sampler

import (
	"os/exec"
	"strconv"
	"testing"
	"time"
)

// TestOffCPULoadedOnFirstUse checks that a sampler started with
// Options.OffCPU loads the off-CPU program only when first asked to
// record, and that the program it loads then uses the sampler's maps: the
// time a child sleeps is in DrainOffCPU and the spans in Stats.
func TestOffCPULoadedOnFirstUse(t *testing.T) {
	requireBPF(t)
	s, err := Start(Options{Frequency: 99, OffCPU: &OffCPU{Min: time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.objs.OnSwitch != nil {
		t.Fatal("the off-CPU program was loaded at start")
	}
	if err := s.SetOffCPU(true); err != nil {
		t.Fatal(err)
	}
	if s.objs.OnSwitch == nil {
		t.Fatal("SetOffCPU(true) attached no off-CPU program")
	}
	const nap = 300 * time.Millisecond
	child := exec.Command("sleep", strconv.FormatFloat(nap.Seconds(), 'f', -1, 64))
	if err := child.Run(); err != nil {
		t.Fatal(err)
	}
	off, err := s.DrainOffCPU()
	if err != nil {
		t.Fatal(err)
	}
	var slept time.Duration
	for _, smp := range off {
		if smp.PID == uint32(child.Process.Pid) {
			slept += time.Duration(smp.Count)
		}
	}
	if slept < nap*9/10 || slept > 2*nap {
		t.Errorf("the child slept %s off the CPU by DrainOffCPU, want about %s", slept, nap)
	}
	st, err := s.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if st.OffCPUSpans == 0 {
		t.Errorf("stats %+v: no off-CPU span counted", st)
	}
}
