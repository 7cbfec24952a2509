// Package symbol names addresses: it turns an instruction address inside a
// binary (executable, shared library, the kernel, the vDSO or JIT code) into
// frames with function, file and line, expanding inlined calls.
//
// Tables are parsed once per binary and shared by every process mapping it;
// all parsers treat their input as hostile: a malformed file yields an error
// or fewer names, never a panic or a hang.
package symbol

import "errors"

// Frame is one function activation. One address yields several frames when
// calls were inlined there: the inlined callee first, its caller after.
type Frame struct {
	Function string
	File     string // empty when unknown
	Line     int    // 0 when unknown
	// StartLine is the line of the function's declaration, 0 when unknown;
	// Go binaries record it since Go 1.20, and go build -pgo needs it.
	StartLine int
}

// Table names the addresses of one binary.
type Table interface {
	// Lookup returns the frames at virtual address addr (as the binary's
	// ELF program headers lay it out, before any load bias), innermost
	// first, or nil when addr is not covered.
	Lookup(addr uint64) []Frame
}

// ErrNotGo reports that a binary carries no Go symbol table (.gopclntab).
var ErrNotGo = errors.New("no Go symbol table")
