package trace

import (
	"cmp"
	"debug/buildinfo"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/flint-dev/flint/internal/proc"
	"github.com/flint-dev/flint/internal/symbol"
)

// Lang says how a function's calls are probed.
type Lang string

const (
	// Go functions: uprobes on the entry and on every RET, matched by
	// goroutine (the g pointer in R14).
	Go Lang = "go"
	// C (any non-Go code): a uprobe on the entry and a uretprobe, matched
	// by thread.
	C Lang = "c"
)

// MaxFunctions bounds how many functions one trace attaches to: each is at
// least one uprobe (a perf event and a link), and a glob such as 'main.*'
// can match thousands.
const MaxFunctions = 1000

// Function is one traced function and where its probes go.
type Function struct {
	// Name is the function's name as its symbol table spells it.
	Name string
	// Object is the file holding it, as the traced process names it
	// (the executable, or a shared library such as libc.so.6).
	Object string
	// Library is set for functions outside the executable.
	Library bool
	Lang    Lang
	// Entries are the file offsets of the entry points: one, unless the
	// object has several symbols of this name at different addresses.
	Entries []uint64
	// Returns are the file offsets of a Go function's RET instructions.
	Returns []uint64
	// StackGrowth are the file offsets of a Go function's calls to
	// runtime.morestack, where a growing stack makes it start over.
	StackGrowth []uint64
	// NoLatency says why the function's returns cannot be probed ("" when
	// they can): then only its calls are counted.
	NoLatency string
	// EntryEmulated is set when the first instruction is one the kernel
	// emulates on a hit instead of single-stepping it (see Cost).
	EntryEmulated bool

	// path opens the object for attaching: a /proc path for -p, so that
	// other mount namespaces and deleted files work.
	path string
}

// Display is the function's name with its library, if any: "malloc (libc.so.6)".
func (f *Function) Display() string {
	if f.Library {
		return f.Name + " (" + filepath.Base(f.Object) + ")"
	}
	return f.Name
}

// Target is what to trace: one process, or every process running a binary.
type Target struct {
	// PID is a process ID; 0 when Exe is set.
	PID int
	// Exe is the path of an executable: every process running it is
	// traced, those started during the trace too.
	Exe string
}

// Sentinel errors callers branch on.
var (
	ErrNotELF      = errors.New("not an ELF executable")
	ErrNoFunction  = errors.New("no such function")
	ErrUnsupported = errors.New("unsupported binary")
)

// object is one mapped file of the target with its function names.
type object struct {
	path    string // to open and attach
	display string // as the process names it
	library bool
	elf     *elf.File
	file    *os.File

	goFuncs  map[string]symbol.Func // by name; the first of duplicates (an asm body and its ABI wrapper)
	goNames  []string
	goAll    []symbol.Func
	cSyms    map[string][]cSym
	cNames   []string
	goOldABI bool // Go before 1.17: no g in R14
	stack    []uint64
}

type cSym struct {
	addr  uint64
	ifunc bool
}

func (o *object) close() {
	if o.file != nil {
		o.file.Close()
	}
}

// Resolve finds the functions the patterns name in the target: Go functions
// from the executable's pclntab (stripped binaries included), C functions
// from the symbol tables of the executable and of the shared libraries it
// uses. A pattern is an exact name, or a glob where `*` matches any run of
// characters and `?` one character (nothing else is special, so Go names
// such as 'main.(*Server).handle' and 'main.Map[go.shape.int]' are exact
// names too). A Go generic function also answers to its name without the
// instantiation ('main.Map'). A pattern that matches nothing is an error
// listing close matches.
func Resolve(t Target, patterns []string) ([]Function, error) {
	objs, err := openObjects(t)
	if err != nil {
		return nil, err
	}
	defer func() {
		for _, o := range objs {
			o.close()
		}
	}()
	var fns []Function
	seen := map[[2]string]bool{}
	for _, pat := range patterns {
		found, err := match(objs, pat)
		if err != nil {
			return nil, err
		}
		for _, f := range found {
			k := [2]string{f.Object, f.Name}
			if !seen[k] {
				seen[k] = true
				fns = append(fns, f)
			}
		}
		if len(fns) > MaxFunctions {
			return nil, fmt.Errorf("%q matches more than %d functions: narrow the pattern", pat, MaxFunctions)
		}
	}
	return fns, nil
}

