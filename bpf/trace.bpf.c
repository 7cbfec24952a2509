// SPDX-License-Identifier: GPL-2.0
// flint's function tracer: uprobes that count calls to chosen functions and
// time them, aggregated in maps that user space reads every second.
//
// Return probes differ by language:
//   - C: a uretprobe. The kernel swaps the return address on the stack for a
//     trampoline, which C code never notices.
//   - Go: a plain uprobe on every RET instruction of the function. Go copies
//     goroutine stacks to grow them and walks them for GC and tracebacks; a
//     swapped return address makes it crash ("unexpected return pc"). Entries
//     and returns are matched by goroutine: on amd64 Go's internal ABI keeps
//     the current g in R14 at every function entry and RET, and a goroutine
//     keeps its g while it moves between threads.
// Either way an activation is (process, function, g or thread, depth), where
// depth counts nested activations (recursion), so returns pop entries LIFO.
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>

#include "trace.h"
#include "maps.h"

// Load-time options, set by the loader before the verifier sees the program.
const volatile __u32 target_tgid = 0; // -p: only this process; 0: any
const volatile __u64 exe_ino = 0;     // --exe: the executable's inode, for library probes
const volatile bool latency = false;  // time calls (return probes attached)
const volatile bool stacks = false;   // count (and time) calls per caller's stack

// Hits per (process, function), per CPU. 4096 pairs: the loader caps the
// functions traced at 1024, and a pair costs 32 bytes per CPU. A full map is
// counted in TRACE_ERR_COUNTS_FULL.
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, 4096);
	__type(key, struct call_key);
	__type(value, struct call_counts);
} counts SEC(".maps");

// Latency histogram per function, per CPU. The loader sets max_entries to
// the number of functions (2.5 KiB each per CPU), or 1 without --latency.
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct latency_hist);
} hists SEC(".maps");

// Activations in progress per (process, function, goroutine or thread).
// LRU: goroutines that died inside a traced function (panic, Goexit) age
// out instead of filling the map. 65536 of them at 24 bytes.
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, struct frame_key);
	__type(value, struct frame_state);
} frames SEC(".maps");

// Entry times (ns, CLOCK_MONOTONIC) and stacks of activations in progress.
// Deep recursion holds one per level: 65536 levels of all traced functions
// at once. An evicted entry shows up as a `lost` return, never a wrong
// latency.
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, struct start_key);
	__type(value, struct call_start);
} starts SEC(".maps");

// User stacks of the calls, with `stacks`; the loader sizes both maps.
struct {
	__uint(type, BPF_MAP_TYPE_STACK_TRACE);
	__uint(max_entries, 1);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, TRACE_STACK_DEPTH * sizeof(__u64));
} call_stacks SEC(".maps");

// Calls (and their time) per (process, function, stack), with `stacks`.
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1);
	__type(key, struct stack_key);
	__type(value, struct stack_calls);
} stack_counts SEC(".maps");

// Functions being traced, by id: user space clears a function's entry to
// stop counting it at once, before its probes are detached (detaching a
// uprobe waits for an RCU grace period: tens of ms each). The loader sets
// max_entries to the number of functions + 1 (id 0: calibration).
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} enabled SEC(".maps");

// Per-CPU counters of what could not be recorded, indexed by enum trace_error.
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, TRACE_ERR_MAX);
	__type(key, __u32);
	__type(value, __u64);
} errors SEC(".maps");

// Force BTF for the types user space decodes.
const enum trace_error *unused_trace_error __attribute__((unused));
const struct stack_key *unused_stack_key __attribute__((unused));
const struct stack_calls *unused_stack_calls __attribute__((unused));

static __always_inline void count_error(enum trace_error e)
{
	percpu_inc(&errors, e); // uprobe programs run with preemption off
}

