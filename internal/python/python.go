// Package python names the Python frames the sampler reads from CPython
// 3.9-3.13 processes (docs/PYTHON.md): it finds a process's interpreter and
// the offsets of its version, which the sampler follows to the sampled
// thread's frames, and names the code objects those frames ran, with the
// line each was at, by reading the process's memory.
package python

import (
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"github.com/flint-dev/flint/internal/proc"
)

// fileVersion matches the executable or library of a CPython interpreter
// (python3.11, libpython3.12.so.1.0, python3.11d, python3.13t), capturing
// its version and whether it is a free-threaded build.
var fileVersion = regexp.MustCompile(`^(?:lib)?python(\d+(?:\.\d+)?)[dmu]*(t?)[dmu]*(?:$|\.so)`)

// FileVersion returns the Python version a file's name says it runs
// ("3.11", "3.13t" for a free-threaded build), "" for other files.
func FileVersion(path string) string {
	base := filepath.Base(path)
	if !strings.Contains(base, "python") {
		return "" // most files: no regular expression run
	}
	if m := fileVersion.FindStringSubmatch(base); m != nil {
		return m[1] + m[2]
	}
	return ""
}

// ErrVersion is returned for a CPython version flint has no offsets for.
var ErrVersion = errors.New("CPython version not supported (3.9-3.13 are, without free threading)")

// Interpreter is a CPython interpreter in one process.
type Interpreter struct {
	Minor   int    // the interpreter is CPython 3.Minor
	Runtime uint64 // address of _PyRuntime in the process
	// CodeType is the address of PyCode_Type, the type of every code
	// object; 0 when unknown (nothing is checked then).
	CodeType uint64
	Offsets  Offsets
}

// SymbolFunc returns where a process has the symbol name of mapping m's
// file; false when that file has no such symbol.
type SymbolFunc func(m *proc.Mapping, name string) (uint64, bool)

// Find returns the CPython interpreter of p: the mapped file whose name
// says CPython that defines _PyRuntime (the executable, or libpython when
// built shared). It returns nil, nil for a process without one, and
// ErrVersion for one of another version.
func Find(p *proc.Process, symbol SymbolFunc) (*Interpreter, error) {
	seen := map[proc.FileKey]bool{}
	for i := range p.Mappings {
		m := &p.Mappings[i]
		v := FileVersion(m.Path)
		if v == "" || m.Inode == 0 || seen[m.Key()] {
			continue
		}
		seen[m.Key()] = true
		runtime, ok := symbol(m, "_PyRuntime")
		if !ok {
			continue
		}
		minor, ok := minorOf(v)
		o, known := versions[minor]
		if !ok || !known {
			return nil, fmt.Errorf("python%s in %s: %w", v, m.Path, ErrVersion)
		}
		codeType, _ := symbol(m, "PyCode_Type")
		return &Interpreter{Minor: minor, Runtime: runtime, CodeType: codeType, Offsets: o}, nil
	}
	return nil, nil
}

// minorOf returns the minor version of "3.minor".
func minorOf(v string) (int, bool) {
	if len(v) < 3 || v[:2] != "3." {
		return 0, false
	}
	n, err := strconv.Atoi(v[2:])
	return n, err == nil
}
