package sampler

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Capability bits (linux/capability.h).
const (
	capSysPtrace = 19
	capSysAdmin  = 21
	capPerfmon   = 38
	capBPF       = 39
)

// CheckPrivileges reports ErrNoPermission, naming the missing capabilities,
// when this process cannot load and attach the sampler. CAP_SYS_ADMIN stands
// in for CAP_BPF and CAP_PERFMON on kernels older than 5.8.
func CheckPrivileges() error {
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return fmt.Errorf("read capabilities: %w", err)
	}
	eff, ok := capEff(string(status))
	if !ok {
		return fmt.Errorf("read capabilities: no CapEff in /proc/self/status")
	}
	has := func(c uint) bool { return eff&(1<<c) != 0 }
	var missing []string
	if !has(capBPF) && !has(capSysAdmin) {
		missing = append(missing, "CAP_BPF")
	}
	if !has(capPerfmon) && !has(capSysAdmin) {
		missing = append(missing, "CAP_PERFMON")
	}
	if len(missing) > 0 {
		if !has(capSysPtrace) {
			missing = append(missing, "CAP_SYS_PTRACE (to name other users' processes)")
		}
		return fmt.Errorf("%w; missing: %s", ErrNoPermission, strings.Join(missing, ", "))
	}
	return nil
}

func capEff(status string) (uint64, bool) {
	for line := range strings.Lines(status) {
		if v, ok := strings.CutPrefix(line, "CapEff:"); ok {
			n, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			return n, err == nil
		}
	}
	return 0, false
}