// openObjects opens the target's executable and libraries, executable first.
func openObjects(t Target) ([]*object, error) {
	var objs []*object
	var err error
	if t.PID != 0 {
		objs, err = processObjects(t.PID)
	} else {
		objs, err = exeObjects(t.Exe)
	}
	if err != nil {
		for _, o := range objs {
			o.close()
		}
		return nil, err
	}
	return objs, nil
}

// processObjects opens the executable and every file-backed executable
// mapping of pid through /proc, which works across mount namespaces and for
// deleted files.
func processObjects(pid int) ([]*object, error) {
	p, err := proc.Read(pid)
	if err != nil {
		return nil, err
	}
	exe, exeErr := os.Stat(fmt.Sprintf("%s/%d/exe", proc.Root, pid))
	var objs []*object
	seen := map[proc.FileKey]bool{}
	for i := range p.Mappings {
		m := &p.Mappings[i]
		if m.Inode == 0 || !strings.HasPrefix(m.Path, "/") || seen[m.Key()] {
			continue
		}
		seen[m.Key()] = true
		isExe := m.Path == p.Exe
		if exeErr == nil {
			isExe = sameInode(exe, m.Inode)
		}
		f, err := proc.Open(pid, m)
		if err != nil {
			if isExe {
				return objs, fmt.Errorf("open executable of pid %d: %w", pid, err)
			}
			continue // a library we cannot read cannot be traced
		}
		o, err := newObject(f, f.Name(), m.Path, !isExe)
		if err != nil {
			f.Close()
			if isExe {
				return objs, err
			}
			continue
		}
		if isExe {
			objs = slices.Insert(objs, 0, o)
		} else {
			objs = append(objs, o)
		}
	}
	if len(objs) == 0 || objs[0].library {
		return objs, fmt.Errorf("pid %d (%s): no executable mapping found (a kernel thread?)", pid, p.Comm)
	}
	return objs, nil
}

func sameInode(fi os.FileInfo, ino uint64) bool { return inodeOf(fi) == ino }

func inodeOf(fi os.FileInfo) uint64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st.Ino
	}
	return 0
}

// exeObjects opens the executable at path and the libraries it needs
// (DT_NEEDED, recursively), found the way the dynamic linker finds them.
func exeObjects(path string) ([]*object, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	if real, err := filepath.EvalSymlinks(abs); err == nil {
		abs = real
	}
	f, err := os.Open(abs)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, errors.Unwrap(err))
	}
	if fi, err := f.Stat(); err == nil && fi.IsDir() {
		f.Close()
		return nil, fmt.Errorf("%s: a directory, %w", path, ErrNotELF)
	}
	exe, err := newObject(f, abs, abs, false)
	if err != nil {
		f.Close()
		return nil, err
	}
	objs := []*object{exe}
	seen := map[string]bool{abs: true}
	queue := []*object{exe}
	for len(queue) > 0 && len(objs) < 256 {
		o := queue[0]
		queue = queue[1:]
		needed, _ := o.elf.ImportedLibraries()
		for _, lib := range needed {
			lp := findLibrary(lib, o)
			if lp == "" || seen[lp] {
				continue
			}
			seen[lp] = true
			lf, err := os.Open(lp)
			if err != nil {
				continue
			}
			lo, err := newObject(lf, lp, lp, true)
			if err != nil {
				lf.Close()
				continue
			}
			objs = append(objs, lo)
			queue = append(queue, lo)
		}
	}
	return objs, nil
}

// libraryDirs are searched after an object's RUNPATH/RPATH, as ld.so does
// for a default Debian or Fedora install (ld.so.cache is not read).
var libraryDirs = []string{
	"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib64",
	"/lib", "/usr/lib", "/usr/local/lib",
}

func findLibrary(name string, from *object) string {
	if strings.Contains(name, "/") {
		return evalPath(name)
	}
	var dirs []string
	for _, tag := range []elf.DynTag{elf.DT_RUNPATH, elf.DT_RPATH} {
		vals, _ := from.elf.DynString(tag)
		for _, v := range vals {
			for _, d := range strings.Split(v, ":") {
				dirs = append(dirs, strings.ReplaceAll(d, "$ORIGIN", filepath.Dir(from.path)))
			}
		}
	}
	for _, d := range append(dirs, libraryDirs...) {
		if p := evalPath(filepath.Join(d, name)); p != "" {
			return p
		}
	}
	return ""
}

