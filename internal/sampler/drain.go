package sampler

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"unsafe"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// drainBatch is how many entries one batch syscall moves.
const drainBatch = 1024

// Drain returns the samples taken since the last Drain, aggregated by
// process image, thread and stacks. In ring buffer mode, call it soon
// after DrainSoon asks: the ring is then half full, with room for 2 s
// more at ~512 bytes a sample.
func (s *Sampler) Drain() ([]Sample, error) {
	defer s.drains.Add(1)
	// Cleared first: a sample that sets it again but is drained now only
	// makes PythonToRead ask for one drain more. One that cannot be
	// cleared asks for drains every second, which is all it costs. A
	// sample that sets it within 0.9 s does not ask for a drain
	// (DrainSoon): callers look at PythonToRead a second after a drain.
	var now unix.Timespec
	if unix.ClockGettime(unix.CLOCK_MONOTONIC, &now) == nil {
		_ = s.objs.DrainedAt.Set(uint64(now.Nano()))
	}
	_ = s.objs.OldPythonSampled.Set(uint32(0))
	// Quiet announcements woke no one: their processes are learned before
	// their samples are named.
	if s.procs != nil {
		s.announced()
	}
	// Copies of code objects that young Python samples ran woke no one:
	// they are read before the samples that ran them. An error is the ring's
	// layout, which ended its reader too.
	if s.young != nil {
		s.young.read(s.onYoung)
	}
	if s.opts.Transfer == RingBuffer {
		return s.drainRing()
	}
	return s.drainMaps()
}

func (s *Sampler) drainMaps() ([]Sample, error) {
	out, err := s.drainCounts(s.objs.Counts)
	if err != nil {
		return out, fmt.Errorf("drain sample counts: %w", err)
	}
	return out, nil
}

// drainCounts moves the counts of m, a map of sample keys, out of the
// kernel.
func (s *Sampler) drainCounts(m *ebpf.Map) ([]Sample, error) {
	var out []Sample
	keys := make([]profileSampleKey, drainBatch)
	vals := make([]uint64, drainBatch)
	var cursor ebpf.MapBatchCursor
	for {
		n, err := m.BatchLookupAndDelete(&cursor, keys, vals, nil)
		for i := range n {
			out = append(out, s.sampleFromKey(&keys[i], vals[i]))
		}
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return out, nil
		}
		if err != nil {
			return out, err
		}
	}
}

// Trim bounds the stacks kept in the kernel and in flint: it forgets stacks
// no sample has used for two Trim rounds. Long-running callers call it
// about once a window; a one-shot recording needs not.
//
// A stack is deleted from the kernel map one round before flint's own copy,
// so a sample counted while its stack was being deleted still finds it.
func (s *Sampler) Trim() error {
	s.round++
	var drop []uint64
	for h, st := range s.stacks {
		switch {
		case st.dropped && st.used < s.round-1:
			delete(s.stacks, h)
		case !st.dropped && st.used+2 <= s.round:
			st.dropped = true
			if st.inKernel {
				drop = append(drop, h)
			}
		}
	}
	if len(drop) == 0 {
		return nil
	}
	if _, err := s.objs.Stacks.BatchDelete(drop, nil); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("trim stacks: %w", err)
	}
	return nil
}

func (s *Sampler) sampleFromKey(k *profileSampleKey, count uint64) Sample {
	smp := Sample{
		PID: k.Pid, TID: k.Tid, Generation: k.Generation,
		Comm: cString(k.Comm[:]), Thread: cString(k.Thread[:]),
		Count: count,
	}
	var lostU, lostK bool
	smp.User, lostU = s.stack(k.UserStack)
	smp.Kernel, lostK = s.stack(k.KernelStack)
	smp.StackLost = lostU || lostK
	return smp
}

// stack returns the stack with the given hash, reading it from the kernel
// the first time; lost reports a hash whose stack the kernel could not keep.
func (s *Sampler) stack(hash uint64) (ips []uint64, lost bool) {
	if hash == 0 {
		return nil, false
	}
	if c, ok := s.stacks[hash]; ok {
		c.use(s.round)
		c.inKernel = true
		return c.ips, false
	}
	var st profileStackTrace
	if err := s.objs.Stacks.Lookup(hash, &st); err != nil {
		return nil, true
	}
	ips = append([]uint64(nil), st.Ips[:min(int(st.Len), MaxStackDepth)]...)
	s.stacks[hash] = &cachedStack{ips: ips, used: s.round, inKernel: true}
	return ips, false
}

