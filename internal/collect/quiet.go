package collect

import (
	"maps"
	"math"
	"slices"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/flint-dev/flint/internal/proc"
	"github.com/flint-dev/flint/internal/python"
	"github.com/flint-dev/flint/internal/sampler"
	"github.com/flint-dev/flint/internal/unwind"
)

// QuietKernel announces a new process without waking the agent when it
// maps only files the agent knows, in cgroups it knows (the sampler, Linux
// 6.18: a process the kernel lists), and walks its stacks with the unwind
// rows it was told of; it is also the unwinder's Kernel.
type QuietKernel interface {
	unwind.Kernel
	SetQuietFile(f sampler.KernelFile, offset uint64, r sampler.QuietRows) error
	DeleteQuietFile(f sampler.KernelFile, offset uint64) error
	SetQuietPython(f sampler.KernelFile, offset, start uint64, in *python.Interpreter) error
	SetQuietCgroups(key uint64) error
	DeleteQuietCgroups(key uint64) error
}

// SetQuiet has c tell k of the files and cgroups of the processes it
// learns that need nothing at once but tables the kernel can fill, no JIT
// map: the processes after them that map only such files are learned at
// the next drain, from the kernel's listing, waking no one. Call it before
// StartUnwind.
func (c *Collector) SetQuiet(k QuietKernel) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.quiet = &quietFiles{k: k, files: map[proc.FileKey]*quietFile{}, pythons: map[kernelFileAt]*quietFile{}}
}

// quietFiles keeps the kernel's list of known files (QuietKernel) and
// the unwind rows of each, as the unwinder lists them in processes: it
// stands between the unwinder and the sampler. Its lock is taken last.
type quietFiles struct {
	k     QuietKernel
	mu    sync.Mutex
	files map[proc.FileKey]*quietFile // the zero key is the vDSO's
	// pythons are the files told of as interpreters, by the mappings the
	// kernel finds them by (quiet_pythons' keys): the one told last, and
	// any told before at another offset, which the kernel keeps.
	pythons map[kernelFileAt]*quietFile
	// changed is when the kernel's list of files last changed, after
	// boot; the tables it filled for a process started later are the
	// ones the list gives now.
	changed time.Duration
	// filled is the process being learned whose tables the kernel
	// filled (sampler.NewProc.TablesFilled): SetUnwind need not write
	// them again.
	filled filledProc
}

// kernelFileAt is a file as the kernel holds it, mapped at offset.
type kernelFileAt struct {
	file   sampler.KernelFile
	offset uint64
}

// filledProc is a process the kernel listed for the unwinder itself.
type filledProc struct {
	pid, generation uint32
	started         time.Duration // after boot
}

// quietFile is a file known processes map: the offsets of its mappings the
// kernel was told of (as it holds the file: kernel), and where the
// unwinder last listed its rows at each offset, until they are
// overwritten; the interpreter in it if told of (python), found by its
// mapping at pythonAt, whose code objects the sampler names pythonImage.
type quietFile struct {
	kernel      sampler.KernelFile
	told        []uint64
	rows        map[uint64]sampler.QuietRows
	python      bool
	pythonAt    uint64
	pythonImage uint32
}

// file returns what is known of file, making it known. Callers hold mu.
func (q *quietFiles) file(file proc.FileKey) *quietFile {
	f := q.files[file]
	if f == nil {
		f = &quietFile{rows: map[uint64]sampler.QuietRows{}}
		q.files[file] = f
	}
	return f
}

// holds reports whether the kernel may be told of f as kernel: the one
// it was told of f as, if any (forget undoes only that one).
func (f *quietFile) holds(kernel sampler.KernelFile) bool {
	return f.kernel == kernel || (len(f.told) == 0 && !f.python)
}

// add tells the kernel of file, as it holds it (kernel), mapped at offset.
func (q *quietFiles) add(file proc.FileKey, kernel sampler.KernelFile, offset uint64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	f := q.file(file)
	if slices.Contains(f.told, offset) || !f.holds(kernel) {
		return
	}
	f.kernel = kernel
	q.change()
	if q.k.SetQuietFile(kernel, offset, f.rows[offset]) == nil {
		f.told = append(f.told, offset)
	}
}

// change notes that the kernel's list changes now. Callers hold mu.
func (q *quietFiles) change() {
	var ts unix.Timespec
	if unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts) != nil {
		q.changed = math.MaxInt64 // never: no tables filled are trusted
		return
	}
	q.changed = max(q.changed, time.Duration(ts.Nano()))
}

// addPython tells the kernel of interpreter in, in file as the kernel
// holds it (kernel), found by its mapping at offset; false if it could
// not.
func (q *quietFiles) addPython(file proc.FileKey, kernel sampler.KernelFile, offset uint64, in *python.Interpreter) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	f := q.file(file)
	if !f.holds(kernel) {
		return false
	}
	if f.python && f.pythonImage == in.ImageID() && f.pythonAt == offset {
		return true
	}
	f.kernel = kernel
	q.change() // fill_python's listings
	if q.k.SetQuietPython(kernel, offset, in.Mapping.Start, in) != nil {
		return false
	}
	f.python, f.pythonAt, f.pythonImage = true, offset, in.ImageID()
	q.pythons[kernelFileAt{kernel, offset}] = f
	return true
}