func evalPath(p string) string {
	real, err := filepath.EvalSymlinks(p)
	if err != nil {
		return ""
	}
	if fi, err := os.Stat(real); err != nil || !fi.Mode().IsRegular() {
		return ""
	}
	return real
}

// newObject reads the function names of one ELF file.
func newObject(f *os.File, path, display string, library bool) (*object, error) {
	ef, err := elf.NewFile(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", display, ErrNotELF)
	}
	if ef.Machine != elf.EM_X86_64 {
		return nil, fmt.Errorf("%s: %s binary: %w (flint trace knows x86-64 only)", display, ef.Machine, ErrUnsupported)
	}
	if ef.Type != elf.ET_EXEC && ef.Type != elf.ET_DYN {
		return nil, fmt.Errorf("%s: ELF type %s: %w", display, ef.Type, ErrNotELF)
	}
	o := &object{path: path, display: display, library: library, elf: ef, file: f,
		goFuncs: map[string]symbol.Func{}, cSyms: map[string][]cSym{}}
	goEntries := map[uint64]bool{}
	if gt, err := symbol.OpenGo(ef); err == nil {
		o.goAll = gt.Functions()
		for _, fn := range o.goAll {
			goEntries[fn.Entry] = true
			if _, dup := o.goFuncs[fn.Name]; !dup {
				o.goFuncs[fn.Name] = fn
				o.goNames = append(o.goNames, fn.Name)
			}
		}
		for _, name := range []string{"runtime.morestack", "runtime.morestack_noctxt"} {
			for _, n := range []string{name, name + ".abi0"} {
				if fn, ok := o.goFuncs[n]; ok {
					o.stack = append(o.stack, fn.Entry)
				}
			}
		}
		o.goOldABI = goBefore117(f)
	}
	for _, read := range []func() ([]elf.Symbol, error){ef.Symbols, ef.DynamicSymbols} {
		syms, _ := read() // a missing table is no error; a bad one leaves the other
		for _, s := range syms {
			typ := elf.ST_TYPE(s.Info)
			if typ != elf.STT_FUNC && typ != elf.STT_GNU_IFUNC || s.Section == elf.SHN_UNDEF || s.Value == 0 {
				continue
			}
			if _, isGo := o.goFuncs[s.Name]; isGo || goEntries[s.Value] {
				continue // the pclntab's function, maybe under its ABI0 name
			}
			prev := o.cSyms[s.Name]
			if slices.ContainsFunc(prev, func(c cSym) bool { return c.addr == s.Value }) {
				continue
			}
			if prev == nil {
				o.cNames = append(o.cNames, s.Name)
			}
			o.cSyms[s.Name] = append(prev, cSym{addr: s.Value, ifunc: typ == elf.STT_GNU_IFUNC})
		}
	}
	return o, nil
}

// goBefore117 reports a Go binary built before Go 1.17, whose functions do
// not keep g in R14 (the register ABI came with 1.17 on amd64).
func goBefore117(r io.ReaderAt) bool {
	bi, err := buildinfo.Read(r)
	if err != nil {
		return false // no build info: assume a current toolchain
	}
	v, ok := strings.CutPrefix(bi.GoVersion, "go1.")
	if !ok {
		return false
	}
	minor, err := strconv.Atoi(strings.FieldsFunc(v, func(r rune) bool { return r < '0' || r > '9' })[0])
	return err == nil && minor < 17
}

