package sampler

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/flint-dev/flint/internal/fixture"
	"github.com/flint-dev/flint/internal/proc"
	"github.com/flint-dev/flint/internal/unwind"
)

// execChildEnv makes the test binary a fixture that spins, then execs a
// shell that spins too. The shell starts no threads: nothing but the exec
// itself tells the sampler that the process has a new image. Its loop
// takes some 0.25 s of CPU here, well over the 0.1 s the test asks for.
const execChildEnv = "FLINT_SAMPLER_TEST_CHILD"

// spinChildEnv makes the test binary a fixture that sleeps, then spins:
// "SLEEP,SPIN", two Go durations.
const spinChildEnv = "FLINT_SAMPLER_TEST_SPIN"

func TestMain(m *testing.M) {
	if v := os.Getenv(spinChildEnv); v != "" {
		sleep, work, _ := strings.Cut(v, ",")
		d, err := time.ParseDuration(sleep)
		if err != nil {
			panic(err)
		}
		time.Sleep(d)
		if d, err = time.ParseDuration(work); err != nil {
			panic(err)
		}
		spin(d)
		os.Exit(0)
	}
	if os.Getenv(execChildEnv) != "" {
		spin(400 * time.Millisecond)
		loop := "i=0; while [ $i -lt 400000 ]; do i=$((i+1)); done"
		panic(syscall.Exec("/bin/sh", []string{"sh", "-c", loop}, os.Environ()))
	}
	os.Exit(m.Run())
}

func TestParseCPUList(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []int
		bad  bool
	}{
		{in: "0", want: []int{0}},
		{in: "0-3", want: []int{0, 1, 2, 3}},
		{in: "0-1,4,6-7", want: []int{0, 1, 4, 6, 7}},
		{in: "3-1", bad: true},
		{in: "x", bad: true},
	} {
		got, err := parseCPUList(tc.in)
		if (err != nil) != tc.bad || !slices.Equal(got, tc.want) {
			t.Errorf("parseCPUList(%q) = %v, %v; want %v, bad=%v", tc.in, got, err, tc.want, tc.bad)
		}
	}
}

func TestDecodeEventRejectsShortRecords(t *testing.T) {
	var ev profileSampleEvent
	if decodeEvent(make([]byte, 10), &ev) {
		t.Error("decoded a 10-byte record")
	}
	raw := make([]byte, 56)
	raw[12] = 5 // user_len 5 but no ips follow
	if decodeEvent(raw, &ev) {
		t.Error("decoded a record whose stack runs past its end")
	}
}

// requireBPF skips tests that need to load BPF programs when not root.
func requireBPF(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (CAP_BPF, CAP_PERFMON) to load BPF programs; CI runs it as root")
	}
}

// TestSamplerSeesBusyProcess samples the whole machine while this process
// spins, with each transfer, and checks this process's samples and stacks.
func TestSamplerSeesBusyProcess(t *testing.T) {
	requireBPF(t)
	for _, transfer := range []Transfer{Aggregate, RingBuffer} {
		t.Run(string(transfer), func(t *testing.T) {
			self := uint32(os.Getpid())
			announced := make(chan NewProc, 1024)
			s, err := Start(Options{Frequency: 997, KernelStacks: true, Transfer: transfer,
				OnNewProc: func(p NewProc) { p.Mappings = nil; announced <- p }})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			span := fixture.Start(t, os.Getpid())
			spin(500 * time.Millisecond)
			cpu, _ := span.Used(t)
			stolen := span.Stolen(t)
			s.Stop()
			span.RequireRan(t)
			samples, err := s.Drain()
			if err != nil {
				t.Fatal(err)
			}
			var mine, withUser uint64
			for _, smp := range samples {
				if smp.PID == self {
					mine += smp.Count
					if len(smp.User) > 0 {
						withUser += smp.Count
					}
				}
			}
			fixture.CheckSamples(t, "this process", int64(mine), 997, cpu, stolen)
			if withUser < mine*9/10 {
				t.Errorf("%d of %d samples have a user stack", withUser, mine)
			}
			st, err := s.Stats()
			if err != nil {
				t.Fatal(err)
			}
			if st.Samples < mine || st.Dropped() > 0 {
				t.Errorf("stats %+v: want ≥ %d samples and no drops", st, mine)
			}
			// Announced with the name and start time /proc gives, and an
			// address in the executable's text.
			stat, err := proc.Read(int(self))
			if err != nil {
				t.Fatal(err)
			}
			want := NewProc{PID: self, Comm: stat.Comm, StartTime: stat.StartTime}
			i := slices.IndexFunc(drainChan(announced), func(p NewProc) bool {
				text := stat.Find(p.ExeText)
				p.Generation, p.ExeText, p.Listed, p.Cgroups, p.TablesFilled = 0, 0, false, 0, false
				p.Started = 0 // StartTime's, to the nanosecond
				return reflect.DeepEqual(p, want) && text != nil && text.Path == stat.Exe
			})
			if i < 0 {
				t.Errorf("this process was never announced as %+v with an address in %s", want, stat.Exe)
			}
		})
	}
}

