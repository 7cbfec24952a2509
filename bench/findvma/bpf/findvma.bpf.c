// What finding a VMA costs in the sampler's context (bench/findvma):
// bpf_find_vma on the interrupted instruction, and a walk of every VMA
// with the open-coded task_vma iterator, from a cpu-clock perf_event
// program sampling one process, on alternate samples: each leaves an
// mmap_lock release queued (irq_work) that would make the other fail.
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>

extern int bpf_iter_task_vma_new(struct bpf_iter_task_vma *it, struct task_struct *task, __u64 addr) __ksym;
extern struct vm_area_struct *bpf_iter_task_vma_next(struct bpf_iter_task_vma *it) __ksym;
extern void bpf_iter_task_vma_destroy(struct bpf_iter_task_vma *it) __ksym;

volatile const __u32 target = 0;

// Totals, read by user space when sampling ends.
__u64 find_calls = 0, find_failed = 0, find_ns = 0;
__u64 walk_calls = 0, walk_failed = 0, walk_ns = 0, walk_vmas = 0;
__s64 walk_error = 0;
__u64 turn = 0;

static long found(struct task_struct *task, struct vm_area_struct *vma, void *data)
{
	return 0;
}

static __always_inline void find(struct task_struct *task, __u64 ip)
{
	__u64 t = bpf_ktime_get_ns();
	long err = bpf_find_vma(task, ip, found, NULL, 0);
	__sync_fetch_and_add(&find_ns, bpf_ktime_get_ns() - t);
	__sync_fetch_and_add(&find_calls, 1);
	if (err)
		__sync_fetch_and_add(&find_failed, 1);
}

static __always_inline void walk(struct task_struct *task)
{
	struct bpf_iter_task_vma it;
	struct vm_area_struct *vma;
	__u64 n = 0;
	__u64 t = bpf_ktime_get_ns();
	int err = bpf_iter_task_vma_new(&it, task, 0);
	if (err)
		walk_error = err;
	else
		while ((vma = bpf_iter_task_vma_next(&it)))
			n++;
	bpf_iter_task_vma_destroy(&it);
	__sync_fetch_and_add(&walk_ns, bpf_ktime_get_ns() - t);
	__sync_fetch_and_add(&walk_calls, 1);
	__sync_fetch_and_add(&walk_vmas, n);
	if (err)
		__sync_fetch_and_add(&walk_failed, 1);
}

SEC("perf_event")
int sample(struct bpf_perf_event_data *ctx)
{
	if (bpf_get_current_pid_tgid() >> 32 != target)
		return 0;
	struct task_struct *task = bpf_get_current_task_btf();
	if (__sync_fetch_and_add(&turn, 1) & 1)
		walk(task);
	else
		find(task, ctx->regs.ip);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
