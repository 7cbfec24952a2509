// What finding a VMA costs (bench/findvma): in the sampler's context,
// bpf_find_vma on the interrupted instruction and a walk of every VMA with
// the open-coded task_vma iterator, from a cpu-clock perf_event program
// sampling one process, on every third sample each (each leaves an
// irq_work queued, an mmap_lock release or a task work's scheduling, that
// would make the next fail); the same walk in a task work the sampler
// schedules on the third (Linux 6.18), which runs as the sampled thread
// returns to user space; and in task context, as the process returns from
// a system call.
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>

extern int bpf_iter_task_vma_new(struct bpf_iter_task_vma *it, struct task_struct *task, __u64 addr) __ksym;
extern struct vm_area_struct *bpf_iter_task_vma_next(struct bpf_iter_task_vma *it) __ksym;
extern void bpf_iter_task_vma_destroy(struct bpf_iter_task_vma *it) __ksym;
extern int bpf_task_work_schedule_resume_impl(struct task_struct *task, struct bpf_task_work *tw, void *map__map,
					      bpf_task_work_callback_t callback, void *aux__prog) __ksym;

volatile const __u32 target = 0;

// Totals, read by user space when sampling ends.
struct totals {
	__u64 calls, failed, ns, vmas;
	__s64 error; // the last failure's
};
struct totals finds = {}, walks_in_sampler = {}, walks_in_task = {}, schedules = {}, walks_in_work = {};
__u64 turn = 0;
// Between a task work's scheduling and its run, in total.
__u64 work_delay_ns = 0;

// A task work the sampler schedules on the target, to run in its context
// as it returns to user space.
struct work {
	__u64 scheduled; // when, ns
	struct bpf_task_work tw;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct work);
} works SEC(".maps");

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

static int work_walk(struct bpf_map *map, void *key, void *value)
{
	struct work *w = value;
	__sync_fetch_and_add(&work_delay_ns, bpf_ktime_get_ns() - w->scheduled);
	walk(bpf_get_current_task_btf(), &walks_in_work);
	return 0;
}

// schedule has the target walk its VMAs as it returns to user space.
static __always_inline void schedule(struct task_struct *task)
{
	__u32 zero = 0;
	struct work *w = bpf_map_lookup_elem(&works, &zero);
	if (!w)
		return;
	__u64 t = bpf_ktime_get_ns();
	w->scheduled = t;
	long err = bpf_task_work_schedule_resume_impl(task, &w->tw, &works, work_walk, NULL);
	__sync_fetch_and_add(&schedules.ns, bpf_ktime_get_ns() - t);
	__sync_fetch_and_add(&schedules.calls, 1);
	if (err) {
		schedules.error = err;
		__sync_fetch_and_add(&schedules.failed, 1);
	}
}

SEC("perf_event")
int sample(struct bpf_perf_event_data *ctx)
{
	if (bpf_get_current_pid_tgid() >> 32 != target)
		return 0;
	struct task_struct *task = bpf_get_current_task_btf();
	switch (__sync_fetch_and_add(&turn, 1) % 3) {
	case 0:
		find(task, ctx->regs.ip);
		break;
	case 1:
		walk(task, &walks_in_sampler);
		break;
	default:
		schedule(task);
	}
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
