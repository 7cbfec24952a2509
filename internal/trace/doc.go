// Package trace counts and times calls to functions of running programs
// with uprobes, and says what the probes cost.
//
//	t, err := trace.Start(trace.Options{
//		Target:      trace.Target{PID: 4242},
//		Functions:   []string{"main.(*Server).handle", "time.Now"},
//		Latency:     true,
//		MaxOverhead: 0.02,
//		Duration:    10 * time.Second,
//	})
//	...
//	res, err := t.Run(ctx) // counts, rates, latency histograms, cost
//	t.Close()
//
// # Finding functions
//
// Go functions are found by name in the binary's pclntab, which survives
// stripping (-ldflags=-s -w); C functions in the ELF symbol tables of the
// executable and of the shared libraries the process maps (or, for an
// executable, the libraries it needs). A probe's location is a file offset,
// computed from the function's virtual address through the PT_LOAD header
// that maps it, so PIE and shared libraries need no load address. For -p,
// files are opened through /proc/PID/map_files, which reaches other mount
// namespaces and deleted files.
//
// # Returns without uretprobes in Go
//
// A uretprobe replaces the return address on the stack with a trampoline.
// Go walks goroutine stacks (GC, tracebacks, stack growth) and copies them
// to grow them; a foreign return address makes it crash ("unexpected return
// pc"). So for a Go function flint decodes its machine code
// (golang.org/x/arch/x86/x86asm, from its entry to the next function as the
// pclntab bounds it) and puts a plain uprobe on every RET instruction. Entry
// and return are matched by goroutine: Go's internal ABI on amd64 (Go 1.17+)
// keeps the current goroutine's g pointer in R14 at every function entry and
// RET, and a goroutine keeps its g when it moves between threads, which a
// thread ID would not survive. Recursion is handled by a depth count per
// (process, function, g), returns pop entries LIFO.
//
// Go's prologue calls runtime.morestack when the stack must grow (or the
// scheduler asks for preemption), and morestack resumes the function at its
// first instruction: the entry probe fires twice for one call. flint probes
// those morestack calls too and lets the second entry pass uncounted,
// keeping the first entry's time.
//
// Limits: a function that exits by a tail call (JMP) has no RET to probe, so
// only its calls are counted; hand-written assembly (ABI0) need not keep g
// in R14; a panic unwinding through a traced function skips its RET (the
// entry ages out of an LRU map); inlined copies of a function are not seen
// by probes on its body. C functions use uretprobes, matched by thread.
//
// # Overhead
//
// A uprobe hit is a breakpoint trap into the kernel: microseconds, where the
// function itself may take nanoseconds. Start measures that cost on this
// machine (see calibrate.go), Run multiplies it by each function's call
// rate, detaches what exceeds Options.MaxOverhead, and reports each
// process's estimated slowdown (see overhead.go for the definitions).
package trace
