// SPDX-License-Identifier: GPL-2.0
// flint's CPU sampler: a perf_event program run by a cpu-clock timer on every
// CPU. It records who ran (process, thread) and their user and kernel stacks,
// and hands them to user space in one of two ways chosen at load time:
//   - in-kernel aggregation: stacks deduplicated by a 64-bit hash in `stacks`,
//     sample counts in `counts`, both drained with batch lookup-and-delete;
//   - ring buffer: one record per sample in `samples`, aggregated in user space.
// docs/BENCHMARKS.md has the measured cost of each.
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_tracing.h>

#include "profile.h"
#include "maps.h"

// Load-time options, set by the loader before the verifier sees the program.
const volatile __u32 target_tgid = 0;	   // 0: every process
const volatile bool kernel_stacks = true;  // false: --no-kernel
const volatile bool use_ringbuf = false;   // false: in-kernel aggregation
const volatile bool unwind_tables = false; // walk user stacks with unwind_rows
const volatile __u32 young_sample = 1;	   // --young-sample N

// A process is young for its first second: its samples are the dearest
// (nothing of it is in the caches or known to user space yet, its stacks
// are new to the store) and, for a short-lived process, most of what it
// costs flint (docs/BENCHMARKS.md). Of a young process's ticks the
// sampler takes one in young_sample, at random, and that sample counts
// young_sample times: its counts stay unbiased, the cost falls as much.
// Its Python code objects are copied as they are sampled (python_young).
#define YOUNG_NS 1000000000ULL

// Every distinct stack, keyed by its hash. The loader sizes max_entries from
// the expected number of samples; a full map is counted in STAT_STACKS_FULL.
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u64);
	__type(value, struct stack_trace);
} stacks SEC(".maps");

// Samples per (process, thread, stacks). Sized like `stacks`.
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, struct sample_key);
	__type(value, __u64);
} counts SEC(".maps");

// One record per sample in ring buffer mode; size set by the loader.
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 20);
} samples SEC(".maps");

// What a process lacks: the lookups that found nothing for it, which its
// samples then skip. Each touches memory that is cold again by the next
// tick: 1.4-1.6 us a sample for python_procs on an AMD EPYC VM
// (docs/BENCHMARKS.md); most processes are neither CPython nor walked by
// unwind rows (Go services).
enum {
	LACKS_PYTHON = 1, // no python_procs entry for its generation
	LACKS_UNWIND = 2, // no unwind_procs entry for its generation
	LACKS_BITS = 2,
};

// A process seen: its generation, and what it lacks (LACKS_*) under the
// tables_epoch in the word's upper bits. One word, written whole, so that
// no reader pairs one epoch with another epoch's lacks.
struct known_proc {
	__u32 generation;
	__u32 lacks;
};

// Processes seen so far: tgid -> struct known_proc. A process's first
// sample (and its first after exec) gets a new generation and a new_proc,
// so user space reads its mappings while it lives and never names an old
// image's samples with the new image. 32768 processes alive at once before
// LRU eviction, which only costs a second notification.
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 32768);
	__type(key, __u32);
	__type(value, struct known_proc);
} known_procs SEC(".maps");

// New-process notifications: a quiet one (quiet_files) waits for the
// next drain, every few seconds; 256 KiB holds 230 listings of a python3
// run (22 executable mappings, 1.1 KiB), 5,400 unlisted announcements.
// Half full, they wake the reader.
#define PROC_EVENTS_RING (256 * 1024)
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, PROC_EVENTS_RING);
} proc_events SEC(".maps");

// Per-CPU counters of samples taken and lost, indexed by enum sampler_stat.
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, STAT_MAX);
	__type(key, __u32);
	__type(value, __u64);
} stats SEC(".maps");

// A sample's Python frames (tagged words, enum python_frame_bits),
// innermost first; also a record of python_young, its size cut after n
// frames, when user space must read their code objects at once.
struct python_stack {
	__u32 pid;
	__u32 generation;
	__u32 record; // PY_RECORD_STACK
	__u32 n;
	__u64 frames[PY_MAX_FRAMES];
};

// A thread off the CPU: since when, and where it waits.
struct off_cpu_span {
	__u64 start; // ktime
	struct sample_key key;
};

// Bumped by every exec and fork: a per-CPU cached generation is valid only
// while no process has changed image or been born since it was cached.
__u64 proc_epoch = 0;

// Moved by user space after it lists a process in python_procs or
// unwind_procs (Sampler.SetPython, SetUnwind): what a process was found
// to lack is valid only while this is what it was then.
__u32 tables_epoch = 0;

// The process last sampled on this CPU, as known_procs knows it. A busy
// CPU runs the same process for many ticks in a row; the cache saves the
// known_procs lookup on those.
struct seen_proc {
	__u64 epoch; // proc_epoch
	__u32 tgid;
	struct known_proc known;
};

// The per-CPU scratch maps a walk uses have two slots: one for the
// programs that run with interrupts off (the sampler, the scheduler's),
// one for a task work taking a sample (sample_listed), which runs with
// them on and may be interrupted by the sampler.
#define SLOT_SAMPLER 0
#define SLOT_TASK_WORK 1

// Per-CPU scratch space: stacks are too large for the 512-byte BPF stack.
// The cache first: it is read on every sample, the rest only in part.
struct scratch {
	struct seen_proc seen;
	struct python_stack python;
	struct off_cpu_span span;
	struct sample_key key;
	struct stack_trace user;
	struct stack_trace kernel;
	struct sample_event event;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 2); // a slot
	__type(key, __u32);
	__type(value, struct scratch);
} scratch SEC(".maps");

// Every loaded binary's unwind rows, one sorted range per binary (user
// space allocates them). 16 bytes a row; the loader sets max_entries from
// --unwind-memory. Mapped into user space, which copies a table's rows
// in: updated a system call a row, a table of 50,000 took 15 ms
// (docs/BENCHMARKS.md).
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct unwind_row);
} unwind_rows SEC(".maps");

// Rows the walker found lately, per CPU, by (the binary's first row, the
// return address from the mapping's base). A deep stack returns through the
// same call sites sample after sample, in every process of a binary, and
// each binary search of a large table reads some 17 rows far apart: over a
// third of a python3 run's BPF time. Valid while unwind_epoch is what it
// was when found.
struct row_cache_entry {
	__u32 first;
	__u32 rel;
	__u32 epoch;
	struct unwind_row row;
};

#define ROW_CACHE_SLOTS 4096

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, ROW_CACHE_SLOTS);
	__type(key, __u32);
	__type(value, struct row_cache_entry);
} row_cache SEC(".maps");

// Moved by user space after each write of unwind_rows (Sampler.WriteRows),
// so that no row found before it, perhaps another binary's, is used from
// row_cache. Never 0 once rows are written: unused slots hold 0.
__u32 unwind_epoch = 0;

// Processes whose user stacks are walked with unwind_rows: tgid -> its
// executable mappings. 4,112 bytes each, allocated as used; a process without an
// entry gets the kernel's frame pointer walk.
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 16384); // collect.maxProcs: every process learned
	__type(key, __u32);
	__type(value, struct unwind_proc);
} unwind_procs SEC(".maps");

// Processes that ran code outside their listed mappings (a library loaded
// after start), as struct new_proc: user space lists them again. At most one
// per process until it does. A record of pid 0 asks for a drain
// (ask_drain).
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 4096);
} stale_procs SEC(".maps");

// For samples of young CPython processes (YOUNG_NS): copies of the
// code objects they ran that the process has not sent before (struct
// python_code). When a sample's copies hold all its code objects, nothing
// need be read while its process lives: they wake no one, and user space
// reads them when it next drains the samples (Sampler.Drain), the samples
// after them. When they lack some (an object too large, a page not
// present, more than PY_MAX_CODES new), the sample's Python frames follow
// (struct python_stack) and wake the reader, which reads the rest from the
// process at once; so do they when the ring is half full. A python3 run's
// first samples copy some 25 code objects, about 1.5 KiB each: 1 MiB fill
// to half in some 14 runs, which at one a second a window's drain reads
// first. Each wake-up costs the agent several context switches; at 256 KiB
// they came every fourth run. The agent maps the ring twice over: its
// size in resident memory (docs/BENCHMARKS.md).
#define PY_YOUNG_RING (1024 * 1024)
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, PY_YOUNG_RING);
} python_young SEC(".maps");

// Set when a sample read the Python frames of a CPython process past
// YOUNG_NS. Their code objects were not copied: user space reads them
// from the process, which must still live, and clears this as it drains.
// It looks at it a second after each drain, drained_at (CLOCK_MONOTONIC):
// the sample that sets it later than PY_ASK_AFTER_NS after a drain asks
// for one (ask_drain). Written only while clear: samples on every CPU
// read it, and each write would take its cache line from all of them.
__u32 old_python_sampled = 0;
__u64 drained_at = 0;
#define PY_ASK_AFTER_NS (900 * 1000 * 1000ULL)

// Code objects copied at most in one sample; the rest wait for the next
// sample, or user space reads them.
#define PY_MAX_CODES 16

// The code objects young processes sent, (tgid, generation, address), or
// for a static one (0, interpreter image ID, offset in the image), in a
// table indexed by a hash of the key: each slot remembers the last key
// that hashed to it. A slot taken by another key only means a code object
// sent twice (user space keeps the first), and two CPUs writing one slot at
// once, at worst one not sent (user space reads it). Plain loads and
// stores, where a hash map's update takes locks and allocates.
struct python_code_key {
	__u32 pid;
	__u32 generation;
	__u64 addr;
};

