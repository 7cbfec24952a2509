package main

import (
	"errors"
	"fmt"
	"io"

	"github.com/cilium/ebpf/rlimit"

	"github.com/flint-dev/flint/internal/privilege"
)

// dropPrivileges keeps only the capabilities in keep, once a command's BPF
// programs are loaded (docs/SECURITY.md lists each command's). A build
// that links cgo cannot drop them: it says so through warn and goes on.
func dropPrivileges(keep privilege.Set, warn func(format string, args ...any)) (privilege.Set, error) {
	// Programs loaded later (the agent's syscall tracer, trace's probes on
	// new processes) charge RLIMIT_MEMLOCK before Linux 5.11; raising it
	// takes CAP_SYS_RESOURCE, which is about to go. A no-op on newer
	// kernels, which charge the memory cgroup instead.
	if err := rlimit.RemoveMemlock(); err != nil {
		return 0, fmt.Errorf("raise the locked memory limit: %w", err)
	}
	kept, err := privilege.Drop(keep)
	if errors.Is(err, privilege.ErrCgo) {
		warn("warning: %v", err)
		return 0, nil
	}
	return kept, err
}

// warnTo writes warnings to w as the commands print them, one line each.
func warnTo(w io.Writer) func(string, ...any) {
	return func(format string, args ...any) { fmt.Fprintf(w, "flint: "+format+"\n", args...) }
}