// requireTaskWorks skips t on a kernel without BPF task works.
func requireTaskWorks(t *testing.T) {
	t.Helper()
	if !ListsNewProcesses() {
		t.Skip("this kernel has no BPF task works (Linux 6.18): announcements are not listed")
	}
}

// spinningShells starts n shells that spin in user code until t ends.
func spinningShells(t *testing.T, n int) []uint32 {
	t.Helper()
	var pids []uint32
	for range n {
		shell := exec.Command("/bin/sh", "-c", "while :; do :; done")
		if err := shell.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { shell.Process.Kill(); shell.Wait() })
		pids = append(pids, uint32(shell.Process.Pid))
	}
	return pids
}

// TestSamplerDrainSoonHalfFull samples this process spinning 120 calls
// deep (a ring record of a kilobyte: the ring fills in seconds) into the
// ring buffer: DrainSoon asks for a drain once the ring is half full, not
// before, and not again until a drain.
func TestSamplerDrainSoonHalfFull(t *testing.T) {
	requireBPF(t)
	s, err := Start(Options{Frequency: 997, PID: os.Getpid(), Transfer: RingBuffer})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var stop atomic.Bool
	defer stop.Store(true)
	go spinDeep(120, &stop)
	if !drainAsked(s, 30*time.Second) {
		t.Fatalf("no DrainSoon in 30 s; the ring is %.0f%% full", 100*s.samples.backlog())
	}
	if b := s.samples.backlog(); b < halfFull {
		t.Errorf("DrainSoon with the ring %.0f%% full, want half", 100*b)
	}
	if drainAsked(s, 100*time.Millisecond) {
		t.Error("DrainSoon again before a drain")
	}
	if _, err := s.Drain(); err != nil {
		t.Fatal(err)
	}
	if b := s.samples.backlog(); b >= halfFull {
		t.Errorf("ring %.0f%% full after a drain", 100*b)
	}
	if !drainAsked(s, 30*time.Second) {
		t.Fatal("no DrainSoon in 30 s after a drain")
	}
}

// drainAsked reports whether s asks for a drain (DrainSoon) within d, or,
// for d 0, has asked already.
func drainAsked(s *Sampler, d time.Duration) bool {
	if d <= 0 {
		select {
		case <-s.DrainSoon():
			return true
		default:
			return false
		}
	}
	select {
	case <-s.DrainSoon():
		return true
	case <-time.After(d):
		return false
	}
}

// spinDeep spins depth calls deep until stop is set.
//
//go:noinline
func spinDeep(depth int, stop *atomic.Bool) {
	if depth > 0 {
		spinDeep(depth-1, stop)
		return
	}
	for !stop.Load() {
	}
}