#define PY_SENT_SLOTS 4096 // a second of young processes' code objects, and more

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, PY_SENT_SLOTS);
	__type(key, __u32);
	__type(value, struct python_code_key);
} python_codes_sent SEC(".maps");

// Where a code object's copy is put together: 5.5 KiB, over the BPF stack.
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct python_code);
} python_code_scratch SEC(".maps");

// CPython processes: tgid -> where their interpreter state is. Allocated
// as used; user space lists every CPython process it learns.
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 16384); // collect.maxProcs
	__type(key, __u32);
	__type(value, struct python_proc);
} python_procs SEC(".maps");

// The thread state of a CPython thread, found once by searching the
// interpreter's thread list: tid -> its PyThreadState (0: none found at
// `checked`, a thread that has none or not yet). Checked on every use.
struct python_thread {
	__u64 tstate;
	__u64 checked; // ktime of the last search, ns
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384); // threads of CPython processes alive at once
	__type(key, __u32);
	__type(value, struct python_thread);
} python_threads SEC(".maps");

__u32 generation = 0;

// Force BTF for the types user space decodes.
const struct sample_event *unused_sample_event __attribute__((unused));
const struct new_proc *unused_new_proc __attribute__((unused));
const struct listed_proc *unused_listed_proc __attribute__((unused));
const struct proc_exit *unused_proc_exit __attribute__((unused));
const enum listed_mapping_flags *unused_listed_mapping_flags __attribute__((unused));
const enum listing_flags *unused_listing_flags __attribute__((unused));
const enum sampler_stat *unused_sampler_stat __attribute__((unused));
const struct unwind_proc *unused_unwind_proc __attribute__((unused));
const enum cfa_kind *unused_cfa_kind __attribute__((unused));
const struct python_proc *unused_python_proc __attribute__((unused));
const enum python_frame_bits *unused_python_frame_bits __attribute__((unused));
const enum python_layout *unused_python_layout __attribute__((unused));
const enum python_room *unused_python_room __attribute__((unused));
const enum python_record *unused_python_record __attribute__((unused));
const struct python_code *unused_python_code __attribute__((unused));

// user_mode reports a tick that interrupted user code: it has no kernel
// stack, and asking for one still costs the helper's setup (x86: the
// privilege level of the interrupted code segment).
static __always_inline bool user_mode(struct bpf_perf_event_data *ctx)
{
	// A full-width load: the verifier refuses narrower reads of the context.
	__u64 cs = *(volatile __u64 *)&ctx->regs.cs;
	return (cs & 3) == 3;
}

// copy_comm copies a task's name: the kernel keeps it NUL-padded, so the
// bytes after the name are zero as the sample keys need.
static __always_inline void copy_comm(char *dst, const char *src)
{
	__builtin_memcpy(dst, src, COMM_LEN);
}

static __always_inline void count(enum sampler_stat s)
{
	percpu_inc(&stats, s);
}

// new_proc_of fills e with what user space needs of a new process tgid.
static __always_inline void new_proc_of(struct new_proc *e, __u32 tgid, __u32 generation)
{
	e->pid = tgid;
	e->generation = generation;
	struct task_struct *leader = BPF_CORE_READ(bpf_get_current_task_btf(), group_leader);
	e->start_boottime = BPF_CORE_READ(leader, start_boottime);
	// The executable's text mapping names the executable: no readlink of
	// /proc/PID/exe (even in a container, whose overlayfs gives the
	// mapping and the exe link different inodes).
	e->start_code = BPF_CORE_READ(leader, mm, start_code);
	if (bpf_probe_read_kernel(e->comm, sizeof(e->comm), &leader->comm))
		__builtin_memset(e->comm, 0, sizeof(e->comm)); // user space reads /proc then
}

// Linux 6.18's task works: absent, every announcement is sent at once.
extern int bpf_task_work_schedule_resume_impl(struct task_struct *task, struct bpf_task_work *tw,
					      void *map__map, bpf_task_work_callback_t callback,
					      void *aux__prog) __ksym __weak;
extern int bpf_iter_task_vma_new(struct bpf_iter_task_vma *it, struct task_struct *task,
				 __u64 addr) __ksym __weak;
extern struct vm_area_struct *bpf_iter_task_vma_next(struct bpf_iter_task_vma *it) __ksym __weak;
extern void bpf_iter_task_vma_destroy(struct bpf_iter_task_vma *it) __ksym __weak;

// An announcement waiting for its process to list its mappings.
struct listing {
	struct bpf_task_work work;
	__u32 sample; // the weight of the sample the sampler handed it, 0: none (sample_listed)
	__u32 pad;
	struct listed_proc proc;
};

// Announcements being listed: tgid -> one. A process that exits before it
// returns to user space never runs its task work: LRU eviction drops it.
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 256);
	__type(key, __u32);
	__type(value, struct listing);
} listings SEC(".maps");

// What a new listings entry is copied from: a value too large for the
// stack, as bytes (a per-CPU map may not hold a task work); never written.
struct listing_bytes {
	__u8 bytes[sizeof(struct listing)];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct listing_bytes);
} blank_listing SEC(".maps");

#define VM_EXEC 0x4

// list_mapping describes vma, an executable mapping of the current process
// whose vDSO starts at vdso, in m.
// vma is the task_vma iterator's, a BTF pointer: its fields, and those of
// the structures it points to, are plain loads (a fault reads 0), not a
// read helper's call each.
static __always_inline void list_mapping(struct listed_mapping *m, struct vm_area_struct *vma,
					 __u64 vdso)
{
	m->start = vma->vm_start;
	m->end = vma->vm_end;
	m->offset = vma->vm_pgoff << 12;
	m->flags = 0;
	struct file *f = vma->vm_file;
	if (!f) {
		m->inode = m->dev = m->inode_generation = 0;
		if (m->start == vdso)
			m->flags = LISTED_VDSO;
		return;
	}
	struct inode *inode = f->f_inode;
	m->inode = inode->i_ino;
	m->dev = inode->i_sb->s_dev;
	m->inode_generation = inode->i_generation;
	// As d_path marks it " (deleted)": an unhashed dentry, not a root.
	struct dentry *d = f->f_path.dentry;
	if (d->d_parent != d && !d->d_hash.pprev)
		m->flags = LISTED_DELETED;
}

// cgroups_key names the cgroups task is in, in every hierarchy: a hash of
// its css_set (shared by the tasks of one membership; named v1
// hierarchies, which have no controller, are only there) and of the
// kernfs IDs of its cgroups, which are never reused, against a css_set
// freed and its memory reused.
static __always_inline __u64 cgroups_key(struct task_struct *task)
{
	__u64 ids[16];
	struct css_set *set = BPF_CORE_READ(task, cgroups);
	ids[0] = (__u64)set;
	ids[1] = BPF_CORE_READ(set, dfl_cgrp, kn, id);
	__u32 n = 2, subsystems = bpf_core_field_size(set->subsys) / sizeof(set->subsys[0]);
	for (__u32 i = 0; i < 14; i++) {
		if (i >= subsystems)
			break;
		struct cgroup_subsys_state *css = NULL;
		bpf_core_read(&css, sizeof(css), &set->subsys[i]);
		ids[n++ & 15] = css ? BPF_CORE_READ(css, cgroup, kn, id) : 0;
	}
	return hash_ips(ids, n, 16);
}

// The mappings user space knows: (file, offset) -> their unwind rows. A
// process mapping only these, in cgroups of quiet_cgroups, is announced
// without waking user space, which names it at its next drain from the
// listing alone, and its tables are filled here (fill_tables).
// User space lists the files of processes that needed nothing more at once
// (no JIT; a CPython's once its interpreter is in quiet_pythons), while a
// process it knows maps them (collect.quietFiles).
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 16384);
	__type(key, struct quiet_file_key);
	__type(value, struct quiet_file);
} quiet_files SEC(".maps");

// The cgroups keys (cgroups_key) user space knows.
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 4096); // collect.maxCgroups
	__type(key, __u64);
	__type(value, __u8);
} quiet_cgroups SEC(".maps");

// Where fill_tables puts an unwind_procs value together: 4 KiB, over the
// BPF stack.
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct unwind_proc);
} unwind_proc_scratch SEC(".maps");

// The CPython interpreters user space knows, by the mapping of their file
// (a quiet_files key) that it found them by: what python_procs would list
// for a process of it, with runtime, image_start and image_end from that
// mapping's start.
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 1024);
	__type(key, struct quiet_file_key);
	__type(value, struct python_proc);
} quiet_pythons SEC(".maps");

// A fill_tables in progress: one bpf_loop iteration a mapping.
struct tables_fill {
	struct listed_proc *l;
	struct unwind_proc *u;
	__u32 with_rows; // mappings with rows, the vDSO aside
	bool unknown;	 // a mapping not in quiet_files
	bool python;	 // mapping python_at is of an interpreter in quiet_pythons
	__u32 python_at;
};

// quiet_key fills k with the key of listed mapping m; false for anonymous
// code (a JIT's), never quiet.
static __always_inline bool quiet_key(struct quiet_file_key *k, struct listed_mapping *m)
{
	__builtin_memset(k, 0, sizeof(*k));
	if (m->flags & LISTED_VDSO)
		return true;
	k->inode = m->inode;
	k->offset = m->offset;
	k->dev = m->dev;
	k->inode_generation = m->inode_generation;
	return m->inode != 0;
}

