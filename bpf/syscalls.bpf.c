// SPDX-License-Identifier: GPL-2.0
// flint's syscall tracer: one pair of programs, sys_enter and sys_exit,
// attached either to the specific tracepoints of the syscalls flint doctor
// needs (syscalls/sys_enter_epoll_wait, ...) or, for `flint syscalls -p PID`,
// to raw_syscalls/sys_enter and sys_exit. Both kinds of tracepoint share the
// record layout of struct trace_event_raw_sys_enter/exit (the syscall number
// at offset 8, the arguments or the return value from offset 16), so the
// same programs serve both. Per (process, thread, syscall, argument class)
// they count calls, errors, empty results, time and a latency histogram, and
// at most once per stack_interval_ns per CPU and syscall they take the
// caller's user stack. docs/BENCHMARKS.md has what each kind of attachment costs.
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>

#include "syscalls.h"
#include "maps.h"

// Load-time options, set by the loader before the verifier sees the program.
const volatile __u32 target_tgid = 0; // 0: every process
const volatile __u32 self_tgid = 0;   // flint itself, never traced
// Writes to fds other than 1 and 2 are not counted (doctor: only stdout and
// stderr matter, and this keeps the maps small on a busy node).
const volatile bool stdio_writes_only = true;
// Minimum time between two user stacks of one syscall taken on one CPU; 0
// takes every call's.
const volatile __u64 stack_interval_ns = 100000;
// Set by user space once every tracepoint is attached, cleared before they
// are detached: attaching takes tens of milliseconds a tracepoint, and
// rates need a precise start and end.
volatile bool tracing = false;
// CLOCK_MONOTONIC ns when this tracing run began: a call entered before it
// (during an earlier run of a reused tracer) is not counted.
volatile __u64 traced_since = 0;

// Syscall numbers of this architecture; -1 where it has no such syscall.
const volatile __s32 nr_epoll_wait = -1;
const volatile __s32 nr_epoll_pwait = -1;
const volatile __s32 nr_epoll_pwait2 = -1;
const volatile __s32 nr_poll = -1;
const volatile __s32 nr_ppoll = -1;
const volatile __s32 nr_select = -1;
const volatile __s32 nr_pselect6 = -1;
const volatile __s32 nr_write = -1;
const volatile __s32 nr_writev = -1;
const volatile __s32 nr_clock_nanosleep = -1;

// Calls per (process, thread, syscall, argument class). The loader sizes it;
// a full map loses the call, counted in TRACER_STATS_FULL.
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, struct call_key);
	__type(value, struct call_stats);
} calls SEC(".maps");

// The call each thread has under way, in the thread's own storage (Linux
// 5.11): no lookup in a shared table, and freed with the thread, so a
// thread killed inside a syscall leaves nothing behind.
struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct call_inflight);
} inflight SEC(".maps");

// Every distinct user stack taken, by its 64-bit hash (see profile.bpf.c for
// why not a STACK_TRACE map). ~1 KiB each; the loader sizes it.
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u64);
	__type(value, struct user_stack);
} stacks SEC(".maps");

// Stacks taken per (process, thread, syscall, flags, stack). Sized like
// calls.
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, struct call_stack_key);
	__type(value, __u64);
} stack_counts SEC(".maps");

// When this CPU last took a stack of each syscall (ns, bpf_ktime_get_ns),
// by syscall number: one gate per syscall, so the calls that follow each
// other in a loop (poll, then read) all get stacks.
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, MAX_SYSCALL_NR);
	__type(key, __u32);
	__type(value, __u64);
} last_stack SEC(".maps");

// Per-CPU scratch for a stack: too large for the 512-byte BPF stack.
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct user_stack);
} scratch SEC(".maps");

// Per-CPU counters of calls traced and lost, indexed by enum syscall_tracer_stat.
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, TRACER_STAT_MAX);
	__type(key, __u32);
	__type(value, __u64);
} stats SEC(".maps");

// Force BTF for the types user space decodes.
const struct call_key *unused_call_key __attribute__((unused));
const struct call_stats *unused_call_stats __attribute__((unused));
const struct call_stack_key *unused_call_stack_key __attribute__((unused));
const struct user_stack *unused_user_stack __attribute__((unused));
const enum call_flag *unused_call_flag __attribute__((unused));
const enum syscall_tracer_stat *unused_tracer_stat __attribute__((unused));

static __always_inline void count(enum syscall_tracer_stat s)
{
	percpu_inc(&stats, s);
}

// zero_timeout reports whether the user-space timespec (or timeval: the
// same two longs on 64-bit) at uptr is zero. NULL means "wait forever".
static __always_inline bool zero_timeout(__u64 uptr)
{
	struct __kernel_timespec ts;
	if (!uptr)
		return false;
	if (bpf_probe_read_user(&ts, sizeof(ts), (const void *)uptr) != 0)
		return false; // unreadable: the kernel will fail the call anyway
	return ts.tv_sec == 0 && ts.tv_nsec == 0;
}

// arg reads argument i of a call. Not through ctx->args[i]: the verifier
// would record the furthest offset read, and the kernel refuses to attach a
// program to a syscall whose record is shorter (epoll_wait has 4 arguments,
// select 5). The record sits in a per-CPU buffer large enough for any.
static __always_inline __u64 arg(struct trace_event_raw_sys_enter *ctx, int i)
{
	__u64 v = 0;
	bpf_probe_read_kernel(&v, sizeof(v), &ctx->args[i]);
	return v;
}

