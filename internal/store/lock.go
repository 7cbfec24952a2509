package store

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// dirLock is an exclusive flock on dir/flint.lock. flock (unlike SQLite's
// POSIX record locks) belongs to the open file, so a second Open in the same
// process is refused too, and the kernel drops it when the holder dies,
// however it dies: no stale lock survives kill -9.
type dirLock struct {
	f *os.File
}

func lockDir(dir string) (*dirLock, error) {
	path := filepath.Join(dir, "flint.lock")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open lock file: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		defer f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			// The holder writes its pid after locking; it may not have yet.
			b, _ := os.ReadFile(path)
			if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && pid > 0 {
				return nil, fmt.Errorf("%w: %s is locked by pid %d", ErrLocked, dir, pid)
			}
			return nil, fmt.Errorf("%w: %s is locked", ErrLocked, dir)
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	// The pid is only a hint for the error message above; failing to write
	// it does not matter.
	if err := f.Truncate(0); err == nil {
		f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return &dirLock{f: f}, nil
}

// release drops the lock. The file stays: removing it would race with
// another process that has it open and is about to lock it.
func (l *dirLock) release() error {
	return l.f.Close()
}