static long fill_tables_step(__u64 i, void *ctx)
{
	struct tables_fill *f = ctx;
	if (i >= MAX_LISTED_MAPPINGS)
		return 1; // never: a bound the verifier can see
	struct listed_mapping *m = &f->l->mappings[i];
	struct quiet_file_key k;
	struct quiet_file *q;
	if (!quiet_key(&k, m) || !(q = bpf_map_lookup_elem(&quiet_files, &k))) {
		f->unknown = true;
		return 1;
	}
	struct unwind_mapping *e = &f->u->mappings[i];
	e->start = m->start;
	e->end = m->end;
	e->base = m->start + q->base_from_start;
	e->first = q->first;
	e->rows = q->rows;
	if (q->rows && !(m->flags & LISTED_VDSO))
		f->with_rows++;
	if (!f->python && bpf_map_lookup_elem(&quiet_pythons, &k)) {
		f->python = true;
		f->python_at = i;
	}
	return 0;
}

// forget_lack clears what the process tgid was found to lack, on every
// CPU (the epoch makes them read known_procs again): its first samples
// came before its tables.
static __always_inline void forget_lack(__u32 tgid, __u32 what)
{
	struct known_proc *known = bpf_map_lookup_elem(&known_procs, &tgid);
	if (known)
		__sync_fetch_and_and(&known->lacks, ~what);
	__sync_fetch_and_add(&proc_epoch, 1);
}

// fill_python lists the process l announces in python_procs, its
// interpreter found by listed mapping at (none: MAX_LISTED_MAPPINGS).
static __always_inline void fill_python(struct listed_proc *l, __u32 at)
{
	if (at >= MAX_LISTED_MAPPINGS)
		return;
	struct listed_mapping *m = &l->mappings[at];
	struct quiet_file_key k;
	quiet_key(&k, m);
	struct python_proc *tmpl = bpf_map_lookup_elem(&quiet_pythons, &k);
	if (!tmpl)
		return; // taken back since
	struct python_proc p = *tmpl;
	p.generation = l->proc.generation;
	p.runtime += m->start;
	p.image_start += m->start;
	p.image_end += m->start;
	__u32 tgid = l->proc.pid;
	if (bpf_map_update_elem(&python_procs, &tgid, &p, BPF_ANY))
		return; // full: its Python frames are read once user space lists it
	forget_lack(tgid, LACKS_PYTHON);
}

// fill_tables lists the process l announces in unwind_procs as user space
// would, with the rows quiet_files gives (unwind.Tables' rule: not when
// only the vDSO has rows), and sets python_at to the listed mapping its
// interpreter is found by, if quiet_pythons knows one (else
// MAX_LISTED_MAPPINGS). False, and nothing done, when a mapping is not in
// quiet_files: then the process is not quiet; also when unwind_procs is
// full (the kernel allocates entries as they come, and may fail a
// burst's).
static __always_inline bool fill_tables(struct listed_proc *l, __u32 *python_at)
{
	__u32 zero = 0;
	struct tables_fill f = {.l = l, .u = bpf_map_lookup_elem(&unwind_proc_scratch, &zero)};
	if (!f.u)
		return false;
	__u32 n = l->len;
	if (n > MAX_LISTED_MAPPINGS)
		return false;
	bpf_loop(n, fill_tables_step, &f, 0);
	if (f.unknown)
		return false;
	*python_at = f.python ? f.python_at : MAX_LISTED_MAPPINGS;
	if (!f.with_rows)
		return true; // frame pointers
	f.u->generation = l->proc.generation;
	f.u->len = n;
	f.u->stale = 0;
	f.u->pad = 0;
	__u32 tgid = l->proc.pid;
	if (bpf_map_update_elem(&unwind_procs, &tgid, f.u, BPF_ANY))
		return false;
	forget_lack(tgid, LACKS_UNWIND);
	return true;
}

__noinline int sample_listed(__u32 generation, __u32 weight);

// list_proc lists the executable mappings of the current process, which
// l announces, and sends the announcement. Not inlined: its frame is gone
// when the task work takes a sample (sample_listed), and the two chains
// of calls fit in the 512 bytes of stack BPF allows, under the sampler's
// too (counted so where the kernel lacks task works).
static __noinline int list_proc(struct listed_proc *l)
{
	struct task_struct *task = bpf_get_current_task_btf();
	__u64 vdso = (__u64)BPF_CORE_READ(task, mm, context.vdso);
	struct bpf_iter_task_vma it;
	struct vm_area_struct *vma;
	__u32 relisted = l->flags & LISTING_RELISTED;
	l->len = 0;
	l->flags = bpf_iter_task_vma_new(&it, task, 0) == 0 ? LISTING_COMPLETE : 0;
	while (l->flags && (vma = bpf_iter_task_vma_next(&it))) {
		if (!(vma->vm_flags & VM_EXEC))
			continue;
		// Counted in the map, not a register: the verifier then
		// sees each turn alike, not one per count.
		__u32 n = l->len;
		if (n >= MAX_LISTED_MAPPINGS) {
			l->flags = 0;
			break;
		}
		list_mapping(&l->mappings[n], vma, vdso);
		l->len = n + 1;
	}
	bpf_iter_task_vma_destroy(&it);
	l->cgroups = cgroups_key(task);
	__u64 wake = BPF_RB_FORCE_WAKEUP;
	__u32 python_at = MAX_LISTED_MAPPINGS;
	bool quiet = l->flags && bpf_map_lookup_elem(&quiet_cgroups, &l->cgroups) &&
		     fill_tables(l, &python_at);
	l->flags |= relisted;
	if (quiet)
		l->flags |= LISTING_TABLES_FILLED;
	if (quiet && bpf_ringbuf_query(&proc_events, BPF_RB_AVAIL_DATA) <= PROC_EVENTS_RING / 2) {
		wake = BPF_RB_NO_WAKEUP;
		count(STAT_PROCS_QUIET);
	}
	__u32 n = l->len;
	if (n > MAX_LISTED_MAPPINGS)
		n = MAX_LISTED_MAPPINGS; // as it is: tells the verifier
	if (bpf_ringbuf_output(
		&proc_events, l,
		offsetof(struct listed_proc, mappings) + n * sizeof(struct listed_mapping), wake))
		count(STAT_PROC_EVENTS_LOST);
	// After the announcement: a Python sample's records (python_young)
	// then come after it, and user space, which reads announcements
	// before each of them, knows their process.
	if (quiet)
		fill_python(l, python_at);
	return 0;
}

// list_mappings is the task work of a listings entry: in the process's
// own context, where walking its mappings is allowed (not in the sampler,
// which runs with interrupts off), it lists the executable ones and sends
// the announcement (list_proc: about 56 us a python3 process, 34 of them
// the walk of its hundred-odd mappings, docs/BENCHMARKS.md), then
// takes the sample handed to it (25-30 us). The kernel's BPF
// statistics do not count a task work's time: it is timed here
// (STAT_TASK_WORK_NS).
static int list_mappings(struct bpf_map *map, void *key, void *value)
{
	__u64 start = bpf_ktime_get_ns();
	struct listing *listing = value;
	__u32 generation = listing->proc.proc.generation;
	struct known_proc *known = bpf_map_lookup_elem(&known_procs, key);
	if (known && known->generation == generation) {
		list_proc(&listing->proc);
		if (listing->sample)
			sample_listed(generation, listing->sample);
	}
	bpf_map_delete_elem(map, key);
	percpu_add(&stats, STAT_TASK_WORK_NS, bpf_ktime_get_ns() - start);
	return 0;
}

// announce_listed has the current process announce itself with its
// mappings as it returns to user code; false when it cannot. relisted:
// announced before (LISTING_RELISTED), and not while a listing of it is
// pending, which lists what it has then; the first announcement replaces
// a listing left by an earlier process of the PID. sample: the weight of
// the current thread's sample, which the listing takes after it
// (sample_listed); 0: none.
static __always_inline bool announce_listed(__u32 tgid, __u32 generation, bool relisted,
					    __u32 sample)
{
	if (!bpf_task_work_schedule_resume_impl) // a weak symbol: 0 when absent
		return false;
	__u32 zero = 0;
	struct listing_bytes *blank = bpf_map_lookup_elem(&blank_listing, &zero);
	if (!blank ||
	    bpf_map_update_elem(&listings, &tgid, blank, relisted ? BPF_NOEXIST : BPF_ANY))
		return false;
	struct listing *l = bpf_map_lookup_elem(&listings, &tgid);
	if (!l)
		return false;
	new_proc_of(&l->proc.proc, tgid, generation);
	l->proc.flags = relisted ? LISTING_RELISTED : 0;
	l->sample = sample;
	if (bpf_task_work_schedule_resume_impl(bpf_get_current_task_btf(), &l->work, &listings,
					       list_mappings, NULL)) {
		bpf_map_delete_elem(&listings, &tgid);
		return false;
	}
	return true;
}

// single_threaded reports whether the current process has one thread:
// while it sleeps in the kernel, nothing of the process runs, and its
// listing is in time when it returns to user code (or exits).
static __always_inline bool single_threaded(void)
{
	return BPF_CORE_READ(bpf_get_current_task_btf(), signal, nr_threads) == 1;
}

