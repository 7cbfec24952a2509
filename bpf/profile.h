// SPDX-License-Identifier: GPL-2.0
// Types shared by profile.bpf.c and user space (via bpf2go -type).
#ifndef FLINT_PROFILE_H
#define FLINT_PROFILE_H

// The kernel's default perf_event_max_stack.
#define MAX_STACK_DEPTH 127
#define COMM_LEN 16
#define EFAULT 14

enum sampler_stat {
	STAT_SAMPLES,	       // timer ticks that ran the program for a traced process
	STAT_USER_STACK_ERR,   // user stack unreadable (not just absent)
	STAT_KERNEL_STACK_ERR, // kernel stack unreadable
	STAT_STACKS_FULL,      // stacks map full: sample kept, stack lost
	STAT_COUNTS_FULL,      // counts map full: sample lost
	STAT_RINGBUF_FULL,     // ring buffer full: sample lost
	STAT_PROC_EVENTS_LOST, // new-process notification lost: naming may fail
	STAT_UNWIND_WALKS,     // user stacks walked with unwind tables
	STAT_UNWIND_COMPLETE,  // of those, walks that reached the outermost frame
	STAT_UNWIND_FAULTS,    // of those, walks cut short by unreadable stack memory
	STAT_UNWIND_STALE,     // processes found running code outside their mappings
	STAT_PYTHON_STACKS,    // samples of CPython threads with Python frames read
	STAT_PYTHON_NO_THREAD, // samples of CPython processes whose thread state was not found
	STAT_PYTHON_CODES,     // code objects of young CPython processes copied for user space
	STAT_OFF_CPU_SPANS,    // off-CPU spans recorded (of off_cpu_min_ns or more, sampled)
	STAT_OFF_CPU_FULL,     // off_cpu map full: span lost
	STAT_PROCS_QUIET,      // new processes announced without waking user space (quiet_files)
	STAT_SAMPLES_HANDED,   // samples handed to the listing of their new process
	STAT_SAMPLES_LISTED,   // of those, samples the listing took (sent)
	STAT_YOUNG_SKIPPED,    // ticks of young processes not sampled (young_sample)
	STAT_TASK_WORK_NS,     // time in listings' task works, which BPF statistics miss
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
	__u64 user_stack;      // hash in `stacks`, 0: none
	__u64 kernel_stack;    // hash in `stacks`, 0: none
	char comm[COMM_LEN];   // process (thread group leader) name
	char thread[COMM_LEN]; // thread name
};

struct sample_event {
	__u32 pid;
	__u32 tid;
	__u32 generation;
	__u16 user_len;	  // frames in ips[0:user_len]
	__u16 kernel_len; // frames in ips[user_len:user_len+kernel_len]
	__u32 weight;	  // the ticks it counts for (young_sample)
	__u32 pad;
	char comm[COMM_LEN];
	char thread[COMM_LEN];
	__u64 ips[2 * MAX_STACK_DEPTH];
};

// A process announced to user space, with what /proc/PID/stat would say of
// it, so that user space need not read that (zero in stale_procs events).
struct new_proc {
	__u32 pid;
	__u32 generation;
	__u64 start_boottime; // the thread group leader's start, ns after boot
	__u64 start_code;     // where the executable's text starts; 0: no mm
	char comm[COMM_LEN];  // the thread group leader's name
};

// The end of a process the sampler knew (on_exit): its unwind_procs and
// python_procs entries went with it, and user space forgets it without
// reading /proc. In proc_events, after the process's announcement; a record
// of this size is no announcement.
struct proc_exit {
	__u32 pid;
	__u32 generation;
};

// A new process's executable mappings, listed by the kernel in the
// process's own context (a task work the sampler schedules, Linux 6.18),
// so that user space need not read /proc/PID/maps for files it knows.
#define MAX_LISTED_MAPPINGS 64

enum listed_mapping_flags {
	LISTED_DELETED = 1, // the file was removed after mapping
	LISTED_VDSO = 2,    // the kernel's vDSO (anonymous, named "[vdso]")
};

struct listed_mapping {
	__u64 start, end;
	__u64 offset; // in the file; for anonymous memory, as /proc/PID/maps has it
	// The mapped file as the kernel holds it: with an overlay file system
	// not the inode /proc shows, so user space matches them by address
	// once (collect.Collector). 0: anonymous.
	__u64 inode;
	__u32 dev; // the inode's file system, the kernel's encoding
	__u32 inode_generation;
	__u32 flags; // enum listed_mapping_flags
	__u32 pad;
};

