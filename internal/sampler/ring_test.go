package sampler

import (
	"encoding/binary"
	"fmt"
	"slices"
	"testing"
	"unsafe"
)

// fakeRing lays out a ring of size bytes in ordinary memory as the kernel
// would, its data twice in a row; put writes records as a producer.
type fakeRing struct {
	*ring
	size uint64
}

func newFakeRing(size uint64) *fakeRing {
	cons, prod := make([]byte, 8), make([]byte, 8+2*size)
	return &fakeRing{ring: &ring{
		cons: cons, prod: prod,
		consPos: (*uint64)(unsafe.Pointer(&cons[0])), prodPos: (*uint64)(unsafe.Pointer(&prod[0])),
		data: prod[8:], mask: size - 1,
	}, size: size}
}

// put appends a record with head's flags.
func (f *fakeRing) put(rec []byte, flags uint32) {
	pos := *f.prodPos
	head := binary.NativeEndian.AppendUint32(nil, uint32(len(rec))|flags)
	for i, b := range append(append(head, 0, 0, 0, 0), rec...) {
		at := (pos + uint64(i)) & f.mask
		f.data[at], f.data[at+f.size] = b, b // the data's second mapping
	}
	*f.prodPos = pos + (ringHeader+uint64(len(rec))+7)&^7
}

func (f *fakeRing) readAll(t *testing.T) []string {
	t.Helper()
	var got []string
	if err := f.read(func(b []byte) { got = append(got, string(b)) }); err != nil {
		t.Fatal(err)
	}
	return got
}

func TestRingRead(t *testing.T) {
	f := newFakeRing(64)
	if f.ready() || len(f.readAll(t)) != 0 {
		t.Fatal("an empty ring read something")
	}
	f.put([]byte("first"), 0)
	f.put([]byte("dropped"), ringDiscard)
	f.put([]byte("second record"), 0)
	if !f.ready() {
		t.Error("a committed record not ready")
	}
	if got := f.readAll(t); !slices.Equal(got, []string{"first", "second record"}) {
		t.Errorf("read %q", got)
	}
	if f.ready() || *f.consPos != *f.prodPos || f.backlog() != 0 {
		t.Errorf("consumer at %d, producer at %d: not all read", *f.consPos, *f.prodPos)
	}

	// Records that wrap around the end read straight, through the
	// second mapping; one not committed yet stops the reader until it is.
	var want []string
	for i := range 5 {
		want = append(want, fmt.Sprintf("wrapping %d", i))
		f.put([]byte(want[i]), 0)
		if got := f.readAll(t); !slices.Equal(got, want[i:]) {
			t.Errorf("read %q, want %q", got, want[i:])
		}
	}
	busyAt := *f.prodPos
	f.put([]byte("busy"), ringBusy)
	f.put([]byte("after"), 0)
	if f.ready() || len(f.readAll(t)) != 0 || *f.consPos != busyAt {
		t.Error("read past a record not committed")
	}
	if f.backlog() != 32.0/64 {
		t.Errorf("backlog %v, want 0.5", f.backlog())
	}
	head := f.data[busyAt&f.mask:]
	binary.NativeEndian.PutUint32(head, binary.NativeEndian.Uint32(head)&^ringBusy)
	if got := f.readAll(t); !slices.Equal(got, []string{"busy", "after"}) {
		t.Errorf("read %q once committed", got)
	}
}

func TestRingCorrupt(t *testing.T) {
	f := newFakeRing(64)
	// A header saying 200 bytes, longer than the ring: no kernel writes
	// this.
	binary.NativeEndian.PutUint32(f.data, 200)
	*f.prodPos = 208
	if err := f.read(func([]byte) { t.Error("read a record past the ring") }); err == nil {
		t.Error("no error")
	}
}
