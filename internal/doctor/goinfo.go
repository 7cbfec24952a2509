package doctor

import (
	"bufio"
	"bytes"
	"debug/buildinfo"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/arch/x86/x86asm"
	"golang.org/x/sys/unix"

	"github.com/flint-dev/flint/internal/proc"
	"github.com/flint-dev/flint/internal/symbol"
)

// GoInfo is what flint learned about a Go program: how it was built and
// what its runtime runs with.
type GoInfo struct {
	// Version is the toolchain that built it, e.g. "go1.26.8".
	Version string
	// ModulePath is the main module's path; "" when unknown.
	ModulePath string
	// DefaultGODEBUG is the build setting holding the GODEBUG defaults
	// that differ from the toolchain's: the go.mod `go` line and
	// //go:debug directives put them there (go 1.24 or older gives
	// "containermaxprocs=0,updatemaxprocs=0,…").
	DefaultGODEBUG string
	// Automaxprocs is set when go.uber.org/automaxprocs is linked in.
	Automaxprocs bool

	// GOMAXPROCS is read from runtime.gomaxprocs in the process's memory;
	// 0 when unknown (see the process's notes).
	GOMAXPROCS int
	// GOMAXPROCSFrom says how its address was found.
	GOMAXPROCSFrom string
	// Env holds GOMAXPROCS and GODEBUG from the process's environment,
	// when set; nil when the environment could not be read.
	Env map[string]string
}

// readGoInfo reads pid's Go build information and runtime state. It
// returns nil for a program that is not Go; notes say what could not be
// read.
func readGoInfo(pid int) (*GoInfo, []string) {
	exe := fmt.Sprintf("%s/%d/exe", proc.Root, pid)
	f, err := os.Open(exe)
	if err != nil {
		if errors.Is(err, fs.ErrPermission) {
			return nil, []string{fmt.Sprintf("cannot open the executable of pid %d: permission denied (needs CAP_SYS_PTRACE): Go checks skipped", pid)}
		}
		return nil, nil // a kernel thread, or gone
	}
	defer f.Close()
	gf := readGoFile(f)
	bi := gf.bi
	if bi == nil {
		return nil, nil // not Go (or Go before 1.13, which had no build info)
	}
	g := &GoInfo{Version: bi.GoVersion, ModulePath: bi.Main.Path}
	if g.ModulePath == "" {
		g.ModulePath = bi.Path
	}
	for _, s := range bi.Settings {
		if s.Key == "DefaultGODEBUG" {
			g.DefaultGODEBUG = s.Value
		}
	}
	for _, d := range bi.Deps {
		if d.Path == "go.uber.org/automaxprocs" {
			g.Automaxprocs = true
		}
	}
	var notes []string
	env, err := readEnv(pid, "GOMAXPROCS", "GODEBUG")
	if err != nil {
		notes = append(notes, fmt.Sprintf("cannot read the environment of pid %d: %v", pid, permissionHint(err)))
	} else {
		g.Env = env
	}
	n, from, err := readGOMAXPROCS(pid, f, gf)
	if err != nil {
		notes = append(notes, fmt.Sprintf("GOMAXPROCS of pid %d unknown: %v", pid, permissionHint(err)))
	} else {
		g.GOMAXPROCS, g.GOMAXPROCSFrom = n, from
	}
	return g, notes
}

// permissionHint says what a permission error needs.
func permissionHint(err error) error {
	if errors.Is(err, fs.ErrPermission) || errors.Is(err, syscall.EPERM) {
		return fmt.Errorf("%w (reading another process's memory needs CAP_SYS_PTRACE)", err)
	}
	return err
}

// goFile is what flint reads once per executable: its build information
// and, for Go, where runtime.gomaxprocs is. Finding the latter reads the
// whole symbol table, too costly to repeat for every examination the agent
// makes of a long-running process; and the agent examines every short-lived
// process of a binary that is not Go, whose build information search reads
// the file's data too.
type goFile struct {
	bi    *buildinfo.BuildInfo // nil: not Go
	addr  uint64               // of runtime.gomaxprocs, before any load bias
	from  string               // how addr was found
	err   error                // why addr is unknown
	pie   bool
	progs []elf.ProgHeader
}

// goFileKey identifies an executable's contents.
type goFileKey struct {
	dev, ino    uint64
	size, mtime int64
}

// maxGoFiles bounds the cache of goFiles; past it the cache starts over.
const maxGoFiles = 256

var goFiles = struct {
	sync.Mutex
	m map[goFileKey]*goFile
}{m: map[goFileKey]*goFile{}}