// announce returns what known_procs knows of tgid, announcing the process
// to user space the first time it is seen. Listed when a sample (of
// weight, the ticks it counts for; 0: not sampling) interrupted user code
// (in_user), whose return runs the listing at once, or when no other
// thread could run while this one sleeps in the kernel
// (most new processes, in a page fault or system call of their start);
// else unlisted, now: a thread in the kernel may sleep there for long
// while the others run, and the off-CPU program runs in the scheduler.
// A sample of user code is handed to the listing (*handed), which walks
// it with the tables it fills: the sampler has none for the process yet.
static __always_inline struct known_proc announce(__u32 tgid, __u32 weight, bool in_user,
						  bool *handed)
{
	struct known_proc *known = bpf_map_lookup_elem(&known_procs, &tgid);
	if (known)
		return *known;

	struct known_proc k = {.generation = __sync_fetch_and_add(&generation, 1) + 1};
	if (bpf_map_update_elem(&known_procs, &tgid, &k, BPF_NOEXIST) != 0) {
		// Another CPU announced it first: use its generation.
		known = bpf_map_lookup_elem(&known_procs, &tgid);
		return known ? *known : k;
	}
	bool hand = weight && in_user && use_ringbuf;
	if (weight && (in_user || single_threaded()) &&
	    announce_listed(tgid, k.generation, false, hand ? weight : 0)) {
		*handed = hand;
		return k;
	}
	struct new_proc *e = bpf_ringbuf_reserve(&proc_events, sizeof(*e), 0);
	if (!e) {
		count(STAT_PROC_EVENTS_LOST);
		return k;
	}
	new_proc_of(e, tgid, k.generation);
	// Forced: quiet announcements may wait unread before it.
	bpf_ringbuf_submit(e, BPF_RB_FORCE_WAKEUP);
	return k;
}

// see_proc makes this CPU's cache (c, the scratch's) tgid's: its
// generation announced (announce, weight and in_user), and what it lacks
// if found under the current tables_epoch. True when the announcement took
// the sample, for its listing to take (sample_listed).
static __always_inline bool see_proc(struct seen_proc *c, __u32 tgid, __u32 weight, bool in_user)
{
	bool handed = false;
	// Read the epochs before the lookups: an exec, fork or listing
	// racing with them leaves a stale epoch in the cache, never a stale
	// generation or lack.
	__u64 epoch = *(volatile __u64 *)&proc_epoch;
	__u32 tables = *(volatile __u32 *)&tables_epoch << LACKS_BITS;
	if (c->tgid != tgid || c->epoch != epoch || !c->known.generation) {
		c->known = announce(tgid, weight, in_user, &handed);
		c->tgid = tgid;
		c->epoch = epoch;
	}
	if ((c->known.lacks & -(1U << LACKS_BITS)) != tables)
		c->known.lacks = tables;
	return handed;
}

// learn_lack records that the process of c lacks what: for its next
// samples on this CPU and, through known_procs, on every CPU.
static __always_inline void learn_lack(struct seen_proc *c, __u32 what)
{
	c->known.lacks |= what;
	struct known_proc *known = bpf_map_lookup_elem(&known_procs, &c->tgid);
	if (known && known->generation == c->known.generation)
		*(volatile __u32 *)&known->lacks = c->known.lacks;
}

// frames_of returns the frames in n bytes of stack a helper wrote, or
// returned as an error, counted in err (none when the stack is absent).
static __always_inline __u32 frames_of(long n, enum sampler_stat err)
{
	if (n < 0) {
		if (n != -EFAULT)
			count(err);
		return 0;
	}
	return n / sizeof(__u64);
}

// stack_frames writes the stack flags ask for to ips (MAX_STACK_DEPTH of
// them) and returns how many frames it holds, counting failures in err
// (a kernel thread has no user stack; user code has no kernel stack).
static __always_inline __u32 stack_frames(void *ctx, __u64 *ips, __u64 flags, enum sampler_stat err)
{
	return frames_of(bpf_get_stack(ctx, ips, MAX_STACK_DEPTH * sizeof(__u64), flags), err);
}

// hash_stack returns the hash of s, or 0 when it is empty.
static __always_inline __u64 hash_stack(struct stack_trace *s)
{
	return s->len ? hash_ips(s->ips, s->len, MAX_STACK_DEPTH) : 0;
}

// The DWARF walker. One bpf_loop iteration a frame keeps the verifier's work
// independent of the depth; the searches inside are bounded loops.

// Binary search steps: enough for MAX_UNWIND_MAPPINGS mappings and for
// 1 << 24 rows in one binary (user space refuses larger tables).
#define MAPPING_SEARCH_STEPS 8
#define ROW_SEARCH_STEPS 24

// Where a signal handler's frame keeps the interrupted registers: the
// kernel's struct rt_sigframe puts a struct ucontext at the handler's CFA,
// whose uc_mcontext (struct sigcontext) starts 40 bytes in.
#define UC_RBP (40 + 80)
#define UC_RSP (40 + 120)
#define UC_RIP (40 + 128)

struct walk {
	__u64 ip, sp, bp;
	__u64 *ips;
	struct unwind_proc *proc;
	struct walk_scratch *ws;
	__u32 tgid, generation;
	bool exact; // ip is where the code was, not a return address
	bool complete;
	bool fault;
	bool by_rows; // every frame so far was left by an unwind row
	bool stale;   // code known to be real is outside the listed mappings
};

static __always_inline bool read_user(__u64 *dst, __u64 addr)
{
	return bpf_probe_read_user(dst, sizeof(*dst), (const void *)addr) == 0;
}

// A walk reads two words of each frame, up the stack. Read apart, they
// cost 177 ns a frame of a python3 run's 70-frame walks (timed, the
// timer's own cost in): the walk copies the aligned block they are in
// instead, and reads the next frames from it, 79 ns a frame
// (docs/BENCHMARKS.md). A block lies within one page, so
// it is readable when the words are.
#define STACK_BLOCK 2048
_Static_assert(STACK_BLOCK <= 4096 && (STACK_BLOCK & (STACK_BLOCK - 1)) == 0,
	       "a stack block is a power of two within a page");

// The first bytes of a Python frame, where the fields a step reads are
// (3.9's f_lasti ends at 108): one read of them, not three or four, one a
// field.
#define PY_FRAME_HEAD 128

// What a walk keeps outside the BPF stack. Its depth is here, not in
// struct walk: the verifier follows values on the stack exactly, and
// checked bpf_loop's callback for each depth apart, 233,000 instructions
// for the agent's program where it now checks 156,000 (its limit is a
// million); it does not follow values in maps.
struct walk_scratch {
	__u32 n; // frames in the walk's ips
	__u32 pad;
	__u64 words[2];	  // read_stack's
	__u64 block_addr; // where block was copied from; odd: nothing
	__u8 block[STACK_BLOCK];
	__u8 frame_head[PY_FRAME_HEAD + 8]; // a Python frame's (python_walk)
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 2); // a slot
	__type(key, __u32);
	__type(value, struct walk_scratch);
} walk_scratch SEC(".maps");

// read_stack copies the 16 bytes of the current task's stack at addr to
// ws->words by way of ws's block; 0 when it did, else the read's error. A
// global function: the verifier checks it once, not once for each path of
// each step of a walk (inlined, it checked 787,000 instructions).
__noinline int read_stack(struct walk_scratch *ws, __u64 addr)
{
	if (!ws)
		return -1;
	// An odd block_addr is no block: addresses just above it must not
	// read the bytes left from another stack.
	__u64 off = addr - ws->block_addr;
	if ((ws->block_addr & 1) || off > STACK_BLOCK - 16) {
		__u64 start = addr & ~(__u64)(STACK_BLOCK - 1);
		off = addr - start;
		if (off > STACK_BLOCK - 16 || // across the block's end
		    bpf_probe_read_user(ws->block, STACK_BLOCK, (const void *)start) != 0) {
			ws->block_addr = 1;
			return bpf_probe_read_user(ws->words, sizeof(ws->words),
						   (const void *)addr);
		}
		ws->block_addr = start;
	}
	if (off > STACK_BLOCK - 16) // known above; the verifier's bound
		return -1;
	__builtin_memcpy(ws->words, ws->block + off, sizeof(ws->words));
	return 0;
}

// The searches below are branch-free: a fixed number of halvings, each
// moving base by half or not by arithmetic, never by a jump. Branches would
// give the verifier two paths an iteration to follow, and it took over a
// second to load the program.

// le is 1 when a <= b, else 0 (both below 2^63).
static __always_inline __u64 le(__u64 a, __u64 b)
{
	return 1 - ((b - a) >> 63);
}

// find_mapping returns the mapping of p containing pc, or NULL.
static __always_inline struct unwind_mapping *find_mapping(struct unwind_proc *p, __u64 pc)
{
	__u32 n = p->len;
	if (n == 0 || n > MAX_UNWIND_MAPPINGS)
		return NULL;
	__u32 base = 0;
	for (int i = 0; i < MAPPING_SEARCH_STEPS; i++) {
		__u32 half = n / 2;
		__u64 start = p->mappings[(base + half) & (MAX_UNWIND_MAPPINGS - 1)].start;
		base += half & -(__u32)le(start, pc);
		n -= half;
	}
	struct unwind_mapping *m = &p->mappings[base & (MAX_UNWIND_MAPPINGS - 1)];
	return m->start <= pc && pc < m->end ? m : NULL;
}

// search_rows returns m's row covering rel (a pc from m's base), or NULL
// when rel precedes them all.
static __always_inline struct unwind_row *search_rows(struct unwind_mapping *m, __u32 rel)
{
	__u32 base = m->first, n = m->rows;
	for (int i = 0; i < ROW_SEARCH_STEPS; i++) {
		if (n <= 1)
			break; // small tables: fewer steps (the one branch per step)
		__u32 half = n / 2, mid = base + half;
		struct unwind_row *r = bpf_map_lookup_elem(&unwind_rows, &mid);
		if (!r)
			return NULL;
		base += half & -(__u32)le(r->pc, rel);
		n -= half;
	}
	struct unwind_row *r = bpf_map_lookup_elem(&unwind_rows, &base);
	return r && r->pc <= rel ? r : NULL;
}

