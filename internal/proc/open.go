package proc

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// ErrNotRegular reports a file that is not a regular file (a FIFO, a
// device, a directory): flint reads none, so a FIFO cannot block it and a
// device cannot feed it without end.
var ErrNotRegular = errors.New("not a regular file")

// Open opens the file behind mapping m of process pid: through
// /proc/PID/map_files, which works for deleted files and other mount
// namespaces, else as OpenInRoot opens m's path. It is a regular file.
func Open(pid int, m *Mapping) (*os.File, error) {
	f, err := openRegular(fmt.Sprintf("%s/%d/map_files/%x-%x", Root, pid, m.Start, m.End))
	if err == nil {
		return f, nil
	}
	if m.Path == "" || m.Path[0] != '/' {
		return nil, err
	}
	f, err2 := OpenInRoot(pid, m.Path)
	if err2 != nil {
		return nil, fmt.Errorf("open %s of pid %d: %w", m.Path, pid, errors.Join(err, err2))
	}
	return f, nil
}

// openRegular opens path without blocking (a FIFO would wait for a
// writer) and checks it is a regular file.
func openRegular(path string) (*os.File, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC|unix.O_NOCTTY, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	return regular(fd, path)
}

// OpenInRoot opens path as process pid sees it: resolved inside its root
// directory (its mount namespace and chroot), never the host's, and
// following no symbolic link, so a file the process controls cannot point
// flint at another one (/etc/shadow, another container's files). The file
// is regular; a symbolic link fails with unix.ELOOP, anything else that is
// not a regular file with ErrNotRegular. Needs Linux 5.6 (openat2).
func OpenInRoot(pid int, path string) (*os.File, error) {
	rootPath := Root + "/" + strconv.Itoa(pid) + "/root"
	root, err := unix.Open(rootPath, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: rootPath, Err: err}
	}
	defer unix.Close(root)
	fd, err := unix.Openat2(root, path, &unix.OpenHow{
		Flags:   unix.O_RDONLY | unix.O_NONBLOCK | unix.O_CLOEXEC | unix.O_NOCTTY,
		Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: rootPath + path, Err: err}
	}
	return regular(fd, rootPath+path)
}

// regular returns fd as a file if it is a regular one, else closes it.
func regular(fd int, path string) (*os.File, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, &fs.PathError{Op: "stat", Path: path, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		unix.Close(fd)
		return nil, &fs.PathError{Op: "open", Path: path, Err: ErrNotRegular}
	}
	return os.NewFile(uintptr(fd), path), nil
}
