package symbol

import (
	"bufio"
	"bytes"
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"
)

// nmSym is a symbol as `nm -S` prints it.
type nmSym struct {
	addr, size uint64
	hasSize    bool
}

// nmSymbols returns the defined symbols of the file at path by name.
func nmSymbols(t *testing.T, path string) map[string]nmSym {
	t.Helper()
	out, err := exec.Command("nm", "-S", "--defined-only", path).Output()
	if err != nil {
		t.Fatalf("nm %s: %v", path, err)
	}
	syms := make(map[string]nmSym)
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		var s nmSym
		switch len(f) {
		case 3: // addr type name
		case 4: // addr size type name
			s.size, err = strconv.ParseUint(f[1], 16, 64)
			s.hasSize = err == nil
		default:
			continue
		}
		if s.addr, err = strconv.ParseUint(f[0], 16, 64); err != nil {
			continue
		}
		syms[f[len(f)-1]] = s
	}
	return syms
}

// needFixtureTools skips the test unless every named program is installed.
func needFixtureTools(t *testing.T, names ...string) {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skipf("ELF fixtures are built on Linux only, not %s", runtime.GOOS)
	}
	for _, n := range names {
		if _, err := exec.LookPath(n); err != nil {
			t.Skipf("%s not installed: cannot build ELF fixtures", n)
		}
	}
}

// runFixtureCmd runs a fixture-building command and fails the test with its output.
func runFixtureCmd(t *testing.T, name string, args ...string) {
	t.Helper()
	cmd := exec.Command(name, args...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
}

// buildGoELF builds a small Go program with the given Go build ID and
// extra linker flags and returns its path.
func buildGoELF(t *testing.T, buildID string, ldflags ...string) string {
	t.Helper()
	needFixtureTools(t, "go")
	dir := t.TempDir()
	src := `package main

//go:noinline
func spin(n int) int {
	s := 0
	for i := 0; i < n; i++ {
		s += i * i
	}
	return s
}

func main() { println(spin(10)) }
`
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module fixture\n\ngo 1.22\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "fixture")
	cmd := exec.Command("go", "build", "-o", out, "-ldflags=-buildid="+buildID+" "+strings.Join(ldflags, " "), ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=", "GOWORK=off", "CGO_ENABLED=0", "GOOS=linux")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, b)
	}
	return out
}

func openELFTable(t *testing.T, path string) *ELFTable {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tab, err := NewELFTable(f)
	if err != nil {
		t.Fatalf("NewELFTable(%s): %v", path, err)
	}
	return tab
}

func lookupName(tab Table, addr uint64) string {
	fr := tab.Lookup(addr)
	if fr == nil {
		return ""
	}
	return fr[0].Function
}

func TestELFTableLookup(t *testing.T) {
	needFixtureTools(t, "gcc", "g++", "nm", "strip")
	src := func(name string) string { return filepath.Join("testdata", name) }
	cWant := map[string]string{
		"exported_work": "exported_work",
		"static_helper": "static_helper",
		"alias_target":  "alias_target",
		"alias_weak":    "alias_target", // a global name beats a weak alias
		"asm_nosize":    "asm_nosize",
		"asm_label":     "asm_label",
		"main":          "main",
	}
	// After strip, only .dynsym is left: exported functions, no statics.
	cStrippedWant := map[string]string{
		"exported_work": "exported_work",
		"static_helper": "-",
		"alias_target":  "alias_target",
		"alias_weak":    "alias_target",
		"asm_nosize":    "asm_nosize",
		"asm_label":     "asm_label",
		"main":          "main",
	}
	tests := []struct {
		name  string
		cc    string
		src   string
		flags []string
		strip bool
		// want maps a symbol name to the name Lookup must give for
		// addresses inside it; "-" means anything but that symbol.
		want map[string]string
	}{
		{"non-PIE executable", "gcc", "fixture.c", []string{"-no-pie"}, false, cWant},
		{"PIE executable", "gcc", "fixture.c", []string{"-fPIE", "-pie"}, false, cWant},
		{"shared library", "gcc", "fixture.c", []string{"-fPIC", "-shared"}, false, cWant},
		{"stripped shared library", "gcc", "fixture.c", []string{"-fPIC", "-shared"}, true, cStrippedWant},
		{"stripped PIE exporting its symbols", "gcc", "fixture.c", []string{"-fPIE", "-pie", "-rdynamic"}, true, cStrippedWant},
		{"stripped non-PIE executable", "gcc", "fixture.c", []string{"-no-pie"}, true, map[string]string{
			"exported_work": "-", "static_helper": "-", "main": "-",
		}},
		{"C++ executable", "g++", "fixture.cc", []string{"-fPIE", "-pie"}, false, map[string]string{
			"_ZN5flint3BoxIiE4spinEi": "flint::Box<int>::spin",
			"_ZN5flint5plainEi":       "flint::plain",
			"c_linkage":               "c_linkage",
			"main":                    "main",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			bin := filepath.Join(dir, "fixture")
			args := append([]string{"-O0", "-g0", "-fno-omit-frame-pointer", "-o", bin}, tt.flags...)
			runFixtureCmd(t, tt.cc, append(args, src(tt.src))...)
			// Addresses come from the unstripped file: strip moves no code.
			syms := nmSymbols(t, bin)
			if tt.strip {
				runFixtureCmd(t, "strip", bin)
			}
			tab := openELFTable(t, bin)
			for sym, want := range tt.want {
				s, ok := syms[sym]
				if !ok {
					t.Fatalf("nm shows no %s", sym)
				}
				probes := []uint64{s.addr, s.addr + 1}
				if s.hasSize && s.size > 0 {
					probes = []uint64{s.addr, s.addr + s.size/2, s.addr + s.size - 1}
				}
				for _, addr := range probes {
					got := lookupName(tab, addr)
					if want == "-" {
						if got == sym {
							t.Errorf("Lookup(%#x) = %q, want anything else: stripped", addr, got)
						}
						continue
					}
					if got != want {
						t.Errorf("Lookup(%#x) in %s = %q, want %q", addr, sym, got, want)
					}
				}
			}
			for _, addr := range []uint64{0, 1, ^uint64(0)} {
				if got := tab.Lookup(addr); got != nil {
					t.Errorf("Lookup(%#x) = %v, want nil", addr, got)
				}
			}
		})
	}
}