enum listing_flags {
	LISTING_COMPLETE = 1, // every executable mapping is listed
	// The kernel listed the process in unwind_procs itself, from
	// quiet_files (fill_tables).
	LISTING_TABLES_FILLED = 2,
	// A process announced before, listed again: it ran code outside its
	// listed mappings (mark_stale), a library loaded since.
	LISTING_RELISTED = 4,
};

// A new_proc with its executable mappings: what proc_events carries when
// the kernel could list them, cut after mappings[len].
struct listed_proc {
	struct new_proc proc;
	__u32 flags; // enum listing_flags; 0: not listed, or more than MAX_LISTED_MAPPINGS
	__u32 len;
	// Names the cgroups the process is in, in every hierarchy: the same
	// for processes whose /proc/PID/cgroup is the same.
	__u64 cgroups;
	struct listed_mapping mappings[MAX_LISTED_MAPPINGS];
};

// A file mapped at an offset, as the kernel holds it (a listed_mapping's
// identity; all zero for the vDSO): the key of quiet_files.
struct quiet_file_key {
	__u64 inode;
	__u64 offset;
	__u32 dev;
	__u32 inode_generation;
};

// A mapping user space knows, with the unwind rows it walks (rows 0:
// frame pointers), their PC 0 this far from the mapping's start.
struct quiet_file {
	__u64 base_from_start;
	__u32 first;
	__u32 rows;
};

// DWARF-based unwinding (docs/UNWIND.md). User space turns each binary's
// .eh_frame into rows, stores every binary's rows sorted by PC in one array,
// and lists per process where each executable mapping's rows are.

// How the canonical frame address (CFA) is found at a PC; the values are
// unwind.CFAKind's.
enum cfa_kind {
	CFA_UNDEFINED, // no CFI here: frame pointers
	CFA_RSP,       // CFA = RSP + cfa_offset
	CFA_RBP,       // CFA = RBP + cfa_offset
	CFA_PLT,       // CFA = RSP + 8, + 8 when (RIP & 15) >= cfa_offset
	CFA_SIGNAL,    // a signal trampoline: the ucontext is at RSP
	CFA_END,       // the outermost frame: the stack is complete
};

// One rule, from pc up to the next row's pc. The return address is at
// CFA - 8 (x86-64 ABI); the caller's RBP at CFA + rbp_offset, unless 0.
struct unwind_row {
	__u32 pc; // from the mapping's base
	__s32 cfa_offset;
	__s16 rbp_offset;
	__u8 cfa; // enum cfa_kind
	__u8 pad[5];
};
// The size an array holds a row in (its values are 8-byte aligned): user
// space writes rows to the map's memory back to back.
_Static_assert(sizeof(struct unwind_row) == 16, "an unwind row fills its array slot");

// Executable mappings of one process, sorted by start, at most this many
// (the rest are walked with frame pointers).
#define MAX_UNWIND_MAPPINGS 128

struct unwind_mapping {
	__u64 start, end; // addresses in the process
	__u64 base;	  // address of row pc 0
	__u32 first;	  // index of the first row in unwind_rows
	__u32 rows;	  // 0: no rows, frame pointers (Go, JIT, no CFI)
};

struct unwind_proc {
	__u32 generation; // of the image the mappings belong to; 0: any
	__u32 len;	  // mappings used
	__u32 stale;	  // set by the walker when code ran outside mappings
	__u32 pad;
	struct unwind_mapping mappings[MAX_UNWIND_MAPPINGS];
};

// CPython (docs/PYTHON.md). The sampler reads the sampled thread's Python
// frames from the interpreter's memory and appends them, leaf first, to the
// user stack after its native frames, each as one tagged word that no user
// address can be (they are below 2^47):
enum python_frame_bits {
	PY_FRAME_MARK = 63,	   // set: a Python frame
	PY_FRAME_ENTRY = 62,	   // the outermost frame of one native eval call
	PY_FRAME_INDEX_SHIFT = 44, // bits 44-61: the instruction index
	PY_FRAME_INDEX_BITS = 18,  // (3.9: byte offset; later: code units)
	PY_FRAME_CODE_ALIGN = 3,   // bits 0-43: the code object's address >> 3
};

