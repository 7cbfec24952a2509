package proc

import (
	"errors"
	"slices"
	"strings"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/flint-dev/flint/internal/memo"
)

// Reading a process's executable mappings is most of what naming a new
// process costs. /proc/PID/maps formats every mapping (a python3 has over a
// hundred, a fifth of them executable) as text, and a read of it took
// 150-260 us on the benchmark VM; the PROCMAP_QUERY ioctl (Linux 6.11) asks
// for the executable ones only, in 20-70 us. Older kernels answer ENOTTY
// and flint reads the text.

// procmapQuery is struct procmap_query of include/uapi/linux/fs.h.
type procmapQuery struct {
	Size        uint64
	QueryFlags  uint64
	QueryAddr   uint64
	VMAStart    uint64
	VMAEnd      uint64
	VMAFlags    uint64
	VMAPageSize uint64
	VMAOffset   uint64
	Inode       uint64
	DevMajor    uint32
	DevMinor    uint32
	VMANameSize uint32
	BuildIDSize uint32
	VMANameAddr uint64
	BuildIDAddr uint64
}

const (
	// PROCMAP_QUERY is _IOWR('f', 17, struct procmap_query).
	procmapQueryIoctl = 3<<30 | uint64(unsafe.Sizeof(procmapQuery{}))<<16 | 'f'<<8 | 17

	queryExecutable     = 0x04 // PROCMAP_QUERY_VMA_EXECUTABLE
	queryCoveringOrNext = 0x10 // PROCMAP_QUERY_COVERING_OR_NEXT_VMA
)

// errNoQuery reports a kernel without PROCMAP_QUERY.
var errNoQuery = errors.New("PROCMAP_QUERY not supported")

// queryMaps lists the executable mappings of the process whose
// /proc/PID/maps is open as fd, in address order. name is scratch space
// for paths (PATH_MAX bytes).
func queryMaps(fd int, name []byte) ([]Mapping, error) {
	// The mappings are gathered in scratch space and copied out once, at
	// their size: appended to a new slice, they took half a dozen
	// allocations and kept up to twice their room.
	sp := scratchMappings.Get().(*[]Mapping)
	defer scratchMappings.Put(sp)
	ms, err := queryMapsInto((*sp)[:0], fd, name)
	var out []Mapping
	if len(ms) > 0 {
		out = slices.Clone(ms)
	}
	clear(ms) // their paths
	*sp = ms[:0]
	return out, err
}

// scratchMappings hold queryMaps's mappings until they are copied out.
var scratchMappings = sync.Pool{New: func() any { return new([]Mapping) }}

// queryMapsInto is queryMaps, appending to out.
func queryMapsInto(out []Mapping, fd int, name []byte) ([]Mapping, error) {
	q := procmapQuery{Size: uint64(unsafe.Sizeof(procmapQuery{}))}
	for addr := uint64(0); ; {
		q.QueryFlags = queryExecutable | queryCoveringOrNext
		q.QueryAddr = addr
		q.VMANameSize = uint32(len(name))
		q.VMANameAddr = uint64(uintptr(unsafe.Pointer(&name[0])))
		q.BuildIDSize = 0
		errno := ioctlRaw(fd, procmapQueryIoctl, unsafe.Pointer(&q))
		switch errno {
		case 0:
		case unix.ENOENT: // no mapping at or above addr
			return out, nil
		case unix.ENAMETOOLONG:
			// A path longer than PATH_MAX: keep the mapping unnamed;
			// its file is still opened through map_files.
			q.VMANameSize = 0
			q.VMANameAddr = 0
			if errno = ioctlRaw(fd, procmapQueryIoctl, unsafe.Pointer(&q)); errno != 0 {
				return nil, errno
			}
		case unix.ENOTTY, unix.EINVAL:
			if len(out) == 0 && addr == 0 {
				return nil, errNoQuery
			}
			return nil, errno
		default:
			return nil, errno
		}
		if q.VMAEnd <= q.VMAStart || q.VMAEnd <= addr {
			return nil, errors.New("PROCMAP_QUERY went backwards")
		}
		m := Mapping{
			Start: q.VMAStart, End: q.VMAEnd, Offset: q.VMAOffset,
			Dev: uint64(q.DevMajor)<<20 | uint64(q.DevMinor), Inode: q.Inode,
		}
		if n := int(q.VMANameSize); n > 1 && n <= len(name) {
			m.Path = internPath(name[:n-1]) // the size counts the NUL
			if p, ok := strings.CutSuffix(m.Path, " (deleted)"); ok {
				m.Path, m.Deleted = p, true
			}
		}
		out = append(out, m)
		addr = q.VMAEnd
	}
}

// mappedPaths interns the paths of mappings: a node's new processes map
// the same few hundred files, and a snapshot then costs no string for them.
var mappedPaths = memo.Strings[string]{Max: 4096}

// internPath returns b as a string, the same one for equal b. Safe for
// concurrent use.
func internPath(b []byte) string {
	return mappedPaths.GetBytes(b, func(s string) string { return s })
}