// wanted tells whether a hit belongs to a traced function and process.
static __always_inline bool wanted(__u64 cookie, __u32 tgid)
{
	__u32 func = cookie & COOKIE_FUNC_MASK;
	__u32 *on = bpf_map_lookup_elem(&enabled, &func);
	if (!on || !*on)
		return false;
	if (cookie & COOKIE_CALIBRATION)
		return true;
	if (target_tgid && tgid != target_tgid)
		return false;
	if (cookie & COOKIE_EXE_FILTER) {
		// A library probe of --exe fires in every process mapping the
		// library: keep those running the executable. By inode number
		// alone: the device as stat(2) shows it need not be the one the
		// kernel keeps (overlayfs, btrfs subvolumes), and a process of
		// another file with the same inode number on another file
		// system is only counted, never harmed.
		struct task_struct *task = (struct task_struct *)bpf_get_current_task();
		if (BPF_CORE_READ(task, mm, exe_file, f_inode, i_ino) != exe_ino)
			return false;
	}
	return true;
}

static __always_inline struct call_counts *counts_of(__u32 tgid, __u32 func)
{
	struct call_key key = {.tgid = tgid, .func = func};
	struct call_counts *c = bpf_map_lookup_elem(&counts, &key);
	if (c)
		return c;
	struct call_counts zero = {};
	// Named now: a process traced with --exe may be gone before user
	// space reads its /proc entry.
	struct task_struct *task = (struct task_struct *)bpf_get_current_task();
	BPF_CORE_READ_STR_INTO(&zero.comm, task, group_leader, comm);
	c = lookup_or_init(&counts, &key, &zero);
	if (!c)
		count_error(TRACE_ERR_COUNTS_FULL);
	return c;
}

static __always_inline void frame_of(struct frame_key *fk, struct pt_regs *ctx, __u64 cookie,
				     __u64 pid_tgid)
{
	fk->tgid = pid_tgid >> 32;
	fk->func = cookie & COOKIE_FUNC_MASK;
	// The g pointer: fixed in R14 by Go's ABIInternal on amd64 (Go 1.17+).
	fk->ctx = (cookie & COOKIE_GO) ? ctx->r14 : (__u32)pid_tgid;
}

// log2 of v > 0, rounded down, without loops.
static __always_inline __u32 log2_u64(__u64 v)
{
	__u32 r, shift;
	r = (v > 0xffffffffULL) << 5;
	v >>= r;
	shift = (v > 0xffff) << 4;
	v >>= shift;
	r |= shift;
	shift = (v > 0xff) << 3;
	v >>= shift;
	r |= shift;
	shift = (v > 0xf) << 2;
	v >>= shift;
	r |= shift;
	shift = (v > 0x3) << 1;
	v >>= shift;
	r |= shift;
	r |= (v >> 1);
	return r;
}

// bucket returns the log-linear bucket of ns (see HIST_BUCKETS).
static __always_inline __u32 bucket(__u64 ns)
{
	if (ns < HIST_SUB)
		return ns;
	__u32 e = log2_u64(ns);
	__u32 i =
	    (e - HIST_SUB_BITS + 1) * HIST_SUB + ((ns >> (e - HIST_SUB_BITS)) & (HIST_SUB - 1));
	return i < HIST_BUCKETS ? i : HIST_BUCKETS - 1;
}

// stack_of names where a call at a function's first instruction came from.
static __always_inline void stack_of(struct stack_key *sk, struct pt_regs *ctx,
				     struct frame_key *fk)
{
	sk->tgid = fk->tgid;
	sk->func = fk->func;
	sk->pad = 0;
	sk->stack = bpf_get_stackid(ctx, &call_stacks, BPF_F_USER_STACK);
	if (sk->stack < 0)
		count_error(TRACE_ERR_STACK_LOST);
	sk->caller = 0;
	bpf_probe_read_user(&sk->caller, sizeof(sk->caller), (const void *)ctx->sp);
}

// add_stack_call counts one call from a stack, taking ns.
static __always_inline void add_stack_call(struct stack_key *sk, __u64 ns)
{
	struct stack_calls zero = {};
	struct stack_calls *v = lookup_or_init(&stack_counts, sk, &zero);
	if (!v) {
		count_error(TRACE_ERR_STACKS_FULL);
		return;
	}
	__sync_fetch_and_add(&v->calls, 1);
	__sync_fetch_and_add(&v->ns, ns);
}

