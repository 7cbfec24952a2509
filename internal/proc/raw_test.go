package proc

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"unsafe"
)

// TestRawReads reads a file and this process's own memory with the raw
// calls: whole, short at the file's end, and refused where nothing is.
func TestRawReads(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(path, []byte("0123456789"), 0o600); err != nil {
		t.Fatal(err)
	}
	fd, err := OpenRaw(path)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 8)
	if n, err := PreadRaw(fd, buf[:4], 3); err != nil || string(buf[:n]) != "3456" {
		t.Errorf("PreadRaw at 3 = %q, %v; want 3456", buf[:n], err)
	}
	if n, err := PreadRaw(fd, buf, 6); err != nil || string(buf[:n]) != "6789" {
		t.Errorf("PreadRaw at 6 = %q, %v; want the 4 bytes to the end", buf[:n], err)
	}
	if n, err := readRaw(fd, buf); err != nil || string(buf[:n]) != "01234567" {
		t.Errorf("readRaw = %q, %v; want 01234567", buf[:n], err)
	}
	if err := CloseRaw(fd); err != nil {
		t.Error(err)
	}
	if err := CloseRaw(fd); err == nil {
		t.Error("a descriptor closed twice")
	}
	if _, err := OpenRaw(path + ".none"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("OpenRaw of no file: %v; want not exist", err)
	}

	mem, err := OpenRaw("/proc/self/mem")
	if err != nil {
		t.Fatal(err)
	}
	defer CloseRaw(mem)
	secret := []byte("flint reads itself")
	got := make([]byte, len(secret))
	if n, err := PreadRaw(mem, got, int64(uintptr(unsafe.Pointer(&secret[0])))); err != nil || !bytes.Equal(got[:n], secret) {
		t.Errorf("own memory read as %q, %v; want %q", got[:n], err, secret)
	}
	if _, err := PreadRaw(mem, got, 4096); err == nil {
		t.Error("read the unmapped page at 4096")
	}
}
