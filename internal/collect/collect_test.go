package collect

import (
	"bytes"
	"cmp"
	"debug/elf"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"testing"
	"time"

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

// startSleep starts `sleep 60`, killed when the test ends, and returns it
// once its executable is mapped: exec switches /proc/PID/exe and returns
// to the parent (closing its close-on-exec pipe) before the kernel maps the
// new program, so a process just started may not have its mappings yet.
func startSleep(t testing.TB) (*exec.Cmd, *proc.Process) {
	t.Helper()
	child := exec.Command("sleep", "60")
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { child.Process.Kill(); child.Wait() })
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		p, err := proc.Read(child.Process.Pid)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range p.Mappings {
			if m.Path == p.Exe && p.Exe != "" {
				return child, p
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("pid %d: %s not mapped after 10 s", child.Process.Pid, p.Exe)
		}
	}
}

func TestCollectorMapsFilesOfKnownProcesses(t *testing.T) {
	sym := symbol.New()
	defer sym.Close()
	c := New(sym, "")
	child, _ := startSleep(t)
	sleep := exeKey(t, child.Process.Pid)
	// Two images of each process, as before and after an exec.
	for gen := uint32(1); gen <= 2; gen++ {
		c.NewProc(uint32(child.Process.Pid), gen)
		c.NewProc(uint32(os.Getpid()), gen)
	}
	if !c.Maps(sleep) || !c.Maps(exeKey(t, os.Getpid())) {
		t.Fatal("the executables of known processes are not reported mapped")
	}

	child.Process.Kill()
	child.Wait()
	for round := uint64(1); round <= forgetRounds; round++ {
		c.Forget(round)
	}
	if !c.Maps(sleep) {
		t.Error("the executable of a process forgotten this round is no longer reported mapped")
	}
	for round := uint64(forgetRounds + 1); round <= forgetRounds+keepFileRounds; round++ {
		c.Forget(round)
	}
	if c.Maps(sleep) {
		t.Errorf("the executable of a process forgotten %d rounds ago is still reported mapped", keepFileRounds)
	}
	if !c.Maps(exeKey(t, os.Getpid())) {
		t.Error("the executable of a live process is no longer reported mapped")
	}
	if n := c.Processes(); n != 2 {
		t.Errorf("%d process images known, want the live process's 2", n)
	}
}

// TestCollectorRechecksQuietProcesses checks that a process no sample
// named is looked up in /proc once it is stale, then not again for
// recheckRounds: killed after the first look (and the sampler not told),
// it is known until the second, and forgotten then.
func TestCollectorRechecksQuietProcesses(t *testing.T) {
	sym := symbol.New()
	defer sym.Close()
	c := New(sym, "")
	child, _ := startSleep(t)
	c.NewProc(uint32(child.Process.Pid), 1)
	round := uint64(1)
	for ; round <= forgetRounds; round++ {
		c.Forget(round)
	}
	if c.Processes() != 1 {
		t.Fatal("a running process was forgotten")
	}
	child.Process.Kill()
	child.Wait()
	for ; round < forgetRounds+recheckRounds; round++ {
		c.Forget(round)
	}
	if c.Processes() != 1 {
		t.Fatalf("/proc read again for a quiet process before round %d", forgetRounds+recheckRounds)
	}
	c.Forget(round)
	if c.Processes() != 0 {
		t.Errorf("a process that exited is known %d rounds after /proc last said it ran", recheckRounds)
	}
}

// forgets records what an Unwinder is told to forget.
type forgets map[procKey]bool // exited

func (forgets) Learn(*proc.Process, uint32) {}
func (f forgets) Forget(pid, generation uint32, exited bool) {
	f[procKey{pid, generation}] = exited
}

