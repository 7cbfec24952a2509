// SPDX-License-Identifier: GPL-2.0
// Types shared by profile.bpf.c and user space (via bpf2go -type).
#ifndef FLINT_PROFILE_H
#define FLINT_PROFILE_H

// The kernel's default perf_event_max_stack.
#define MAX_STACK_DEPTH 127
#define COMM_LEN 16
#define EFAULT 14

enum sampler_stat {
	STAT_SAMPLES,		// timer ticks that ran the program for a traced process
	STAT_USER_STACK_ERR,	// user stack unreadable (not just absent)
	STAT_KERNEL_STACK_ERR,	// kernel stack unreadable
	STAT_STACKS_FULL,	// stacks map full: sample kept, stack lost
	STAT_COUNTS_FULL,	// counts map full: sample lost
	STAT_RINGBUF_FULL,	// ring buffer full: sample lost
	STAT_PROC_EVENTS_LOST,	// new-process notification lost: naming may fail
	STAT_MAX,
};

struct stack_trace {
	__u32 len; // frames used in ips
	__u32 pad;
	__u64 ips[MAX_STACK_DEPTH];
};

struct sample_key {
	__u32 pid; // thread group id
	__u32 tid;
	__u32 generation; // of the process image, see known_procs
	__u32 pad;
	__u64 user_stack;   // hash in `stacks`, 0: none
	__u64 kernel_stack; // hash in `stacks`, 0: none
	char comm[COMM_LEN];   // process (thread group leader) name
	char thread[COMM_LEN]; // thread name
};

struct sample_event {
	__u32 pid;
	__u32 tid;
	__u32 generation;
	__u16 user_len;	  // frames in ips[0:user_len]
	__u16 kernel_len; // frames in ips[user_len:user_len+kernel_len]
	char comm[COMM_LEN];
	char thread[COMM_LEN];
	__u64 ips[2 * MAX_STACK_DEPTH];
};

struct new_proc {
	__u32 pid;
	__u32 generation;
};

#endif
