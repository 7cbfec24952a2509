package sampler

import (
	"fmt"
	"strings"

	"github.com/flint-dev/flint/internal/privilege"
)

// CheckPrivileges reports ErrNoPermission, naming the missing capabilities,
// when this process cannot load and attach the sampler. CAP_SYS_ADMIN stands
// in for CAP_BPF and CAP_PERFMON on kernels older than 5.8.
func CheckPrivileges() error {
	have, err := privilege.Effective()
	if err != nil {
		return err
	}
	missing := privilege.MissingToLoad(have)
	if len(missing) == 0 {
		return nil
	}
	if !have.Has(privilege.SysPtrace) {
		missing = append(missing, "CAP_SYS_PTRACE (to name other users' processes)")
	}
	return fmt.Errorf("%w; missing: %s", ErrNoPermission, strings.Join(missing, ", "))
}
