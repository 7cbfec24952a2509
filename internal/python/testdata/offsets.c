// Prints the offsets python.Offsets holds for the CPython whose headers it
// is compiled with, as "Field=bytes" lines (TestOffsetsMatchHeaders):
//   cc -I$PREFIX/include/python3.X -I$PREFIX/include/python3.X/internal offsets.c
#define Py_BUILD_CORE 1
#include <Python.h>
#include <stddef.h>
#include <stdio.h>
#include "internal/pycore_runtime.h"
#include "internal/pycore_interp.h"
#if PY_MINOR_VERSION >= 11
#include "internal/pycore_frame.h"
#include "internal/pycore_code.h"
#else
#include "frameobject.h"
#endif

#define P(name, expr) printf("%s=%zu\n", name, (size_t)(expr))

int main(void)
{
	P("InterpretersHead", offsetof(_PyRuntimeState, interpreters.head));
#if PY_MINOR_VERSION >= 11
	P("ThreadsHead", offsetof(PyInterpreterState, threads.head));
#else
	P("ThreadsHead", offsetof(PyInterpreterState, tstate_head));
#endif
	P("ThreadNext", offsetof(PyThreadState, next));
	P("ThreadID", offsetof(PyThreadState, thread_id));
#if PY_MINOR_VERSION >= 13
	P("ThreadFrame", offsetof(PyThreadState, current_frame));
#elif PY_MINOR_VERSION >= 11
	P("ThreadFrame", offsetof(PyThreadState, cframe));
	P("CFrameFrame", offsetof(_PyCFrame, current_frame));
#else
	P("ThreadFrame", offsetof(PyThreadState, frame));
#endif
#if PY_MINOR_VERSION >= 11
#if PY_MINOR_VERSION >= 13
	P("FrameCode", offsetof(_PyInterpreterFrame, f_executable));
	P("FrameInstr", offsetof(_PyInterpreterFrame, instr_ptr));
#else
	P("FrameCode", offsetof(_PyInterpreterFrame, f_code));
	P("FrameInstr", offsetof(_PyInterpreterFrame, prev_instr));
#endif
	P("FramePrevious", offsetof(_PyInterpreterFrame, previous));
#if PY_MINOR_VERSION == 11
	P("FrameOwner", offsetof(_PyInterpreterFrame, is_entry));
#else
	P("FrameOwner", offsetof(_PyInterpreterFrame, owner));
#endif
	P("CodeBytecode", offsetof(PyCodeObject, co_code_adaptive));
	P("CodeQualname", offsetof(PyCodeObject, co_qualname));
#else
	P("FrameCode", offsetof(PyFrameObject, f_code));
	P("FrameInstr", offsetof(PyFrameObject, f_lasti));
	P("FramePrevious", offsetof(PyFrameObject, f_back));
#endif
	P("CodeFilename", offsetof(PyCodeObject, co_filename));
	P("CodeName", offsetof(PyCodeObject, co_name));
	P("CodeFirstLine", offsetof(PyCodeObject, co_firstlineno));
#if PY_MINOR_VERSION >= 10
	P("CodeLineTable", offsetof(PyCodeObject, co_linetable));
#else
	P("CodeLineTable", offsetof(PyCodeObject, co_lnotab));
#endif
	P("ASCIISize", sizeof(PyASCIIObject));
	P("CompactSize", sizeof(PyCompactUnicodeObject));
	return 0;
}