// TestSamplerRelistsStale samples a spinning shell whose unwind mappings
// leave out its executable, where it spins, as if it had loaded that
// since it was listed: it lists itself again (NewProc.Relisted), with the
// executable, and OnStale is not called.
func TestSamplerRelistsStale(t *testing.T) {
	requireBPF(t)
	requireTaskWorks(t)
	pid := spinningShells(t, 1)[0]
	time.Sleep(100 * time.Millisecond) // exec'd, spinning
	announced := make(chan NewProc, 16)
	stale := make(chan uint32, 16)
	s, err := Start(Options{Frequency: 997, PID: int(pid), UnwindRows: 1024,
		OnNewProc: func(p NewProc) {
			p.Mappings = slices.Clone(p.Mappings)
			announced <- p
		},
		OnStale: func(pid, _ uint32) { stale <- pid }})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var first NewProc
	select {
	case first = <-announced:
	case <-time.After(5 * time.Second):
		t.Fatal("the spinning shell was not announced")
	}
	if !first.Listed {
		t.Skipf("the spinning shell was announced unlisted: %+v", first)
	}
	exe := slices.IndexFunc(first.Mappings, func(m ListedMapping) bool { return m.Start <= first.ExeText && first.ExeText < m.End })
	if exe < 0 {
		t.Fatalf("no listed mapping holds the executable's text at %#x: %+v", first.ExeText, first.Mappings)
	}
	var ms []unwind.Mapping
	for i, m := range first.Mappings {
		if i != exe {
			ms = append(ms, unwind.Mapping{Start: m.Start, End: m.End})
		}
	}
	if err := s.SetUnwind(pid, first.Generation, ms, false); err != nil {
		t.Fatal(err)
	}
	select {
	case p := <-announced:
		if !p.Relisted || !p.Listed || p.PID != pid || p.Generation != first.Generation ||
			!slices.ContainsFunc(p.Mappings, func(m ListedMapping) bool { return m.Start == first.Mappings[exe].Start }) {
			t.Errorf("announced %+v, want process %d (generation %d) listed again with its executable", p, pid, first.Generation)
		}
	case pid := <-stale:
		t.Errorf("process %d stale, want it listed again", pid)
	case <-time.After(5 * time.Second):
		t.Fatal("the shell spinning outside its unwind mappings was not listed again")
	}
}