// find_row returns m's row covering pc, or NULL when pc precedes them all;
// for a return address (exact false), by way of row_cache.
static __always_inline struct unwind_row *find_row(struct unwind_mapping *m, __u64 pc, bool exact)
{
	if (pc < m->base || pc - m->base > 0xffffffffULL)
		return NULL;
	__u32 rel = pc - m->base;
	if (exact) // where a sample stopped: rarely the same twice
		return search_rows(m, rel);
	__u32 epoch = *(volatile __u32 *)&unwind_epoch;
	__u32 slot = ((rel ^ (m->first << 7)) * 0x9E3779B1u) >> 20; // 12 bits: ROW_CACHE_SLOTS
	struct row_cache_entry *e = bpf_map_lookup_elem(&row_cache, &slot);
	if (!e)
		return search_rows(m, rel);
	if (e->rel == rel && e->first == m->first && e->epoch == epoch)
		return &e->row;
	struct unwind_row *r = search_rows(m, rel);
	if (r) {
		e->first = m->first;
		e->rel = rel;
		e->epoch = epoch;
		e->row = *r;
	}
	return r;
}

// ask_drain wakes user space to drain soon (Sampler.DrainSoon): a
// stale_procs record of no process.
static __always_inline void ask_drain(void)
{
	struct new_proc *e = bpf_ringbuf_reserve(&stale_procs, sizeof(*e), 0);
	if (!e)
		return; // full: its reader has records to wake for
	__builtin_memset(e, 0, sizeof(*e));
	bpf_ringbuf_submit(e, BPF_RB_FORCE_WAKEUP);
}

// mark_stale has w's process's mappings listed again, once: by the
// process itself as it returns to user code (announce_listed), as a new
// process is, when the walk began there (in_user) or the process has one
// thread, unless the walk is a task work's (may_list false); else by user
// space, told in stale_procs.
static __always_inline void mark_stale(struct walk *w, bool in_user, bool may_list)
{
	if (w->proc->stale)
		return;
	w->proc->stale = 1;
	count(STAT_UNWIND_STALE);
	if (may_list && (in_user || single_threaded()) &&
	    announce_listed(w->tgid, w->generation, true, 0))
		return;
	struct new_proc *e = bpf_ringbuf_reserve(&stale_procs, sizeof(*e), 0);
	if (!e)
		return; // the flag stays set: user space finds it when it next lists
	__builtin_memset(e, 0, sizeof(*e));
	e->pid = w->tgid;
	e->generation = w->generation;
	bpf_ringbuf_submit(e, 0);
}

// walk_step records w's frame and moves w to its caller; 1 ends the walk.
static long walk_step(__u64 i, void *arg)
{
	struct walk *w = arg;
	struct walk_scratch *ws = w->ws;
	__u32 n = ws->n;
	if (n >= MAX_STACK_DEPTH || w->ip == 0)
		return 1;
	w->ips[n] = w->ip;
	ws->n = n + 1;

	// A return address is the instruction after the call, which may
	// belong to the next function: look up the call's last byte.
	__u64 pc = w->exact ? w->ip : w->ip - 1;
	struct unwind_mapping *m = find_mapping(w->proc, pc);
	struct unwind_row *r = NULL;
	if (!m) {
		// The leaf is always real code, and so is a caller found by
		// rows all the way from it (a library loaded since, calling
		// back into listed code); a caller found by frame pointers
		// through code without them may be a bad address.
		if (w->by_rows)
			w->stale = true;
	} else if (m->rows) {
		r = find_row(m, pc, w->exact);
	}
	w->by_rows = w->by_rows && r;

	// Frame pointers unless a row says otherwise: the caller's RBP at the
	// frame's RBP, the return address above it.
	__u64 cfa = w->bp + 16;
	__s64 rbp_offset = -16;
	__u8 kind = r ? r->cfa : CFA_UNDEFINED;
	switch (kind) {
	case CFA_END:
		w->complete = true;
		return 1;
	case CFA_SIGNAL: {
		__u64 uc = w->sp;
		if (!read_user(&w->bp, uc + UC_RBP) || !read_user(&w->sp, uc + UC_RSP) ||
		    !read_user(&w->ip, uc + UC_RIP)) {
			w->fault = true;
			return 1;
		}
		w->exact = true; // the interrupted instruction itself
		return 0;
	}
	case CFA_RSP:
		cfa = w->sp + r->cfa_offset;
		rbp_offset = r->rbp_offset;
		break;
	case CFA_RBP:
		cfa = w->bp + r->cfa_offset;
		rbp_offset = r->rbp_offset;
		break;
	case CFA_PLT:
		cfa = w->sp + 8 + ((w->ip & 15) >= (__u64)r->cfa_offset ? 8 : 0);
		rbp_offset = r->rbp_offset;
		break;
	}
	// The caller's frame is above this one: a CFA below SP is garbage.
	if (cfa <= w->sp)
		return 1;
	// The return address and the 8 bytes below it, where a frame pointer
	// prologue leaves the caller's RBP: one read for both.
	if (read_stack(ws, cfa - 16) != 0) {
		w->fault = true;
		return 1;
	}
	__u64 ra = ws->words[1];
	if (rbp_offset == -16) {
		w->bp = ws->words[0];
	} else if (rbp_offset) {
		// Saved below the return address, as registers are: the 8
		// bytes above it are the frame's too.
		if (read_stack(ws, cfa + rbp_offset) != 0) {
			w->fault = true;
			return 1;
		}
		w->bp = ws->words[0];
	}
	w->sp = cfa;
	w->ip = ra;
	w->exact = false;
	return 0;
}

// walk_user writes the current task's user stack to ips walking with unwind
// tables, and returns its depth; -1 when its process has no tables (the
// kernel's frame pointer walk applies). seen is the process. in_user says
// ctx is a perf event's that interrupted user code, whose registers are
// where the walk starts; else the registers the task saved entering the
// kernel are. slot: the caller's scratch slot; a task work's walk
// (SLOT_TASK_WORK) schedules no other (mark_stale).
static __always_inline long walk_user(void *ctx, bool in_user, struct task_struct *task,
				      struct seen_proc *seen, __u64 *ips, __u32 slot)
{
	if (!unwind_tables || seen->known.lacks & LACKS_UNWIND)
		return -1;
	// Generation 0: listed before its first sample, as the one process
	// `flint record -p` samples is.
	__u32 tgid = seen->tgid, gen = seen->known.generation;
	struct unwind_proc *p = bpf_map_lookup_elem(&unwind_procs, &tgid);
	if (!p || (p->generation && p->generation != gen)) {
		learn_lack(seen, LACKS_UNWIND);
		return -1;
	}
	__u32 key = slot; // its address taken: slot stays a constant
	struct walk_scratch *ws = bpf_map_lookup_elem(&walk_scratch, &key);
	if (!ws)
		return -1;
	struct walk w = {.ips = ips,
			 .proc = p,
			 .ws = ws,
			 .tgid = tgid,
			 .generation = gen,
			 .exact = true,
			 .by_rows = true};
	if (in_user) {
		// Loads at fixed offsets of the context, as the verifier wants.
		struct bpf_perf_event_data *pe = ctx;
		w.ip = *(volatile __u64 *)&pe->regs.ip;
		w.sp = *(volatile __u64 *)&pe->regs.sp;
		w.bp = *(volatile __u64 *)&pe->regs.bp;
	} else {
		if (!task->mm)
			return 0; // a kernel thread
		struct pt_regs *regs = (struct pt_regs *)bpf_task_pt_regs(task);
		if (!regs)
			return 0;
		w.ip = regs->ip;
		w.sp = regs->sp;
		w.bp = regs->bp;
	}
	ws->n = 0;
	ws->block_addr = 1; // another stack's, perhaps at the same addresses
	count(STAT_UNWIND_WALKS);
	bpf_loop(MAX_STACK_DEPTH, walk_step, &w, 0);
	if (w.stale)
		mark_stale(&w, in_user, slot == SLOT_SAMPLER);
	if (w.complete)
		count(STAT_UNWIND_COMPLETE);
	if (w.fault)
		count(STAT_UNWIND_FAULTS);
	return ws->n;
}

// store_stack puts s, whose hash is hash, in map (`stacks`, or
// `off_cpu_stacks`) unless it is there, and returns hash. A lookup first:
// most stacks are there already, and an update that finds its key still
// takes a free entry of an LRU map, evicting another when there is none.
static __always_inline __u64 store_stack(void *map, struct stack_trace *s, __u64 hash)
{
	if (!hash || bpf_map_lookup_elem(map, &hash))
		return hash;
	long err = bpf_map_update_elem(map, &hash, s, BPF_NOEXIST);
	if (err && err != -EEXIST)
		count(STAT_STACKS_FULL);
	return hash;
}

// The Python walker: the thread's PyThreadState, then its frame chain,
// one bpf_loop iteration a thread or frame.

// How many threads of one interpreter a search looks at, and how often a
// thread without a thread state searches again.
#define PY_MAX_THREADS 256
#define PY_SEARCH_INTERVAL_NS 1000000000ULL

struct python_search {
	struct python_offsets *o;
	__u64 tstate; // the one looked at
	__u64 self;   // the sampled thread's pthread_self()
	__u64 found;
};

