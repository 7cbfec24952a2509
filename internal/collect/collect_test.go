package collect

import (
	"os"
	"os/exec"
	"runtime"
	"testing"

	"github.com/flint-dev/flint/internal/proc"
	"github.com/flint-dev/flint/internal/profile"
	"github.com/flint-dev/flint/internal/sampler"
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

// TestProfileMergesEqualStacks checks that samples of one thread with equal
// stacks become one profile sample, whether the sampler handed out one
// slice for them or two, and that equal stacks share their locations.
func TestProfileMergesEqualStacks(t *testing.T) {
	sym := symbol.New()
	defer sym.Close()
	c := New(sym, "")
	pid := uint32(os.Getpid())
	c.NewProc(pid, 1)
	pc, _, _, _ := runtime.Caller(0)
	stack := []uint64{uint64(pc)}
	same := []uint64{uint64(pc)}
	other := []uint64{uint64(pc), uint64(pc) + 4} // leaf first
	thread := func(user []uint64, count uint64) sampler.Sample {
		return sampler.Sample{PID: pid, TID: pid, Generation: 1, Comm: "test", Thread: "test", User: user, Count: count}
	}
	p := c.Profile([]sampler.Sample{thread(stack, 1), thread(other, 5), thread(stack, 2), thread(same, 4)}, Options{})
	if len(p.Samples) != 2 {
		t.Fatalf("%d samples, want 2: %v", len(p.Samples), p.Samples)
	}
	counts := map[int]int64{}
	for _, s := range p.Samples {
		counts[len(s.Stack)] += s.Count
	}
	if counts[1] != 7 || counts[2] != 5 {
		t.Errorf("counts by stack depth %v, want 7 for the one-frame stack and 5 for the other", counts)
	}
	var leaf *profile.Location
	for _, s := range p.Samples {
		if leaf == nil {
			leaf = s.Stack[0]
		} else if s.Stack[0] != leaf {
			t.Error("one address has two locations in one profile")
		}
	}
}

// namer names every pod "web" and remembers what it was asked.
type namer struct{ asked [][2]string }

func (n *namer) AddNames(l map[string]string, podUID, containerID string) {
	n.asked = append(n.asked, [2]string{podUID, containerID})
	l[profile.LabelPod] = "web"
}

// TestNamer checks the Namer is asked once per label set with the IDs of
// the process's cgroup, and its names join the sample's labels.
func TestNamer(t *testing.T) {
	sym := symbol.New()
	defer sym.Close()
	c := New(sym, "n1")
	var n namer
	c.SetNamer(&n)
	pid := uint32(os.Getpid())
	c.NewProc(pid, 1)
	self, err := proc.Read(int(pid))
	if err != nil {
		t.Fatal(err)
	}
	s := sampler.Sample{PID: pid, TID: pid, Generation: 1, Comm: "test", Thread: "test", Count: 1}
	p := c.Profile([]sampler.Sample{s, s}, Options{})
	if want := [][2]string{{self.Pod, self.Container}}; len(n.asked) != 1 || n.asked[0] != want[0] {
		t.Errorf("namer asked %q, want %q", n.asked, want)
	}
	l := p.Samples[0].Labels
	if l[profile.LabelPod] != "web" || l[profile.LabelNode] != "n1" || l[profile.LabelPodUID] != self.Pod || l[profile.LabelContainerID] != self.Container {
		t.Errorf("labels %v", l)
	}
}