// match resolves one pattern in every object.
func match(objs []*object, pat string) ([]Function, error) {
	type hit struct {
		o    *object
		name string
		goFn bool
	}
	var hits []hit
	collect := func(ok func(string) bool) {
		for _, o := range objs {
			for _, n := range o.goNames {
				if ok(n) {
					hits = append(hits, hit{o, n, true})
				}
			}
			for _, n := range o.cNames {
				if ok(n) {
					hits = append(hits, hit{o, n, false})
				}
			}
		}
	}
	collect(func(n string) bool { return n == pat })
	if len(hits) == 0 && strings.ContainsAny(pat, "*?") {
		collect(func(n string) bool { return glob(pat, n) })
	}
	if len(hits) == 0 && !strings.Contains(pat, "[") {
		collect(func(n string) bool { return strings.Contains(n, "[") && stripInstance(n) == pat })
	}
	if len(hits) == 0 {
		return nil, notFound(objs, pat)
	}
	var fns []Function
	var ifuncs []string
	for _, h := range hits {
		var f Function
		var err error
		if h.goFn {
			f, err = goFunction(h.o, h.o.goFuncs[h.name])
		} else {
			f, err = cFunction(h.o, h.name)
		}
		if errors.Is(err, errIFUNC) {
			ifuncs = append(ifuncs, h.name)
			continue
		}
		if err != nil {
			return nil, err
		}
		fns = append(fns, f)
	}
	if len(fns) == 0 {
		return nil, fmt.Errorf("%s is an indirect function (IFUNC), whose symbol is the resolver run once at load time: trace the implementation it picks instead (nm -D lists the candidates)", ifuncs[0])
	}
	return fns, nil
}

var errIFUNC = errors.New("IFUNC")

func goFunction(o *object, fn symbol.Func) (Function, error) {
	f := Function{Name: fn.Name, Object: o.display, Library: o.library, Lang: Go, path: o.path}
	entry, err := fileOffset(o.elf, fn.Entry)
	if err != nil {
		return f, fmt.Errorf("%s in %s: %w", fn.Name, o.display, err)
	}
	f.Entries = []uint64{entry}
	f.EntryEmulated = emulatedAt(o, fn.Entry)
	if o.goOldABI {
		f.NoLatency = "built with Go before 1.17, which keeps no g in R14 to match returns by goroutine"
		return f, nil
	}
	code, err := readCode(o.elf, o.file, fn.Entry, fn.End)
	if err != nil {
		f.NoLatency = "cannot read its code: " + err.Error()
		return f, nil
	}
	rets, calls, err := scanCode(code, fn.Entry, o.stack)
	if err != nil {
		// A wrong guess would put a breakpoint inside an instruction and
		// corrupt the program: no return probes then.
		f.NoLatency = err.Error()
		return f, nil
	}
	if len(rets) == 0 {
		f.NoLatency = "no RET instruction (it ends in a tail call or never returns)"
	}
	for _, a := range rets {
		off, err := fileOffset(o.elf, a)
		if err != nil {
			return f, fmt.Errorf("%s in %s: %w", fn.Name, o.display, err)
		}
		f.Returns = append(f.Returns, off)
	}
	for _, a := range calls {
		off, err := fileOffset(o.elf, a)
		if err != nil {
			return f, fmt.Errorf("%s in %s: %w", fn.Name, o.display, err)
		}
		f.StackGrowth = append(f.StackGrowth, off)
	}
	return f, nil
}

func cFunction(o *object, name string) (Function, error) {
	f := Function{Name: name, Object: o.display, Library: o.library, Lang: C, path: o.path}
	for _, s := range o.cSyms[name] {
		if s.ifunc {
			continue
		}
		if len(f.Entries) == 0 {
			f.EntryEmulated = emulatedAt(o, s.addr)
		}
		off, err := fileOffset(o.elf, s.addr)
		if err != nil {
			return f, fmt.Errorf("%s in %s: %w", name, o.display, err)
		}
		f.Entries = append(f.Entries, off)
	}
	if len(f.Entries) == 0 {
		return f, errIFUNC
	}
	return f, nil
}

// fileOffset converts a virtual address of the ELF file into the file offset
// uprobes want, through the executable PT_LOAD segment holding it.
func fileOffset(f *elf.File, vaddr uint64) (uint64, error) {
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD && p.Flags&elf.PF_X != 0 && vaddr >= p.Vaddr && vaddr-p.Vaddr < p.Filesz {
			return p.Off + (vaddr - p.Vaddr), nil
		}
	}
	return 0, fmt.Errorf("address %#x is in no executable segment", vaddr)
}

// maxCode bounds the bytes decoded for one function; Go's largest
// generated functions are a few hundred KiB.
const maxCode = 4 << 20

