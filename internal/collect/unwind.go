package collect

import (
	"github.com/flint-dev/flint/internal/proc"
	"github.com/flint-dev/flint/internal/sampler"
	"github.com/flint-dev/flint/internal/unwind"
)

// UnwindRows is how many unwind rows a budget of memory bytes holds.
func UnwindRows(memory int64) int {
	return int(memory / int64(sampler.UnwindRowSize))
}

// StartUnwind makes s walk the stacks of the processes c learns with
// unwind tables, when s was started with rows for them; nil otherwise.
// Start s with OnStale: c.Refresh.
func StartUnwind(c *Collector, s *sampler.Sampler) *unwind.Tables {
	if s.UnwindRows() == 0 {
		return nil
	}
	var k unwind.Kernel = s
	c.mu.Lock()
	if c.quiet != nil {
		k = c.quiet // it lists the rows of known files in the kernel
	}
	c.mu.Unlock()
	t := unwind.New(k, unwind.Options{
		Rows:        s.UnwindRows(),
		MaxMappings: sampler.MaxUnwindMappings,
		Open:        func(pid int, m *proc.Mapping) (unwind.File, error) { return proc.Open(pid, m) },
	})
	c.SetUnwinder(t)
	return t
}
