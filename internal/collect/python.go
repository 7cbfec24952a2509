package collect

import (
	"errors"
	"hash/fnv"
	"strconv"
	"strings"

	"github.com/flint-dev/flint/internal/proc"
	"github.com/flint-dev/flint/internal/profile"
	"github.com/flint-dev/flint/internal/python"
	"github.com/flint-dev/flint/internal/sampler"
	"github.com/flint-dev/flint/internal/symbol"
)

// PythonKernel reads the Python frames of the CPython processes it is
// told of (the sampler).
type PythonKernel interface {
	SetPython(pid, generation uint32, in *python.Interpreter) error
	// DeletePython stops reading process pid's frames; exited says it has
	// exited, and the kernel took what it listed itself with it.
	DeletePython(pid uint32, exited bool) error
}

// SetPython has the Collector find the CPython interpreter of each process
// it learns, tell k of it, and name the Python frames k adds to its
// stacks. Processes known already are looked at now.
func (c *Collector) SetPython(k PythonKernel) {
	c.mu.Lock()
	c.pyKernel = k
	known := make(map[procKey]*proc.Process, len(c.procs))
	for key, e := range c.procs {
		known[key] = e.p
	}
	c.mu.Unlock()
	for key, p := range known {
		_, err := c.learnPython(key, p, sampler.NewProc{})
		c.notePython(err)
	}
}

// learnPython finds p's interpreter and has the kernel read its frames,
// unless the kernel listed the process itself (np, what the kernel said of
// p; zero when it said nothing); it returns the interpreter, nil for a
// process of none. It returns python.ErrVersion for an interpreter it
// cannot read.
func (c *Collector) learnPython(k procKey, p *proc.Process, np sampler.NewProc) (*python.Interpreter, error) {
	c.mu.Lock()
	kernel, quiet := c.pyKernel, c.quiet
	c.mu.Unlock()
	if kernel == nil {
		return nil, nil
	}
	in, err := c.pyFinder.Find(p)
	if in == nil {
		return nil, err
	}
	pp := python.Open(p.PID, p.StartTime, in)
	if quiet == nil || !quiet.pythonFilled(np, in) {
		if err := kernel.SetPython(k.pid, k.generation, in); err != nil {
			pp.Close()
			return in, nil // its map full: native frames only
		}
	}
	c.mu.Lock()
	// Its entry from before its first sample (generation 0) gives way.
	for _, old := range []procKey{k, {pid: k.pid}} {
		if pp := c.pythons[old]; pp != nil {
			pp.Close()
			delete(c.pythons, old)
		}
	}
	c.pythons[k] = pp
	c.mu.Unlock()
	return in, nil
}

// pythonOf has the kernel read the Python frames of process image k, its
// snapshot now p (learnPython), unless its interpreter was found in an
// earlier snapshot: a process learned at its first sample, which can come
// as the loader maps its libraries, may have had no libpython mapped yet
// (CPython built with --enable-shared: pyenv's, the python container
// images'). It returns what python.Finder.Find said of p, and looked
// false when it did not look.
func (c *Collector) pythonOf(k procKey, p *proc.Process, np sampler.NewProc) (in *python.Interpreter, looked bool, err error) {
	c.mu.Lock()
	e := c.procs[k]
	found := e != nil && e.python
	c.mu.Unlock()
	if found {
		return nil, false, nil
	}
	in, err = c.learnPython(k, p, np)
	c.notePython(err)
	if in != nil || errors.Is(err, python.ErrVersion) {
		c.mu.Lock()
		if e := c.procs[k]; e != nil {
			e.python = true
		}
		c.mu.Unlock()
	}
	return in, true, err
}

// LearnPython has the kernel read the Python frames of p from its first
// sample on, before p is announced (`flint record -p`), when it notes an
// unsupported version.
func (c *Collector) LearnPython(p *proc.Process) {
	_, _ = c.learnPython(procKey{pid: uint32(p.PID)}, p, sampler.NewProc{})
}