func readCode(f *elf.File, r io.ReaderAt, start, end uint64) ([]byte, error) {
	if end <= start || end-start > maxCode {
		return nil, fmt.Errorf("implausible function bounds %#x-%#x", start, end)
	}
	off, err := fileOffset(f, start)
	if err != nil {
		return nil, err
	}
	if _, err := fileOffset(f, end-1); err != nil {
		return nil, err
	}
	b := make([]byte, end-start)
	if _, err := r.ReadAt(b, int64(off)); err != nil {
		return nil, fmt.Errorf("read code at %#x: %w", start, err)
	}
	return b, nil
}

// glob matches name against pat, where `*` matches any run of characters
// (slashes and dots included) and `?` any one character.
func glob(pat, name string) bool {
	// Iterative matching with one backtrack point: linear in practice.
	p, n := 0, 0
	star, mark := -1, 0
	for n < len(name) {
		switch {
		case p < len(pat) && (pat[p] == '?' || pat[p] == name[n]):
			p++
			n++
		case p < len(pat) && pat[p] == '*':
			star, mark = p, n
			p++
		case star >= 0:
			p = star + 1
			mark++
			n = mark
		default:
			return false
		}
	}
	for p < len(pat) && pat[p] == '*' {
		p++
	}
	return p == len(pat)
}

// stripInstance removes the instantiations from a generic Go name:
// "main.Map[go.shape.int]" -> "main.Map", "main.(*T[go.shape.int]).M" -> "main.(*T).M".
func stripInstance(name string) string {
	var b strings.Builder
	depth := 0
	for _, r := range name {
		switch {
		case r == '[':
			depth++
		case r == ']' && depth > 0:
			depth--
		case depth == 0:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// notFound builds the error for a pattern with no match, naming up to five
// close matches.
func notFound(objs []*object, pat string) error {
	var names []string
	for _, o := range objs {
		names = append(names, o.goNames...)
		names = append(names, o.cNames...)
	}
	where := objs[0].display
	if len(objs) > 1 {
		where += " or its libraries"
	}
	s := suggest(pat, names, 5)
	if len(s) == 0 {
		return fmt.Errorf("%w %q in %s", ErrNoFunction, pat, where)
	}
	return fmt.Errorf("%w %q in %s; close matches: %s", ErrNoFunction, pat, where, strings.Join(s, ", "))
}

// suggest ranks names by how close they are to pat: same name but for case,
// same last component (after the last '.'), containing that component, then
// by edit distance; at most max of them.
func suggest(pat string, names []string, max int) []string {
	lp := strings.ToLower(pat)
	last := lp[strings.LastIndexAny(lp, "./")+1:]
	last = strings.Trim(last, "*?")
	type cand struct {
		name  string
		score int
	}
	var cands []cand
	seen := map[string]bool{}
	for _, n := range names {
		if seen[n] {
			continue
		}
		seen[n] = true
		ln := strings.ToLower(n)
		nlast := ln[strings.LastIndexAny(ln, "./")+1:]
		score := -1
		switch {
		case ln == lp:
			score = 0
		case last != "" && nlast == last:
			score = 1
		case len(last) >= 3 && strings.Contains(ln, last):
			score = 2
		default:
			if d := abs(len(ln) - len(lp)); d <= 3 {
				if e := editDistance(lp, ln, 3); e <= 3 {
					score = 2 + e
				}
			}
		}
		if score >= 0 {
			cands = append(cands, cand{n, score})
		}
	}
	slices.SortFunc(cands, func(a, b cand) int {
		return cmp.Or(cmp.Compare(a.score, b.score), cmp.Compare(len(a.name), len(b.name)), strings.Compare(a.name, b.name))
	})
	var out []string
	for i := 0; i < len(cands) && i < max; i++ {
		out = append(out, cands[i].name)
	}
	return out
}

// editDistance is the Levenshtein distance of a and b, or limit+1 once it
// exceeds limit.
func editDistance(a, b string, limit int) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		best := cur[0]
		for j := 1; j <= len(b); j++ {
			c := prev[j-1]
			if a[i-1] != b[j-1] {
				c = 1 + min(prev[j-1], prev[j], cur[j-1])
			}
			cur[j] = c
			best = min(best, c)
		}
		if best > limit {
			return limit + 1
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}
