package collect

import (
	"os"
	"os/exec"
	"testing"

	"github.com/flint-dev/flint/internal/proc"
	"github.com/flint-dev/flint/internal/symbol"
)

// exeKey returns the file key of a process's executable mapping.
func exeKey(t *testing.T, pid int) proc.FileKey {
	t.Helper()
	p, err := proc.Read(pid)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range p.Mappings {
		if m.Path == p.Exe {
			return m.Key()
		}
	}
	t.Fatalf("pid %d: no mapping of %s", pid, p.Exe)
	return proc.FileKey{}
}

func TestCollectorMapsFilesOfKnownProcesses(t *testing.T) {
	sym := symbol.New()
	defer sym.Close()
	c := New(sym, "")
	child := exec.Command("sleep", "60")
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	defer child.Process.Kill()
	sleep := exeKey(t, child.Process.Pid)
	c.NewProc(uint32(child.Process.Pid), 1)
	c.NewProc(uint32(os.Getpid()), 1)
	if !c.Maps(sleep) || !c.Maps(exeKey(t, os.Getpid())) {
		t.Fatal("the executables of known processes are not reported mapped")
	}

	child.Process.Kill()
	child.Wait()
	for round := uint64(1); round <= forgetRounds; round++ {
		c.Forget(round)
	}
	if c.Maps(sleep) {
		t.Error("the executable of a forgotten process is still reported mapped")
	}
	if !c.Maps(exeKey(t, os.Getpid())) {
		t.Error("the executable of a live process is no longer reported mapped")
	}
}