// TestSamplerListsMappings checks that a process first sampled in user
// code is announced with its executable mappings as /proc/PID/maps has
// them, and with a key for its cgroups that another process in the same
// ones shares and one in another cgroup does not. A spinning shell is in
// user code nearly always, and a new sampler announces it anew, so a few
// starts settle it.
func TestSamplerListsMappings(t *testing.T) {
	requireBPF(t)
	requireTaskWorks(t)
	// The third shell in a cgroup of its own (cgroup v1's cpu controller),
	// removed once the shells are killed (cleanups run last first).
	other := fmt.Sprintf("/sys/fs/cgroup/cpu/flint-listing-%d", os.Getpid())
	moved := os.Mkdir(other, 0o755) == nil
	if moved {
		t.Cleanup(func() { os.Remove(other) })
	}
	pids := spinningShells(t, 3)
	moved = moved && os.WriteFile(other+"/cgroup.procs", []byte(strconv.Itoa(int(pids[2]))), 0) == nil
	time.Sleep(100 * time.Millisecond) // exec'd, spinning
	got := map[uint32]NewProc{}
	listed := func() bool {
		for _, pid := range pids {
			if !got[pid].Listed {
				return false
			}
		}
		return true
	}
	for start := 0; start < 5 && !listed(); start++ {
		announced := make(chan NewProc, len(pids))
		s, err := Start(Options{Frequency: 997, OnNewProc: func(p NewProc) {
			if slices.Contains(pids, p.PID) {
				p.Mappings = slices.Clone(p.Mappings)
				announced <- p
			}
		}})
		if err != nil {
			t.Fatal(err)
		}
		for range pids {
			select {
			case p := <-announced:
				if !got[p.PID].Listed {
					got[p.PID] = p
				}
			case <-time.After(5 * time.Second):
			}
		}
		s.Close()
	}
	if !listed() {
		t.Fatalf("the spinning shells were not all announced listed: %+v", got)
	}
	for _, pid := range pids {
		want, err := proc.Read(int(pid))
		if err != nil {
			t.Fatal(err)
		}
		ms := got[pid].Mappings
		if len(ms) != len(want.Mappings) {
			t.Fatalf("pid %d: listed %d mappings, /proc has %d:\n%+v\n%+v", pid, len(ms), len(want.Mappings), ms, want.Mappings)
		}
		for i, l := range ms {
			m := want.Mappings[i]
			if l.Start != m.Start || l.End != m.End || l.Offset != m.Offset || l.Deleted != m.Deleted ||
				(l.File.Inode == 0) != (m.Inode == 0) || l.VDSO != (m.Path == "[vdso]") {
				t.Errorf("pid %d: mapping %d listed as %+v, /proc has %+v", pid, i, l, m)
			}
		}
	}
	t.Logf("listed %d executable mappings", len(got[pids[0]].Mappings))
	if a, b := got[pids[0]].Cgroups, got[pids[1]].Cgroups; a == 0 || a != b {
		t.Errorf("two shells in the same cgroups have the keys %#x and %#x", a, b)
	}
	if !moved {
		t.Logf("no cgroup of its own for the third shell (%s): the key of another cgroup is not checked", other)
	} else if got[pids[2]].Cgroups == got[pids[0]].Cgroups {
		t.Errorf("a shell in another cgroup has the same key, %#x", got[pids[0]].Cgroups)
	}
}