// readGoFile returns what the executable f says, from the cache when f's
// contents were read before.
func readGoFile(f *os.File) *goFile {
	var key goFileKey
	var st *syscall.Stat_t
	fi, err := f.Stat()
	if err == nil {
		st, _ = fi.Sys().(*syscall.Stat_t)
	}
	if st != nil {
		key = goFileKey{st.Dev, st.Ino, st.Size, st.Mtim.Nano()}
		goFiles.Lock()
		gf := goFiles.m[key]
		goFiles.Unlock()
		if gf != nil {
			return gf
		}
	}
	gf := &goFile{}
	gf.bi, _ = buildinfo.Read(f) // nil: not Go, remembered too
	if gf.bi != nil {
		gf.readRuntime(f)
	}
	if key != (goFileKey{}) {
		goFiles.Lock()
		if len(goFiles.m) >= maxGoFiles {
			clear(goFiles.m)
		}
		goFiles.m[key] = gf
		goFiles.Unlock()
	}
	return gf
}

// readRuntime finds where a Go executable keeps runtime.gomaxprocs.
func (gf *goFile) readRuntime(f *os.File) {
	ef, err := elf.NewFile(f)
	if err != nil {
		gf.err = fmt.Errorf("read ELF: %w", err)
		return
	}
	gf.addr, gf.from, gf.err = gomaxprocsAddr(ef)
	gf.pie = ef.Type == elf.ET_DYN
	for _, p := range ef.Progs {
		gf.progs = append(gf.progs, p.ProgHeader)
	}
}

// readGOMAXPROCS reads runtime.gomaxprocs from pid's memory. Its address
// comes from the symbol table, or, in a stripped binary, from the
// instruction in runtime.GOMAXPROCS that loads it (amd64 only). PIE
// binaries add their load bias from /proc/PID/maps.
func readGOMAXPROCS(pid int, exe *os.File, gf *goFile) (int, string, error) {
	if gf.err != nil {
		return 0, "", gf.err
	}
	addr, from := gf.addr, gf.from
	if gf.pie {
		fi, err := exe.Stat()
		if err != nil {
			return 0, "", err
		}
		bias, err := loadBias(pid, gf.progs, fi)
		if err != nil {
			return 0, "", err
		}
		addr += bias
	}
	mem, err := os.Open(fmt.Sprintf("%s/%d/mem", proc.Root, pid))
	if err != nil {
		return 0, "", fmt.Errorf("open memory: %w", err)
	}
	defer mem.Close()
	var buf [4]byte
	if _, err := mem.ReadAt(buf[:], int64(addr)); err != nil {
		return 0, "", fmt.Errorf("read memory at %#x: %w", addr, err)
	}
	n := int32(binary.LittleEndian.Uint32(buf[:]))
	// Any real value is small: this only rejects a wrong address.
	if n < 1 || n > 1<<20 {
		return 0, "", fmt.Errorf("read implausible value %d at %#x", n, addr)
	}
	return int(n), from, nil
}

// gomaxprocsAddr finds the virtual address of runtime.gomaxprocs.
func gomaxprocsAddr(ef *elf.File) (uint64, string, error) {
	if t, err := symbol.NewELFTable(ef); err == nil {
		if addr, _, ok := t.Symbol("runtime.gomaxprocs"); ok {
			return addr, "symbol runtime.gomaxprocs", nil
		}
	}
	if ef.Machine != elf.EM_X86_64 {
		return 0, "", fmt.Errorf("stripped %s binary: runtime.gomaxprocs can only be located by decoding amd64 code", ef.Machine)
	}
	gt, err := symbol.OpenGo(ef)
	if err != nil {
		return 0, "", fmt.Errorf("no symbols and no Go symbol table: %w", err)
	}
	for _, fn := range gt.Functions() {
		if fn.Name != "runtime.GOMAXPROCS" {
			continue
		}
		code, err := readVirtual(ef, fn.Entry, min(fn.End-fn.Entry, 1024))
		if err != nil {
			return 0, "", fmt.Errorf("read runtime.GOMAXPROCS: %w", err)
		}
		addr, ok := firstGlobalLoad32(code, fn.Entry)
		if !ok || !writable(ef, addr) {
			return 0, "", errors.New("stripped binary: runtime.GOMAXPROCS does not load a 32-bit global as expected")
		}
		return addr, "decoded from runtime.GOMAXPROCS", nil
	}
	return 0, "", errors.New("stripped binary without runtime.GOMAXPROCS")
}