func TestELFTableSymbol(t *testing.T) {
	needFixtureTools(t, "gcc", "nm", "strip")
	dir := t.TempDir()
	lib := filepath.Join(dir, "libfixture.so")
	runFixtureCmd(t, "gcc", "-O0", "-fPIC", "-shared", "-o", lib, filepath.Join("testdata", "fixture.c"))
	syms := nmSymbols(t, lib)
	stripped := filepath.Join(dir, "libstripped.so")
	runFixtureCmd(t, "strip", "-o", stripped, lib)

	tests := []struct {
		file, name string
		ok         bool
	}{
		{lib, "exported_counter", true}, // an OBJECT
		{lib, "exported_work", true},
		{lib, "static_helper", true},
		{lib, "alias_weak", true}, // an alias Lookup does not show
		{lib, "asm_label", true},
		{lib, "no_such_symbol", false},
		{lib, "", false},
		{stripped, "exported_counter", true},
		{stripped, "exported_work", true},
		{stripped, "static_helper", false},
	}
	tabs := map[string]*ELFTable{lib: openELFTable(t, lib), stripped: openELFTable(t, stripped)}
	for _, tt := range tests {
		t.Run(filepath.Base(tt.file)+"/"+tt.name, func(t *testing.T) {
			addr, size, ok := tabs[tt.file].Symbol(tt.name)
			if ok != tt.ok {
				t.Fatalf("Symbol(%q) ok = %v, want %v", tt.name, ok, tt.ok)
			}
			if !ok {
				return
			}
			want := syms[tt.name]
			if addr != want.addr {
				t.Errorf("Symbol(%q) addr = %#x, want %#x", tt.name, addr, want.addr)
			}
			if want.hasSize && size != want.size {
				t.Errorf("Symbol(%q) size = %d, want %d", tt.name, size, want.size)
			}
		})
	}
}

// TestELFTableConcurrent runs Lookup and Symbol from several goroutines,
// for the race detector: both fill caches on first use.
func TestELFTableConcurrent(t *testing.T) {
	needFixtureTools(t, "g++", "nm")
	bin := filepath.Join(t.TempDir(), "fixture")
	runFixtureCmd(t, "g++", "-O0", "-o", bin, filepath.Join("testdata", "fixture.cc"))
	addr := nmSymbols(t, bin)["_ZN5flint5plainEi"].addr
	tab := openELFTable(t, bin)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 100 {
				if got := lookupName(tab, addr); got != "flint::plain" {
					t.Errorf("Lookup = %q, want flint::plain", got)
					return
				}
				if _, _, ok := tab.Symbol("c_linkage"); !ok {
					t.Error("Symbol(c_linkage) not found")
					return
				}
			}
		})
	}
	wg.Wait()
}

func TestELFTableGo(t *testing.T) {
	bin := buildGoELF(t, "flint/fixture")
	tab := openELFTable(t, bin)
	for _, name := range []string{"main.spin", "main.main", "runtime.mallocgc"} {
		addr, size, ok := tab.Symbol(name)
		if !ok || size == 0 {
			t.Fatalf("Symbol(%q) = %#x, %d, %v; want a sized function", name, addr, size, ok)
		}
		for _, a := range []uint64{addr, addr + size - 1} {
			if got := lookupName(tab, a); got != name {
				t.Errorf("Lookup(%#x) = %q, want %q: Go names stay as they are", a, got, name)
			}
		}
	}
}