// classify sets the argument flags of a call; false means "do not trace".
static __always_inline bool classify(struct trace_event_raw_sys_enter *ctx, __s32 nr, __u32 *flags)
{
	bool zero = false;
	if (nr == nr_epoll_wait || nr == nr_epoll_pwait)
		zero = (int)arg(ctx, 3) == 0;
	else if (nr == nr_poll)
		zero = (int)arg(ctx, 2) == 0;
	else if (nr == nr_epoll_pwait2)
		zero = zero_timeout(arg(ctx, 3));
	else if (nr == nr_ppoll)
		zero = zero_timeout(arg(ctx, 2));
	else if (nr == nr_select || nr == nr_pselect6)
		zero = zero_timeout(arg(ctx, 4));
	else if (nr == nr_clock_nanosleep) {
		if (arg(ctx, 1) & 1) // TIMER_ABSTIME
			*flags |= CALL_DEADLINE;
	} else if (nr == nr_write || nr == nr_writev) {
		int fd = (int)arg(ctx, 0);
		if (fd == 1)
			*flags |= CALL_STDOUT;
		else if (fd == 2)
			*flags |= CALL_STDERR;
		else if (stdio_writes_only)
			return false;
	}
	if (zero)
		*flags |= CALL_ZERO_TIMEOUT;
	return true;
}

// take_stack stores the caller's user stack and returns its hash, or 0 when
// this CPU took one of syscall nr less than stack_interval_ns ago or there
// is none. Sampling by time bounds the cost (a stack walk is ~1 us) at any
// call rate.
static __always_inline __u64 take_stack(void *ctx, __u32 nr, __u64 now)
{
	__u32 zero = 0;
	__u64 *last = bpf_map_lookup_elem(&last_stack, &nr);
	if (!last || now - *last < stack_interval_ns)
		return 0;
	*last = now;
	struct user_stack *s = bpf_map_lookup_elem(&scratch, &zero);
	if (!s)
		return 0;
	long n = bpf_get_stack(ctx, s->ips, sizeof(s->ips), BPF_F_USER_STACK);
	if (n < 0) {
		if (n != -EFAULT)
			count(TRACER_STACK_ERR);
		return 0;
	}
	s->len = n / sizeof(__u64);
	if (s->len == 0)
		return 0;
	__u64 h = hash_ips(s->ips, s->len, MAX_STACK_DEPTH);
	long err = bpf_map_update_elem(&stacks, &h, s, BPF_NOEXIST);
	if (err && err != -EEXIST) {
		count(TRACER_STACKS_FULL);
		return 0;
	}
	return h;
}

SEC("tracepoint")
int sys_enter(struct trace_event_raw_sys_enter *ctx)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;

	if (!tracing)
		return 0;
	if (tgid == 0 || tgid == self_tgid)
		return 0;
	if (target_tgid && tgid != target_tgid)
		return 0;
	// A specific tracepoint's record holds an int here, raw_syscalls a long.
	__s32 nr = (__s32)ctx->id;
	if (nr < 0)
		return 0;
	__u32 flags = 0;
	if (!classify(ctx, nr, &flags))
		return 0;
	struct call_inflight *c = bpf_task_storage_get(&inflight, bpf_get_current_task_btf(), 0,
						       BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (!c) {
		count(TRACER_INFLIGHT_FULL);
		return 0;
	}
	__u64 now = bpf_ktime_get_ns();
	c->nr = nr;
	c->flags = flags;
	c->stack = take_stack(ctx, nr, now);
	c->start_ns = now;
	return 0;
}

static __always_inline struct call_stats *stats_for(struct call_key *key)
{
	struct call_stats empty = {};
	return lookup_or_init(&calls, key, &empty);
}

static __always_inline __u32 log2_bucket(__u64 ns)
{
	__u32 b = 0;
	for (int i = 0; i < LATENCY_BUCKETS - 1; i++) {
		if (ns < 2)
			break;
		ns >>= 1;
		b++;
	}
	return b;
}

static __always_inline void count_stack(struct call_stack_key *key)
{
	if (!add_count(&stack_counts, key, 1))
		count(TRACER_STACK_COUNTS_FULL);
}

SEC("tracepoint")
int sys_exit(struct trace_event_raw_sys_exit *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tgid = id >> 32, tid = (__u32)id;

	struct call_inflight *in =
	    bpf_task_storage_get(&inflight, bpf_get_current_task_btf(), 0, 0);
	if (!in || !in->start_ns || in->start_ns < traced_since)
		return 0; // not traced, or entered before tracing began
	struct call_inflight c = *in;
	in->start_ns = 0;
	__u64 took = bpf_ktime_get_ns() - c.start_ns;
	long ret = ctx->ret;

	struct call_key key = {.pid = tgid, .tid = tid, .nr = c.nr, .flags = c.flags};
	struct call_stats *st = stats_for(&key);
	if (!st) {
		count(TRACER_STATS_FULL);
		return 0;
	}
	count(TRACER_CALLS);
	__u32 result = 0;
	__sync_fetch_and_add(&st->calls, 1);
	if (ret < 0 && ret >= -MAX_ERRNO) {
		__sync_fetch_and_add(&st->errors, 1);
		st->last_error = -ret;
		result = CALL_FAILED;
	} else if (ret == 0) {
		__sync_fetch_and_add(&st->empty, 1);
		result = CALL_EMPTY;
	} else if (c.flags & (CALL_STDOUT | CALL_STDERR)) {
		__sync_fetch_and_add(&st->bytes, ret);
	}
	__sync_fetch_and_add(&st->total_ns, took);
	__u32 b = log2_bucket(took);
	if (b < LATENCY_BUCKETS)
		__sync_fetch_and_add(&st->latency[b], 1);

	if (c.stack) {
		struct call_stack_key sk = {.pid = tgid,
					    .tid = tid,
					    .nr = c.nr,
					    .flags = c.flags | result,
					    .stack = c.stack};
		count_stack(&sk);
	}
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