// cachedStack is a stack flint holds a copy of.
type cachedStack struct {
	ips  []uint64
	used uint64 // last Trim round a sample referenced it
	// dropped is set once Trim deleted it from the kernel map; a sample
	// using it again means the program stored it anew.
	dropped bool
	// inKernel: a sample drained from the kernel's maps named it, so the
	// kernel's stacks map holds it (ring buffer samples carry theirs).
	inKernel bool
}

func (c *cachedStack) use(round uint64) {
	c.used = round
	c.dropped = false
}

// ringKey identifies samples to aggregate in ring buffer mode.
type ringKey struct {
	pid, tid, generation uint32
	comm, thread         [16]int8
	user, kernel         uint64 // stack hashes
}

func (s *Sampler) drainRing() ([]Sample, error) {
	// One map for every drain: cleared, it keeps its buckets, and a
	// steady workload drains about the same keys each second.
	counts := s.ringCounts
	defer clear(counts)
	var ev profileSampleEvent
	err := s.samples.read(func(raw []byte) {
		if !decodeEvent(raw, &ev) {
			return
		}
		user := ev.Ips[:ev.UserLen]
		kernel := ev.Ips[ev.UserLen : ev.UserLen+ev.KernelLen]
		k := ringKey{
			pid: ev.Pid, tid: ev.Tid, generation: ev.Generation,
			comm: ev.Comm, thread: ev.Thread,
			user: s.intern(user), kernel: s.intern(kernel),
		}
		counts[k] += uint64(max(ev.Weight, 1))
	})
	if err != nil {
		return nil, fmt.Errorf("read sample ring buffer: %w", err)
	}
	out := make([]Sample, 0, len(counts))
	for k, n := range counts {
		out = append(out, Sample{
			PID: k.pid, TID: k.tid, Generation: k.generation,
			Comm: cString(k.comm[:]), Thread: cString(k.thread[:]),
			User: s.cached(k.user), Kernel: s.cached(k.kernel),
			Count: n,
		})
	}
	return out, nil
}

// decodeEvent decodes a variable-length sample record into ev.
func decodeEvent(raw []byte, ev *profileSampleEvent) bool {
	header := int(unsafe.Offsetof(ev.Ips))
	if len(raw) < header {
		return false
	}
	ev.Pid = binary.NativeEndian.Uint32(raw[0:])
	ev.Tid = binary.NativeEndian.Uint32(raw[4:])
	ev.Generation = binary.NativeEndian.Uint32(raw[8:])
	ev.UserLen = binary.NativeEndian.Uint16(raw[12:])
	ev.KernelLen = binary.NativeEndian.Uint16(raw[14:])
	ev.Weight = binary.NativeEndian.Uint32(raw[16:])
	for i := range 16 {
		ev.Comm[i] = int8(raw[24+i])
		ev.Thread[i] = int8(raw[40+i])
	}
	n := int(ev.UserLen) + int(ev.KernelLen)
	if n > len(ev.Ips) || len(raw) < header+8*n {
		return false
	}
	for i := range n {
		ev.Ips[i] = binary.NativeEndian.Uint64(raw[header+8*i:])
	}
	return true
}

// intern stores a stack under its hash and returns the hash; 0 for none.
func (s *Sampler) intern(ips []uint64) uint64 {
	if len(ips) == 0 {
		return 0
	}
	h := hashStack(ips)
	if c, ok := s.stacks[h]; ok {
		c.use(s.round)
	} else {
		s.stacks[h] = &cachedStack{ips: append([]uint64(nil), ips...), used: s.round}
	}
	return h
}

func (s *Sampler) cached(hash uint64) []uint64 {
	if c := s.stacks[hash]; c != nil {
		return c.ips
	}
	return nil
}

// hashStack mixes a stack into 64 bits, as the BPF program does.
func hashStack(ips []uint64) uint64 {
	h := 0x9e3779b97f4a7c15 ^ uint64(len(ips))
	for _, ip := range ips {
		h = (h ^ ip) * 0xff51afd7ed558ccd
		h ^= h >> 32
	}
	if h == 0 {
		return 1
	}
	return h
}

func cString(b []int8) string {
	raw := make([]byte, len(b))
	for i, c := range b {
		raw[i] = byte(c)
	}
	if i := bytes.IndexByte(raw, 0); i >= 0 {
		raw = raw[:i]
	}
	return string(raw)
}