static long python_search_step(__u64 i, void *arg)
{
	struct python_search *s = arg;
	__u64 id;
	if (!s->tstate || !read_user(&id, s->tstate + s->o->tstate_thread_id))
		return 1;
	if (id == s->self) {
		s->found = s->tstate;
		return 1;
	}
	return read_user(&s->tstate, s->tstate + s->o->tstate_next) ? 0 : 1;
}

// python_tstate returns the sampled thread's PyThreadState, 0 if it has
// none. A thread's state is where it says it belongs to the thread whose
// TLS base (what pthread_self returns, in any PID namespace) is self.
static __always_inline __u64 python_tstate(struct python_proc *p, __u32 tid, __u64 self)
{
	struct python_thread *t = bpf_map_lookup_elem(&python_threads, &tid);
	__u64 id, now = bpf_ktime_get_ns();
	if (t && t->tstate && read_user(&id, t->tstate + p->o.tstate_thread_id) && id == self)
		return t->tstate;
	if (t && !t->tstate && now - t->checked < PY_SEARCH_INTERVAL_NS)
		return 0;
	struct python_search s = {.o = &p->o, .self = self};
	__u64 interp;
	if (read_user(&interp, p->runtime + p->o.interpreters_head) && interp &&
	    read_user(&s.tstate, interp + p->o.threads_head))
		bpf_loop(PY_MAX_THREADS, python_search_step, &s, 0);
	struct python_thread found = {.tstate = s.found, .checked = now};
	bpf_map_update_elem(&python_threads, &tid, &found, BPF_ANY);
	return s.found;
}

struct python_walk {
	struct python_offsets *o;
	__u64 frame;
	__u64 *out;
	__u8 *head;	// PY_FRAME_HEAD + 8 bytes
	__u32 head_len; // bytes of a frame read: up to its last field read
	__u32 n;
};

static __always_inline __u32 max_u32(__u32 a, __u32 b)
{
	return a > b ? a : b;
}

// head_field returns size bytes (1, 4 or 8) of the frame head read at off,
// which python_frames checked is within head_len.
static __always_inline __u64 head_field(__u8 *head, __u16 off, __u32 size)
{
	__u64 v = 0;
	off &= PY_FRAME_HEAD - 1; // for the verifier
	if (size == 1)
		__builtin_memcpy(&v, head + off, 1);
	else if (size == 4)
		__builtin_memcpy(&v, head + off, 4);
	else
		__builtin_memcpy(&v, head + off, 8);
	return v;
}

#define PY_OWNED_BY_CSTACK 3
#define PY_INDEX_MAX ((1ULL << PY_FRAME_INDEX_BITS) - 1)

static long python_frame_step(__u64 i, void *arg)
{
	struct python_walk *w = arg;
	struct python_offsets *o = w->o;
	__u32 n = w->n;
	if (!w->frame || n >= PY_MAX_FRAMES)
		return 1;
	__u64 frame = w->frame, instr = 0;
	__u32 len = w->head_len;
	if (len == 0 || len > PY_FRAME_HEAD ||
	    bpf_probe_read_user(w->head, len, (const void *)frame) != 0)
		return 1;
	__u64 code = head_field(w->head, o->frame_code, 8);
	w->frame = head_field(w->head, o->frame_previous, 8);
	__u8 owner = o->layout != PY_FRAME_OBJECT ? head_field(w->head, o->frame_owner, 1) : 0;
	if (o->layout == PY_FRAME_OWNER && owner == PY_OWNED_BY_CSTACK) {
		// A shim the eval loop pushes when C calls it: the frame
		// before it (leaf side) was that call's outermost.
		if (n > 0)
			w->out[n - 1] |= 1ULL << PY_FRAME_ENTRY;
		return 0;
	}
	bool entry = true;
	if (o->layout == PY_FRAME_OBJECT) {
		int lasti = head_field(w->head, o->frame_instr, 4);
		instr = lasti > 0 ? lasti : 0;
	} else {
		instr = head_field(w->head, o->frame_instr, 8);
		__u64 first = code + o->code_bytecode;
		instr = instr > first ? (instr - first) / 2 : 0;
		entry = o->layout == PY_FRAME_IS_ENTRY && owner;
	}
	if (instr > PY_INDEX_MAX)
		instr = PY_INDEX_MAX;
	w->out[n] = 1ULL << PY_FRAME_MARK | (entry ? 1ULL << PY_FRAME_ENTRY : 0) |
		    instr << PY_FRAME_INDEX_SHIFT |
		    ((code >> PY_FRAME_CODE_ALIGN) & ((1ULL << PY_FRAME_INDEX_SHIFT) - 1));
	w->n = n + 1;
	return 0;
}

// python_frames writes the Python frames of the sampled thread to out and
// returns how many; -1 when the process is not listed as CPython. A global
// function: the verifier checks it once, not once for each path of its
// callers, which the unwinder's already multiply.
__noinline int python_frames(__u32 tgid, __u32 tid, __u32 gen, __u64 fsbase,
			     struct python_stack *out)
{
	struct python_proc *p = bpf_map_lookup_elem(&python_procs, &tgid);
	if (!p || (p->generation && p->generation != gen))
		return -1;
	if (!out)
		return 0;
	__u32 zero = 0;
	struct walk_scratch *ws = bpf_map_lookup_elem(&walk_scratch, &zero);
	if (!ws)
		return 0;
	struct python_offsets *o = &p->o;
	__u32 len = o->frame_code + 8;
	len = max_u32(len, o->frame_previous + 8);
	len = max_u32(len, o->frame_instr + (o->layout == PY_FRAME_OBJECT ? 4 : 8));
	if (o->layout != PY_FRAME_OBJECT)
		len = max_u32(len, o->frame_owner + 1);
	if (len > PY_FRAME_HEAD)
		return 0; // not offsets flint has (internal/python)
	__u64 tstate = python_tstate(p, tid, fsbase);
	struct python_walk w = {
	    .o = o, .out = out->frames, .head = ws->frame_head, .head_len = len};
	if (!tstate || !read_user(&w.frame, tstate + p->o.tstate_frame)) {
		count(STAT_PYTHON_NO_THREAD);
		return 0;
	}
	if (p->o.cframe && w.frame && !read_user(&w.frame, w.frame + p->o.cframe_frame))
		return 0;
	bpf_loop(PY_MAX_FRAMES, python_frame_step, &w, 0);
	if (w.n)
		count(STAT_PYTHON_STACKS);
	return w.n;
}

// A loop the verifier checks once, not once an iteration.
struct python_append {
	__u64 *ips;
	struct python_stack *python;
	__u32 len;
};

static long python_append_step(__u64 i, void *arg)
{
	struct python_append *a = arg;
	__u32 len = a->len;
	if (len >= MAX_STACK_DEPTH || i >= PY_MAX_FRAMES)
		return 1;
	a->ips[len] = a->python->frames[i];
	a->len = len + 1;
	return 0;
}

// user_frames writes the user stack to ips, by unwind tables when the
// process has them, then the Python frames of a CPython thread, and
// returns its depth; seen and in_user as walk_user's. python is scratch
// space for those.
static __always_inline __u32 user_frames(void *ctx, bool in_user, struct task_struct *task,
					 struct seen_proc *seen, __u32 tid, __u64 *ips,
					 struct python_stack *python)
{
	__u32 np = 0;
	if (!(seen->known.lacks & LACKS_PYTHON)) {
		int found = python_frames(seen->tgid, tid, seen->known.generation,
					  task->thread.fsbase, python);
		if (found < 0)
			learn_lack(seen, LACKS_PYTHON);
		else
			np = found < PY_MAX_FRAMES ? found : PY_MAX_FRAMES;
	}
	long n = walk_user(ctx, in_user, task, seen, ips, SLOT_SAMPLER);
	if (n < 0)
		n = stack_frames(ctx, ips, BPF_F_USER_STACK, STAT_USER_STACK_ERR);
	// The Python frames fit in place of the outermost native ones: a
	// stack this deep is cut at the root either way.
	if (n > MAX_STACK_DEPTH - np)
		n = MAX_STACK_DEPTH - np;
	struct python_append a = {.ips = ips, .python = python, .len = n};
	bpf_loop(np, python_append_step, &a, 0);
	python->n = np;
	return a.len;
}

// stack_key fills key with the current task's process (sc->seen), thread
// and stacks, stored in stack_map; in_user as walk_user's.
static __always_inline void stack_key(void *ctx, bool in_user, struct task_struct *task, __u32 tid,
				      struct scratch *sc, void *stack_map, struct sample_key *key)
{
	__builtin_memset(key, 0, sizeof(*key));
	key->pid = sc->seen.tgid;
	key->tid = tid;
	key->generation = sc->seen.known.generation;
	copy_comm(key->comm, task->group_leader->comm);
	copy_comm(key->thread, task->comm);
	sc->user.len = user_frames(ctx, in_user, task, &sc->seen, tid, sc->user.ips, &sc->python);
	key->user_stack = store_stack(stack_map, &sc->user, hash_stack(&sc->user));
	if (kernel_stacks && !in_user) {
		sc->kernel.len = stack_frames(ctx, sc->kernel.ips, 0, STAT_KERNEL_STACK_ERR);
		key->kernel_stack = store_stack(stack_map, &sc->kernel, hash_stack(&sc->kernel));
	}
}

static __always_inline void aggregate(struct sample_key *key, __u32 weight)
{
	if (!add_count(&counts, key, weight))
		count(STAT_COUNTS_FULL);
}

static __always_inline void send_event(struct sample_event *e);