// TestCollectorForgetsExited checks that a process image the sampler told
// has exited is forgotten after the rounds any process gets, /proc
// unread (this process: alive there), and its unwinder told it exited,
// while the other image of the PID, not told of, stays.
func TestCollectorForgetsExited(t *testing.T) {
	sym := symbol.New()
	defer sym.Close()
	c := New(sym, "")
	f := forgets{}
	c.SetUnwinder(f)
	self := uint32(os.Getpid())
	c.NewProc(self, 1)
	c.NewProc(self, 2)
	c.Exited(self, 1)
	c.Exited(self, 3) // unknown: nothing to do
	for round := uint64(1); round < forgetRounds; round++ {
		c.Forget(round)
	}
	if n := c.Processes(); n != 2 {
		t.Fatalf("%d process images known before their rounds are up, want 2", n)
	}
	c.Forget(forgetRounds)
	if n := c.Processes(); n != 1 {
		t.Errorf("%d process images known, want 1: the one not told of", n)
	}
	if want := (forgets{{self, 1}: true}); !maps.Equal(f, want) {
		t.Errorf("unwinder told to forget %v, want %v", f, want)
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
	// The second Profile names with the maps the first kept, cleared.
	var last *profile.Location
	for range 2 {
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
		if leaf == last {
			t.Error("a profile has a location of the one before")
		}
		last = leaf
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

// TestProfileLinkTimeAddresses checks that two processes of one PIE binary,
// loaded at different addresses, get the same mapping and location for the
// same instruction, at the address the binary's program headers give it,
// with mapping fields that still turn the address into the file offset.
func TestProfileLinkTimeAddresses(t *testing.T) {
	sym := symbol.New()
	defer sym.Close()
	c := New(sym, "")
	var samples []sampler.Sample
	var fileOffset uint64
	var exe string
	for i := range 2 {
		child, p := startSleep(t)
		pid := child.Process.Pid
		exe = p.Exe
		var text *proc.Mapping
		for j := range p.Mappings {
			if p.Mappings[j].Path == p.Exe {
				text = &p.Mappings[j]
			}
		}
		if text == nil {
			t.Fatalf("no executable mapping of %s", p.Exe)
		}
		const into = 0x40
		fileOffset = text.Offset + into
		c.NewProc(uint32(pid), uint32(i+1))
		samples = append(samples, sampler.Sample{PID: uint32(pid), Generation: uint32(i + 1), User: []uint64{text.Start + into}, Count: 1})
	}
	if samples[0].User[0] == samples[1].User[0] {
		t.Skip("both processes loaded sleep at one address: no ASLR here")
	}
	want := linkAddr(t, exe, fileOffset)
	p := c.Profile(samples, Options{})
	if len(p.Samples) != 2 {
		t.Fatalf("%d samples, want 2", len(p.Samples))
	}
	a, b := p.Samples[0].Stack[0], p.Samples[1].Stack[0]
	if a != b {
		t.Errorf("one instruction of one binary has two locations: %+v, %+v", a, b)
	}
	if a.Address != want || a.Mapping == nil {
		t.Fatalf("location %#x (mapping %+v), want the link-time address %#x", a.Address, a.Mapping, want)
	}
	if m := a.Mapping; a.Address-m.Start+m.Offset != fileOffset {
		t.Errorf("address %#x in mapping %+v is file offset %#x, want %#x", a.Address, m, a.Address-m.Start+m.Offset, fileOffset)
	}
}

// linkAddr is the virtual address exe's program headers give fileOffset.
func linkAddr(t *testing.T, exe string, fileOffset uint64) uint64 {
	t.Helper()
	f, err := elf.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD && fileOffset >= p.Off && fileOffset < p.Off+p.Filesz {
			return p.Vaddr + fileOffset - p.Off
		}
	}
	t.Fatalf("no PT_LOAD segment of %s holds offset %#x", exe, fileOffset)
	return 0
}

// TestCollectorBoundedUnderChurn announces 20,000 new process images, as
// a node starting hundreds of processes a second would: the collector
// keeps at most maxProcs, counts the rest, and forgets them all once they
// exit.
func TestCollectorBoundedUnderChurn(t *testing.T) {
	sym := symbol.New()
	defer sym.Close()
	c := New(sym, "")
	child, _ := startSleep(t)
	pid := uint32(child.Process.Pid)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	const announced = 20000
	for gen := range uint32(announced) {
		c.NewProc(pid, gen+1)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	st := c.Stats()
	if n := c.Processes(); n != maxProcs || st.ProcessesSkipped != announced-maxProcs {
		t.Errorf("%d processes known, %d skipped; want %d and %d", n, st.ProcessesSkipped, maxProcs, announced-maxProcs)
	}
	// A snapshot of sleep is well under 2 KB: its paths are shared.
	if grown := int64(after.HeapAlloc) - int64(before.HeapAlloc); grown > maxProcs*2048 {
		t.Errorf("the heap grew %d KB for %d processes", grown>>10, maxProcs)
	}
	child.Process.Kill()
	child.Wait()
	for round := uint64(1); round <= forgetRounds+keepFileRounds; round++ {
		c.Forget(round)
	}
	if n, st := c.Processes(), c.Stats(); n != 0 || st.Files != 0 {
		t.Errorf("after the process exited: %d processes, %d files known", n, st.Files)
	}
}

// startAsleep is startSleep, returning once sleep sleeps: every library
// it uses is mapped.
func startAsleep(t *testing.T) (*exec.Cmd, *proc.Process) {
	t.Helper()
	child, _ := startSleep(t)
	stat := fmt.Sprintf("/proc/%d/stat", child.Process.Pid)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		b, err := os.ReadFile(stat)
		if err != nil {
			t.Fatal(err)
		}
		if i := bytes.LastIndexByte(b, ')'); i > 0 && bytes.HasPrefix(b[i:], []byte(") S")) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not asleep after 10 s: %s", stat, b)
		}
	}
	p, err := proc.Read(child.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	return child, p
}

// listingOf is what the kernel would list of p's mappings, its files as
// an overlay file system makes them: other inodes than /proc shows.
func listingOf(p *proc.Process) []sampler.ListedMapping {
	var ls []sampler.ListedMapping
	for _, m := range p.Mappings {
		l := sampler.ListedMapping{Start: m.Start, End: m.End, Offset: m.Offset, Deleted: m.Deleted, VDSO: m.Path == "[vdso]"}
		if m.Inode != 0 {
			l.File = sampler.KernelFile{Inode: m.Inode + 1<<40, Dev: 9, Generation: 1}
		}
		ls = append(ls, l)
	}
	return ls
}

// TestAnnouncedRelisted checks that a process the kernel listed again
// (a library loaded since) is named from the new listing when its files
// are known, without reading /proc: a mapping only the listing has is
// there; from /proc when one is not; and that a process never learned is
// not learned from a listing again.
func TestAnnouncedRelisted(t *testing.T) {
	sym := symbol.New()
	defer sym.Close()
	c := New(sym, "")
	child, read := startAsleep(t)
	pid := uint32(child.Process.Pid)
	listing := listingOf(read)
	c.Announced(sampler.NewProc{PID: pid, Generation: 1, Comm: "sleep", StartTime: read.StartTime, ExeText: listing[0].Start, Listed: true, Mappings: listing})
	relist := func(extra sampler.ListedMapping) *proc.Process {
		t.Helper()
		again := append(slices.Clone(listing), extra)
		slices.SortFunc(again, func(a, b sampler.ListedMapping) int { return cmp.Compare(a.Start, b.Start) })
		c.Announced(sampler.NewProc{PID: pid, Generation: 1, Relisted: true, Listed: true, Mappings: again})
		return c.entry(procKey{pid, 1})
	}

	// The executable's text mapped once more, far off: a known file.
	exe := read.Find(listing[0].Start)
	far := listing[0]
	far.Start, far.End = far.Start+1<<40, far.End+1<<40
	if m := relist(far).Find(far.Start); m == nil || m.Path != exe.Path || m.Inode != exe.Inode {
		t.Errorf("mapping of a known file listed again: %+v, want one of %s", m, exe.Path)
	}
	// A file never seen: read from /proc, which has no such mapping.
	unknown := far
	unknown.Start, unknown.End, unknown.File = far.Start+1<<30, far.End+1<<30, sampler.KernelFile{Inode: 1 << 50, Dev: 9, Generation: 1}
	if p := relist(unknown); p == nil || !slices.Equal(p.Mappings, read.Mappings) {
		t.Errorf("listed again with an unknown file: %+v, want /proc's %+v", p, read.Mappings)
	}
	// Never learned: nothing.
	before := c.Processes()
	c.Announced(sampler.NewProc{PID: 1 << 22, Generation: 1, Relisted: true, Listed: true, Mappings: listing})
	if c.Processes() != before || c.entry(procKey{1 << 22, 1}) != nil {
		t.Error("a process never learned was learned from a listing again")
	}
}

// TestReadAgainKeepsListed reads a process's mappings again (its code ran
// outside them) while it is the one process known to map its files: what
// its listing taught of them stays, and a later process of the same files,
// gone before it is learned, is named from its listing.
func TestReadAgainKeepsListed(t *testing.T) {
	sym := symbol.New()
	defer sym.Close()
	c := New(sym, "")
	first, firstRead := startAsleep(t)
	second, secondRead := startAsleep(t)
	announce := func(child *exec.Cmd, read *proc.Process) *proc.Process {
		t.Helper()
		listing := listingOf(read)
		pid := uint32(child.Process.Pid)
		c.Announced(sampler.NewProc{PID: pid, Generation: 1, Comm: "sleep", StartTime: read.StartTime, ExeText: listing[0].Start, Listed: true, Mappings: listing})
		return c.entry(procKey{pid, 1})
	}
	announce(first, firstRead)
	c.Refresh(uint32(first.Process.Pid), 1)
	second.Process.Kill()
	second.Wait()
	if p := announce(second, secondRead); p == nil || !slices.Equal(p.Mappings, secondRead.Mappings) || c.Stats().ProcessesListed != 1 {
		t.Fatalf("the second sleep, exited: %+v, %d from listings; want its /proc mappings %+v, one", p, c.Stats().ProcessesListed, secondRead.Mappings)
	}
}

// TestAnnouncedListed checks that a process the kernel listed is named as
// /proc names it once its files are known by their /proc names, even when
// it has exited by then, and that what is known of them goes with the
// processes that mapped them.
func TestAnnouncedListed(t *testing.T) {
	sym := symbol.New()
	defer sym.Close()
	c := New(sym, "")
	first, firstRead := startAsleep(t)
	second, secondRead := startAsleep(t)
	announce := func(child *exec.Cmd, gen uint32, listing []sampler.ListedMapping) *proc.Process {
		t.Helper()
		c.Announced(sampler.NewProc{PID: uint32(child.Process.Pid), Generation: gen, Comm: "sleep",
			ExeText: listing[0].Start, Listed: true, Mappings: listing, Cgroups: 0xc6})
		return c.entry(procKey{uint32(child.Process.Pid), gen})
	}

	// Its files never read from /proc: read from /proc, and matched.
	p := announce(first, 1, listingOf(firstRead))
	if p == nil || !slices.Equal(p.Mappings, firstRead.Mappings) || c.Stats().ProcessesListed != 0 {
		t.Fatalf("the first sleep: %+v, %d from listings; want its /proc mappings %+v, none", p, c.Stats().ProcessesListed, firstRead.Mappings)
	}
	// Anonymous code: left to /proc (a JIT's map needs its namespace PID).
	jit := append(listingOf(secondRead), sampler.ListedMapping{Start: 1 << 46, End: 1<<46 + 4096})
	if announce(second, 1, jit); c.Stats().ProcessesListed != 0 {
		t.Error("a listing with anonymous code was used")
	}
	// The same files: named from the listing alone, even once exited.
	second.Process.Kill()
	second.Wait()
	p = announce(second, 2, listingOf(secondRead))
	if p == nil || !slices.Equal(p.Mappings, secondRead.Mappings) || p.Exe != secondRead.Exe || c.Stats().ProcessesListed != 1 {
		t.Fatalf("the second sleep, exited: %+v, %d from listings; want its /proc mappings %+v and exe %s, one",
			p, c.Stats().ProcessesListed, secondRead.Mappings, secondRead.Exe)
	}
	// Its cgroups too, by the kernel's key, from the first one's.
	if firstRead.Cgroup == "" {
		t.Log("this test runs in the root cgroup: the cgroups of processes are not kept by key")
	} else if p.Cgroups() != firstRead.Cgroups() {
		t.Errorf("the second sleep, exited, is in %+v; want the first one's %+v", p.Cgroups(), firstRead.Cgroups())
	}
	// A file never matched: /proc again.
	other := listingOf(secondRead)
	other[0].File.Generation++
	if announce(second, 3, other); c.Stats().ProcessesListed != 1 {
		t.Error("a listing with a file never matched was used")
	}

	first.Process.Kill()
	first.Wait()
	for round := uint64(1); round <= forgetRounds; round++ {
		c.Forget(round)
	}
	// Kept a while for the next process of the same programs.
	if n := c.Stats().Files; n == 0 {
		t.Error("the files of processes that just exited were forgotten at once")
	}
	if announce(second, 4, listingOf(secondRead)); c.Stats().ProcessesListed != 2 {
		t.Error("a listing of files whose processes just exited was not used")
	}
	for round := uint64(forgetRounds + 1); round <= 2*forgetRounds+keepFileRounds; round++ {
		c.Forget(round)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.files) != 0 || len(c.listed) != 0 {
		t.Errorf("after every process exited: %d files known, %d listed", len(c.files), len(c.listed))
	}
}
