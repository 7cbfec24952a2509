package sampler

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// ring reads a BPF ring buffer map (BPF_MAP_TYPE_RINGBUF) in its shared
// pages, as the kernel lays them out (kernel/bpf/ringbuf.c): the
// consumer's position in a page of its own, which flint writes; the
// producer's in the next; then the data, mapped twice in a row, so that a
// record that wraps around the end reads straight on. Reading takes no
// system call: cilium/ebpf's reader asks the kernel first whether there is
// anything to read (two epoll_wait calls each time a ring woke it), 47 of
// 855 samples (5.5%) of the agent's profile under process churn
// (docs/BENCHMARKS.md).
type ring struct {
	cons, prod       []byte  // the mappings
	consPos, prodPos *uint64 // shared with the kernel: atomic access only
	data             []byte
	mask             uint64
	// wait is the ring's map in Go's network poller (pollable), for a
	// reader waiting for records; closing it ends the wait.
	wait *os.File
	// mu lets two readers take turns: python_young has the one it wakes
	// and Drain.
	mu sync.Mutex
}

// A record's header: its length, and whether the producer has yet to
// commit it (busy) or dropped it (discard).
const (
	ringHeader  = 8
	ringBusy    = 1 << 31
	ringDiscard = 1 << 30
)

func openRing(m *ebpf.Map) (*ring, error) {
	page := os.Getpagesize()
	size := int(m.MaxEntries())
	if size <= 0 || size&(size-1) != 0 {
		return nil, fmt.Errorf("ring buffer %v: size %d is not a power of two", m, size)
	}
	cons, err := unix.Mmap(m.FD(), 0, page, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("map ring buffer %v's consumer page: %w", m, err)
	}
	prod, err := unix.Mmap(m.FD(), int64(page), page+2*size, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		unix.Munmap(cons)
		return nil, fmt.Errorf("map ring buffer %v's data: %w", m, err)
	}
	wait, err := pollable(m)
	if err != nil {
		unix.Munmap(cons)
		unix.Munmap(prod)
		return nil, fmt.Errorf("poll ring buffer %v: %w", m, err)
	}
	return &ring{
		cons: cons, prod: prod,
		consPos: (*uint64)(unsafe.Pointer(&cons[0])), prodPos: (*uint64)(unsafe.Pointer(&prod[0])),
		data: prod[page:], mask: uint64(size - 1), wait: wait,
	}, nil
}

// pollable returns a file of ring buffer map m that Go's network poller
// waits on: a non-blocking duplicate of its descriptor.
func pollable(m *ebpf.Map) (*os.File, error) {
	fd, err := unix.FcntlInt(uintptr(m.FD()), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return nil, err
	}
	f := os.NewFile(uintptr(fd), m.String())
	// Only a file in the poller takes deadlines: one it could not add
	// would end readRing at its first wait.
	if err := f.SetReadDeadline(time.Time{}); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// read calls handle with each record committed, in order, until the ring
// is empty or its next record not yet committed. The record is the ring's
// memory, valid until handle returns.
//
// The kernel wakes pollers of the ring when it commits a record at the
// consumer's position: a reader that stops at an uncommitted record is
// woken when it is committed.
func (r *ring) read(handle func([]byte)) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	cons := atomic.LoadUint64(r.consPos)
	for cons != atomic.LoadUint64(r.prodPos) {
		at := cons & r.mask
		head := r.head(at)
		if head&ringBusy != 0 {
			return nil
		}
		n := uint64(head &^ (ringBusy | ringDiscard))
		if at+ringHeader+n > uint64(len(r.data)) {
			return fmt.Errorf("ring buffer record of %d bytes at %d: past the ring's end", n, at)
		}
		if head&ringDiscard == 0 {
			handle(r.data[at+ringHeader : at+ringHeader+n])
		}
		cons += (ringHeader + n + 7) &^ 7
		atomic.StoreUint64(r.consPos, cons)
	}
	return nil
}

// ready reports whether the next record is committed: read has work.
func (r *ring) ready() bool {
	cons := atomic.LoadUint64(r.consPos)
	if cons == atomic.LoadUint64(r.prodPos) {
		return false
	}
	return r.head(cons&r.mask)&ringBusy == 0
}

// head reads the header of the record at offset at. Atomically: the
// kernel commits a record by clearing its busy bit, after writing it.
func (r *ring) head(at uint64) uint32 {
	return atomic.LoadUint32((*uint32)(unsafe.Pointer(&r.data[at])))
}

// backlog is how full the ring is, from 0 to 1.
func (r *ring) backlog() float64 {
	cons := atomic.LoadUint64(r.consPos)
	return float64(atomic.LoadUint64(r.prodPos)-cons) / float64(r.mask+1)
}

// close unmaps the ring, once no reader waits (wait closed).
func (r *ring) close() error {
	return errors.Join(unix.Munmap(r.prod), unix.Munmap(r.cons))
}
