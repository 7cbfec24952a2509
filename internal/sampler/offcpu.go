package sampler

import (
	"bufio"
	"fmt"
	"os"
	"strings"
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
}

// attachOffCPU attaches the off-CPU program when Options.OffCPU asks for
// it and it is not attached.
func (s *Sampler) attachOffCPU() error {
	if s.opts.OffCPU == nil || s.offCPU != nil {
		return nil
	}
	l, err := link.AttachTracing(link.TracingOptions{Program: s.objs.OnSwitch})
	if err != nil {
		return classify(fmt.Errorf("attach off-CPU probe: %w", err))
	}
	s.offCPU = l
	return nil
}

// switchSymbol returns the kernel's name for finish_task_switch, which
// compilers may have renamed (finish_task_switch.isra.0).
func switchSymbol() (string, error) {
	f, err := os.Open("/proc/kallsyms")
	if err != nil {
		return "", fmt.Errorf("find finish_task_switch: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 3 && (fields[2] == "finish_task_switch" || strings.HasPrefix(fields[2], "finish_task_switch.")) {
			return fields[2], nil
		}
	}
	if err := sc.Err(); err != nil {
		return "", fmt.Errorf("find finish_task_switch: %w", err)
	}
	return "", fmt.Errorf("off-CPU: the kernel has no finish_task_switch in /proc/kallsyms: %w", ErrNotSupported)
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