// TestSamplerListsSingleThreadedInKernel checks that a single-threaded
// process that runs in the kernel nearly always (dd copying /dev/zero to
// /dev/null), and so is first sampled there, is announced listed: it lists
// itself as it returns to user code.
func TestSamplerListsSingleThreadedInKernel(t *testing.T) {
	requireBPF(t)
	requireTaskWorks(t)
	dd := exec.Command("dd", "if=/dev/zero", "of=/dev/null", "bs=1M")
	if err := dd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dd.Process.Kill(); dd.Wait() })
	time.Sleep(100 * time.Millisecond) // exec'd, copying
	announced := make(chan NewProc, 1)
	s, err := Start(Options{Frequency: 997, PID: dd.Process.Pid, OnNewProc: func(p NewProc) {
		p.Mappings = slices.Clone(p.Mappings)
		announced <- p
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	select {
	case p := <-announced:
		want, err := proc.Read(dd.Process.Pid)
		if err != nil {
			t.Fatal(err)
		}
		if !p.Listed || len(p.Mappings) != len(want.Mappings) {
			t.Errorf("dd announced %+v; want it listed with the %d mappings /proc has", p, len(want.Mappings))
		}
	case <-time.After(5 * time.Second):
		t.Fatal("dd was not announced")
	}
}

// TestSamplerQuietAnnouncement checks that a process mapping only files
// SetQuietFile named, in cgroups SetQuietCgroups named, is announced
// without waking the reader, read by Drain, with its unwind mappings
// listed from the rows given; and that one of cgroups not named wakes it.
// Each sampler samples one shell: any other process would wake the
// reader, which reads what is there.
func TestSamplerQuietAnnouncement(t *testing.T) {
	requireBPF(t)
	requireTaskWorks(t)
	// Spinning already when sampling starts, in user code: listed.
	pids := spinningShells(t, 2)
	time.Sleep(100 * time.Millisecond) // exec'd, spinning
	announced := make(chan NewProc, 16)
	sample := func(pid uint32) *Sampler {
		s, err := Start(Options{Frequency: 997, PID: int(pid), Paused: true, OnNewProc: func(p NewProc) {
			p.Mappings = slices.Clone(p.Mappings)
			announced <- p
		}})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	// The first sampler teaches the first shell's files and cgroups.
	var first NewProc
	for range 5 {
		s := sample(pids[0])
		if err := s.Resume(); err != nil {
			t.Fatal(err)
		}
		select {
		case first = <-announced:
		case <-time.After(5 * time.Second):
		}
		s.Close()
		if first.Listed {
			break
		}
	}
	if !first.Listed {
		t.Fatalf("the spinning shell was not announced listed: %+v", first)
	}
	rows := QuietRows{BaseFromStart: 0x1000, First: 7, Rows: 3}
	withRows := slices.IndexFunc(first.Mappings, func(m ListedMapping) bool { return !m.VDSO })
	setFiles := func(s *Sampler) {
		for i, m := range first.Mappings {
			f, offset, r := m.File, m.Offset, QuietRows{}
			if m.VDSO {
				f, offset = KernelFile{}, 0
			} else if i == withRows {
				r = rows
			}
			if err := s.SetQuietFile(f, offset, r); err != nil {
				t.Fatal(err)
			}
		}
	}

	s := sample(pids[1])
	defer s.Close()
	setFiles(s)
	if err := s.SetQuietCgroups(first.Cgroups); err != nil {
		t.Fatal(err)
	}
	if err := s.Resume(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	select {
	case p := <-announced:
		t.Fatalf("process %d (listed %v) woke the reader: its files and cgroups are known", p.PID, p.Listed)
	default:
	}
	if _, err := s.Drain(); err != nil {
		t.Fatal(err)
	}
	var p NewProc
	select {
	case p = <-announced:
	default:
		t.Fatal("Drain read no quiet announcement")
	}
	if !p.Listed || len(p.Mappings) != len(first.Mappings) {
		t.Fatalf("quiet announcement %+v, not listed as the first shell's %+v", p, first)
	}
	var u profileUnwindProc
	if err := s.objs.UnwindProcs.Lookup(p.PID, &u); err != nil {
		t.Fatalf("process %d: no unwind mappings filled: %v", p.PID, err)
	}
	m, e := p.Mappings[withRows], u.Mappings[withRows]
	if u.Generation != p.Generation || int(u.Len) != len(p.Mappings) || e.Start != m.Start || e.End != m.End ||
		e.Base != m.Start+rows.BaseFromStart || e.First != rows.First || e.Rows != rows.Rows {
		t.Errorf("process %d: unwind mappings %+v (mapping %d: %+v), want generation %d, %d mappings, %+v with %+v",
			p.PID, u, withRows, e, p.Generation, len(p.Mappings), m, rows)
	}
	if st, err := s.Stats(); err != nil || st.ProcsQuiet != 1 {
		t.Errorf("stats %+v (%v): want 1 process announced quiet", st, err)
	}
	s.Close()

	// Cgroups not known: the reader is woken.
	s = sample(pids[1])
	defer s.Close()
	setFiles(s)
	if err := s.Resume(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-announced:
	case <-time.After(5 * time.Second):
		t.Fatal("a process of unknown cgroups was not announced at once")
	}
}

// TestSamplerNewImageAfterExec checks that a process that execs is announced
// again with a new generation, and that the new image's samples carry it and
// the new name, with each transfer.
func TestSamplerNewImageAfterExec(t *testing.T) {
	requireBPF(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, transfer := range []Transfer{Aggregate, RingBuffer} {
		t.Run(string(transfer), func(t *testing.T) {
			type announcement struct{ pid, gen uint32 }
			announced := make(chan announcement, 1024)
			s, err := Start(Options{Frequency: 997, Transfer: transfer,
				OnNewProc: func(p NewProc) { announced <- announcement{p.PID, p.Generation} }})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			child := exec.Command(self)
			child.Env = append(os.Environ(), execChildEnv+"=1")
			t0, stolen := time.Now(), -fixture.Stolen(t)
			if err := child.Run(); err != nil {
				t.Fatalf("fixture: %v", err)
			}
			stolen += fixture.Stolen(t)
			s.Stop()
			cpu := child.ProcessState.UserTime() + child.ProcessState.SystemTime()
			fixture.RequireShare(t, "the fixture", cpu, time.Since(t0))
			samples, err := s.Drain()
			if err != nil {
				t.Fatal(err)
			}
			pid := uint32(child.Process.Pid)
			commByGen := map[uint32]map[string]uint64{}
			var total uint64
			for _, smp := range samples {
				if smp.PID != pid {
					continue
				}
				total += smp.Count
				if commByGen[smp.Generation] == nil {
					commByGen[smp.Generation] = map[string]uint64{}
				}
				commByGen[smp.Generation][smp.Comm] += smp.Count
			}
			var gens []uint32
			for len(announced) > 0 {
				if a := <-announced; a.pid == pid {
					gens = append(gens, a.gen)
				}
			}
			// A third, first generation is the forked child before its
			// exec of the test binary, when a tick lands in between.
			if len(gens) < 2 || len(gens) > 3 {
				t.Fatalf("pid %d announced with generations %v, want two (before and after exec); samples by generation: %v", pid, gens, commByGen)
			}
			// Sampling ran over the child's whole life.
			fixture.CheckSamples(t, "the fixture, all images", int64(total), 997, cpu, stolen)
			gens = gens[len(gens)-2:]
			before, after := commByGen[gens[0]], commByGen[gens[1]]
			if before[filepath.Base(self)] < 100 || after["sh"] < 100 {
				t.Errorf("samples by generation %v: want ≥ 100 named %q under %d and ≥ 100 named sh under %d",
					commByGen, filepath.Base(self), gens[0], gens[1])
			}
		})
	}
}

// TestSamplerYoungSample samples processes in their first second at one
// tick in five, each sample counting five: the counts still follow the
// CPU used, a young process's counts are multiples of five, and a process
// past its first second is sampled at every tick.
func TestSamplerYoungSample(t *testing.T) {
	requireBPF(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	const every, freq = 5, 997
	for _, transfer := range []Transfer{Aggregate, RingBuffer} {
		t.Run(string(transfer), func(t *testing.T) {
			s, err := Start(Options{Frequency: freq, Transfer: transfer, YoungSampleEvery: every})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			// run runs a child that sleeps, then spins: its PID, CPU
			// time, and whether it lived under a second (young at
			// every tick).
			run := func(sleep, work time.Duration) (pid uint32, cpu time.Duration, young bool) {
				child := exec.Command(self)
				child.Env = append(os.Environ(), fmt.Sprintf("%s=%s,%s", spinChildEnv, sleep, work))
				t0 := time.Now()
				if err := child.Run(); err != nil {
					t.Fatalf("fixture: %v", err)
				}
				st := child.ProcessState
				return uint32(child.Process.Pid), st.UserTime() + st.SystemTime(), time.Since(t0) < time.Second
			}
			young := map[uint32]bool{} // PID: young at every tick
			var youngCPU time.Duration
			youngStolen := -fixture.Stolen(t)
			for range 10 {
				pid, cpu, whole := run(0, 300*time.Millisecond)
				young[pid] = whole
				youngCPU += cpu
			}
			youngStolen += fixture.Stolen(t)
			oldStolen := -fixture.Stolen(t)
			old, oldCPU, _ := run(1100*time.Millisecond, 300*time.Millisecond)
			oldStolen += fixture.Stolen(t)
			s.Stop()
			samples, err := s.Drain()
			if err != nil {
				t.Fatal(err)
			}
			var youngCount, oldCount uint64
			oldEveryTick := false
			for _, smp := range samples {
				if whole, ok := young[smp.PID]; ok {
					youngCount += smp.Count
					if whole && smp.Count%every != 0 {
						t.Errorf("pid %d, young for its whole life: a count of %d, not a multiple of %d", smp.PID, smp.Count, every)
					}
				} else if smp.PID == old {
					oldCount += smp.Count
					oldEveryTick = oldEveryTick || smp.Count%every != 0
				}
			}
			// A count's standard deviation is sqrt((every-1) × ticks):
			// 3.7% of 3 s of CPU at 997 Hz. 20% is five of them and
			// the timer's rounding (fixture.Tolerance), and the time
			// stolen from the CPUs may add ticks (fixture.Stolen).
			want, stolenTicks := fixture.Expected(freq, youngCPU), fixture.Expected(freq, youngStolen)
			t.Logf("young processes: %d samples for %s of CPU (%v stolen) at %d Hz (want %.0f ± 20%%)", youngCount, youngCPU, youngStolen, freq, want)
			if d := float64(youngCount) - want; d > 0.2*want+stolenTicks || d < -0.2*want {
				t.Errorf("young processes: %d samples for %s of CPU (%v stolen) at %d Hz, want %.0f ± 20%%", youngCount, youngCPU, youngStolen, freq, want)
			}
			fixture.CheckSamples(t, "the process past its first second", int64(oldCount), freq, oldCPU, oldStolen)
			if !oldEveryTick {
				t.Errorf("the process past its first second: every count a multiple of %d, as if thinned", every)
			}
			st, err := s.Stats()
			if err != nil {
				t.Fatal(err)
			}
			if st.YoungSkipped < youngCount/2 {
				t.Errorf("%d young ticks skipped, want at least %d: (every-1)/every of the young processes' ticks", st.YoungSkipped, youngCount/2)
			}
		})
	}
}

func drainChan[T any](c chan T) []T {
	var out []T
	for {
		select {
		case v := <-c:
			out = append(out, v)
		default:
			return out
		}
	}
}

// spin burns d of this process's CPU time, or gives up once
// d/fixture.MinShare of wall time passed: the machine starved it then.
//
//go:noinline
func spin(d time.Duration) {
	pid := os.Getpid()
	start, err := fixture.CPU(pid)
	if err != nil {
		panic(err)
	}
	giveUp := time.Now().Add(time.Duration(float64(d) / fixture.MinShare))
	for {
		for i := 0; i < 10000; i++ {
		}
		if cpu, _ := fixture.CPU(pid); cpu-start >= d || time.Now().After(giveUp) {
			return
		}
	}
}

// TestTrimForgetsUnusedStacks checks that stacks no sample uses leave the
// kernel map first and flint's cache one round later.
func TestTrimForgetsUnusedStacks(t *testing.T) {
	requireBPF(t)
	s, err := Start(Options{Frequency: 997, KernelStacks: true, PID: os.Getpid(), Transfer: Aggregate})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	spin(200 * time.Millisecond)
	s.Stop()
	if _, err := s.Drain(); err != nil {
		t.Fatal(err)
	}
	cached := len(s.stacks)
	if cached == 0 || kernelStacks(t, s) != cached {
		t.Fatalf("%d stacks cached, %d in the kernel: want the same, > 0", cached, kernelStacks(t, s))
	}
	s.Trim() // round 1: all used in round 0, kept
	s.Trim() // round 2: idle two rounds, deleted from the kernel
	if n := kernelStacks(t, s); n != 0 || len(s.stacks) != cached {
		t.Errorf("after two rounds: %d in the kernel (want 0), %d cached (want %d)", n, len(s.stacks), cached)
	}
	s.Trim() // round 3: gone from the cache too
	if len(s.stacks) != 0 {
		t.Errorf("after three rounds: %d cached, want 0", len(s.stacks))
	}
}

func kernelStacks(t *testing.T, s *Sampler) int {
	var k uint64
	var v profileStackTrace
	n := 0
	it := s.objs.Stacks.Iterate()
	for it.Next(&k, &v) {
		n++
	}
	if err := it.Err(); err != nil {
		t.Fatal(err)
	}
	return n
}