// Python frames read at most; the native frames get the rest of the stack.
#define PY_MAX_FRAMES 48

// How the interpreter lays out its frames, by version.
enum python_layout {
	PY_FRAME_OBJECT,   // 3.9, 3.10: PyFrameObject, int f_lasti; one eval call a frame
	PY_FRAME_IS_ENTRY, // 3.11: _PyInterpreterFrame, prev_instr, bool is_entry
	PY_FRAME_OWNER,	   // 3.12+: _PyInterpreterFrame, owner CSTACK shims between eval calls
};

// Where the sampler finds what it reads, in bytes from the struct's start
// (python.Offsets has them by version).
struct python_offsets {
	__u16 interpreters_head; // _PyRuntimeState.interpreters.head
	__u16 threads_head;	 // PyInterpreterState's first PyThreadState
	__u16 tstate_next;
	__u16 tstate_thread_id; // pthread_self() of the thread: its TLS base
	__u16 tstate_frame;	// the current frame, or (cframe) the _PyCFrame
	__u16 cframe_frame;	// _PyCFrame.current_frame
	__u16 frame_code;
	__u16 frame_previous;
	__u16 frame_instr;   // f_lasti (PY_FRAME_OBJECT), else the instruction pointer
	__u16 frame_owner;   // is_entry or owner
	__u16 code_bytecode; // co_code_adaptive: the first code unit
	__u16 code_name;     // co_qualname, or co_name before 3.11
	__u16 code_filename;
	__u16 code_linetable; // co_linetable, co_lnotab (3.9)
	__u16 ascii_size;     // sizeof(PyASCIIObject): a compact ASCII string's data
	__u16 compact_size;   // sizeof(PyCompactUnicodeObject): other compact strings'
	__u8 layout;	      // enum python_layout
	__u8 cframe;	      // tstate_frame points to a _PyCFrame (3.11, 3.12)
};

struct python_proc {
	__u32 generation; // of the image; 0: any
	// Tells the interpreter files apart, and their kept code objects
	// (python.Interpreter.ImageID).
	__u32 image_id;
	__u64 runtime; // address of _PyRuntime in the process
	// The interpreter file's image: code objects there are static, the
	// same in every process, and user space keeps them once for all.
	__u64 image_start, image_end;
	struct python_offsets o;
};

// Records of python_young: the first field after pid and generation tells
// which.
enum python_record {
	PY_RECORD_STACK, // struct python_stack: a sample's Python frames
	PY_RECORD_CODE,	 // struct python_code: a code object copied
};

// A code object's header, and the objects it names that flint reads, as
// the sampler copied them from the young process it sampled (where reading
// is a copy, not a remote read of another process's pages). An object is
// whole when its data is all there, or else its first bytes only, and user
// space reads the rest from the process.
#define PY_CODE_HEADER 256 // python.codeHeader
#define PY_OBJECT_HEAD 48  // what every object's size is read from

// The room each object copied may take (an enum: user space reads them).
enum python_room {
	PY_STR_MAX = 512, // a name's or file's str object, header included
	// A line table's bytes object, header included: a python3 run's
	// imports have three past 4 KiB, the largest typing's module code at
	// 5.7 KiB.
	PY_TABLE_MAX = 8192,
};

enum python_object_index {
	PY_OBJECT_NAME,
	PY_OBJECT_FILE,
	PY_OBJECT_TABLE,
	PY_OBJECTS,
};

struct python_object {
	__u64 addr;
	__u32 len;   // bytes copied
	__u32 whole; // the whole object: nothing left to read
};

struct python_code {
	__u32 pid;
	__u32 generation;
	__u32 record; // PY_RECORD_CODE
	__u32 pad;
	__u64 addr; // the code object's
	struct python_object objects[PY_OBJECTS];
	__u8 header[PY_CODE_HEADER];
	// The objects copied, back to back, each its len bytes; a record
	// ends after the last. A name takes some 60 bytes of its room, a
	// file some 100: records written with the room whole were 1.8 times
	// the size, of the ring to fill (docs/BENCHMARKS.md).
	__u8 objects_data[2 * PY_STR_MAX + PY_TABLE_MAX];
};

#endif
