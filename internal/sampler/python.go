package sampler

import (
	"fmt"
	"unsafe"

	"github.com/flint-dev/flint/internal/python"
)

// SetPython makes the sampler read the Python frames of process pid's
// image generation (0: any), whose interpreter is in.
func (s *Sampler) SetPython(pid, generation uint32, in *python.Interpreter) error {
	p := pythonProc(generation, in)
	if err := putRaw(s.objs.PythonProcs, unsafe.Pointer(&pid), unsafe.Pointer(&p)); err != nil {
		return fmt.Errorf("set python interpreter of process %d: %w", pid, err)
	}
	s.pythonWritten.add(pid)
	return s.forgetLacks()
}

// SetQuietPython tells the program of interpreter in, found by its file's
// mapping at offset that starts at start (a file SetQuietFile names): a
// quiet process of it has its Python frames read from its first samples.
func (s *Sampler) SetQuietPython(f KernelFile, offset, start uint64, in *python.Interpreter) error {
	k := quietKey(f, offset)
	p := pythonProc(0, in)
	p.Runtime -= start
	p.ImageStart -= start
	p.ImageEnd -= start
	if err := putRaw(s.objs.QuietPythons, unsafe.Pointer(&k), unsafe.Pointer(&p)); err != nil {
		return fmt.Errorf("set quiet python interpreter %d:%d at %#x: %w", f.Dev, f.Inode, offset, err)
	}
	return nil
}

// pythonProc is what the program reads of a process of interpreter in.
func pythonProc(generation uint32, in *python.Interpreter) profilePythonProc {
	o := &in.Offsets
	p := profilePythonProc{Generation: generation, Runtime: in.Runtime}
	p.O.InterpretersHead, p.O.ThreadsHead = o.InterpretersHead, o.ThreadsHead
	p.O.TstateNext, p.O.TstateThreadId, p.O.TstateFrame = o.ThreadNext, o.ThreadID, o.ThreadFrame
	p.O.CframeFrame, p.O.FrameCode, p.O.FramePrevious = o.CFrameFrame, o.FrameCode, o.FramePrevious
	p.O.FrameInstr, p.O.FrameOwner, p.O.CodeBytecode = o.FrameInstr, o.FrameOwner, o.CodeBytecode
	p.O.CodeName, p.O.CodeFilename, p.O.CodeLinetable = o.CodeName, o.CodeFilename, o.CodeLineTable
	if o.CodeQualname != 0 {
		p.O.CodeName = o.CodeQualname
	}
	p.O.AsciiSize, p.O.CompactSize = o.ASCIISize, o.CompactSize
	p.ImageStart, p.ImageEnd = in.Image()
	p.ImageId = in.ImageID()
	p.O.Layout = uint8(o.Layout)
	if o.CFrame {
		p.O.Cframe = 1
	}
	return p
}

// DeletePython stops reading process pid's Python frames. A process
// without them is no error. exited as DeleteUnwind's.
func (s *Sampler) DeletePython(pid uint32, exited bool) error {
	if !s.pythonWritten.take(pid) && exited {
		return nil
	}
	return deleteKey(s.objs.PythonProcs, pid, "python interpreter of process", pid)
}
