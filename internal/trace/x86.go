package trace

import (
	"errors"
	"fmt"
	"slices"

	"golang.org/x/arch/x86/x86asm"
)

// scanCode decodes the x86-64 machine code of a Go function that starts at
// virtual address addr, from its first instruction to the next function
// (Go pads the gap with INT3), and returns the addresses of its RET
// instructions and of its calls to runtime.morestack (whose addresses are
// in morestack).
//
// A uprobe must sit on the first byte of an instruction: one inside an
// instruction corrupts the program. Go emits no data in its text, so a
// linear sweep from the entry meets every instruction boundary; any byte
// sequence that does not decode is an error, and the caller then gives up
// on return probes for the function rather than guess.
func scanCode(code []byte, addr uint64, morestack []uint64) (rets, growth []uint64, err error) {
	for off := 0; off < len(code); {
		inst, err := x86asm.Decode(code[off:], 64)
		if err == nil && (inst.Op == 0 || inst.Len == 0) {
			// x86asm reports an instruction cut short by the end of
			// the input as a bare prefix, without an error.
			err = errors.New("truncated instruction")
		}
		if err != nil {
			return nil, nil, fmt.Errorf("cannot decode its machine code at +%#x: %v", off, err)
		}
		pc := addr + uint64(off)
		switch inst.Op {
		case x86asm.RET:
			rets = append(rets, pc)
		case x86asm.CALL:
			if rel, ok := inst.Args[0].(x86asm.Rel); ok {
				target := pc + uint64(inst.Len) + uint64(int64(rel))
				if slices.Contains(morestack, target) {
					growth = append(growth, pc)
				}
			}
		}
		off += inst.Len
	}
	return rets, growth, nil
}

// emulated reports whether the kernel emulates the instruction at the
// start of code when a uprobe there is hit, rather than single-stepping it
// (arch/x86/kernel/uprobes.c): relative calls and jumps, conditional jumps,
// NOP, and pushes of a 64-bit register (Linux 6.12+; on older kernels the
// calibration measures both kinds of hit alike).
func emulated(code []byte) bool {
	inst, err := x86asm.Decode(code, 64)
	if err != nil || inst.Op == 0 {
		return false
	}
	switch inst.Op {
	case x86asm.CALL, x86asm.JMP:
		_, rel := inst.Args[0].(x86asm.Rel)
		return rel
	case x86asm.NOP:
		return inst.Len == 1
	case x86asm.PUSH:
		r, ok := inst.Args[0].(x86asm.Reg)
		return ok && r >= x86asm.RAX && r <= x86asm.R15
	case x86asm.JA, x86asm.JAE, x86asm.JB, x86asm.JBE, x86asm.JE, x86asm.JG, x86asm.JGE, x86asm.JL,
		x86asm.JLE, x86asm.JNE, x86asm.JNO, x86asm.JNP, x86asm.JNS, x86asm.JO, x86asm.JP, x86asm.JS:
		return true
	}
	return false
}

// emulatedAt decodes the instruction at virtual address addr of o.
func emulatedAt(o *object, addr uint64) bool {
	off, err := fileOffset(o.elf, addr)
	if err != nil {
		return false
	}
	b := make([]byte, 16)
	n, _ := o.file.ReadAt(b, int64(off))
	return emulated(b[:n])
}
