// Package doctor finds performance problems that have a known fix, with the
// evidence measured to show them: a busy poll loop, a thread sleeping to
// look for work, goroutines queueing for a mutex, failing syscalls retried
// in a loop, GOMAXPROCS above the CPU quota, Go runtime overhead (GC,
// scheduler, allocation), debug output on the hot path, and uprobes on hot
// functions.
//
// A recording gathers Data: a CPU profile (collect.Record), per-thread
// syscall statistics with sampled user stacks (a BPF tracer on the syscall
// tracepoints, see bpf/syscalls.bpf.c), facts about each process (Go
// version and build settings, GOMAXPROCS read from its memory, CPU limits
// from its cgroups, context switches), the uprobes attached on the node and,
// for the Go programs asked about, their sync.Mutex waits (uprobes on the
// mutex's slow paths, see LockWaits).
// Detectors are plain functions of Data, so a recording made elsewhere (the
// agent's windows) can be analysed the same way:
//
//	findings, data, err := doctor.Run(ctx, doctor.Options{PID: 4242, Duration: 10 * time.Second})
//	...
//	findings = doctor.Analyze(data) // again, or on Data built elsewhere
//
// Every detector lives in its own file, which documents its thresholds:
//
//	busy-poll           busypoll.go       poll-family calls with a zero timeout returning nothing
//	sleep-poll          sleeppoll.go      a thread sleeping a fixed interval to look for work
//	lock-contention     lockcontention.go goroutines queueing for a sync.Mutex
//	syscall-errors      syscalls.go       a syscall failing at a high rate (a retry loop)
//	gomaxprocs-quota    gomaxprocs.go     GOMAXPROCS above the CPU limit
//	go-runtime-overhead goruntime.go      GC, scheduler, allocation and stack growth
//	hot-debug-output    debugoutput.go    printing on the hot path, stdout/stderr write storms
//	probe-overhead      probeoverhead.go  uprobes on hot functions
//
// Findings come worst first: by severity, then by the CPU the problem is
// estimated to cost.
//
// What tracing costs: the tracer attaches to the tracepoints of eleven
// syscalls (the poll family, the sleeps, write and writev); while attached,
// every syscall on the node takes the kernel's slower traced path, and the traced
// ones also run the BPF programs. `flint syscalls -p PID` with no syscall
// list attaches to raw_syscalls instead, which runs the programs on every
// syscall of every process. docs/BENCHMARKS.md has the measured costs.
package doctor
