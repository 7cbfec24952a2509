#include "textflag.h"

// func calibrationPush(x uint64) uint64
//
// Starts with PUSHQ BP, as C functions built with frame pointers do: an
// instruction the kernel emulates on a uprobe hit (Linux 6.12+) instead of
// single-stepping it, which makes the hit cheaper.
TEXT ·calibrationPush(SB), NOSPLIT|NOFRAME, $0-16
	PUSHQ BP
	POPQ BP
	MOVQ x+0(FP), AX
	MOVQ AX, ret+8(FP)
	RET

// func calibrationPushAddr() uintptr
//
// The address of calibrationPush's body: a func value of an assembly
// function points to its ABI wrapper instead.
TEXT ·calibrationPushAddr(SB), NOSPLIT, $0-8
	LEAQ ·calibrationPush(SB), AX
	MOVQ AX, ret+0(FP)
	RET