SEC("uprobe")
int on_entry(struct pt_regs *ctx)
{
	__u64 cookie = bpf_get_attach_cookie(ctx);
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	if (!wanted(cookie, pid_tgid >> 32))
		return 0;
	struct frame_key fk;
	frame_of(&fk, ctx, cookie, pid_tgid);

	struct frame_state *st = NULL;
	if (cookie & COOKIE_GO) {
		st = bpf_map_lookup_elem(&frames, &fk);
		if (st && st->restart) {
			// The stack grew (or a preemption request came) in the
			// prologue: morestack re-runs the function from its first
			// instruction. Same call: keep its count and entry time.
			st->restart = 0;
			if (st->depth == 0)
				bpf_map_delete_elem(&frames, &fk);
			return 0;
		}
	}
	struct call_counts *c = counts_of(fk.tgid, fk.func);
	if (!c)
		return 0;
	c->calls++;
	struct call_start start = {};
	if (stacks)
		stack_of(&start.from, ctx, &fk);
	if (!latency || (cookie & COOKIE_NO_LATENCY)) {
		if (stacks)
			add_stack_call(&start.from, 0);
		return 0;
	}

	if (!(cookie & COOKIE_GO))
		st = bpf_map_lookup_elem(&frames, &fk);
	struct start_key sk = {.frame = fk, .depth = st ? st->depth : 0};
	start.ns = bpf_ktime_get_ns();
	if (bpf_map_update_elem(&starts, &sk, &start, BPF_ANY) != 0) {
		count_error(TRACE_ERR_STARTS_FULL);
		return 0;
	}
	if (st) {
		st->depth++;
		return 0;
	}
	struct frame_state first = {.depth = 1};
	if (bpf_map_update_elem(&frames, &fk, &first, BPF_NOEXIST) != 0)
		count_error(TRACE_ERR_FRAMES_FULL);
	return 0;
}

// on_return runs on each RET of a Go function and as the uretprobe of a C
// function.
SEC("uprobe")
int on_return(struct pt_regs *ctx)
{
	__u64 now = bpf_ktime_get_ns();
	__u64 cookie = bpf_get_attach_cookie(ctx);
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	if (!wanted(cookie, pid_tgid >> 32))
		return 0;
	struct frame_key fk;
	frame_of(&fk, ctx, cookie, pid_tgid);
	struct call_counts *c = counts_of(fk.tgid, fk.func);
	if (!c)
		return 0;

	struct frame_state *st = bpf_map_lookup_elem(&frames, &fk);
	if (!st || st->depth == 0) {
		c->unmatched++;
		return 0;
	}
	__u32 depth = --st->depth;
	if (depth == 0 && !st->restart)
		bpf_map_delete_elem(&frames, &fk);

	struct start_key sk = {.frame = fk, .depth = depth};
	struct call_start *start = bpf_map_lookup_elem(&starts, &sk);
	if (!start) {
		c->lost++;
		return 0;
	}
	__u64 ns = now - start->ns;
	if (stacks)
		add_stack_call(&start->from, ns);
	bpf_map_delete_elem(&starts, &sk);
	c->returns++;

	__u32 func = fk.func;
	struct latency_hist *h = bpf_map_lookup_elem(&hists, &func);
	if (!h)
		return 0;
	h->sum_ns += ns;
	__u32 b = bucket(ns);
	if (b < HIST_BUCKETS) // for the verifier
		h->buckets[b]++;
	return 0;
}

// on_stack_growth runs on a Go function's call to runtime.morestack in its
// prologue: the call will re-enter the function from the top once the stack
// has grown, and on_entry must not count it twice.
SEC("uprobe")
int on_stack_growth(struct pt_regs *ctx)
{
	__u64 cookie = bpf_get_attach_cookie(ctx);
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	if (!wanted(cookie, pid_tgid >> 32))
		return 0;
	struct frame_key fk;
	frame_of(&fk, ctx, cookie, pid_tgid);
	struct frame_state *st = bpf_map_lookup_elem(&frames, &fk);
	if (st) {
		st->restart = 1;
		return 0;
	}
	struct frame_state s = {.restart = 1};
	if (bpf_map_update_elem(&frames, &fk, &s, BPF_NOEXIST) != 0)
		count_error(TRACE_ERR_FRAMES_FULL);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