func TestELFTableFixtures(t *testing.T) {
	// The committed tiny files: ELF64 and ELF32, with symbols nm agrees on.
	tests := []struct {
		file string
		addr uint64
		want string
	}{
		{"tiny-amd64.elf", 0x400100, "work"},
		{"tiny-amd64.elf", 0x400115, "work"},
		{"tiny-amd64.elf", 0x400116, "_start"},
		{"tiny-amd64.elf", 0x40011f, "_start"},
		{"tiny-amd64.elf", 0x400120, ""},
		{"tiny-amd64.so", 0x260, "work"},
		{"tiny-amd64.so", 0x276, "_start"},
		{"tiny-386.elf", 0x080480a8, "work"},
		{"tiny-386.elf", 0x080480c6, "_start"},
		{"tiny-386.elf", 0x080480d0, ""},
		{"tiny-386.elf", 0x08040000, ""},
	}
	for _, tt := range tests {
		t.Run(tt.file+"/"+strconv.FormatUint(tt.addr, 16), func(t *testing.T) {
			tab := openELFTable(t, filepath.Join("testdata", tt.file))
			if got := lookupName(tab, tt.addr); got != tt.want {
				t.Errorf("Lookup(%#x) = %q, want %q", tt.addr, got, tt.want)
			}
		})
	}
}

func TestELFTableCorrupt(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("testdata", "tiny-amd64.elf"))
	if err != nil {
		t.Fatal(err)
	}
	f, err := elf.NewFile(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	symtab := f.Section(".symtab")
	tests := []struct {
		name   string
		mutate func(*elf.File)
	}{
		{"size beyond the file", func(f *elf.File) { f.Section(".symtab").Size = 1 << 39 }},
		{"link out of range", func(f *elf.File) { f.Section(".symtab").Link = 99 }},
		{"link to a non-string table", func(f *elf.File) { f.Section(".symtab").Link = 2 }},
		{"string table beyond the file", func(f *elf.File) { f.Sections[symtab.Link].Size = 1 << 30 }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := elf.NewFile(bytes.NewReader(data))
			if err != nil {
				t.Fatal(err)
			}
			tt.mutate(f)
			if tab, err := NewELFTable(f); err == nil {
				t.Errorf("NewELFTable = %d functions, want an error", tab.nfunc)
			}
		})
	}
}

