package store

import (
	"errors"
	"fmt"
	"io/fs"
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
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
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

// The data directory holds what every process on the node ran, with its
// command line's binary names and container labels: only its owner (root,
// for the agent) may read it. SQLite gives the -wal and -shm files the
// database file's mode.
const (
	dirMode  fs.FileMode = 0o700
	fileMode fs.FileMode = 0o600
)

// privateDir creates dir and its missing parents with mode 0700, and makes
// an existing dir that others may enter 0700, saying so through logf.
func privateDir(dir string, logf func(string, ...any)) error {
	if err := os.MkdirAll(dir, dirMode); err != nil {
		return err
	}
	return narrow(dir, dirMode, logf)
}

// privateFiles creates the database file with mode 0600 if it is missing,
// so that SQLite and its -wal and -shm files take that mode, and makes
// existing ones that others may read 0600, saying so through logf.
func privateFiles(db string, logf func(string, ...any)) error {
	f, err := os.OpenFile(db, os.O_RDWR|os.O_CREATE, fileMode)
	if err != nil {
		return fmt.Errorf("create database: %w", err)
	}
	f.Close()
	for _, path := range []string{db, db + "-wal", db + "-shm", filepath.Join(filepath.Dir(db), "flint.lock")} {
		if err := narrow(path, fileMode, logf); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	return nil
}

// narrow sets path's mode to mode if group or others have any access.
func narrow(path string, mode fs.FileMode, logf func(string, ...any)) error {
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	if fi.Mode().Perm()&0o077 == 0 {
		return nil
	}
	if err := os.Chmod(path, mode); err != nil {
		return fmt.Errorf("make %s private: %w", path, err)
	}
	logf("store: %s was mode %#o, open to other users: now %#o", path, fi.Mode().Perm(), mode)
	return nil
}
