package symbol

import (
	"debug/elf"
	"errors"
	"io"
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"unsafe"

	"golang.org/x/sys/unix"
)

// minMapped is the smallest region worth mapping rather than reading.
const minMapped = 64 << 10

// fileBytes hands out regions of an ELF file. A large region of a file on
// disk is mapped rather than read: a binary's tables then cost page cache,
// which the kernel can reclaim, and only the pages a lookup touches count
// in flint's resident memory. Reading flint's own 8 MB pclntab into the
// heap cost the agent that much RSS and more in GC headroom.
//
// A mapped file that shrinks later (rewritten in place) faults on access;
// the tables' entry points recover from that with guardFault.
type fileBytes struct {
	maps [][]byte // whole mappings, for unmapping
}

// read returns n bytes at off in r (an ELF section or segment, or the
// file itself).
func (fb *fileBytes) read(r io.ReaderAt, off, n int64) ([]byte, error) {
	if n >= minMapped {
		if data, ok := fb.mmap(r, off, n); ok {
			return data, nil
		}
	}
	return readFull(r, off, n)
}

// mmap maps n bytes at off in r when r is a file on disk, or a part of one,
// and the file holds them.
func (fb *fileBytes) mmap(r io.ReaderAt, off, n int64) ([]byte, bool) {
	if off < 0 || n <= 0 || off+n < off {
		return nil, false
	}
	switch v := r.(type) {
	case *elf.Section:
		r = v.ReaderAt
	case *elf.Prog:
		r = v.ReaderAt
	}
	for {
		sr, ok := r.(*io.SectionReader)
		if !ok {
			break
		}
		outer, base, size := sr.Outer()
		if off+n > size {
			return nil, false
		}
		r, off = outer, base+off
	}
	f, ok := r.(*os.File)
	if !ok {
		return nil, false
	}
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() || off+n > fi.Size() {
		return nil, false
	}
	page := int64(os.Getpagesize())
	start := off &^ (page - 1)
	mem, err := unix.Mmap(int(f.Fd()), start, int(off+n-start), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil, false
	}
	fb.maps = append(fb.maps, mem)
	return mem[off-start:][:n:n], true
}

// drop unmaps the mapping data came from, for a region used only while
// opening; data read into the heap is left to the GC.
func (fb *fileBytes) drop(data []byte) {
	if len(data) == 0 {
		return
	}
	p := uintptr(unsafe.Pointer(&data[0]))
	for i, m := range fb.maps {
		start := uintptr(unsafe.Pointer(&m[0]))
		if p >= start && p-start < uintptr(len(m)) {
			unix.Munmap(m)
			fb.maps = slices.Delete(fb.maps, i, i+1)
			return
		}
	}
}

// release unmaps everything, when opening failed.
func (fb *fileBytes) release() {
	for _, m := range fb.maps {
		unix.Munmap(m)
	}
	fb.maps = nil
}

// keepWith unmaps the remaining mappings once t is unreachable: the
// slices into them live in t.
func (fb *fileBytes) keepWith(t *GoTable) {
	if len(fb.maps) == 0 {
		return
	}
	runtime.AddCleanup(t, func(fb fileBytes) { fb.release() }, *fb)
}

// errFileChanged reports a fault reading a mapped file: it was truncated
// or rewritten in place while flint held it.
var errFileChanged = errors.New("binary changed on disk while mapped")

// guardFault turns a fault in mapped file memory during the deferring
// function into *err = errFileChanged; other panics go on. Use:
//
//	defer guardFault(debug.SetPanicOnFault(true), &err)
func guardFault(old bool, err *error) {
	debug.SetPanicOnFault(old)
	r := recover()
	if r == nil {
		return
	}
	if _, fault := r.(interface{ Addr() uintptr }); fault {
		*err = errFileChanged
		return
	}
	panic(r)
}
