package proc

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// Raw system calls, for reading /proc and another process's memory while
// learning a new process. The agent idles between new processes, and so
// does Go's scheduler monitor (sysmon); the first system call the runtime
// sees (entersyscall) wakes it, and it then polls every 20 us until the
// agent idles again. Under process churn that was a fifth of the agent's
// CPU and doubled its context switches (docs/BENCHMARKS.md). These calls
// wait for nothing but the kernel's own work (a process's mmap_lock, its
// pages), so the runtime need not know of them: a raw call keeps its P,
// and the agent's other P runs the rest meanwhile.

// OpenRaw opens path read-only and close-on-exec.
func OpenRaw(path string) (int, error) {
	p, err := unix.BytePtrFromString(path)
	if err != nil {
		return -1, err
	}
	cwd := unix.AT_FDCWD // negative: the constant would not convert
	fd, _, errno := unix.RawSyscall6(unix.SYS_OPENAT, uintptr(cwd), uintptr(unsafe.Pointer(p)),
		unix.O_RDONLY|unix.O_CLOEXEC, 0, 0, 0)
	if errno != 0 {
		return -1, errno
	}
	return int(fd), nil
}

// PreadRaw reads len(b) bytes at off from fd, or up to its end (n short,
// no error).
func PreadRaw(fd int, b []byte, off int64) (n int, err error) {
	for n < len(b) {
		k, _, errno := unix.RawSyscall6(unix.SYS_PREAD64, uintptr(fd), uintptr(unsafe.Pointer(&b[n])),
			uintptr(len(b)-n), uintptr(off+int64(n)), 0, 0)
		switch {
		case errno == unix.EINTR:
		case errno != 0:
			return n, errno
		case k == 0:
			return n, nil
		default:
			n += int(k)
		}
	}
	return n, nil
}

// readRaw reads into b from fd's position.
func readRaw(fd int, b []byte) (int, error) {
	for {
		n, _, errno := unix.RawSyscall(unix.SYS_READ, uintptr(fd), uintptr(unsafe.Pointer(unsafe.SliceData(b))), uintptr(len(b)))
		if errno != unix.EINTR {
			if errno != 0 {
				return 0, errno
			}
			return int(n), nil
		}
	}
}

// ioctlRaw is ioctl(fd, req, arg).
func ioctlRaw(fd int, req uint64, arg unsafe.Pointer) unix.Errno {
	_, _, errno := unix.RawSyscall(unix.SYS_IOCTL, uintptr(fd), uintptr(req), uintptr(arg))
	return errno
}

// CloseRaw closes fd.
func CloseRaw(fd int) error {
	if _, _, errno := unix.RawSyscall(unix.SYS_CLOSE, uintptr(fd), 0, 0); errno != 0 {
		return errno
	}
	return nil
}