// pythonFilled reports whether the kernel listed process np's interpreter
// itself, as in (fill_python): it filled the process's tables from a list
// unchanged since the process started, and the first mapping of its
// listing that the list names an interpreter by is the one in was found
// by, of in's image.
func (q *quietFiles) pythonFilled(np sampler.NewProc, in *python.Interpreter) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if !np.TablesFilled || q.changed >= np.Started {
		return false
	}
	for _, l := range np.Mappings {
		// The first the kernel finds (fill_tables_step) is the one.
		if f := q.pythons[kernelFileAt{l.File, l.Offset}]; f != nil {
			return l.Offset == f.pythonAt && l.Start == in.Mapping.Start && f.pythonImage == in.ImageID()
		}
	}
	return false
}

// forget drops what is known of file and takes it off the kernel's list:
// no known process maps it, and its inode may be reused.
func (q *quietFiles) forget(file proc.FileKey) {
	q.mu.Lock()
	defer q.mu.Unlock()
	f := q.files[file]
	if f == nil {
		return
	}
	told := f.told
	if f.python {
		maps.DeleteFunc(q.pythons, func(_ kernelFileAt, g *quietFile) bool { return g == f })
		if !slices.Contains(told, f.pythonAt) {
			told = append(told, f.pythonAt)
		}
	}
	q.change()
	for _, o := range told {
		_ = q.k.DeleteQuietFile(f.kernel, o) // not there: nothing to undo
	}
	delete(q.files, file)
}

// setRows notes the rows of f at offset and tells the kernel if they
// changed where it was told of f. Callers hold mu.
func (q *quietFiles) setRows(f *quietFile, offset uint64, r sampler.QuietRows) {
	if f.rows[offset] == r {
		return
	}
	if r == (sampler.QuietRows{}) {
		delete(f.rows, offset)
	} else {
		f.rows[offset] = r
	}
	i := slices.Index(f.told, offset)
	if i < 0 {
		return
	}
	q.change()
	if q.k.SetQuietFile(f.kernel, offset, r) != nil {
		// Full: the rows it has are not these. Not quiet until told again.
		_ = q.k.DeleteQuietFile(f.kernel, offset)
		f.told = slices.Delete(f.told, i, i+1)
	}
}

// WriteRows first has the kernel stop using the rows it overwrites,
// another binary's, evicted.
func (q *quietFiles) WriteRows(first uint32, rows []unwind.Row) error {
	q.mu.Lock()
	end := first + uint32(len(rows))
	for _, f := range q.files {
		for offset, r := range f.rows {
			if r.First < end && first < r.First+r.Rows {
				q.setRows(f, offset, sampler.QuietRows{})
			}
		}
	}
	q.mu.Unlock()
	return q.k.WriteRows(first, rows)
}

// SetUnwind lists the process and notes the rows of its mappings; a
// process the kernel listed alike already is not written again.
func (q *quietFiles) SetUnwind(pid, generation uint32, ms []unwind.Mapping, partial bool) error {
	q.mu.Lock()
	filled := q.filledAlike(pid, generation, ms, partial)
	q.mu.Unlock()
	if !filled {
		if err := q.k.SetUnwind(pid, generation, ms, partial); err != nil {
			return err
		}
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, m := range ms {
		if m.Rows > 0 { // anonymous memory has none, and shares the vDSO's zero key
			q.setRows(q.file(m.File), m.Offset, sampler.QuietRows{BaseFromStart: m.Base - m.Start, First: m.First, Rows: m.Rows})
		}
	}
	return nil
}

func (q *quietFiles) DeleteUnwind(pid uint32, exited bool) error {
	return q.k.DeleteUnwind(pid, exited)
}

// learnFilled runs learn, the unwinder learning np, a process whose
// tables the kernel may have filled (np.TablesFilled).
func (q *quietFiles) learnFilled(np sampler.NewProc, learn func()) {
	q.mu.Lock()
	if np.TablesFilled {
		q.filled = filledProc{np.PID, np.Generation, np.Started}
	}
	q.mu.Unlock()
	learn()
	q.mu.Lock()
	q.filled = filledProc{}
	q.mu.Unlock()
}

// filledAlike reports whether the kernel filled the tables of process pid
// as ms lists them: from the list as it is now, unchanged since the
// process started (fill_tables ran after). Callers hold mu.
func (q *quietFiles) filledAlike(pid, generation uint32, ms []unwind.Mapping, partial bool) bool {
	if f := q.filled; partial || f.pid != pid || f.generation != generation || q.changed >= f.started {
		return false
	}
	for _, m := range ms {
		f := q.files[m.File]
		if f == nil || !slices.Contains(f.told, m.Offset) {
			return false
		}
		var r sampler.QuietRows
		if m.Rows > 0 {
			r = sampler.QuietRows{BaseFromStart: m.Base - m.Start, First: m.First, Rows: m.Rows}
		}
		if f.rows[m.Offset] != r {
			return false
		}
	}
	return true
}
