package sampler

import (
	"fmt"
	"time"

	"github.com/cilium/ebpf/link"
)

// DefaultOffCPUMin is the shortest span off the CPU recorded unless asked
// otherwise: docs/BENCHMARKS.md, "Off-CPU time", has its cost.
const DefaultOffCPUMin = time.Millisecond

// OffCPU configures recording where threads wait off the CPU.
type OffCPU struct {
	// Min is the shortest span recorded: shorter ones cost a map update
	// and a lookup, never stacks.
	Min time.Duration
	// SampleEvery records one span in SampleEvery (0 or 1: all), each
	// counting for SampleEvery times its length.
	SampleEvery uint32
	// MaxStacks bounds the distinct stacks held in the kernel while
	// recording; 0: Options.MaxStacks.
	MaxStacks int
}

// SetOffCPU starts (on) or stops recording off-CPU time, with the
// Options.OffCPU the sampler was started with; it records while sampling
// (after Resume, before Stop).
func (s *Sampler) SetOffCPU(on bool) error {
	if on && s.opts.OffCPU == nil {
		return fmt.Errorf("off-CPU: the sampler was started without Options.OffCPU")
	}
	s.offCPUOn = on
	if !on {
		s.detachOffCPU()
		return nil
	}
	if s.running {
		return s.attachOffCPU()
	}
	return nil
}

func (s *Sampler) detachOffCPU() {
	if s.offCPU != nil {
		s.offCPU.Close()
		s.offCPU = nil
	}
}

// attachOffCPU attaches the off-CPU program when SetOffCPU asked for it and
// it is not attached.
func (s *Sampler) attachOffCPU() error {
	if !s.offCPUOn || s.offCPU != nil {
		return nil
	}
	if s.objs.OnSwitch == nil {
		if err := s.loadOffCPU(); err != nil {
			return classify(fmt.Errorf("load off-CPU program: %w", err))
		}
	}
	l, err := link.AttachTracing(link.TracingOptions{Program: s.objs.OnSwitch})
	if err != nil {
		return classify(fmt.Errorf("attach off-CPU probe: %w", err))
	}
	s.offCPU = l
	return nil
}

// DrainOffCPU returns the time spent off the CPU since the last call, in
// nanoseconds (Sample.Count), by process image, thread and the stacks
// where the thread waited.
func (s *Sampler) DrainOffCPU() ([]Sample, error) {
	if s.opts.OffCPU == nil {
		return nil, nil
	}
	out, err := s.drainCounts(s.objs.OffCpu)
	if err != nil {
		return out, fmt.Errorf("drain off-CPU time: %w", err)
	}
	return out, nil
}
