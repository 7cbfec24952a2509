package sampler

import (
	"fmt"
	"unsafe"

	"github.com/cilium/ebpf/btf"
)

// ListsNewProcesses reports whether the kernel has BPF task works (Linux
// 6.18), with which the program lists a new process's mappings
// (NewProc.Listed), and a quiet one wakes no reader (SetQuietFile).
func ListsNewProcesses() bool {
	kernel, err := btf.LoadKernelSpec()
	if err != nil {
		return false
	}
	_, err = kernel.AnyTypeByName("bpf_task_work_schedule_resume_impl")
	return err == nil
}

// QuietRows are the unwind rows the walker uses for a quiet mapping, as
// unwind.Mapping names them, with the rows' base from the mapping's start:
// Rows 0 walks it with frame pointers.
type QuietRows struct {
	BaseFromStart uint64
	First, Rows   uint32
}

// SetQuietFile tells the program that user space knows file f mapped at
// offset (the zero KernelFile and offset for the vDSO), and the rows to
// walk it with. A process whose executable mappings are all such, in
// cgroups SetQuietCgroups names, is announced without waking the reader
// (read at the next Drain, or before a record that needs it), with its
// unwind mappings listed by the program (Linux 6.18: a process the kernel
// lists).
func (s *Sampler) SetQuietFile(f KernelFile, offset uint64, r QuietRows) error {
	k := quietKey(f, offset)
	v := profileQuietFile{BaseFromStart: r.BaseFromStart, First: r.First, Rows: r.Rows}
	if err := putRaw(s.objs.QuietFiles, unsafe.Pointer(&k), unsafe.Pointer(&v)); err != nil {
		return fmt.Errorf("set quiet file %d:%d at %#x: %w", f.Dev, f.Inode, offset, err)
	}
	return nil
}

// DeleteQuietFile undoes SetQuietFile, and SetQuietPython of the same
// mapping; one not set is no error.
func (s *Sampler) DeleteQuietFile(f KernelFile, offset uint64) error {
	k := quietKey(f, offset)
	whom := fmt.Sprintf("%d:%d at %#x", f.Dev, f.Inode, offset)
	if err := deleteKey(s.objs.QuietPythons, &k, "quiet python interpreter", whom); err != nil {
		return err
	}
	return deleteKey(s.objs.QuietFiles, &k, "quiet file", whom)
}

// SetQuietCgroups tells the program that user space knows the cgroups
// NewProc.Cgroups names key.
func (s *Sampler) SetQuietCgroups(key uint64) error {
	var known uint8 = 1
	if err := putRaw(s.objs.QuietCgroups, unsafe.Pointer(&key), unsafe.Pointer(&known)); err != nil {
		return fmt.Errorf("set quiet cgroups %#x: %w", key, err)
	}
	return nil
}

// DeleteQuietCgroups undoes SetQuietCgroups; one not set is no error.
func (s *Sampler) DeleteQuietCgroups(key uint64) error {
	return deleteKey(s.objs.QuietCgroups, key, "quiet cgroups", fmt.Sprintf("%#x", key))
}

func quietKey(f KernelFile, offset uint64) profileQuietFileKey {
	return profileQuietFileKey{Inode: f.Inode, Offset: offset, Dev: f.Dev, InodeGeneration: f.Generation}
}