// notePython counts a CPython process whose frames flint cannot read
// (err is python.ErrVersion), and keeps the first reason for Stats.
func (c *Collector) notePython(err error) {
	if !errors.Is(err, python.ErrVersion) {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.pyUnsupported++
	if c.pyNote == "" {
		c.pyNote = err.Error()
	}
}

// forgetPython drops what the Collector and the kernel know of a process
// image's interpreter; exited as Exited's. Callers hold mu.
func (c *Collector) forgetPython(k procKey, exited bool) {
	pp := c.pythons[k]
	if pp == nil {
		return
	}
	pp.Close()
	delete(c.pythons, k)
	_ = c.pyKernel.DeletePython(k.pid, exited) // gone from the map already: nothing to do
}

// ReadPython reads the code objects the Python frames of samples ran as
// they arrive: a process that exits before its samples are named keeps
// its names.
func (c *Collector) ReadPython(samples []sampler.Sample) {
	for i := range samples {
		s := &samples[i]
		n := len(s.User)
		if n == 0 || !python.IsFrame(s.User[n-1]) {
			continue
		}
		j := n - 1
		for j > 0 && python.IsFrame(s.User[j-1]) {
			j--
		}
		c.RememberPython(s.PID, s.Generation, s.User[j:])
	}
}

// RememberPython reads the code objects of Python frames of process image
// (pid, generation) that it has not had, from the process (the sampler's
// OnYoungPython callback, after the copies it could make, and
// ReadPython's).
func (c *Collector) RememberPython(pid, generation uint32, frames []uint64) {
	pp := c.python(procKey{pid, generation})
	if pp == nil {
		return
	}
	for _, w := range frames {
		pp.Remember(w)
	}
}

// RememberCopy reads the code object c, which the sampler copied from
// process image (pid, generation) as it ran (its OnPythonCopy callback).
func (c *Collector) RememberCopy(pid, generation uint32, copied *python.Copy) {
	if pp := c.python(procKey{pid, generation}); pp != nil {
		pp.RememberCopy(copied)
	}
}

// python returns the interpreter of process image k, or the one learnt
// before its first sample.
func (c *Collector) python(k procKey) *python.Process {
	c.mu.Lock()
	defer c.mu.Unlock()
	if pp := c.pythons[k]; pp != nil {
		return pp
	}
	return c.pythons[procKey{pid: k.pid}]
}

// userFrames appends the locations of a user stack to locs. The sampler
// puts a CPython thread's Python frames after its native ones; each native
// frame of the eval loop gives way to the Python frames it ran, so that
// the stack reads as the program does, native code around it in place.
func (b *builder) userFrames(locs []*profile.Location, k procKey, p *proc.Process, ips []uint64) []*profile.Location {
	native := len(ips)
	for native > 0 && python.IsFrame(ips[native-1]) {
		native--
	}
	py := ips[native:]
	var pp *python.Process
	if len(py) > 0 {
		pp = b.c.python(k)
	}
	for i, addr := range ips[:native] {
		l := b.user(k, p, addr, i > 0)
		if pp != nil && len(py) > 0 && isEvalLoop(l) {
			n := 1
			for n < len(py) && !python.IsEntry(py[n-1]) {
				n++
			}
			for _, w := range py[:n] {
				locs = append(locs, b.pythonLoc(pp, w))
			}
			py = py[n:]
			continue
		}
		locs = append(locs, l)
	}
	// Frames whose eval loop the native walk did not reach (cut short):
	// outermost, as they were.
	if pp != nil {
		for _, w := range py {
			locs = append(locs, b.pythonLoc(pp, w))
		}
	}
	return locs
}

// isEvalLoop reports whether l is CPython's bytecode interpreter.
func isEvalLoop(l *profile.Location) bool {
	f := l.Frames[len(l.Frames)-1].Function // the function, not one inlined into it
	return strings.HasPrefix(f, "_PyEval_EvalFrameDefault")
}

// pythonLoc returns the location of a Python frame word of process pp.
// Its address stands for its function and line, so equal frames of any
// process are one location in the store, and one in the profile. Looked up
// by the frame's FrameID first: a new process's words are new, its code
// objects mostly not (shared by the interpreter's processes).
func (b *builder) pythonLoc(pp *python.Process, word uint64) *profile.Location {
	id := pp.ID(word)
	if l := b.pyIDs[id]; l != nil {
		return l
	}
	f := id.Frame()
	l := b.pyLocs[f]
	if l == nil {
		h := fnv.New64a()
		h.Write([]byte(f.Function + "\x00" + f.File + "\x00" + strconv.Itoa(f.Line)))
		l = &profile.Location{Address: h.Sum64(), Frames: []symbol.Frame{f}}
		b.pyLocs[f] = l
	}
	b.pyIDs[id] = l
	return l
}