static __always_inline void emit(struct bpf_perf_event_data *ctx, struct sample_event *e,
				 struct task_struct *task, struct scratch *sc)
{
	__u32 user_len =
	    user_frames(ctx, user_mode(ctx), task, &sc->seen, e->tid, e->ips, &sc->python);
	e->user_len = user_len;
	e->kernel_len = 0;
	if (kernel_stacks && !user_mode(ctx) && user_len <= MAX_STACK_DEPTH)
		e->kernel_len = stack_frames(ctx, &e->ips[user_len], 0, STAT_KERNEL_STACK_ERR);
	send_event(e);
}

// send_event sends sample e, its stacks filled in, to user space.
static __always_inline void send_event(struct sample_event *e)
{
	__u64 size = offsetof(struct sample_event, ips) +
		     (__u64)(e->user_len + e->kernel_len) * sizeof(__u64);
	if (size > sizeof(*e))
		return;
	// User space drains once a window: wake it only once the ring is half
	// full (Sampler.DrainSoon).
	__u64 wake = bpf_ringbuf_query(&samples, BPF_RB_AVAIL_DATA) >=
			     bpf_ringbuf_query(&samples, BPF_RB_RING_SIZE) / 2
			 ? BPF_RB_FORCE_WAKEUP
			 : BPF_RB_NO_WAKEUP;
	if (bpf_ringbuf_output(&samples, e, size, wake) != 0)
		count(STAT_RINGBUF_FULL);
}

// copy_head copies the first PY_OBJECT_HEAD bytes of the object at addr
// to buf, where every object's size is read from, and starts obj.
static __always_inline bool copy_head(__u8 *buf, __u64 addr, struct python_object *obj)
{
	obj->addr = addr;
	obj->len = 0;
	obj->whole = 0;
	if (bpf_probe_read_user(buf, PY_OBJECT_HEAD, (const void *)addr))
		return false;
	obj->len = PY_OBJECT_HEAD;
	return true;
}

// copy_rest completes the copy in buf (max bytes) of the object at addr,
// whose head copy_head copied and whose size it says (0: unknown): the
// whole object when it fits, else the head only. Returns the bytes copied.
static __always_inline __u32 copy_rest(__u8 *buf, __u32 max, __u64 addr, struct python_object *obj,
				       __u64 size)
{
	if (size == 0 || size > max)
		return obj->len;
	if (size > PY_OBJECT_HEAD) {
		if (bpf_probe_read_user(buf, size, (const void *)addr))
			return obj->len;
		obj->len = size;
	}
	obj->whole = 1;
	return obj->len;
}

// str_size returns the bytes a compact str object takes, header included,
// from its first PY_OBJECT_HEAD bytes (python.Process.str's layout); 0 if
// it is not one.
static __always_inline __u64 str_size(const __u8 *head, struct python_offsets *o)
{
	__u64 n = *(const __u64 *)(head + 16);
	__u32 state = *(const __u32 *)(head + 32);
	__u32 kind = state >> 2 & 7, compact = state >> 5 & 1, ascii = state >> 6 & 1;
	if (!compact || n > PY_STR_MAX)
		return 0;
	return (ascii ? o->ascii_size : o->compact_size) + n * kind;
}

// copy_str copies the str object at addr and returns the bytes copied.
static __always_inline __u32 copy_str(__u8 *buf, __u64 addr, struct python_object *obj,
				      struct python_offsets *o)
{
	if (!copy_head(buf, addr, obj))
		return 0;
	return copy_rest(buf, PY_STR_MAX, addr, obj, str_size(buf, o));
}

// copy_bytes copies the bytes object at addr (ob_size at 16, the data at
// 32) and returns the bytes copied.
static __always_inline __u32 copy_bytes(__u8 *buf, __u64 addr, struct python_object *obj)
{
	if (!copy_head(buf, addr, obj))
		return 0;
	__u64 n = *(const __u64 *)(buf + 16);
	return copy_rest(buf, PY_TABLE_MAX, addr, obj, n < PY_TABLE_MAX ? 32 + n : 0);
}

struct python_copy {
	struct python_stack *python;
	struct python_proc *proc;
	struct python_code *code;
	__u32 copied;
	bool lacking; // a code object of the sample that user space lacks
};

// header_ptr reads the pointer field at off of a copied code header.
static __always_inline __u64 header_ptr(struct python_code *c, __u16 off)
{
	return *(__u64 *)(c->header + (off & (PY_CODE_HEADER - 8) & ~7));
}

static long python_copy_step(__u64 i, void *arg)
{
	struct python_copy *a = arg;
	struct python_code *c = a->code;
	struct python_proc *p = a->proc;
	if (i >= PY_MAX_FRAMES)
		return 1;
	if (a->copied >= PY_MAX_CODES) {
		a->lacking = true; // the rest, not looked at, may be new
		return 1;
	}
	__u64 addr = (a->python->frames[i] & ((1ULL << PY_FRAME_INDEX_SHIFT) - 1))
		     << PY_FRAME_CODE_ALIGN;
	// Sent once for the process; a static one, in the interpreter file's
	// image, once for all the file's processes, which user space keeps
	// by its offset there.
	__u32 pid = a->python->pid, gen = a->python->generation;
	__u64 key = addr;
	bool is_static = addr >= p->image_start && addr < p->image_end;
	if (is_static) {
		key = addr - p->image_start;
		pid = 0;
		gen = p->image_id;
	}
	__u32 slot =
	    (__u32)((key >> 4) * 0x9E3779B97F4A7C15ULL >> 52) ^ (pid & (PY_SENT_SLOTS - 1));
	struct python_code_key *sent = bpf_map_lookup_elem(&python_codes_sent, &slot);
	if (!sent)
		return 1;
	if (sent->addr == key && sent->pid == pid && sent->generation == gen)
		return 0;
	if (bpf_probe_read_user(c->header, sizeof(c->header), (const void *)addr)) {
		a->lacking = true;
		return 0;
	}
	c->addr = addr;
	__u32 at = copy_str(c->objects_data, header_ptr(c, p->o.code_name),
			    &c->objects[PY_OBJECT_NAME], &p->o);
	if (at > PY_STR_MAX)
		return 1; // never: bounds the verifier can see, here and below
	at += copy_str(c->objects_data + at, header_ptr(c, p->o.code_filename),
		       &c->objects[PY_OBJECT_FILE], &p->o);
	if (at > 2 * PY_STR_MAX)
		return 1;
	at += copy_bytes(c->objects_data + at, header_ptr(c, p->o.code_linetable),
			 &c->objects[PY_OBJECT_TABLE]);
	if (at > sizeof(c->objects_data))
		return 1;
	if (bpf_ringbuf_output(&python_young, c, offsetof(struct python_code, objects_data) + at,
			       BPF_RB_NO_WAKEUP)) {
		a->lacking = true; // full: user space reads the rest
		return 1;
	}
	bool whole = true;
	for (int k = 0; k < PY_OBJECTS; k++)
		whole = whole && c->objects[k].whole;
	if (!whole)
		a->lacking = true;
	// A static one, kept for all processes, is sent again until a copy is
	// whole: a read of the rest that failed would lose it for good.
	if (whole || !is_static) {
		sent->pid = pid;
		sent->generation = gen;
		sent->addr = key;
	}
	a->copied++;
	count(STAT_PYTHON_CODES);
	return 0;
}

// python_copy_codes copies the code objects of a young process's sample
// that it has not sent before, up to PY_MAX_CODES, and returns whether user
// space lacks any of the sample's, to read from the process. A global
// function: the verifier checks it once.
__noinline int python_copy_codes(struct python_stack *python)
{
	__u32 zero = 0;
	if (!python)
		return 0;
	struct python_proc *p = bpf_map_lookup_elem(&python_procs, &python->pid);
	struct python_code *c = bpf_map_lookup_elem(&python_code_scratch, &zero);
	if (!p || !c)
		return 1;
	c->pid = python->pid;
	c->generation = python->generation;
	c->record = PY_RECORD_CODE;
	struct python_copy a = {.python = python, .proc = p, .code = c};
	__u32 n = python->n;
	bpf_loop(n < PY_MAX_FRAMES ? n : PY_MAX_FRAMES, python_copy_step, &a, 0);
	return a.lacking;
}

// tell_young_python hands user space copies of the code objects that the
// Python frames of the sample just taken ran, when they are of a young
// process (younger than YOUNG_NS) and user space has not had them. The frames
// themselves follow only when user space must read from the process at
// once, or the ring fills: they wake the reader. Otherwise the sample
// names them when it is drained, after the copies. A sample of an older
// process sets old_python_sampled.
static __always_inline void tell_young_python(bool young, __u32 tgid, __u32 gen,
					      struct python_stack *python)
{
	__u32 n = python->n;
	if (!n || n > PY_MAX_FRAMES)
		return;
	if (!young) {
		if (!*(volatile __u32 *)&old_python_sampled &&
		    __sync_val_compare_and_swap(&old_python_sampled, 0, 1) == 0 &&
		    bpf_ktime_get_ns() - *(volatile __u64 *)&drained_at >= PY_ASK_AFTER_NS)
			ask_drain();
		return;
	}
	python->pid = tgid;
	python->generation = gen;
	python->record = PY_RECORD_STACK;
	if (!python_copy_codes(python) &&
	    bpf_ringbuf_query(&python_young, BPF_RB_AVAIL_DATA) <= PY_YOUNG_RING / 2)
		return;
	bpf_ringbuf_output(&python_young, python,
			   offsetof(struct python_stack, frames) + n * sizeof(__u64),
			   BPF_RB_FORCE_WAKEUP);
}

