package trace

// calibrationPush returns x. It is written in assembly so that its first
// instruction is PUSHQ BP; see push_amd64.s.
//
//go:noescape
func calibrationPush(x uint64) uint64

// calibrationPushAddr returns the address of calibrationPush's first
// instruction.
func calibrationPushAddr() uintptr
