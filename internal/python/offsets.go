package python

// Layout is how an interpreter lays out its frames (the sampler's enum
// python_layout).
type Layout uint8

// Frame layouts, by version.
const (
	FrameObject  Layout = iota // 3.9, 3.10: PyFrameObject; every frame its own eval call
	FrameIsEntry               // 3.11: _PyInterpreterFrame marked is_entry
	FrameOwner                 // 3.12+: _PyInterpreterFrame; CSTACK shims between eval calls
)

// Offsets are where fields sit in an interpreter's structs, in bytes: the
// ones the sampler follows to the sampled thread's frames, and the ones
// flint reads to name a code object.
type Offsets struct {
	// Read by the sampler (struct python_offsets).
	InterpretersHead uint16 // _PyRuntimeState.interpreters.head
	ThreadsHead      uint16 // PyInterpreterState's first thread state
	ThreadNext       uint16 // PyThreadState.next
	ThreadID         uint16 // PyThreadState.thread_id: pthread_self()
	ThreadFrame      uint16 // the current frame, or with CFrame the _PyCFrame
	CFrameFrame      uint16 // _PyCFrame.current_frame
	FrameCode        uint16 // f_code (3.13: f_executable)
	FramePrevious    uint16 // f_back (3.9, 3.10), previous
	FrameInstr       uint16 // f_lasti (3.9, 3.10), prev_instr, instr_ptr (3.13)
	FrameOwner       uint16 // is_entry (3.11), owner (3.12+)
	CodeBytecode     uint16 // co_code_adaptive: the first code unit (3.11+)
	Layout           Layout
	CFrame           bool // ThreadFrame points to a _PyCFrame (3.11, 3.12)

	// Read by flint to name code objects.
	CodeFilename, CodeName, CodeQualname uint16 // PyObject *; CodeQualname 0 before 3.11
	CodeFirstLine                        uint16 // int co_firstlineno
	CodeLineTable                        uint16 // co_lnotab (3.9), co_linetable
	// sizeof(PyASCIIObject) and sizeof(PyCompactUnicodeObject): where a
	// compact string's characters start.
	ASCIISize, CompactSize uint16
}

// versions holds the offsets of CPython 3.minor on x86-64 as its release
// builds lay them out, from offsetof on each version's headers
// (testdata/offsets.c prints them; TestOffsetsMatchHeaders checks them
// against the interpreters installed). Patch releases keep these structs.
var versions = map[int]Offsets{
	9: {
		InterpretersHead: 32, ThreadsHead: 8, ThreadNext: 8, ThreadID: 176, ThreadFrame: 24,
		FrameCode: 32, FramePrevious: 24, FrameInstr: 104, Layout: FrameObject,
		CodeFilename: 104, CodeName: 112, CodeFirstLine: 40, CodeLineTable: 120,
		ASCIISize: 48, CompactSize: 72,
	},
	10: {
		InterpretersHead: 32, ThreadsHead: 8, ThreadNext: 8, ThreadID: 176, ThreadFrame: 24,
		FrameCode: 32, FramePrevious: 24, FrameInstr: 96, Layout: FrameObject,
		CodeFilename: 104, CodeName: 112, CodeFirstLine: 40, CodeLineTable: 120,
		ASCIISize: 48, CompactSize: 72,
	},
	11: {
		InterpretersHead: 40, ThreadsHead: 16, ThreadNext: 8, ThreadID: 152, ThreadFrame: 56, CFrameFrame: 8, CFrame: true,
		FrameCode: 32, FramePrevious: 48, FrameInstr: 56, FrameOwner: 68, CodeBytecode: 184, Layout: FrameIsEntry,
		CodeFilename: 112, CodeName: 120, CodeQualname: 128, CodeFirstLine: 72, CodeLineTable: 136,
		ASCIISize: 48, CompactSize: 72,
	},
	12: {
		InterpretersHead: 40, ThreadsHead: 72, ThreadNext: 8, ThreadID: 136, ThreadFrame: 56, CFrameFrame: 0, CFrame: true,
		FrameCode: 0, FramePrevious: 8, FrameInstr: 56, FrameOwner: 70, CodeBytecode: 192, Layout: FrameOwner,
		CodeFilename: 112, CodeName: 120, CodeQualname: 128, CodeFirstLine: 68, CodeLineTable: 136,
		ASCIISize: 40, CompactSize: 56,
	},
	13: {
		InterpretersHead: 632, ThreadsHead: 7344, ThreadNext: 8, ThreadID: 152, ThreadFrame: 72,
		FrameCode: 0, FramePrevious: 8, FrameInstr: 56, FrameOwner: 70, CodeBytecode: 200, Layout: FrameOwner,
		CodeFilename: 112, CodeName: 120, CodeQualname: 128, CodeFirstLine: 68, CodeLineTable: 136,
		ASCIISize: 40, CompactSize: 56,
	},
}

// codeHeader is how many bytes of a code object hold every field read.
const codeHeader = 256