func TestDemangleName(t *testing.T) {
	tests := []struct{ in, want string }{
		{"_ZN5flint5plainEi", "flint::plain"},
		{"_ZN5flint3BoxIiE4spinEi", "flint::Box<int>::spin"},
		{"_ZNKSt6vectorIiSaIiEE4sizeEv", "std::vector<int, std::allocator<int> >::size"},
		{"_Z3foov.cold", "foo"},
		{"_ZN3std2rt10lang_start17h0123456789abcdefE", "std::rt::lang_start"},
		{"_RNvCs1234_5flint4main", "flint::main"},
		{"main.main", "main.main"},
		{"runtime.(*mheap).alloc", "runtime.(*mheap).alloc"},
		{"memcpy", "memcpy"},
		{"_Znot_mangled", "_Znot_mangled"},
		{"_Z", "_Z"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			if got := demangleName(tt.in); got != tt.want {
				t.Errorf("demangleName(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

// fuzzELFSeeds adds the committed tiny files: an executable, a shared
// library (with .dynsym), one with unwind tables, a 32-bit executable and
// a Go build ID note. They are a few KB each, so mutations land in headers
// and tables often.
func fuzzELFSeeds(f *testing.F) {
	for _, name := range []string{"tiny-amd64.elf", "tiny-amd64.so", "tiny-unwind-amd64.so", "tiny-386.elf", "tiny-gonote-amd64.elf"} {
		data, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
}

func FuzzELFTable(f *testing.F) {
	fuzzELFSeeds(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		ef, err := elf.NewFile(bytes.NewReader(data))
		if err != nil {
			return
		}
		BuildID(ef)
		starts := readFuncStarts(ef.Section(".eh_frame_hdr"))
		for i, start := range starts {
			if i > 0 && starts[i-1] >= start {
				t.Fatalf("function starts not sorted: %#x before %#x", starts[i-1], start)
			}
			if got, ok := starts.find(start + 1); !ok || got != start && got != start+1 {
				t.Fatalf("find(%#x) = %#x, %v: not the start before it", start+1, got, ok)
			}
		}
		tab, err := NewELFTable(ef)
		if err != nil {
			return
		}
		for i := range tab.nfunc {
			addr, size := tab.addrs[i], tab.sizes[i]
			if i > 0 && tab.addrs[i-1] >= addr {
				t.Fatalf("functions not sorted: %#x before %#x", tab.addrs[i-1], addr)
			}
			if size == 0 {
				continue
			}
			if got := tab.Lookup(addr); len(got) != 1 {
				t.Fatalf("Lookup(%#x) = %v at a function's start", addr, got)
			}
			tab.Lookup(addr + size - 1)
		}
		tab.Lookup(0)
		tab.Lookup(^uint64(0))
		for i := range tab.names {
			name := tab.name(i)
			if _, _, ok := tab.Symbol(name); !ok {
				t.Fatalf("Symbol(%q) not found", name)
			}
		}
	})
}

// BenchmarkNewELFTable parses real binaries: libc, the biggest binary
// found and a Go toolchain binary. It reports the bytes the table keeps
// (table-B) beside what debug/elf's Symbols and DynamicSymbols return
// (elf-symbols-B), counting one Symbol struct and the name per symbol.
func BenchmarkNewELFTable(b *testing.B) {
	files := []string{"/usr/lib/x86_64-linux-gnu/libc.so.6", "/usr/bin/node"}
	if out, err := exec.Command("go", "env", "GOROOT").Output(); err == nil {
		files = append(files, filepath.Join(strings.TrimSpace(string(out)), "pkg", "tool", runtime.GOOS+"_"+runtime.GOARCH, "compile"))
	}
	for _, path := range files {
		f, err := elf.Open(path)
		if err != nil {
			continue
		}
		b.Run(filepath.Base(path), func(b *testing.B) {
			defer f.Close()
			b.Run("flint", func(b *testing.B) {
				b.ReportAllocs()
				var tab *ELFTable
				loopCPU(b, func() {
					if tab, err = NewELFTable(f); err != nil {
						b.Fatal(err)
					}
				})
				b.ReportMetric(float64(elfTableBytes(tab)), "table-B")
				b.ReportMetric(float64(tab.nfunc), "funcs")
				b.ReportMetric(float64(len(tab.addrs)), "symbols")
			})
			b.Run("debug-elf", func(b *testing.B) {
				b.ReportAllocs()
				var syms, dyn []elf.Symbol
				loopCPU(b, func() {
					syms, _ = f.Symbols()
					dyn, _ = f.DynamicSymbols()
				})
				n := 0
				for _, s := range append(syms, dyn...) {
					n += int(unsafe.Sizeof(s)) + len(s.Name)
				}
				b.ReportMetric(float64(n), "elf-symbols-B")
			})
		})
	}
}

// cpuTime returns the CPU time this process has used. Benchmarks report it
// per operation beside wall time, which means little on a machine shared
// with other jobs.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// loopCPU runs f in b.Loop and reports the CPU time per call.
func loopCPU(b *testing.B, f func()) {
	b.Helper()
	start := cpuTime()
	n := 0
	for b.Loop() {
		f()
		n++
	}
	b.ReportMetric(float64(cpuTime()-start)/float64(n), "cpu-ns/op")
}

// elfTableBytes returns the heap bytes t keeps, without the index Symbol
// builds on first use.
func elfTableBytes(t *ELFTable) int {
	return 8*cap(t.addrs) + 8*cap(t.sizes) + int(unsafe.Sizeof(elfName{}))*cap(t.names) + cap(t.binds) + len(t.blob)
}

// BenchmarkELFTableSymbolIndex measures the first Symbol call, which sorts
// every name.
func BenchmarkELFTableSymbolIndex(b *testing.B) {
	for _, path := range []string{"/usr/lib/x86_64-linux-gnu/libc.so.6", "/usr/bin/node"} {
		f, err := elf.Open(path)
		if err != nil {
			continue
		}
		tab, err := NewELFTable(f)
		f.Close()
		if err != nil {
			b.Fatal(err)
		}
		b.Run(filepath.Base(path), func(b *testing.B) {
			b.ReportAllocs()
			loopCPU(b, tab.sortByName)
		})
	}
}

// BenchmarkELFTableLookup looks up addresses spread over the table; on
// node most names are C++ and demangled on each call.
func BenchmarkELFTableLookup(b *testing.B) {
	for _, path := range []string{"/usr/lib/x86_64-linux-gnu/libc.so.6", "/usr/bin/node"} {
		f, err := elf.Open(path)
		if err != nil {
			continue
		}
		tab, err := NewELFTable(f)
		f.Close()
		if err != nil {
			b.Fatal(err)
		}
		b.Run(filepath.Base(path), func(b *testing.B) {
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				tab.Lookup(tab.addrs[i%tab.nfunc] + 1)
				i += 7919
			}
		})
	}
}
