package trace

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/flint-dev/flint/internal/privilege"
)

// Sentinel errors for what the machine does not allow.
var (
	ErrNoPermission = errors.New("need CAP_BPF and CAP_PERFMON (or CAP_SYS_ADMIN) to attach uprobes (run as root)")
	ErrNoUprobes    = errors.New("kernel has no uprobe PMU and tracefs is not mounted: mount -t tracefs nodev /sys/kernel/tracing")
)

// CheckPrivileges reports ErrNoPermission, naming the missing capabilities,
// when this process cannot load BPF programs and attach uprobes. Opening
// another user's binary through /proc/PID/map_files takes CAP_SYS_ADMIN as
// well; root has everything.
func CheckPrivileges() error {
	have, err := privilege.Effective()
	if err != nil {
		return err
	}
	if missing := privilege.MissingToLoad(have); len(missing) > 0 {
		return fmt.Errorf("%w; missing: %s", ErrNoPermission, strings.Join(missing, ", "))
	}
	return nil
}

// checkUprobes reports ErrNoUprobes when neither way of creating uprobes
// exists: the perf uprobe PMU (Linux 4.17+, no tracefs needed) or tracefs.
func checkUprobes() error {
	for _, p := range []string{
		"/sys/bus/event_source/devices/uprobe",
		"/sys/kernel/tracing/uprobe_events",
		"/sys/kernel/debug/tracing/uprobe_events",
	} {
		if _, err := os.Stat(p); err == nil {
			return nil
		}
	}
	return ErrNoUprobes
}
