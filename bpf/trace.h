// SPDX-License-Identifier: GPL-2.0
// Types shared by trace.bpf.c and user space (via bpf2go -type).
#ifndef FLINT_TRACE_H
#define FLINT_TRACE_H

// Latency buckets are log-linear: values below 8 ns have a bucket each, then
// every power of two [2^e, 2^(e+1)) is split into 8 equal sub-buckets, so a
// bucket is at most 12.5% wide and a percentile read from it is within that
// of the truth. 312 buckets reach 2^41 ns (~37 min); longer calls land in
// the last one. User space sums the sub-buckets into the log2 histogram it
// prints.

#define HIST_SUB_BITS 3
#define HIST_SUB (1 << HIST_SUB_BITS)
#define HIST_MAX_EXP 40
#define HIST_BUCKETS ((HIST_MAX_EXP - HIST_SUB_BITS + 2) * HIST_SUB)

// The attach cookie of every probe: the function's id in the low bits, and
// flags that say how to treat the hit.
#define COOKIE_FUNC_MASK 0xffffffULL
#define COOKIE_GO (1ULL << 32)		// Go function: frames keyed by the g in R14
#define COOKIE_EXE_FILTER (1ULL << 33)	// library probe of --exe: only that executable's processes
#define COOKIE_NO_LATENCY (1ULL << 34)	// no return probes: count calls only
#define COOKIE_CALIBRATION (1ULL << 35) // flint's own calibration probe: no process filter

enum trace_error {
	TRACE_ERR_COUNTS_FULL, // (process, function) counters map full: hit lost
	TRACE_ERR_FRAMES_FULL, // frames map full: a call's latency lost
	TRACE_ERR_STARTS_FULL, // starts map full: a call's latency lost
	TRACE_ERR_STACKS_FULL, // stack_calls map full: a call's stack lost
	TRACE_ERR_STACK_LOST,  // the stack could not be walked or stored: counted without it
	TRACE_ERR_MAX,
};

// Hits of one function in one process.
struct call_key {
	__u32 tgid;
	__u32 func;
};

struct call_counts {
	__u64 calls;	 // entries (stack-growth restarts of Go functions excluded)
	__u64 returns;	 // returns matched with their entry: each one timed
	__u64 unmatched; // returns with no entry seen (the call began before the probes)
	__u64 lost;	 // returns whose entry timestamp was evicted or never stored
	char comm[16];	 // the process's name, set on the CPU that first counted it
};

// One function's activations on one goroutine (Go: the g pointer) or thread
// (C: the thread ID) of one process.
struct frame_key {
	__u32 tgid;
	__u32 func;
	__u64 ctx;
};

struct frame_state {
	__u32 depth;   // activations entered and not yet returned (recursion)
	__u32 restart; // Go: the prologue called morestack; the next entry re-runs this call
};

// The entry time of activation `depth` of a frame.
struct start_key {
	struct frame_key frame;
	__u32 depth;
	__u32 pad;
};

// Frames kept of a caller's stack: the kernel's default perf_event_max_stack.
#define TRACE_STACK_DEPTH 127

// Calls of one function in one process from one stack. At the function's
// first instruction the frame-pointer walk starts at the caller's frame and
// so skips the caller itself, whose return address is on top of the stack:
// `caller` holds it.
struct stack_key {
	__u32 tgid;
	__u32 func;
	__s32 stack; // id in call_stacks; negative when lost
	__u32 pad;
	__u64 caller; // return address into the caller
};

struct stack_calls {
	__u64 calls; // with latency, the timed calls
	__u64 ns;    // their time, summed
};

// An activation in progress: when it began and, with stacks, where from.
struct call_start {
	__u64 ns;
	struct stack_key from; // with stacks
};

struct latency_hist {
	__u64 sum_ns;
	__u64 buckets[HIST_BUCKETS];
};

#endif
