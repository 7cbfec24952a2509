// What finding a VMA costs (bench/findvma): in the sampler's context,
// bpf_find_vma on the interrupted instruction and a walk of every VMA with
// the open-coded task_vma iterator, from a cpu-clock perf_event program
// sampling one process, on alternate samples (each leaves an mmap_lock
// release queued, an irq_work, that would make the other fail); and the
// same walk in task context, as the process returns from a system call.
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>

extern int bpf_iter_task_vma_new(struct bpf_iter_task_vma *it, struct task_struct *task, __u64 addr) __ksym;
extern struct vm_area_struct *bpf_iter_task_vma_next(struct bpf_iter_task_vma *it) __ksym;
extern void bpf_iter_task_vma_destroy(struct bpf_iter_task_vma *it) __ksym;

volatile const __u32 target = 0;

// Totals, read by user space when sampling ends.
struct totals {
	__u64 calls, failed, ns, vmas;
	__s64 error; // the last failure's
};
struct totals finds = {}, walks_in_sampler = {}, walks_in_task = {};
__u64 turn = 0;

static long found(struct task_struct *task, struct vm_area_struct *vma, void *data)
{
	return 0;
}

static __always_inline void find(struct task_struct *task, __u64 ip)
{
	__u64 t = bpf_ktime_get_ns();
	long err = bpf_find_vma(task, ip, found, NULL, 0);
	__sync_fetch_and_add(&finds.ns, bpf_ktime_get_ns() - t);
	__sync_fetch_and_add(&finds.calls, 1);
	if (err) {
		finds.error = err;
		__sync_fetch_and_add(&finds.failed, 1);
	}
}

static __always_inline void walk(struct task_struct *task, struct totals *w)
{
	struct bpf_iter_task_vma it;
	struct vm_area_struct *vma;
	__u64 n = 0;
	__u64 t = bpf_ktime_get_ns();
	int err = bpf_iter_task_vma_new(&it, task, 0);
	if (err)
		w->error = err;
	else
		while ((vma = bpf_iter_task_vma_next(&it)))
			n++;
	bpf_iter_task_vma_destroy(&it);
	__sync_fetch_and_add(&w->ns, bpf_ktime_get_ns() - t);
	__sync_fetch_and_add(&w->calls, 1);
	__sync_fetch_and_add(&w->vmas, n);
	if (err)
		__sync_fetch_and_add(&w->failed, 1);
}

SEC("perf_event")
int sample(struct bpf_perf_event_data *ctx)
{
	if (bpf_get_current_pid_tgid() >> 32 != target)
		return 0;
	struct task_struct *task = bpf_get_current_task_btf();
	if (__sync_fetch_and_add(&turn, 1) & 1)
		walk(task, &walks_in_sampler);
	else
		find(task, ctx->regs.ip);
	return 0;
}

// Bounded: the target's system calls could be many a second.
#define MAX_TASK_WALKS 1000

SEC("raw_tp/sys_exit")
int syscall_exit(void *ctx)
{
	if (bpf_get_current_pid_tgid() >> 32 != target || walks_in_task.calls >= MAX_TASK_WALKS)
		return 0;
	walk(bpf_get_current_task_btf(), &walks_in_task);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