// firstGlobalLoad32 returns the address of the first 32-bit global that
// the amd64 code at pc loads into a register with a RIP-relative MOV or
// MOVSXD. In runtime.GOMAXPROCS that is `ret := int(gomaxprocs)`, right
// after lock(&sched.lock) (which takes an address with LEA: not a load):
// the int32 is sign-extended (MOVSXD) by Go 1.26, or loaded with MOVL.
func firstGlobalLoad32(code []byte, pc uint64) (uint64, bool) {
	for off := 0; off < len(code); {
		inst, err := x86asm.Decode(code[off:], 64)
		if err != nil {
			return 0, false
		}
		next := pc + uint64(off+inst.Len)
		if (inst.Op == x86asm.MOV || inst.Op == x86asm.MOVSXD) && inst.MemBytes == 4 {
			if m, ok := inst.Args[1].(x86asm.Mem); ok && m.Base == x86asm.RIP && m.Index == 0 {
				if _, isReg := inst.Args[0].(x86asm.Reg); isReg {
					return uint64(int64(next) + m.Disp), true
				}
			}
		}
		if inst.Op == x86asm.RET {
			return 0, false
		}
		off += inst.Len
	}
	return 0, false
}

// readVirtual reads n bytes at virtual address addr of a loaded segment.
func readVirtual(ef *elf.File, addr, n uint64) ([]byte, error) {
	for _, p := range ef.Progs {
		if p.Type != elf.PT_LOAD || addr < p.Vaddr || addr-p.Vaddr >= p.Filesz {
			continue
		}
		n = min(n, p.Filesz-(addr-p.Vaddr))
		buf := make([]byte, n)
		if _, err := p.ReadAt(buf, int64(addr-p.Vaddr)); err != nil {
			return nil, err
		}
		return buf, nil
	}
	return nil, fmt.Errorf("address %#x is in no loaded segment", addr)
}

// writable reports whether addr is in a writable loaded segment (data or
// bss), where runtime.gomaxprocs lives.
func writable(ef *elf.File, addr uint64) bool {
	for _, p := range ef.Progs {
		if p.Type == elf.PT_LOAD && p.Flags&elf.PF_W != 0 && addr >= p.Vaddr && addr-p.Vaddr < p.Memsz {
			return true
		}
	}
	return false
}

// loadBias is how far pid's executable is loaded from the virtual addresses
// its program headers give: the start of one of its mappings minus the
// address of the segment mapped there.
func loadBias(pid int, progs []elf.ProgHeader, fi os.FileInfo) (uint64, error) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, errors.New("no inode for the executable")
	}
	maps, err := os.ReadFile(fmt.Sprintf("%s/%d/maps", proc.Root, pid))
	if err != nil {
		return 0, fmt.Errorf("read mappings: %w", noProcess(pid, err))
	}
	page := uint64(os.Getpagesize())
	sc := bufio.NewScanner(bytes.NewReader(maps))
	for sc.Scan() {
		m, ok := parseMapping(sc.Text())
		if !ok || m.inode != st.Ino || m.major != unix.Major(st.Dev) || m.minor != unix.Minor(st.Dev) {
			continue
		}
		for _, p := range progs {
			if p.Type == elf.PT_LOAD && p.Off&^(page-1) == m.offset {
				return m.start - p.Vaddr&^(page-1), nil
			}
		}
	}
	return 0, errors.New("executable not found in the process's mappings")
}

type mapping struct {
	start, offset, inode uint64
	major, minor         uint32
}

// parseMapping reads "start-end perms offset dev inode path" of
// /proc/PID/maps.
func parseMapping(line string) (mapping, bool) {
	f := strings.Fields(line)
	if len(f) < 5 {
		return mapping{}, false
	}
	lo, _, ok := strings.Cut(f[0], "-")
	start, err1 := strconv.ParseUint(lo, 16, 64)
	off, err2 := strconv.ParseUint(f[2], 16, 64)
	inode, err3 := strconv.ParseUint(f[4], 10, 64)
	major, minor, ok2 := strings.Cut(f[3], ":")
	ma, err4 := strconv.ParseUint(major, 16, 32)
	mi, err5 := strconv.ParseUint(minor, 16, 32)
	if !ok || !ok2 || err1 != nil || err2 != nil || err3 != nil || err4 != nil || err5 != nil || inode == 0 {
		return mapping{}, false
	}
	return mapping{start: start, offset: off, inode: inode, major: uint32(ma), minor: uint32(mi)}, true
}
