package proc

import "syscall"

// A process that exits while being read makes /proc reads fail with ESRCH.
const syscallESRCH = syscall.ESRCH
