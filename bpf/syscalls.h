// SPDX-License-Identifier: GPL-2.0
// Types shared by syscalls.bpf.c and user space (via bpf2go -type).
#ifndef FLINT_SYSCALLS_H
#define FLINT_SYSCALLS_H

// The kernel's default perf_event_max_stack.
#define MAX_STACK_DEPTH 127
// Latency histogram: bucket b counts calls that took [2^b, 2^(b+1)) ns; the
// last bucket holds everything from 2^31 ns (2.1 s) up.
#define LATENCY_BUCKETS 32
#define MAX_ERRNO 4095
// Syscall numbers are below this on every architecture (x86-64: ~470).
#define MAX_SYSCALL_NR 1024
#define EFAULT 14

// What a call's arguments and result say, in call_key.flags and
// call_stack_key.flags.
enum call_flag {
	CALL_ZERO_TIMEOUT = 1, // a poll-family call told not to wait
	CALL_STDOUT = 2,       // a write to fd 1
	CALL_STDERR = 4,       // a write to fd 2
	CALL_DEADLINE = 32,    // a clock_nanosleep until an absolute time (a ticker)
	// Only in call_stack_key: how the call ended.
	CALL_FAILED = 8, // returned -errno
	CALL_EMPTY = 16, // returned 0 (no events, nothing written)
};

enum syscall_tracer_stat {
	TRACER_CALLS,		  // calls traced to their exit
	TRACER_STATS_FULL,	  // calls map full: call lost
	TRACER_INFLIGHT_FULL,	  // no task storage for the call: call lost
	TRACER_STACKS_FULL,	  // stacks full: call counted, stack lost
	TRACER_STACK_COUNTS_FULL, // stack_counts full: stack sample lost
	TRACER_STACK_ERR,	  // user stack unreadable (not just absent)
	TRACER_STAT_MAX,
};

struct call_key {
	__u32 pid; // thread group id
	__u32 tid;
	__u32 nr;    // syscall number
	__u32 flags; // enum call_flag, argument bits only
};

struct call_stats {
	__u64 calls;
	__u64 errors;	  // returned -errno
	__u64 empty;	  // returned 0
	__u64 total_ns;	  // time from entry to exit, summed
	__u64 bytes;	  // returned byte counts, summed: stdout/stderr writes only
	__s64 last_error; // the latest errno
	__u64 latency[LATENCY_BUCKETS];
};

struct call_stack_key {
	__u32 pid;
	__u32 tid;
	__u32 nr;
	__u32 flags; // enum call_flag, result bits included
	__u64 stack; // hash in `stacks`
};

struct call_inflight {
	__u64 start_ns;
	__u64 stack; // hash in `stacks`, 0: not sampled
	__u32 nr;
	__u32 flags;
};

struct user_stack {
	__u32 len; // frames used in ips
	__u32 pad;
	__u64 ips[MAX_STACK_DEPTH];
};

#endif
