package symbol

import (
	"debug/elf"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// compilerPath is a large Go binary every test machine has: the toolchain's
// compiler.
func compilerPath(t *testing.T) string {
	out, err := goCmd(t, "env", "GOTOOLDIR").Output()
	if err != nil {
		t.Fatalf("go env GOTOOLDIR: %v", err)
	}
	return filepath.Join(strings.TrimSpace(string(out)), "compile")
}

// TestOpenGoMapsTable checks that a Go binary's pclntab, megabytes in a
// large binary, is mapped from the file rather than read into the heap.
func TestOpenGoMapsTable(t *testing.T) {
	f, err := elf.Open(compilerPath(t))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	pcln := f.Section(".gopclntab")
	if pcln == nil || pcln.Size < 4<<20 {
		t.Skip("the compiler has no .gopclntab of 4 MB or more to measure with")
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	tab, err := OpenGo(f)
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Fatal(err)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > pcln.Size/8 {
		t.Errorf("OpenGo allocated %d bytes for a %d-byte pclntab: not mapped", alloc, pcln.Size)
	}
	if fns := tab.Functions(); len(fns) < 1000 || tab.Lookup(fns[len(fns)/2].Entry) == nil {
		t.Errorf("mapped table: %d functions, or the middle one unnamed", len(fns))
	}
}

// TestMappedTableTruncated truncates a binary while its table is mapped:
// lookups then fail instead of crashing flint with SIGBUS.
func TestMappedTableTruncated(t *testing.T) {
	path := filepath.Join(t.TempDir(), "compile")
	src, err := os.Open(compilerPath(t))
	if err != nil {
		t.Fatal(err)
	}
	dst, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	src.Close()
	dst.Close()

	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tab, err := OpenGo(f)
	if err != nil {
		t.Fatal(err)
	}
	fns := tab.Functions()
	if len(fns) < 1000 || tab.Lookup(fns[10].Entry) == nil {
		t.Fatalf("%d functions, or the 10th unnamed", len(fns))
	}
	if err := os.Truncate(path, 4096); err != nil {
		t.Fatal(err)
	}
	if frames := tab.Lookup(fns[len(fns)-10].Entry); frames != nil {
		t.Errorf("lookup in a truncated file named %v", frames)
	}
	if n := len(tab.Functions()); n == len(fns) {
		t.Errorf("Functions listed all %d functions of a truncated file", n)
	}
}