SEC("perf_event")
int sample(struct bpf_perf_event_data *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tgid = id >> 32, tid = (__u32)id;

	if (target_tgid && tgid != target_tgid)
		return 0;
	count(STAT_SAMPLES);
	if (tgid == 0)
		return 0; // the idle task: not CPU anyone used

	// A BTF pointer: its fields are plain loads, cheaper than read helpers.
	struct task_struct *task = bpf_get_current_task_btf();
	// Read once: the weight and the Python code copies both ask.
	bool young = bpf_ktime_get_ns() - task->group_leader->start_time < YOUNG_NS;
	__u32 weight = 1;
	if (young_sample > 1 && young) {
		if (bpf_get_prandom_u32() % young_sample) {
			count(STAT_YOUNG_SKIPPED);
			return 0;
		}
		weight = young_sample;
	}

	__u32 zero = 0;
	struct scratch *sc = bpf_map_lookup_elem(&scratch, &zero);
	if (!sc)
		return 0;

	bool in_user = user_mode(ctx);
	if (see_proc(&sc->seen, tgid, weight, in_user)) {
		count(STAT_SAMPLES_HANDED);
		return 0; // its listing takes it (sample_listed)
	}
	__u32 gen = sc->seen.known.generation;

	if (use_ringbuf) {
		struct sample_event *e = &sc->event;
		e->pid = tgid;
		e->tid = tid;
		e->generation = gen;
		e->weight = weight;
		copy_comm(e->comm, task->group_leader->comm);
		copy_comm(e->thread, task->comm);
		emit(ctx, e, task, sc);
		tell_young_python(young, tgid, gen, &sc->python);
		return 0;
	}

	stack_key(ctx, in_user, task, tid, sc, &stacks, &sc->key);
	aggregate(&sc->key, weight);
	tell_young_python(young, tgid, gen, &sc->python);
	return 0;
}

// sample_listed takes the sample the sampler handed to the current
// process's listing (announce), of image generation, in the listing's
// task work, after the tables of a process of known files are filled: the
// thread is on its way back to the user code the sample interrupted, its
// registers as they were, and its stack is walked with them and the
// tables; by frame pointers, as the sampler would have, when there are
// none. Its user stack only, as a first sample had before: the Python
// frames and the kernel stack (none: user code was interrupted) aside.
__noinline int sample_listed(__u32 generation, __u32 weight)
{
	__u32 slot = SLOT_TASK_WORK;
	struct scratch *sc = bpf_map_lookup_elem(&scratch, &slot);
	if (!sc)
		return 0;
	__u64 id = bpf_get_current_pid_tgid();
	struct task_struct *task = bpf_get_current_task_btf();
	struct sample_event *e = &sc->event;
	e->pid = id >> 32;
	e->tid = (__u32)id;
	e->generation = generation;
	e->weight = weight;
	// Helpers, not copy_comm's loads, which the compiler spills here to
	// the stack it lacks.
	if (bpf_probe_read_kernel(e->comm, COMM_LEN, &task->group_leader->comm))
		__builtin_memset(e->comm, 0, COMM_LEN);
	bpf_get_current_comm(e->thread, COMM_LEN);
	// The walk's view of the process: its tables, if filled, are this
	// generation's, and it lacks nothing yet under the current tables.
	sc->seen.tgid = e->pid;
	sc->seen.known.generation = generation;
	sc->seen.known.lacks = *(volatile __u32 *)&tables_epoch << LACKS_BITS;
	long n = walk_user(NULL, false, task, &sc->seen, e->ips, SLOT_TASK_WORK);
	if (n < 0) // stack_frames' walk, by the task: a task work has no perf context
		n = frames_of(bpf_get_task_stack(task, e->ips, MAX_STACK_DEPTH * sizeof(__u64),
						 BPF_F_USER_STACK),
			      STAT_USER_STACK_ERR);
	e->user_len = n < MAX_STACK_DEPTH ? n : MAX_STACK_DEPTH;
	e->kernel_len = 0;
	send_event(e);
	count(STAT_SAMPLES_LISTED);
	return 0;
}

// Off-CPU time (docs/OFFCPU.md): how long threads wait off the CPU, and
// where. When a thread leaves the CPU its stacks are taken (it is still the
// current task) and kept with the time; when it is switched back in, the
// time since goes to those stacks if it is off_cpu_min_ns or more. One
// departure in off_cpu_sample is recorded, and counts for that many.
//
// The stacks of a departure wait in `off_cpu_stacks`, an LRU map, and move
// to `stacks` only when the wait counts: most waits are short, and their
// stacks, which no sample names, would fill `stacks` for good.
const volatile __u32 self_tgid = 0;	       // flint: never recorded
const volatile __u64 off_cpu_min_ns = 1000000; // --off-cpu-min
const volatile __u32 off_cpu_sample = 1;       // --off-cpu-sample N

// Threads off the CPU: tid -> span. LRU: a thread that exits off the CPU
// leaves its span behind. 32768 threads off the CPU at once (2.6 MB).
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 32768);
	__type(key, __u32);
	__type(value, struct off_cpu_span);
} off_cpu_spans SEC(".maps");

// Stacks of threads off the CPU, by hash; sized by the loader.
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, __u64);
	__type(value, struct stack_trace);
} off_cpu_stacks SEC(".maps");

// keep_stack moves a stack of a wait that counts from `off_cpu_stacks` to
// `stacks`; one evicted meanwhile is lost (the sample says so).
static __always_inline void keep_stack(__u64 hash)
{
	if (!hash)
		return;
	struct stack_trace *s = bpf_map_lookup_elem(&off_cpu_stacks, &hash);
	if (s)
		store_stack(&stacks, s, hash);
	else
		count(STAT_STACKS_FULL);
}

// Nanoseconds off the CPU per (process, thread, stacks); sized by the loader.
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, struct sample_key);
	__type(value, __u64);
} off_cpu SEC(".maps");

SEC("tp_btf/sched_switch")
int BPF_PROG(on_switch, bool preempt, struct task_struct *prev, struct task_struct *next)
{
	__u64 now = bpf_ktime_get_ns();

	// next is back: the time it was away.
	__u32 next_tid = next->pid;
	struct off_cpu_span *span = bpf_map_lookup_elem(&off_cpu_spans, &next_tid);
	if (span) {
		__u64 off = now - span->start;
		struct sample_key key = span->key;
		bpf_map_delete_elem(&off_cpu_spans, &next_tid);
		if (off >= off_cpu_min_ns) {
			count(STAT_OFF_CPU_SPANS);
			keep_stack(key.user_stack);
			keep_stack(key.kernel_stack);
			__u64 zero = 0, *total = lookup_or_init(&off_cpu, &key, &zero);
			if (total)
				__sync_fetch_and_add(
				    total, off * (off_cpu_sample > 1 ? off_cpu_sample : 1));
			else
				count(STAT_OFF_CPU_FULL);
		}
	}

	// prev leaves, still the current task: where it waits. Not the idle
	// task, nor kernel threads (no mm): their waits are the kernel's own.
	__u32 tgid = prev->tgid, tid = prev->pid;
	if (!tid || !prev->mm || tgid == self_tgid || (target_tgid && tgid != target_tgid) ||
	    (off_cpu_sample > 1 && bpf_get_prandom_u32() % off_cpu_sample))
		return 0;
	__u32 zero = 0;
	struct scratch *sc = bpf_map_lookup_elem(&scratch, &zero);
	if (!sc)
		return 0;
	struct off_cpu_span *out = &sc->span;
	out->start = now;
	see_proc(&sc->seen, tgid, 0, false);
	stack_key(ctx, false, bpf_get_current_task_btf(), tid, sc, &off_cpu_stacks, &out->key);
	bpf_map_update_elem(&off_cpu_spans, &tid, out, BPF_ANY);
	return 0;
}

// A process that execs becomes a new image: forget it so its next sample
// announces it again with a new generation.
SEC("tp_btf/sched_process_exec")
int BPF_PROG(on_exec, struct task_struct *p, pid_t old_pid, struct linux_binprm *bprm)
{
	__u32 tgid = BPF_CORE_READ(p, tgid);
	bpf_map_delete_elem(&known_procs, &tgid);
	__sync_fetch_and_add(&proc_epoch, 1);
	return 0;
}

// A reused PID must not inherit the previous owner's generation.
SEC("tp_btf/sched_process_fork")
int BPF_PROG(on_fork, struct task_struct *parent, struct task_struct *child)
{
	__u32 pid = BPF_CORE_READ(child, pid);
	bpf_map_delete_elem(&known_procs, &pid);
	__sync_fetch_and_add(&proc_epoch, 1);
	return 0;
}

// The end of a thread group: its entries in unwind_procs and python_procs
// are deleted here, not by user space with a system call each when it
// forgets the process (docs/BENCHMARKS.md). A process the sampler knew is
// told of (struct proc_exit), waking no one: user space forgets it without
// reading /proc/PID/stat.
SEC("tp_btf/sched_process_exit")
int BPF_PROG(on_exit, struct task_struct *p)
{
	// do_exit counts the live threads down before this tracepoint.
	if (p->signal->live.counter)
		return 0;
	__u32 tgid = p->tgid;
	bpf_map_delete_elem(&unwind_procs, &tgid);
	bpf_map_delete_elem(&python_procs, &tgid);
	struct known_proc *known = bpf_map_lookup_elem(&known_procs, &tgid);
	if (!known)
		return 0; // never sampled: user space knows nothing of it
	struct proc_exit e = {.pid = tgid, .generation = known->generation};
	bpf_ringbuf_output(&proc_events, &e, sizeof(e), BPF_RB_NO_WAKEUP);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
